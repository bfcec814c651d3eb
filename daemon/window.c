// SPDX-License-Identifier: MIT
/*
 * Windows (PROTOCOL.md §5.1, §10.6): a range of a region its owner exposes for repeated
 * one-sided gets and puts. The owner's side keeps the window and its openers; an opener's side
 * keeps a handle. A get or put is a transfer like a pairing's (claim.c moves it), whose
 * passive side is an internal op this file makes over the window's range and is told the end
 * of: no client is woken for it, except by a notify tag, delivered once, in order per opener.
 * Closing a window revokes it: every opener is told, every transfer on it ends.
 *
 * Over a one-sided transport (RDMA) the owner binds one key per opener at open, onto exactly
 * the window's range with the window's access, to the opener's queue pair (grant_key()); the
 * opener's gets and puts then read and write with it, no claim per op, and a tagged one is
 * followed by a WNOTIFY on that queue pair. The key is revoked when the opener lets go (its
 * WCLOSE, sent once no request of it is out), its set is lost, or, after the owner revoked the
 * window, when the opener keeps it past keepalive_timeout_ms (its set is failed).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "transport.h"
#include "xp_peer.h"

enum whandle_state {
	WH_OPENING, /**< WOPEN sent (or waiting for the set), the client's reply pending */
	WH_OPEN,    /**< gets and puts may go */
	WH_CLOSED,  /**< revoked by the owner or lost with its peer set; @cause says which */
};

/* One get or put at the owner, and its notification if it carries a tag. */
struct xd_wnote {
	TAILQ_ENTRY(xd_wnote) link; /**< in opener->notes while queued (tagged ones only) */
	struct xd_wopener *o;
	bool queued, done, visible;
	enum xp_kind kind;
	uint64_t offset, bytes;
	uint32_t lane; /**< a TCP put's: the connection its last WPUT came on, and that WPUT's */
	uint64_t seq;  /**< count there (0: none); no WACK covers it while the note waits */
	struct xd_op *held_op; /**< a local opener's op, whose end waits for this note */
	bool wnotify;	       /**< a keyed opener's WNOTIFY: its WNOTIFY_ACK counts it once gone */
	uint64_t order; /**< the opener's count of it (XP_WIN_SEQ); 0: none, in the order it came */
	char tag[XP_MAX_TAG + 1];
};

/*
 * One connection's count of one-sided WPUTs (PROTOCOL.md §10.7): at the opener, of a handle,
 * sent and acknowledged; at the owner, of an opener, taken and acknowledged, with the put
 * whose frames are arriving on it (a put's frames come in a row on one connection).
 */
struct xd_wlane {
	uint32_t id; /**< the connection's id in its set (from 1); 0: the slot is free */
	uint64_t frames, acked;
	uint64_t put_off, put_bytes;
};

#define XD_WLANES 17 /* slots: a set has at most peer_connections (16) + 1 connections */

/* One opener of a window, at the owner: a handle of a peer daemon (or of this one). */
struct xd_wopener {
	TAILQ_ENTRY(xd_wopener) link; /**< in w->openers */
	struct xd_window *w;
	struct xd_peer *peer; /**< NULL: a handle of this daemon, or its set is gone */
	bool local;
	uint64_t handle; /**< the opener's handle id, in the opener daemon's id space */
	char node_hex[2 * XP_ID_BYTES + 1];
	bool gone;	   /**< closed: freed once its ops have ended */
	unsigned inflight; /**< its internal ops not yet ended */
	unsigned nnotes;
	TAILQ_HEAD(xd_wnotes, xd_wnote) notes; /**< tagged ops in their order, delivered in it */
	uint64_t next_order; /**< the count (XP_WIN_SEQ) of the next tagged op to deliver */
	uint64_t gets, puts;
	/* One-sided TCP frames (PROTOCOL.md §10.7): landings and get replies under way */
	TAILQ_HEAD(, xd_xfer) xfers;
	struct xd_wlane lanes[XD_WLANES]; /**< its WPUTs taken (landed or refused), by connection */
	uint32_t lane; /**< where its get replies and their refusals go (first piece: in order) */
	struct xd_deferred ack_later;
	/*
	 * One-sided: the key bound for this opener at open (NULL: none, it claims each op), and
	 * the transport that closes it. After a revocation it is kept until the opener lets go
	 * (@releasing since @release_since_us), at most keepalive_timeout_ms.
	 */
	struct xd_rdma_grant *grant;
	const struct xd_transport_ops *gt;
	bool releasing;
	uint64_t release_since_us;
	/*
	 * Its credit of WNOTIFYs (PROTOCOL.md §10.9; 0: an opener that did not ask, bounded by
	 * XD_WINDOW_MAX_INFLIGHT waiting), and how many it sent have left this daemon's hands
	 * (pushed to the owner's client, or dropped) and been acknowledged (WNOTIFY_ACK).
	 */
	uint32_t credit;
	uint64_t notes_taken, notes_acked;
	struct xd_deferred credit_later;
};

struct xd_window {
	bool is_handle; /**< false (listings tell the two apart by this first field) */
	TAILQ_ENTRY(xd_window) link;
	struct xd_idnode by_id; /**< in d->window_ids while in d->windows */
	struct xd_daemon *d;
	uint64_t id;
	struct xd_conn *owner; /**< NULL once closed */
	uint64_t client_id;
	uid_t uid;
	struct xd_region *region; /**< referenced, and counted in its live_ops */
	uint64_t offset, length;
	int access;
	bool many;
	uint8_t token[XP_ID_BYTES];
	TAILQ_HEAD(, xd_wopener) openers;
	unsigned nopeners; /**< not gone */
	unsigned inflight; /**< internal ops not yet ended */
	bool closing;
	struct xd_conn *close_conn; /**< window.close to answer once nothing is in flight */
	int64_t close_id;
	struct xd_deferred reap; /**< frees gone openers, ends a close, outside callbacks */
	uint64_t created_us, gets, puts, notified;
};

struct xd_whandle {
	bool is_handle; /**< true */
	TAILQ_ENTRY(xd_whandle) link;
	struct xd_idnode by_id; /**< in d->handle_ids while in d->whandles */
	struct xd_daemon *d;
	uint64_t id;
	struct xd_conn *conn; /**< NULL: its client went while it was opening */
	uint64_t client_id;
	struct xd_peer *peer; /**< NULL: local, or its set is gone */
	bool local;
	uint64_t window; /**< the owner's id */
	uint8_t node[XP_ID_BYTES];
	char node_hex[2 * XP_ID_BYTES + 1];
	uint64_t epoch;
	uint8_t token[XP_ID_BYTES];
	uint64_t length;
	int access;
	enum whandle_state state;
	bool open_sent;
	uint64_t open_sent_us; /**< when its WOPEN went: the owner answers within a bound */
	int64_t reply_id;      /**< WH_OPENING: the window.open to answer */
	char transport[8];
	int cause_errno;
	char cause[XD_CAUSE_MAX];
	uint64_t created_us;
	/* One-sided TCP frames (PROTOCOL.md §10.7) */
	uint32_t lane; /**< its WGETs, first pieces, tagged puts without @seq go on this one */
	struct xd_wlane lanes[XD_WLANES]; /**< WPUTs sent and acknowledged, by connection */
	TAILQ_HEAD(, xd_xfer) puts;	  /**< not yet acknowledged, in the order posted */
	TAILQ_HEAD(, xd_xfer) gets;	  /**< their replies not yet all here */
	unsigned nfast;			  /**< on the two lists */
	bool file;			  /**< the window is over a file region: claims only */
	bool pieces;			  /**< the owner takes XP_WIN_PIECE (WOPEN_OK "pieces") */
	bool seq;	   /**< the owner orders tagged ops by XP_WIN_SEQ (WOPEN_OK "seq") */
	uint64_t seq_sent; /**< tagged gets and puts sent with XP_WIN_SEQ */
	/*
	 * One-sided: the key the owner bound for this handle (WOPEN_OK) onto the window at
	 * @raddr, on connection @via of @key_peer (NULL once that set is gone). Gets and puts with
	 * requests out hold it (@key_users); a closed or revoked handle lets go (WCLOSE) once
	 * none does (@release_wait). A handle whose client closed it lingers unlisted till then.
	 */
	bool keyed;
	uint64_t raddr;
	uint32_t rkey, via;
	struct xd_peer *key_peer;
	unsigned key_users;
	bool release_wait;
	TAILQ_HEAD(xd_hnotes, xd_hnote) notes; /**< keyed, tagged ops in the order they started */
	/*
	 * The owner's credit of WNOTIFYs (WOPEN_OK "notify_credit"; 0: an older owner, no credit)
	 * and the WNOTIFYs sent and acknowledged (WNOTIFY_ACK): at most @credit unacknowledged.
	 */
	uint32_t credit;
	uint64_t notes_sent, notes_acked;
};

/* A keyed, tagged get or put at the opener: its WNOTIFY waits for those started before it. */
struct xd_hnote {
	TAILQ_ENTRY(xd_hnote) link;
	uint64_t op;
	bool done, complete;
	enum xp_kind kind;
	uint64_t offset, bytes;
	struct xd_op *held_op; /**< its op, COMPLETE once this WNOTIFY went (credit) */
	char tag[XP_MAX_TAG + 1];
};

/* ---- lookup, charges ---- */

/* The count of connection @id in @lanes, or NULL. */
static struct xd_wlane *wlane_find(struct xd_wlane *lanes, uint32_t id)
{
	for (int i = 0; i < XD_WLANES && id; i++)
		if (lanes[i].id == id)
			return &lanes[i];
	return NULL;
}

/* The count of connection @id in @lanes, made on first use; NULL when every slot is taken. */
static struct xd_wlane *wlane_get(struct xd_wlane *lanes, uint32_t id)
{
	struct xd_wlane *l = wlane_find(lanes, id);

	for (int i = 0; i < XD_WLANES && !l && id; i++)
		if (!lanes[i].id)
			*(l = &lanes[i]) = (struct xd_wlane){ .id = id };
	return l;
}

/* (by the index, not a walk of d->windows: every get and put, and every frame of one, names it) */
static struct xd_window *window_find(struct xd_daemon *d, uint64_t id)
{
	return XD_IDMAP_OBJ(xd_idmap_get(&d->window_ids, id), struct xd_window, by_id);
}

static struct xd_whandle *handle_find(struct xd_daemon *d, uint64_t id)
{
	return XD_IDMAP_OBJ(xd_idmap_get(&d->handle_ids, id), struct xd_whandle, by_id);
}

static struct xd_whandle *handle_of_peer(struct xd_peer *p, uint64_t id)
{
	struct xd_whandle *h = handle_find(p->d, id);

	return h && h->peer == p ? h : NULL;
}

/* The opener (not gone) of @w that is handle @handle of set @p (NULL: of this daemon). */
static struct xd_wopener *opener_find(struct xd_window *w, struct xd_peer *p, uint64_t handle)
{
	struct xd_wopener *o;

	TAILQ_FOREACH(o, &w->openers, link)
		if (!o->gone && o->handle == handle && (p ? o->peer == p : o->local))
			return o;
	return NULL;
}

/* The opener of @w that is handle @handle of set @p and holds a key, even if gone (revoked). */
static struct xd_wopener *opener_keyed(struct xd_window *w, struct xd_peer *p, uint64_t handle)
{
	struct xd_wopener *o;

	TAILQ_FOREACH(o, &w->openers, link)
		if (o->grant && o->handle == handle && o->peer == p)
			return o;
	return NULL;
}

static int charge_window(struct xd_call *call)
{
	struct xd_conn *c = call->conn;
	char msg[200];
	int rc = xd_charge(c->d, c->use, c->uid, XD_RES_WINDOWS, 1, msg, sizeof(msg));

	return rc ? xd_fail(call, XP_E_FAILED, -rc, "%s", msg) : 0;
}

static void uncharge_window(struct xd_conn *c)
{
	if (c)
		xd_uncharge(c->d, c->use, c->uid, XD_RES_WINDOWS, 1);
}

/* ---- notifications ---- */

static void push(struct xd_conn *c, const char *method, json_t *params)
{
	json_t *msg = params ? xp_build_notification(method, params) : NULL;

	if (c && msg)
		xd_client_send(c, msg);
	json_decref(msg);
}

static void push_notified(struct xd_window *w, const struct xd_wnote *n)
{
	push(w->owner, XP_NOTIFY_WINDOW_NOTIFIED,
	     json_pack("{s:I, s:s, s:I, s:s, s:I, s:s, s:I}", "window", (json_int_t)w->id, "tag",
		       n->tag, "bytes", (json_int_t)n->bytes, "kind", xp_kind_name(n->kind),
		       "offset", (json_int_t)n->offset, "peer",
		       n->o->local ? "local" : n->o->node_hex, "handle", (json_int_t)n->o->handle));
	w->notified++;
	w->d->stats.window_notified++;
}

/* Whether the owner's client of @w is behind: its notifications wait (PROTOCOL.md §10.9). */
static bool owner_behind(struct xd_window *w)
{
	const struct xd_client_ops *ops = w->d->clients;

	return w->owner && ops && ops->notes_wait && ops->notes_wait(w->owner);
}

static void ack_cb(void *arg);
static void note_taken(struct xd_wopener *o);
static bool notes_due(const struct xd_wopener *o);
static void reap_soon(struct xd_window *w);

/* @n is sent or dropped: the local op that waited for it ends. */
static void note_release(struct xd_wnote *n)
{
	struct xd_op *op = n->held_op;

	n->held_op = NULL;
	if (op)
		xd_op_unhold(op);
}

/*
 * Delivers @o's notifications whose ops have ended, in the order the ops came, stopping at the
 * first still in flight: a later put's tag never overtakes an earlier one's. An op that did not
 * complete delivers nothing (its bytes are not all there), and does not hold the others up.
 * While the owner's client is behind, the ended ones wait here, and so do the WACKs of the
 * puts they name (ack_count()): the opener's credit of unacknowledged puts bounds them.
 */
static void deliver(struct xd_wopener *o)
{
	struct xd_window *w = o->w;
	struct xd_wnote *n;
	bool acks = false;

	/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
	while ((n = TAILQ_FIRST(&o->notes)) && n->done) {
		bool tell = n->visible && w->owner && !w->closing;
		if (n->order && n->order != o->next_order)
			break; /* one posted before it, on another connection, is still to come */
		if (tell && owner_behind(w))
			break;
		TAILQ_REMOVE(&o->notes, n, link);
		o->nnotes--;
		if (n->order)
			o->next_order = n->order + 1;
		if (tell)
			push_notified(w, n);
		acks |= n->seq != 0;
		if (n->wnotify)
			note_taken(o);
		note_release(n);
		free(n);
	}
	if (acks && o->peer && !o->gone)
		xd_defer(w->d, &o->ack_later, ack_cb, o);
	if (o->gone && !notes_due(o))
		reap_soon(w); /* (its last notifications went) */
}

/* The ended notifications of @o that wait for the owner's client (listings). */
static unsigned notes_waiting(const struct xd_wopener *o)
{
	const struct xd_wnote *n;
	unsigned count = 0;

	TAILQ_FOREACH(n, &o->notes, link) {
		if (!n->done)
			break;
		count++;
	}
	return count;
}

/* ---- the owner's side: lifetime ---- */

static void window_reap_cb(void *arg);

static void reap_soon(struct xd_window *w)
{
	xd_defer(w->d, &w->reap, window_reap_cb, w);
}

static void fast_detach_all(struct xd_wopener *o);
/* Revokes @o's key, if it holds one (the opener let go, or its set is gone). */
static void opener_key_close(struct xd_wopener *o)
{
	if (!o->grant)
		return;
	o->gt->grant_close(o->grant);
	o->grant = NULL;
}

static void opener_free(struct xd_wopener *o)
{
	struct xd_wnote *n;

	fast_detach_all(o);
	xd_defer_cancel(o->w->d, &o->ack_later);
	xd_defer_cancel(o->w->d, &o->credit_later);
	opener_key_close(o);
	while ((n = TAILQ_FIRST(&o->notes))) {
		TAILQ_REMOVE(&o->notes, n, link);
		note_release(n);
		free(n);
	}
	TAILQ_REMOVE(&o->w->openers, o, link);
	free(o);
}

static void window_free(struct xd_window *w)
{
	struct xd_wopener *o;

	while ((o = TAILQ_FIRST(&w->openers)))
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
		opener_free(o);
	TAILQ_REMOVE(&w->d->windows, w, link);
	xd_idmap_del(&w->d->window_ids, &w->by_id);
	xd_defer_cancel(w->d, &w->reap);
	w->region->live_ops--;
	xd_region_unref(w->region);
	free(w);
}

/*
 * Whether gone opener @o still has notifications of ended ops for the owner's client, which
 * is behind (§10.9: what came before an opener went still reaches the owner).
 */
static bool notes_due(const struct xd_wopener *o)
{
	const struct xd_wnote *n = TAILQ_FIRST(&o->notes);

	return n && n->done && n->visible && o->w->owner && !o->w->closing;
}

/*
 * Frees gone openers whose ops have ended and whose notifications went; ends a closed window
 * once nothing is in flight.
 */
static void window_reap_cb(void *arg)
{
	struct xd_window *w = arg;
	struct xd_wopener *o, *tmp;

	bool keys_out = false;

	TAILQ_FOREACH_SAFE(o, &w->openers, link, tmp) {
		if (o->gone && o->inflight == 0 && !o->grant && !notes_due(o))
			opener_free(o);
		else if (o->grant)
			keys_out = true;
	}
	/* window.close answers once no byte can reach the range: no op, no key left. */
	if (!w->closing || w->inflight > 0 || keys_out)
		return;
	if (w->close_conn)
		xd_client_reply(w->close_conn, w->close_id, json_object());
	window_free(w);
}

/* Ends every op of opener @o (the opener is gone: closed, lost, or the window revoked). */
static void opener_close(struct xd_wopener *o, enum xp_state state, int err, const char *cause)
{
	struct xd_daemon *d = o->w->d;
	struct xd_op *op, *tmp;

	if (o->gone)
		return;
	o->gone = true;
	o->w->nopeners--;
	fast_detach_all(o); /* its landings drop their bytes, its get replies go unsent */
	TAILQ_FOREACH_SAFE(op, &d->ops, link, tmp) {
		struct xd_wnote *n = op->internal ? op->on_end_arg : NULL; /* (NULL: ended) */
		if (n && n->o == o)
			xd_op_end(op, state, err, "%s", cause);
	}
	reap_soon(o->w);
}

/* An internal op of a window ended (op.c calls this once, from its end). */
static void window_op_ended(struct xd_op *op)
{
	struct xd_wnote *n = op->on_end_arg;
	struct xd_wopener *o = n->o;
	struct xd_window *w = o->w;

	op->on_end_arg = NULL; /* (the op stays listed until freed: nothing may reach @n) */
	xd_uncharge(w->d, NULL, w->uid, XD_RES_OPS, 1);
	o->inflight--;
	w->inflight--;
	n->done = true;
	n->visible = op->state == XP_ST_COMPLETE;
	if (n->visible) {
		w->d->stats.window_ops++;
		if (n->kind == XP_KIND_GET)
			o->gets++, w->gets++;
		else
			o->puts++, w->puts++;
	}
	/* A local opener's op ends once its notification went: it cannot outrun the owner. */
	if (n->queued && n->visible && op->pair && !op->pair->held_slot) {
		n->held_op = op->pair;
		op->pair->held_slot = &n->held_op;
	}
	if (n->queued)
		deliver(o);
	else
		free(n);
	if (o->gone || w->closing)
		reap_soon(w);
}

/* ---- the opener's side: handles ---- */

static void handle_fast_detach(struct xd_whandle *h);

static void handle_free(struct xd_whandle *h)
{
	handle_fast_detach(h);
	struct xd_hnote *n;

	while ((n = TAILQ_FIRST(&h->notes))) {
		TAILQ_REMOVE(&h->notes, n, link);
		if (n->held_op) /* (its client ended it before: this is for the daemon's end) */
			xd_op_end(n->held_op, XP_ST_ERRORED, ECONNRESET,
				  "its window handle is gone before its notification went");
		free(n);
	}
	if (h->conn)
		uncharge_window(h->conn);
	TAILQ_REMOVE(&h->d->whandles, h, link);
	xd_idmap_del(&h->d->handle_ids, &h->by_id);
	free(h);
}

/* Ends the ops still going on handle @h, with @cause. */
static void handle_end_ops(struct xd_whandle *h, enum xp_state state, int err, const char *cause)
{
	struct xd_op *op, *tmp;

	TAILQ_FOREACH_SAFE(op, &h->d->ops, link, tmp)
		if (op->wreq && op->wreq->handle == h->id)
			xd_op_end(op, state, err, "%s", cause);
}

/* WCLOSE from the opener: it lets go of window @h->window (and of its key, if keyed). */
static void send_release(struct xd_whandle *h)
{
	struct xd_peer *p = h->keyed ? h->key_peer : h->peer;
	json_t *j = p ? json_pack("{s:I}", "window", (json_int_t)h->window) : NULL;

	/* A key's release goes on its own queue pair, behind every request that used it. */
	if (j)
		xd_peer_send_ctrl(p, h->keyed ? h->via : 0, XP_PEER_WCLOSE, XP_PEER_FROM_ACTIVE,
				  h->id, j);
	json_decref(j);
	h->key_peer = NULL;
}

/* Keyed @h is closed or revoked: it lets go of its key now, or once no request uses it. */
static void release_key_when_quiet(struct xd_whandle *h)
{
	if (!h->keyed || !h->key_peer)
		return;
	if (h->key_users > 0)
		h->release_wait = true;
	else
		send_release(h);
}

/* @h no longer reaches its window: its client is told, later gets and puts refused. */
static void handle_revoked(struct xd_whandle *h, int err, const char *cause)
{
	if (h->state == WH_CLOSED)
		return;
	h->state = WH_CLOSED;
	h->peer = NULL;
	h->cause_errno = err;
	snprintf(h->cause, sizeof(h->cause), "%s", cause);
	handle_end_ops(h, err == ECANCELED ? XP_ST_CANCELLED : XP_ST_ERRORED, err, cause);
	release_key_when_quiet(h);
	push(h->conn, XP_NOTIFY_WINDOW_CLOSED,
	     json_pack("{s:I, s:s, s:s}", "window", (json_int_t)h->id, "errno", xp_errno_name(err),
		       "cause", h->cause));
}

static json_t *open_result(const struct xd_whandle *h)
{
	return json_pack("{s:I, s:I, s:s}", "window", (json_int_t)h->id, "length",
			 (json_int_t)h->length, "access", xp_access_name(h->access));
}

static struct xd_whandle *handle_new(struct xd_call *call, const struct xp_meta *m)
{
	struct xd_whandle *h = calloc(1, sizeof(*h));

	if (!h) {
		xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		return NULL;
	}
	h->is_handle = true;
	h->d = call->conn->d;
	h->id = ++h->d->next_window;
	h->conn = call->conn;
	h->client_id = call->conn->id;
	h->window = m->op;
	memcpy(h->node, m->node, XP_ID_BYTES);
	xp_hex_encode(m->node, XP_ID_BYTES, h->node_hex);
	h->epoch = m->epoch;
	memcpy(h->token, m->token, XP_ID_BYTES);
	h->length = m->total;
	h->access = m->access;
	h->created_us = xd_now_us();
	TAILQ_INIT(&h->puts);
	TAILQ_INIT(&h->gets);
	TAILQ_INIT(&h->notes);
	TAILQ_INSERT_TAIL(&h->d->whandles, h, link);
	xd_idmap_add(&h->d->handle_ids, &h->by_id, h->id);
	return h;
}

/* ---- open: the owner's checks, shared by local and remote opens ---- */

struct open_req {
	uint64_t window, epoch;
	const uint8_t *token; /**< the token itself (local, unkeyed peer), or NULL */
	const uint8_t *proof; /**< a proof of it (keyed peer), or NULL */
	const uint8_t *opener;
	uint64_t opener_epoch, handle;
};

static bool open_token_ok(struct xd_daemon *d, const struct open_req *rq, const struct xd_window *w)
{
	return xd_token_held(d, rq->proof, rq->token, rq->opener, rq->opener_epoch, rq->window,
			     rq->handle, w->token);
}

#define REFUSE(e, ...)                              \
	do {                                        \
		*err = -(e);                        \
		snprintf(msg, msglen, __VA_ARGS__); \
		return NULL;                        \
	} while (0)

/*
 * The openers @w keeps: open ones, and closed ones whose ops or notifications are still due
 * (§10.9: what came before an opener went still reaches the owner's client). Those count
 * against XD_WINDOW_MAX_OPENERS too: else an opener that closed its handle with its bound of
 * notifications waiting and opened another brought a fresh bound each time, and a window whose
 * owner's client is slow held them without end.
 */
static unsigned openers_kept(const struct xd_window *w)
{
	const struct xd_wopener *o;
	unsigned n = 0;

	TAILQ_FOREACH(o, &w->openers, link)
		n++;
	return n;
}

/* The refusals of window.open (PROTOCOL.md §5.1). Returns the window or NULL with -errno. */
static struct xd_window *open_lookup(struct xd_daemon *d, const struct open_req *rq, int *err,
				     char *msg, size_t msglen)
{
	if (rq->epoch != d->epoch)
		REFUSE(ESTALE,
		       "window metadata is from an earlier run of the owner daemon (epoch %llu, "
		       "now %llu): it restarted",
		       (unsigned long long)rq->epoch, (unsigned long long)d->epoch);
	struct xd_window *w = window_find(d, rq->window);
	if (!w)
		REFUSE(ENOENT, "the owner has no window %llu (closed, or never made)",
		       (unsigned long long)rq->window);
	if (!open_token_ok(d, rq, w))
		REFUSE(EACCES, "metadata token does not match window %llu",
		       (unsigned long long)rq->window);
	if (w->closing)
		REFUSE(ECANCELED, "window %llu was closed by its owner",
		       (unsigned long long)rq->window);
	if (!w->many && w->nopeners > 0)
		REFUSE(EBUSY, "window %llu takes one opener at a time (openers: one) and is open",
		       (unsigned long long)rq->window);
	unsigned kept = openers_kept(w);
	if (kept >= XD_WINDOW_MAX_OPENERS)
		REFUSE(EDQUOT,
		       "window %llu has %u openers (%u of them closed, their notifications not yet "
		       "taken by the owner's client), the most a window takes",
		       (unsigned long long)rq->window, kept, kept - w->nopeners);
	return w;
}

static struct xd_wopener *opener_add(struct xd_window *w, struct xd_peer *p, uint64_t handle)
{
	struct xd_wopener *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->w = w;
	o->peer = p;
	o->local = p == NULL;
	o->handle = handle;
	snprintf(o->node_hex, sizeof(o->node_hex), "%s", p ? p->node_hex : w->d->node_hex);
	TAILQ_INIT(&o->notes);
	o->next_order = 1;
	TAILQ_INIT(&o->xfers);
	TAILQ_INSERT_TAIL(&w->openers, o, link);
	w->nopeners++;
	return o;
}

static int open_local(struct xd_call *call, const struct xp_meta *m)
{
	struct xd_daemon *d = call->conn->d;
	struct open_req rq = { .window = m->op, .epoch = m->epoch, .token = m->token };
	int err;

	struct xd_window *w = open_lookup(d, &rq, &err, call->message, sizeof(call->message));
	if (!w) {
		call->code = XP_E_FAILED;
		call->cause_errno = -err;
		return err;
	}
	if (charge_window(call))
		return -call->cause_errno;
	struct xd_whandle *h = handle_new(call, m);
	if (!h || !opener_add(w, NULL, h->id)) {
		if (h)
			handle_free(h);
		else
			uncharge_window(call->conn);
		return h ? xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory") : -ENOMEM;
	}
	h->local = true;
	h->state = WH_OPEN;
	snprintf(h->transport, sizeof(h->transport), "%s", xd_transport_local(d)->name);
	call->result = open_result(h);
	return 0;
}

/* Sends WOPEN for @h (its set is up): a proof of the token (keyed) or the token. */
static void send_open(struct xd_whandle *h)
{
	struct xd_daemon *d = h->d;
	char node[2 * XP_ID_BYTES + 1], hex[2 * XD_MAC_LEN + 1];
	uint8_t proof[XD_MAC_LEN];
	int rc = 0;

	xp_hex_encode(h->node, XP_ID_BYTES, node);
	/* notify_credit: it takes WNOTIFY_ACK (PROTOCOL.md §10.9); older owners ignore it */
	json_t *j = json_pack("{s:I, s:s, s:I, s:b}", "window", (json_int_t)h->window, "node", node,
			      "epoch", (json_int_t)h->epoch, "notify_credit", 1);
	if (d->keys.n) {
		rc = xd_claim_proof(d, h->node, h->epoch, d->node, d->epoch, h->window, h->id,
				    h->token, proof);
		xp_hex_encode(proof, sizeof(proof), hex);
	} else {
		xp_hex_encode(h->token, XP_ID_BYTES, hex);
	}
	if (!j || rc || json_object_set_new(j, d->keys.n ? "proof" : "token", json_string(hex)))
		rc = -ENOMEM;
	if (!rc)
		rc = xd_peer_send_ctrl(h->peer, 0, XP_PEER_WOPEN, XP_PEER_FROM_ACTIVE, h->id, j);
	json_decref(j);
	h->open_sent = true;
	h->open_sent_us = xd_now_us();
	if (rc && h->conn) {
		xd_client_reply_error(h->conn, h->reply_id, XP_E_FAILED, -rc,
				      "could not send the open to the owner");
		handle_free(h);
	} else if (rc) {
		handle_free(h);
	}
}

int xd_window_open(struct xd_call *call, const struct xp_meta *m)
{
	struct xd_daemon *d = call->conn->d;

	if (m->kind != XP_KIND_WINDOW)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "metadata is for a %s operation; window.open needs window metadata",
			       xp_kind_name(m->kind));
	if (memcmp(m->node, d->node, XP_ID_BYTES) == 0)
		return open_local(call, m);
	struct xd_peer *p = xd_peer_for_meta(call, m);
	if (!p || charge_window(call))
		return -call->cause_errno;
	struct xd_whandle *h = handle_new(call, m);
	if (!h) {
		uncharge_window(call->conn);
		return -ENOMEM;
	}
	h->peer = p;
	h->reply_id = call->id;
	h->state = WH_OPENING;
	snprintf(h->transport, sizeof(h->transport), "%s", p->transport->name);
	call->deferred = true;
	if (p->state == XD_PEER_UP)
		send_open(h);
	return 0;
}

/* ---- create, close ---- */

static json_t *create_result(const struct xd_window *w)
{
	struct xd_daemon *d = w->d;
	uint64_t len = w->length;
	struct xp_meta m = { .kind = XP_KIND_WINDOW,
			     .epoch = d->epoch,
			     .op = w->id,
			     .access = w->access,
			     .lengths = &len,
			     .nlengths = 1 };
	char *metadata = NULL;

	memcpy(m.node, d->node, sizeof(m.node));
	memcpy(m.token, w->token, sizeof(m.token));
	memcpy(m.endpoints, d->endpoints, sizeof(m.endpoints));
	m.nendpoints = d->nendpoints;
	if (xp_meta_encode(&m, &metadata))
		return NULL;
	json_t *result = json_pack("{s:I, s:s}", "window", (json_int_t)w->id, "metadata", metadata);
	free(metadata);
	return result;
}

int xd_window_create(struct xd_call *call, uint64_t region, uint64_t offset, uint64_t length,
		     int access, bool many)
{
	struct xd_region *r = xd_region_lookup(call, region);
	uint64_t end;

	if (!r)
		return -call->cause_errno;
	if (length == 0 && offset < r->length)
		length = r->length - offset; /* (absent: to the end of the region) */
	if (length == 0 || __builtin_add_overflow(offset, length, &end) || end > r->length)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "window [%llu, +%llu) must be non-empty and inside region %llu "
			       "(%llu bytes)",
			       (unsigned long long)offset, (unsigned long long)length,
			       (unsigned long long)region, (unsigned long long)r->length);
	if (charge_window(call))
		return -call->cause_errno;
	struct xd_window *w = calloc(1, sizeof(*w));
	if (!w || getrandom(w->token, sizeof(w->token), 0) != sizeof(w->token)) {
		free(w);
		uncharge_window(call->conn);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	w->d = call->conn->d;
	w->id = ++w->d->next_window;
	w->owner = call->conn;
	w->client_id = call->conn->id;
	w->uid = call->conn->uid;
	w->region = r;
	xd_region_ref(r);
	r->live_ops++; /* deregistering it is refused (EBUSY) while the window is open */
	w->offset = offset;
	w->length = length;
	w->access = access;
	w->many = many;
	w->created_us = xd_now_us();
	TAILQ_INIT(&w->openers);
	TAILQ_INSERT_TAIL(&w->d->windows, w, link);
	xd_idmap_add(&w->d->window_ids, &w->by_id, w->id);
	call->result = create_result(w);
	if (!call->result) { /* nothing was given out: take it back */
		uncharge_window(w->owner);
		w->closing = true;
		window_free(w);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	return 0;
}

/* Tells opener @o that the window is gone (WCLOSE, or its local handle). */
static void tell_opener(struct xd_wopener *o, int err, const char *cause)
{
	if (o->local) {
		struct xd_whandle *h = handle_find(o->w->d, o->handle);
		if (h && h->local)
			handle_revoked(h, err, cause);
		return;
	}
	if (!o->peer)
		return;
	json_t *j = json_pack("{s:s, s:s}", "errno", xp_errno_name(err), "message", cause);
	if (j)
		xd_peer_send_ctrl(o->peer, 0, XP_PEER_WCLOSE, 0, o->handle, j);
	json_decref(j);
}

/* Revokes @w: openers told, every transfer on it ended; freed once none is in flight. */
static void window_revoke(struct xd_window *w, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void window_revoke(struct xd_window *w, int err, const char *fmt, ...)
{
	struct xd_wopener *o;
	char cause[XD_CAUSE_MAX];
	va_list ap;

	if (w->closing)
		return;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	w->closing = true;
	uncharge_window(w->owner);
	w->owner = NULL;
	TAILQ_FOREACH(o, &w->openers, link) {
		if (o->gone)
			continue;
		tell_opener(o, err, cause);
		o->releasing = o->grant !=
			       NULL; /* its key goes once it let go: at most a timeout */
		o->release_since_us = xd_now_us();
		opener_close(o, err == ECANCELED ? XP_ST_CANCELLED : XP_ST_ERRORED, err, cause);
	}
	reap_soon(w);
}

/* The opener lets go of @h: the owner is told; its ops end. */
static void handle_close(struct xd_whandle *h, const char *cause)
{
	handle_end_ops(h, XP_ST_CANCELLED, ECANCELED, cause);
	if (h->state == WH_OPEN && h->local) {
		struct xd_window *w = window_find(h->d, h->window);
		struct xd_wopener *o = w ? opener_find(w, NULL, h->id) : NULL;
		if (o)
			opener_close(o, XP_ST_CANCELLED, ECANCELED, "the opener closed its handle");
	} else if (h->state == WH_OPEN && h->peer && h->keyed && h->key_users > 0) {
		/* Requests still use the key: the handle lingers, unlisted, until they are done. */
		uncharge_window(h->conn);
		h->conn = NULL;
		h->state = WH_CLOSED;
		h->peer = NULL;
		h->release_wait = true;
		return;
	} else if (h->state == WH_OPEN && h->peer) {
		send_release(h);
	} else if (h->keyed && h->key_peer) { /* revoked: still owes the release of its key */
		release_key_when_quiet(h);
		if (h->release_wait) {
			uncharge_window(h->conn);
			h->conn = NULL;
			return;
		}
	}
	handle_free(h);
}

int xd_window_close(struct xd_call *call, uint64_t id)
{
	struct xd_daemon *d = call->conn->d;
	struct xd_window *w = window_find(d, id);
	struct xd_whandle *h = handle_find(d, id);

	if (w && w->owner && xd_conn_may_access(call->conn, w->owner)) {
		window_revoke(w, ECANCELED, "window %llu was closed by its owner",
			      (unsigned long long)id);
		w->close_conn = call->conn; /* answered once nothing is in flight on it */
		w->close_id = call->id;
		call->deferred = true;
		return 0;
	}
	if (w && w->owner)
		return xd_fail(call, XP_E_FAILED, EPERM, "window %llu belongs to another client",
			       (unsigned long long)id);
	if (h && h->conn == call->conn && h->state != WH_OPENING) {
		handle_close(h, "its window handle was closed by its client");
		call->result = json_object();
		return 0;
	}
	return xd_fail(call, XP_E_FAILED, ENOENT, "no window or window handle %llu",
		       (unsigned long long)id);
}

/* ---- gets and puts ---- */

static int check_access(int access, enum xp_kind kind, uint64_t window, int *err, char *msg,
			size_t msglen)
{
	bool get = kind == XP_KIND_GET;

	if (access & (get ? XP_ACCESS_READ : XP_ACCESS_WRITE))
		return 0;
	*err = -EACCES;
	snprintf(msg, msglen, "window %llu is %s: %s needs %s access", (unsigned long long)window,
		 get ? "write-only" : "read-only", get ? "op.get" : "op.put",
		 get ? "read" : "write");
	return -1;
}

static int check_range(uint64_t length, const struct xd_wclaim *wc, uint64_t window, int *err,
		       char *msg, size_t msglen)
{
	uint64_t end;

	if (!__builtin_add_overflow(wc->offset, wc->length, &end) && end <= length)
		return 0;
	*err = -EINVAL;
	snprintf(msg, msglen, "[%llu, +%llu) passes the end of window %llu (%llu bytes)",
		 (unsigned long long)wc->offset, (unsigned long long)wc->length,
		 (unsigned long long)window, (unsigned long long)length);
	return -1;
}

int xd_window_check(struct xd_call *call, const struct xd_wclaim *wc, struct xd_wtarget *t)
{
	struct xd_whandle *h = handle_find(call->conn->d, wc->handle);
	int err;

	if (!h || h->conn != call->conn || h->state == WH_OPENING)
		return xd_fail(call, XP_E_FAILED, ENOENT, "no window handle %llu",
			       (unsigned long long)wc->handle);
	if (h->state == WH_CLOSED)
		return xd_fail(call, XP_E_FAILED, h->cause_errno, "window handle %llu: %s",
			       (unsigned long long)wc->handle, h->cause);
	if (h->nfast >= XD_WINDOW_MAX_INFLIGHT)
		return xd_fail(call, XP_E_FAILED, EDQUOT,
			       "%d gets and puts are in flight on window handle %llu",
			       XD_WINDOW_MAX_INFLIGHT, (unsigned long long)wc->handle);
	if (check_access(h->access, wc->kind, wc->handle, &err, call->message,
			 sizeof(call->message)) ||
	    check_range(h->length, wc, wc->handle, &err, call->message, sizeof(call->message))) {
		call->code = XP_E_FAILED;
		call->cause_errno = -err;
		return err;
	}
	t->peer = h->local ? NULL : h->peer;
	t->window = h->window;
	memcpy(t->node, h->node, XP_ID_BYTES);
	t->epoch = h->epoch;
	t->keyed = h->keyed && h->key_peer == h->peer;
	t->raddr = h->raddr + wc->offset;
	t->rkey = h->rkey;
	t->via = h->via;
	return 0;
}

int xd_window_direct_start(struct xd_daemon *d, const struct xd_op *op)
{
	struct xd_whandle *h = handle_find(d, op->wreq->handle);
	struct xd_hnote *n;

	if (!h)
		return -ENOENT;
	if (op->wreq->has_tag) {
		if (!(n = calloc(1, sizeof(*n))))
			return -ENOMEM;
		*n = (struct xd_hnote){ .op = op->id,
					.kind = op->kind,
					.offset = op->wreq->offset,
					.bytes = op->length };
		snprintf(n->tag, sizeof(n->tag), "%s", op->wreq->tag);
		TAILQ_INSERT_TAIL(&h->notes, n, link);
	}
	h->key_users++;
	return 0;
}

/* WNOTIFY of @n, on the key's queue pair: behind every request of that get or put. */
static void send_notify(struct xd_whandle *h, const struct xd_hnote *n)
{
	json_t *j = json_pack("{s:I, s:s, s:I, s:I, s:s}", "window", (json_int_t)h->window, "kind",
			      xp_kind_name(n->kind), "offset", (json_int_t)n->offset, "bytes",
			      (json_int_t)n->bytes, "tag", n->tag);

	if (j && h->key_peer)
		xd_peer_send_ctrl(h->key_peer, h->via, XP_PEER_WNOTIFY, XP_PEER_FROM_ACTIVE, h->id,
				  j);
	json_decref(j);
}

/*
 * Sends @h's notifications whose ops have ended, in the order the ops started (a later tag
 * never overtakes an earlier one), while the owner's credit lasts; an op held for its
 * notification ends COMPLETE once it went.
 */
static void send_notes(struct xd_whandle *h)
{
	struct xd_hnote *n;

	/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
	while ((n = TAILQ_FIRST(&h->notes)) && n->done) {
		if (n->complete && h->credit && h->notes_sent - h->notes_acked >= h->credit)
			return; /* spent: the owner's client is behind (WNOTIFY_ACK resumes) */
		TAILQ_REMOVE(&h->notes, n, link);
		if (n->complete) {
			send_notify(h, n);
			h->notes_sent++;
		}
		struct xd_op *held = n->held_op;
		n->held_op = NULL;
		free(n);
		if (held)
			xd_op_unhold(held);
	}
}

/*
 * The note of @h's op @op, or NULL. Searched from the newest: the ops still moving are at the
 * tail, behind the ended ones held for credit at the head, which may be many.
 */
static struct xd_hnote *note_of(struct xd_whandle *h, uint64_t op)
{
	struct xd_hnote *n;

	TAILQ_FOREACH_REVERSE(n, &h->notes, xd_hnotes, link)
		if (n->op == op)
			return n;
	return NULL;
}

void xd_window_direct_ended(struct xd_daemon *d, uint64_t handle, uint64_t op, bool complete)
{
	struct xd_whandle *h = handle_find(d, handle);
	struct xd_hnote *n = h ? note_of(h, op) : NULL;

	if (n && !n->done) {
		n->done = true;
		n->complete = complete;
	}
	if (h)
		send_notes(h);
}

bool xd_window_direct_hold(struct xd_daemon *d, uint64_t handle, struct xd_op *op)
{
	struct xd_whandle *h = handle_find(d, handle);
	struct xd_hnote *n = h && h->credit ? note_of(h, op->id) : NULL;

	if (!n) /* (sent already, or an older owner: it completes at once, as before) */
		return false;
	xd_op_complete_held(op, &n->held_op);
	return true;
}

void xd_window_key_quiet(struct xd_daemon *d, uint64_t handle)
{
	struct xd_whandle *h = handle_find(d, handle);

	if (!h || h->key_users == 0)
		return;
	if (--h->key_users > 0 || !h->release_wait)
		return;
	h->release_wait = false;
	send_release(h);
	if (!h->conn && h->state == WH_CLOSED)
		handle_free(h); /* (its client closed it while requests used the key) */
}

static struct xd_op *internal_op(struct xd_window *w, const struct xd_wclaim *wc)
{
	struct xd_op *op =
		xd_op_create(w->d, wc->kind == XP_KIND_GET ? XP_KIND_READABLE : XP_KIND_WRITABLE);

	if (!op || !(op->segs = calloc(1, sizeof(*op->segs)))) {
		if (op)
			xd_op_discard(op);
		return NULL;
	}
	op->segs[0] = (struct xd_seg){ w->region, w->offset + wc->offset, wc->length };
	op->nsegs = 1;
	op->length = wc->length;
	op->client_id = w->client_id;
	op->timeout_ms = w->d->cfg.default_timeout_ms;
	op->on_end = window_op_ended;
	return op;
}

struct xd_op *xd_window_claim(struct xd_daemon *d, struct xd_peer *p, const struct xd_wclaim *wc,
			      int *err, char *msg, size_t msglen)
{
	struct xd_window *w = window_find(d, wc->window);
	struct xd_wopener *o = w ? opener_find(w, p, wc->handle) : NULL;
	char quota[200];

	if (!w)
		REFUSE(ENOENT, "the owner has no window %llu (closed, or never made)",
		       (unsigned long long)wc->window);
	if (w->closing)
		REFUSE(ECANCELED, "window %llu was closed by its owner",
		       (unsigned long long)wc->window);
	if (!o)
		REFUSE(EACCES, "window %llu is not open by this handle (closed, or never opened)",
		       (unsigned long long)wc->window);
	if (check_access(w->access, wc->kind, wc->window, err, msg, msglen) ||
	    check_range(w->length, wc, wc->window, err, msg, msglen))
		return NULL;
	if (o->inflight >= XD_WINDOW_MAX_INFLIGHT)
		REFUSE(EDQUOT, "%d gets and puts of this opener are in flight on window %llu",
		       XD_WINDOW_MAX_INFLIGHT, (unsigned long long)wc->window);
	if (o->nnotes >= XD_WINDOW_MAX_INFLIGHT) /* (a local opener: nothing else slows it) */
		REFUSE(EDQUOT,
		       "%d notifications of this opener wait for the owner's client of window "
		       "%llu, which reads slower than they come (PROTOCOL.md §10.9): try again",
		       XD_WINDOW_MAX_INFLIGHT, (unsigned long long)wc->window);
	/* The owner's side of each is charged to the window owner's uid and the daemon. */
	int rc = xd_charge(d, NULL, w->uid, XD_RES_OPS, 1, quota, sizeof(quota));
	if (rc)
		REFUSE(-rc, "owner: %s", quota);
	struct xd_wnote *n = calloc(1, sizeof(*n));
	struct xd_op *op = n ? internal_op(w, wc) : NULL;
	if (!op) {
		free(n);
		xd_uncharge(d, NULL, w->uid, XD_RES_OPS, 1);
		REFUSE(ENOMEM, "out of memory");
	}
	n->o = o;
	n->kind = wc->kind;
	n->offset = wc->offset;
	n->bytes = wc->length;
	if (wc->tag) {
		snprintf(n->tag, sizeof(n->tag), "%s", wc->tag);
		n->queued = true;
		TAILQ_INSERT_TAIL(&o->notes, n, link);
		o->nnotes++;
	}
	op->on_end_arg = n;
	o->inflight++;
	w->inflight++;
	xd_op_start_internal(op);
	return op;
}

static bool handle_known(struct xd_daemon *d, struct xd_peer *p, uint64_t handle);

/* ---- one-sided TCP windows (PROTOCOL.md §10.7) ---- */

/*
 * Once a window is open, a put is one WPUT (its bytes written into the window's range as they
 * arrive) and a get one WGET answered by DATA: no op at the owner, no claim, no DONE. The
 * owner checks each against what it granted at open (the opener is the set and the handle,
 * never what the frame says), acknowledges puts by count per opener in order (WACK), and
 * answers a refusal with CANCEL on the same lane, so that it comes before the WACK covering it.
 * What is under way is listed on its opener (o->xfers) and dropped when the opener goes.
 */

/* Queues @hdrlen bytes of @hdr then @len bytes of @x to opener @o on its lane. */
static int owner_send(struct xd_wopener *o, const uint8_t *hdr, uint32_t hdrlen, struct xd_xfer *x,
		      uint64_t off, uint32_t len)
{
	if (!o->peer)
		return -ENOTCONN;
	return xd_peer_send_wframe(o->peer, &o->lane, o->handle, hdr, hdrlen, x, off, len);
}

/*
 * The size of the pieces a get's reply or a put of @length bytes is cut into: XD_WSTRIPE, so
 * that the set's connections share it, but the largest frames beyond 64 pieces, so that a
 * huge one does not fill the XD_WFRAMES_MAX frames a connection may queue.
 */
static uint32_t stripe_piece(uint64_t length)
{
	return length > 64 * (uint64_t)XD_WSTRIPE ? XP_PEER_MAX_DATA : XD_WSTRIPE;
}

/*
 * Piece @i of a get's reply: the first on @o's lane, the others spread over the set's data
 * connections (striped, PROTOCOL.md §10.7). A get's DATA may come on any connection: the
 * opener places each by its offset and completes the get once every byte arrived, and what
 * orders a refusal before a WACK (one lane per opener) concerns puts only.
 */
static int owner_send_piece(struct xd_wopener *o, uint64_t i, const uint8_t *hdr, struct xd_xfer *x,
			    uint64_t off, uint32_t len)
{
	uint32_t lane = 0;

	if (i == 0)
		return owner_send(o, hdr, XP_PEER_HDR_LEN, x, off, len);
	if (!o->peer)
		return -ENOTCONN;
	return xd_peer_send_wframe(o->peer, &lane, o->handle + i, hdr, XP_PEER_HDR_LEN, x, off,
				   len);
}

/*
 * Refuses the opener's get or put @op (its id) with @err and @msg: CANCEL, on *@lane (a put's:
 * the connection it came on, ahead of the WACK that covers it there; a get's: @o's lane).
 */
static void fast_refuse(struct xd_wopener *o, uint32_t *lane, uint64_t op, int err, const char *msg)
{
	json_t *e = json_pack("{s:s, s:s}", "errno", xp_errno_name(err), "message", msg);
	struct xd_frame *f = e ? xd_frame_new(XP_PEER_CANCEL, 0, op, e, &err) : NULL;

	if (f && o->peer)
		xd_peer_send_wframe(o->peer, lane, o->handle, f->data, f->len, NULL, 0, 0);
	free(f);
	json_decref(e);
}

/*
 * How many of @o's WPUTs on connection @l a WACK may count: all taken, up to the first whose
 * notification waits for the owner's client (deliver()). Those wait at the head of @o's notes.
 */
static uint64_t ack_count(const struct xd_wopener *o, const struct xd_wlane *l)
{
	const struct xd_wnote *n;

	TAILQ_FOREACH(n, &o->notes, link) {
		if (!n->done)
			break;
		if (n->seq && n->lane == l->id)
			return n->seq - 1;
	}
	return l->frames;
}

/* One WACK per connection whose count of @o's WPUTs went up, on that connection. */
static void ack_cb(void *arg)
{
	struct xd_wopener *o = arg;
	uint8_t hdr[XP_PEER_HDR_LEN];

	for (int i = 0; i < XD_WLANES && !o->gone && o->peer; i++) {
		struct xd_wlane *l = &o->lanes[i];
		uint64_t count = l->id && l->acked != l->frames ? ack_count(o, l) : l->acked;
		struct xp_peer_hdr h = { .type = XP_PEER_WACK, .xfer = o->handle, .offset = count };
		uint32_t lane = l->id;
		if (count <= l->acked)
			continue;
		xp_peer_hdr_pack(&h, hdr);
		if (xd_peer_send_wframe(o->peer, &lane, o->handle, hdr, sizeof(hdr), NULL, 0, 0) ==
		    0)
			l->acked = count;
	}
}

/* WNOTIFY_ACK: how many of @o's WNOTIFYs have left this daemon's hands, in one message a turn. */
static void credit_cb(void *arg)
{
	struct xd_wopener *o = arg;
	json_t *j;

	if (o->gone || !o->peer || o->notes_taken == o->notes_acked)
		return;
	j = json_pack("{s:I}", "count", (json_int_t)o->notes_taken);
	if (j && xd_peer_send_ctrl(o->peer, 0, XP_PEER_WNOTIFY_ACK, 0, o->handle, j) == 0)
		o->notes_acked = o->notes_taken;
	json_decref(j);
}

/*
 * One more of @o's WPUTs that came on connection @via is taken: acknowledged with the others
 * at the next loop turn.
 */
static void frame_taken(struct xd_wopener *o, uint32_t via)
{
	struct xd_wlane *l = wlane_find(o->lanes, via); /* (made by xd_window_put_target()) */

	if (l)
		l->frames++;
	if (!o->gone)
		xd_defer(o->w->d, &o->ack_later, ack_cb, o);
}

/* @x (a landing or a get reply of @o) is over: counted, its tag delivered in order. */
static void fast_end(struct xd_wopener *o, struct xd_xfer *x, bool visible)
{
	struct xd_window *w = o->w;
	struct xd_wnote *n = x->wnote;

	TAILQ_REMOVE(&o->xfers, x, wlink);
	x->wctx = NULL;
	x->wnote = NULL;
	o->inflight--;
	w->inflight--;
	if (!x->source)
		frame_taken(o, x->wlane);
	if (visible && (x->source || x->wput_end)) {
		w->d->stats.window_ops++;
		if (x->source)
			o->gets++, w->gets++;
		else
			o->puts++, w->puts++;
	}
	if (n) {
		struct xd_wlane *l = x->source ? NULL : wlane_find(o->lanes, x->wlane);
		n->done = true;
		n->visible = visible;
		n->lane = l ? l->id : 0;
		n->seq = l ? l->frames : 0; /* (frame_taken() counted it) */
		deliver(o);
	}
	if (o->gone || w->closing)
		reap_soon(w);
}

/* The last reference to a landing or a get reply went: the transport is done with it. */
static void fast_freed(struct xd_xfer *x)
{
	struct xd_wopener *o = x->wctx;

	if (o)
		fast_end(o, x, !x->wdrop && !x->io_err && xd_xfer_bytes(x) == x->length);
}

static void fast_detach_all(struct xd_wopener *o)
{
	struct xd_xfer *x;

	while ((x = TAILQ_FIRST(&o->xfers))) {
		x->wdrop = true;
		fast_end(o, x, false);
	}
}

/* A landing (a put's frame) or a get's reply over [@off, +@len) of @o's window. */
static struct xd_xfer *fast_xfer(struct xd_wopener *o, uint64_t op, uint64_t off, uint64_t len,
				 bool source)
{
	struct xd_window *w = o->w;
	struct xd_xfer *x = calloc(1, sizeof(*x));

	if (!x || !(x->segs = calloc(1, sizeof(*x->segs)))) {
		free(x);
		return NULL;
	}
	x->peer = o->peer;
	x->id = op;
	x->source = source;
	x->segs[0] = (struct xd_seg){ w->region, w->offset + off, len };
	xd_region_ref(w->region);
	x->nsegs = 1;
	x->length = len;
	x->refs = 1;
	x->wfast = true;
	x->wctx = o;
	x->on_free = fast_freed;
	TAILQ_INSERT_TAIL(&o->xfers, x, wlink);
	o->inflight++;
	w->inflight++;
	return x;
}

/*
 * Whether @order (XP_WIN_SEQ) may name one of @o's tagged ops: none notified or waiting has
 * it, and it is within XD_WINDOW_MAX_INFLIGHT of the next to deliver (a bound on the notes an
 * opener can make wait for one it never sends).
 */
static bool order_ok(const struct xd_wopener *o, uint64_t order)
{
	const struct xd_wnote *n;

	if (order < o->next_order || order - o->next_order >= XD_WINDOW_MAX_INFLIGHT)
		return false;
	TAILQ_FOREACH(n, &o->notes, link)
		if (n->order == order)
			return false;
	return true;
}

/* Queues @n among @o's notes: by its count if it has one, else last (the order it came). */
static void note_insert(struct xd_wopener *o, struct xd_wnote *n)
{
	struct xd_wnote *at = NULL;

	if (!n->order) {
		TAILQ_INSERT_TAIL(&o->notes, n, link);
	} else {
		/* after the last one with no count or a smaller one, from the tail */
		TAILQ_FOREACH_REVERSE(at, &o->notes, xd_wnotes, link) {
			if (!at->order || at->order < n->order)
				break;
		}
		if (at)
			TAILQ_INSERT_AFTER(&o->notes, at, n, link);
		else
			TAILQ_INSERT_HEAD(&o->notes, n, link);
	}
	o->nnotes++;
}

/* Queues @x's notification (tagged: in order with @o's others, @order's). 0 or -ENOMEM. */
static int fast_note(struct xd_wopener *o, struct xd_xfer *x, enum xp_kind kind, uint64_t off,
		     uint64_t bytes, const uint8_t *tag, uint16_t tag_len, uint64_t order)
{
	struct xd_wnote *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	n->o = o;
	n->kind = kind;
	n->offset = off;
	n->bytes = bytes;
	n->queued = true;
	n->order = order;
	memcpy(n->tag, tag, tag_len);
	note_insert(o, n);
	x->wnote = n;
	return 0;
}

/*
 * A refused tagged op keeps its place in @o's order (XP_WIN_SEQ): a note that ended and
 * notifies nothing, so that the later ones do not wait for it. 0, or -ENOMEM: the set fails
 * (the later ones would wait for ever).
 */
static int order_skip(struct xd_wopener *o, uint64_t order)
{
	struct xd_wnote *n = order ? calloc(1, sizeof(*n)) : NULL;

	if (!order)
		return 0;
	if (!n) {
		xd_link_fail(o->peer, ENOMEM, "window %llu: out of memory for a refused op's place",
			     (unsigned long long)o->w->id);
		return -ENOMEM;
	}
	n->o = o;
	n->queued = true;
	n->done = true;
	n->order = order;
	note_insert(o, n);
	deliver(o);
	return 0;
}

/*
 * The count a WPUT's or WGET's @meta (prefix @wp) carries (XP_WIN_SEQ), 0 if none; -EPROTO in
 * *@err if @o may not take it (order_ok()).
 */
static uint64_t frame_order(const struct xd_wopener *o, const struct xp_win_prefix *wp,
			    const uint8_t *meta, int *err)
{
	uint64_t order;

	if (!(wp->flags & XP_WIN_SEQ))
		return 0;
	order = xp_peer_bin_field(meta + XP_WIN_PREFIX_LEN, XP_WIN_SEQ_LEN);
	if (!order_ok(o, order))
		*err = -EPROTO;
	return order;
}

/*
 * The opener (@p, the handle of @wp) of the window @wp names, or NULL: a frame of a handle
 * that was closed or revoked (the two ends crossed: dropped), or -EPROTO in *err for a handle
 * this set has open on another window (a forged window id).
 */
static struct xd_wopener *fast_opener(struct xd_peer *p, const struct xp_win_prefix *wp, int *err)
{
	struct xd_window *w = window_find(p->d, wp->window);
	struct xd_wopener *o = w ? opener_find(w, p, wp->handle) : NULL;

	if (!o && handle_known(p->d, p, wp->handle))
		*err = -EPROTO;
	return o && !w->closing ? o : NULL;
}

/* The owner's checks of a get or put, against what it granted at open. 0 or -errno, @msg. */
static int fast_check(struct xd_wopener *o, enum xp_kind kind, uint64_t off, uint64_t len,
		      char *msg, size_t msglen)
{
	struct xd_window *w = o->w;
	struct xd_wclaim wc = { .kind = kind, .offset = off, .length = len };
	int err = 0;

	if (check_access(w->access, kind, w->id, &err, msg, msglen) ||
	    check_range(w->length, &wc, w->id, &err, msg, msglen))
		return err;
	if (!w->region->mem->mapped) {
		snprintf(msg, msglen,
			 "window %llu is over a file region: its gets and puts go as claims "
			 "only (one-sided frames read and write mappings)",
			 (unsigned long long)w->id);
		return -EOPNOTSUPP;
	}
	if (o->inflight >= XD_WINDOW_MAX_INFLIGHT || o->nnotes >= XD_WINDOW_MAX_INFLIGHT) {
		snprintf(msg, msglen,
			 "%d gets and puts of this opener are in flight on window %llu",
			 XD_WINDOW_MAX_INFLIGHT, (unsigned long long)w->id);
		return -EDQUOT;
	}
	return 0;
}

/*
 * A one-sided frame's tag (@len bytes at @tag) is told to the owner's client in JSON
 * (window.notified): bytes that make no JSON string (a NUL, anything but UTF-8) would fail to
 * build that notification, which then went missing without a word while the opener was
 * acknowledged. Such a frame breaks the protocol (PROTOCOL.md §10.7). jansson checks, as the
 * notification itself would.
 */
static bool frame_tag_ok(const uint8_t *tag, uint16_t len)
{
	json_t *s;

	if (len == 0)
		return true;
	if (memchr(tag, 0, len))
		return false;
	s = json_stringn((const char *)tag, len);
	json_decref(s);
	return s != NULL;
}

struct xd_xfer *xd_window_put_target(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
				     const uint8_t *meta, uint32_t metalen, int *err)
{
	struct xp_win_prefix wp;
	char msg[XD_CAUSE_MAX];

	if (!(h->flags & XP_PEER_FROM_ACTIVE) || xp_win_prefix_unpack(meta, &wp) < 0 ||
	    metalen != xp_win_meta_len(&wp) || (wp.tag_len && !(wp.flags & XP_WIN_LAST)) ||
	    ((wp.flags & XP_WIN_PIECE) && (!(wp.flags & XP_WIN_LAST) || wp.tag_len)) ||
	    !frame_tag_ok(meta + metalen - wp.tag_len, wp.tag_len)) {
		*err = -EPROTO;
		return NULL;
	}
	const uint8_t *tag = meta + metalen - wp.tag_len;
	struct xd_wopener *o = fast_opener(p, &wp, err);
	struct xd_wlane *l = o ? wlane_get(o->lanes, via) : NULL;
	uint64_t order = l ? frame_order(o, &wp, meta, err) : 0;
	if (o && !l)
		*err = -EPROTO; /* (more connections than a set has) */
	if (!l || *err)
		return NULL;
	int rc = fast_check(o, XP_KIND_PUT, h->offset, wp.length, msg, sizeof(msg));
	struct xd_xfer *x = rc ? NULL : fast_xfer(o, h->xfer, h->offset, wp.length, false);
	/* A put's frames come in a row on one connection: its notification names all of them. */
	if (l->put_bytes == 0)
		l->put_off = h->offset;
	l->put_bytes += wp.length;
	uint64_t put_off = l->put_off, put_bytes = l->put_bytes;
	if (wp.flags & XP_WIN_LAST)
		l->put_bytes = 0;
	if (x && wp.tag_len &&
	    fast_note(o, x, XP_KIND_PUT, put_off, put_bytes, tag, wp.tag_len, order)) {
		xd_xfer_unref(x);
		x = NULL;
	}
	if (!x) {
		fast_refuse(o, &via, h->xfer, rc ? -rc : ENOMEM, rc ? msg : "out of memory");
		frame_taken(o, via);
		order_skip(o, order);
		return NULL;
	}
	/* A striped put's later pieces (PIECE) are not puts of their own: it counts once. An
	 * opener that does not mark them (its owner did not offer "pieces") counts per piece. */
	x->wput_end = (wp.flags & (XP_WIN_LAST | XP_WIN_PIECE)) == XP_WIN_LAST;
	x->wlane = via;
	return x;
}

/* WGET: the window's bytes go back as DATA frames of the opener's op, on @o's lane. */
static int owner_wget(struct xd_peer *p, const struct xp_peer_hdr *h, const uint8_t *pl,
		      uint32_t len)
{
	struct xp_win_prefix wp;
	char msg[XD_CAUSE_MAX];
	int err = 0;

	if (!(h->flags & XP_PEER_FROM_ACTIVE) || xp_win_prefix_unpack(pl, &wp) < 0 ||
	    len != xp_win_meta_len(&wp) || (wp.flags & ~XP_WIN_SEQ) || wp.length == 0 ||
	    !frame_tag_ok(pl + len - wp.tag_len, wp.tag_len))
		return -EPROTO;
	struct xd_wopener *o = fast_opener(p, &wp, &err);
	uint64_t order = o ? frame_order(o, &wp, pl, &err) : 0;
	if (!o || err)
		return err;
	int rc = fast_check(o, XP_KIND_GET, h->offset, wp.length, msg, sizeof(msg));
	struct xd_xfer *x = rc ? NULL : fast_xfer(o, h->xfer, h->offset, wp.length, true);
	if (x && wp.tag_len &&
	    fast_note(o, x, XP_KIND_GET, h->offset, wp.length, pl + len - wp.tag_len, wp.tag_len,
		      order))
		rc = -ENOMEM;
	uint32_t piece = stripe_piece(wp.length);
	for (uint64_t off = 0, i = 0; x && !rc && off < wp.length; off += piece, i++) {
		uint32_t n = wp.length - off < piece ? (uint32_t)(wp.length - off) : piece;
		struct xp_peer_hdr dh = {
			.type = XP_PEER_DATA, .length = n, .xfer = h->xfer, .offset = off
		};
		uint8_t hdr[XP_PEER_HDR_LEN];
		xp_peer_hdr_pack(&dh, hdr);
		rc = owner_send_piece(o, i, hdr, x, off, n);
		if (rc == -ENOBUFS)
			snprintf(msg, sizeof(msg),
				 "the owner has %d window frames queued to this peer, which does "
				 "not read them",
				 XD_WFRAMES_MAX);
	}
	if (rc == -ENOMEM || (!x && !rc))
		snprintf(msg, sizeof(msg), "out of memory");
	if (rc || !x) {
		if (x)
			x->wdrop = true; /* (frames already queued go unsent) */
		fast_refuse(o, &o->lane, h->xfer, rc ? -rc : ENOMEM, msg);
		if (!x || !x->wnote)
			order_skip(o, order); /* (a note made ends with x, notifying nothing) */
	}
	xd_xfer_unref(x); /* (the frames hold theirs) */
	return 0;
}

/* Whether the owner took every WPUT of put @x of @h: on each connection they went on. */
static bool put_acked(struct xd_whandle *h, const struct xd_xfer *x)
{
	for (int i = 0; i < x->nwl; i++) {
		const struct xd_wlane *l = wlane_find(h->lanes, x->wl_lane[i]);
		if (!l || l->acked < x->wl_seq[i])
			return false;
	}
	return true;
}

/*
 * WACK on connection @via: the owner took @count of the handle's WPUTs sent on it; the puts
 * all of whose frames it took end, in the order posted.
 */
static int opener_wack(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *hdr,
		       void (*acked)(struct xd_xfer *x))
{
	struct xd_whandle *h = handle_of_peer(p, hdr->xfer);
	struct xd_xfer *x;

	if (hdr->flags & XP_PEER_FROM_ACTIVE)
		return -EPROTO;
	if (!h)
		return 0; /* (closed here, or revoked: the two ends crossed) */
	struct xd_wlane *l = wlane_find(h->lanes, via);
	uint64_t sent = l ? l->frames : 0, before = l ? l->acked : 0;
	if (hdr->offset > sent || hdr->offset < before) {
		/* A rogue or broken owner: no put may complete on its word (the set fails). */
		xd_link_fail(p, EPROTO,
			     "window handle %llu: the owner acknowledged %llu WPUTs on connection "
			     "%u, which carried %llu (%llu before): beyond the puts sent or going "
			     "back (§10.7)",
			     (unsigned long long)h->id, (unsigned long long)hdr->offset, via,
			     (unsigned long long)sent, (unsigned long long)before);
		return -EPROTO;
	}
	if (!l)
		return 0; /* (a count of 0 on a connection that carried none) */
	l->acked = hdr->offset;
	while ((x = TAILQ_FIRST(&h->puts)) && put_acked(h, x)) {
		TAILQ_REMOVE(&h->puts, x, wlink);
		h->nfast--;
		x->wctx = NULL;
		acked(x);
	}
	return 0;
}

int xd_window_frame(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
		    const uint8_t *payload, uint32_t len, void (*acked)(struct xd_xfer *x))
{
	return h->type == XP_PEER_WGET ? owner_wget(p, h, payload, len) :
					 opener_wack(p, via, h, acked);
}

/* ---- one-sided TCP windows: the opener ---- */

static void handle_fast_freed(struct xd_xfer *x)
{
	struct xd_whandle *h = x->wctx;

	if (!h)
		return;
	if (x->source)
		TAILQ_REMOVE(&h->puts, x, wlink);
	else
		TAILQ_REMOVE(&h->gets, x, wlink);
	h->nfast--;
}

static void handle_fast_detach(struct xd_whandle *h)
{
	struct xd_xfer *x;

	while ((x = TAILQ_FIRST(&h->puts)) || (x = TAILQ_FIRST(&h->gets))) {
		handle_fast_freed(x);
		x->wctx = NULL;
	}
}

/*
 * The WPUT or WGET header, prefix and tag for @len bytes at window offset @off into @buf; a
 * put's @last frame carries the tag, a @piece (a striped put's second or later) says so.
 */
static uint32_t fast_header(const struct xd_whandle *h, const struct xd_xfer *x, uint64_t off,
			    uint32_t len, bool last, bool piece, uint8_t *buf)
{
	const struct xd_wreq *rq = x->op->wreq;
	bool put = x->source;
	uint16_t tag_len = rq->has_tag && last ? (uint16_t)strlen(rq->tag) : 0;
	bool seq = h->seq && tag_len; /* (counted by the caller once queued: seq_sent) */
	struct xp_win_prefix wp = { .window = h->window,
				    .handle = h->id,
				    .length = len,
				    .tag_len = tag_len,
				    .flags = (put && last ? XP_WIN_LAST : 0) |
					     (put && piece && h->pieces ? XP_WIN_PIECE : 0) |
					     (seq ? XP_WIN_SEQ : 0) };
	uint32_t meta = xp_win_meta_len(&wp);
	struct xp_peer_hdr ph = { .type = put ? XP_PEER_WPUT : XP_PEER_WGET,
				  .flags = XP_PEER_FROM_ACTIVE,
				  .length = meta + (put ? len : 0),
				  .xfer = x->id,
				  .offset = rq->offset + off };

	xp_peer_hdr_pack(&ph, buf);
	xp_win_prefix_pack(&wp, buf + XP_PEER_HDR_LEN);
	if (seq)
		xp_peer_bin_put(buf + XP_PEER_HDR_LEN + XP_WIN_PREFIX_LEN, h->seq_sent + 1,
				XP_WIN_SEQ_LEN);
	memcpy(buf + XP_PEER_HDR_LEN + meta - tag_len, rq->tag, tag_len);
	return XP_PEER_HDR_LEN + meta;
}

/* Whether @x's frame that is its @last carries a count (XP_WIN_SEQ): fast_header() says so. */
static bool sends_seq(const struct xd_whandle *h, const struct xd_xfer *x, bool last)
{
	return h->seq && last && x->op->wreq->has_tag && x->op->wreq->tag[0];
}

/*
 * Queues WPUT [@off, +@len) of put @x, the put's @last (or a later @piece of a striped one),
 * on connection *@lane (0: picked by @key), and counts it there: @x's last frame on that
 * connection is this one. 0 or -errno.
 */
static int put_frame(struct xd_whandle *h, struct xd_xfer *x, uint32_t *lane, uint64_t key,
		     uint64_t off, uint32_t len, bool last, bool piece)
{
	uint8_t buf[XP_PEER_HDR_LEN + XP_WIN_MAX_META];
	uint32_t n = fast_header(h, x, off, len, last, piece, buf);
	int rc = xd_peer_send_wframe(h->peer, lane, key, buf, n, x, off, len);
	struct xd_wlane *l = rc ? NULL : wlane_get(h->lanes, *lane);
	int i = 0;

	if (rc)
		return rc;
	h->seq_sent += sends_seq(h, x, last);
	while (i < x->nwl && x->wl_lane[i] != *lane)
		i++;
	if (!l || i == XD_WSTRIPE_LANES) {
		/* (cannot be: a set has at most XD_WLANES connections, pieces take 4 of them) */
		xd_link_fail(h->peer, EPROTO, "window handle %llu: no count for connection %u",
			     (unsigned long long)h->id, *lane);
		return -EPROTO;
	}
	l->frames++;
	x->next_off += len; /* (bytes queued in frames, not yet all sent: claim.c's drain()) */
	x->wl_lane[i] = *lane;
	x->wl_seq[i] = l->frames;
	x->nwl = i == x->nwl ? (uint8_t)(i + 1) : x->nwl;
	return 0;
}

/*
 * Queues put @x's WPUTs. A tagged put goes in frames of at most XP_PEER_MAX_DATA on one
 * connection, the last with the tag: the owner names the whole put in the notification once
 * the last landed. Where the owner orders notifications by the handle's count (XP_WIN_SEQ),
 * each tagged put goes on the next of the set's data connections in turn, so that a stream
 * of them (a request's KV blocks) uses them all as a pairing's DATA does; else on the
 * handle's lane, whose order is then the notifications'. An untagged put larger than
 * XD_WSTRIPE goes as pieces, each a put of its own for the owner (LAST; the second and later
 * also PIECE, so that the owner counts the put once), spread over up to XD_WSTRIPE_LANES of
 * the set's data connections: one large put uses them all. Each connection's WACKs count what
 * it carried (put_acked()).
 */
static int put_send(struct xd_whandle *h, struct xd_xfer *x)
{
	const struct xd_wreq *rq = x->op->wreq;
	bool stripe = !rq->has_tag && x->length > XD_WSTRIPE;
	bool spread = sends_seq(h, x, true);
	uint32_t piece = stripe ? stripe_piece(x->length) : XP_PEER_MAX_DATA;
	uint32_t mine = 0; /* a spread put's connection: all its frames in a row there */
	int rc = 0;

	x->nwl = 0;
	for (uint64_t off = 0, i = 0; off < x->length && !rc; off += piece, i++) {
		uint64_t left = x->length - off;
		uint32_t len = left < piece ? (uint32_t)left : piece;
		uint32_t other = 0;
		uint32_t *lane = spread				? &mine :
				 i % XD_WSTRIPE_LANES && stripe ? &other :
								  &h->lane;
		uint64_t key = spread ? h->id + h->seq_sent : h->id + i % XD_WSTRIPE_LANES;
		rc = put_frame(h, x, lane, key, off, len, stripe || off + len == x->length,
			       stripe && i > 0);
	}
	return rc;
}

bool xd_window_frames_ok(struct xd_daemon *d, uint64_t handle)
{
	struct xd_whandle *h = handle_find(d, handle);

	return h && !h->file;
}

int xd_window_fast_start(struct xd_xfer *x)
{
	struct xd_whandle *h = handle_find(x->peer->d, x->op->wreq->handle);
	int rc;

	if (!h || h->state != WH_OPEN || h->peer != x->peer)
		return -ECANCELED;
	/*
	 * With nothing in flight the lane is picked again: opened right after the set came up, a
	 * handle may have found only its first connection, which becomes the control lane.
	 */
	if (h->nfast == 0)
		h->lane = 0;
	if (!x->source) {
		uint8_t buf[XP_PEER_HDR_LEN + XP_WIN_MAX_META];
		uint32_t n = fast_header(h, x, 0, (uint32_t)x->length, true, false, buf);
		rc = xd_peer_send_wframe(h->peer, &h->lane, h->id, buf, n, NULL, 0, 0);
		if (rc)
			return rc;
		h->seq_sent += sends_seq(h, x, true);
		TAILQ_INSERT_TAIL(&h->gets, x, wlink);
	} else {
		rc = put_send(h, x);
		if (rc)
			return rc; /* (frames already queued land; the owner counts them) */
		TAILQ_INSERT_TAIL(&h->puts, x, wlink);
	}
	x->wctx = h;
	x->on_free = handle_fast_freed;
	h->nfast++;
	return 0;
}

/* ---- peer messages ---- */

static json_t *error_json(int err, const char *message)
{
	return json_pack("{s:s, s:s}", "errno", xp_errno_name(err), "message", message);
}

static int send_open_err(struct xd_peer *p, uint32_t via, uint64_t handle, int err, const char *msg)
{
	json_t *e = error_json(err, msg);
	int rc = xd_peer_send_ctrl(p, via, XP_PEER_WOPEN_ERR, 0, handle, e);

	json_decref(e);
	return rc == -ENOMEM ? rc : 0;
}

/* Whether @p already has handle @handle open on any window (its ids are used once). */
static bool handle_known(struct xd_daemon *d, struct xd_peer *p, uint64_t handle)
{
	struct xd_window *w;

	TAILQ_FOREACH(w, &d->windows, link)
		if (opener_find(w, p, handle))
			return true;
	return false;
}

/*
 * One-sided transports: binds a key for opener @o onto exactly the window's range, with the
 * window's access, to the queue pair of connection @via (PROTOCOL.md §10.6), and puts it in
 * the WOPEN_OK @ok as {"addr", "len", "rkey"}. Without one (a device without memory windows,
 * whose region rkey would reach the whole region; a file region) the opener claims each get
 * and put instead. Returns 0 or -errno with the cause in @msg.
 */
static int grant_key(struct xd_wopener *o, uint32_t via, json_t *ok, char *msg, size_t len)
{
	struct xd_window *w = o->w;
	const struct xd_transport_ops *t = o->peer->transport;
	struct xd_seg seg = { w->region, w->offset, w->length };
	uint32_t rkey;

	if (!t->one_sided || !w->region->mem->mapped)
		return 0;
	int rc = t->grant_open(o->peer, via, &seg, 1, w->access, &rkey, &o->grant, msg, len);
	if (rc < 0 || !o->grant)
		return rc;
	o->gt = t;
	if (json_object_set_new(
		    ok, "addr",
		    json_integer((json_int_t)(uintptr_t)(w->region->base + w->offset))) ||
	    json_object_set_new(ok, "len", json_integer((json_int_t)w->length)) ||
	    json_object_set_new(ok, "rkey", json_integer((json_int_t)rkey))) {
		snprintf(msg, len, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/*
 * A keyed opener that asked for it gets a credit of WNOTIFYs (PROTOCOL.md §10.9), in the
 * WOPEN_OK @ok as "notify_credit": its tagged gets and puts then wait for the owner's client
 * instead of filling this daemon. Returns 0 or -ENOMEM.
 */
static int grant_credit(struct xd_wopener *o, json_t *ok)
{
	o->credit = XD_NOTIFY_CREDIT;
	return json_object_set_new(ok, "notify_credit", json_integer(XD_NOTIFY_CREDIT)) ? -ENOMEM :
											  0;
}

/* The owner: WOPEN {window, node, epoch, proof | token, notify_credit?}. */
static int handle_wopen(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json)
{
	struct xd_daemon *d = p->d;
	const char *node, *token = NULL, *proof = NULL;
	json_int_t window, epoch;
	uint8_t nodeb[XP_ID_BYTES], tok[XP_ID_BYTES], mac[XD_MAC_LEN];
	char msg[XD_CAUSE_MAX];
	int err, wants_credit = 0;

	if (!(h->flags & XP_PEER_FROM_ACTIVE) || !json ||
	    json_unpack(json, "{s:I, s:s, s:I, s?s, s?s, s?b}", "window", &window, "node", &node,
			"epoch", &epoch, "token", &token, "proof", &proof, "notify_credit",
			&wants_credit) ||
	    !token == !proof || window < 0 || epoch < 0 ||
	    xp_hex_decode(node, nodeb, XP_ID_BYTES) ||
	    (token && xp_hex_decode(token, tok, XP_ID_BYTES)) ||
	    (proof && xp_hex_decode(proof, mac, XD_MAC_LEN)) || handle_known(d, p, h->xfer))
		return -EPROTO;
	if (d->keys.n ? !proof : !token)
		return send_open_err(p, via, h->xfer, EACCES,
				     d->keys.n ? "the owner takes a proof of the window's "
						 "token only (it has a cluster key)" :
						 "the owner has no cluster key to check a proof");
	if (memcmp(nodeb, d->node, XP_ID_BYTES) != 0)
		return send_open_err(p, via, h->xfer, EHOSTUNREACH,
				     "window metadata names another node");
	struct open_req rq = { .window = (uint64_t)window,
			       .epoch = (uint64_t)epoch,
			       .token = token ? tok : NULL,
			       .proof = proof ? mac : NULL,
			       .opener = p->node,
			       .opener_epoch = p->epoch,
			       .handle = h->xfer };
	struct xd_window *w = open_lookup(d, &rq, &err, msg, sizeof(msg));
	if (!w)
		return send_open_err(p, via, h->xfer, -err, msg);
	struct xd_wopener *o = opener_add(w, p, h->xfer);
	if (!o)
		return send_open_err(p, via, h->xfer, ENOMEM, "out of memory");
	/* A window over a file region takes claims only (§10.7): the opener is told so; over a
	 * mapping, that the owner takes PIECE (a striped put counted once). The key and its
	 * WOPEN_OK go on a connection that carries data, behind the bind. */
	uint32_t key_via = p->transport->data_via ? p->transport->data_via(p, via) : via;
	json_t *ok = w->region->mem->mapped ? json_pack("{s:b, s:b}", "pieces", 1, "seq", 1) :
					      json_pack("{s:b}", "file", 1);
	err = ok ? grant_key(o, key_via, ok, msg, sizeof(msg)) : -ENOMEM;
	if (err) {
		json_decref(ok);
		w->nopeners--;
		opener_free(o);
		return send_open_err(p, via, h->xfer, -err, ok ? msg : "out of memory");
	}
	if (o->grant && wants_credit && grant_credit(o, ok)) {
		json_decref(ok);
		w->nopeners--;
		opener_free(o);
		return send_open_err(p, via, h->xfer, ENOMEM, "out of memory");
	}
	int rc = xd_peer_send_ctrl(p, key_via, XP_PEER_WOPEN_OK, 0, h->xfer, ok);
	json_decref(ok);
	return rc == -ENOMEM ? rc : 0;
}

/* The opener: the key a one-sided owner put in WOPEN_OK, if any. Returns 0 or -EPROTO. */
static int take_key(struct xd_whandle *h, uint32_t via, json_t *json)
{
	json_int_t addr, len, rkey;

	if (!json || !json_object_get(json, "rkey"))
		return 0; /* none: each get and put is claimed */
	if (!h->peer->transport->one_sided ||
	    json_unpack(json, "{s:I, s:I, s:I}", "addr", &addr, "len", &len, "rkey", &rkey) ||
	    (uint64_t)len != h->length || rkey < 0 || rkey > UINT32_MAX)
		return -EPROTO;
	h->keyed = true;
	h->raddr = (uint64_t)addr;
	h->rkey = (uint32_t)rkey;
	h->via = via;
	h->key_peer = h->peer;
	return 0;
}

/* The opener: WOPEN_OK or WOPEN_ERR for handle @h. */
static int handle_open_answer(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *hdr,
			      json_t *json)
{
	struct xd_whandle *h = handle_of_peer(p, hdr->xfer);
	const char *name = NULL, *raw = NULL;
	char message[XD_CAUSE_MAX];

	if (hdr->flags & XP_PEER_FROM_ACTIVE)
		return -EPROTO;
	if (hdr->type == XP_PEER_WOPEN_ERR &&
	    (!json || json_unpack(json, "{s:s, s:s}", "errno", &name, "message", &raw)))
		return -EPROTO;
	if (!h || h->state != WH_OPENING || !h->open_sent)
		return h ? -EPROTO : 0; /* (unknown: the two ends crossed) */
	if (hdr->type == XP_PEER_WOPEN_OK) {
		int file = 0, pieces = 0, seq = 0;
		json_int_t credit = 0;
		if (json && json_unpack(json, "{s?b, s?b, s?b, s?I}", "file", &file, "pieces",
					&pieces, "seq", &seq, "notify_credit", &credit))
			return -EPROTO;
		h->file = file;
		h->pieces = pieces;
		h->seq = seq;
		if (take_key(h, via, json) < 0 || credit < 0 || credit > XD_WINDOW_MAX_INFLIGHT ||
		    (credit && !h->keyed))
			return -EPROTO;
		h->credit = (uint32_t)credit;
		h->state = WH_OPEN;
		if (h->conn) {
			xd_client_reply(h->conn, h->reply_id, open_result(h));
			return 0;
		}
		handle_close(h, "its client disconnected while it was opening");
		return 0;
	}
	xd_escape(raw, message, sizeof(message));
	if (h->conn)
		xd_client_reply_error(h->conn, h->reply_id, XP_E_FAILED,
				      xp_errno_from_name(name) ?: EIO, message);
	handle_free(h);
	return 0;
}

/* WCLOSE: from an opener (it let go), or from the owner (revoked). */
static int handle_wclose(struct xd_peer *p, const struct xp_peer_hdr *hdr, json_t *json)
{
	const char *name = NULL, *raw = NULL;
	char message[XD_CAUSE_MAX - 40], cause[XD_CAUSE_MAX];
	json_int_t window;
	struct xd_window *w;

	if (hdr->flags & XP_PEER_FROM_ACTIVE) {
		if (!json || json_unpack(json, "{s:I}", "window", &window))
			return -EPROTO;
		w = window_find(p->d, (uint64_t)window);
		struct xd_wopener *o = w ? opener_keyed(w, p, hdr->xfer) : NULL;
		if (!o)
			o = w ? opener_find(w, p, hdr->xfer) : NULL;
		if (!o)
			return 0;
		opener_key_close(o); /* it let go: no request of it uses the key any more */
		opener_close(o, XP_ST_CANCELLED, ECANCELED, "the opener closed its handle");
		reap_soon(w);
		return 0;
	}
	if (!json || json_unpack(json, "{s:s, s:s}", "errno", &name, "message", &raw))
		return -EPROTO;
	struct xd_whandle *h = handle_of_peer(p, hdr->xfer);
	if (!h || h->state == WH_OPENING)
		return h ? -EPROTO : 0;
	xd_escape(raw, message, sizeof(message));
	snprintf(cause, sizeof(cause), "peer: %s", message);
	handle_revoked(h, xp_errno_from_name(name) ?: EIO, cause);
	return 0;
}

/*
 * Keeps a keyed opener's notification @n (copied) till the owner's client catches up. An opener
 * with credit waits for WNOTIFY_ACKs before it sends more than its credit; one without (an
 * older daemon) is not slowed by anything. Either is revoked past what it may have waiting (its
 * credit, or XD_WINDOW_MAX_INFLIGHT), its notifications so far still reaching the owner: a
 * flooding opener ends, never the owner's client.
 */
static void note_wait(struct xd_wopener *o, const struct xd_wnote *n)
{
	unsigned most = o->credit ? o->credit : XD_WINDOW_MAX_INFLIGHT;
	struct xd_wnote *kept = o->nnotes < most ? malloc(sizeof(*kept)) : NULL;
	char cause[XD_CAUSE_MAX];

	if (!kept) {
		snprintf(cause, sizeof(cause),
			 "%u notifications of this opener wait for the window owner's client, "
			 "which does not read them%s (PROTOCOL.md §10.9)",
			 o->nnotes, o->credit ? ", and it sent past its credit" : "");
		xd_log(XD_LOG_WARN, "window %llu: opener %s/%llu revoked: %s",
		       (unsigned long long)o->w->id, o->node_hex, (unsigned long long)o->handle,
		       cause);
		tell_opener(o, EDQUOT, cause);
		o->releasing = o->grant != NULL; /* its key goes once it let go */
		o->release_since_us = xd_now_us();
		opener_close(o, XP_ST_ERRORED, EDQUOT, cause);
		return;
	}
	*kept = *n;
	kept->done = kept->visible = kept->queued = kept->wnotify = true;
	TAILQ_INSERT_TAIL(&o->notes, kept, link);
	o->nnotes++;
}

/*
 * The owner: WNOTIFY {window, kind, offset, bytes, tag} from a keyed opener, after the bytes
 * of its get or put on the same queue pair: told to the owner's client as window.notified.
 * A notification its key could not have earned (access, range) is a protocol error.
 */
static int handle_wnotify(struct xd_peer *p, const struct xp_peer_hdr *hdr, json_t *json)
{
	json_int_t window, offset, bytes;
	const char *kind, *tag;
	char msg[XD_CAUSE_MAX];
	int err;

	if (!(hdr->flags & XP_PEER_FROM_ACTIVE) || !json ||
	    json_unpack(json, "{s:I, s:s, s:I, s:I, s:s}", "window", &window, "kind", &kind,
			"offset", &offset, "bytes", &bytes, "tag", &tag) ||
	    window < 0 || offset < 0 || bytes <= 0 || strlen(tag) > XP_MAX_TAG)
		return -EPROTO;
	int k = xp_kind_from_name(kind);
	struct xd_wclaim wc = { .kind = k, .offset = (uint64_t)offset, .length = (uint64_t)bytes };
	struct xd_window *w = window_find(p->d, (uint64_t)window);
	struct xd_wopener *o = w ? opener_find(w, p, hdr->xfer) : NULL;
	if ((k != XP_KIND_GET && k != XP_KIND_PUT) || (o && !o->grant))
		return -EPROTO;
	if (!o || w->closing)
		return 0; /* (crossed with a close: its ops did not count) */
	if (check_access(w->access, wc.kind, w->id, &err, msg, sizeof(msg)) ||
	    check_range(w->length, &wc, w->id, &err, msg, sizeof(msg)))
		return -EPROTO;
	struct xd_wnote n = { .o = o, .kind = wc.kind, .offset = wc.offset, .bytes = wc.length };
	snprintf(n.tag, sizeof(n.tag), "%s", tag);
	if (w->owner && (owner_behind(w) || !TAILQ_EMPTY(&o->notes))) {
		note_wait(o, &n);
	} else {
		if (w->owner)
			push_notified(w, &n);
		note_taken(o); /* (no owner to tell: dropped, which gives its credit back too) */
	}
	w->d->stats.window_ops++;
	if (wc.kind == XP_KIND_GET)
		o->gets++, w->gets++;
	else
		o->puts++, w->puts++;
	return 0;
}

/* One more WNOTIFY of @o left this daemon's hands: acknowledged at the end of the loop turn. */
static void note_taken(struct xd_wopener *o)
{
	o->notes_taken++;
	if (o->credit && o->peer && !o->gone)
		xd_defer(o->w->d, &o->credit_later, credit_cb, o);
}

/*
 * The opener: WNOTIFY_ACK {count}, the owner's cumulative count of this handle's WNOTIFYs it
 * has handed on: credit back. A count going back or past what was sent is a protocol error.
 * The set fails here, as for a bad WACK, so that the cause its transfers and handles end with
 * names the rule, not only "protocol error".
 */
static int handle_notify_ack(struct xd_peer *p, const struct xp_peer_hdr *hdr, json_t *json)
{
	json_int_t count;

	if ((hdr->flags & XP_PEER_FROM_ACTIVE) || !json ||
	    json_unpack(json, "{s:I}", "count", &count)) {
		xd_link_fail(p, EPROTO,
			     "handle %llu: a WNOTIFY_ACK %s (an owner's message with an integer "
			     "count, §10.9)",
			     (unsigned long long)hdr->xfer,
			     hdr->flags & XP_PEER_FROM_ACTIVE ? "flagged FROM_ACTIVE" :
								"without an integer count");
		return -EPROTO;
	}
	struct xd_whandle *h = handle_of_peer(p, hdr->xfer);
	if (!h)
		return 0; /* (closed or revoked here: the two ends crossed) */
	if (!h->credit || count < (json_int_t)h->notes_acked || (uint64_t)count > h->notes_sent) {
		xd_link_fail(p, EPROTO,
			     "window handle %llu: WNOTIFY_ACK count %lld, but %llu sent and %llu "
			     "acked (credit %u): a count going back or past what was sent (§10.9)",
			     (unsigned long long)h->id, (long long)count,
			     (unsigned long long)h->notes_sent, (unsigned long long)h->notes_acked,
			     h->credit);
		return -EPROTO;
	}
	h->notes_acked = (uint64_t)count;
	send_notes(h);
	return 0;
}

int xd_window_ctrl(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json)
{
	switch (h->type) {
	case XP_PEER_WOPEN:
		return handle_wopen(p, via, h, json);
	case XP_PEER_WOPEN_OK:
	case XP_PEER_WOPEN_ERR:
		return handle_open_answer(p, via, h, json);
	case XP_PEER_WNOTIFY:
		return handle_wnotify(p, h, json);
	case XP_PEER_WNOTIFY_ACK:
		return handle_notify_ack(p, h, json);
	case XP_PEER_WCLOSE:
		return handle_wclose(p, h, json);
	default:
		return -EPROTO;
	}
}

/*
 * An honest owner answers WOPEN from its loop at once (PROTOCOL.md §10.6); one whose answer has
 * not come within keepalive_timeout_ms while its set is alive (PINGs answered) is stuck or
 * hostile. Without this bound the client's window.open never returned, and the handle of a
 * client that left meanwhile stayed, uncharged, as long as the set: a client that retried grew
 * this daemon without end. The client hears ETIMEDOUT; the owner gets WCLOSE, behind the WOPEN
 * on the same connection, so that an opener it makes on a late WOPEN is let go at once.
 */
static void open_timed_out(struct xd_whandle *h, uint64_t waited_ms)
{
	char msg[XD_CAUSE_MAX];

	snprintf(msg, sizeof(msg),
		 "the owner (node %s) did not answer the open of window %llu within %llu ms "
		 "(keepalive_timeout_ms): it is stuck or hostile",
		 h->node_hex, (unsigned long long)h->window, (unsigned long long)waited_ms);
	xd_log(XD_LOG_WARN, "window handle %llu: %s", (unsigned long long)h->id, msg);
	send_release(h); /* (not keyed yet: on the control connection, as the WOPEN went) */
	if (h->conn)
		xd_client_reply_error(h->conn, h->reply_id, XP_E_FAILED, ETIMEDOUT, msg);
	handle_free(h);
}

void xd_windows_peer_tick(struct xd_peer *p)
{
	uint64_t limit_ms = p->d->cfg.keepalive_timeout_ms, now = xd_now_us();
	struct xd_window *w;
	struct xd_wopener *o;
	struct xd_whandle *h, *tmp;

	TAILQ_FOREACH_SAFE(h, &p->d->whandles, link, tmp) {
		uint64_t waited_ms = (now - h->open_sent_us) / 1000;
		if (h->peer == p && h->state == WH_OPENING && h->open_sent && waited_ms > limit_ms)
			open_timed_out(h, waited_ms);
	}

	TAILQ_FOREACH(w, &p->d->windows, link) {
		TAILQ_FOREACH(o, &w->openers, link) {
			uint64_t kept_ms = (now - o->release_since_us) / 1000;
			if (o->peer != p || !o->grant || !o->releasing || kept_ms <= limit_ms)
				continue;
			xd_peer_fail(p, ETIMEDOUT,
				     "the peer kept its key to revoked window %llu for %llu ms "
				     "(keepalive_timeout_ms): connection closed to revoke it",
				     (unsigned long long)w->id, (unsigned long long)kept_ms);
			return;
		}
	}
}

void xd_windows_peer_up(struct xd_peer *p)
{
	struct xd_whandle *h, *tmp;

	TAILQ_FOREACH_SAFE(h, &p->d->whandles, link, tmp)
		if (h->peer == p && h->state == WH_OPENING && !h->open_sent)
			send_open(h);
}

void xd_windows_peer_lost(struct xd_peer *p, int err, const char *cause)
{
	struct xd_daemon *d = p->d;
	struct xd_window *w;
	struct xd_wopener *o;
	struct xd_whandle *h, *tmp;

	TAILQ_FOREACH(w, &d->windows, link) {
		TAILQ_FOREACH(o, &w->openers, link) {
			if (o->peer != p)
				continue;
			opener_key_close(o); /* (its queue pair is going too) */
			o->peer = NULL;
			opener_close(o, XP_ST_ERRORED, err, cause);
			reap_soon(w);
		}
	}
	TAILQ_FOREACH_SAFE(h, &d->whandles, link, tmp) {
		if (h->key_peer == p) { /* the key died with the queue pair: nothing to release */
			h->key_peer = NULL;
			h->release_wait = false;
			if (!h->conn && h->state == WH_CLOSED) {
				handle_free(h);
				continue;
			}
		}
		if (h->peer != p)
			continue;
		if (h->state == WH_OPENING) {
			if (h->conn)
				xd_client_reply_error(h->conn, h->reply_id, XP_E_FAILED, err,
						      cause);
			handle_free(h);
		} else {
			handle_revoked(h, err, cause);
		}
	}
}

/* ---- whole-daemon events ---- */

void xd_windows_conn_closed(struct xd_conn *c)
{
	struct xd_daemon *d = c->d;
	struct xd_window *w;
	struct xd_whandle *h, *tmp;

	TAILQ_FOREACH_SAFE(h, &d->whandles, link, tmp) {
		if (h->conn != c)
			continue;
		if (h->state == WH_OPENING) { /* kept for the owner's answer, then closed */
			uncharge_window(c);
			h->conn = NULL;
			continue;
		}
		handle_close(h, "its client disconnected");
	}
	TAILQ_FOREACH(w, &d->windows, link) {
		if (w->close_conn == c)
			w->close_conn = NULL;
		if (w->owner == c)
			window_revoke(w, ECONNRESET,
				      "the window's owner, client %llu (%s, pid %d), "
				      "disconnected",
				      (unsigned long long)c->id, c->name, (int)c->pid);
	}
}

/*
 * Each opener's waiting notifications go, in order, until the queue is full again; the opener
 * that filled it goes last next time, so that a flooding opener does not starve the others.
 */
static void window_drained(struct xd_window *w)
{
	struct xd_wopener *o, *tmp;

	TAILQ_FOREACH_SAFE(o, &w->openers, link, tmp) {
		deliver(o);
		if (owner_behind(w)) {
			TAILQ_REMOVE(&w->openers, o, link);
			TAILQ_INSERT_TAIL(&w->openers, o, link);
			return;
		}
	}
}

void xd_windows_conn_drained(struct xd_conn *c)
{
	struct xd_window *w;

	TAILQ_FOREACH(w, &c->d->windows, link)
		if (w->owner == c)
			window_drained(w);
}

void xd_windows_region_gone(struct xd_region *r)
{
	struct xd_window *w;

	TAILQ_FOREACH(w, &r->d->windows, link)
		if (w->region == r)
			window_revoke(w, ECANCELED, "region %llu was deregistered with force",
				      (unsigned long long)r->id);
}

void xd_windows_fini(struct xd_daemon *d)
{
	struct xd_window *w;
	struct xd_whandle *h;

	while ((w = TAILQ_FIRST(&d->windows)))
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
		window_free(w);
	while ((h = TAILQ_FIRST(&d->whandles))) {
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
		h->conn = NULL;
		handle_free(h);
	}
	xd_idmap_fini(&d->window_ids);
	xd_idmap_fini(&d->handle_ids);
}

/* ---- listing ---- */

static json_t *openers_json(const struct xd_window *w)
{
	json_t *arr = json_array();
	const struct xd_wopener *o;

	TAILQ_FOREACH(o, &w->openers, link) {
		if (!arr || o->gone)
			continue;
		if (json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "peer",
							 o->local ? "local" : o->node_hex, "handle",
							 (json_int_t)o->handle, "inflight",
							 (json_int_t)o->inflight, "gets",
							 (json_int_t)o->gets, "puts",
							 (json_int_t)o->puts, "waiting",
							 (json_int_t)notes_waiting(o)))) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return arr;
}

/* The notifications of every opener of @w, gone ones too, waiting for the owner's client. */
static unsigned window_waiting(const struct xd_window *w)
{
	const struct xd_wopener *o;
	unsigned count = 0;

	TAILQ_FOREACH(o, &w->openers, link)
		count += notes_waiting(o);
	return count;
}

static json_t *window_json(const struct xd_window *w, uint64_t now)
{
	return json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:o, s:I, s:I, s:I, s:I, "
			 "s:I, s:I}",
			 "window", (json_int_t)w->id, "role", "owner", "client",
			 (json_int_t)w->client_id, "region", (json_int_t)w->region->id, "offset",
			 (json_int_t)w->offset, "length", (json_int_t)w->length, "access",
			 xp_access_name(w->access), "openers_mode", w->many ? "many" : "one",
			 "state", w->closing ? "closing" : "open", "openers", openers_json(w),
			 "inflight", (json_int_t)w->inflight, "gets", (json_int_t)w->gets, "puts",
			 (json_int_t)w->puts, "notified", (json_int_t)w->notified, "waiting",
			 (json_int_t)window_waiting(w), "age_ms",
			 (json_int_t)((now - w->created_us) / 1000));
}

static json_t *handle_json(const struct xd_whandle *h, uint64_t now)
{
	static const char *const states[] = { "opening", "open", "closed" };
	json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:s, s:s, s:s, s:I}", "window",
			      (json_int_t)h->id, "role", "opener", "client",
			      (json_int_t)h->client_id, "owner_node", h->node_hex, "owner_window",
			      (json_int_t)h->window, "length", (json_int_t)h->length, "access",
			      xp_access_name(h->access), "state", states[h->state], "transport",
			      h->transport, "age_ms", (json_int_t)((now - h->created_us) / 1000));

	if (o && h->cause_errno &&
	    (json_object_set_new(o, "errno", json_string(xp_errno_name(h->cause_errno))) ||
	     json_object_set_new(o, "cause", json_string(h->cause)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *list_entry(const void *p, void *arg)
{
	uint64_t now = *(const uint64_t *)arg;

	return *(const bool *)p ? handle_json(p, now) : window_json(p, now);
}

/* Pages by id (PROTOCOL.md §7); windows and handles share one id space. */
int xd_windows_list(struct xd_call *call)
{
	struct xd_daemon *d = call->conn->d;
	struct xd_page_item *items;
	struct xd_window *w;
	struct xd_whandle *h;
	struct xd_page pg;
	uint64_t now = xd_now_us();
	size_t n = 0;
	int rc = xd_page_begin(call, &pg);

	if (rc)
		return rc;
	TAILQ_FOREACH(w, &d->windows, link)
		n++;
	TAILQ_FOREACH(h, &d->whandles, link)
		n++;
	items = calloc(n + 1, sizeof(*items));
	if (!items)
		return xd_page_finish(call, &pg, "windows", -ENOMEM);
	n = 0;
	TAILQ_FOREACH(w, &d->windows, link)
		if (w->owner && xd_conn_may_access(call->conn, w->owner) &&
		    (json_int_t)w->id > pg.after)
			items[n++] = (struct xd_page_item){ w->id, w };
	TAILQ_FOREACH(h, &d->whandles, link)
		if (h->conn && xd_conn_may_access(call->conn, h->conn) &&
		    (json_int_t)h->id > pg.after)
			items[n++] = (struct xd_page_item){ h->id, h };
	rc = xd_page_fill(&pg, items, n, list_entry, &now);
	free(items);
	return xd_page_finish(call, &pg, "windows", rc);
}

void xd_windows_count(const struct xd_daemon *d, uint64_t *windows, uint64_t *handles)
{
	const struct xd_window *w;
	const struct xd_whandle *h;

	*windows = *handles = 0;
	TAILQ_FOREACH(w, &d->windows, link)
		(*windows)++;
	TAILQ_FOREACH(h, &d->whandles, link)
		(*handles)++;
}
