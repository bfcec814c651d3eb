// SPDX-License-Identifier: MIT
/*
 * Operations whose pair is on another node (PROTOCOL.md §10.3-10.5): the claim, and what the
 * ends of a transfer tell each other (CLAIM_OK, DONE, DONE_ACK, CANCEL). Peer sets and
 * transports report here through d->xfer_events; this file never knows which transport moves
 * the bytes, only whether it is one-sided (the active side reads or writes the owner's memory
 * with keys the owner grants per operation).
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include "transport.h"
#include "xp_peer.h"

/* ---- lifetime ---- */

/* Whether every segment of @op is mapped memory (no file region). */
static bool op_mapped(const struct xd_op *op)
{
	for (uint32_t i = 0; i < op->nsegs; i++)
		if (!op->segs[i].region->mem->mapped)
			return false;
	return true;
}

/*
 * A transfer that receives bytes into a file region here is counted on its peer from its
 * making, before the CLAIM or CLAIM_OK that lets the peer send its DATA, until xfer_close(),
 * after which data_target() finds it no more: the peer's connections read without read-ahead
 * meanwhile (tcp.c, ra_allowed()).
 */
static void file_rx_count(struct xd_xfer *x, const struct xd_op *op)
{
	if (x->source || op_mapped(op))
		return;
	x->file_rx = true;
	x->peer->file_receivers++;
}

static void file_rx_uncount(struct xd_xfer *x)
{
	if (!x->file_rx)
		return;
	assert(x->peer->file_receivers > 0);
	x->file_rx = false;
	x->peer->file_receivers--;
}

static struct xd_xfer *xfer_new(struct xd_peer *p, uint64_t id, bool active, struct xd_op *op)
{
	struct xd_xfer *x = calloc(1, sizeof(*x));

	if (!x || !(x->segs = calloc(op->nsegs, sizeof(*x->segs)))) {
		free(x);
		return NULL;
	}
	x->peer = p;
	x->id = id;
	x->active = active;
	x->one_sided = p->transport->one_sided;
	x->source = op->kind == XP_KIND_READABLE || op->kind == XP_KIND_WRITE ||
		    op->kind == XP_KIND_PUT;
	x->op = op;
	x->nsegs = op->nsegs;
	x->length = op->length;
	x->refs = 1;
	for (uint32_t i = 0; i < op->nsegs; i++) {
		x->segs[i] = op->segs[i];
		xd_region_ref(x->segs[i].region);
	}
	/* A file's bytes cannot be reached by the peer's READ/WRITE: they go through staging. */
	x->stage_local = x->one_sided && !op_mapped(op);
	op->xfer = x;
	TAILQ_INSERT_TAIL(&p->xfers, x, link);
	/* (unique: an active id is a new op's, a passive one is refused if in use: claim_received) */
	xd_idmap_add(&p->xfer_ids[active], &x->idnode, id);
	p->transfers++;
	file_rx_count(x, op);
	return x;
}

/* A keyed get or put has no request left on the owner's memory: the handle's key is free. */
static void direct_quiet(struct xd_xfer *x)
{
	if (!x->key_held || x->requests_out > 0 || x->op)
		return;
	x->key_held = false;
	xd_window_key_quiet(x->peer->d, x->handle);
}

/* Ends the transfer here: no more frames for it, its operation let go. */
static void xfer_close(struct xd_xfer *x)
{
	if (x->direct && x->op) /* (a COMPLETE one was told already: this is a no-op then) */
		xd_window_direct_ended(x->peer->d, x->handle, x->op->id, false);
	if (x->op) {
		x->op->bytes = x->source ? x->sent : x->received;
		x->op->xfer = NULL;
		x->op = NULL;
	}
	if (x->grant) /* the claimer's keys die with the transfer */
		x->peer->transport->grant_close(x->grant);
	x->grant = NULL;
	if (x->stage_local || x->stage_remote) /* (and so do windows onto staging buffers) */
		x->peer->transport->stage_close(x);
	xd_peer_stream_remove(x->peer, x);
	TAILQ_REMOVE(&x->peer->xfers, x, link);
	xd_idmap_del(&x->peer->xfer_ids[x->active], &x->idnode);
	x->peer->transfers--;
	file_rx_uncount(x);
	direct_quiet(x);
	xd_xfer_unref(x);
}

/*
 * Whether an end of @x's op waits for the worker that writes bytes of @x into its files now
 * (x->landing): on a local disk's or memory's file system, where it is through within a
 * frame's I/O. A file system that may never answer (FUSE, NFS: region.c's fs_local) would
 * hold the end with it; there the end is told at once (its deadline ends it, PROTOCOL.md §4),
 * and the bytes of that one frame may still land after it.
 */
static bool end_waits_landing(const struct xd_xfer *x)
{
	return x->landing && !xd_xfer_may_hang(x);
}

/*
 * Closes @x and ends its operation (if it still has one) with a cause. While a worker still
 * writes bytes of @x into the buffer, the op's end is told once it is through (landed()).
 */
static void xfer_fail(struct xd_xfer *x, enum xp_state state, int err, const char *cause)
{
	struct xd_op *op = x->op;

	if (op && end_waits_landing(x)) {
		xd_op_end(op, state, err, "%s", cause); /* (drain() holds it, or it was held) */
		x->land_op = xd_op_ending(op) ? op : NULL;
		xfer_close(x);
		return;
	}
	xfer_close(x);
	if (op && xd_op_ending(op))
		xd_op_drained(op); /* it was ending already: with its own cause */
	else if (op)
		xd_op_end(op, state, err, "%s", cause);
}

/* The owner's draining transfer is over: the claimer let go of its keys. */
static void drain_done(struct xd_xfer *x)
{
	struct xd_op *op = x->op;

	xfer_close(x);
	if (op)
		xd_op_drained(op);
}

/* ---- messages ---- */

static int send_ctrl(struct xd_xfer *x, uint8_t type, json_t *json)
{
	uint8_t flags = x->active ? XP_PEER_FROM_ACTIVE : 0;
	int rc = xd_peer_send_ctrl(x->peer, x->via, type, flags, x->id, json);

	json_decref(json);
	return rc;
}

/* A binary pairing frame about @x (PROTOCOL.md §10.8). Returns 0 or -errno. */
static int send_bin(struct xd_xfer *x, uint8_t type, const uint8_t *buf, uint32_t len)
{
	uint8_t flags = x->active ? XP_PEER_FROM_ACTIVE : 0;

	return xd_peer_send_bin(x->peer, x->via, type, flags, x->id, buf, len);
}

static json_t *error_json(int err, const char *message)
{
	return json_pack("{s:s, s:s}", "errno", xp_errno_name(err), "message", message);
}

_Static_assert(XD_MAC_LEN == XP_CLAIM_BIN_PROOF_LEN, "a binary CLAIM's proof is an HMAC");

/*
 * The claim's credential: on a keyed daemon a proof of the token bound to both daemons and this
 * transfer (PROTOCOL.md §10.3), so that the token never crosses the wire; else the token.
 * Fills @out (XD_MAC_LEN bytes of a proof, or XP_ID_BYTES of the token) and *@proof.
 * Returns 0 or -EIO.
 */
static int claim_cred(struct xd_xfer *x, uint8_t out[XD_MAC_LEN], bool *proof)
{
	struct xd_daemon *d = x->peer->d;

	*proof = d->keys.n > 0;
	if (!*proof) {
		memcpy(out, x->op->token, XP_ID_BYTES);
		return 0;
	}
	return xd_claim_proof(d, x->owner_node, x->owner_epoch, d->node, d->epoch, x->owner_op,
			      x->id, x->op->token, out) < 0 ?
		       -EIO :
		       0;
}

/* claim_cred() as {"proof": HEX} or {"token": HEX} merged into @claim. Returns 0 or -errno. */
static int claim_credential(struct xd_xfer *x, json_t *claim)
{
	uint8_t cred[XD_MAC_LEN];
	char hex[2 * XD_MAC_LEN + 1];
	bool proof;

	if (claim_cred(x, cred, &proof) < 0)
		return -EIO;
	xp_hex_encode(cred, proof ? XD_MAC_LEN : XP_ID_BYTES, hex);
	return json_object_set_new(claim, proof ? "proof" : "token", json_string(hex)) ? -ENOMEM :
											 0;
}

/* Whether @x's claim offers the short end: two-sided, we take it if the owner agrees (§10.3). */
static bool offers_quick_end(const struct xd_xfer *x)
{
	return x->peer->transport->quick_end && !x->one_sided;
}

/*
 * Whether a read's first DATA stands for its CLAIM_OK (PROTOCOL.md §10.8, "read_ok_in_data"):
 * binary frames, two-sided, the data flowing from the owner, the short end, and the peer's
 * HELLO said so. The owner then sends no CLAIM_OK, and its reader is spared a wakeup for it.
 * @x is the owner's transfer (the source, the short end taken) or the reader's, about to send
 * its binary CLAIM (offering the short end, which an owner that says read_ok_in_data always
 * takes); the reader keeps the answer in x->ok_in_data (a WCLAIM asks none of this).
 */
static bool read_ok_in_data(const struct xd_xfer *x)
{
	if (!x->peer->read_ok_in_data || !xd_peer_binary_pairing(x->peer) || x->one_sided)
		return false;
	return x->active ? !x->source && offers_quick_end(x) : x->source && x->quick;
}

/* The binary CLAIM (PROTOCOL.md §10.8) of the JSON one below. Returns 0 or -errno. */
static int send_claim_bin(struct xd_xfer *x)
{
	struct xd_op *op = x->op;
	struct xp_claim_bin c = {
		.op = x->owner_op,
		.epoch = x->owner_epoch,
		.length = op->length,
		.kind = (uint8_t)op->kind,
		.meta_kind = (uint8_t)x->meta_kind,
		.stage_max = x->stage_local ? (uint32_t)x->peer->d->cfg.rdma_staging_size : 0,
	};
	uint8_t buf[XP_CLAIM_BIN_MAX];
	bool proof;

	if (claim_cred(x, c.cred, &proof) < 0)
		return -EIO;
	c.flags = (proof ? XP_CLAIM_BIN_PROOF : 0) | (offers_quick_end(x) ? XP_CLAIM_BIN_QUICK : 0);
	memcpy(c.node, x->owner_node, XP_ID_BYTES);
	return send_bin(x, XP_PEER_CLAIM, buf, xp_claim_bin_pack(&c, buf));
}

/*
 * An op.get/op.put's claim (PROTOCOL.md §10.6): no credential, the opener proved the window's
 * token when it opened it, and the set's handshake proves who this is.
 */
static json_t *wclaim_json(struct xd_xfer *x)
{
	const struct xd_wreq *w = x->op->wreq;
	char node[2 * XP_ID_BYTES + 1];

	xp_hex_encode(x->owner_node, XP_ID_BYTES, node);
	json_t *j = json_pack("{s:I, s:I, s:s, s:I, s:I, s:s, s:I}", "window",
			      (json_int_t)w->window, "handle", (json_int_t)w->handle, "kind",
			      xp_kind_name(x->op->kind), "offset", (json_int_t)w->offset, "length",
			      (json_int_t)x->op->length, "node", node, "epoch",
			      (json_int_t)x->owner_epoch);
	if (j && w->has_tag && json_object_set_new(j, "tag", json_string(w->tag))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static void send_claim(struct xd_xfer *x)
{
	struct xd_op *op = x->op;
	char node[2 * XP_ID_BYTES + 1];

	if (op->wreq) {
		json_t *wc = wclaim_json(x);
		int rc = wc ? send_ctrl(x, XP_PEER_WCLAIM, wc) : -ENOMEM;
		if (rc)
			xfer_fail(x, XP_ST_ERRORED, -rc, "could not send the request to the owner");
		else
			x->claim_sent = true;
		return;
	}

	if (xd_peer_binary_pairing(x->peer)) {
		x->ok_in_data = read_ok_in_data(x);
		int rc = send_claim_bin(x);
		if (rc)
			xfer_fail(x, XP_ST_ERRORED, -rc, "could not send the claim to the owner");
		else
			x->claim_sent = true;
		return;
	}
	xp_hex_encode(x->owner_node, XP_ID_BYTES, node);
	json_t *claim = json_pack("{s:I, s:s, s:s, s:I, s:I, s:s}", "op", (json_int_t)x->owner_op,
				  "kind", xp_kind_name(op->kind), "node", node, "epoch",
				  (json_int_t)x->owner_epoch, "length", (json_int_t)op->length,
				  "metadata_kind", xp_kind_name(x->meta_kind));
	int rc = claim ? claim_credential(x, claim) : -ENOMEM;
	if (rc == 0 && offers_quick_end(x) && json_object_set_new(claim, "quick_end", json_true()))
		rc = -ENOMEM;
	/* An owner that stages must not grant chunks larger than our staging buffers (§10.5.1). */
	if (rc == 0 && x->stage_local &&
	    json_object_set_new(claim, "stage_max",
				json_integer((json_int_t)x->peer->d->cfg.rdma_staging_size)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = send_ctrl(x, XP_PEER_CLAIM, claim);
	else
		json_decref(claim);
	if (rc)
		xfer_fail(x, XP_ST_ERRORED, -rc, "could not send the claim to the owner");
	else
		x->claim_sent = true;
}

static bool frames_out(const struct xd_xfer *x);

#define XD_FILE_WINDOW_MSG                                                                       \
	"a get or put with a file region moves over two-sided transports only (tcp); over RDMA " \
	"only pairings stage files"

int xd_remote_claim(struct xd_call *call, struct xd_op *op, const struct xp_meta *m)
{
	struct xd_peer *p = xd_peer_for_meta(call, m);

	if (!p)
		return -call->cause_errno;
	/* The claim travels with the transfer until the owner answers; the token in the op. */
	memcpy(op->token, m->token, XP_ID_BYTES);
	op->id = ++call->conn->d->next_op;
	struct xd_xfer *x = xfer_new(p, op->id, true, op);
	if (!x)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	memcpy(x->owner_node, m->node, XP_ID_BYTES);
	x->owner_op = m->op;
	x->owner_epoch = m->epoch;
	x->meta_kind = m->kind;
	xd_op_start_claim(call, op);
	snprintf(op->transport, sizeof(op->transport), "%s", p->transport->name);
	snprintf(op->peer, sizeof(op->peer), "%s", p->node_hex);
	if (p->state == XD_PEER_UP)
		send_claim(x);
	return 0;
}

/*
 * A get or put with its handle's own key (PROTOCOL.md §10.6): the owner's range is known, so
 * the requests go at once on the key's connection, without a claim; window.c sends a tagged
 * one's WNOTIFY once it COMPLETED. Returns 0 or -errno.
 */
static int start_direct(struct xd_xfer *x, const struct xd_wtarget *t)
{
	struct xd_op *op = x->op;

	if (!(x->rsegs = calloc(1, sizeof(*x->rsegs))))
		return -ENOMEM;
	x->rsegs[0] = (struct xd_rseg){ t->raddr, op->length, t->rkey };
	x->nrsegs = 1;
	int rc = xd_window_direct_start(x->peer->d, op);
	if (rc)
		return rc;
	x->direct = x->key_held = x->claim_sent = true;
	x->handle = op->wreq->handle;
	x->via = t->via;
	xd_peer_stream_add(x->peer, x);
	return 0;
}

/* A keyed get or put moved every byte: its requests are all retired, so they are in place. */
static void direct_finish(struct xd_xfer *x)
{
	struct xd_op *op = x->op;

	if (!op || xd_op_ending(op) || xd_xfer_bytes(x) < x->length || x->requests_out > 0)
		return;
	struct xd_daemon *d = x->peer->d;
	uint64_t handle = x->handle;

	xd_window_direct_ended(d, handle, op->id, true);
	xfer_close(x);
	if (!xd_window_direct_hold(d, handle, op))
		xd_op_complete(op);
}

int xd_remote_window_op(struct xd_call *call, struct xd_op *op, const struct xd_wtarget *t)
{
	struct xd_peer *p = t->peer;

	if (p->transport->one_sided && !op_mapped(op))
		return xd_fail(call, XP_E_FAILED, EOPNOTSUPP, XD_FILE_WINDOW_MSG);
	op->id = ++call->conn->d->next_op;
	struct xd_xfer *x = xfer_new(p, op->id, true, op);
	if (!x)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	memcpy(x->owner_node, t->node, XP_ID_BYTES);
	x->owner_op = op->wreq->window;
	x->owner_epoch = t->epoch;
	/* Listed at once: the reply does not wait for the owner, whose refusal ends the op. */
	xd_op_start(call, op, XP_ST_INITIALIZED);
	xd_strcopy(op->transport, sizeof(op->transport), p->transport->name);
	xd_strcopy(op->peer, sizeof(op->peer), p->node_hex);
	if (t->keyed && p->transport->one_sided && p->state == XD_PEER_UP) {
		int rc = start_direct(x, t);
		if (rc) /* the op is listed: it ends with the cause */
			xfer_fail(x, XP_ST_ERRORED, -rc, "could not start the transfer");
		return 0;
	}
	if (xd_peer_window_frames(p) && op_mapped(op) &&
	    xd_window_frames_ok(p->d, op->wreq->handle)) {
		/* One-sided frames (PROTOCOL.md §10.7): no claim, no DONE; the handle is open. */
		x->wfast = true;
		x->claim_sent = true;
		int rc = xd_window_fast_start(x);
		if (rc && frames_out(x)) /* (its frames queued before go first: drain()) */
			xd_op_end(op, XP_ST_ERRORED, -rc,
				  "could not queue the request to the owner");
		else if (rc)
			xfer_fail(x, XP_ST_ERRORED, -rc,
				  "could not queue the request to the owner");
		return 0;
	}
	if (p->state == XD_PEER_UP)
		send_claim(x);
	return 0;
}

/* The owner took every frame of put @x (WACK): it is COMPLETE unless it ended already. */
static void fast_put_acked(struct xd_xfer *x)
{
	struct xd_op *op = x->op;

	if (!op)
		return; /* (closed when its op ended: nothing is left to do) */
	xfer_close(x);
	xd_op_complete(op);
}

static void peer_up(struct xd_peer *p)
{
	struct xd_xfer *x, *tmp;

	xd_windows_peer_up(p); /* (opens first: a get or put may follow its open at once) */
	TAILQ_FOREACH_SAFE(x, &p->xfers, link, tmp)
		if (x->active && !x->claim_sent && x->op)
			send_claim(x);
}

/*
 * A committed transfer whose op was asked to end heard nothing for keepalive_timeout_ms: the
 * end asked applies, and the peer is told (an honest one answers within a round trip).
 */
static void commit_timeout(struct xd_xfer *x)
{
	struct xd_op *op = x->op;

	send_ctrl(x, XP_PEER_CANCEL,
		  error_json(op ? op->cause_errno : ECANCELED, op ? op->cause : "ended"));
	xfer_close(x);
	if (op)
		xd_op_drained(op);
}

/*
 * How long drained transfer @x's wait is the peer's doing, in ms: since its own last frame
 * went, or, where the transport can tell, since a connection of the set last wrote while it
 * had bytes waiting. @x's frames may wait behind others' (a backlog of puts queued ahead of
 * it on the same connections, gigabytes at times): while the connections move, the peer
 * reads, and the wait is only as long as that backlog.
 */
static uint64_t drain_stalled_ms(const struct xd_xfer *x, uint64_t now)
{
	uint64_t (*stalled)(const struct xd_peer *) = x->peer->transport->tx_stalled_since;
	uint64_t since = stalled ? stalled(x->peer) : x->drain_since_us;

	if (since < x->drain_since_us)
		since = x->drain_since_us; /* (the connection waited before this drain began) */
	return now > since ? (now - since) / 1000 : 0;
}

/*
 * An honest active side releases an ended transfer's keys as soon as its last request completes,
 * which the queue pair's own retry limits bound to seconds. One that keeps them past
 * keepalive_timeout_ms is stuck or hostile: failing the connection set destroys the queue pair,
 * and with it every window the peer holds.
 */
static void check_drains(struct xd_peer *p)
{
	xd_windows_peer_tick(p);
	if (p->state == XD_PEER_DEAD)
		return;
	uint64_t limit_ms = p->d->cfg.keepalive_timeout_ms, now = xd_now_us();
	struct xd_xfer *x, *tmp;

	TAILQ_FOREACH_SAFE(x, &p->xfers, link, tmp) {
		uint64_t stalled_ms;
		if (x->tx_drain && (now - x->drain_since_us) / 1000 > limit_ms &&
		    (stalled_ms = drain_stalled_ms(x, now)) > limit_ms) {
			xd_peer_fail(
				p, ETIMEDOUT,
				"transfer %llu ended with frames of its bytes still to send, and "
				"the peer took none for %llu ms (keepalive_timeout_ms): connection "
				"closed, so that none goes after its end",
				(unsigned long long)x->id, (unsigned long long)stalled_ms);
			return;
		}
		if (x->commit_wait && (now - x->commit_since_us) / 1000 > limit_ms) {
			commit_timeout(x);
			continue;
		}
		uint64_t kept_ms = (now - x->drain_since_us) / 1000;
		if (!x->draining || kept_ms <= limit_ms)
			continue;
		xd_peer_fail(p, ETIMEDOUT,
			     "the peer kept the remote-access keys of ended transfer %llu "
			     "for %llu ms (keepalive_timeout_ms): connection closed to revoke them",
			     (unsigned long long)x->id, (unsigned long long)kept_ms);
		return;
	}
}

static void peer_lost(struct xd_peer *p, int err, const char *cause)
{
	struct xd_xfer *x, *tmp;
	char msg[XD_CAUSE_MAX];

	snprintf(msg, sizeof(msg), "peer %s: %s", p->node_hex, cause);
	TAILQ_FOREACH_SAFE(x, &p->xfers, link, tmp)
		xfer_fail(x, XP_ST_ERRORED, err, msg);
	xd_windows_peer_lost(p, err, msg);
}

/* Active one-sided side: tells the owner it may let go of its keys, once nothing uses them. */
static void one_sided_release(struct xd_xfer *x)
{
	if (!x->release_pending || x->release_sent || x->requests_out > 0)
		return;
	x->release_sent = true;
	send_ctrl(x, XP_PEER_CANCEL, error_json(x->release_cause_errno, x->release_msg));
}

static void defer_release(struct xd_xfer *x, int err, const char *msg)
{
	x->release_pending = true;
	x->release_cause_errno = err;
	snprintf(x->release_msg, sizeof(x->release_msg), "%s", msg);
	one_sided_release(x);
}

static void request_done(struct xd_xfer *x)
{
	if (x->direct) {
		/*
		 * IN_PROGRESS is told once bytes moved and more are to come (never from inside the
		 * request that started it: an op.batch's event takes its ops only after that).
		 */
		if (x->op && x->op->state == XP_ST_INITIALIZED && xd_xfer_bytes(x) < x->length)
			xd_op_set_in_progress(x->op, x->peer->transport->name, x->peer->node_hex);
		direct_finish(x);
		direct_quiet(x);
		return;
	}
	one_sided_release(x);
}

static void op_ended(struct xd_op *op)
{
	struct xd_xfer *x = op->xfer;

	if (op->state == XP_ST_COMPLETE || x->wfast) {
		/* (a window frame's owner has no op to tell: its frames land or are dropped) */
		xfer_close(x);
		return;
	}
	if (x->one_sided && x->active) {
		if (x->claim_sent && !x->direct) /* (a keyed op's owner never heard of it) */
			defer_release(x, op->cause_errno, op->cause);
		xfer_close(x);
		return;
	}
	/* The peer learns of the end unless it never heard of the transfer. */
	if (!x->active || x->claim_sent)
		send_ctrl(x, XP_PEER_CANCEL, error_json(op->cause_errno, op->cause));
	xfer_close(x);
}

/*
 * Whether frames carrying @x's bytes from the client's buffer are under way or queued on the
 * set's connections: two-sided, the bytes cut into DATA frames (or queued in an opener's WPUTs,
 * window.c's put_frame()) not yet all written.
 */
static bool frames_out(const struct xd_xfer *x)
{
	return x->source && !x->one_sided && x->sent < x->next_off;
}

/* @x's last frame is out (or its bytes are zeros from here on): its op's end applies. */
static void tx_drained(struct xd_xfer *x)
{
	x->tx_drain = false;
	if (x->op)
		xd_op_drained(x->op); /* (op_ended() closes @x: the peer is told as for any end) */
}

/* See struct xd_remote_ops. */
static bool drain(struct xd_op *op)
{
	struct xd_xfer *x = op->xfer;

	if (end_waits_landing(x)) {
		/*
		 * A worker still writes bytes into the buffer (tcp.c's file lane): told the end now,
		 * its client could reuse the buffer (or the file) under them. The end waits for that
		 * worker (landed()); what comes for the transfer meanwhile is dropped.
		 */
		x->land_op = op;
		return true;
	}
	if (frames_out(x) && !x->io_err) {
		/*
		 * The frames under way or queued read the buffer as they go: ended now, its client
		 * could reuse it and the peer would get what it writes there next (a peer that stops
		 * reading could wait for that). The end waits for the last one; no new one starts.
		 */
		xd_peer_stream_remove(x->peer, x);
		x->tx_drain = true;
		x->drain_since_us = xd_now_us();
		return true;
	}
	if (x->committed) {
		/*
		 * Every byte is out and the other side completes at its last byte: ending here now
		 * would leave the two sides disagreeing. The end waits for the last message (the op
		 * then completes) or for the set's loss, at most keepalive_timeout_ms.
		 */
		x->commit_wait = true;
		x->commit_since_us = xd_now_us();
		return true;
	}
	if (!x->one_sided || x->active || x->draining)
		return false;
	send_ctrl(x, XP_PEER_CANCEL, error_json(op->cause_errno, op->cause));
	x->draining = true;
	x->drain_since_us = xd_now_us();
	return true;
}

/* ---- owner side: CLAIM and DONE ---- */

/* A claimer's stage_max (§10.5.1): 0 (none), or a staging size this daemon could have. */
static bool stage_max_valid(uint64_t smax)
{
	return !smax || (smax >= XD_STAGE_SIZE_MIN && smax <= XD_STAGE_SIZE_MAX &&
			 smax % XD_STAGE_ALIGN == 0);
}

static int parse_claim(json_t *json, struct xd_claim *cl, uint32_t *stage_max, bool *quick)
{
	const char *token = NULL, *proof = NULL, *kind, *node, *meta_kind;
	json_int_t op, epoch, length, smax = 0;
	int quick_end = 0;

	if (!json ||
	    json_unpack(json, "{s:I, s?s, s?s, s:s, s:s, s:I, s:I, s:s, s?I, s?b}", "op", &op,
			"token", &token, "proof", &proof, "kind", &kind, "node", &node, "epoch",
			&epoch, "length", &length, "metadata_kind", &meta_kind, "stage_max", &smax,
			"quick_end", &quick_end) ||
	    smax < 0 || smax > UINT32_MAX || !stage_max_valid((uint64_t)smax) || !token == !proof ||
	    (token && xp_hex_decode(token, cl->token, XP_ID_BYTES)) ||
	    (proof && xp_hex_decode(proof, cl->proof, XD_MAC_LEN)) ||
	    xp_hex_decode(node, cl->node, XP_ID_BYTES) || op < 0 || epoch < 0 || length <= 0)
		return -EPROTO;
	int k = xp_kind_from_name(kind), mk = xp_kind_from_name(meta_kind);
	if ((k != XP_KIND_READ && k != XP_KIND_WRITE) || mk < 0)
		return -EPROTO;
	cl->has_proof = proof != NULL;
	cl->want = k == XP_KIND_READ ? XP_KIND_READABLE : XP_KIND_WRITABLE;
	cl->method = k == XP_KIND_READ ? "op.read" : "op.write";
	cl->meta_kind = mk;
	cl->op = (uint64_t)op;
	cl->epoch = (uint64_t)epoch;
	cl->length = (uint64_t)length;
	*stage_max = (uint32_t)smax;
	*quick = quick_end;
	return 0;
}

/*
 * Whether the claim's credential is one this daemon takes: a keyed owner checks proofs and
 * never takes a token sent in clear, and an owner without the key cannot check a proof.
 * Returns 0, or -EACCES with the cause in @msg.
 */
static int check_credential(struct xd_daemon *d, const struct xd_claim *cl, char *msg, size_t len)
{
	if (d->keys.n && !cl->has_proof) {
		snprintf(msg, len,
			 "the owner takes claims with a proof of the token only (it has "
			 "a cluster key); this claim carries the token in clear");
		return -EACCES;
	}
	if (!d->keys.n && cl->has_proof) {
		snprintf(msg, len, "the owner has no cluster key to check the claim's proof");
		return -EACCES;
	}
	return 0;
}

/* {"segs": [{addr, len, rkey}]} of @x's ranges, with @rkeys[i] for range i. */
static json_t *segs_json(const struct xd_xfer *x, const uint32_t *rkeys)
{
	json_t *segs = json_array();

	for (uint32_t i = 0; segs && i < x->nsegs; i++) {
		const struct xd_seg *s = &x->segs[i];
		if (json_array_append_new(
			    segs,
			    json_pack("{s:I, s:I, s:I}", "addr",
				      (json_int_t)(uintptr_t)(s->region->base + s->offset), "len",
				      (json_int_t)s->length, "rkey", (json_int_t)rkeys[i]))) {
			json_decref(segs);
			return NULL;
		}
	}
	return segs ? json_pack("{s:o}", "segs", segs) : NULL;
}

/*
 * CLAIM_OK for a one-sided claimer (PROTOCOL.md §10.5): the address, length and rkey of each
 * of this operation's ranges. The transport's grant makes the rkeys reach those ranges alone
 * (RDMA memory windows), readable for a read, writable for a write, revoked when the transfer
 * ends. NULL when they could not be
 * opened: @err and @msg then say why (the caller presets them to out of memory).
 */
static json_t *claim_ok_segs(struct xd_xfer *x, int *err, char *msg, size_t len)
{
	uint32_t *rkeys = calloc(x->nsegs, sizeof(*rkeys));
	json_t *ok = NULL;
	int rc;

	if (!rkeys)
		return NULL;
	rc = x->peer->transport->grant_open(x->peer, x->via, x->segs, x->nsegs,
					    x->source ? XP_ACCESS_READ : XP_ACCESS_WRITE, rkeys,
					    &x->grant, msg, len);
	if (rc < 0)
		*err = rc;
	else
		ok = segs_json(x, rkeys);
	free(rkeys);
	return ok;
}

/*
 * The claim was valid but could not be answered (no memory, no window): the claimer's
 * operation fails with the cause, and ours stays as it was, claimable again (§10.3).
 */
static void refuse_claim(struct xd_xfer *x, int err, const char *msg)
{
	send_ctrl(x, XP_PEER_CLAIM_ERR, error_json(err, msg));
	xfer_close(x);
}

/* The CLAIM_OK of @x is queued: its passive op is in progress, its bytes may go. */
static void claim_accepted(struct xd_xfer *x, struct xd_op *passive)
{
	struct xd_peer *p = x->peer;

	xd_op_set_in_progress(passive, p->transport->name, p->node_hex);
	if ((x->source && !x->one_sided) || x->stage_local)
		xd_peer_stream_add(p, x);
}

/*
 * A claim (CLAIM or WCLAIM) passed every check: the transfer starts, and the claimer hears
 * CLAIM_OK (with keys, one-sided). Returns 0 or -ENOMEM.
 */
static int accept_claim(struct xd_peer *p, uint32_t via, uint64_t id, struct xd_op *passive,
			uint32_t stage_max, bool quick, bool bin_claim)
{
	char msg[XD_CAUSE_MAX];
	int err;
	struct xd_xfer *x = xfer_new(p, id, false, passive);

	if (!x) {
		/* (an internal op would otherwise wait for its deadline) */
		if (passive->internal)
			xd_op_end(passive, XP_ST_ERRORED, ENOMEM, "out of memory");
		return -ENOMEM;
	}
	/* (a claim comes on the set's control connection; its data, keys and answer go on one
	 * that carries data) */
	x->via = p->transport->data_via ? p->transport->data_via(p, via) : via;
	x->stage_max = stage_max;
	x->quick = quick && p->transport->quick_end && !x->one_sided;
	/* A binary CLAIM_OK (§10.8) has room for the short end alone: two-sided, memory or file. */
	if (!x->stage_local && !x->one_sided && xd_peer_binary_pairing(p)) {
		uint8_t ok[XP_CLAIM_OK_BIN_LEN];
		xp_peer_bin_put(ok, x->quick ? XP_CLAIM_OK_QUICK : 0, sizeof(ok));
		/* (a JSON CLAIM, sent before the HELLO came, waits for its CLAIM_OK) */
		if (!bin_claim || !read_ok_in_data(x)) /* (else the first DATA says it) */
			send_bin(x, XP_PEER_CLAIM_OK, ok, sizeof(ok));
		claim_accepted(x, passive);
		return 0;
	}
	err = -ENOMEM;
	snprintf(msg, sizeof(msg), "out of memory answering a claim");
	/* A file of ours: no keys now; a window per staged chunk follows (STAGE, §10.5.1). */
	json_t *ok = x->stage_local ? json_pack("{s:b}", "staged", 1) :
		     x->one_sided   ? claim_ok_segs(x, &err, msg, sizeof(msg)) :
		     x->quick	    ? json_pack("{s:b}", "quick_end", 1) :
				      json_object();
	if (!ok) {
		refuse_claim(x, -err, msg);
		if (passive->internal) /* (a pairing's stays claimable; a window's op is done) */
			xd_op_end(passive, XP_ST_ERRORED, -err, "%s", msg);
		return 0;
	}
	send_ctrl(x, XP_PEER_CLAIM_OK, ok);
	claim_accepted(x, passive);
	return 0;
}

/*
 * A CLAIM, decoded into @cl (JSON or binary): the owner looks it up and answers. Returns 0, or
 * -EPROTO, or -ENOMEM.
 */
static int claim_received(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
			  struct xd_claim *cl, uint32_t stage_max, bool quick)
{
	char msg[XD_CAUSE_MAX];
	int err;

	if (!(h->flags & XP_PEER_FROM_ACTIVE))
		return -EPROTO;
	/*
	 * A transfer is named by the claimer's op id, which it never reuses: a second CLAIM for a
	 * live transfer breaks the protocol. Answered with a CLAIM_ERR under that id, it would end
	 * the claimer's transfer without a word to us, leaving our op to its deadline.
	 */
	if (xd_xfer_find(p, h->xfer, false))
		return -EPROTO;
	/* Who claims: the set's node and epoch, which its handshake proved (keyed daemons). */
	memcpy(cl->claimer, p->node, XP_ID_BYTES);
	cl->claimer_epoch = p->epoch;
	cl->xfer = h->xfer;
	struct xd_op *passive = NULL;
	err = check_credential(p->d, cl, msg, sizeof(msg));
	if (err == 0)
		passive = xd_claim_lookup(p->d, cl, &err, msg, sizeof(msg));
	if (!passive) {
		json_t *e = error_json(-err, msg);
		int rc = xd_peer_send_ctrl(p, via, XP_PEER_CLAIM_ERR, 0, h->xfer, e);
		json_decref(e);
		return rc == -ENOMEM ? rc : 0;
	}
	return accept_claim(p, via, h->xfer, passive, stage_max, quick, h->flags & XP_PEER_BINARY);
}

static int handle_claim(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json)
{
	struct xd_claim cl;
	uint32_t stage_max;
	bool quick;

	if (parse_claim(json, &cl, &stage_max, &quick) < 0)
		return -EPROTO;
	return claim_received(p, via, h, &cl, stage_max, quick);
}

/* A binary CLAIM (§10.8): what parse_claim() takes from the JSON one, the same rules. */
static int handle_claim_bin(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
			    const uint8_t *payload, uint32_t len)
{
	struct xp_claim_bin c;
	struct xd_claim cl = { 0 };

	if (xp_claim_bin_unpack(payload, len, &c) < 0 || !stage_max_valid(c.stage_max))
		return -EPROTO;
	cl.has_proof = c.flags & XP_CLAIM_BIN_PROOF;
	if (cl.has_proof)
		memcpy(cl.proof, c.cred, XD_MAC_LEN);
	else
		memcpy(cl.token, c.cred, XP_ID_BYTES);
	cl.want = c.kind == XP_KIND_READ ? XP_KIND_READABLE : XP_KIND_WRITABLE;
	cl.method = c.kind == XP_KIND_READ ? "op.read" : "op.write";
	cl.meta_kind = c.meta_kind;
	memcpy(cl.node, c.node, XP_ID_BYTES);
	cl.op = c.op;
	cl.epoch = c.epoch;
	cl.length = c.length;
	return claim_received(p, via, h, &cl, c.stage_max, c.flags & XP_CLAIM_BIN_QUICK);
}

/* The owner's op.get/op.put side: a window's range, the refusals of window.c. */
static int parse_wclaim(json_t *json, struct xd_wclaim *w, uint8_t node[XP_ID_BYTES],
			uint64_t *epoch)
{
	json_int_t window, handle, offset, length, ep;
	const char *kind, *hex;

	w->tag = NULL;
	if (!json ||
	    json_unpack(json, "{s:I, s:I, s:s, s:I, s:I, s:s, s:I, s?s}", "window", &window,
			"handle", &handle, "kind", &kind, "offset", &offset, "length", &length,
			"node", &hex, "epoch", &ep, "tag", &w->tag) ||
	    window < 0 || handle < 0 || offset < 0 || length <= 0 || ep < 0 ||
	    xp_hex_decode(hex, node, XP_ID_BYTES) || (w->tag && strlen(w->tag) > XP_MAX_TAG))
		return -EPROTO;
	int k = xp_kind_from_name(kind);
	if (k != XP_KIND_GET && k != XP_KIND_PUT)
		return -EPROTO;
	*w = (struct xd_wclaim){
		k, (uint64_t)window, (uint64_t)handle, (uint64_t)offset, (uint64_t)length, w->tag
	};
	*epoch = (uint64_t)ep;
	return 0;
}

static int handle_wclaim(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json)
{
	struct xd_wclaim w;
	uint8_t node[XP_ID_BYTES];
	uint64_t epoch;
	char msg[XD_CAUSE_MAX];
	int err = 0;

	if (!(h->flags & XP_PEER_FROM_ACTIVE) || parse_wclaim(json, &w, node, &epoch) < 0)
		return -EPROTO;
	if (xd_xfer_find(p, h->xfer, false)) /* (as for CLAIM: a transfer's name is used once) */
		return -EPROTO;
	struct xd_op *passive = NULL;
	if (memcmp(node, p->d->node, XP_ID_BYTES) != 0 || epoch != p->d->epoch) {
		err = -ESTALE;
		snprintf(
			msg, sizeof(msg),
			"the window was opened on an earlier run of the owner daemon: it restarted");
	} else {
		passive = xd_window_claim(p->d, p, &w, &err, msg, sizeof(msg));
	}
	if (!passive) {
		json_t *e = error_json(-err, msg);
		int rc = xd_peer_send_ctrl(p, via, XP_PEER_CLAIM_ERR, 0, h->xfer, e);
		json_decref(e);
		return rc == -ENOMEM ? rc : 0;
	}
	return accept_claim(p, via, h->xfer, passive, 0, false, false);
}

static bool wants_sync(const struct xd_xfer *x);

static void send_done_ack(struct xd_xfer *x)
{
	if (xd_peer_binary_pairing(x->peer) && !x->one_sided)
		send_bin(x, XP_PEER_DONE_ACK, NULL, 0);
	else
		send_ctrl(x, XP_PEER_DONE_ACK, json_object());
}

/* The owner's passive op is done: every byte moved, and the active side said DONE. */
static void complete_passive(struct xd_xfer *x)
{
	struct xd_op *op = x->op;

	/* (the short end of a read: the reader completed when the last byte arrived) */
	if (!(x->quick && x->source))
		send_done_ack(x);
	xfer_close(x);
	if (op)
		xd_op_complete(op);
}

static void maybe_complete_passive(struct xd_xfer *x)
{
	/*
	 * One-sided, DONE follows the data on the same queue pair: it is all in place. The short
	 * end of a write has no DONE: the last byte is the writer's last word. A reader's DONE
	 * while our frames are still out waits for the last one (data_sent() comes back).
	 */
	if ((x->done_rx || (x->quick && !x->source)) &&
	    (x->source || (x->one_sided && !x->stage_local) || x->received == x->length) &&
	    (x->source || x->synced || !wants_sync(x)) && !frames_out(x) && !x->landing)
		complete_passive(x);
}

/* ---- active side: CLAIM_OK, CLAIM_ERR, DONE_ACK ---- */

/* The owner's ranges, one-sided. Returns 0 or -EPROTO when they do not cover the transfer. */
static int parse_rsegs(struct xd_xfer *x, json_t *json)
{
	json_t *segs = json ? json_object_get(json, "segs") : NULL, *v;
	size_t n = json_array_size(segs), i;
	uint64_t total = 0;

	if (!json_is_array(segs) || n == 0 || n > XP_MAX_DESCS ||
	    !(x->rsegs = calloc(n, sizeof(*x->rsegs))))
		return -EPROTO;
	json_array_foreach(segs, i, v) {
		json_int_t addr, len, rkey;
		if (json_unpack(v, "{s:I, s:I, s:I}", "addr", &addr, "len", &len, "rkey", &rkey) ||
		    len <= 0 || rkey < 0 || rkey > UINT32_MAX)
			return -EPROTO;
		x->rsegs[i] = (struct xd_rseg){ (uint64_t)addr, (uint64_t)len, (uint32_t)rkey };
		total += (uint64_t)len;
	}
	x->nrsegs = (uint32_t)n;
	return total == x->length ? 0 : -EPROTO;
}

static void data_received(struct xd_xfer *x);

/*
 * A transfer has one CLAIM_OK (PROTOCOL.md §10.3): a second, from a rogue or broken owner, fails
 * the set. Taken, it replaced a one-sided transfer's ranges under the requests in flight, and
 * the first ones' memory was lost. Returns -EPROTO.
 */
static int claim_ok_again(struct xd_xfer *x)
{
	xd_link_fail(x->peer, EPROTO, "transfer %llu: a second CLAIM_OK (§10.3)",
		     (unsigned long long)x->id);
	return -EPROTO;
}

/* The owner's CLAIM_OK (JSON or binary): the transfer starts on this side. Returns 0. */
static int claim_ok_received(struct xd_xfer *x, uint32_t via, bool staged, bool quick)
{
	struct xd_op *op = x->op;

	x->via = via;
	x->stage_remote = staged;
	x->quick = offers_quick_end(x) && quick;
	x->ok_rx = true;
	/* (a window's get/put, or an op.read/op.write with nowait, had its reply) */
	if (op->owner && op->life == XD_OP_CLAIMING)
		xd_client_reply(op->owner, op->reply_id,
				json_pack("{s:I}", "op", (json_int_t)op->id));
	xd_op_set_in_progress(op, x->peer->transport->name, x->peer->node_hex);
	if (x->source || x->one_sided) /* one-sided, the active side moves both directions */
		xd_peer_stream_add(x->peer, x);
	else if (x->received == x->length)
		data_received(x); /* the DATA came first: it waited for the end agreed here */
	return 0;
}

static int handle_claim_ok(struct xd_xfer *x, uint32_t via, json_t *json)
{
	if (!x->op)
		return 0;
	if (x->ok_in_data)
		return -EPROTO; /* (its DATA answers: the owner said so in its HELLO) */
	if (x->ok_rx)
		return claim_ok_again(x);
	/* An owner whose buffer is a file grants it one staged chunk at a time instead. */
	bool staged = x->one_sided && json && json_is_true(json_object_get(json, "staged"));
	if (x->one_sided && !staged && parse_rsegs(x, json) < 0)
		return -EPROTO;
	return claim_ok_received(x, via, staged,
				 json && json_is_true(json_object_get(json, "quick_end")));
}

static void send_done(struct xd_xfer *x)
{
	uint8_t bytes[XP_DONE_BIN_LEN];

	/* (one-sided, DONE follows RDMA WRITEs on their queue pair: never binary, never TCP) */
	if (!xd_peer_binary_pairing(x->peer) || x->one_sided) {
		send_ctrl(x, XP_PEER_DONE, json_pack("{s:I}", "bytes", (json_int_t)x->length));
		return;
	}
	xp_peer_bin_put(bytes, x->length, sizeof(bytes));
	send_bin(x, XP_PEER_DONE, bytes, sizeof(bytes));
}

/* The owner's DONE_ACK, its passive op COMPLETE: so is ours, once our frames are out. */
static void done_ack_applies(struct xd_xfer *x)
{
	struct xd_op *op = x->op;

	xfer_close(x);
	if (op)
		xd_op_complete(op);
}

static void data_sent(struct xd_xfer *x)
{
	if (x->tx_drain) {
		x->drain_since_us = xd_now_us(); /* (the peer takes them: its time runs anew) */
		if (!frames_out(x))
			tx_drained(x);
		return;
	}
	if (!x->op || x->sent < x->length || x->one_sided || x->wfast)
		return;
	/* Every DATA frame is on the wire (one-sided: see all_posted()). */
	if (x->ack_rx)
		done_ack_applies(x); /* (it came while a worker still counted the last frames) */
	else if (x->done_rx)
		maybe_complete_passive(x); /* (likewise a reader's DONE at the owner) */
	else if (x->quick)
		x->committed = true; /* the other side's last message ends it (§10.3) */
	else if (x->active)
		send_done(x); /* two-sided writer */
}

static void all_posted(struct xd_xfer *x)
{
	if (x->direct)
		return; /* no DONE: the op completes as its last request does (direct_finish()) */
	/*
	 * One-sided writer: DONE may follow the last WRITE at once. RC executes the SEND only
	 * after every earlier WRITE on the queue pair was placed, and a failed WRITE flushes it.
	 */
	if (x->active && x->source && x->op)
		send_done(x);
}

/* Whether a target file of @x asked to be on disk before the transfer completes. */
static bool wants_sync(const struct xd_xfer *x)
{
	for (uint32_t i = 0; i < x->nsegs; i++)
		if (!x->segs[i].region->mem->mapped && x->segs[i].region->sync)
			return true;
	return false;
}

static void xfer_synced(void *arg, int err)
{
	struct xd_xfer *x = arg;

	x->synced = true;
	if (err && x->op && !xd_op_ending(x->op))
		xd_op_end(x->op, XP_ST_ERRORED, err, "fdatasync of the target file failed: %s",
			  strerror(err));
	else if (!err)
		data_received(x);
	xd_xfer_unref(x);
}

/*
 * Every byte is in the target files: those that asked are fdatasynced on a worker first
 * (seconds for a large file: never on the loop). Returns whether the end must wait for it.
 */
static bool sync_first(struct xd_xfer *x)
{
	if (x->synced || !wants_sync(x))
		return false;
	xd_xfer_ref(x);
	int rc = xd_sync_submit(x->peer->d->copier, x->segs, x->nsegs, xfer_synced, x);
	if (rc) {
		xd_xfer_unref(x);
		xd_op_end(x->op, XP_ST_ERRORED, -rc, "could not start the fdatasync");
	}
	return true;
}

static void data_received(struct xd_xfer *x)
{
	/* (a count while a worker lands bytes: only a peer's overlapping frames; its own comes) */
	if (!x->op || x->received < x->length || x->direct || x->landing || x->land_op)
		return;
	if (sync_first(x))
		return;
	if (x->active && x->wfast) { /* a window get: its one reply is all here */
		struct xd_op *op = x->op;
		xfer_close(x);
		xd_op_complete(op);
	} else if (x->active && !x->ok_rx) {
		return; /* which end: the CLAIM_OK says (handle_claim_ok() comes back here) */
	} else if (x->active && x->quick) {
		/* The short end: every byte has landed, the reader's DONE is the last word. */
		struct xd_op *op = x->op;
		send_done(x);
		xfer_close(x);
		xd_op_complete(op);
	} else if (x->active) {
		send_done(x); /* reader: every byte has landed */
	} else {
		maybe_complete_passive(x);
	}
}

static struct xd_xfer *data_target(struct xd_peer *p, const struct xp_peer_hdr *h, int *err)
{
	struct xd_xfer *x = xd_xfer_find(p, h->xfer, !(h->flags & XP_PEER_FROM_ACTIVE));
	uint64_t end;

	if (!x || !x->op || x->land_op)
		return NULL; /* ended here already (or its end waits for a worker): drop it */
	if (x->source || __builtin_add_overflow(h->offset, h->length, &end) || end > x->length) {
		*err = -EPROTO;
		return NULL;
	}
	if (x->ok_in_data && !x->ok_rx)
		claim_ok_received(x, x->via, false, true); /* (the first DATA is the CLAIM_OK) */
	xd_xfer_ref(x);
	return x;
}

/* The active side's DONE: every byte is sent (write) or in place (read). 0 or -EPROTO. */
static int done_received(struct xd_xfer *x)
{
	if (x->active)
		return -EPROTO;
	x->done_rx = true;
	maybe_complete_passive(x);
	return 0;
}

/*
 * The owner's DONE_ACK. 0 or -EPROTO. One that comes while frames of the bytes are still out
 * waits for them (ack_rx): ended now, the client could reuse its buffer under them.
 */
static int done_ack_received(struct xd_xfer *x)
{
	if (!x->active)
		return -EPROTO;
	x->ack_rx = true;
	if (!frames_out(x))
		done_ack_applies(x);
	return 0;
}

/*
 * A binary pairing frame about transfer @h->xfer (PROTOCOL.md §10.8); its length matches its
 * type (xp_peer_hdr_valid()). The same rules as ctrl_received()'s for the JSON ones.
 */
static int ctrl_bin_received(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
			     const uint8_t *payload, uint32_t len)
{
	if (h->type == XP_PEER_CLAIM)
		return handle_claim_bin(p, via, h, payload, len);
	uint64_t ok_flags = h->type == XP_PEER_CLAIM_OK ? xp_peer_bin_field(payload, len) : 0;
	if (ok_flags & ~(uint64_t)XP_CLAIM_OK_QUICK)
		return -EPROTO; /* (checked before the lookup: a crossed end does not hide it) */
	struct xd_xfer *x = xd_xfer_find(p, h->xfer, !(h->flags & XP_PEER_FROM_ACTIVE));
	if (!x)
		return 0; /* the two ends crossed: it already ended here */
	if (x->direct || x->one_sided || x->wfast)
		return -EPROTO; /* no binary frame is about a one-sided transfer, nor a window frame's */
	switch (h->type) {
	case XP_PEER_CLAIM_OK:
		if (!x->active || x->ok_in_data)
			return -EPROTO; /* (a read's DATA answers when the owner said so) */
		if (x->ok_rx)
			return claim_ok_again(x);
		return x->op ? claim_ok_received(x, via, false, ok_flags & XP_CLAIM_OK_QUICK) : 0;
	case XP_PEER_DONE:
		return done_received(x);
	case XP_PEER_DONE_ACK:
		return done_ack_received(x);
	default:
		return -EPROTO;
	}
}

/* A control message about transfer @h->xfer. */
static int ctrl_received(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json)
{
	if (h->type == XP_PEER_CLAIM)
		return handle_claim(p, via, h, json);
	if (h->type == XP_PEER_WCLAIM)
		return handle_wclaim(p, via, h, json);
	if (h->type == XP_PEER_WOPEN || h->type == XP_PEER_WOPEN_OK ||
	    h->type == XP_PEER_WOPEN_ERR || h->type == XP_PEER_WCLOSE ||
	    h->type == XP_PEER_WNOTIFY || h->type == XP_PEER_WNOTIFY_ACK)
		return xd_window_ctrl(p, via, h, json);
	struct xd_xfer *x = xd_xfer_find(p, h->xfer, !(h->flags & XP_PEER_FROM_ACTIVE));
	if (!x)
		return 0; /* the two ends crossed: it already ended here */
	if (x->direct)
		return -EPROTO; /* the owner never heard of a keyed get or put */
	if (x->wfast && h->type != XP_PEER_CANCEL)
		return -EPROTO; /* a window frame's owner refuses with CANCEL, claims nothing */
	switch (h->type) {
	case XP_PEER_CLAIM_OK:
		if (!x->active)
			return -EPROTO;
		return handle_claim_ok(x, via, json);
	case XP_PEER_DONE:
		return done_received(x);
	case XP_PEER_DONE_ACK:
		return done_ack_received(x);
	case XP_PEER_CLAIM_ERR:
	case XP_PEER_CANCEL: {
		const char *name = NULL, *raw = NULL;
		char cause[XD_CAUSE_MAX], message[XD_CAUSE_MAX - sizeof("peer: ")];
		if (!json || json_unpack(json, "{s:s, s:s}", "errno", &name, "message", &raw))
			return -EPROTO;
		/* A peer's words reach clients, logs and terminals: escaped at the door. */
		xd_escape(raw, message, sizeof(message));
		int err = xp_errno_from_name(name) ?: EIO;
		if (h->type == XP_PEER_CLAIM_ERR) {
			xfer_fail(x, XP_ST_ERRORED, err, message);
			return 0;
		}
		if (x->draining) { /* the active side released our keys */
			drain_done(x);
			return 0;
		}
		if (x->one_sided && x->active)
			defer_release(x, ECANCELED, "transfer released after the owner ended it");
		snprintf(cause, sizeof(cause), "peer: %s", message);
		if (x->op && frames_out(x)) /* (the end waits for them: drain()) */
			xd_op_end(x->op, err == ECANCELED ? XP_ST_CANCELLED : XP_ST_ERRORED, err,
				  "%s", cause);
		else
			xfer_fail(x, err == ECANCELED ? XP_ST_CANCELLED : XP_ST_ERRORED, err,
				  cause);
		return 0;
	}
	default:
		return -EPROTO;
	}
}

/* A region of @x failed under a frame (mem.c): the op ends ERRORED, and the peer is told. */
static void io_failed(struct xd_xfer *x)
{
	if (x->tx_drain) { /* (zeros from here on: no byte of the buffer goes any more) */
		tx_drained(x);
		return;
	}
	if (x->op && !xd_op_ending(x->op))
		xd_op_end(x->op, XP_ST_ERRORED, x->io_err, "%s", x->io_why);
}

/* The worker that wrote bytes of @x is through: an end asked meanwhile is told now. */
static void landed(struct xd_xfer *x)
{
	struct xd_op *op = x->land_op;

	x->land_op = NULL;
	if (op)
		xd_op_drained(op); /* (op_ended() closes @x if it is still open) */
}

static int wframe_received(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
			   const uint8_t *payload, uint32_t len)
{
	return xd_window_frame(p, via, h, payload, len, fast_put_acked);
}

static const struct xd_xfer_events claim_events = {
	.ctrl = ctrl_received,
	.ctrl_bin = ctrl_bin_received,
	.data_target = data_target,
	.data_sent = data_sent,
	.data_received = data_received,
	.all_posted = all_posted,
	.request_done = request_done,
	.io_failed = io_failed,
	.landed = landed,
	.peer_up = peer_up,
	.peer_lost = peer_lost,
	.peer_tick = check_drains,
	.wput_target = xd_window_put_target,
	.wframe = wframe_received,
};

static const struct xd_remote_ops claim_remote_ops = {
	.drain = drain,
	.op_ended = op_ended,
};

void xd_claims_start(struct xd_daemon *d)
{
	d->xfer_events = &claim_events;
	d->remote = &claim_remote_ops;
}
