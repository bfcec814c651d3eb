// SPDX-License-Identifier: MIT
/*
 * Connection sets to other daemons (PROTOCOL.md §10): TCP listeners, on-demand connects, the
 * HELLO exchange, keepalive, and the per-connection framing state machines. Each connection
 * reads DATA payloads straight into the destination mapping and writes them straight from the
 * source mapping; data of all transfers to a peer is cut into chunks that the connections take
 * round-robin, so a small transfer never waits behind a large one for more than one chunk.
 *
 * A failure of any connection of a set fails the whole set: every transfer on it ends, and the
 * next claim makes a new set. Sets and connections are freed at the next loop turn (defer.c), never inside
 * their own callbacks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "xferd.h"
#include "xp_peer.h"

#define XD_PEER_CHUNK (1u << 20) /* bytes of one DATA frame */
#define XD_MAX_PCONNS 16
#define XD_PEER_READ_BUDGET (16u << 20)	 /* bytes read per wakeup before yielding */
#define XD_PEER_WRITE_BUDGET (16u << 20) /* bytes written per wakeup before yielding */
#define XD_IOV_MAX 64

struct xd_listener {
	int fd;
	struct event *ev;
};

enum peer_state {
	PEER_CONNECTING, /**< first connection not yet through HELLO */
	PEER_UP,	 /**< at least one connection has exchanged HELLO */
	PEER_DEAD,	 /**< failed; freed at the next loop turn */
};

struct xd_pconn {
	TAILQ_ENTRY(xd_pconn) link; /**< in peer->conns, or d->pconns_hello */
	struct xd_daemon *d;
	struct xd_peer *peer; /**< NULL until an accepted connection says HELLO */
	int fd;
	struct event *rev, *wev;
	bool outgoing, connected, hello_rx, dead;
	struct xd_deferred free_later; /**< freed at the next loop turn once dead */
	char addr[80];
	uint64_t last_rx_us, last_tx_us, started_us;
	/* receive state: header, then payload */
	uint8_t rx_hdr[XP_PEER_HDR_LEN];
	uint32_t rx_hdr_got, rx_got;
	struct xp_peer_hdr rx;
	char *rx_ctrl;		 /**< control payload being read */
	struct xd_xfer *rx_xfer; /**< DATA target (a reference), NULL to drop */
	/* send state: control frames first, then one DATA frame at a time */
	STAILQ_HEAD(, xd_frame) ctrlq;
	uint32_t ctrl_sent;	 /**< bytes of the head control frame already sent */
	struct xd_xfer *tx_xfer; /**< DATA frame being sent (a reference) */
	uint8_t tx_hdr[XP_PEER_HDR_LEN];
	uint64_t tx_off;
	uint32_t tx_len, tx_sent; /**< tx_sent counts header + payload bytes */
};

struct xd_peer {
	TAILQ_ENTRY(xd_peer) link;
	struct xd_daemon *d;
	uint8_t node[XP_ID_BYTES];
	char node_hex[2 * XP_ID_BYTES + 1];
	uint64_t epoch;
	enum peer_state state;
	struct xp_endpoint endpoints[XP_MAX_ENDPOINTS];
	int nendpoints, next_endpoint;
	char endpoint[100]; /**< where we connected, or "accepted from ..." */
	TAILQ_HEAD(, xd_pconn) conns;
	int nconns;
	struct xd_xfer_list sendq; /**< transfers with bytes left to send, round-robin */
	struct event *keepalive, *connect_timer;
	uint64_t bytes_sent, bytes_received, created_us;
	unsigned transfers;	       /**< transfers on this set, for listings */
	bool rdma;		       /**< an RDMA set (rdma_conn.c) rather than TCP */
	void *rdma_state;	       /**< rdma_conn.c's part of it */
	struct xd_deferred free_later; /**< freed at the next loop turn once dead */
};

static void peer_fail(struct xd_peer *p, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void pconn_update_write(struct xd_pconn *pc);
static int pconn_send_hello(struct xd_pconn *pc);
static struct xd_pconn *pconn_connect(struct xd_peer *p, const struct xp_endpoint *ep, int *err);

bool xd_peer_is_up(const struct xd_peer *p)
{
	return p->state == PEER_UP;
}

struct xd_daemon *xd_peer_daemon(const struct xd_peer *p)
{
	return p->d;
}

bool xd_peer_is_rdma(const struct xd_peer *p)
{
	return p->rdma;
}

void **xd_peer_rdma_state(struct xd_peer *p)
{
	return &p->rdma_state;
}

const uint8_t *xd_peer_node(const struct xd_peer *p)
{
	return p->node;
}

void xd_peer_add_bytes(struct xd_peer *p, uint64_t sent, uint64_t received)
{
	if (p) {
		p->bytes_sent += sent;
		p->bytes_received += received;
	}
}

const char *xd_peer_node_hex(const struct xd_peer *p)
{
	return p->node_hex;
}

/* ---- lifetime ---- */

static void pconn_free(void *arg)
{
	struct xd_pconn *pc = arg;
	struct xd_frame *f;

	while ((f = STAILQ_FIRST(&pc->ctrlq))) {
		STAILQ_REMOVE_HEAD(&pc->ctrlq, link);
		free(f);
	}
	xd_xfer_unref(pc->rx_xfer);
	xd_xfer_unref(pc->tx_xfer);
	free(pc->rx_ctrl);
	xd_event_free(pc->rev);
	xd_event_free(pc->wev);
	if (pc->fd >= 0)
		close(pc->fd);
	free(pc);
}

static void peer_free(void *arg)
{
	struct xd_peer *p = arg;

	xd_event_free(p->keepalive);
	xd_event_free(p->connect_timer);
	free(p);
}

/* Stops @pc at once (fd closed, no more callbacks); its memory goes at the next loop turn. */
static void pconn_kill(struct xd_pconn *pc)
{
	if (pc->dead)
		return;
	pc->dead = true;
	event_del(pc->rev);
	event_del(pc->wev);
	close(pc->fd);
	pc->fd = -1;
	if (pc->peer) {
		TAILQ_REMOVE(&pc->peer->conns, pc, link);
		pc->peer->nconns--;
	} else {
		TAILQ_REMOVE(&pc->d->pconns_hello, pc, link);
	}
	xd_defer(pc->d, &pc->free_later, pconn_free, pc);
}

static void peer_fail(struct xd_peer *p, int err, const char *fmt, ...)
{
	char cause[XD_CAUSE_MAX];
	struct xd_pconn *pc;
	va_list ap;

	if (p->state == PEER_DEAD)
		return;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	xd_log(XD_LOG_WARN, "peer %s (%s): %s", p->node_hex, p->endpoint, cause);
	p->state = PEER_DEAD;
	TAILQ_REMOVE(&p->d->peers, p, link);
	while ((pc = TAILQ_FIRST(&p->conns)))
		pconn_kill(pc);
	if (p->rdma)
		xd_rdma_close_peer(p);
	event_del(p->keepalive);
	event_del(p->connect_timer);
	xd_remote_peer_lost(p, err, cause);
	xd_defer(p->d, &p->free_later, peer_free, p);
}

void xd_peer_failed(struct xd_peer *p, int err, const char *fmt, ...)
{
	char cause[XD_CAUSE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	peer_fail(p, err, "%s", cause);
}

static void keepalive_cb(evutil_socket_t fd, short what, void *arg);
static void connect_timeout_cb(evutil_socket_t fd, short what, void *arg);

static struct xd_peer *peer_new(struct xd_daemon *d, const uint8_t node[XP_ID_BYTES], bool rdma)
{
	struct timeval tv = { d->cfg.keepalive_ms / 1000, (d->cfg.keepalive_ms % 1000) * 1000 };
	struct xd_peer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->d = d;
	p->rdma = rdma;
	memcpy(p->node, node, XP_ID_BYTES);
	xp_hex_encode(node, XP_ID_BYTES, p->node_hex);
	TAILQ_INIT(&p->conns);
	TAILQ_INIT(&p->sendq);
	p->created_us = xd_now_us();
	p->keepalive = event_new(d->base, -1, EV_PERSIST, keepalive_cb, p);
	p->connect_timer = evtimer_new(d->base, connect_timeout_cb, p);
	if (!p->keepalive || !p->connect_timer || event_add(p->keepalive, &tv) < 0) {
		xd_event_free(p->keepalive);
		xd_event_free(p->connect_timer);
		free(p);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&d->peers, p, link);
	return p;
}

static struct xd_peer *peer_find(struct xd_daemon *d, const uint8_t node[XP_ID_BYTES], bool rdma)
{
	struct xd_peer *p;

	TAILQ_FOREACH(p, &d->peers, link)
		if (memcmp(p->node, node, XP_ID_BYTES) == 0 && p->rdma == rdma)
			return p;
	return NULL;
}

/* ---- sending ---- */

struct xd_frame *xd_frame_new(uint8_t type, uint8_t flags, uint64_t xfer, const json_t *json,
			      int *err)
{
	char *text = json ? json_dumps(json, JSON_COMPACT) : NULL;
	size_t len = text ? strlen(text) : 0;
	struct xp_peer_hdr h = {
		.type = type, .flags = flags, .length = (uint32_t)len, .xfer = xfer
	};
	struct xd_frame *f = NULL;

	*err = (json && !text) ? -ENOMEM : len > XP_PEER_MAX_CTRL ? -EMSGSIZE : 0;
	if (*err == 0 && !(f = malloc(sizeof(*f) + XP_PEER_HDR_LEN + len)))
		*err = -ENOMEM;
	if (f) {
		f->len = XP_PEER_HDR_LEN + (uint32_t)len;
		xp_peer_hdr_pack(&h, f->data);
		memcpy(f->data + XP_PEER_HDR_LEN, text ? text : "", len);
	}
	free(text);
	return f;
}

/* Queues a control message on @pc (@json borrowed, may be NULL). Returns 0 or -errno. */
static int pconn_queue(struct xd_pconn *pc, uint8_t type, uint8_t flags, uint64_t xfer,
		       const json_t *json)
{
	int err;
	struct xd_frame *f = xd_frame_new(type, flags, xfer, json, &err);

	if (!f)
		return err;
	STAILQ_INSERT_TAIL(&pc->ctrlq, f, link);
	pconn_update_write(pc);
	return 0;
}

int xd_peer_send_ctrl(struct xd_peer *p, uint8_t type, uint8_t flags, uint64_t xfer,
		      const json_t *json)
{
	struct xd_pconn *pc;

	if (p->rdma)
		return xd_rdma_send_ctrl(p, 0, type, flags, xfer, json);
	/* Control messages go on the first connection that has said HELLO. */
	TAILQ_FOREACH(pc, &p->conns, link)
		if (pc->hello_rx)
			return pconn_queue(pc, type, flags, xfer, json);
	return -ENOTCONN;
}

static bool pconn_wants_write(const struct xd_pconn *pc)
{
	if (!pc->connected)
		return true; /* the connect completes when the socket turns writable */
	if (!STAILQ_EMPTY(&pc->ctrlq) || pc->tx_xfer)
		return true;
	return pc->hello_rx && !TAILQ_EMPTY(&pc->peer->sendq);
}

static void pconn_update_write(struct xd_pconn *pc)
{
	if (pc->dead)
		return;
	if (pconn_wants_write(pc))
		event_add(pc->wev, NULL);
	else
		event_del(pc->wev);
}

void xd_peer_stream_add(struct xd_peer *p, struct xd_xfer *x)
{
	struct xd_pconn *pc;

	xd_xfer_sendq_insert(&p->sendq, x);
	if (p->rdma)
		xd_rdma_kick(p);
	TAILQ_FOREACH(pc, &p->conns, link)
		pconn_update_write(pc);
}

struct xd_xfer *xd_peer_next_stream(struct xd_peer *p, uint32_t via)
{
	return xd_xfer_sendq_next(&p->sendq, via);
}

void xd_peer_stream_remove(struct xd_peer *p, struct xd_xfer *x)
{
	xd_xfer_sendq_remove(&p->sendq, x);
}

/* Starts the next DATA frame from the round-robin queue. Returns false if there is none. */
static bool pconn_start_data(struct xd_pconn *pc)
{
	struct xd_xfer *x = xd_xfer_sendq_next(&pc->peer->sendq, 0);
	struct xp_peer_hdr h = { .type = XP_PEER_DATA };

	if (!x)
		return false;
	h.length = xd_xfer_next_chunk(x, XD_PEER_CHUNK, &h.offset, &h.xfer, &h.flags);
	if (!h.length)
		return false;
	xd_xfer_ref(x);
	pc->tx_xfer = x;
	pc->tx_off = h.offset;
	pc->tx_len = h.length;
	pc->tx_sent = 0;
	xp_peer_hdr_pack(&h, pc->tx_hdr);
	return true;
}

/* Writes what it can of the current DATA frame. Returns bytes written, or -errno. */
static ssize_t pconn_write_data(struct xd_pconn *pc)
{
	struct iovec iov[XD_IOV_MAX];
	int n = 0;
	uint32_t payload_done = pc->tx_sent > XP_PEER_HDR_LEN ? pc->tx_sent - XP_PEER_HDR_LEN : 0;

	if (pc->tx_sent < XP_PEER_HDR_LEN)
		iov[n++] =
			(struct iovec){ pc->tx_hdr + pc->tx_sent, XP_PEER_HDR_LEN - pc->tx_sent };
	n += xd_xfer_iov(pc->tx_xfer, pc->tx_off + payload_done, pc->tx_len - payload_done, iov + n,
			 XD_IOV_MAX - n);
	ssize_t w = writev(pc->fd, iov, n);
	if (w < 0)
		return errno == EAGAIN ? 0 : -errno;
	pc->tx_sent += (uint32_t)w;
	if (pc->tx_sent == XP_PEER_HDR_LEN + pc->tx_len) {
		struct xd_xfer *x = pc->tx_xfer;
		pc->tx_xfer = NULL;
		xd_xfer_data_sent(x, pc->tx_len);
		xd_xfer_unref(x);
	}
	return w;
}

/* Writes what it can of the head control frame. Returns bytes written, or -errno. */
static ssize_t pconn_write_ctrl(struct xd_pconn *pc)
{
	struct xd_frame *f = STAILQ_FIRST(&pc->ctrlq);
	ssize_t w = send(pc->fd, f->data + pc->ctrl_sent, f->len - pc->ctrl_sent, MSG_NOSIGNAL);

	if (w < 0)
		return errno == EAGAIN ? 0 : -errno;
	pc->ctrl_sent += (uint32_t)w;
	if (pc->ctrl_sent == f->len) {
		STAILQ_REMOVE_HEAD(&pc->ctrlq, link);
		free(f);
		pc->ctrl_sent = 0;
	}
	return w;
}

/*
 * Sends until the socket is full, nothing is left, or the budget is spent. The budget matters:
 * a fast reader can keep a socket writable for a whole gigabyte, and a loop that never yields
 * would starve this daemon's reads and timers, keepalive among them.
 */
static int pconn_flush(struct xd_pconn *pc)
{
	uint64_t budget = XD_PEER_WRITE_BUDGET;

	while (budget > 0) {
		ssize_t w;
		/* A control frame may not cut into a DATA frame already begun, nor the reverse. */
		if (pc->tx_xfer)
			w = pconn_write_data(pc);
		else if (!STAILQ_EMPTY(&pc->ctrlq))
			w = pconn_write_ctrl(pc);
		else if (pc->hello_rx && pconn_start_data(pc))
			continue;
		else
			break;
		if (w < 0)
			return (int)w;
		if (w == 0)
			break;
		pc->last_tx_us = xd_now_us();
		if (pc->peer)
			pc->peer->bytes_sent += (uint64_t)w;
		budget = (uint64_t)w < budget ? budget - (uint64_t)w : 0;
	}
	pconn_update_write(pc); /* still armed if anything is left: the loop comes back */
	return 0;
}

/* ---- receiving ---- */

static int handle_hello(struct xd_pconn *pc, json_t *json);

/* A complete control frame arrived. Returns 0 or -errno (a protocol error). */
static int pconn_dispatch_ctrl(struct xd_pconn *pc)
{
	json_t *json = NULL;

	if (pc->rx.length) {
		json = json_loadb(pc->rx_ctrl, pc->rx.length, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(json)) {
			json_decref(json);
			return -EPROTO;
		}
	}
	int rc;
	if (pc->rx.type == XP_PEER_HELLO)
		rc = handle_hello(pc, json);
	else if (!pc->hello_rx)
		rc = -EPROTO; /* HELLO must come first */
	else if (pc->rx.type == XP_PEER_PING)
		rc = pconn_queue(pc, XP_PEER_PONG, 0, 0, NULL);
	else if (pc->rx.type == XP_PEER_PONG)
		rc = 0;
	else
		rc = xd_remote_ctrl(pc->peer, 0, &pc->rx, json);
	json_decref(json);
	return rc;
}

/* The header is complete: check it and get ready for the payload. Returns 0 or -errno. */
static int pconn_begin_payload(struct xd_pconn *pc)
{
	xp_peer_hdr_unpack(pc->rx_hdr, &pc->rx);
	pc->rx_got = 0;
	if (!xp_peer_hdr_valid(&pc->rx))
		return -EPROTO;
	if (pc->rx.type == XP_PEER_DATA) {
		if (!pc->hello_rx)
			return -EPROTO;
		int err = 0;
		pc->rx_xfer = xd_remote_data_target(pc->peer, &pc->rx, &err);
		return err;
	}
	pc->rx_ctrl = malloc(pc->rx.length + 1);
	return pc->rx_ctrl ? 0 : -ENOMEM;
}

/* Reads DATA payload into the transfer's mapping, or drops it. Returns bytes or -errno. */
static ssize_t pconn_read_data(struct xd_pconn *pc)
{
	static char scratch[64 * 1024];
	uint32_t left = pc->rx.length - pc->rx_got;

	if (pc->rx_xfer && !xd_xfer_live(pc->rx_xfer)) {
		/* Its operation ended: no byte may land in that buffer any more. */
		xd_xfer_unref(pc->rx_xfer);
		pc->rx_xfer = NULL;
	}
	if (!pc->rx_xfer)
		return read(pc->fd, scratch, left < sizeof(scratch) ? left : sizeof(scratch));
	struct iovec iov[XD_IOV_MAX];
	int n = xd_xfer_iov(pc->rx_xfer, pc->rx.offset + pc->rx_got, left, iov, XD_IOV_MAX);
	return readv(pc->fd, iov, n);
}

static int pconn_finish_frame(struct xd_pconn *pc)
{
	int rc = 0;

	if (pc->rx.type == XP_PEER_DATA) {
		struct xd_xfer *x = pc->rx_xfer;
		pc->rx_xfer = NULL;
		if (x)
			xd_xfer_data_received(x, pc->rx.length);
		xd_xfer_unref(x);
	} else {
		rc = pconn_dispatch_ctrl(pc);
		free(pc->rx_ctrl);
		pc->rx_ctrl = NULL;
	}
	pc->rx_hdr_got = 0;
	return rc;
}

/* One read step. Returns bytes consumed (> 0), 0 when the socket is drained, or -errno. */
static ssize_t pconn_read_step(struct xd_pconn *pc)
{
	ssize_t r;

	if (pc->rx_hdr_got < XP_PEER_HDR_LEN) {
		r = read(pc->fd, pc->rx_hdr + pc->rx_hdr_got, XP_PEER_HDR_LEN - pc->rx_hdr_got);
		if (r > 0 && (pc->rx_hdr_got += (uint32_t)r) == XP_PEER_HDR_LEN) {
			int rc = pconn_begin_payload(pc);
			if (rc == 0 && pc->rx.length == 0)
				rc = pconn_finish_frame(pc);
			if (rc)
				return rc;
		}
	} else {
		if (pc->rx.type == XP_PEER_DATA)
			r = pconn_read_data(pc);
		else
			r = read(pc->fd, pc->rx_ctrl + pc->rx_got, pc->rx.length - pc->rx_got);
		if (r > 0 && (pc->rx_got += (uint32_t)r) == pc->rx.length) {
			int rc = pconn_finish_frame(pc);
			if (rc)
				return rc;
		}
	}
	if (r == 0)
		return -ECONNRESET;
	if (r < 0)
		return errno == EAGAIN ? 0 : -errno;
	return r;
}

/* PROTOCOL.md §10.4: whatever broke the connection, the transfers on it end ECONNRESET. */
static void pconn_error(struct xd_pconn *pc, int err)
{
	if (!pc->peer) {
		xd_log(XD_LOG_INFO, "peer connection from %s dropped before HELLO: %s", pc->addr,
		       strerror(-err));
		pconn_kill(pc);
	} else if (err == -EPROTO) {
		peer_fail(pc->peer, ECONNRESET, "protocol error on a connection (message type %s)",
			  xp_peer_type_name(pc->rx.type));
	} else if (err == -ECONNRESET) {
		peer_fail(pc->peer, ECONNRESET, "peer daemon closed the connection");
	} else {
		peer_fail(pc->peer, ECONNRESET, "connection to %s failed: %s", pc->addr,
			  strerror(-err));
	}
}

static void pconn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_pconn *pc = arg;
	uint64_t budget = XD_PEER_READ_BUDGET;

	while (!pc->dead) {
		ssize_t r = pconn_read_step(pc);
		if (r < 0) {
			pconn_error(pc, (int)r);
			return;
		}
		if (r == 0)
			break;
		pc->last_rx_us = xd_now_us();
		if (pc->peer)
			pc->peer->bytes_received += (uint64_t)r;
		if ((uint64_t)r >= budget)
			break; /* let the other connections and clients have a turn */
		budget -= (uint64_t)r;
	}
}

static void pconn_write_cb(evutil_socket_t fd, short what, void *arg);

/* ---- connection setup and HELLO ---- */

static struct xd_pconn *pconn_new(struct xd_daemon *d, int fd, bool outgoing)
{
	struct xd_pconn *pc = calloc(1, sizeof(*pc));

	if (!pc)
		return NULL;
	pc->d = d;
	pc->fd = fd;
	pc->outgoing = outgoing;
	pc->started_us = pc->last_rx_us = pc->last_tx_us = xd_now_us();
	STAILQ_INIT(&pc->ctrlq);
	pc->rev = event_new(d->base, fd, EV_READ | EV_PERSIST, pconn_read_cb, pc);
	pc->wev = event_new(d->base, fd, EV_WRITE | EV_PERSIST, pconn_write_cb, pc);
	if (!pc->rev || !pc->wev) {
		pc->fd = -1; /* the caller still owns fd */
		pconn_free(pc);
		return NULL;
	}
	return pc;
}

static void set_tcp_options(struct xd_daemon *d, int fd)
{
	int one = 1;
	unsigned timeout = (unsigned)d->cfg.keepalive_timeout_ms;

	/* Control messages are small and latency-bound; DATA frames are large anyway. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Bounds how long unacknowledged data may sit on a cut link before the kernel gives up. */
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout));
}

static json_t *hello_json(struct xd_daemon *d)
{
	return json_pack("{s:i, s:s, s:I}", "version", XP_PEER_VERSION, "node", d->node_hex,
			 "epoch", (json_int_t)d->epoch);
}

static int pconn_send_hello(struct xd_pconn *pc)
{
	json_t *hello = hello_json(pc->d);
	int rc = hello ? pconn_queue(pc, XP_PEER_HELLO, 0, 0, hello) : -ENOMEM;

	json_decref(hello);
	return rc;
}

struct xd_peer *xd_peer_attach(struct xd_daemon *d, const uint8_t node[XP_ID_BYTES], uint64_t epoch,
			       bool rdma, const char *from)
{
	struct xd_peer *p = peer_find(d, node, rdma);

	if (p && p->state == PEER_UP && p->epoch != epoch) {
		peer_fail(p, ECONNRESET, "peer daemon restarted (epoch %llu, now %llu)",
			  (unsigned long long)p->epoch, (unsigned long long)epoch);
		p = NULL;
	}
	if (!p && !(p = peer_new(d, node, rdma)))
		return NULL;
	if (!p->endpoint[0])
		snprintf(p->endpoint, sizeof(p->endpoint), "accepted from %s", from);
	return p;
}

void xd_peer_mark_up(struct xd_peer *p, uint64_t epoch)
{
	if (p->state == PEER_UP)
		return;
	p->state = PEER_UP;
	p->epoch = epoch;
	event_del(p->connect_timer); /* (the other side may have reached us first) */
	xd_remote_peer_up(p);
}

/* Files an accepted connection under the peer its HELLO names. Returns 0 or -errno. */
static int attach_accepted(struct xd_pconn *pc, const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	struct xd_daemon *d = pc->d;
	struct xd_peer *p = xd_peer_attach(d, node, epoch, false, pc->addr);

	if (!p)
		return -ENOMEM;
	if (p->nconns >= XD_MAX_PCONNS)
		return -EMFILE;
	TAILQ_REMOVE(&d->pconns_hello, pc, link);
	TAILQ_INSERT_TAIL(&p->conns, pc, link);
	p->nconns++;
	pc->peer = p;
	int rc = pconn_send_hello(pc);
	if (rc == 0)
		xd_peer_mark_up(p, epoch);
	return rc;
}

/* The first HELLO of an outgoing connection makes the set usable; more connections follow. */
static int outgoing_hello(struct xd_pconn *pc, const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	struct xd_peer *p = pc->peer;

	if (memcmp(node, p->node, XP_ID_BYTES) != 0) {
		char got[2 * XP_ID_BYTES + 1];
		xp_hex_encode(node, XP_ID_BYTES, got);
		peer_fail(p, EHOSTUNREACH, "the daemon at %s is node %s, not the owner", pc->addr,
			  got);
		return 0;
	}
	if (p->state == PEER_UP) {
		if (epoch != p->epoch)
			peer_fail(p, ECONNRESET, "peer daemon restarted while connecting");
		return 0;
	}
	for (int i = p->nconns; i < p->d->cfg.peer_connections; i++) {
		int err;
		if (!pconn_connect(p, &p->endpoints[p->next_endpoint], &err))
			xd_log(XD_LOG_WARN, "peer %s: extra connection failed: %s", p->node_hex,
			       strerror(-err));
	}
	xd_peer_mark_up(p, epoch);
	return 0;
}

static int handle_hello(struct xd_pconn *pc, json_t *json)
{
	const char *node_hex;
	json_int_t version, epoch;
	uint8_t node[XP_ID_BYTES];

	if (pc->hello_rx || !json ||
	    json_unpack(json, "{s:I, s:s, s:I}", "version", &version, "node", &node_hex, "epoch",
			&epoch) ||
	    xp_hex_decode(node_hex, node, XP_ID_BYTES) || epoch < 0)
		return -EPROTO;
	if (version != XP_PEER_VERSION) {
		xd_log(XD_LOG_WARN, "peer %s speaks peer protocol %lld, not %d", pc->addr,
		       (long long)version, XP_PEER_VERSION);
		return -EPROTO;
	}
	pc->hello_rx = true;
	if (pc->outgoing)
		return outgoing_hello(pc, node, (uint64_t)epoch);
	return attach_accepted(pc, node, (uint64_t)epoch);
}

static void pconn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_pconn *pc = arg;
	int rc = 0;

	if (!pc->connected) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			peer_fail(pc->peer, EHOSTUNREACH, "could not connect to %s: %s", pc->addr,
				  strerror(err));
			return;
		}
		pc->connected = true;
		event_add(pc->rev, NULL);
		rc = pconn_send_hello(pc);
	}
	if (rc == 0)
		rc = pconn_flush(pc);
	if (rc < 0)
		pconn_error(pc, rc);
}

static int resolve(const struct xp_endpoint *ep, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai;
	char port[8];

	snprintf(port, sizeof(port), "%u", ep->port);
	if (getaddrinfo(ep->addr, port, &hints, &ai) != 0)
		return -EHOSTUNREACH;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static struct xd_pconn *pconn_connect(struct xd_peer *p, const struct xp_endpoint *ep, int *err)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if ((*err = resolve(ep, &ss, &len)) < 0)
		return NULL;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	set_tcp_options(p->d, fd);
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
		*err = -errno;
		close(fd);
		return NULL;
	}
	struct xd_pconn *pc = pconn_new(p->d, fd, true);
	if (!pc) {
		close(fd);
		*err = -ENOMEM;
		return NULL;
	}
	snprintf(pc->addr, sizeof(pc->addr), "%s:%u", ep->addr, ep->port);
	pc->peer = p;
	TAILQ_INSERT_TAIL(&p->conns, pc, link);
	p->nconns++;
	event_add(pc->wev, NULL); /* writable = connected (or failed) */
	return pc;
}

static void connect_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_peer *p = arg;

	peer_fail(p, ETIMEDOUT, "no HELLO from %s within %llu ms", p->endpoint,
		  (unsigned long long)p->d->cfg.connect_timeout_ms);
}

static const struct xp_endpoint *find_endpoint(const struct xp_meta *m, const char *transport)
{
	for (int i = 0; i < m->nendpoints; i++)
		if (strcmp(m->endpoints[i].transport, transport) == 0)
			return &m->endpoints[i];
	return NULL;
}

/*
 * transport = rdma needs RDMA on both ends; auto takes it when both have it and falls back
 * to TCP otherwise, which require_rdma turns into a refusal. Returns the endpoint to use and
 * sets *rdma, or fails the call naming why.
 */
static const struct xp_endpoint *choose_endpoint(struct xd_call *call, const struct xp_meta *m,
						 bool *rdma)
{
	struct xd_daemon *d = call->conn->d;
	const struct xp_endpoint *rep = find_endpoint(m, "rdma"), *tep = find_endpoint(m, "tcp");
	const char *why = !xd_rdma_available(d) ? "this daemon has no RDMA device and listener" :
			  !rep			? "the owner advertises no rdma endpoint" :
						  NULL;

	*rdma = why == NULL && d->cfg.transport != XD_TRANSPORT_TCP;
	if (*rdma)
		return rep;
	if (d->cfg.transport == XD_TRANSPORT_RDMA || (d->cfg.require_rdma && why)) {
		xd_fail(call, XP_E_FAILED, EHOSTUNREACH, "RDMA is required but %s", why);
		return NULL;
	}
	if (!tep)
		xd_fail(call, XP_E_FAILED, EHOSTUNREACH,
			"metadata names another node and no "
			"tcp endpoint to reach it (the owner daemon has no --listen address)");
	return tep;
}

static int peer_connect(struct xd_peer *p, const struct xp_endpoint *ep)
{
	int err;

	if (p->rdma)
		return xd_rdma_connect(p, ep);
	return pconn_connect(p, ep, &err) ? 0 : err;
}

struct xd_peer *xd_peer_for_meta(struct xd_call *call, const struct xp_meta *m)
{
	struct xd_daemon *d = call->conn->d;
	bool rdma;
	const struct xp_endpoint *ep = choose_endpoint(call, m, &rdma);

	if (!ep)
		return NULL;
	struct xd_peer *p = peer_find(d, m->node, rdma);
	if (p)
		return p;
	p = peer_new(d, m->node, rdma);
	if (!p) {
		xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		return NULL;
	}
	p->endpoints[0] = *ep;
	p->nendpoints = 1;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s:%u", ep->addr, ep->port);
	struct timeval tv = { d->cfg.connect_timeout_ms / 1000,
			      (d->cfg.connect_timeout_ms % 1000) * 1000 };
	int err = peer_connect(p, ep);
	if (err) {
		xd_fail(call, XP_E_FAILED, EHOSTUNREACH, "cannot connect to the owner at %s: %s",
			p->endpoint, strerror(-err));
		peer_fail(p, EHOSTUNREACH, "connect failed");
		return NULL;
	}
	evtimer_add(p->connect_timer, &tv);
	return p;
}

/* ---- keepalive ---- */

static void keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_peer *p = arg;
	struct xd_daemon *d = p->d;
	uint64_t now = xd_now_us();
	struct xd_pconn *pc, *tmp;

	if (p->rdma) {
		xd_rdma_keepalive(p);
		xd_remote_check_drains(p); /* (may fail @p: its own call, last) */
		return;
	}
	TAILQ_FOREACH_SAFE(pc, &p->conns, link, tmp) {
		if (!pc->hello_rx)
			continue;
		uint64_t silent_ms = (now - pc->last_rx_us) / 1000;
		if (silent_ms > d->cfg.keepalive_timeout_ms) {
			peer_fail(p, ETIMEDOUT,
				  "nothing heard from the peer for %llu ms "
				  "(keepalive_timeout_ms %llu)",
				  (unsigned long long)silent_ms,
				  (unsigned long long)d->cfg.keepalive_timeout_ms);
			return;
		}
		if ((now - pc->last_tx_us) / 1000 >= d->cfg.keepalive_ms &&
		    STAILQ_EMPTY(&pc->ctrlq) && !pc->tx_xfer)
			pconn_queue(pc, XP_PEER_PING, 0, 0, NULL);
	}
}

/* ---- listeners ---- */

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct xd_daemon *d = arg;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[64] = "?", port[8] = "?";

	int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (d->stopping) {
		close(fd);
		return;
	}
	getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	set_tcp_options(d, fd);
	struct xd_pconn *pc = pconn_new(d, fd, false);
	if (!pc) {
		close(fd);
		return;
	}
	snprintf(pc->addr, sizeof(pc->addr), "%s:%s", host, port);
	pc->connected = true;
	TAILQ_INSERT_TAIL(&d->pconns_hello, pc, link);
	event_add(pc->rev, NULL);
}

/* Splits "addr:port" ("[v6]:port" too). Returns 0 or -EINVAL. */
static int split_addr(const char *s, struct xp_endpoint *ep)
{
	const char *colon = strrchr(s, ':');
	char *end;

	if (!colon || colon == s)
		return -EINVAL;
	size_t alen = (size_t)(colon - s);
	if (s[0] == '[' && alen >= 2 && s[alen - 1] == ']') {
		s++;
		alen -= 2;
	}
	long port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535 || alen >= sizeof(ep->addr))
		return -EINVAL;
	memcpy(ep->addr, s, alen);
	ep->addr[alen] = '\0';
	strcpy(ep->transport, "tcp");
	ep->port = (uint16_t)port;
	return 0;
}

/* Binds one listener; fills @bound with the address and the real port. */
static int listen_on(struct xd_daemon *d, const char *addr, struct xp_endpoint *bound)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1;

	if (split_addr(addr, bound) < 0 || resolve(bound, &ss, &len) < 0) {
		xd_log(XD_LOG_ERR, "listen address \"%s\" must be ADDR:PORT", addr);
		return -EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		int err = -errno;
		xd_log(XD_LOG_ERR, "listen on %s: %s", addr, strerror(errno));
		close(fd);
		return err;
	}
	bound->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
						      ((struct sockaddr_in6 *)&ss)->sin6_port);
	struct xd_listener *l = &d->listeners[d->nlisteners];
	l->fd = fd;
	l->ev = event_new(d->base, fd, EV_READ | EV_PERSIST, accept_cb, d);
	if (!l->ev || event_add(l->ev, NULL) < 0) {
		xd_event_free(l->ev);
		close(fd);
		return -ENOMEM;
	}
	d->nlisteners++;
	xd_log(XD_LOG_INFO, "accepting peer daemons on %s:%u", bound->addr, bound->port);
	return 0;
}

static bool wildcard(const char *addr)
{
	return strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0 || addr[0] == '\0';
}

/* Metadata endpoints: "local" first, then the advertised (or listened-on) TCP addresses. */
static int fill_endpoints(struct xd_daemon *d, const struct xp_endpoint *bound)
{
	strcpy(d->endpoints[0].transport, "local");
	d->nendpoints = 1;
	for (int i = 0; i < d->cfg.nadvertise && d->nendpoints < XP_MAX_ENDPOINTS; i++) {
		if (split_addr(d->cfg.advertise[i], &d->endpoints[d->nendpoints]) < 0) {
			xd_log(XD_LOG_ERR, "advertise address \"%s\" must be ADDR:PORT",
			       d->cfg.advertise[i]);
			return -EINVAL;
		}
		d->nendpoints++;
	}
	for (int i = 0; !d->cfg.nadvertise && i < d->nlisteners; i++)
		if (!wildcard(bound[i].addr) && d->nendpoints < XP_MAX_ENDPOINTS)
			d->endpoints[d->nendpoints++] = bound[i];
	if (d->nlisteners && d->nendpoints == 1)
		xd_log(XD_LOG_WARN, "listening on a wildcard address only: pass --advertise so "
				    "metadata tells peers where to connect");
	return 0;
}

int xd_peer_start(struct xd_daemon *d)
{
	struct xp_endpoint bound[XD_MAX_LISTEN];

	d->listeners = calloc(XD_MAX_LISTEN, sizeof(*d->listeners));
	if (!d->listeners)
		return -ENOMEM;
	for (int i = 0; i < d->cfg.nlisten; i++) {
		int rc = listen_on(d, d->cfg.listen[i], &bound[i]);
		if (rc < 0)
			return rc;
		d->listen_eps[d->nlisten_eps++] = bound[i];
	}
	return fill_endpoints(d, bound);
}

void xd_peer_fini(struct xd_daemon *d)
{
	struct xd_peer *p;
	struct xd_pconn *pc;

	while ((p = TAILQ_FIRST(&d->peers)))
		peer_fail(p, ESHUTDOWN, "the daemon is shutting down");
	while ((pc = TAILQ_FIRST(&d->pconns_hello)))
		pconn_kill(pc);
	for (int i = 0; i < d->nlisteners; i++) {
		xd_event_free(d->listeners[i].ev);
		close(d->listeners[i].fd);
	}
	free(d->listeners);
	d->listeners = NULL;
	d->nlisteners = 0;
	xd_defer_flush(d);
}

bool xd_peer_pending_output(struct xd_daemon *d)
{
	struct xd_peer *p;
	struct xd_pconn *pc;

	TAILQ_FOREACH(p, &d->peers, link)
		TAILQ_FOREACH(pc, &p->conns, link)
			if (!STAILQ_EMPTY(&pc->ctrlq))
				return true;
	return false;
}

/* ---- listing ---- */

static json_t *peer_to_json(const struct xd_peer *p, uint64_t now)
{
	static const char *const states[] = { "connecting", "connected", "failed" };
	uint64_t last_rx = p->created_us;
	const struct xd_pconn *pc;

	TAILQ_FOREACH(pc, &p->conns, link)
		if (pc->last_rx_us > last_rx)
			last_rx = pc->last_rx_us;
	if (p->rdma && xd_rdma_peer_last_rx((struct xd_peer *)p) > last_rx)
		last_rx = xd_rdma_peer_last_rx((struct xd_peer *)p);
	return json_pack("{s:s, s:I, s:s, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:I}", "node",
			 p->node_hex, "epoch", (json_int_t)p->epoch, "transport",
			 p->rdma ? "rdma" : "tcp", "endpoint", p->endpoint, "connections",
			 p->rdma ? xd_rdma_peer_conns((struct xd_peer *)p) : p->nconns, "state",
			 states[p->state], "bytes_sent", (json_int_t)p->bytes_sent,
			 "bytes_received", (json_int_t)p->bytes_received, "transfers",
			 (json_int_t)p->transfers, "age_ms",
			 (json_int_t)((now - p->created_us) / 1000), "idle_ms",
			 (json_int_t)((now - last_rx) / 1000));
}

int xd_handle_list_peers(struct xd_call *call)
{
	uint64_t now = xd_now_us();
	struct xd_peer *p;

	if (xd_unpack_params(call, "{}"))
		return -EINVAL;
	json_t *arr = json_array();
	TAILQ_FOREACH(p, &call->conn->d->peers, link) {
		if (json_array_append_new(arr, peer_to_json(p, now))) {
			json_decref(arr);
			return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		}
	}
	call->result = json_pack("{s:o}", "peers", arr);
	return 0;
}

void xd_peer_count_transfer(struct xd_peer *p, int delta)
{
	p->transfers = (unsigned)((int)p->transfers + delta);
}
