// SPDX-License-Identifier: MIT
/*
 * RDMA connections between daemons (PROTOCOL.md §10.5): rdma_cm connect/accept with the HELLO in
 * the private data, one RC QP per connection, control messages as SEND into pre-posted receive
 * buffers under credit-based flow control, and the data of read and write operations as
 * one-sided RDMA READ / RDMA WRITE driven by the active side.
 *
 * Work requests carry (connection id, slot) in wr_id, never a pointer: a completion that arrives
 * after its connection was torn down finds no connection and is dropped. Data work requests are
 * signalled once per chunk, control SENDs once per half of the send buffers; RC completes in
 * order, so one completion retires every request posted before it on that QP. A chunk's
 * requests go as one chain, RDMA WRITEs through the device's poster thread (rdma_post.c), in
 * the order of the sq ring.
 *
 * The owner answers an RDMA claim with rkeys of type 2 memory windows bound onto exactly the
 * operation's ranges (read-only for a read, write-only for a write) and to the queue pair the
 * claim came on, posted on its send queue before the CLAIM_OK that carries them; the region MRs
 * themselves grant no remote access. A transfer's data, DONE and release then stay on that
 * connection. A window is deallocated (revoked) when its transfer lets go of it, but never
 * while its bind may still be in the send queue, and always before its queue pair is destroyed.
 * A window's opener gets one such memory window for the handle's whole life, bound at its open
 * with the window's access (read, write or both), through the same grant_open.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rdma.h"
#include "transport.h"
#include "xp_peer.h"

#define RC_RECV_BUFS 16
#define RC_SEND_BUFS 16
#define RC_BUF_SIZE (XP_PEER_HDR_LEN + XP_PEER_MAX_CTRL)
#define RC_SQ_DEPTH 256
/*
 * Chunks in flight per connection: one moving and one queued behind it, so that the wire never
 * waits for our wake-up after a completion (up to a 4 ms tick in the VM, microseconds on
 * hardware, both far below a 4 MiB chunk's time). More would only hold back the control
 * messages queued behind them (CLAIMs, DONEs, PONGs; the send queue and the peer's responder
 * are FIFO): with 8 writes of 4 MiB in flight in the Soft-RoCE VM, 4 chunks put 16 MiB
 * (~0.6 s there) ahead of each new CLAIM; 2 moved such writes ~5% faster at 1-16 MiB, and
 * reads as fast (6 alternating rounds each).
 */
#define RC_WINDOW 2
/*
 * The window counts bytes, RC_WINDOW chunks' worth: small transfers (a 64 KiB window put is
 * one chunk of 64 KiB) then have many chunks in flight, not two, so that the wire does not idle
 * for our wake-up after each of them. The queue pair's send queue bounds their number
 * (sq_full()); control messages still wait behind at most RC_WINDOW_BYTES of data, and on
 * their own queue pair (the set's control connection) behind none.
 */
#define RC_WINDOW_BYTES ((uint64_t)RC_WINDOW * XD_RDMA_CHUNK)
#define RC_RESOLVE_MS 2000
#define RC_RECV_FLAG 0x80000000u

_Static_assert(XP_RDMA_NONCE_LEN == XD_NONCE_LEN, "the RDMA HELLO carries a handshake nonce");
_Static_assert(XP_RDMA_HELLO_LEN <= 56, "the RC REQ private data holds 56 bytes");

/* Per-request logging costs on the data path: compiled in only with -DXD_DEBUG_DATAPATH. */
#ifdef XD_DEBUG_DATAPATH
#define dp_log(...) xd_log(XD_LOG_DEBUG, __VA_ARGS__)
#else
#define dp_log(...) ((void)0)
#endif

enum sq_kind { SQ_FREE, SQ_SEND, SQ_DATA, SQ_BIND };

struct xd_stage_chunk;

struct sq_entry {
	enum sq_kind kind;
	int slot;		      /**< SQ_SEND: the send buffer */
	struct xd_xfer *x;	      /**< SQ_DATA: a reference */
	struct xd_stage_chunk *chunk; /**< SQ_DATA of a staged transfer: the chunk it moves */
	uint32_t bytes;		      /**< SQ_DATA: bytes this request moves */
	bool read;
	uint32_t chunk_len; /**< SQ_DATA, a chunk's signalled last request: the chunk's bytes */
};

/* One window of a grant, and the region it looks into (referenced: its MR outlives the window). */
struct grant_window {
	struct ibv_mw *mw;
	struct xd_region *region;
};

struct xd_rdma_grant {
	TAILQ_ENTRY(xd_rdma_grant) link; /**< in its connection's binds_pending once closed */
	struct xd_rdma_dev *dev;
	uint32_t conn;	   /**< the connection whose send queue took the binds */
	uint64_t bound_at; /**< that queue's sq_head after the last bind */
	/* A staging chunk's window (rdma_conn.c, staging): told once the window is gone. */
	void (*freed)(void *arg);
	void *freed_arg;
	uint32_t n;
	struct grant_window w[];
};

struct xd_rconn {
	TAILQ_ENTRY(xd_rconn) link; /**< in the live table, then the dying list */
	TAILQ_ENTRY(xd_rconn) peer_link;
	uint32_t id;
	struct xd_daemon *d;
	struct xd_peer *peer;
	struct xd_rdma_dev *dev;
	struct rdma_cm_id *cm;
	bool outgoing, qp_ready, established, dead;
	/*
	 * The set's control connection (HELLO flag XP_RDMA_HELLO_CONTROL): messages not bound to
	 * a transfer's data (CLAIM, WCLAIM, WOPEN, WCLOSE, keepalive) go here, so that they never
	 * wait behind RDMA READs and WRITEs queued on a data queue pair, at either end.
	 */
	bool control;
	/*
	 * Keyed daemons (PROTOCOL.md §10.2): the peer's HELLO (from the private data), our nonce
	 * (in ours), and whether the peer's AUTH, its first SEND, checked out. Until it has, only
	 * AUTH is taken, and an accepted connection belongs to no set (peer NULL).
	 */
	bool authenticated;
	uint32_t key_id; /**< the cluster key its AUTH proved */
	bool hello_rx;	 /**< rc->hello is known (the connector learns it at ESTABLISHED) */
	bool auth_early; /**< the peer's AUTH came before ESTABLISHED: auth_mac waits */
	uint8_t auth_mac[XD_MAC_LEN];
	struct xd_hello hello;
	uint8_t nonce[XD_NONCE_LEN];
	struct event *auth_timer;      /**< accepted, keyed: bounds the wait for the peer's AUTH */
	char from[72];		       /**< the peer's address, for log lines */
	struct xd_deferred free_later; /**< destroyed at the next loop turn once dead */
	struct xp_endpoint ep;
	uint8_t *bufs; /**< RC_RECV_BUFS receive slots, then RC_SEND_BUFS send slots */
	struct ibv_mr *mr;
	bool send_busy[RC_SEND_BUFS];
	int credits;		       /**< messages the peer has receive buffers for */
	int to_return;		       /**< receive buffers re-posted, not yet told */
	STAILQ_HEAD(, xd_frame) pendq; /**< the credits field is filled in when sent */
	uint32_t pendq_bytes;	       /**< queued control bytes, frame headers included */
	bool pendq_over;	       /**< the peer let pendq pass XD_PEER_CTRLQ_MAX */
	struct sq_entry sq[RC_SQ_DEPTH];
	uint64_t sq_head, sq_tail; /**< posted and retired work requests, ever */
	atomic_uint posts_queued;  /**< chains that wait for the device's poster thread */
	unsigned chunks;	   /**< data chunks in flight */
	uint64_t stage_wire;	   /**< bytes of staged chunks' requests posted, not completed */
	uint64_t chunk_bytes;	   /**< their bytes (the window: RC_WINDOW_BYTES) */
	uint64_t last_rx_us, last_tx_us;
	TAILQ_HEAD(, xd_rdma_grant) binds_pending; /**< closed grants, binds not yet retired */
};

struct rpeer {
	TAILQ_HEAD(, xd_rconn) conns;
};

static void rconn_pump(struct xd_rconn *rc);
static void rconn_flush(struct xd_rconn *rc);
static void stage_conn_gone(struct xd_rconn *rc);
static void stage_request_flushed(struct xd_stage_chunk *c, uint32_t bytes);
static int stage_message(struct xd_rconn *rc, const struct xp_peer_hdr *h, json_t *json);

/* The RDMA part of set @p (p->tstate), made on first use when @create. */
static struct rpeer *rpeer_of(struct xd_peer *p, bool create)
{
	struct rpeer *rp = p->tstate;

	if (!rp && create && (rp = calloc(1, sizeof(*rp)))) {
		TAILQ_INIT(&rp->conns);
		p->tstate = rp;
	}
	return rp;
}

static struct xd_rconn *rconn_find(struct xd_rdma *rd, uint32_t id)
{
	struct xd_rconn *rc;

	TAILQ_FOREACH(rc, &rd->live, link)
		if (rc->id == id)
			return rc;
	return NULL;
}

/* Like rconn_find(), but also a connection that is dying: its QP exists until it is freed. */
static struct xd_rconn *rconn_find_with_qp(struct xd_rdma *rd, uint32_t id)
{
	struct xd_rconn *rc = rconn_find(rd, id);

	if (!rc)
		TAILQ_FOREACH(rc, &rd->dying, link)
			if (rc->id == id)
				return rc;
	return rc;
}

static uint8_t *recv_buf(struct xd_rconn *rc, int slot)
{
	return rc->bufs + (size_t)slot * RC_BUF_SIZE;
}

static uint8_t *send_buf(struct xd_rconn *rc, int slot)
{
	return rc->bufs + (size_t)(RC_RECV_BUFS + slot) * RC_BUF_SIZE;
}

/* ---- memory windows ---- */

static void grant_free(struct xd_rdma_grant *g)
{
	for (uint32_t i = 0; i < g->n; i++) {
		if (ibv_dealloc_mw(g->w[i].mw))
			xd_log(XD_LOG_ERR, "%s: ibv_dealloc_mw failed", g->dev->name);
		g->dev->counters.windows_open--;
		xd_region_unref(g->w[i].region);
	}
	if (g->freed)
		g->freed(g->freed_arg);
	free(g);
}

/*
 * Frees the closed grants of @rc whose binds the device has executed; @all when the connection
 * is being destroyed (its QP is in the error state: queued binds are flushed, never executed).
 */
static void free_retired_grants(struct xd_rconn *rc, bool all)
{
	struct xd_rdma_grant *g, *tmp;

	TAILQ_FOREACH_SAFE(g, &rc->binds_pending, link, tmp) {
		if (!all && g->bound_at > rc->sq_tail)
			continue;
		TAILQ_REMOVE(&rc->binds_pending, g, link);
		grant_free(g);
	}
}

void xd_rdma_grant_close(struct xd_rdma_grant *g)
{
	struct xd_rconn *rc;

	if (!g)
		return;
	/* Deallocating a window whose bind is still queued would fail that bind and the QP. */
	rc = rconn_find_with_qp(g->dev->rdma, g->conn);
	if (rc && g->bound_at > rc->sq_tail) {
		TAILQ_INSERT_TAIL(&rc->binds_pending, g, link);
		return;
	}
	grant_free(g);
}

/* ---- teardown ---- */

static void rconn_free(void *arg)
{
	struct xd_rconn *rc = arg;
	struct xd_frame *pm;

	xd_event_free(rc->auth_timer);
	stage_conn_gone(rc);	  /* (closes its chunks' windows: they go just below) */
	if (rc->cm && rc->cm->qp) /* (before the windows its binds name go, just below) */
		xd_rdma_post_forget(rc->dev, rc->cm->qp, &rc->posts_queued);
	free_retired_grants(rc, true); /* a bound window holds its queue pair */
	if (rc->cm && rc->cm->qp)
		rdma_destroy_qp(rc->cm);
	if (rc->cm)
		rdma_destroy_id(rc->cm);
	/* The QP is gone: no device can touch these buffers or the transfers' pages now. */
	for (uint64_t i = rc->sq_tail; i < rc->sq_head; i++) {
		struct sq_entry *e = &rc->sq[i % RC_SQ_DEPTH];
		if (e->kind != SQ_DATA)
			continue;
		if (e->chunk)
			stage_request_flushed(e->chunk, e->bytes);
		xd_xfer_unref(e->x);
	}
	if (rc->mr && ibv_dereg_mr(rc->mr))
		xd_log(XD_LOG_ERR, "ibv_dereg_mr of connection buffers failed");
	free(rc->bufs);
	while ((pm = STAILQ_FIRST(&rc->pendq))) {
		STAILQ_REMOVE_HEAD(&rc->pendq, link);
		free(pm);
	}
	TAILQ_REMOVE(&rc->d->rdma->dying, rc, link);
	free(rc);
}

/* Stops @rc now; it is destroyed at the next loop turn, after its current CM event is acked. */
static void rconn_kill(struct xd_rconn *rc)
{
	if (rc->dead)
		return;
	rc->dead = true;
	if (rc->established)
		rdma_disconnect(rc->cm); /* moves the QP to error: the peer hears at once */
	TAILQ_REMOVE(&rc->d->rdma->live, rc, link);
	if (rc->peer) {
		struct rpeer *rp = rpeer_of(rc->peer, false);
		if (rp)
			TAILQ_REMOVE(&rp->conns, rc, peer_link);
	}
	TAILQ_INSERT_TAIL(&rc->d->rdma->dying, rc, link);
	xd_defer(rc->d, &rc->free_later, rconn_free, rc);
}

void xd_rdma_close_peer(struct xd_peer *p)
{
	struct rpeer *rp = rpeer_of(p, false);
	struct xd_rconn *rc;

	if (!rp)
		return;
	while ((rc = TAILQ_FIRST(&rp->conns))) {
		rconn_kill(rc);
		rc->peer = NULL;
	}
	free(rp);
	p->tstate = NULL;
}

static void rconn_fail(struct xd_rconn *rc, int err, const char *what)
{
	if (rc->peer)
		xd_link_fail(rc->peer, err, "%s", what);
	else
		rconn_kill(rc);
}

/* ---- setup ---- */

/* Whether the connection's peer is proven (keyed) or believed (unkeyed): it may carry work. */
static bool rconn_ready(const struct xd_rconn *rc)
{
	return rc->peer && (rc->d->keys.n == 0 || rc->authenticated);
}

/* A connection of set @p, or (@p NULL: accepted, keyed, not yet authenticated) of none. */
static struct xd_rconn *rconn_new(struct xd_daemon *d, struct xd_peer *p, bool outgoing)
{
	struct xd_rconn *rc = calloc(1, sizeof(*rc));
	struct rpeer *rp = p ? rpeer_of(p, true) : NULL;

	if (!rc || (p && !rp)) {
		free(rc);
		return NULL;
	}
	rc->id = ++d->rdma->next_conn_id;
	rc->d = d;
	rc->peer = p;
	rc->outgoing = outgoing;
	rc->credits = RC_RECV_BUFS; /* the peer posts as many before it connects or accepts */
	rc->last_rx_us = rc->last_tx_us = xd_now_us();
	STAILQ_INIT(&rc->pendq);
	TAILQ_INIT(&rc->binds_pending);
	TAILQ_INSERT_TAIL(&d->rdma->live, rc, link);
	if (rp)
		TAILQ_INSERT_TAIL(&rp->conns, rc, peer_link);
	return rc;
}

static int post_recv(struct xd_rconn *rc, int slot)
{
	struct ibv_sge sge = { (uintptr_t)recv_buf(rc, slot), RC_BUF_SIZE, rc->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)rc->id << 32 | RC_RECV_FLAG | (uint32_t)slot,
				  .sg_list = &sge,
				  .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(rc->cm->qp, &wr, &bad);
}

/* The QP and its buffers, with every receive posted: ready to connect or accept. */
static int rconn_setup_qp(struct xd_rconn *rc)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = rc->dev->cq,
		.recv_cq = rc->dev->cq,
		.cap = { .max_send_wr = RC_SQ_DEPTH,
			 .max_recv_wr = RC_RECV_BUFS,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	size_t size = (size_t)(RC_RECV_BUFS + RC_SEND_BUFS) * RC_BUF_SIZE;

	rc->bufs = malloc(size);
	if (!rc->bufs)
		return -ENOMEM;
	rc->mr = ibv_reg_mr(rc->dev->pd, rc->bufs, size, IBV_ACCESS_LOCAL_WRITE);
	if (!rc->mr)
		return errno ? -errno : -ENOMEM;
	if (rdma_create_qp(rc->cm, rc->dev->pd, &attr))
		return -errno;
	for (int i = 0; i < RC_RECV_BUFS; i++) {
		int rc_post = post_recv(rc, i);
		if (rc_post)
			return rc_post;
	}
	rc->qp_ready = true;
	return 0;
}

/*
 * The local ACK timeout is 4.096 us * 2^N. rdma_cm's RoCE default (N = 19, about 2 s) makes one
 * lost packet stall a transfer for seconds; the config sets it (rdma_ack_timeout).
 */
static void set_ack_timeout(struct xd_rconn *rc)
{
	uint8_t t = (uint8_t)rc->d->cfg.rdma_ack_timeout;

	if (rdma_set_option(rc->cm, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)))
		xd_log(XD_LOG_WARN, "could not set the RDMA ACK timeout: %s", strerror(errno));
}

/*
 * @hello (the caller's, private data of at most 56 bytes on an RC connect) and @param; keyed
 * daemons put rc->nonce in the HELLO.
 */
static void conn_params(struct xd_rconn *rc, struct rdma_conn_param *param,
			uint8_t hello[XP_RDMA_HELLO_LEN])
{
	struct xd_daemon *d = rc->d;
	struct xp_rdma_hello mine = { .epoch = d->epoch };
	int rd = rc->dev->attr.max_qp_rd_atom;

	if (rc->dev->attr.max_qp_init_rd_atom < rd)
		rd = rc->dev->attr.max_qp_init_rd_atom;
	if (rd > 16)
		rd = 16;
	memcpy(mine.node, d->node, XP_ID_BYTES);
	mine.control = rc->control;
	if (d->keys.n) {
		mine.has_nonce = true;
		memcpy(mine.nonce, rc->nonce, XD_NONCE_LEN);
	}
	xp_rdma_hello_pack(&mine, hello);
	*param = (struct rdma_conn_param){
		.private_data = hello,
		.private_data_len = XP_RDMA_HELLO_LEN,
		.responder_resources = (uint8_t)rd,
		.initiator_depth = (uint8_t)rd,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
}

static int resolve_ep(const char *addr, uint16_t port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;
	char p[8];

	snprintf(p, sizeof(p), "%u", port);
	if (getaddrinfo(addr, p, &hints, &ai))
		return -EHOSTUNREACH;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* Opens a connection of set @p towards @ep: its control one (@control) or one for data. */
static int rconn_connect(struct xd_peer *p, const struct xp_endpoint *ep, bool control)
{
	struct xd_daemon *d = p->d;
	struct sockaddr_storage dst, src;
	struct sockaddr *srcp = NULL;
	struct xd_rconn *rc = rconn_new(d, p, true);

	if (!rc)
		return -ENOMEM;
	rc->control = control;
	rc->ep = *ep;
	snprintf(rc->from, sizeof(rc->from), "%s:%u", ep->addr, (unsigned)ep->port);
	int err = xd_netaddr_allowed(d->cfg.peer_allow, d->cfg.npeer_allow, ep->addr);
	if (!err)
		err = resolve_ep(ep->addr, ep->port, &dst);
	/* Leave through the device of our own listen address: two devices may share a host. */
	if (!err && d->nlisten_eps && resolve_ep(d->listen_eps[0].addr, 0, &src) == 0)
		srcp = (struct sockaddr *)&src;
	if (!err && rdma_create_id(d->rdma->cm, &rc->cm, rc, RDMA_PS_TCP))
		err = -errno;
	if (!err && rdma_resolve_addr(rc->cm, srcp, (struct sockaddr *)&dst, RC_RESOLVE_MS))
		err = -errno;
	if (err)
		rconn_kill(rc);
	return err;
}

/*
 * A set's first connection is its control one (PROTOCOL.md §10.5); the connection for data
 * follows once it is up (connect_data()). Until then claims move their data on the control
 * connection.
 */
int xd_rdma_connect(struct xd_peer *p, const struct xp_endpoint *ep)
{
	return rconn_connect(p, ep, true);
}

/* The connector's control connection @rc is up: the set's data connection follows. */
static void connect_data(struct xd_rconn *rc)
{
	if (!rc->control || !rc->outgoing || !rc->peer)
		return;
	int err = rconn_connect(rc->peer, &rc->ep, false);
	if (err) /* the set works on, with data on the control connection (data_via()) */
		xd_log(XD_LOG_WARN, "could not open the RDMA data connection to %s: %s", rc->from,
		       strerror(-err));
}

/* ---- control messages ---- */

static bool may_send(const struct xd_rconn *rc)
{
	/* Keep the last credit for a message that returns credits, or both sides could stall. */
	return rc->credits >= 2 || (rc->credits == 1 && rc->to_return > 0);
}

static int free_send_slot(const struct xd_rconn *rc)
{
	for (int i = 0; i < RC_SEND_BUFS; i++)
		if (!rc->send_busy[i])
			return i;
	return -1;
}

/* Send buffers whose SEND is not yet retired. */
static unsigned sends_busy(const struct xd_rconn *rc)
{
	unsigned n = 0;

	for (int i = 0; i < RC_SEND_BUFS; i++)
		n += rc->send_busy[i];
	return n;
}

static bool sq_full(const struct xd_rconn *rc, unsigned need)
{
	return rc->sq_head - rc->sq_tail + need > RC_SQ_DEPTH;
}

/*
 * Posts the chain @wr on @rc's queue pair: RDMA WRITEs (@bulk) through the device's poster
 * thread (rdma_post.c: Soft-RoCE builds their packets inside the post), anything else at once
 * unless chains of @rc wait there (the queue pair's order is the sq ring's). READs stay on the
 * loop: measured in one boot, 64 KiB gets in batches of 8 ran 0.81x perftest posted by the
 * thread and 1.04x posted here (one request per op gained 0.55x -> 0.60x only), pairing reads
 * alike; puts gained 0.69x -> 0.93x.
 */
static int rc_post(struct xd_rconn *rc, struct ibv_send_wr *wr, bool bulk)
{
	rc->dev->counters.chains++;
	return xd_rdma_post(rc->dev, rc->cm->qp, rc->id, wr, &rc->posts_queued, bulk);
}

/*
 * Whether the next SEND asks for a completion. Each completion is a wake-up of the event loop,
 * and RC retires every earlier request with the next completion anyway, so a SEND is signalled
 * only once half the send buffers wait to be retired: the other half stays free for the messages
 * that follow, and the signalled one frees them all.
 */
static bool send_signaled(const struct xd_rconn *rc)
{
	return sends_busy(rc) + 1 >= RC_SEND_BUFS / 2;
}

static int post_send(struct xd_rconn *rc, struct xd_frame *pm, int slot)
{
	uint64_t idx = rc->sq_head;
	uint8_t *buf = send_buf(rc, slot);
	struct ibv_sge sge = { (uintptr_t)buf, pm->len, rc->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = (uint64_t)rc->id << 32 | (uint32_t)(idx % RC_SQ_DEPTH),
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = send_signaled(rc) ? IBV_SEND_SIGNALED : 0 };

	memcpy(buf, pm->data, pm->len);
	buf[2] = (uint8_t)rc->to_return;
	buf[3] = (uint8_t)(rc->to_return >> 8);
	int err = rc_post(rc, &wr, false);
	if (err)
		return err;
	rc->sq[idx % RC_SQ_DEPTH] = (struct sq_entry){ .kind = SQ_SEND, .slot = slot };
	rc->sq_head++;
	rc->send_busy[slot] = true;
	rc->credits--;
	dp_log("conn %u: SEND type %u sq %llu signaled %d credits %d carried %d", rc->id,
	       pm->data[0], (unsigned long long)idx, !!wr.send_flags, rc->credits, rc->to_return);
	rc->to_return = 0;
	rc->last_tx_us = xd_now_us();
	rc->dev->counters.sends++;
	return 0;
}

/* Sends queued control messages while credits, send buffers and queue room last. */
static void rconn_flush(struct xd_rconn *rc)
{
	struct xd_frame *pm;

	while (!rc->dead && rc->established && (pm = STAILQ_FIRST(&rc->pendq)) && may_send(rc) &&
	       !sq_full(rc, 1)) {
		int slot = free_send_slot(rc);
		if (slot < 0)
			break;
		int err = post_send(rc, pm, slot);
		if (err) {
			rconn_fail(rc, -err, "ibv_post_send of a control message failed");
			return;
		}
		STAILQ_REMOVE_HEAD(&rc->pendq, link);
		rc->pendq_bytes -= (uint32_t)(sizeof(*pm) + pm->len);
		free(pm);
	}
	if (!rc->dead && !STAILQ_EMPTY(&rc->pendq))
		dp_log("conn %u: messages wait: credits %d to_return %d busy sends %u sq %llu/%llu",
		       rc->id, rc->credits, rc->to_return, sends_busy(rc),
		       (unsigned long long)rc->sq_head, (unsigned long long)rc->sq_tail);
}

/* Queues a control message (@json borrowed, may be NULL). Returns 0 or -errno. */
static int rconn_queue(struct xd_rconn *rc, uint8_t type, uint8_t flags, uint64_t xfer,
		       const json_t *json)
{
	int err;
	struct xd_frame *f = xd_frame_new(type, flags, xfer, json, &err);

	if (!f)
		return err;
	/*
	 * A peer that sends (PINGs, claims) but grants no credits for our answers would grow the
	 * queue without end: past the bound the connection is failed at the next safe point
	 * (fail_if_overfull()), not here, inside whatever is sending.
	 */
	if (rc->pendq_over || rc->pendq_bytes + sizeof(*f) + f->len > XD_PEER_CTRLQ_MAX) {
		free(f);
		rc->pendq_over = true;
		return -ENOBUFS;
	}
	rc->pendq_bytes += (uint32_t)(sizeof(*f) + f->len);
	STAILQ_INSERT_TAIL(&rc->pendq, f, link);
	rconn_flush(rc);
	return 0;
}

/* Fails @rc once its peer let the control queue pass its bound; true if it did. */
static bool fail_if_overfull(struct xd_rconn *rc)
{
	char what[XD_CAUSE_MAX];

	if (!rc->pendq_over || rc->dead)
		return false;
	snprintf(what, sizeof(what),
		 "peer %s takes no control messages: %u bytes queued (bound %u), credits %d",
		 rc->from, rc->pendq_bytes, XD_PEER_CTRLQ_MAX, rc->credits);
	rconn_fail(rc, ENOBUFS, what);
	return true;
}

/* The peer's connection @via, or its first one for 0; NULL if there is none (any more). */
static struct xd_rconn *peer_conn(struct xd_peer *p, uint32_t via)
{
	struct rpeer *rp = rpeer_of(p, false);
	struct xd_rconn *rc;

	if (!rp)
		return NULL;
	if (!via) /* messages of no transfer: the control connection, once it carries work */
		TAILQ_FOREACH(rc, &rp->conns, peer_link)
			if (rc->control && rc->established && rconn_ready(rc))
				return rc;
	TAILQ_FOREACH(rc, &rp->conns, peer_link)
		if (!via || rc->id == via)
			return rc;
	return NULL;
}

/*
 * See struct xd_transport_ops: a connection of @p that carries data, established and ready
 * (the first), else @via itself (a set whose data connection is not up yet, or a peer that
 * opened none).
 */
static uint32_t rdma_data_via(struct xd_peer *p, uint32_t via)
{
	struct rpeer *rp = rpeer_of(p, false);
	struct xd_rconn *rc;

	if (rp)
		TAILQ_FOREACH(rc, &rp->conns, peer_link)
			if (!rc->control && rc->established && rconn_ready(rc) && !rc->dead)
				return rc->id;
	return via;
}

int xd_rdma_send_ctrl(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
		      const json_t *json)
{
	struct xd_rconn *rc = peer_conn(p, via);

	return rc ? rconn_queue(rc, type, flags, xfer, json) : -ENOTCONN;
}

/* The remote access a window grants, from XP_ACCESS_READ / XP_ACCESS_WRITE bits. */
static unsigned int mw_access(int access)
{
	return (access & XP_ACCESS_READ ? IBV_ACCESS_REMOTE_READ : 0) |
	       (access & XP_ACCESS_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0);
}

/*
 * Binds window @i of @g onto @s for @rc's queue pair, with a fresh key, on @rc's send queue.
 * The last bind of a grant is signalled: its completion retires the grant's binds at once, so
 * that closing the grant can deallocate (revoke) the windows then and there, even when no other
 * request follows on an idle connection. Returns 0 and the new rkey in *@rkey, or -errno.
 */
static int bind_window(struct xd_rconn *rc, struct xd_rdma_grant *g, uint32_t i,
		       const struct xd_seg *s, int access, bool last, uint32_t *rkey)
{
	uint64_t idx = rc->sq_head;
	struct ibv_mw *mw = g->w[i].mw;
	struct ibv_send_wr wr = {
		.wr_id = (uint64_t)rc->id << 32 | (uint32_t)(idx % RC_SQ_DEPTH),
		.opcode = IBV_WR_BIND_MW,
		.send_flags = last ? IBV_SEND_SIGNALED : 0,
		.bind_mw = {
			.mw = mw,
			.rkey = ibv_inc_rkey(mw->rkey),
			.bind_info = { .mr = s->region->mrs[rc->dev->index],
				       .addr = (uintptr_t)(s->region->base + s->offset),
				       .length = s->length,
				       .mw_access_flags = mw_access(access) },
		},
	};
	int err = rc_post(rc, &wr, false);

	if (err)
		return err;
	dp_log("conn %u: BIND sq %llu signaled %d", rc->id, (unsigned long long)idx, last);
	*rkey = wr.bind_mw.rkey;
	rc->sq[idx % RC_SQ_DEPTH] = (struct sq_entry){ .kind = SQ_BIND };
	rc->sq_head++;
	g->bound_at = rc->sq_head;
	rc->dev->counters.windows_bound++;
	return 0;
}

/* Allocates window @i of @g (the region reference comes with it). */
static int alloc_window(struct xd_rdma_grant *g, uint32_t i, struct xd_region *region)
{
	g->w[i].mw = ibv_alloc_mw(g->dev->pd, IBV_MW_TYPE_2);
	if (!g->w[i].mw)
		return errno ? -errno : -ENOMEM;
	g->w[i].region = region;
	xd_region_ref(region);
	g->n = i + 1;
	g->dev->counters.windows_open++;
	return 0;
}

int xd_rdma_grant_open(struct xd_peer *p, uint32_t via, const struct xd_seg *segs, uint32_t n,
		       int access, uint32_t *rkeys, struct xd_rdma_grant **grant, char *msg,
		       size_t len)
{
	struct xd_rconn *rc = peer_conn(p, via);
	struct xd_rdma_grant *g;
	int err = 0;

	*grant = NULL;
	if (!rc || rc->dead || !rc->qp_ready) {
		snprintf(msg, len, "no RDMA connection to the claimer");
		return -ENOTCONN;
	}
	if (!rc->dev->windows) {
		for (uint32_t i = 0; i < n; i++)
			rkeys[i] = xd_rdma_rkey(segs[i].region, rc->dev->index);
		return 0;
	}
	if (sq_full(rc, n)) {
		snprintf(msg, len, "the RDMA send queue has no room for %u memory window binds", n);
		return -EBUSY;
	}
	g = calloc(1, sizeof(*g) + n * sizeof(g->w[0]));
	if (!g) {
		snprintf(msg, len, "out of memory");
		return -ENOMEM;
	}
	g->dev = rc->dev;
	g->conn = rc->id;
	for (uint32_t i = 0; i < n && !err; i++) {
		err = alloc_window(g, i, segs[i].region);
		if (!err)
			err = bind_window(rc, g, i, &segs[i], access, i == n - 1, &rkeys[i]);
	}
	if (err) {
		snprintf(msg, len, "could not open a memory window on %s: %s", rc->dev->name,
			 strerror(-err));
		xd_rdma_grant_close(g);
		return err;
	}
	*grant = g;
	return 0;
}

/* Re-posts receive buffer @slot; returns credits by themselves when half are owed. */
static void recv_done(struct xd_rconn *rc, int slot)
{
	int err = post_recv(rc, slot);

	if (err) {
		rconn_fail(rc, -err, "ibv_post_recv failed");
		return;
	}
	rc->to_return++;
	if (rc->to_return >= RC_RECV_BUFS / 2 && STAILQ_EMPTY(&rc->pendq))
		rconn_queue(rc, XP_PEER_CREDIT, 0, 0, NULL);
}

static void rconn_trusted(struct xd_rconn *rc);

/* Checks the peer's AUTH @mac: the connection is trusted, or fails (EACCES) naming why. */
static void auth_verify(struct xd_rconn *rc, const uint8_t mac[XD_MAC_LEN])
{
	char node[2 * XP_ID_BYTES + 1], cause[XD_CAUSE_MAX];
	int err = xd_auth_check(rc->d, rc->outgoing, &rc->hello, rc->nonce, mac, &rc->key_id);

	if (err < 0) {
		xp_hex_encode(rc->hello.node, XP_ID_BYTES, node);
		xd_log(XD_LOG_WARN,
		       "RDMA peer connection %s %s (says node %s) failed authentication: its proof "
		       "does not match the cluster key",
		       rc->outgoing ? "to" : "from", rc->from, node);
		snprintf(cause, sizeof(cause),
			 "the daemon at %s did not authenticate with the cluster key", rc->from);
		rconn_fail(rc, EACCES, cause);
		return;
	}
	rc->authenticated = true;
	rconn_trusted(rc);
}

/* The peer's AUTH (its first SEND on a keyed daemon's connection): proves the cluster key. */
static int handle_auth(struct xd_rconn *rc, json_t *json)
{
	const char *hex;
	uint8_t mac[XD_MAC_LEN];

	if (!json || json_unpack(json, "{s:s}", "mac", &hex) ||
	    xp_hex_decode(hex, mac, sizeof(mac)))
		return -EPROTO;
	if (!rc->hello_rx) {
		/* The connector may see the acceptor's first SEND before its ESTABLISHED event. */
		if (!rc->outgoing)
			return -EPROTO;
		rc->auth_early = true;
		memcpy(rc->auth_mac, mac, sizeof(mac));
		return 0;
	}
	auth_verify(rc, mac);
	return 0;
}

static int handle_message(struct xd_rconn *rc, const uint8_t *buf, uint32_t len)
{
	struct xp_peer_hdr h;
	json_t *json = NULL;

	if (len < XP_PEER_HDR_LEN)
		return -EPROTO;
	xp_peer_hdr_unpack(buf, &h);
	if (!xp_peer_hdr_valid(&h) || h.type == XP_PEER_DATA || h.type == XP_PEER_HELLO ||
	    h.length != len - XP_PEER_HDR_LEN)
		return -EPROTO;
	rc->credits += h.credits;
	if (rc->d->keys.n && !rc->authenticated && h.type != XP_PEER_AUTH) {
		xd_log(XD_LOG_WARN, "RDMA peer connection %s %s: %s before its AUTH",
		       rc->outgoing ? "to" : "from", rc->from, xp_peer_type_name(h.type));
		return -EPROTO;
	}
	if (h.type == XP_PEER_AUTH && (!rc->d->keys.n || rc->authenticated || rc->auth_early))
		return -EPROTO;
	if (h.type == XP_PEER_PING)
		return rconn_queue(rc, XP_PEER_PONG, 0, 0, NULL);
	if (h.type == XP_PEER_PONG || h.type == XP_PEER_CREDIT)
		return 0;
	if (h.length) {
		json = json_loadb((const char *)buf + XP_PEER_HDR_LEN, h.length,
				  JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(json)) {
			json_decref(json);
			return -EPROTO;
		}
	}
	if (h.type == XP_PEER_AUTH) {
		int rc_auth = handle_auth(rc, json);
		json_decref(json);
		return rc_auth;
	}
	if (h.type == XP_PEER_STAGE || h.type == XP_PEER_STAGED) {
		int rc_stage = stage_message(rc, &h, json);
		json_decref(json);
		return rc_stage;
	}
	int err = rc->d->xfer_events->ctrl(rc->peer, rc->id, &h, json);
	json_decref(json);
	return err;
}

/* Keyed daemons: our AUTH, the first SEND of the connection (queued ahead of anything else). */
static int rconn_send_auth(struct xd_rconn *rc)
{
	uint8_t mac[XD_MAC_LEN];
	char hex[2 * XD_MAC_LEN + 1];
	int err;

	if (xd_auth_mac_out(rc->d, rc->outgoing, &rc->hello, rc->nonce, mac) < 0)
		return -EIO;
	xp_hex_encode(mac, sizeof(mac), hex);
	json_t *auth = json_pack("{s:s}", "mac", hex);
	struct xd_frame *f = auth ? xd_frame_new(XP_PEER_AUTH, 0, 0, auth, &err) : NULL;

	json_decref(auth);
	if (!f)
		return auth ? err : -ENOMEM;
	rc->pendq_bytes += (uint32_t)(sizeof(*f) + f->len);
	STAILQ_INSERT_HEAD(&rc->pendq, f, link);
	rconn_flush(rc);
	return 0;
}

/*
 * The peer's AUTH checked out: the connector's set comes up; the acceptor files the connection
 * under the set its HELLO names (which may displace a set of that node with another epoch:
 * only now, so that an unproven HELLO displaces nothing) and brings it up.
 */
static void rconn_trusted(struct xd_rconn *rc)
{
	struct xd_daemon *d = rc->d;
	struct xd_peer *p = rc->peer;

	if (rc->auth_timer)
		event_del(rc->auth_timer);
	if (!rc->outgoing) {
		p = d->link_events->attach(d, &xd_transport_rdma_ops, rc->hello.node,
					   rc->hello.epoch, rc->from);
		struct rpeer *rp = p ? rpeer_of(p, true) : NULL;
		if (!rp) {
			rconn_kill(rc);
			return;
		}
		rc->peer = p;
		TAILQ_INSERT_TAIL(&rp->conns, rc, peer_link);
	}
	if (rc->authenticated)
		xd_link_key_proven(p, rc->key_id);
	d->link_events->up(p, rc->hello.epoch);
	connect_data(rc);
}

/* ---- data ---- */

/*
 * Fills @wr and @sge with the next request of @x (piece @pc) on @rc's queue and files it in the
 * sq ring (with a reference on @x): the caller posts it, alone or in a chain.
 */
static void data_wr(struct xd_rconn *rc, struct xd_xfer *x, const struct xd_rdma_piece *pc,
		    bool signaled, struct xd_stage_chunk *chunk, struct ibv_send_wr *wr,
		    struct ibv_sge *sge)
{
	uint64_t idx = rc->sq_head;
	bool read = !x->source;

	*sge = (struct ibv_sge){ pc->laddr, pc->len, pc->lkey };
	*wr = (struct ibv_send_wr){
		.wr_id = (uint64_t)rc->id << 32 | (uint32_t)(idx % RC_SQ_DEPTH),
		.sg_list = sge,
		.num_sge = 1,
		.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
		.send_flags = signaled ? IBV_SEND_SIGNALED : 0,
		.wr.rdma = { .remote_addr = pc->raddr, .rkey = pc->rkey },
	};
	dp_log("conn %u: %s of %u bytes, sq %llu, signaled %d", rc->id, read ? "READ" : "WRITE",
	       pc->len, (unsigned long long)idx, signaled);
	xd_xfer_ref(x);
	xd_xfer_request_posted(x);
	rc->sq[idx % RC_SQ_DEPTH] = (struct sq_entry){
		.kind = SQ_DATA, .x = x, .chunk = chunk, .bytes = pc->len, .read = read
	};
	rc->sq_head++;
}

/*
 * A post of @x's RDMA READs or WRITEs failed with @err (errno): the connection (its set) fails,
 * naming the post and where it was made. (Posts that xd_rdma_post() queued for the device's
 * poster thread fail later, in rconn_post_failed().)
 */
static void data_post_failed(struct xd_rconn *rc, const struct xd_xfer *x, int err)
{
	rconn_fail(rc, err,
		   x->source ? "ibv_post_send of RDMA WRITEs failed (on the event loop)" :
			       "ibv_post_send of RDMA READs failed (on the event loop)");
}

/* One request of @x: data_wr() posted alone. */
static int post_data(struct xd_rconn *rc, struct xd_xfer *x, const struct xd_rdma_piece *pc,
		     bool signaled, struct xd_stage_chunk *chunk)
{
	struct ibv_send_wr wr;
	struct ibv_sge sge;

	data_wr(rc, x, pc, signaled, chunk, &wr, &sge);
	return rc_post(rc, &wr, x->source);
}

/* Where transfer offset @off falls in @n ranges of lengths @len(i): index and offset in it. */
#define LOCATE(n, len, off, idx, in)                      \
	do {                                              \
		(idx) = 0;                                \
		(in) = (off);                             \
		while ((idx) < (n) && (in) >= len(idx)) { \
			(in) -= len(idx);                 \
			(idx)++;                          \
		}                                         \
	} while (0)

/* ---- staged transfers: file regions through staging buffers (PROTOCOL.md §10.5.1) ---- */

/*
 * A chunk of a staged transfer: up to rdma_staging_size bytes at transfer offset @off that pass
 * through one staging buffer of this daemon (x->stage_local) and/or through one the owner
 * granted (x->stage_remote). Its steps, each on the loop thread or a copy worker:
 *
 *   active, source:  [fill: worker copies the file into the buffer] -> RDMA WRITE into the
 *                    owner's memory or granted buffer (+ STAGED to the owner) -> done
 *   active, target:  RDMA READ into the buffer or memory (+ STAGED to the owner)
 *                    -> [drain: worker copies the buffer into the file] -> done
 *   owner, source:   fill -> window (read-only, this chunk only) and STAGE -> STAGED -> done
 *   owner, target:   window (write-only) and STAGE -> STAGED -> drain -> done
 *
 * A chunk holds a reference on its transfer; its buffer goes back to the pool only once no
 * worker, no posted request and no window can reach it any more.
 */
enum chunk_state {
	CH_WAIT,       /**< needs a buffer, or queue room for its requests or its window */
	CH_FILL,       /**< a worker copies the transfer's bytes into the buffer */
	CH_POST,       /**< its requests are being posted (several turns when the queue is full) */
	CH_POSTED,     /**< every request posted, not all completed */
	CH_GRANTED,    /**< owner: a window onto the buffer is the claimer's, until STAGED */
	CH_DRAIN,      /**< a worker copies the buffer out into the transfer's segments */
	CH_DRAIN_WAIT, /**< an O_DIRECT target: waits for the drain of another chunk to end */
	CH_DONE,       /**< its bytes are where they go (or it was given up) */
};

struct xd_stage_chunk {
	TAILQ_ENTRY(xd_stage_chunk) link; /**< in d->rdma->chunks */
	struct xd_xfer *x;		  /**< a reference */
	uint32_t conn;			  /**< the connection that carries the transfer (x->via) */
	struct xd_rdma_dev *dev;
	enum chunk_state state;
	bool has_buf, worker;
	bool filled; /**< a source's bytes are in the buffer */
	bool told;   /**< active, owner staged: STAGED is queued (the owner's chunk is free) */
	uint32_t buf;
	uint64_t off;
	uint32_t len;
	uint32_t posted, retired;    /**< bytes of its RDMA requests posted / completed */
	uint64_t raddr;		     /**< active, owner staged: the owner's granted buffer */
	uint32_t rkey;		     /**< (its window's key) */
	struct xd_rdma_grant *grant; /**< owner: the window onto the buffer, until freed */
	bool flushed;		     /**< a request of it never ran (its connection died) */
	/*
	 * Freed at the next loop turn: ending a transfer ends all its chunks, from inside loops
	 * over the chunk list, which a free there would break.
	 */
	bool freeing;
	struct xd_deferred free_later;
};

static void chunk_step(struct xd_rconn *rc, struct xd_stage_chunk *c);

/* Chunks of one transfer in flight at once: half the pool, at most XD_STAGE_DEPTH_MAX. */
static unsigned stage_depth(const struct xd_rdma_dev *dev)
{
	unsigned half = dev->rdma->d->cfg.rdma_staging_buffers / 2;

	return half < 1 ? 1 : half > XD_STAGE_DEPTH_MAX ? XD_STAGE_DEPTH_MAX : half;
}

static bool chunk_owner(const struct xd_stage_chunk *c)
{
	return !c->x->active;
}

/* Wakes every connection once a buffer came free for a chunk that found none. */
static void stage_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_rdma *rd = arg;
	struct xd_rconn *rc, *tmp;

	TAILQ_FOREACH_SAFE(rc, &rd->live, link, tmp)
		if (rc->peer)
			rconn_pump(rc);
}

static void chunk_free(void *arg)
{
	struct xd_stage_chunk *c = arg;

	TAILQ_REMOVE(&c->dev->rdma->chunks, c, link);
	xd_xfer_unref(c->x);
	free(c);
}

/*
 * Lets @c go once nothing can reach its buffer any more (no worker, request or window): the
 * buffer goes back to the pool at once, the chunk at the next turn.
 */
static void chunk_maybe_free(struct xd_stage_chunk *c)
{
	static const struct timeval now = { 0, 0 };
	struct xd_rdma *rd = c->dev->rdma;

	if (c->state != CH_DONE || c->worker || c->retired != c->posted || c->grant || c->freeing)
		return;
	c->freeing = true;
	if (c->has_buf) {
		xd_rdma_stage_put(c->dev, c->buf);
		if (c->dev->staging.waiting && rd->stage_kick_ev) {
			c->dev->staging.waiting = false;
			evtimer_add(rd->stage_kick_ev, &now);
		}
	}
	c->x->stage_chunks--;
	xd_defer(rd->d, &c->free_later, chunk_free, c);
}

/* @c is over (its bytes in place, or given up): what still holds it lets go, then it goes. */
static void chunk_done(struct xd_stage_chunk *c)
{
	if (c->state == CH_POST || c->state == CH_WAIT || c->state == CH_FILL)
		if (c->x->active)
			c->x->stage_unposted--;
	if (c->x->active && c->x->stage_remote && !c->told) {
		c->told = true; /* (the owner's grant ends with the transfer, or the set) */
		c->x->stage_held--;
	}
	c->state = CH_DONE;
	if (c->grant) {
		/* Revoked now or once its bind left the queue; its freed callback frees @c. */
		xd_rdma_grant_close(c->grant);
		return;
	}
	chunk_maybe_free(c);
}

static void chunk_grant_freed(void *arg)
{
	struct xd_stage_chunk *c = arg;

	c->grant = NULL;
	chunk_maybe_free(c);
}

static struct xd_stage_chunk *chunk_new(struct xd_rconn *rc, struct xd_xfer *x, uint64_t off,
					uint32_t len)
{
	struct xd_stage_chunk *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->x = x;
	xd_xfer_ref(x);
	c->conn = rc->id;
	c->dev = rc->dev;
	c->off = off;
	c->len = len;
	c->state = CH_WAIT;
	x->stage_chunks++;
	if (x->active)
		x->stage_unposted++;
	TAILQ_INSERT_TAIL(&rc->d->rdma->chunks, c, link);
	return c;
}

/* A region of the transfer failed (a file cut short, ENOSPC): its operation ends with @why. */
static void stage_failed(struct xd_xfer *x, int err, const char *why)
{
	if (!x->io_err) {
		x->io_err = err;
		snprintf(x->io_why, sizeof(x->io_why), "%s", why);
	}
	if (xd_xfer_live(x))
		xd_xfer_io_failed(x);
}

/* Takes a staging buffer for @c. Returns 0, -EAGAIN (none free: @c waits) or -errno (failed). */
static int chunk_take_buffer(struct xd_stage_chunk *c)
{
	char msg[XD_CAUSE_MAX];
	int err;

	if (c->has_buf)
		return 0;
	err = xd_rdma_stage_get(c->dev, &c->buf, msg, sizeof(msg));
	if (err == -EAGAIN)
		return err;
	if (err) {
		stage_failed(c->x, -err, msg);
		chunk_done(c);
		return err;
	}
	c->has_buf = true;
	return 0;
}

static void chunk_copied(void *arg, int err, uint64_t bytes, const char *why);

/* Whether @x writes into a file opened O_DIRECT (its segments here are the target). */
static bool xfer_direct_target(const struct xd_xfer *x)
{
	for (uint32_t i = 0; i < x->nsegs && !x->source; i++)
		if (x->segs[i].region->dio_align)
			return true;
	return false;
}

/* Whether another chunk of @c's transfer is in @state (a worker fills or drains it). */
static bool chunk_sibling_in(const struct xd_stage_chunk *c, enum chunk_state state)
{
	const struct xd_stage_chunk *o;

	TAILQ_FOREACH(o, &c->dev->rdma->chunks, link)
		if (o != c && o->x == c->x && o->state == state)
			return true;
	return false;
}

/* Has a worker copy @c's bytes into its buffer (@fill) or out of it. Returns 0 or -errno. */
static int chunk_copy(struct xd_rconn *rc, struct xd_stage_chunk *c, bool fill)
{
	struct xd_seg buf = xd_rdma_stage_seg(c->dev, c->buf, c->len);
	struct xd_seg *segs = NULL;
	int err = -ENOMEM;

	/*
	 * Note that an O_DIRECT target writes whole blocks, reading back the edges of a piece
	 * that does not cover them: two chunks that share a block (a chunk edge at an unaligned
	 * file position) drained at once would each write the other's bytes back as they were.
	 * Such a transfer drains one chunk at a time; the others wait their turn.
	 */
	if (!fill && xfer_direct_target(c->x) && chunk_sibling_in(c, CH_DRAIN)) {
		c->state = CH_DRAIN_WAIT;
		return 0;
	}
	segs = calloc(c->x->nsegs, sizeof(*segs));
	if (segs) {
		uint32_t n = xd_xfer_slice(c->x, c->off, c->len, segs, c->x->nsegs);
		c->worker = true;
		c->state = fill ? CH_FILL : CH_DRAIN;
		err = fill ? xd_copy_submit(rc->d, &buf, 1, segs, n, chunk_copied, c) :
			     xd_copy_submit(rc->d, segs, n, &buf, 1, chunk_copied, c);
		if (err)
			c->worker = false;
	}
	free(segs);
	return err;
}

/* The next RDMA request of @c: local side (buffer or mapped segment), remote side. */
static void chunk_piece(const struct xd_stage_chunk *c, struct xd_rdma_piece *pc)
{
	const struct xd_xfer *x = c->x;
	uint64_t off = c->off + c->posted, left = c->len - c->posted, in, llen, rlen;
	uint32_t i;

	if (x->stage_local) {
		pc->laddr = (uintptr_t)xd_rdma_stage_addr(c->dev, c->buf) + c->posted;
		pc->lkey = c->dev->staging.mr->lkey;
		llen = left;
	} else {
#define LLEN(k) x->segs[k].length
		LOCATE(x->nsegs, LLEN, off, i, in);
#undef LLEN
		const struct xd_seg *s = &x->segs[i];
		pc->laddr = (uintptr_t)(s->region->base + s->offset + in);
		pc->lkey = xd_rdma_lkey(s->region, c->dev->index);
		llen = s->length - in;
	}
	if (x->stage_remote) {
		pc->raddr = c->raddr + c->posted;
		pc->rkey = c->rkey;
		rlen = left;
	} else {
#define RLEN(k) x->rsegs[k].len
		LOCATE(x->nrsegs, RLEN, off, i, in);
#undef RLEN
		pc->raddr = x->rsegs[i].addr + in;
		pc->rkey = x->rsegs[i].rkey;
		rlen = x->rsegs[i].len - in;
	}
	uint64_t len = left < llen ? left : llen;
	len = len < rlen ? len : rlen;
	pc->len = (uint32_t)(len < c->dev->max_request ? len : c->dev->max_request);
}

/* Queues STAGED for @c: the owner's buffer is read (after the READ) or written (behind it). */
static int chunk_tell_owner(struct xd_rconn *rc, struct xd_stage_chunk *c)
{
	json_t *j = json_pack("{s:I}", "off", (json_int_t)c->off);
	int err = j ? rconn_queue(rc, XP_PEER_STAGED, XP_PEER_FROM_ACTIVE, c->x->id, j) : -ENOMEM;

	json_decref(j);
	if (!c->told) {
		c->told = true;
		c->x->stage_held--;
	}
	return err;
}

/* Active source: DONE may follow once every chunk's requests are posted. */
static void stage_check_all_posted(struct xd_xfer *x)
{
	if (x->active && x->source && !x->stage_all_posted && !xd_xfer_has_more(x) &&
	    x->stage_unposted == 0 && xd_xfer_live(x)) {
		x->stage_all_posted = true;
		xd_xfer_all_posted(x);
	}
}

/*
 * Posts @c's requests while the send queue has room (each batch's last one signalled, so that
 * its completion retires the batch); once all are posted, a WRITE into the owner's buffer is
 * followed by STAGED (RC places the WRITE before the owner sees the SEND).
 */
static void chunk_post(struct xd_rconn *rc, struct xd_stage_chunk *c)
{
	/*
	 * A new chunk goes on the wire only while the queue pair carries less than this many
	 * staged bytes: what is posted beyond it only holds back the control messages queued
	 * behind (RC_WINDOW above), here the STAGED that lets the owner refill its buffer. Reads
	 * of an owner's granted chunks take the whole window all the same (1 MiB chunks, 64 MiB
	 * reads in the VM: 0.69-0.73x of memory's rate with half of it, 0.77-0.95x with all of it,
	 * alternating in one boot): the owner keeps up to XD_STAGE_DEPTH_MAX chunks granted, so it
	 * fills the next ones while the STAGED of the first waits behind the READs. (Sending
	 * STAGED on the set's control queue pair instead gained nothing measurable: 0.70-0.88x.)
	 * Writes into granted chunks keep half (not measured otherwise).
	 */
	uint64_t wire = c->x->stage_remote && c->x->source ? XD_RDMA_CHUNK : RC_WINDOW_BYTES;

	c->state = CH_POST;
	if (c->posted == 0 && rc->stage_wire > 0 && rc->stage_wire + c->len > wire)
		return; /* (stage_retry() posts it once requests complete) */
	xd_busypoll_note_bulk(rc->d, c->len);
	while (c->posted < c->len) {
		if (sq_full(rc, 2))
			return; /* (stage_retry() goes on once completions free the queue) */
		struct xd_rdma_piece pc;
		chunk_piece(c, &pc);
		bool last = c->posted + pc.len == c->len || sq_full(rc, 3);
		int err = post_data(rc, c->x, &pc, last, c);
		if (err) {
			data_post_failed(rc, c->x, -err);
			return;
		}
		c->posted += pc.len;
		rc->stage_wire += pc.len;
	}
	c->state = CH_POSTED;
	c->x->stage_unposted--;
	rc->last_tx_us = xd_now_us();
	if (c->x->source && c->x->stage_remote && chunk_tell_owner(rc, c) < 0) {
		rconn_fail(rc, ENOBUFS, "could not queue STAGED");
		return;
	}
	stage_check_all_posted(c->x);
}

/* Binds a window onto exactly @c's bytes of its buffer for the claimer's queue pair. */
static int chunk_bind(struct xd_rconn *rc, struct xd_stage_chunk *c, uint32_t *rkey)
{
	struct xd_rdma_grant *g = calloc(1, sizeof(*g) + sizeof(g->w[0]));
	uint64_t idx = rc->sq_head;

	if (!g)
		return -ENOMEM;
	g->dev = rc->dev;
	g->conn = rc->id;
	g->w[0].mw = ibv_alloc_mw(rc->dev->pd, IBV_MW_TYPE_2);
	if (!g->w[0].mw) {
		int err = errno ? -errno : -ENOMEM;
		free(g);
		return err;
	}
	g->n = 1;
	rc->dev->counters.windows_open++;
	struct ibv_send_wr wr = {
		.wr_id = (uint64_t)rc->id << 32 | (uint32_t)(idx % RC_SQ_DEPTH),
		.opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_mw = {
			.mw = g->w[0].mw,
			.rkey = ibv_inc_rkey(g->w[0].mw->rkey),
			.bind_info = { .mr = rc->dev->staging.mr,
				       .addr = (uintptr_t)xd_rdma_stage_addr(rc->dev, c->buf),
				       .length = c->len,
				       .mw_access_flags = c->x->source ? IBV_ACCESS_REMOTE_READ
								       : IBV_ACCESS_REMOTE_WRITE },
		},
	};
	int err = rc_post(rc, &wr, false);
	if (err) {
		grant_free(g);
		return err;
	}
	*rkey = wr.bind_mw.rkey;
	rc->sq[idx % RC_SQ_DEPTH] = (struct sq_entry){ .kind = SQ_BIND };
	rc->sq_head++;
	g->bound_at = rc->sq_head;
	rc->dev->counters.windows_bound++;
	g->freed = chunk_grant_freed;
	g->freed_arg = c;
	c->grant = g;
	return 0;
}

/* Owner: a window onto @c's buffer, and STAGE telling the claimer where it is. */
static void chunk_grant(struct xd_rconn *rc, struct xd_stage_chunk *c)
{
	uint32_t rkey;
	int err;

	c->state = CH_WAIT;
	if (!rc->dev->windows) {
		stage_failed(c->x, EOPNOTSUPP,
			     "the RDMA device has no memory windows: a staging buffer of a file "
			     "region cannot be granted one chunk at a time (use transport tcp)");
		chunk_done(c);
		return;
	}
	/* In order: the claimer takes STAGEs in order (fills may finish in any). */
	if (sq_full(rc, 2) || c->off != c->x->stage_granted)
		return; /* (stage_retry() binds it once the queue has room, or its turn came) */
	err = chunk_bind(rc, c, &rkey);
	json_t *j = err ? NULL :
			  json_pack("{s:I, s:I, s:I, s:I}", "off", (json_int_t)c->off, "len",
				    (json_int_t)c->len, "addr",
				    (json_int_t)(uintptr_t)xd_rdma_stage_addr(c->dev, c->buf),
				    "rkey", (json_int_t)rkey);
	if (!err)
		err = j ? rconn_queue(rc, XP_PEER_STAGE, 0, c->x->id, j) : -ENOMEM;
	json_decref(j);
	if (err) {
		stage_failed(c->x, -err, "could not grant a staging buffer to the claimer");
		chunk_done(c);
		return;
	}
	c->state = CH_GRANTED;
	c->x->stage_granted += c->len;
}

/* Takes @c as far as it goes now. */
static void chunk_step(struct xd_rconn *rc, struct xd_stage_chunk *c)
{
	struct xd_xfer *x = c->x;
	bool live = xd_xfer_live(x) && !x->draining && !x->io_err;

	if (!live) {
		chunk_done(c);
		return;
	}
	if (c->state == CH_WAIT && (x->stage_local || chunk_owner(c)) && chunk_take_buffer(c))
		return; /* (waits, or failed and done) */
	if (c->state == CH_WAIT && x->source && !c->filled && (x->stage_local || chunk_owner(c))) {
		/*
		 * An owner stages only when it has a file; its source is filled first. One chunk
		 * of a transfer at a time, in order: chunks go on the wire in order, and fills
		 * side by side only slowed the one needed next (Soft-RoCE VM: with all 8 filled at
		 * once, the wire waited up to 119 ms for the 4 MiB chunk after the first ramp; a
		 * fill runs well ahead of the wire on its own). (stage_retry() starts the next.)
		 */
		if (chunk_sibling_in(c, CH_FILL))
			return;
		if (chunk_copy(rc, c, true)) {
			stage_failed(x, ECANCELED, "no copy worker for the staging buffer");
			chunk_done(c);
		}
		return;
	}
	if (chunk_owner(c))
		chunk_grant(rc, c);
	else
		chunk_post(rc, c);
}

/* A drain of @x ended: the next chunk that waited for it (O_DIRECT target) goes on. */
static void drain_next(struct xd_rconn *rc, struct xd_xfer *x)
{
	struct xd_stage_chunk *c;

	TAILQ_FOREACH(c, &rc->d->rdma->chunks, link)
		if (c->x == x && c->state == CH_DRAIN_WAIT)
			break;
	if (c && chunk_copy(rc, c, false)) {
		stage_failed(x, ECANCELED, "no copy worker for the staging buffer");
		chunk_done(c);
	}
}

/* A worker filled or drained @c (on the loop thread). */
static void chunk_copied(void *arg, int err, uint64_t bytes, const char *why)
{
	struct xd_stage_chunk *c = arg;
	struct xd_xfer *x = c->x;
	struct xd_rconn *rc = rconn_find(c->dev->rdma, c->conn);
	bool fill = c->state == CH_FILL, drained = c->state == CH_DRAIN;

	c->worker = false;
	if (c->state == CH_DONE) { /* given up meanwhile (its transfer or connection ended) */
		chunk_maybe_free(c);
	} else if (err) {
		stage_failed(x, err, why ? why : strerror(err));
		chunk_done(c);
	} else if (!fill) {
		/* drained: the bytes are in the target */
		c->state = CH_DONE;
		if (xd_xfer_live(x))
			xd_xfer_data_received(x, c->len);
		chunk_maybe_free(c);
	} else if (!rc || rc->dead) {
		chunk_done(c);
	} else {
		c->state = CH_WAIT;
		c->filled = true;
		chunk_step(rc, c);
	}
	if (drained && rc && !rc->dead && xd_xfer_live(x))
		drain_next(rc, x);
	if (rc && !rc->dead)
		rconn_pump(rc);
}

/* A chunk's requests all completed: what they moved is told, or goes on to its target. */
static void chunk_moved(struct xd_rconn *rc, struct xd_stage_chunk *c)
{
	struct xd_xfer *x = c->x;

	if (c->flushed || !xd_xfer_live(x)) {
		chunk_done(c);
		return;
	}
	if (x->source) {
		xd_xfer_data_sent(x, c->len);
		chunk_done(c);
		return;
	}
	if (x->stage_remote && chunk_tell_owner(rc, c) < 0) {
		rconn_fail(rc, ENOBUFS, "could not queue STAGED");
		chunk_done(c);
		return;
	}
	if (!x->stage_local) {
		xd_xfer_data_received(x, c->len);
		chunk_done(c);
		return;
	}
	if (chunk_copy(rc, c, false)) {
		stage_failed(x, ECANCELED, "no copy worker for the staging buffer");
		chunk_done(c);
	}
}

static void stage_request_done(struct xd_rconn *rc, struct xd_stage_chunk *c, uint32_t bytes)
{
	c->retired += bytes;
	rc->stage_wire -= bytes;
	if (c->state == CH_POSTED && c->retired == c->posted)
		chunk_moved(rc, c);
	else if (c->state == CH_DONE)
		chunk_maybe_free(c);
}

/* A request of @c was flushed with its connection: it never ran. */
static void stage_request_flushed(struct xd_stage_chunk *c, uint32_t bytes)
{
	c->flushed = true;
	c->retired += bytes;
	if (c->state != CH_DONE && c->retired == c->posted)
		chunk_done(c);
	else
		chunk_maybe_free(c);
}

/*
 * @rc is being destroyed: its chunks stop (their transfers have failed with the set), and the
 * windows onto them go to the connection's closed grants, which are freed next.
 */
static void stage_conn_gone(struct xd_rconn *rc)
{
	struct xd_stage_chunk *c, *tmp;

	TAILQ_FOREACH_SAFE(c, &rc->d->rdma->chunks, link, tmp)
		if (c->conn == rc->id && c->state != CH_DONE)
			chunk_done(c);
}

/* Goes on with @rc's chunks that waited for a buffer or for room in the send queue. */
static void stage_retry(struct xd_rconn *rc)
{
	struct xd_stage_chunk *c, *tmp;

	TAILQ_FOREACH_SAFE(c, &rc->d->rdma->chunks, link, tmp)
		if (c->conn == rc->id && !rc->dead && (c->state == CH_WAIT || c->state == CH_POST))
			c->state == CH_POST ? chunk_post(rc, c) : chunk_step(rc, c);
}

/*
 * The length of @x's chunk at @off, for buffers of @size: a source's first chunks (which are
 * filled before anything moves) ramp up from XD_STAGE_FIRST, each as long as all before it, so
 * that the wire starts after a short fill and chunk edges stay at multiples of XD_STAGE_FIRST.
 */
static uint32_t stage_chunk_len(const struct xd_xfer *x, uint64_t off, uint32_t size)
{
	if (!x->source || off >= size || size <= XD_STAGE_FIRST)
		return size;
	return off < XD_STAGE_FIRST ? XD_STAGE_FIRST : (uint32_t)off;
}

/*
 * A staged transfer's turn in @rc's queue: cuts its next chunk (stage_chunk_len(): edges at
 * multiples of XD_STAGE_FIRST from its start, so that O_DIRECT files stay aligned) when it has
 * one to spare. The
 * active side of an owner that stages cuts nothing: the owner's STAGEs do. Returns whether a
 * chunk was cut.
 */
static bool stage_pump(struct xd_rconn *rc, struct xd_xfer *x)
{
	uint64_t left = x->length - x->next_off;
	uint32_t size = rc->d->cfg.rdma_staging_size;

	if (!x->active && x->stage_max && x->stage_max < size)
		size = x->stage_max; /* (the claimer stages too, in buffers of that size) */
	if ((x->active && x->stage_remote) || !xd_xfer_live(x) || x->draining || x->io_err ||
	    x->stage_chunks >= stage_depth(rc->dev) || left == 0)
		return false;
	if (rc->dev->staging.mr && rc->dev->staging.nfree == 0) {
		rc->dev->staging.waiting = true;
		return false;
	}
	size = stage_chunk_len(x, x->next_off, size);
	struct xd_stage_chunk *c =
		chunk_new(rc, x, x->next_off, left < size ? (uint32_t)left : size);
	if (!c) {
		stage_failed(x, ENOMEM, "out of memory for a staging chunk");
		return false;
	}
	xd_xfer_advance(x, c->len);
	chunk_step(rc, c);
	return true;
}

/* Active, owner staged: a STAGE grants one chunk of the owner's buffers. */
static int on_stage(struct xd_rconn *rc, struct xd_xfer *x, json_t *json)
{
	json_int_t off, len, addr, rkey;

	if (!x->active || !x->stage_remote || !json ||
	    json_unpack(json, "{s:I, s:I, s:I, s:I}", "off", &off, "len", &len, "addr", &addr,
			"rkey", &rkey) ||
	    (uint64_t)off != x->next_off || len <= 0 || len > XD_STAGE_SIZE_MAX ||
	    (uint64_t)len > x->length - x->next_off || rkey < 0 || rkey > UINT32_MAX ||
	    x->stage_held >= XD_STAGE_DEPTH_MAX ||
	    (x->stage_local && (uint64_t)len > rc->d->cfg.rdma_staging_size))
		return -EPROTO; /* (in order, within the transfer and our buffers, no more than an
				   owner grants at once) */
	if (!xd_xfer_live(x) || x->io_err)
		return 0;
	struct xd_stage_chunk *c = chunk_new(rc, x, (uint64_t)off, (uint32_t)len);
	if (!c)
		return -ENOMEM;
	c->raddr = (uint64_t)addr;
	c->rkey = (uint32_t)rkey;
	x->stage_held++;
	xd_xfer_advance(x, c->len);
	chunk_step(rc, c);
	return 0;
}

/* Owner: STAGED says the claimer is through with a granted chunk. */
static int on_staged(struct xd_xfer *x, json_t *json)
{
	struct xd_stage_chunk *c;
	json_int_t off;

	if (x->active || !x->stage_local || !json || json_unpack(json, "{s:I}", "off", &off))
		return -EPROTO;
	TAILQ_FOREACH(c, &x->peer->d->rdma->chunks, link)
		if (c->x == x && c->off == (uint64_t)off && c->state == CH_GRANTED)
			break;
	if (!c)
		return -EPROTO; /* (never granted, or told twice) */
	if (c->grant)
		xd_rdma_grant_close(c->grant); /* revoked before the bytes are used */
	if (x->source || !xd_xfer_live(x)) {
		if (x->source && xd_xfer_live(x))
			xd_xfer_data_sent(x, c->len);
		chunk_done(c);
	} else {
		struct xd_rconn *rc = rconn_find(c->dev->rdma, c->conn);
		if (!rc || chunk_copy(rc, c, false)) {
			stage_failed(x, ECANCELED, "no copy worker for the staging buffer");
			chunk_done(c);
		}
	}
	return 0;
}

static int stage_message(struct xd_rconn *rc, const struct xp_peer_hdr *h, json_t *json)
{
	bool from_active = h->flags & XP_PEER_FROM_ACTIVE;

	if (!rc->peer || (h->type == XP_PEER_STAGE) == from_active)
		return -EPROTO;
	struct xd_xfer *x = xd_xfer_find(rc->peer, h->xfer, !from_active);
	if (!x)
		return 0; /* it ended here already */
	if (x->via != rc->id)
		return -EPROTO;
	return h->type == XP_PEER_STAGE ? on_stage(rc, x, json) : on_staged(x, json);
}

void xd_rdma_stage_close(struct xd_xfer *x)
{
	struct xd_stage_chunk *c, *tmp;

	TAILQ_FOREACH_SAFE(c, &x->peer->d->rdma->chunks, link, tmp)
		if (c->x == x && c->state != CH_DONE)
			chunk_done(
				c); /* (what a worker or a request holds goes once they are back) */
}

/*
 * Takes the next chunk (at most @max bytes, pieces at most @max_request, each within one local
 * and one remote segment) of @x for device @dev: fills @pieces (at most @maxp) and returns the
 * bytes they cover (0: nothing left).
 */
static uint32_t next_chunk(struct xd_xfer *x, int dev, uint32_t max, uint32_t max_request,
			   struct xd_rdma_piece *pieces, int maxp, int *np)
{
	uint64_t off = x->next_off, left = x->length - x->next_off, lin, rin;
	uint32_t li, ri, done = 0;

	if (left > max)
		left = max;
#define LLEN(i) x->segs[i].length
#define RLEN(i) x->rsegs[i].len
	LOCATE(x->nsegs, LLEN, off, li, lin);
	LOCATE(x->nrsegs, RLEN, off, ri, rin);
	*np = 0;
	while (done < left && *np < maxp && li < x->nsegs && ri < x->nrsegs) {
		const struct xd_seg *ls = &x->segs[li];
		uint64_t len = left - done;
		if (len > ls->length - lin)
			len = ls->length - lin;
		if (len > x->rsegs[ri].len - rin)
			len = x->rsegs[ri].len - rin;
		if (len > max_request)
			len = max_request;
		pieces[(*np)++] = (struct xd_rdma_piece){
			.laddr = (uintptr_t)(ls->region->base + ls->offset + lin),
			.lkey = xd_rdma_lkey(ls->region, dev),
			.raddr = x->rsegs[ri].addr + rin,
			.rkey = x->rsegs[ri].rkey,
			.len = (uint32_t)len,
		};
		done += (uint32_t)len;
		if ((lin += len) == ls->length) {
			li++;
			lin = 0;
		}
		if ((rin += len) == x->rsegs[ri].len) {
			ri++;
			rin = 0;
		}
	}
#undef LLEN
#undef RLEN
	xd_xfer_advance(x, done);
	return done;
}

/*
 * Posts one chunk of the next transfer in the peer's round-robin queue: its turn of up to
 * XD_RDMA_CHUNK (4 MiB), as RDMA READs or WRITEs of at most rdma_request_size each (default
 * 128 KiB; never more than the device's largest message), only the last one signalled, all in
 * one chain (one doorbell) for the poster thread. A real
 * NIC moves 4 MiB in well under a millisecond, so other transfers on the connection still take
 * turns often. Why requests smaller than the chunk: the requester of a queue pair keeps several
 * of them moving at once, and Soft-RoCE sends no new request more than 128 packets ahead of the
 * oldest unacknowledged one, so a 1 MiB READ (1024 packets) runs alone and the round trip of
 * the request behind it is never hidden: in the VM, 1 MiB reads, 8 in flight, ran ~1.4x faster
 * as 128 KiB requests than as one request each (256 KiB alike; 4 and 16 MiB no slower).
 */
static bool pump_one(struct xd_rconn *rc)
{
	struct xd_rdma_piece pieces[XD_RDMA_MAX_PIECES];
	struct ibv_send_wr wrs[XD_RDMA_MAX_PIECES];
	struct ibv_sge sges[XD_RDMA_MAX_PIECES];
	int n = 0;
	struct xd_xfer *x = xd_xfer_sendq_next(&rc->peer->sendq, rc->id);

	if (!x)
		return false;
	if (x->stage_local || x->stage_remote)
		return stage_pump(rc, x);
	if (rc->chunk_bytes >= RC_WINDOW_BYTES || sq_full(rc, XD_RDMA_MAX_PIECES + 1))
		return false;
	uint32_t len = next_chunk(x, rc->dev->index, XD_RDMA_CHUNK, rc->dev->max_request, pieces,
				  XD_RDMA_MAX_PIECES, &n);
	if (len == 0)
		return false;
	xd_busypoll_note_bulk(rc->d, len);
	for (int i = 0; i < n; i++) {
		data_wr(rc, x, &pieces[i], i == n - 1, NULL, &wrs[i], &sges[i]);
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	int err = rc_post(rc, wrs, x->source); /* (one chain, one doorbell) */
	if (err) {
		data_post_failed(rc, x, -err);
		return false;
	}
	rc->sq[(rc->sq_head - 1) % RC_SQ_DEPTH].chunk_len = len;
	rc->chunks++;
	rc->chunk_bytes += len;
	rc->last_tx_us = xd_now_us();
	if (x->source && !xd_xfer_has_more(x))
		xd_xfer_all_posted(x);
	return true;
}

/* Transfers of @rc's queue (bound to it) that pump_one() may pick. */
static unsigned sendq_count(const struct xd_rconn *rc)
{
	const struct xd_xfer *x;
	unsigned n = 0;

	TAILQ_FOREACH(x, &rc->peer->sendq, send_link)
		n += x->via == rc->id;
	return n;
}

/*
 * Moves what may move: staged chunks that waited for a buffer or queue room first, then a
 * chunk per transfer in turn until none of them can take one (a transfer of memory only while
 * RC_WINDOW chunks are not already in flight; a staged one while it has chunks to spare).
 */
static void rconn_pump(struct xd_rconn *rc)
{
	if (rc->dead || !rc->established || !rconn_ready(rc))
		return;
	stage_retry(rc);
	for (unsigned idle = 0, n = sendq_count(rc); !rc->dead && idle < n;)
		idle = pump_one(rc) ? 0 : idle + 1;
}

void xd_rdma_kick(struct xd_peer *p)
{
	struct rpeer *rp = rpeer_of(p, false);
	struct xd_rconn *rc, *tmp;

	if (rp)
		TAILQ_FOREACH_SAFE(rc, &rp->conns, peer_link, tmp)
			rconn_pump(rc);
}

/* Retires queue entries up to and including @idx (one signalled completion covers them). */
static void retire_sq(struct xd_rconn *rc, uint32_t idx)
{
	struct xd_rdma_counters *c = &rc->dev->counters;

	while (rc->sq_tail < rc->sq_head && !rc->dead) {
		struct sq_entry *e = &rc->sq[rc->sq_tail % RC_SQ_DEPTH];
		bool last = rc->sq_tail % RC_SQ_DEPTH == idx;
		rc->sq_tail++;
		if (e->kind == SQ_SEND) {
			rc->send_busy[e->slot] = false;
		} else if (e->kind == SQ_DATA) {
			struct xd_xfer *x = e->x;
			*(e->read ? &c->reads : &c->writes) += 1;
			*(e->read ? &c->read_bytes : &c->write_bytes) += e->bytes;
			if (rc->peer) {
				rc->peer->bytes_sent += e->read ? 0 : e->bytes;
				rc->peer->bytes_received += e->read ? e->bytes : 0;
			}
			if (e->chunk) {
				/* (its chunk tells the bytes once they are where they go) */
				stage_request_done(rc, e->chunk, e->bytes);
				xd_xfer_request_done(x);
				xd_xfer_unref(x);
				e->kind = SQ_FREE;
				if (last)
					break;
				continue;
			}
			if (last) {
				rc->chunks--;
				rc->chunk_bytes -= e->chunk_len;
			}
			if (e->read)
				xd_xfer_data_received(x, e->bytes);
			else
				xd_xfer_data_sent(x, e->bytes);
			xd_xfer_request_done(x);
			xd_xfer_unref(x);
		}
		e->kind = SQ_FREE;
		if (last)
			break;
	}
	free_retired_grants(rc, false);
}

/* What a work request was, from our own record: verbs leaves wc->opcode undefined on error. */
static const char *request_kind(const struct xd_rconn *rc, uint32_t low)
{
	if (low & RC_RECV_FLAG)
		return "RECV";
	const struct sq_entry *e = &rc->sq[low % RC_SQ_DEPTH];
	if (e->kind == SQ_SEND)
		return "SEND";
	if (e->kind == SQ_DATA)
		return e->read ? "RDMA READ" : "RDMA WRITE";
	if (e->kind == SQ_BIND)
		return "memory window BIND";
	return "work request";
}

/* PROTOCOL.md §10.5: an error completion fails the set like a broken TCP connection. */
static void completion_error(struct xd_rconn *rc, const struct ibv_wc *wc)
{
	char what[XD_CAUSE_MAX];

	rc->dev->counters.errors++;
	if (wc->status == IBV_WC_WR_FLUSH_ERR)
		snprintf(what, sizeof(what), "work requests flushed: the connection failed");
	else
		snprintf(what, sizeof(what), "%s completed with %s (status %d, vendor error 0x%x)",
			 request_kind(rc, (uint32_t)wc->wr_id), ibv_wc_status_str(wc->status),
			 wc->status, wc->vendor_err);
	rconn_fail(rc, ECONNRESET, what);
}

/* One work completion from @dev's CQ. */
static void rconn_completion(struct xd_rdma_dev *dev, const struct ibv_wc *wc)
{
	struct xd_rconn *rc = rconn_find(dev->rdma, (uint32_t)(wc->wr_id >> 32));
	uint32_t low = (uint32_t)wc->wr_id;

	dp_log("completion: conn %u slot %#x status %d opcode %d len %u",
	       (unsigned)(wc->wr_id >> 32), low, wc->status, wc->opcode, wc->byte_len);
	if (!rc || rc->dead)
		return; /* a connection already torn down: its requests no longer matter */
	dev->counters.completions++;
	if (wc->status != IBV_WC_SUCCESS) {
		completion_error(rc, wc);
		return;
	}
	if (low & RC_RECV_FLAG) {
		int slot = (int)(low & ~RC_RECV_FLAG);
		rc->last_rx_us = xd_now_us();
		dev->counters.recvs++;
		int err = handle_message(rc, recv_buf(rc, slot), wc->byte_len);
		if (fail_if_overfull(rc))
			return;
		if (err) {
			char what[80]; /* (as TCP's: the type tells which rule of §10 it broke) */
			snprintf(what, sizeof(what),
				 "protocol error in a control message (type %s)",
				 wc->byte_len ? xp_peer_type_name(recv_buf(rc, slot)[0]) : "none");
			rconn_fail(rc, -err, what);
			return;
		}
		if (!rc->dead)
			recv_done(rc, slot);
	} else {
		retire_sq(rc, low);
	}
	if (!rc->dead) {
		rconn_flush(rc);
		rconn_pump(rc);
	}
}

/* What a work request of @opcode carries, for a cause. */
static const char *chain_name(enum ibv_wr_opcode opcode)
{
	switch (opcode) {
	case IBV_WR_RDMA_WRITE:
		return "RDMA WRITEs";
	case IBV_WR_RDMA_READ:
		return "RDMA READs";
	case IBV_WR_SEND:
		return "a control message";
	case IBV_WR_BIND_MW:
		return "a memory window bind";
	default:
		return "work requests";
	}
}

/* A chain the device's poster thread could not post (its request of @opcode failed): the set
 * fails. */
static void rconn_post_failed(struct xd_rdma_dev *dev, uint32_t conn, int err,
			      enum ibv_wr_opcode opcode)
{
	struct xd_rconn *rc = rconn_find(dev->rdma, conn);
	char what[96];

	if (!rc || rc->dead)
		return;
	snprintf(what, sizeof(what), "ibv_post_send of %s failed (on the device's poster thread)",
		 chain_name(opcode));
	rconn_fail(rc, err, what);
}

/* ---- keepalive and listing ---- */

void xd_rdma_keepalive(struct xd_peer *p)
{
	struct rpeer *rp = rpeer_of(p, false);
	struct xd_daemon *d = p->d;
	uint64_t now = xd_now_us();
	struct xd_rconn *rc;

	if (!rp)
		return;
	TAILQ_FOREACH(rc, &rp->conns, peer_link) {
		if (!rc->established)
			continue;
		/* Either fails the whole set @p: nothing of it may be touched after. */
		if (fail_if_overfull(rc) || xd_link_silent(p, rc->last_rx_us, now))
			return;
		if ((now - rc->last_tx_us) / 1000 >= d->cfg.keepalive_ms)
			rconn_queue(rc, XP_PEER_PING, 0, 0, NULL);
	}
}

int xd_rdma_peer_conns(const struct xd_peer *p)
{
	const struct rpeer *rp = p->tstate;
	const struct xd_rconn *rc;
	int n = 0;

	if (rp)
		TAILQ_FOREACH(rc, &rp->conns, peer_link)
			n++;
	return n;
}

uint64_t xd_rdma_peer_last_rx(const struct xd_peer *p)
{
	const struct rpeer *rp = p->tstate;
	const struct xd_rconn *rc;
	uint64_t last = 0;

	if (rp)
		TAILQ_FOREACH(rc, &rp->conns, peer_link)
			if (rc->last_rx_us > last)
				last = rc->last_rx_us;
	return last;
}

/* ---- rdma_cm events ---- */

static void on_route_resolved(struct xd_rconn *rc)
{
	struct rdma_conn_param param;
	uint8_t hello[XP_RDMA_HELLO_LEN];
	int err = rconn_setup_qp(rc);

	if (err) {
		rconn_fail(rc, -err, "could not create the queue pair");
		return;
	}
	if (rc->d->keys.n && xd_random(rc->nonce, sizeof(rc->nonce)) < 0) {
		rconn_fail(rc, EIO, "no random nonce for the RDMA HELLO");
		return;
	}
	set_ack_timeout(rc);
	conn_params(rc, &param, hello);
	if (rdma_connect(rc->cm, &param))
		rconn_fail(rc, errno, "rdma_connect failed");
}

static void on_addr_resolved(struct xd_rconn *rc)
{
	rc->dev = xd_rdma_dev_for(rc->d, rc->cm->verbs);
	if (!rc->dev) {
		rconn_fail(rc, EHOSTUNREACH,
			   "the route to the peer leaves through an RDMA "
			   "device this daemon does not use");
		return;
	}
	if (rdma_resolve_route(rc->cm, RC_RESOLVE_MS))
		rconn_fail(rc, errno, "rdma_resolve_route failed");
}

/* What an RDMA HELLO says, as the TCP handshake's MACs take it. */
static void hello_of(struct xd_hello *out, const struct xp_rdma_hello *h)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->node, h->node, XP_ID_BYTES);
	out->epoch = h->epoch;
	out->version = XP_PEER_VERSION;
	out->has_nonce = h->has_nonce;
	memcpy(out->nonce, h->nonce, XD_NONCE_LEN);
}

/* Keyed, the connector: the acceptor's HELLO must offer a challenge; we answer with AUTH. */
static void outgoing_keyed(struct xd_rconn *rc)
{
	char node[2 * XP_ID_BYTES + 1], cause[XD_CAUSE_MAX];

	if (!rc->hello.has_nonce) {
		xp_hex_encode(rc->hello.node, XP_ID_BYTES, node);
		xd_log(XD_LOG_WARN,
		       "RDMA peer connection to %s (node %s) refused: it offers no authentication "
		       "(no cluster key, or --insecure-peers)",
		       rc->from, node);
		snprintf(cause, sizeof(cause),
			 "the daemon at %s offers no authentication (it has no cluster key)",
			 rc->from);
		rconn_fail(rc, EACCES, cause);
		return;
	}
	int err = rconn_send_auth(rc);
	if (err) {
		rconn_fail(rc, -err, "could not send the RDMA AUTH");
		return;
	}
	if (rc->auth_early && !rc->dead)
		auth_verify(rc, rc->auth_mac);
}

static void on_established(struct xd_rconn *rc, const struct rdma_cm_event *ev)
{
	struct xp_rdma_hello hello;

	rc->established = true;
	rc->last_rx_us = xd_now_us();
	if (rc->outgoing) {
		if (xp_rdma_hello_unpack(ev->param.conn.private_data,
					 ev->param.conn.private_data_len, &hello) < 0) {
			rconn_fail(rc, EPROTO,
				   "the peer's HELLO (accept private data) is not valid");
			return;
		}
		if (memcmp(hello.node, rc->peer->node, XP_ID_BYTES) != 0) {
			rconn_fail(rc, EHOSTUNREACH, "the daemon at that address is another node");
			return;
		}
		hello_of(&rc->hello, &hello);
		rc->hello_rx = true;
		if (rc->d->keys.n) {
			outgoing_keyed(rc);
		} else {
			rc->d->link_events->up(rc->peer, hello.epoch);
			connect_data(rc);
		}
		if (rc->dead)
			return;
	}
	rconn_flush(rc);
	rconn_pump(rc);
}

/* Accepted, keyed: the peer did not prove the key in time. */
static void auth_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_rconn *rc = arg;

	if (rc->dead || rc->authenticated)
		return;
	xd_log(XD_LOG_WARN,
	       "RDMA peer connection from %s closed: no AUTH within %llu ms (handshake_timeout_ms)",
	       rc->from, (unsigned long long)rc->d->cfg.handshake_timeout_ms);
	rconn_fail(rc, ETIMEDOUT, "no AUTH in time");
}

/*
 * Why a connection from @from may not wait for its AUTH now (NULL: it may). Each such connection
 * holds a queue pair, its buffers and a registration until handshake_timeout_ms, so they are
 * bounded as TCP bounds connections before HELLO: max_pending_peer_conns in all (per transport),
 * XD_PENDING_PER_ADDR from one address.
 */
static const char *pending_full(struct xd_daemon *d, const char *from)
{
	const struct xd_rconn *rc;
	int total = 0, same = 0;

	TAILQ_FOREACH(rc, &d->rdma->live, link) {
		if (rc->outgoing || rc->authenticated)
			continue;
		total++;
		same += strcmp(rc->from, from) == 0;
	}
	if (total >= d->cfg.max_pending_peer_conns)
		return "too many connections before AUTH (max_pending_peer_conns)";
	if (same >= XD_PENDING_PER_ADDR)
		return "too many connections before AUTH from this address";
	return NULL;
}

/* A peer connects. Returns the id to destroy after the event is acked, if refused. */
static struct rdma_cm_id *on_connect_request(struct xd_daemon *d, struct rdma_cm_event *ev)
{
	struct xp_rdma_hello hello;
	uint8_t mine[XP_RDMA_HELLO_LEN];
	struct rdma_conn_param param;
	struct xd_rdma_dev *dev = xd_rdma_dev_for(d, ev->id->verbs);
	char from[INET6_ADDRSTRLEN + 8] = "?";

	getnameinfo(rdma_get_peer_addr(ev->id), sizeof(struct sockaddr_storage), from, sizeof(from),
		    NULL, 0, NI_NUMERICHOST);
	bool valid = xp_rdma_hello_unpack(ev->param.conn.private_data,
					  ev->param.conn.private_data_len, &hello) == 0;
	bool allowed = xd_netaddr_sockaddr_allowed(d->cfg.peer_allow, d->cfg.npeer_allow,
						   rdma_get_peer_addr(ev->id));
	if (!dev || !valid || d->stopping || !allowed) {
		xd_log(XD_LOG_WARN, "refused an RDMA connection from %s: %s", from,
		       !allowed	   ? "outside peer_allow" :
		       !dev	   ? "device not used" :
		       d->stopping ? "stopping" :
				     "bad HELLO");
		rdma_reject(ev->id, NULL, 0);
		return ev->id;
	}
	bool keyed = d->keys.n > 0;
	const char *full = keyed ? pending_full(d, from) : NULL;
	if (full) {
		xd_log(XD_LOG_WARN, "refused an RDMA connection from %s: %s", from, full);
		rdma_reject(ev->id, NULL, 0);
		return ev->id;
	}
	if (keyed && !hello.has_nonce) {
		char node[2 * XP_ID_BYTES + 1];
		xp_hex_encode(hello.node, XP_ID_BYTES, node);
		xd_log(XD_LOG_WARN,
		       "RDMA peer connection from %s (says node %s) refused: it offers no "
		       "authentication (no cluster key, or --insecure-peers)",
		       from, node);
		rdma_reject(ev->id, NULL, 0);
		return ev->id;
	}
	/*
	 * Keyed, the connection joins no set before the peer's AUTH checks out (rconn_trusted()):
	 * an unproven HELLO displaces no set, brings none up, and has no message served.
	 */
	struct xd_peer *p = keyed ? NULL :
				    d->link_events->attach(d, &xd_transport_rdma_ops, hello.node,
							   hello.epoch, from);
	struct xd_rconn *rc = p || keyed ? rconn_new(d, p, false) : NULL;
	if (!rc) {
		rdma_reject(ev->id, NULL, 0);
		return ev->id;
	}
	rc->cm = ev->id;
	rc->cm->context = rc;
	rc->dev = dev;
	snprintf(rc->from, sizeof(rc->from), "%s", from);
	hello_of(&rc->hello, &hello);
	rc->hello_rx = true;
	rc->control = hello.control;
	int err = keyed && xd_random(rc->nonce, sizeof(rc->nonce)) < 0 ? -EIO : 0;
	if (!err && keyed) {
		rc->auth_timer = evtimer_new(d->base, auth_timeout_cb, rc);
		struct timeval tv = { .tv_sec = (time_t)(d->cfg.handshake_timeout_ms / 1000),
				      .tv_usec = (suseconds_t)(d->cfg.handshake_timeout_ms % 1000) *
						 1000 };
		if (!rc->auth_timer || evtimer_add(rc->auth_timer, &tv) < 0)
			err = -ENOMEM;
	}
	if (!err)
		err = rconn_setup_qp(rc);
	set_ack_timeout(rc);
	conn_params(rc, &param, mine);
	/* Our AUTH waits in the queue for ESTABLISHED: it is the connection's first SEND. */
	if (!err && keyed)
		err = rconn_send_auth(rc);
	if (err || rdma_accept(rc->cm, &param)) {
		rdma_reject(ev->id, NULL, 0);
		rconn_fail(rc, err ? -err : errno, "could not accept the RDMA connection");
		return NULL; /* rconn_free() destroys the id */
	}
	if (!keyed)
		d->link_events->up(p, hello.epoch);
	return NULL;
}

static void on_failure_event(struct xd_rconn *rc, const struct rdma_cm_event *ev)
{
	char what[XD_CAUSE_MAX];
	int err = ev->event == RDMA_CM_EVENT_REJECTED	  ? ECONNREFUSED :
		  ev->event == RDMA_CM_EVENT_DISCONNECTED ? ECONNRESET :
							    EHOSTUNREACH;

	/* A keyed acceptor rejects a HELLO without a nonce: say so on an unkeyed connector. */
	bool hint = ev->event == RDMA_CM_EVENT_REJECTED && rc->outgoing && !rc->d->keys.n;

	snprintf(what, sizeof(what), "rdma_cm %s (status %d)%s", rdma_event_str(ev->event),
		 ev->status,
		 hint ? " (does the peer require a cluster key, which this daemon has none of?)" :
			"");
	rconn_fail(rc, err, what);
}

static struct rdma_cm_id *handle_cm_event(struct xd_daemon *d, struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return on_connect_request(d, ev);
	struct xd_rconn *rc = ev->id->context;
	if (!rc || rc->dead)
		return NULL;
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		on_addr_resolved(rc);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		on_route_resolved(rc);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		on_established(rc, ev);
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		break;
	default:
		on_failure_event(rc, ev);
		break;
	}
	return NULL;
}

static void cm_event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_daemon *d = arg;
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(d->rdma->cm, &ev) == 0) {
		struct rdma_cm_id *destroy = handle_cm_event(d, ev);
		rdma_ack_cm_event(ev);
		if (destroy)
			rdma_destroy_id(destroy); /* only after the ack: librdmacm waits for it */
	}
}

/* ---- listeners ---- */

/* Finds the RoCE v2 GID of IPv4 @addr on @dev, for list.devices. */
static void find_gid(struct xd_rdma_dev *dev, const struct sockaddr *addr)
{
	struct ibv_gid_entry entry;

	dev->gid_index = -1;
	if (addr->sa_family != AF_INET)
		return;
	for (uint32_t i = 0; i < (uint32_t)dev->attr.max_pkeys + 256; i++) {
		if (ibv_query_gid_ex(dev->ctx, dev->port, i, &entry, 0))
			continue;
		const uint8_t *g = entry.gid.raw;
		static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
		if (entry.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(g, v4mapped, 12) == 0 &&
		    memcmp(g + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4) == 0) {
			dev->gid = entry.gid;
			dev->gid_index = (int)i;
			return;
		}
	}
}

static int listen_one(struct xd_daemon *d, const struct xp_endpoint *ep)
{
	struct xd_rdma *rd = d->rdma;
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;

	if (resolve_ep(ep->addr, ep->port, &ss) < 0)
		return -EINVAL;
	if (rdma_create_id(rd->cm, &id, NULL, RDMA_PS_TCP))
		return -errno;
	if (rdma_bind_addr(id, (struct sockaddr *)&ss) || rdma_listen(id, 64)) {
		int err = -errno;
		xd_log(XD_LOG_WARN, "no rdma_cm listener on %s:%u: %s", ep->addr, ep->port,
		       strerror(errno));
		rdma_destroy_id(id);
		return err;
	}
	struct xd_rdma_dev *dev = id->verbs ? xd_rdma_dev_for(d, id->verbs) : NULL;
	if (id->verbs && !dev) {
		xd_log(XD_LOG_WARN, "%s is on an RDMA device this daemon does not use", ep->addr);
		rdma_destroy_id(id);
		return -ENODEV;
	}
	if (dev)
		find_gid(dev, (struct sockaddr *)&ss);
	rd->listeners[rd->nlisteners++] = id;
	xd_log(XD_LOG_INFO, "accepting RDMA peers on %s:%u%s%s", ep->addr, ep->port,
	       dev ? " via " : "", dev ? dev->name : "");
	return 0;
}

/* Metadata offers an rdma endpoint beside each tcp one when a listener exists. */
static void advertise_rdma(struct xd_daemon *d)
{
	int n = d->nendpoints;

	for (int i = 0; i < n && d->nendpoints < XP_MAX_ENDPOINTS; i++) {
		/* rdma_cm listens where TCP does (d->listen_eps): the same addresses. */
		if (strcmp(d->endpoints[i].transport, "tcp") != 0)
			continue;
		d->endpoints[d->nendpoints] = d->endpoints[i];
		strcpy(d->endpoints[d->nendpoints].transport, xd_transport_rdma_ops.name);
		d->nendpoints++;
	}
}

/* Creates the CM event channel and the rdma_cm listeners. Returns 0 or -errno. */
static int rconn_start(struct xd_daemon *d)
{
	struct xd_rdma *rd = d->rdma;

	rd->cm = rdma_create_event_channel();
	if (!rd->cm)
		return -errno;
	int fl = fcntl(rd->cm->fd, F_GETFL);
	if (fl < 0 || fcntl(rd->cm->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	rd->cm_ev = event_new(d->base, rd->cm->fd, EV_READ | EV_PERSIST, cm_event_cb, d);
	rd->stage_kick_ev = evtimer_new(d->base, stage_kick_cb, rd);
	if (!rd->cm_ev || !rd->stage_kick_ev || event_add(rd->cm_ev, NULL) < 0)
		return -ENOMEM;
	for (int i = 0; i < d->nlisten_eps; i++) {
		int err = listen_one(d, &d->listen_eps[i]);
		if (err && strcmp(d->cfg.transport, xd_transport_rdma_ops.name) == 0)
			return err;
	}
	if (rd->nlisteners)
		advertise_rdma(d);
	else
		snprintf(rd->why, sizeof(rd->why),
			 "unavailable: no rdma_cm listener (pass "
			 "--listen with an address of an RDMA device)");
	return 0;
}

/* Destroys every connection, the listeners and the CM channel. */
static void rconn_fini(struct xd_daemon *d)
{
	struct xd_rdma *rd = d->rdma;
	struct xd_rconn *rc;

	/* Peers were failed before this (xd_peers_stop): what is left here has none. */
	while ((rc = TAILQ_FIRST(&rd->live)))
		rconn_kill(rc);
	xd_defer_flush(d);
	for (int i = 0; i < rd->nlisteners; i++)
		rdma_destroy_id(rd->listeners[i]);
	rd->nlisteners = 0;
	xd_event_free(rd->cm_ev);
	rd->cm_ev = NULL;
	xd_event_free(rd->stage_kick_ev);
	rd->stage_kick_ev = NULL;
	if (rd->cm)
		rdma_destroy_event_channel(rd->cm);
	rd->cm = NULL;
}

/* ---- the ops table ---- */

static int rdma_start(struct xd_daemon *d)
{
	bool forced = strcmp(d->cfg.transport, xd_transport_rdma_ops.name) == 0;
	bool wanted = forced || strcmp(d->cfg.transport, XD_TRANSPORT_AUTO) == 0;
	int rc = xd_rdma_devices_open(d, wanted, rconn_completion);

	if (d->rdma)
		d->rdma->post_failed = rconn_post_failed;

	/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): d->rdma is set when rc is 0 */
	if (rc == 0 && d->rdma->ndevs)
		rc = rconn_start(d);
	if (rc == 0 && forced && !xd_rdma_available(d)) {
		xd_log(XD_LOG_ERR,
		       "transport rdma needs an RDMA device and an rdma_cm listener: %s",
		       d->rdma->why);
		rc = -ENODEV;
	}
	return rc;
}

/* After every peer set failed and every region was deregistered. */
static void rdma_fini(struct xd_daemon *d)
{
	if (!d->rdma)
		return;
	rconn_fini(d);
	xd_rdma_devices_close(d);
}

/*
 * Control messages on RDMA wait only for send credits, which the peer returns at once: unlike
 * TCP's, they are never stuck behind bulk data, so shutdown has nothing to wait for here.
 */
static bool rdma_pending_output(const struct xd_peer *p)
{
	return false;
}

static bool rdma_usable(const struct xd_daemon *d, const char **why)
{
	*why = "this daemon has no RDMA device and listener";
	return xd_rdma_available(d);
}

const struct xd_transport_ops xd_transport_rdma_ops = {
	.name = "rdma",
	.network = true,
	.preferred = true,
	.one_sided = true,
	.authenticates = true,
	.start = rdma_start,
	.fini = rdma_fini,
	.usable = rdma_usable,
	.devices_json = xd_rdma_devices_json,
	.register_region = xd_rdma_register_region,
	.deregister_region = xd_rdma_deregister_region,
	.region_json = xd_rdma_region_json,
	.register_blocks = xd_rdma_register_blocks,
	.connect = xd_rdma_connect,
	.send_ctrl = xd_rdma_send_ctrl,
	.kick = xd_rdma_kick,
	.keepalive = xd_rdma_keepalive,
	.close = xd_rdma_close_peer,
	.nconns = xd_rdma_peer_conns,
	.last_rx_us = xd_rdma_peer_last_rx,
	.pending_output = rdma_pending_output,
	.grant_open = xd_rdma_grant_open,
	.grant_close = xd_rdma_grant_close,
	.stage_close = xd_rdma_stage_close,
	.data_via = rdma_data_via,
};
