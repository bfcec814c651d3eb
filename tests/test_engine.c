// SPDX-License-Identifier: MIT
/*
 * The operation state machine and the transfer engine in process, through the transport ops
 * table: two daemons (A and B) built from the real daemon objects share one event loop on a
 * second thread and reach each other over a fake two-sided transport defined here, whose knob
 * holds one direction at a chosen message or cuts the link there. Clients are libxferclient on
 * the test thread. Covers reads and writes across the two daemons, scatter/gather, cancels from
 * either side at each state, link loss at each state, exactly-once claims and the metadata of a
 * restarted owner: cases that otherwise run only end to end between daemon processes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "../daemon/transport.h"
#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"
#include "xp_fdmsg.h"
#include "xp_peer.h"

#define DA 0 /* the owner: passive operations live here */
#define DB 1 /* the claimer */
#define NODE_A "e0000000000000000000000000000a0a"
#define NODE_B "e0000000000000000000000000000b0b"
#define EPOCH_A 1700000000000001ull
#define EPOCH_B 1700000000000002ull
/* Not a power of two: chunks straddle descriptor boundaries on both sides. */
#define FAKE_CHUNK (64 * 1024 + 4099)
#define FAKE_MAX_ENDS 4		    /* connections of one peer set */
#define LEN (4 * 1024 * 1024 + 321) /* not a multiple of the chunk either */
#define WAIT_MS 20000		    /* "it ended at all" */
#define SETTLE_MS 5000		    /* for the daemons to reach a described state */

/* ---- the fake transport ---- */

enum end_state {
	END_PENDING, /**< the accepting daemon has not seen the connection yet */
	END_OPEN,    /**< part of a peer set */
	END_CLOSED,  /**< its set closed it (or it never got one) */
};

struct fake_link;

/* One side of a fake connection. */
struct fake_end {
	struct fake_link *link;
	int side; /* 0: the connecting daemon's, 1: the accepting daemon's */
	struct xd_daemon *d;
	struct xd_peer *peer; /* its peer set while open */
	enum end_state state;
	bool up; /* its HELLO exchange is done: it may send */
};

/* A connection between a peer set of each daemon. */
struct fake_link {
	TAILQ_ENTRY(fake_link) link; /* in W.links */
	struct fake_end end[2];
};

/* The fake's part of a peer set (p->tstate): its connections, as tcp.c's tcp_set. */
struct fake_set {
	struct fake_end *ends[FAKE_MAX_ENDS];
	int n;
};

enum msg_kind {
	MSG_ATTACH, /**< the connection reached the accepting daemon: its HELLO */
	MSG_UP,	    /**< the accepting daemon's HELLO reached the connecting one */
	MSG_CTRL,   /**< a control message */
	MSG_EOF,    /**< the other end closed the connection */
};

/* What is in flight on a link: delivered from a zero-timeout event, never on the sender's stack. */
struct fake_msg {
	TAILQ_ENTRY(fake_msg) link; /* in W.msgs, in the order sent */
	struct fake_link *l;
	int to; /* the receiving end's side */
	enum msg_kind kind;
	struct xd_frame *frame; /* MSG_CTRL: header and JSON payload, as tcp.c would send it */
};

/*
 * The knob: once a message of @type (or, for DATA, a chunk after @after bytes of DATA arrived)
 * is next for daemon @to, hold it there (a control message holds everything behind it on that
 * direction, as on a stream; held DATA lets control messages pass, as tcp.c sends them before
 * the next chunk) or cut the link. @caught (under W.lock) tells the test it happened.
 */
enum fake_action {
	FAKE_HOLD,   /**< hold the message (and what follows it, as said above) */
	FAKE_CUT,    /**< cut the link there */
	FAKE_REPEAT, /**< deliver it, then a copy: a peer that breaks the protocol */
	FAKE_TAMPER, /**< deliver it with its "message" replaced by terminal escapes */
	/*
	 * DATA: the chunk is taken and its receiver told a worker writes it (tcp.c's file lane),
	 * but its bytes land and are counted only at fake_release(); DATA behind it waits.
	 */
	FAKE_LAND,
};
struct fake_rule {
	bool armed, caught;
	int to;
	uint8_t type;
	uint64_t after, seen; /* DATA: bytes to let through, bytes seen since armed */
	enum fake_action action;
};

/* Everything of one test: owned by the loop thread while it runs, by the test thread else. */
static struct {
	struct event_base *base; /* shared by both daemons: one thread runs them all */
	struct xd_daemon d[2];
	bool accepting[2]; /* the fake has started on that daemon */
	char dir[64];	   /* mkdtemp'd: the control sockets */
	int hook;
	pthread_t thread;
	bool running;
	int rpc[2]; /* socketpair: [0] the test thread's end, [1] the loop's */
	struct event *rpc_ev, *pump;
	TAILQ_HEAD(, fake_msg) msgs;
	TAILQ_HEAD(, fake_link) links;
	unsigned turn; /* which direction sends DATA first */
	struct fake_rule rule;
	pthread_mutex_t lock; /* rule.caught, which the test thread waits for */
	pthread_cond_t cond;
	/*
	 * The file lane's order (tcp.c lane_done()): the sender counts a transfer's last chunk
	 * only once the receiver's answers to it were delivered, as when a worker wrote it and the
	 * peer's DONE or DONE_ACK is read before the worker's report. late_ended: the sender's
	 * operation had ended by then (it must not: the chunk still read its client's buffer).
	 */
	bool late_count, late_ended;
	struct xd_xfer *late_x; /* the chunk's transfer, its count held (a reference) */
	uint32_t late_len;
	/* FAKE_LAND's chunk: its receiving and sending transfers (references), where it goes */
	struct {
		struct xd_xfer *rx, *tx;
		struct xd_daemon *d; /* the receiver's */
		uint64_t off;
		uint32_t len;
	} land;
} W;

/* (not const: the short-end tests turn its quick_end on for one world) */
static struct xd_transport_ops fake_ops;

static int daemon_index(const struct xd_daemon *d)
{
	return (int)(d - W.d);
}

static void pump_schedule(void)
{
	struct timeval zero = { 0, 0 };

	evtimer_add(W.pump, &zero);
}

static void msg_queue(struct fake_link *l, int to, enum msg_kind kind, struct xd_frame *f)
{
	struct fake_msg *m = calloc(1, sizeof(*m));

	CHECK(m);
	m->l = l;
	m->to = to;
	m->kind = kind;
	m->frame = f;
	TAILQ_INSERT_TAIL(&W.msgs, m, link);
	pump_schedule();
}

static void msg_free(struct fake_msg *m)
{
	free(m->frame);
	free(m);
}

/* A closed connection loses what it had not delivered, both ways (tcp.c's pconn_free). */
static void msgs_drop(struct fake_link *l)
{
	struct fake_msg *m, *tmp;

	TAILQ_FOREACH_SAFE(m, &W.msgs, link, tmp) {
		if (m->l == l) {
			TAILQ_REMOVE(&W.msgs, m, link);
			msg_free(m);
		}
	}
}

/* Closes end @e; the other end hears EOF, or the link goes when both are closed. */
static void end_close(struct fake_end *e)
{
	struct fake_link *l = e->link;
	struct fake_end *o = &l->end[!e->side];

	e->state = END_CLOSED;
	e->peer = NULL;
	e->up = false;
	msgs_drop(l);
	if (o->state == END_OPEN) {
		msg_queue(l, o->side, MSG_EOF, NULL);
		return;
	}
	o->state = END_CLOSED; /* (a connection not yet accepted is refused) */
	TAILQ_REMOVE(&W.links, l, link);
	free(l);
}

/* Adds end @e to @p's set, made on first use. Returns 0 or -errno. */
static int set_add(struct xd_peer *p, struct fake_end *e)
{
	struct fake_set *set = p->tstate;

	if (!set && !(set = p->tstate = calloc(1, sizeof(*set))))
		return -ENOMEM;
	if (set->n == FAKE_MAX_ENDS)
		return -EMFILE;
	set->ends[set->n++] = e;
	return 0;
}

/* The connection of @p that carries its control messages: the first through HELLO. */
static struct fake_end *set_sender(const struct xd_peer *p)
{
	const struct fake_set *set = p->tstate;

	for (int i = 0; set && i < set->n; i++)
		if (set->ends[i]->state == END_OPEN && set->ends[i]->up)
			return set->ends[i];
	return NULL;
}

/* A cable pulled: both daemons' sets fail at once, with one cause. */
static void link_cut(struct fake_link *l)
{
	struct xd_peer *p0 = l->end[0].state == END_OPEN ? l->end[0].peer : NULL;
	struct xd_peer *p1 = l->end[1].state == END_OPEN ? l->end[1].peer : NULL;

	/* Failing p0 closes its end (p1 is only freed at a later loop turn); p1's then frees @l. */
	if (p0)
		p0->d->link_events->failed(p0, ECONNRESET, "fake link cut");
	if (p1)
		p1->d->link_events->failed(p1, ECONNRESET, "fake link cut");
}

/* Whether the knob stops the next message of @type to daemon @to (and cut @l if it says so). */
static bool rule_stops(int to, uint8_t type, struct fake_link *l)
{
	struct fake_rule *r = &W.rule;

	if (!r->armed || r->caught || r->action == FAKE_REPEAT || r->action == FAKE_TAMPER ||
	    r->action == FAKE_LAND || r->to != to || r->type != type ||
	    (type == XP_PEER_DATA && r->seen < r->after))
		return false;
	if (r->action == FAKE_CUT)
		link_cut(l);
	pthread_mutex_lock(&W.lock);
	r->caught = true;
	pthread_cond_broadcast(&W.cond);
	pthread_mutex_unlock(&W.lock);
	return true;
}

/* FAKE_REPEAT: queues a copy of control message @m (to daemon @to) when it is the knob's. */
static void rule_repeats(int to, const struct fake_msg *m)
{
	struct fake_rule *r = &W.rule;
	const struct xd_frame *f = m->frame;

	if (!r->armed || r->caught || r->action != FAKE_REPEAT || r->to != to ||
	    r->type != f->data[0])
		return;
	struct xd_frame *copy = malloc(sizeof(*copy) + f->len);
	CHECK(copy);
	memcpy(copy, f, sizeof(*copy) + f->len);
	msg_queue(m->l, m->to, MSG_CTRL, copy);
	pthread_mutex_lock(&W.lock);
	r->caught = true;
	pthread_cond_broadcast(&W.cond);
	pthread_mutex_unlock(&W.lock);
}

/* The "message" a tampering peer puts in CANCEL and CLAIM_ERR: a terminal title escape. */
#define EVIL_MESSAGE "\x1b]0;pwned\x07 gone \x1b[2J"

/* FAKE_TAMPER: replaces control message @m's "message" (to daemon @to) when it is the knob's. */
static void rule_tampers(int to, struct fake_msg *m)
{
	struct fake_rule *r = &W.rule;
	struct xp_peer_hdr h;
	int err;

	if (!r->armed || r->caught || r->action != FAKE_TAMPER || r->to != to ||
	    r->type != m->frame->data[0])
		return;
	xp_peer_hdr_unpack(m->frame->data, &h);
	json_t *json =
		json_loadb((const char *)m->frame->data + XP_PEER_HDR_LEN, h.length, 0, NULL);
	CHECK(json && json_object_set_new(json, "message", json_string(EVIL_MESSAGE)) == 0);
	struct xd_frame *f = xd_frame_new(h.type, h.flags, h.xfer, json, &err);
	json_decref(json);
	CHECK(f);
	free(m->frame);
	m->frame = f;
	pthread_mutex_lock(&W.lock);
	r->caught = true;
	pthread_cond_broadcast(&W.cond);
	pthread_mutex_unlock(&W.lock);
}

/* Whether the knob holds DATA (@data) or control messages to daemon @to now. */
static bool held(int to, bool data)
{
	const struct fake_rule *r = &W.rule;

	return r->armed && r->caught && r->to == to &&
	       ((r->action == FAKE_HOLD && (data || r->type != XP_PEER_DATA)) ||
		(r->action == FAKE_LAND && data));
}

/* FAKE_LAND: whether the chunk about to reach daemon @to (taken by it: @rx) lands later. */
static bool rule_lands(int to, const struct xd_xfer *rx)
{
	struct fake_rule *r = &W.rule;

	if (!r->armed || r->caught || r->action != FAKE_LAND || r->to != to || !rx ||
	    !xd_xfer_live(rx) || r->seen < r->after)
		return false;
	pthread_mutex_lock(&W.lock);
	r->caught = true;
	pthread_cond_broadcast(&W.cond);
	pthread_mutex_unlock(&W.lock);
	return true;
}

/* The accepting daemon gets the connection: HELLO filed it under the connector's node. */
static void deliver_attach(struct fake_link *l)
{
	struct fake_end *e = &l->end[1];
	struct xd_daemon *d = e->d, *from = l->end[0].d;
	uint64_t epoch = from->epoch;
	struct xd_peer *q = d->link_events->attach(d, &fake_ops, from->node, epoch, "fake");

	if (!q || set_add(q, e) < 0) {
		end_close(e);
		return;
	}
	e->peer = q;
	e->state = END_OPEN;
	e->up = true;
	msg_queue(l, 0, MSG_UP, NULL);
	d->link_events->up(q, epoch);
}

/* The connector gets the acceptor's HELLO: checked as tcp.c's outgoing_hello() checks it. */
static void deliver_up(struct fake_link *l)
{
	struct xd_peer *p = l->end[0].peer;
	const struct xd_daemon *to = l->end[1].d;

	if (memcmp(to->node, p->node, XP_ID_BYTES) != 0) {
		p->d->link_events->failed(p, EHOSTUNREACH, "the daemon at fake is another node");
		return;
	}
	if (p->state == XD_PEER_UP && p->epoch != to->epoch) {
		p->d->link_events->failed(p, ECONNRESET, "peer daemon restarted while connecting");
		return;
	}
	l->end[0].up = true;
	p->d->link_events->up(p, to->epoch);
}

static void deliver_ctrl(struct fake_end *e, const struct xd_frame *f)
{
	struct xd_peer *p = e->peer;
	struct xp_peer_hdr h;
	json_t *json = NULL;
	int rc = 0;

	/* Parsed back from the bytes, as tcp.c does: the payload must survive the wire. */
	xp_peer_hdr_unpack(f->data, &h);
	if (!xp_peer_hdr_valid(&h))
		rc = -EPROTO;
	if (!rc && h.length) {
		json = json_loadb((const char *)f->data + XP_PEER_HDR_LEN, h.length,
				  JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(json))
			rc = -EPROTO;
	}
	if (!rc)
		rc = p->d->xfer_events->ctrl(p, 0, &h, json);
	json_decref(json);
	if (rc)
		p->d->link_events->failed(p, ECONNRESET, "protocol error on a fake connection");
}

/* Delivers @m, already off the queue. The link may be gone afterwards. */
static void deliver(struct fake_msg *m)
{
	struct fake_end *e = &m->l->end[m->to];

	switch (m->kind) {
	case MSG_ATTACH:
		deliver_attach(m->l);
		break;
	case MSG_UP:
		deliver_up(m->l);
		break;
	case MSG_CTRL:
		deliver_ctrl(e, m->frame);
		break;
	case MSG_EOF:
		e->d->link_events->failed(e->peer, ECONNRESET, "peer daemon closed the connection");
		break;
	}
}

/* Copies @len bytes at transfer offset @off from @src's mapping to @dst's (other boundaries). */
static void copy_xfer(struct xd_xfer *dst, const struct xd_xfer *src, uint64_t off, uint64_t len)
{
	while (len > 0) {
		struct iovec s, d;
		CHECK(xd_xfer_iov(src, off, len, &s, 1) == 1 &&
		      xd_xfer_iov(dst, off, len, &d, 1) == 1);
		size_t n = s.iov_len < d.iov_len ? s.iov_len : d.iov_len;
		memcpy(d.iov_base, s.iov_base, n);
		off += n;
		len -= n;
	}
}

/*
 * One DATA frame from @se's set to @re's, two-sided as tcp.c moves it: the sender cuts the
 * chunk, the receiver names the transfer it goes to (or drops it), the bytes go from mapping to
 * mapping, and each side counts its part.
 */
static void move_chunk(struct fake_end *se, struct fake_end *re)
{
	struct xd_peer *ps = se->peer, *pr = re->peer;
	struct xd_xfer *x = xd_xfer_sendq_next(&ps->sendq, 0);
	struct xp_peer_hdr h = { .type = XP_PEER_DATA };
	int err = 0;

	h.length = xd_xfer_next_chunk(x, FAKE_CHUNK, &h.offset, &h.xfer, &h.flags);
	xd_xfer_ref(x);
	struct xd_xfer *rx = pr->d->xfer_events->data_target(pr, &h, &err);
	if (err) {
		xd_xfer_unref(x);
		pr->d->link_events->failed(pr, ECONNRESET, "protocol error: DATA out of range");
		return;
	}
	bool land = rule_lands(daemon_index(re->d), rx);
	if (land) {
		/* The worker has the chunk: its bytes and the receiver's count come at its end. */
		xd_xfer_ref(x);
		W.land.rx = rx;
		W.land.tx = x;
		W.land.d = re->d;
		W.land.off = h.offset;
		W.land.len = h.length;
		xd_xfer_landing(rx);
	} else if (rx && xd_xfer_live(rx)) {
		copy_xfer(rx, x, h.offset, h.length);
	}
	if (daemon_index(re->d) == W.rule.to)
		W.rule.seen += h.length;
	ps->bytes_sent += h.length;
	pr->bytes_received += h.length;
	if (W.late_count && !W.late_x && h.offset + h.length == x->length) {
		W.late_x = x; /* counted by count_late_chunk() */
		W.late_len = h.length;
	} else {
		/* The sender first: its last chunk is on the wire before the receiver has it. */
		xd_xfer_data_sent(x, h.length);
		xd_xfer_unref(x);
	}
	if (land)
		return;
	if (rx)
		xd_xfer_data_received(rx, h.length);
	xd_xfer_unref(rx);
}

/*
 * FAKE_LAND's worker is through: the bytes it wrote are in the buffer whether or not the op
 * still lives (a worker does not look), then the loop hears of it (tcp.c lane_done()), and
 * counts them if the connection is still there (the set alive: the transfer open).
 */
static void land_chunk(void)
{
	struct xd_xfer *rx = W.land.rx, *tx = W.land.tx;

	if (!rx)
		return;
	W.land.rx = W.land.tx = NULL;
	copy_xfer(rx, tx, W.land.off, W.land.len);
	xd_xfer_unref(tx);
	xd_xfer_landed(W.land.d, rx);
	if (rx->op)
		xd_xfer_data_received(rx, W.land.len);
	xd_xfer_unref(rx);
}

/* The held count of a last chunk (W.late_count), once nothing else is to deliver. */
static void count_late_chunk(void)
{
	struct xd_xfer *x = W.late_x;

	W.late_x = NULL;
	W.late_ended = !x->op;
	xd_xfer_data_sent(x, W.late_len);
	xd_xfer_unref(x);
}

/* One DATA frame on the first link and direction that has one to move. */
static bool pump_data(void)
{
	struct fake_link *l;

	TAILQ_FOREACH(l, &W.links, link) {
		for (int i = 0; i < 2; i++) {
			int s = (int)((W.turn + (unsigned)i) & 1);
			struct fake_end *se = &l->end[s], *re = &l->end[!s];
			if (se->state != END_OPEN || !se->up || re->state != END_OPEN ||
			    TAILQ_EMPTY(&se->peer->sendq) || held(daemon_index(re->d), true))
				continue;
			W.turn++; /* the other direction goes first next time */
			if (!rule_stops(daemon_index(re->d), XP_PEER_DATA, l))
				move_chunk(se, re);
			return true;
		}
	}
	return false;
}

/*
 * One step of the wire: the oldest message not held, else one DATA chunk. Returns whether it
 * did anything. One step per loop turn, so that clients' requests interleave with transfers.
 */
static bool pump_one(void)
{
	struct fake_msg *m;

	TAILQ_FOREACH(m, &W.msgs, link) {
		int to = daemon_index(m->l->end[m->to].d);
		if (held(to, false))
			continue;
		if (m->kind == MSG_CTRL && rule_stops(to, m->frame->data[0], m->l))
			return true;
		if (m->kind == MSG_CTRL) {
			rule_repeats(to, m);
			rule_tampers(to, m);
		}
		TAILQ_REMOVE(&W.msgs, m, link);
		deliver(m);
		msg_free(m);
		return true;
	}
	if (W.late_x) {
		count_late_chunk();
		return true;
	}
	return pump_data();
}

static void pump_cb(evutil_socket_t fd, short what, void *arg)
{
	if (pump_one())
		pump_schedule();
}

static int fake_start(struct xd_daemon *d)
{
	if (d->nendpoints == XP_MAX_ENDPOINTS)
		return -ENOSPC;
	/* The endpoint metadata carries: its port is the daemon's slot in W.d. */
	struct xp_endpoint *ep = &d->endpoints[d->nendpoints++];
	snprintf(ep->transport, sizeof(ep->transport), "%s", fake_ops.name);
	snprintf(ep->addr, sizeof(ep->addr), "fake");
	ep->port = (uint16_t)daemon_index(d);
	W.accepting[daemon_index(d)] = true;
	return 0;
}

/* After xd_peers_stop(): every set of @d failed, so only connections it never accepted remain. */
static void fake_fini(struct xd_daemon *d)
{
	struct fake_link *l, *tmp;

	W.accepting[daemon_index(d)] = false;
	TAILQ_FOREACH_SAFE(l, &W.links, link, tmp) {
		for (int s = 0; s < 2; s++) {
			CHECK(l->end[s].d != d || l->end[s].state != END_OPEN);
			if (l->end[s].d == d && l->end[s].state == END_PENDING) {
				end_close(&l->end[s]);
				break; /* (@l may be gone) */
			}
		}
	}
}

static bool fake_usable(const struct xd_daemon *d, const char **why)
{
	return true;
}

static int fake_connect(struct xd_peer *p, const struct xp_endpoint *ep)
{
	if (ep->port > DB || !W.accepting[ep->port])
		return -ECONNREFUSED;
	struct fake_link *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->end[0] = (struct fake_end){ l, 0, p->d, p, END_OPEN, false };
	l->end[1] = (struct fake_end){ l, 1, &W.d[ep->port], NULL, END_PENDING, false };
	int rc = set_add(p, &l->end[0]);
	if (rc) {
		free(l);
		return rc;
	}
	TAILQ_INSERT_TAIL(&W.links, l, link);
	msg_queue(l, 1, MSG_ATTACH, NULL);
	return 0;
}

static int fake_send_ctrl(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags,
			  uint64_t xfer, const json_t *json)
{
	struct fake_end *e = set_sender(p);
	int err;

	if (!e)
		return -ENOTCONN;
	struct xd_frame *f = xd_frame_new(type, flags, xfer, json, &err);
	if (!f)
		return err;
	if (e->link->end[!e->side].state != END_OPEN) {
		free(f); /* written into a connection the other side closed: its EOF is on the way */
		return 0;
	}
	msg_queue(e->link, !e->side, MSG_CTRL, f);
	return 0;
}

static void fake_kick(struct xd_peer *p)
{
	pump_schedule(); /* never on the caller's stack: the engine is in the middle of something */
}

static void fake_keepalive(struct xd_peer *p)
{
	/* Nothing to probe: a fake link fails only when told to. */
}

static void fake_close(struct xd_peer *p)
{
	struct fake_set *set = p->tstate;

	if (!set)
		return;
	for (int i = 0; i < set->n; i++)
		if (set->ends[i]->state != END_CLOSED)
			end_close(set->ends[i]);
	free(set);
	p->tstate = NULL;
}

static int fake_nconns(const struct xd_peer *p)
{
	const struct fake_set *set = p->tstate;
	int n = 0;

	for (int i = 0; set && i < set->n; i++)
		n += set->ends[i]->state == END_OPEN;
	return n;
}

static uint64_t fake_last_rx_us(const struct xd_peer *p)
{
	return 0; /* "never": listings show the set's age as its idle time */
}

static bool fake_pending_output(const struct xd_peer *p)
{
	const struct fake_set *set = p->tstate;
	const struct fake_msg *m;

	for (int i = 0; set && i < set->n; i++)
		TAILQ_FOREACH(m, &W.msgs, link)
			if (m->l == set->ends[i]->link && m->to != set->ends[i]->side &&
			    m->kind == MSG_CTRL)
				return true;
	return false;
}

static struct xd_transport_ops fake_ops = {
	.name = "fake",
	.network = true,
	.preferred = false,
	.one_sided = false,
	.start = fake_start,
	.fini = fake_fini,
	.usable = fake_usable,
	.connect = fake_connect,
	.send_ctrl = fake_send_ctrl,
	.kick = fake_kick,
	.keepalive = fake_keepalive,
	.close = fake_close,
	.nconns = fake_nconns,
	.last_rx_us = fake_last_rx_us,
	.pending_output = fake_pending_output,
};

/*
 * The transports these daemons use (d->transports, set after xd_daemon_clear() filled in
 * transport.c's): the local one and the fake, so no claim leaves the process.
 */
static const struct xd_transport_ops *const engine_transports[] = {
	&xd_transport_local_ops,
	&fake_ops,
	NULL,
};

/* ---- the loop thread, and calls into it ---- */

struct loop_call {
	void (*fn)(void *arg);
	void *arg;
};

/* Runs a function the test thread sent, then answers: only this thread touches the daemons. */
static void rpc_cb(evutil_socket_t fd, short what, void *arg)
{
	struct loop_call *c;
	char done = 0;

	if (recv(fd, &c, sizeof(c), 0) != (ssize_t)sizeof(c))
		return;
	c->fn(c->arg);
	CHECK(send(fd, &done, 1, MSG_NOSIGNAL) == 1);
}

/* Runs @fn(@arg) on the loop thread (or here when it is stopped) and waits for it. */
static void on_loop(void (*fn)(void *), void *arg)
{
	struct loop_call c = { fn, arg }, *pc = &c;
	char done;

	if (!W.running) {
		fn(arg);
		return;
	}
	CHECK(send(W.rpc[0], &pc, sizeof(pc), MSG_NOSIGNAL) == (ssize_t)sizeof(pc));
	CHECK(recv(W.rpc[0], &done, 1, 0) == 1);
}

static void *loop_main(void *arg)
{
	event_base_dispatch(W.base);
	return NULL;
}

static void loop_run(void)
{
	CHECK(pthread_create(&W.thread, NULL, loop_main, NULL) == 0);
	W.running = true;
}

static void break_cb(void *arg)
{
	event_base_loopbreak(W.base);
}

static void loop_stop(void)
{
	on_loop(break_cb, NULL);
	CHECK(pthread_join(W.thread, NULL) == 0);
	W.running = false;
}

/* ---- the knob, from the test thread ---- */

struct arm_args {
	int to;
	uint8_t type;
	uint64_t after;
	enum fake_action action;
};

static void arm_cb(void *arg)
{
	const struct arm_args *a = arg;

	pthread_mutex_lock(&W.lock);
	W.rule = (struct fake_rule){
		.armed = true, .to = a->to, .type = a->type, .after = a->after, .action = a->action
	};
	pthread_mutex_unlock(&W.lock);
	pump_schedule(); /* a new rule lets go of what the old one held */
}

/* Arms the knob for the next message of @type to daemon @to (DATA: after @after bytes). */
static void fake_arm(int to, uint8_t type, uint64_t after, enum fake_action action)
{
	struct arm_args a = { to, type, after, action };

	on_loop(arm_cb, &a);
}

/* Waits until the knob has caught its message. */
static void fake_wait(void)
{
	struct timespec until;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&W.lock);
	while (!W.rule.caught && rc == 0)
		rc = pthread_cond_timedwait(&W.cond, &W.lock, &until);
	bool caught = W.rule.caught;
	uint8_t type = W.rule.type;
	pthread_mutex_unlock(&W.lock);
	if (!caught)
		harness_fail(__FILE__, __LINE__, "the fake never saw the %s it waited for",
			     xp_peer_type_name(type));
}

static void release_cb(void *arg)
{
	pthread_mutex_lock(&W.lock);
	W.rule.armed = W.rule.caught = false;
	pthread_mutex_unlock(&W.lock);
	land_chunk();
	pump_schedule();
}

/* Disarms the knob; what it held moves on. */
static void fake_release(void)
{
	on_loop(release_cb, NULL);
}

/* ---- two daemons ---- */

/* main.c's daemon_init() without signals and systemd, on the shared base, node and epoch fixed. */
static void daemon_start(int i, uint64_t epoch)
{
	struct xd_daemon *d = &W.d[i];

	memset(d, 0, sizeof(*d));
	xd_daemon_clear(d);
	d->transports = engine_transports;
	d->epoch = epoch;
	xd_config_defaults(&d->cfg);
	free(d->cfg.socket_path);
	CHECK(asprintf(&d->cfg.socket_path, "%s/%c.sock", W.dir, 'a' + i) > 0);
	CHECK(xp_hex_decode(i == DA ? NODE_A : NODE_B, d->node, XP_ID_BYTES) == 0);
	xp_hex_encode(d->node, XP_ID_BYTES, d->node_hex);
	d->base = W.base;
	CHECK_OK(xd_defer_init(d));
	CHECK_OK(xd_transport_local(d)->start(d));
	xd_claims_start(d);
	CHECK_OK(xd_peers_start(d));
	CHECK_OK(xd_ctl_start(d, xd_dispatch_packet));
}

/* main.c's daemon_fini(), in its order; the shared base stays. */
static void daemon_stop(int i)
{
	struct xd_daemon *d = &W.d[i];

	xd_transport_local(d)->fini(d);
	xd_ctl_fini(d);
	xd_peers_stop(d);
	xd_ops_fini(d);
	xd_peers_fini(d);
	xd_defer_fini(d);
	xd_config_fini(&d->cfg);
}

/* Harness cleanup hook: a failed test leaves no socket behind (async-signal-safe calls only). */
static void remove_dir(void *arg)
{
	char path[sizeof(W.dir) + 8];

	for (char c = 'a'; c <= 'b'; c++) {
		snprintf(path, sizeof(path), "%s/%c.sock", W.dir, c);
		unlink(path);
	}
	rmdir(W.dir);
}

static void world_start(void)
{
	const char *tmp = getenv("TMPDIR"), *level = getenv("XFER_ENGINE_LOG");

	memset(&W, 0, sizeof(W));
	TAILQ_INIT(&W.msgs);
	TAILQ_INIT(&W.links);
	pthread_mutex_init(&W.lock, NULL);
	pthread_cond_init(&W.cond, NULL);
	xd_log_init(false);
	/* Every failed set logs a warning, and here sets fail on purpose: errors only, unless asked. */
	if (!level || xd_log_set_level(level) < 0)
		xd_log_level = XD_LOG_ERR;
	snprintf(W.dir, sizeof(W.dir), "%s/xferd-engine.XXXXXX", tmp ? tmp : "/tmp");
	CHECK(mkdtemp(W.dir));
	W.hook = harness_cleanup_push(remove_dir, NULL);
	W.base = event_base_new();
	CHECK(W.base);
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, W.rpc) == 0);
	W.rpc_ev = event_new(W.base, W.rpc[1], EV_READ | EV_PERSIST, rpc_cb, NULL);
	W.pump = evtimer_new(W.base, pump_cb, NULL);
	CHECK(W.rpc_ev && W.pump && event_add(W.rpc_ev, NULL) == 0);
	daemon_start(DA, EPOCH_A);
	daemon_start(DB, EPOCH_B);
	loop_run();
}

/* Stops the loop and the owner @i, starts it again as a new run (@epoch), resumes the loop. */
static void world_restart(int i, uint64_t epoch)
{
	loop_stop();
	daemon_stop(i);
	daemon_start(i, epoch);
	loop_run();
}

static void world_stop(void)
{
	loop_stop();
	daemon_stop(DA);
	daemon_stop(DB);
	/* Each daemon failed its sets: every link closed from both ends, nothing left in flight. */
	CHECK(TAILQ_EMPTY(&W.links) && TAILQ_EMPTY(&W.msgs) && !W.land.rx);
	event_free(W.pump);
	event_free(W.rpc_ev);
	event_base_free(W.base);
	close(W.rpc[0]);
	close(W.rpc[1]);
	remove_dir(NULL);
	harness_cleanup_pop(W.hook);
	pthread_cond_destroy(&W.cond);
	pthread_mutex_destroy(&W.lock);
#ifdef __SANITIZE_ADDRESS__
	/*
	 * The harness ends each test with _exit(), which skips LeakSanitizer's check at exit: run
	 * it here, when both daemons are gone, so that a transfer, an operation or a peer set that
	 * was never freed fails the test (it exits non-zero with the report on stderr).
	 */
	__lsan_do_leak_check();
#endif
}

/* ---- what the daemons hold ---- */

struct census {
	int conns, regions, ops, xfers, peers;
	int busy_regions; /* references beyond the registration, or operations not ended */
	int live_ops;	  /* operations not ended */
	bool copying;
};

static void census_cb(void *arg)
{
	struct census *c = arg;

	for (int i = 0; i < 2; i++) {
		struct xd_daemon *d = &W.d[i];
		struct xd_conn *conn;
		struct xd_region *r;
		struct xd_op *op;
		struct xd_xfer *x;
		struct xd_peer *p;

		memset(&c[i], 0, sizeof(c[i]));
		TAILQ_FOREACH(conn, &d->conns, link)
			c[i].conns++;
		TAILQ_FOREACH(r, &d->regions, link) {
			c[i].regions++;
			c[i].busy_regions += r->refs != 1 || r->live_ops != 0;
		}
		TAILQ_FOREACH(op, &d->ops, link) {
			c[i].ops++;
			c[i].live_ops += !xp_state_terminal(op->state);
		}
		TAILQ_FOREACH(p, &d->peers, link) {
			c[i].peers++;
			/* (a set freed with one still listed fails peer_free()'s assertion) */
			TAILQ_FOREACH(x, &p->xfers, link)
				c[i].xfers++;
		}
		c[i].copying = xd_copier_busy(d->copier);
	}
}

static bool quiet(const struct census *c, int peers)
{
	return c->xfers == 0 && c->busy_regions == 0 && c->live_ops == 0 && !c->copying &&
	       (peers < 0 || c->peers == peers);
}

static bool peerless(const struct census *c, int peers)
{
	return c->peers == 0 && c->xfers == 0;
}

static bool baseline(const struct census *c, int peers)
{
	return quiet(c, peers) && c->conns == 0 && c->regions == 0 && c->ops == 0;
}

/*
 * Waits until both daemons satisfy @ok (with @peers peer sets each, -1: any). The daemons learn
 * of a client's hang-up and free deferred objects on later loop turns, hence the wait.
 */
static void settle(const char *file, int line, bool (*ok)(const struct census *, int), int peers,
		   const char *what)
{
	struct census c[2];

	for (int waited = 0;; waited++) {
		on_loop(census_cb, c);
		if (ok(&c[DA], peers) && ok(&c[DB], peers))
			return;
		if (waited >= SETTLE_MS)
			break;
		usleep(1000);
	}
	harness_fail(file, line,
		     "daemons not %s: A conns %d regions %d (busy %d) ops %d (live %d) xfers %d "
		     "peers %d copying %d; B conns %d regions %d (busy %d) ops %d (live %d) "
		     "xfers %d peers %d copying %d",
		     what, c[DA].conns, c[DA].regions, c[DA].busy_regions, c[DA].ops,
		     c[DA].live_ops, c[DA].xfers, c[DA].peers, c[DA].copying, c[DB].conns,
		     c[DB].regions, c[DB].busy_regions, c[DB].ops, c[DB].live_ops, c[DB].xfers,
		     c[DB].peers, c[DB].copying);
}

/* Every operation ended and let go of its transfer and its regions; @peers sets each. */
#define EXPECT_QUIET(peers) settle(__FILE__, __LINE__, quiet, (peers), "quiet")
/* No peer set and no transfer, whatever the operations' states. */
#define EXPECT_PEERLESS() settle(__FILE__, __LINE__, peerless, 0, "without peer sets")
/* After every client hung up: nothing left but @peers peer sets each. */
#define EXPECT_BASELINE(peers) settle(__FILE__, __LINE__, baseline, (peers), "at baseline")

struct find_op {
	int daemon;
	uint64_t id;
};

static void pending_claim_cb(void *arg)
{
	struct find_op *f = arg;
	struct xd_op *op;

	TAILQ_FOREACH(op, &W.d[f->daemon].ops, link)
		if (op->life == XD_OP_CLAIMING)
			f->id = op->id;
}

/* The id of the op.read/op.write of daemon @i still waiting for the owner's answer, or 0. */
static uint64_t pending_claim(int i)
{
	struct find_op f = { i, 0 };

	on_loop(pending_claim_cb, &f);
	return f.id;
}

static void links_cb(void *arg)
{
	const struct fake_link *l;
	int *n = arg;

	TAILQ_FOREACH(l, &W.links, link)
		++*n;
}

/* Fake connections open now. */
static int links(void)
{
	int n = 0;

	on_loop(links_cb, &n);
	return n;
}

/* ---- clients ---- */

static struct xfer_client *client(int i, const char *name)
{
	struct xfer_client *c = NULL;

	CHECK_OK(xfer_connect(W.d[i].cfg.socket_path, name, &c));
	return c;
}

/* A buffer registered as a region of one client, filled from @seed. */
struct tbuf {
	struct xfer_buf buf;
	uint64_t region;
};

static void tbuf_make(struct xfer_client *c, size_t len, uint64_t seed, struct tbuf *t)
{
	CHECK_OK(xfer_buf_alloc(len, &t->buf));
	td_fill(t->buf.addr, len, seed);
	CHECK_OK(xfer_region_register(c, t->buf.fd, 0, 0, "engine", &t->region));
}

/* Deregisters (which must succeed: every operation on it has ended) and frees. */
static void tbuf_free(struct xfer_client *c, struct tbuf *t)
{
	CHECK_OK(xfer_region_deregister(c, t->region, 0));
	xfer_buf_free(&t->buf);
}

static void check_end(const char *file, int line, struct xfer_client *c, uint64_t op,
		      enum xfer_state state, int err, const char *cause, long long bytes)
{
	struct xfer_op_info info;
	int rc = xfer_wait(c, op, WAIT_MS, &info);

	if (rc < 0)
		harness_fail(file, line, "xfer_wait(op %llu): %s", (unsigned long long)op,
			     xfer_strerror(rc));
	if (info.state != state || info.error != err || (cause && !strstr(info.cause, cause)) ||
	    (bytes >= 0 && info.bytes != (uint64_t)bytes))
		harness_fail(file, line,
			     "op %llu ended %s %s \"%s\" after %llu bytes; want %s %s \"%s\" "
			     "after %lld",
			     (unsigned long long)op, xfer_state_name(info.state),
			     harness_errname(info.error), info.cause,
			     (unsigned long long)info.bytes, xfer_state_name(state),
			     harness_errname(err), cause ? cause : "", bytes);
}

/* Op @op of client @c ends @state with -errno @err, a cause containing @cause, @bytes (-1: any). */
#define CHECK_END(c, op, state, err, cause, bytes) \
	check_end(__FILE__, __LINE__, (c), (op), (state), (err), (cause), (bytes))

static void check_state(const char *file, int line, struct xfer_client *c, uint64_t op,
			enum xfer_state state, long long bytes)
{
	struct xfer_op_info info;
	int rc = xfer_status(c, op, &info);

	if (rc < 0)
		harness_fail(file, line, "xfer_status(op %llu): %s", (unsigned long long)op,
			     xfer_strerror(rc));
	if (info.state != state || (bytes >= 0 && info.bytes != (uint64_t)bytes))
		harness_fail(file, line, "op %llu is %s after %llu bytes; want %s after %lld",
			     (unsigned long long)op, xfer_state_name(info.state),
			     (unsigned long long)info.bytes, xfer_state_name(state), bytes);
}

#define CHECK_STATE(c, op, state, bytes) \
	check_state(__FILE__, __LINE__, (c), (op), (state), (bytes))

#define CHECK_CAUSE(text, want)                                                                  \
	do {                                                                                     \
		const char *check_t_ = (text);                                                   \
		if (!strstr(check_t_, (want)))                                                   \
			harness_fail(__FILE__, __LINE__, "\"%s\" does not say \"%s\"", check_t_, \
				     (want));                                                    \
	} while (0)

/* A passive operation on A over a whole buffer, and a client on B to claim it. */
struct pair {
	enum xfer_kind pkind;
	size_t len;
	struct xfer_client *pc, *ac; /* the owner's on A, the claimer's on B */
	struct tbuf pb, ab;
	uint64_t pop, aop;
	char *meta;
};

static void pair_open(struct pair *p, enum xfer_kind pkind, size_t len)
{
	struct xfer_desc d;

	memset(p, 0, sizeof(*p));
	p->pkind = pkind;
	p->len = len;
	p->pc = client(DA, "owner");
	p->ac = client(DB, "claimer");
	/* Different bytes on each side: a chunk that never arrived shows. */
	tbuf_make(p->pc, len, 1, &p->pb);
	tbuf_make(p->ac, len, 2, &p->ab);
	d = (struct xfer_desc){ p->pb.region, 0, len };
	if (pkind == XFER_READABLE)
		CHECK_OK(xfer_readable(p->pc, &d, 1, NULL, &p->pop, &p->meta));
	else
		CHECK_OK(xfer_writable(p->pc, &d, 1, NULL, &p->pop, &p->meta));
}

/* B's op.read or op.write of the pair's metadata, over its whole buffer. Returns 0 or -errno. */
static int pair_claim(struct pair *p, uint64_t *op)
{
	struct xfer_desc d = { p->ab.region, 0, p->len };

	if (p->pkind == XFER_READABLE)
		return xfer_read(p->ac, p->meta, &d, 1, NULL, op);
	return xfer_write(p->ac, p->meta, &d, 1, NULL, op);
}

/* The bytes arrived: the destination equals the source (which kept its own). */
static void pair_check_bytes(const struct pair *p)
{
	const struct tbuf *src = p->pkind == XFER_READABLE ? &p->pb : &p->ab;
	const struct tbuf *dst = p->pkind == XFER_READABLE ? &p->ab : &p->pb;

	CHECK_MEM_EQ(dst->buf.addr, src->buf.addr, p->len);
}

static void pair_close(struct pair *p)
{
	free(p->meta);
	tbuf_free(p->pc, &p->pb);
	tbuf_free(p->ac, &p->ab);
	xfer_close(p->pc);
	xfer_close(p->ac);
}

/* A claim that blocks until the owner answers, on a thread of its own (its client is its own). */
struct async_claim {
	pthread_t thread;
	struct pair *p;
	int rc;
	uint64_t op;
	char err[256];
};

static void *async_claim_main(void *arg)
{
	struct async_claim *a = arg;

	a->rc = pair_claim(a->p, &a->op);
	snprintf(a->err, sizeof(a->err), "%s", xfer_last_error(a->p->ac));
	return NULL;
}

static void async_claim_start(struct async_claim *a, struct pair *p)
{
	memset(a, 0, sizeof(*a));
	a->p = p;
	CHECK(pthread_create(&a->thread, NULL, async_claim_main, a) == 0);
}

static void async_claim_join(struct async_claim *a)
{
	CHECK(pthread_join(a->thread, NULL) == 0);
}

/*
 * A control connection without the library, for what it cannot express: an op.read or op.write
 * sent without waiting for its answer, so that it can be cancelled while the claim is pending.
 */
struct raw {
	int sock, memfd;
	uint64_t region;
};

static void raw_open(struct raw *r, int i, size_t len)
{
	struct td t = { .pid = -1 };
	struct xp_reply rep;

	snprintf(t.sock, sizeof(t.sock), "%s", W.d[i].cfg.socket_path);
	CHECK_OK(r->sock = td_raw_connect(&t));
	CHECK_OK(td_raw_hello(r->sock));
	CHECK_OK(r->memfd = td_memfd(len, true));
	CHECK_OK(td_raw_call(r->sock,
			     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"region.register\","
			     "\"params\":{\"name\":\"raw\"}}",
			     &r->memfd, 1, &rep));
	CHECK(rep.code == 0 && rep.result);
	r->region = (uint64_t)json_integer_value(json_object_get(rep.result, "region"));
	xp_reply_fini(&rep);
	CHECK(r->region > 0);
}

static void raw_send(struct raw *r, json_t *req)
{
	char *text = json_dumps(req, JSON_COMPACT);

	CHECK(text);
	CHECK_OK(xp_packet_send(r->sock, text, strlen(text), NULL, 0));
	free(text);
	json_decref(req);
}

static void raw_close(struct raw *r)
{
	close(r->sock);
	close(r->memfd);
}

/* ---- transfers that complete ---- */

static void check_pair_info(struct xfer_client *c, uint64_t op, int other)
{
	struct xfer_op_info info;

	CHECK_OK(xfer_status(c, op, &info));
	CHECK_STR_EQ(info.transport, "fake");
	CHECK_STR_EQ(info.peer, W.d[other].node_hex);
}

/* Opens a pairing of @pkind, claims it, and checks both COMPLETE ends and every byte. */
static void pair_move(struct pair *p, enum xfer_kind pkind)
{
	pair_open(p, pkind, LEN);
	CHECK_OK(pair_claim(p, &p->aop));
	CHECK_END(p->pc, p->pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(p->ac, p->aop, XFER_COMPLETE, 0, NULL, LEN);
	pair_check_bytes(p);
}

static void run_transfer(enum xfer_kind pkind)
{
	struct pair p;

	world_start();
	pair_move(&p, pkind);
	check_pair_info(p.pc, p.pop, DB);
	check_pair_info(p.ac, p.aop, DA);
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1); /* a set outlives its transfers, for the next claim */
	world_stop();
}

TEST(read_across_daemons)
{
	run_transfer(XFER_READABLE);
}

TEST(write_across_daemons)
{
	run_transfer(XFER_WRITABLE);
}

/* A descriptor over the buffers of one side: @buf indexes them. */
struct sg {
	int buf;
	uint64_t off, len;
};

/* Boundaries of the two sides never meet, and FAKE_CHUNK cuts across both (503336 bytes each). */
static const struct sg OWNER_SG[] = {
	{ 0, 5, 70001 },     { 1, 100, 1 },    { 0, 200000, 300000 },
	{ 1, 4096, 133333 }, { 0, 600000, 1 },
};
static const struct sg CLAIMER_SG[] = {
	{ 1, 0, 65536 },
	{ 0, 3, 200000 },
	{ 1, 70000, 7 },
	{ 0, 300000, 237793 },
};
static const size_t OWNER_BUF[2] = { 1024 * 1024, 256 * 1024 };
static const size_t CLAIMER_BUF[2] = { 768 * 1024, 128 * 1024 };

static size_t sg_descs(const struct sg *sg, size_t n, const struct tbuf *t, struct xfer_desc *d)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		d[i] = (struct xfer_desc){ t[sg[i].buf].region, sg[i].off, sg[i].len };
		total += sg[i].len;
	}
	return total;
}

/*
 * The source's descriptors read in order are the stream; written over copies of the
 * destination's buffers as they were, at its descriptors, they give what each must now hold,
 * bytes outside the descriptors included.
 */
static void sg_check(const struct sg *src, size_t nsrc, const struct tbuf *sb, const struct sg *dst,
		     size_t ndst, const struct tbuf *db, unsigned char *const want[2], size_t total)
{
	unsigned char *stream = malloc(total);
	size_t o = 0;

	CHECK(stream);
	for (size_t i = 0; i < nsrc; i++) {
		memcpy(stream + o, (unsigned char *)sb[src[i].buf].buf.addr + src[i].off,
		       src[i].len);
		o += src[i].len;
	}
	o = 0;
	for (size_t i = 0; i < ndst; i++) {
		memcpy(want[dst[i].buf] + dst[i].off, stream + o, dst[i].len);
		o += dst[i].len;
	}
	for (int b = 0; b < 2; b++)
		CHECK_MEM_EQ(db[b].buf.addr, want[b], db[b].buf.length);
	free(stream);
}

static void run_scatter_gather(enum xfer_kind pkind)
{
	size_t na = sizeof(OWNER_SG) / sizeof(OWNER_SG[0]);
	size_t nb = sizeof(CLAIMER_SG) / sizeof(CLAIMER_SG[0]);
	struct xfer_desc da[8], dbs[8];
	struct tbuf ta[2], tb[2];
	unsigned char *want[2];
	uint64_t pop, aop;
	char *meta;

	world_start();
	struct xfer_client *ca = client(DA, "owner"), *cb = client(DB, "claimer");
	for (int i = 0; i < 2; i++) {
		tbuf_make(ca, OWNER_BUF[i], 10 + (uint64_t)i, &ta[i]);
		tbuf_make(cb, CLAIMER_BUF[i], 20 + (uint64_t)i, &tb[i]);
	}
	size_t total = sg_descs(OWNER_SG, na, ta, da);
	CHECK_EQ_INT(sg_descs(CLAIMER_SG, nb, tb, dbs), total);
	const struct tbuf *dst = pkind == XFER_READABLE ? tb : ta;
	for (int i = 0; i < 2; i++) {
		want[i] = malloc(dst[i].buf.length);
		CHECK(want[i]);
		memcpy(want[i], dst[i].buf.addr, dst[i].buf.length);
	}
	if (pkind == XFER_READABLE) {
		CHECK_OK(xfer_readable(ca, da, na, NULL, &pop, &meta));
		CHECK_OK(xfer_read(cb, meta, dbs, nb, NULL, &aop));
	} else {
		CHECK_OK(xfer_writable(ca, da, na, NULL, &pop, &meta));
		CHECK_OK(xfer_write(cb, meta, dbs, nb, NULL, &aop));
	}
	CHECK_END(ca, pop, XFER_COMPLETE, 0, NULL, (long long)total);
	CHECK_END(cb, aop, XFER_COMPLETE, 0, NULL, (long long)total);
	if (pkind == XFER_READABLE)
		sg_check(OWNER_SG, na, ta, CLAIMER_SG, nb, tb, want, total);
	else
		sg_check(CLAIMER_SG, nb, tb, OWNER_SG, na, ta, want, total);
	EXPECT_QUIET(1);
	for (int i = 0; i < 2; i++) {
		free(want[i]);
		tbuf_free(ca, &ta[i]);
		tbuf_free(cb, &tb[i]);
	}
	free(meta);
	xfer_close(ca);
	xfer_close(cb);
	EXPECT_BASELINE(1);
	world_stop();
}

TEST(scatter_gather_read_boundaries_differ)
{
	run_scatter_gather(XFER_READABLE);
}

TEST(scatter_gather_write_boundaries_differ)
{
	run_scatter_gather(XFER_WRITABLE);
}

/*
 * Each daemon reads the other's readable at once: the second claim goes out over the set the
 * first one made (the accepted side's), and DATA flows both ways on one connection.
 */
TEST(reads_both_ways_share_one_peer_set)
{
	struct pair ab, ba; /* A owns ab (B reads it); B owns ba (A reads it) */
	struct xfer_desc d;

	world_start();
	pair_open(&ab, XFER_READABLE, LEN);
	ba = (struct pair){ .pkind = XFER_READABLE, .len = LEN / 2, .pc = ab.ac, .ac = ab.pc };
	tbuf_make(ba.pc, ba.len, 3, &ba.pb);
	tbuf_make(ba.ac, ba.len, 4, &ba.ab);
	d = (struct xfer_desc){ ba.pb.region, 0, ba.len };
	CHECK_OK(xfer_readable(ba.pc, &d, 1, NULL, &ba.pop, &ba.meta));
	CHECK_OK(pair_claim(&ab, &ab.aop));
	CHECK_OK(pair_claim(&ba, &ba.aop));
	CHECK_END(ab.pc, ab.pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(ab.ac, ab.aop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(ba.pc, ba.pop, XFER_COMPLETE, 0, NULL, LEN / 2);
	CHECK_END(ba.ac, ba.aop, XFER_COMPLETE, 0, NULL, LEN / 2);
	pair_check_bytes(&ab);
	pair_check_bytes(&ba);
	CHECK_EQ_INT(links(), 1);
	EXPECT_QUIET(1);
	free(ba.meta);
	tbuf_free(ba.pc, &ba.pb);
	tbuf_free(ba.ac, &ba.ab);
	pair_close(&ab);
	EXPECT_BASELINE(1);
	world_stop();
}

/* ---- cancels ---- */

enum moment {
	AT_CLAIM,    /**< the CLAIM is on its way to the owner */
	AT_CLAIM_OK, /**< the owner accepted; CLAIM_OK is on its way to the claimer */
	AT_DATA,     /**< both IN_PROGRESS, one chunk arrived, the rest waits */
};

/* Holds the pair at @at. */
static void hold_at(const struct pair *p, enum moment at)
{
	if (at == AT_CLAIM)
		fake_arm(DA, XP_PEER_CLAIM, 0, FAKE_HOLD);
	else if (at == AT_CLAIM_OK)
		fake_arm(DB, XP_PEER_CLAIM_OK, 0, FAKE_HOLD);
	else
		fake_arm(p->pkind == XFER_READABLE ? DB : DA, XP_PEER_DATA, FAKE_CHUNK, FAKE_HOLD);
}

/* The owner cancels while B's op.read/op.write still waits for the owner's answer. */
static void cancel_by_owner_pending(struct pair *p, enum moment at)
{
	struct async_claim a;

	hold_at(p, at);
	async_claim_start(&a, p);
	fake_wait();
	CHECK_STATE(p->pc, p->pop, at == AT_CLAIM ? XFER_INITIALIZED : XFER_IN_PROGRESS, 0);
	CHECK_OK(xfer_cancel(p->pc, p->pop));
	CHECK_END(p->pc, p->pop, XFER_CANCELLED, -ECANCELED, "cancelled by its owner", 0);
	fake_release();
	async_claim_join(&a);
	if (at == AT_CLAIM) {
		/* The claim reaches an ended op: refused, and the refusal says why. */
		CHECK_ERR(a.rc, -ECANCELED);
		CHECK_CAUSE(a.err, "cancelled by its owner");
	} else {
		/* Accepted, then the owner's CANCEL: the claimer's op ends with the owner's cause. */
		CHECK_OK(a.rc);
		CHECK_END(p->ac, a.op, XFER_CANCELLED, -ECANCELED, "peer: cancelled by its owner",
			  0);
	}
}

/*
 * The claimer cancels while its op.read/op.write still waits for the owner's answer: only the
 * raw protocol can, since the library's call blocks until then. The op is found by its state.
 */
static void cancel_by_claimer_pending(struct pair *p, enum moment at)
{
	struct raw r;
	struct xp_reply rep;
	bool got_claim = false, got_cancel = false;

	raw_open(&r, DB, p->len);
	hold_at(p, at);
	raw_send(&r,
		 json_pack("{s:s, s:i, s:s, s:{s:s, s:[{s:I, s:i, s:I}]}}", "jsonrpc", "2.0", "id",
			   3, "method", p->pkind == XFER_READABLE ? "op.read" : "op.write",
			   "params", "metadata", p->meta, "descs", "region", (json_int_t)r.region,
			   "offset", 0, "length", (json_int_t)p->len));
	fake_wait();
	uint64_t op = pending_claim(DB);
	CHECK(op > 0);
	CHECK_STATE(p->pc, p->pop, at == AT_CLAIM ? XFER_INITIALIZED : XFER_IN_PROGRESS, 0);
	raw_send(&r, json_pack("{s:s, s:i, s:s, s:{s:I}}", "jsonrpc", "2.0", "id", 4, "method",
			       "op.cancel", "params", "op", (json_int_t)op));
	/* The claim is answered with the cancel's cause, op.cancel with the op CANCELLED. */
	for (int i = 0; i < 2; i++) {
		CHECK_OK(td_raw_recv(r.sock, &rep));
		if (rep.id == 3) {
			CHECK_STR_EQ(td_reply_errno(&rep), "ECANCELED");
			CHECK_CAUSE(rep.message ? rep.message : "", "cancelled by its owner");
			got_claim = true;
		} else {
			CHECK_EQ_INT(rep.id, 4);
			CHECK(rep.result);
			CHECK_STR_EQ(json_string_value(json_object_get(rep.result, "state")),
				     "CANCELLED");
			got_cancel = true;
		}
		xp_reply_fini(&rep);
	}
	CHECK(got_claim && got_cancel);
	fake_release();
	/* The owner hears the CANCEL (after accepting the CLAIM held before it, if it was). */
	CHECK_END(p->pc, p->pop, XFER_CANCELLED, -ECANCELED, "peer: cancelled by its owner", 0);
	raw_close(&r);
}

static void run_cancel(bool by_owner, enum moment at, enum xfer_kind pkind)
{
	struct pair p;

	world_start();
	pair_open(&p, pkind, LEN);
	if (at == AT_DATA) {
		hold_at(&p, at);
		CHECK_OK(pair_claim(&p, &p.aop));
		fake_wait();
		CHECK_STATE(p.pc, p.pop, XFER_IN_PROGRESS, FAKE_CHUNK);
		CHECK_STATE(p.ac, p.aop, XFER_IN_PROGRESS, FAKE_CHUNK);
		CHECK_OK(xfer_cancel(by_owner ? p.pc : p.ac, by_owner ? p.pop : p.aop));
		/* The CANCEL passes the held DATA; the side that cancelled names itself, the
		 * other quotes it. */
		CHECK_END(by_owner ? p.pc : p.ac, by_owner ? p.pop : p.aop, XFER_CANCELLED,
			  -ECANCELED, "cancelled by its owner", FAKE_CHUNK);
		CHECK_END(by_owner ? p.ac : p.pc, by_owner ? p.aop : p.pop, XFER_CANCELLED,
			  -ECANCELED, "peer: cancelled by its owner", FAKE_CHUNK);
		fake_release();
	} else if (by_owner) {
		cancel_by_owner_pending(&p, at);
	} else {
		cancel_by_claimer_pending(&p, at);
	}
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1);
	world_stop();
}

TEST(cancel_by_owner_while_claim_in_flight_read)
{
	run_cancel(true, AT_CLAIM, XFER_READABLE);
}

TEST(cancel_by_owner_while_claim_in_flight_write)
{
	run_cancel(true, AT_CLAIM, XFER_WRITABLE);
}

TEST(cancel_by_owner_while_claim_ok_in_flight_read)
{
	run_cancel(true, AT_CLAIM_OK, XFER_READABLE);
}

TEST(cancel_by_owner_while_claim_ok_in_flight_write)
{
	run_cancel(true, AT_CLAIM_OK, XFER_WRITABLE);
}

TEST(cancel_by_owner_in_progress_read)
{
	run_cancel(true, AT_DATA, XFER_READABLE);
}

TEST(cancel_by_owner_in_progress_write)
{
	run_cancel(true, AT_DATA, XFER_WRITABLE);
}

TEST(cancel_by_claimer_while_claim_in_flight_read)
{
	run_cancel(false, AT_CLAIM, XFER_READABLE);
}

TEST(cancel_by_claimer_while_claim_in_flight_write)
{
	run_cancel(false, AT_CLAIM, XFER_WRITABLE);
}

TEST(cancel_by_claimer_while_claim_ok_in_flight_read)
{
	run_cancel(false, AT_CLAIM_OK, XFER_READABLE);
}

TEST(cancel_by_claimer_while_claim_ok_in_flight_write)
{
	run_cancel(false, AT_CLAIM_OK, XFER_WRITABLE);
}

TEST(cancel_by_claimer_in_progress_read)
{
	run_cancel(false, AT_DATA, XFER_READABLE);
}

TEST(cancel_by_claimer_in_progress_write)
{
	run_cancel(false, AT_DATA, XFER_WRITABLE);
}

/* ---- link loss ---- */

/*
 * The link is cut just before message @type would reach its daemon (DATA: the second chunk).
 * Both sets fail at once; every transfer on them ends ERRORED ECONNRESET on both daemons,
 * except what had ended already: an owner that got DONE is COMPLETE (it has every byte), while
 * its claimer, cut off from DONE_ACK, cannot know that and ends ERRORED.
 */
static void run_cut(uint8_t type, enum xfer_kind pkind)
{
	bool read = pkind == XFER_READABLE;
	int to = type == XP_PEER_CLAIM || type == XP_PEER_DONE ? DA :
		 type == XP_PEER_DATA			       ? (read ? DB : DA) :
								 DB;
	bool pending = type == XP_PEER_CLAIM || type == XP_PEER_CLAIM_OK;
	/* What each side moved before the cut: nothing, the one chunk let through, or all. */
	long long moved = type == XP_PEER_DATA				   ? FAKE_CHUNK :
			  type == XP_PEER_DONE || type == XP_PEER_DONE_ACK ? LEN :
									     0;
	struct pair p;

	world_start();
	pair_open(&p, pkind, LEN);
	fake_arm(to, type, type == XP_PEER_DATA ? FAKE_CHUNK : 0, FAKE_CUT);
	int rc = pair_claim(&p, &p.aop);
	fake_wait();
	if (pending) {
		/* op.read/op.write waited for the owner: its answer is the loss. */
		CHECK_ERR(rc, -ECONNRESET);
		CHECK_CAUSE(xfer_last_error(p.ac), "fake link cut");
	} else {
		CHECK_OK(rc);
		CHECK_END(p.ac, p.aop, XFER_ERRORED, -ECONNRESET, "fake link cut", moved);
	}
	if (type == XP_PEER_CLAIM)
		CHECK_STATE(p.pc, p.pop, XFER_INITIALIZED, 0); /* it never saw the claim */
	else if (type == XP_PEER_DONE_ACK)
		CHECK_END(p.pc, p.pop, XFER_COMPLETE, 0, NULL, LEN);
	else
		CHECK_END(p.pc, p.pop, XFER_ERRORED, -ECONNRESET, "fake link cut", moved);
	fake_release();
	if (type == XP_PEER_CLAIM) {
		EXPECT_PEERLESS();
		/* Untouched, it may be claimed again: a new set carries the second claim. */
		CHECK_OK(pair_claim(&p, &p.aop));
		CHECK_END(p.pc, p.pop, XFER_COMPLETE, 0, NULL, LEN);
		CHECK_END(p.ac, p.aop, XFER_COMPLETE, 0, NULL, LEN);
		pair_check_bytes(&p);
		EXPECT_QUIET(1);
	} else {
		EXPECT_QUIET(0); /* both sets are gone, with their transfers */
	}
	pair_close(&p);
	EXPECT_BASELINE(type == XP_PEER_CLAIM ? 1 : 0);
	world_stop();
}

TEST(link_cut_before_claim_arrives_read)
{
	run_cut(XP_PEER_CLAIM, XFER_READABLE);
}

TEST(link_cut_before_claim_arrives_write)
{
	run_cut(XP_PEER_CLAIM, XFER_WRITABLE);
}

TEST(link_cut_before_claim_ok_read)
{
	run_cut(XP_PEER_CLAIM_OK, XFER_READABLE);
}

TEST(link_cut_before_claim_ok_write)
{
	run_cut(XP_PEER_CLAIM_OK, XFER_WRITABLE);
}

TEST(link_cut_during_data_read)
{
	run_cut(XP_PEER_DATA, XFER_READABLE);
}

TEST(link_cut_during_data_write)
{
	run_cut(XP_PEER_DATA, XFER_WRITABLE);
}

TEST(link_cut_after_last_byte_before_done_read)
{
	run_cut(XP_PEER_DONE, XFER_READABLE);
}

TEST(link_cut_after_last_byte_before_done_write)
{
	run_cut(XP_PEER_DONE, XFER_WRITABLE);
}

TEST(link_cut_before_done_ack_read)
{
	run_cut(XP_PEER_DONE_ACK, XFER_READABLE);
}

TEST(link_cut_before_done_ack_write)
{
	run_cut(XP_PEER_DONE_ACK, XFER_WRITABLE);
}

/* ---- the short end (PROTOCOL.md §10.3: "quick_end", one last message) ---- */

static void quick_world_start(void)
{
	fake_ops.quick_end = true;
	world_start();
}

static void quick_world_stop(void)
{
	world_stop();
	fake_ops.quick_end = false;
}

/* A quick pairing moves every byte and both sides complete (the long tests above: none). */
static void run_quick_transfer(enum xfer_kind pkind)
{
	struct pair p;

	quick_world_start();
	pair_move(&p, pkind);
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1);
	quick_world_stop();
}

TEST(quick_end_read_across_daemons)
{
	run_quick_transfer(XFER_READABLE);
}

TEST(quick_end_write_across_daemons)
{
	run_quick_transfer(XFER_WRITABLE);
}

/*
 * The link is cut just before the last message (the reader's DONE, the owner's DONE_ACK): the
 * side that received every byte completed at its last byte; the side that sent them cannot
 * know that and ends ERRORED ECONNRESET, as a claimer cut off from DONE_ACK does in the long
 * exchange.
 */
static void run_quick_cut(enum xfer_kind pkind)
{
	bool read = pkind == XFER_READABLE;
	struct pair p;

	quick_world_start();
	pair_open(&p, pkind, LEN);
	fake_arm(read ? DA : DB, read ? XP_PEER_DONE : XP_PEER_DONE_ACK, 0, FAKE_CUT);
	CHECK_OK(pair_claim(&p, &p.aop));
	fake_wait();
	CHECK_END(read ? p.ac : p.pc, read ? p.aop : p.pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(read ? p.pc : p.ac, read ? p.pop : p.aop, XFER_ERRORED, -ECONNRESET,
		  "fake link cut", LEN);
	pair_check_bytes(&p);
	fake_release();
	EXPECT_QUIET(0);
	pair_close(&p);
	EXPECT_BASELINE(0);
	quick_world_stop();
}

TEST(quick_end_link_cut_before_done_read)
{
	run_quick_cut(XFER_READABLE);
}

TEST(quick_end_link_cut_before_done_ack_write)
{
	run_quick_cut(XFER_WRITABLE);
}

static void *release_soon(void *arg)
{
	(void)arg;
	usleep(200 * 1000);
	fake_release();
	return NULL;
}

/*
 * The side that sent every byte is committed: its owner's cancel while the last message is
 * held waits for it, and the op ends COMPLETE on both sides, never CANCELLED against COMPLETE.
 * (Whether the release comes before or after the cancel reaches the daemon, both complete.)
 */
static void run_quick_cancel_committed(enum xfer_kind pkind)
{
	bool read = pkind == XFER_READABLE;
	struct xfer_client *sender;
	uint64_t sop;
	pthread_t t;
	struct pair p;

	quick_world_start();
	pair_open(&p, pkind, LEN);
	fake_arm(read ? DA : DB, read ? XP_PEER_DONE : XP_PEER_DONE_ACK, 0, FAKE_HOLD);
	CHECK_OK(pair_claim(&p, &p.aop));
	fake_wait();
	sender = read ? p.pc : p.ac;
	sop = read ? p.pop : p.aop;
	CHECK(pthread_create(&t, NULL, release_soon, NULL) == 0);
	CHECK_OK(xfer_cancel(sender, sop));
	CHECK(pthread_join(t, NULL) == 0);
	CHECK_END(p.pc, p.pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(p.ac, p.aop, XFER_COMPLETE, 0, NULL, LEN);
	pair_check_bytes(&p);
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1);
	quick_world_stop();
}

TEST(quick_end_owner_cancel_after_last_byte_read)
{
	run_quick_cancel_committed(XFER_READABLE);
}

TEST(quick_end_writer_cancel_after_last_byte_write)
{
	run_quick_cancel_committed(XFER_WRITABLE);
}

static void late_count_cb(void *arg)
{
	W.late_count = true;
}

static void late_ended_cb(void *arg)
{
	*(bool *)arg = W.late_ended;
}

/*
 * The receiver's last word (the reader's DONE, the owner's DONE_ACK) arrives before the
 * sender counted its last chunk, as over TCP when a file's chunk is written by the file lane's
 * worker: both sides complete, byte-exact, and the sender's operation ends only after its last
 * chunk is counted, never while one may still read its client's buffer. (A DONE_ACK seen then
 * was taken for a protocol error and failed the whole set: test_cross's 20 clients under
 * valgrind, 2 runs of 2.)
 */
static void run_last_word_before_count(enum xfer_kind pkind, bool quick)
{
	bool ended_early = true;
	struct pair p;

	if (quick)
		quick_world_start();
	else
		world_start();
	on_loop(late_count_cb, NULL);
	pair_move(&p, pkind);
	on_loop(late_ended_cb, &ended_early);
	CHECK(!ended_early);
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1);
	if (quick)
		quick_world_stop();
	else
		world_stop();
}

TEST(reader_done_before_owner_counts_last_chunk)
{
	run_last_word_before_count(XFER_READABLE, false);
}

TEST(quick_end_reader_done_before_owner_counts_last_chunk)
{
	run_last_word_before_count(XFER_READABLE, true);
}

TEST(quick_end_done_ack_before_writer_counts_last_chunk)
{
	run_last_word_before_count(XFER_WRITABLE, true);
}

/* ---- a chunk still landing (tcp.c's file lane) ---- */

struct op_told {
	int daemon;
	uint64_t id;
	bool ending, told;
};

static void op_told_cb(void *arg)
{
	struct op_told *t = arg;
	struct xd_op *op;

	TAILQ_FOREACH(op, &W.d[t->daemon].ops, link) {
		if (op->id == t->id) {
			t->ending = xd_op_ending(op);
			t->told = xp_state_terminal(op->state);
		}
	}
}

/* Waits until op @id of daemon @i was asked to end (ENDING) or has ended; returns whether told. */
static bool op_end_asked(int i, uint64_t id)
{
	struct op_told t = { i, id, false, false };

	for (int waited = 0; waited < SETTLE_MS; waited++) {
		on_loop(op_told_cb, &t);
		if (t.ending || t.told)
			break;
		usleep(1000);
	}
	CHECK(t.ending || t.told);
	return t.told;
}

static void wire_empty_cb(void *arg)
{
	*(bool *)arg = TAILQ_EMPTY(&W.msgs);
}

/* Waits until every control message in flight was delivered (DATA may stay held). */
static void wire_settle(void)
{
	bool empty = false;

	for (int waited = 0; !empty && waited < SETTLE_MS; waited++) {
		on_loop(wire_empty_cb, &empty);
		if (!empty)
			usleep(1000);
	}
	CHECK(empty);
}

static void cut_first_link_cb(void *arg)
{
	link_cut(TAILQ_FIRST(&W.links));
}

/* op.cancel, which replies once the op ended: on a thread of its own (its client is its own). */
struct async_cancel {
	pthread_t thread;
	struct xfer_client *c;
	uint64_t op;
	int rc;
};

static void *async_cancel_main(void *arg)
{
	struct async_cancel *a = arg;

	a->rc = xfer_cancel(a->c, a->op);
	return NULL;
}

enum land_end {
	LAND_RECEIVER_CANCELS, /**< the receiving side's client cancels */
	LAND_SENDER_CANCELS,   /**< the sending side's: its CANCEL reaches the receiver */
	LAND_LINK_CUT,	       /**< the set fails on both daemons */
};

/*
 * The receiver's op is asked to end (@how) while a worker still writes a chunk of its bytes
 * into its buffer, as tcp.c's file lane does for a file region: the end is told only once the
 * worker is through, the chunk's bytes in place by then, never while bytes may still land
 * (the client, told the end, may reuse the buffer or the file at once).
 */
static void run_end_while_landing(enum land_end how, enum xfer_kind pkind)
{
	bool read = pkind == XFER_READABLE;
	int rxd = read ? DB : DA; /* the daemon whose worker lands the chunk */
	struct async_cancel ac = { 0 };
	struct pair p;

	world_start();
	pair_open(&p, pkind, LEN);
	fake_arm(rxd, XP_PEER_DATA, FAKE_CHUNK, FAKE_LAND);
	CHECK_OK(pair_claim(&p, &p.aop));
	fake_wait();
	struct xfer_client *rc = read ? p.ac : p.pc, *sc = read ? p.pc : p.ac;
	uint64_t rop = read ? p.aop : p.pop, sop = read ? p.pop : p.aop;
	const struct tbuf *src = read ? &p.pb : &p.ab, *dst = read ? &p.ab : &p.pb;
	switch (how) {
	case LAND_RECEIVER_CANCELS:
		ac.c = rc;
		ac.op = rop;
		CHECK(pthread_create(&ac.thread, NULL, async_cancel_main, &ac) == 0);
		break;
	case LAND_SENDER_CANCELS:
		CHECK_OK(xfer_cancel(sc, sop));
		CHECK_END(sc, sop, XFER_CANCELLED, -ECANCELED, "cancelled by its owner", -1);
		wire_settle(); /* (its CANCEL reached the receiver) */
		break;
	case LAND_LINK_CUT:
		on_loop(cut_first_link_cb, NULL);
		CHECK_END(sc, sop, XFER_ERRORED, -ECONNRESET, "fake link cut", -1);
		break;
	}
	if (op_end_asked(rxd, rop))
		harness_fail(__FILE__, __LINE__,
			     "the receiver's op %llu was told its end while a worker still wrote "
			     "its buffer",
			     (unsigned long long)rop);
	fake_release(); /* the worker is through */
	if (how == LAND_RECEIVER_CANCELS) {
		CHECK(pthread_join(ac.thread, NULL) == 0);
		CHECK_OK(ac.rc);
		CHECK_END(rc, rop, XFER_CANCELLED, -ECANCELED, "cancelled by its owner", -1);
		CHECK_END(sc, sop, XFER_CANCELLED, -ECANCELED, "peer: cancelled by its owner", -1);
	} else if (how == LAND_SENDER_CANCELS) {
		CHECK_END(rc, rop, XFER_CANCELLED, -ECANCELED, "peer: cancelled by its owner", -1);
	} else {
		CHECK_END(rc, rop, XFER_ERRORED, -ECONNRESET, "fake link cut", -1);
	}
	/* What the worker wrote was in place: both chunks the receiver took are the sender's. */
	CHECK_MEM_EQ(dst->buf.addr, src->buf.addr, 2 * FAKE_CHUNK);
	EXPECT_QUIET(how == LAND_LINK_CUT ? 0 : 1);
	pair_close(&p);
	EXPECT_BASELINE(how == LAND_LINK_CUT ? 0 : 1);
	world_stop();
}

TEST(receiver_cancels_while_chunk_lands_read)
{
	run_end_while_landing(LAND_RECEIVER_CANCELS, XFER_READABLE);
}

TEST(receiver_cancels_while_chunk_lands_write)
{
	run_end_while_landing(LAND_RECEIVER_CANCELS, XFER_WRITABLE);
}

TEST(sender_cancels_while_chunk_lands_read)
{
	run_end_while_landing(LAND_SENDER_CANCELS, XFER_READABLE);
}

TEST(sender_cancels_while_chunk_lands_write)
{
	run_end_while_landing(LAND_SENDER_CANCELS, XFER_WRITABLE);
}

TEST(link_cut_while_chunk_lands_read)
{
	run_end_while_landing(LAND_LINK_CUT, XFER_READABLE);
}

TEST(link_cut_while_chunk_lands_write)
{
	run_end_while_landing(LAND_LINK_CUT, XFER_WRITABLE);
}

/* ---- refusals ---- */

/*
 * A readable is claimed exactly once: a second claim is refused EALREADY while the first one's
 * bytes move (over the same peer set, and locally on the owner's node) and after it completed,
 * and the first one's bytes are intact.
 */
TEST(second_claim_refused_ealready)
{
	struct pair p;
	struct tbuf second, local;
	struct xfer_desc d;
	uint64_t op;

	world_start();
	pair_open(&p, XFER_READABLE, LEN);
	hold_at(&p, AT_DATA);
	CHECK_OK(pair_claim(&p, &p.aop));
	fake_wait();
	CHECK_STATE(p.pc, p.pop, XFER_IN_PROGRESS, FAKE_CHUNK);
	struct xfer_client *c2 = client(DB, "second");
	tbuf_make(c2, LEN, 3, &second);
	d = (struct xfer_desc){ second.region, 0, LEN };
	CHECK_ERR(xfer_read(c2, p.meta, &d, 1, NULL, &op), -EALREADY);
	CHECK_CAUSE(xfer_last_error(c2), "already claimed");
	tbuf_make(p.pc, LEN, 4, &local);
	d = (struct xfer_desc){ local.region, 0, LEN };
	CHECK_ERR(xfer_read(p.pc, p.meta, &d, 1, NULL, &op), -EALREADY);
	CHECK_CAUSE(xfer_last_error(p.pc), "already claimed");
	fake_release();
	CHECK_END(p.pc, p.pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(p.ac, p.aop, XFER_COMPLETE, 0, NULL, LEN);
	pair_check_bytes(&p);
	d = (struct xfer_desc){ second.region, 0, LEN };
	CHECK_ERR(xfer_read(c2, p.meta, &d, 1, NULL, &op), -EALREADY);
	CHECK_CAUSE(xfer_last_error(c2), "already claimed");
	/* No refused claim wrote a byte. */
	void *fresh = malloc(LEN);
	CHECK(fresh);
	td_fill(fresh, LEN, 3);
	CHECK_MEM_EQ(second.buf.addr, fresh, LEN);
	td_fill(fresh, LEN, 4);
	CHECK_MEM_EQ(local.buf.addr, fresh, LEN);
	free(fresh);
	EXPECT_QUIET(1);
	tbuf_free(c2, &second);
	tbuf_free(p.pc, &local);
	xfer_close(c2);
	pair_close(&p);
	EXPECT_BASELINE(1);
	world_stop();
}

/*
 * Metadata names the owner's run (its epoch). After the owner restarted (same node, new epoch),
 * metadata from its earlier run is refused ESTALE, even where the new run has an operation with
 * the same id: the claim cannot land on an operation it was never given.
 */
/*
 * A peer that sends one transfer's CLAIM twice breaks the protocol (a transfer is named by the
 * claimer's op id, never reused). The owner must not answer the copy with a CLAIM_ERR under the
 * live transfer's id: the claimer would end its transfer on it without telling the owner, whose
 * op would then wait for its deadline. The set fails instead, and both ends end at once.
 */
static void run_duplicate_claim(enum xfer_kind pkind)
{
	struct pair p;

	world_start();
	pair_open(&p, pkind, LEN);
	fake_arm(DA, XP_PEER_CLAIM, 0, FAKE_REPEAT);
	int rc = pair_claim(&p, &p.aop);
	fake_wait();
	/* The claimer hears the set close, whether its CLAIM_OK came first or not. */
	if (rc == 0)
		CHECK_END(p.ac, p.aop, XFER_ERRORED, -ECONNRESET, "closed the connection", -1);
	else
		CHECK_ERR(rc, -ECONNRESET);
	CHECK_END(p.pc, p.pop, XFER_ERRORED, -ECONNRESET, "protocol error", -1);
	fake_release();
	EXPECT_QUIET(0);
	pair_close(&p);
	EXPECT_BASELINE(0);
	world_stop();
}

TEST(duplicate_claim_fails_the_set_read)
{
	run_duplicate_claim(XFER_READABLE);
}

TEST(duplicate_claim_fails_the_set_write)
{
	run_duplicate_claim(XFER_WRITABLE);
}

/*
 * A peer's CANCEL carries its words to our client, our log and an operator's terminal: control
 * bytes in them must arrive escaped, never raw.
 */
TEST(peer_cause_with_escapes_arrives_escaped)
{
	struct async_claim a;
	struct pair p;

	world_start();
	pair_open(&p, XFER_READABLE, LEN);
	hold_at(&p, AT_CLAIM);
	async_claim_start(&a, &p);
	fake_wait();
	CHECK_OK(xfer_cancel(p.pc, p.pop));
	/* The new rule lets the held CLAIM through: the owner's refusal comes back tampered. */
	fake_arm(DB, XP_PEER_CLAIM_ERR, 0, FAKE_TAMPER);
	fake_wait();
	async_claim_join(&a);
	CHECK_ERR(a.rc, -ECANCELED);
	CHECK_CAUSE(a.err, "\\x1b]0;pwned\\x07 gone");
	for (const char *c = a.err; *c; c++)
		CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c != 0x7f);
	fake_release();
	pair_close(&p);
	EXPECT_BASELINE(1);
	world_stop();
}

TEST(restarted_owner_metadata_refused_estale)
{
	struct pair p;
	struct tbuf stale_buf, fresh_buf;
	struct xfer_desc d;
	uint64_t op, stale_op, fresh_ops[2];
	char *stale_meta, *fresh_meta[2];
	struct census c[2];

	world_start();
	/* A first transfer, so that B holds a set to the run that goes away. */
	pair_open(&p, XFER_READABLE, LEN);
	CHECK_OK(pair_claim(&p, &p.aop));
	CHECK_END(p.ac, p.aop, XFER_COMPLETE, 0, NULL, LEN);
	tbuf_make(p.pc, LEN, 5, &stale_buf);
	d = (struct xfer_desc){ stale_buf.region, 0, LEN };
	CHECK_OK(xfer_readable(p.pc, &d, 1, NULL, &stale_op, &stale_meta));
	xfer_close(p.pc); /* its daemon goes: the client goes first */
	xfer_buf_free(&p.pb.buf);
	xfer_buf_free(&stale_buf.buf);

	world_restart(DA, EPOCH_A + 1000);
	/* B's set to the old run fails on its connection's EOF before anything claims again. */
	for (int waited = 0; waited < SETTLE_MS; waited++) {
		on_loop(census_cb, c);
		if (c[DB].peers == 0)
			break;
		usleep(1000);
	}
	CHECK_EQ_INT(c[DB].peers, 0);

	p.pc = client(DA, "owner-again");
	tbuf_make(p.pc, LEN, 6, &fresh_buf);
	d = (struct xfer_desc){ fresh_buf.region, 0, LEN };
	for (int i = 0; i < 2; i++)
		CHECK_OK(xfer_readable(p.pc, &d, 1, NULL, &fresh_ops[i], &fresh_meta[i]));
	CHECK(fresh_ops[1] == stale_op); /* the ids of the new run reach the stale one's */
	d = (struct xfer_desc){ p.ab.region, 0, LEN };
	CHECK_ERR(xfer_read(p.ac, stale_meta, &d, 1, NULL, &op), -ESTALE);
	CHECK_CAUSE(xfer_last_error(p.ac), "earlier run of the owner daemon");
	for (int i = 0; i < 2; i++) {
		CHECK_STATE(p.pc, fresh_ops[i], XFER_INITIALIZED, 0);
		CHECK_OK(xfer_release(p.pc, fresh_ops[i]));
		free(fresh_meta[i]);
	}
	EXPECT_QUIET(1); /* one new set each */
	free(stale_meta);
	free(p.meta);
	tbuf_free(p.pc, &fresh_buf);
	tbuf_free(p.ac, &p.ab);
	xfer_close(p.pc);
	xfer_close(p.ac);
	EXPECT_BASELINE(1);
	world_stop();
}

/* ---- XFER_OP_NOWAIT: the claim's outcome as an event ---- */

/* The states the event callback saw for one op, in order. */
struct seen {
	uint64_t op;
	enum xfer_state states[8];
	int n;
};

static void seen_cb(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct seen *s = arg;

	if (info->op == s->op && s->n < 8)
		s->states[s->n++] = info->state;
}

static int pair_claim_nowait(struct pair *p, uint64_t length, uint64_t *op)
{
	struct xfer_desc d = { p->ab.region, 0, length };
	struct xfer_op_opts o = { .flags = XFER_OP_NOWAIT };

	if (p->pkind == XFER_READABLE)
		return xfer_read(p->ac, p->meta, &d, 1, &o, op);
	return xfer_write(p->ac, p->meta, &d, 1, &o, op);
}

/*
 * With XFER_OP_NOWAIT the call returns while the owner has not even seen the CLAIM (held by the
 * fake), the op INITIALIZED; acceptance then arrives as IN_PROGRESS, and the bytes move.
 */
static void run_nowait_accepted(enum xfer_kind pkind)
{
	struct seen s = { 0 };
	struct pair p;

	world_start();
	pair_open(&p, pkind, LEN);
	fake_arm(DA, XP_PEER_CLAIM, 0, FAKE_HOLD);
	CHECK_OK(pair_claim_nowait(&p, LEN, &p.aop));
	fake_wait();
	CHECK_STATE(p.ac, p.aop, XFER_INITIALIZED, 0);
	CHECK_STATE(p.pc, p.pop, XFER_INITIALIZED, 0);
	s.op = p.aop;
	xfer_set_event_cb(p.ac, seen_cb, &s);
	fake_release();
	CHECK_END(p.pc, p.pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(p.ac, p.aop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK(s.n >= 2);
	CHECK_EQ_INT(s.states[0], XFER_IN_PROGRESS);
	CHECK_EQ_INT(s.states[s.n - 1], XFER_COMPLETE);
	pair_check_bytes(&p);
	CHECK_OK(xfer_release(p.ac, p.aop));
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1);
	world_stop();
}

TEST(nowait_claim_accepted_arrives_as_event_read)
{
	run_nowait_accepted(XFER_READABLE);
}

TEST(nowait_claim_accepted_arrives_as_event_write)
{
	run_nowait_accepted(XFER_WRITABLE);
}

/*
 * A claim the owner refuses (lengths differ) ends the NOWAIT op ERRORED with the owner's errno
 * and sentence, pushed as an event; the passive op stays claimable, and a right claim then works.
 */
TEST(nowait_claim_refused_arrives_as_event)
{
	struct seen s = { 0 };
	struct pair p;
	uint64_t bad;

	world_start();
	pair_open(&p, XFER_READABLE, LEN);
	xfer_set_event_cb(p.ac, seen_cb, &s);
	s.op = UINT64_MAX;
	CHECK_OK(pair_claim_nowait(&p, LEN / 2, &bad));
	s.op = bad; /* (the refusal may already have been delivered: the wait below checks it) */
	CHECK_END(p.ac, bad, XFER_ERRORED, -EMSGSIZE, "does not match the owner's", 0);
	CHECK_STATE(p.pc, p.pop, XFER_INITIALIZED, 0);
	CHECK_OK(xfer_release(p.ac, bad));
	CHECK_OK(pair_claim_nowait(&p, LEN, &p.aop));
	CHECK_END(p.pc, p.pop, XFER_COMPLETE, 0, NULL, LEN);
	CHECK_END(p.ac, p.aop, XFER_COMPLETE, 0, NULL, LEN);
	pair_check_bytes(&p);
	CHECK_OK(xfer_release(p.ac, p.aop));
	/* NOWAIT belongs to the active calls only. */
	struct xfer_desc d = { p.pb.region, 0, LEN };
	struct xfer_op_opts o = { .flags = XFER_OP_NOWAIT };
	uint64_t op;
	char *meta = NULL;
	CHECK_ERR(xfer_readable(p.pc, &d, 1, &o, &op, &meta), -EINVAL);
	CHECK_CAUSE(xfer_last_error(p.pc), "XFER_OP_NOWAIT");
	EXPECT_QUIET(1);
	pair_close(&p);
	EXPECT_BASELINE(1);
	world_stop();
}
