// SPDX-License-Identifier: MIT
/*
 * The TCP transport (PROTOCOL.md §10): listeners, on-demand connects, the HELLO exchange,
 * keepalive, and the per-connection framing state machines. Each connection reads DATA payloads
 * straight into the destination mapping and writes them straight from the source mapping; the
 * data of all transfers to a peer is cut into chunks that the set's connections take
 * round-robin, so a small transfer never waits behind a large one for more than one chunk.
 *
 * What a message means is told upward through d->xfer_events, and what happens to the set
 * (HELLO seen, a connection failed) through d->link_events. A connection is freed at the next
 * loop turn (defer.c), never inside its own callbacks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "transport.h"
#include "xp_peer.h"

#define XD_MAX_PCONNS 17 /* peer_connections (at most 16) and the control lane */
/*
 * Bytes read per wakeup before yielding. Small on purpose: what the reads cause (a WACK, a
 * DONE, a client's event, the next frames to send) leaves at the end of the loop turn, and a
 * budget of 16 MiB let a reader the peer kept busy hold all of it back while it read the next
 * batch's frames: 64 KiB window puts and gets with 16 in flight ran 15-25% faster at 128 KiB,
 * larger transfers and pairings the same (scripts/BENCHMARKS.md, "Read budget").
 */
#define XD_PEER_READ_BUDGET (128u << 10)
#define XD_PEER_WRITE_BUDGET (16u << 20) /* bytes written per wakeup before yielding */
#define XD_WSTAGE (8u << 10) /* a WPUT's prefix, tag and first payload bytes, read at once */
/*
 * While at least this much of a payload bound for a mapping is still due, the socket wakes the
 * loop only once this much has arrived (SO_RCVLOWAT): fewer, larger reads (see pconn_lowat()).
 */
#define XD_TCP_RCVLOWAT (256u << 10)
/*
 * Small reads (a header, a control frame, a small WPUT) are served from a per-connection buffer
 * filled by one read of up to this much: a batch of small frames then costs one or two system
 * calls, not one a frame. Their bytes are copied once more (a departure from DESIGN §6's "no
 * staging copies", for frames of a few KiB); a read of more than XD_TCP_RA_SMALL goes straight
 * to its destination, after what the buffer already holds.
 */
#define XD_TCP_RA (32u << 10)
#define XD_TCP_RA_SMALL (8u << 10)
#define XD_ACCEPT_PAUSE_MS 1000 /* listeners rest this long at the fd limit */
#define XD_FD_RESERVE_MAX 64	/* fds peers may never take (clients, regions) */
#define XD_LANE_POLL_MS 2	/* a lane worker waits this long for its socket... */
#define XD_LANE_HOLD_MS 20	/* ...while its job is younger than this */

struct xd_listener {
	int fd;
	struct event *ev;
};

/* A window frame queued by send_wframe: its header (and prefix, tag), then bytes of @x. */
struct xd_wframe {
	STAILQ_ENTRY(xd_wframe) link;
	struct xd_xfer *x; /**< a reference, or NULL: the header alone */
	uint64_t off;
	uint32_t len, hdrlen, sent; /**< sent counts header + payload bytes */
	uint8_t hdr[];
};

struct xd_pconn {
	TAILQ_ENTRY(xd_pconn) link; /**< in its set's conns, or d->tcp->hello */
	struct xd_daemon *d;
	uint32_t id;	      /**< in its set, from 1: a window lane (send_wframe) names it */
	struct xd_peer *peer; /**< NULL until an accepted connection says HELLO */
	int fd;
	struct event *rev, *wev;
	bool outgoing, connected, hello_rx, dead;
	bool authenticated; /**< keyed daemons: its AUTH checked out (PROTOCOL.md §10.2) */
	uint32_t key_id;    /**< the cluster key that AUTH proved */
	uint8_t nonce[XD_NONCE_LEN];   /**< keyed daemons: the challenge in our HELLO */
	struct xd_hello hello;	       /**< what the peer's HELLO said */
	struct xd_deferred free_later; /**< freed at the next loop turn once dead */
	char addr[80];
	char host[64]; /**< the address alone, for the per-address cap */
	uint64_t last_rx_us, last_tx_us, started_us;
	/* receive state: header, then payload */
	uint8_t rx_hdr[XP_PEER_HDR_LEN];
	uint32_t rx_hdr_got, rx_got;
	struct xp_peer_hdr rx;
	char *rx_ctrl;		 /**< control payload being read */
	struct xd_xfer *rx_xfer; /**< DATA target (a reference), NULL to drop */
	/*
	 * WPUT: its prefix and tag first (rx_wdata false), read into rx_wstage together with as
	 * much of a small payload as fits (one read for a small put), then the rest of its
	 * payload as DATA's
	 */
	uint8_t *rx_wstage; /**< XD_WSTAGE bytes, made at the first WPUT */
	uint32_t rx_wmeta_len;
	bool rx_wdata;
	uint8_t *ra;		 /**< XD_TCP_RA bytes read ahead, made at the first small read */
	uint32_t ra_off, ra_len; /**< ra[ra_off, ra_len) not consumed yet */
	bool rx_drained; /**< a read of this wakeup came back short: the socket had no more */
	int rx_lowat; /**< the socket's SO_RCVLOWAT: 1 (the kernel's default) or XD_TCP_RCVLOWAT */
	int rx_below; /**< bytes queued below that mark at the last keepalive check */
	/* send state: control frames first, then one DATA frame at a time */
	STAILQ_HEAD(, xd_frame) ctrlq;
	uint32_t ctrl_sent;	 /**< bytes of the head control frame already sent */
	uint32_t ctrlq_bytes;	 /**< queued control bytes, frame headers included */
	bool tx_wait;		 /**< the last flush stopped short: wait for epoll to wake it */
	bool ctrlq_over;	 /**< the peer let ctrlq pass XD_PEER_CTRLQ_MAX */
	struct xd_xfer *tx_xfer; /**< DATA frame being sent (a reference) */
	uint8_t tx_hdr[XP_PEER_HDR_LEN];
	uint64_t tx_off;
	uint32_t tx_len, tx_sent; /**< tx_sent counts header + payload bytes */
	/* window frames, strictly in the order queued (never round-robin: a lane's order) */
	STAILQ_HEAD(, xd_wframe) wq;
	unsigned wq_n;
	struct xd_wframe *tx_wf; /**< window frame being sent */
	/* a DATA payload with bytes in files moves on a worker (the file lane, below) */
	bool lane_rx, lane_tx;		 /**< a worker reads (writes) this socket now */
	bool wait_rx, wait_tx;		 /**< waiting for the lane (in lane_waiters) */
	TAILQ_ENTRY(xd_pconn) lane_link; /**< in d->tcp->lane_waiters */
};

/*
 * The file lane: file I/O blocks (a page not cached, dirty-page throttling, an O_DIRECT read
 * or write of the disk), so the payload of a DATA frame with bytes in files is moved between
 * the socket and the files by one of the local transport's workers, never on the loop
 * (DESIGN §7). One payload at a time per daemon, as when the loop did it: the shared splice
 * pipe then suffices, and no two workers ever touch one transfer (an O_DIRECT file's edge
 * blocks are read, modified and written whole). While a connection is in the lane the loop
 * neither reads (rx) nor writes (tx) its socket, nor closes it; others wait their turn.
 *
 * Two such lanes: files whose file system may never answer (FUSE, NFS: xd_xfer_may_hang())
 * have their own, with its own pipe and workers (local.c), so that a dead server holds only
 * the transfers of such files, never those of local disks. A transfer is of one lane for its
 * whole life (any of its files on such a file system puts it there).
 */
struct xd_file_lane {
	struct xd_pconn *pc; /**< whose payload a worker moves; NULL: the lane is free */
	struct xd_xfer *x;   /**< borrowed: pc's rx_xfer or tx_xfer holds the reference */
	bool send;
	uint64_t off; /**< in the transfer */
	uint32_t len;
	int sock;
	const int *pipefd; /**< its splice pipe (tcp_start()) */
	uint32_t moved;	   /**< by the worker: bytes moved */
	int err;	   /**< by the worker: 0, -EAGAIN (socket full or drained), or -errno */
	char scratch[64 * 1024]; /**< a failed file's bytes are read here and dropped */
};

/* The TCP part of a peer set (p->tstate). */
struct tcp_set {
	TAILQ_HEAD(, xd_pconn) conns;
	int nconns;
	uint32_t next_id;
};

/* The daemon's TCP state (d->tcp). */
struct xd_tcp {
	struct xd_listener listeners[XD_MAX_LISTEN];
	int nlisteners;
	TAILQ_HEAD(, xd_pconn) hello;  /**< accepted, HELLO not yet received, oldest first */
	struct event *handshake_timer; /**< closes connections past handshake_timeout_ms */
	struct event *resume_timer;    /**< re-enables the listeners after EMFILE/ENFILE */
	int reserve_fd;		       /**< /dev/null, given up to drain a listener at EMFILE */
	int fd_ceiling;		       /**< accepted fds from here up are closed at once */
	uint64_t refused_log_us;       /**< when a refusal was last logged */
	unsigned refused;	       /**< refusals not logged since */
	/* Where the payload of a DATA frame nobody wants is read to (and dropped). */
	char scratch[64 * 1024];
	/* What DATA for a file is spliced through (mem.c): the local file lane's and the loop's. */
	int splice_pipe[2];
	int remote_pipe[2]; /**< the same, for the lane of files that may hang */
	bool cc_unusable;   /**< cfg.tcp_congestion cannot be set here (tcp_congestion_check()) */
	bool idle_restart_checked;    /**< idle_restart_check() ran (at the first connection) */
	struct xd_file_lane lanes[2]; /**< [1]: files that may hang (xd_xfer_may_hang()) */
	/* connections waiting for a lane (either), oldest first */
	TAILQ_HEAD(, xd_pconn) lane_waiters;
};

const struct xd_transport_ops xd_transport_tcp_ops;

static void pconn_update_write(struct xd_pconn *pc);
static int pconn_send_hello(struct xd_pconn *pc);
static struct xd_pconn *pconn_connect(struct xd_peer *p, const struct xp_endpoint *ep, int *err);
static void pconn_write_cb(evutil_socket_t fd, short what, void *arg);
static int handle_hello(struct xd_pconn *pc, json_t *json);
static int handle_auth(struct xd_pconn *pc, json_t *json);
static bool lane_submit(struct xd_pconn *pc, bool send, struct xd_xfer *x, uint64_t off,
			uint32_t len);

static struct tcp_set *tcp_set(const struct xd_peer *p)
{
	return p->tstate;
}

/* The TCP part of @p, made on first use. NULL when out of memory. */
static struct tcp_set *tcp_set_get(struct xd_peer *p)
{
	struct tcp_set *set = p->tstate;

	if (!set && (set = calloc(1, sizeof(*set)))) {
		TAILQ_INIT(&set->conns);
		p->tstate = set;
	}
	return set;
}

/*
 * Whether @pc may carry anything but the handshake: HELLO seen and, on a daemon with the
 * cluster key, the peer's AUTH checked.
 */
static bool pconn_ready(const struct xd_pconn *pc)
{
	return pc->hello_rx && (pc->d->keys.n == 0 || pc->authenticated);
}

/* ---- connections ---- */

static void pconn_free(void *arg)
{
	struct xd_pconn *pc = arg;
	struct xd_frame *f;

	struct xd_wframe *wf;

	while ((f = STAILQ_FIRST(&pc->ctrlq))) {
		STAILQ_REMOVE_HEAD(&pc->ctrlq, link);
		free(f);
	}
	if (pc->tx_wf)
		STAILQ_INSERT_HEAD(&pc->wq, pc->tx_wf, link);
	while ((wf = STAILQ_FIRST(&pc->wq))) {
		STAILQ_REMOVE_HEAD(&pc->wq, link);
		xd_xfer_unref(wf->x);
		free(wf);
	}
	xd_xfer_unref(pc->rx_xfer);
	xd_xfer_unref(pc->tx_xfer);
	free(pc->rx_ctrl);
	free(pc->rx_wstage);
	free(pc->ra);
	xd_event_free(pc->rev);
	xd_event_free(pc->wev);
	if (pc->fd >= 0)
		close(pc->fd);
	free(pc);
}

/* Stops @pc at once (fd closed, no more callbacks); its memory goes at the next loop turn. */
static void pconn_kill(struct xd_pconn *pc)
{
	if (pc->dead)
		return;
	pc->dead = true;
	event_del(pc->rev);
	event_del(pc->wev);
	if (pc->wait_rx || pc->wait_tx)
		TAILQ_REMOVE(&pc->d->tcp->lane_waiters, pc, lane_link);
	pc->wait_rx = pc->wait_tx = false;
	if (pc->peer) {
		TAILQ_REMOVE(&tcp_set(pc->peer)->conns, pc, link);
		tcp_set(pc->peer)->nconns--;
	} else {
		TAILQ_REMOVE(&pc->d->tcp->hello, pc, link);
	}
	if (pc->lane_rx || pc->lane_tx)
		return; /* a worker uses the socket: lane_done() closes and frees it */
	close(pc->fd);
	pc->fd = -1;
	xd_defer(pc->d, &pc->free_later, pconn_free, pc);
}

/* What a connection may queue before the handshake is through: our HELLO, then our AUTH. */
static bool pconn_may_queue(const struct xd_pconn *pc, uint8_t type)
{
	return pconn_ready(pc) || type == XP_PEER_HELLO || (type == XP_PEER_AUTH && pc->hello_rx);
}

/*
 * Queues a control message on @pc (@json borrowed, may be NULL). Returns 0 or -errno.
 *
 * The queue is bounded: each PING, CLAIM or CANCEL of the peer's makes us queue a reply, and a
 * peer that sends them but does not read would grow it without end. Past the bound the message
 * is dropped and the whole set fails at the next loop turn (pconn_write_cb), which ends its
 * transfers with the cause; not here, as the caller may be in the middle of a transfer's state
 * change (claim.c) or of this connection's read loop.
 */
static int pconn_queue_frame(struct xd_pconn *pc, struct xd_frame *f);

static int pconn_queue(struct xd_pconn *pc, uint8_t type, uint8_t flags, uint64_t xfer,
		       const json_t *json)
{
	int err;

	if (!pconn_may_queue(pc, type))
		return -ENOTCONN;
	if (pc->ctrlq_over)
		return 0;
	struct xd_frame *f = xd_frame_new(type, flags, xfer, json, &err);
	return f ? pconn_queue_frame(pc, f) : err;
}

/* pconn_queue() of a binary payload (PROTOCOL.md §10.8). */
static int pconn_queue_bin(struct xd_pconn *pc, uint8_t type, uint8_t flags, uint64_t xfer,
			   const uint8_t *buf, uint32_t len)
{
	int err;

	if (!pconn_may_queue(pc, type))
		return -ENOTCONN;
	if (pc->ctrlq_over)
		return 0;
	struct xd_frame *f = xd_frame_bin(type, flags, xfer, buf, len, &err);
	return f ? pconn_queue_frame(pc, f) : err;
}

/* Queues frame @f (consumed) behind @pc's control messages, within XD_PEER_CTRLQ_MAX. */
static int pconn_queue_frame(struct xd_pconn *pc, struct xd_frame *f)
{
	if (pc->ctrlq_bytes + sizeof(*f) + f->len > XD_PEER_CTRLQ_MAX) {
		free(f);
		pc->ctrlq_over = true;
		event_active(pc->wev, EV_WRITE, 0);
		return 0;
	}
	pc->ctrlq_bytes += (uint32_t)(sizeof(*f) + f->len);
	STAILQ_INSERT_TAIL(&pc->ctrlq, f, link);
	pconn_update_write(pc);
	return 0;
}

/*
 * Whether @pc is its set's control lane (PROTOCOL.md §10.1): of a set with two or more
 * connections through the handshake, the first carries control frames only (tcp_send_ctrl()
 * puts them there) and no DATA. A CLAIM, CLAIM_OK or DONE then never waits behind the DATA
 * already queued in the sockets' buffers, megabytes and tens of milliseconds on a busy link.
 * Each side decides for what it sends; the receiver takes any frame on any connection.
 */
static bool pconn_control_lane(const struct xd_pconn *pc)
{
	const struct xd_pconn *q;

	if (!pc->peer || !pconn_ready(pc))
		return false;
	TAILQ_FOREACH(q, &tcp_set(pc->peer)->conns, link)
		if (pconn_ready(q))
			break;
	if (q != pc)
		return false;
	for (q = TAILQ_NEXT(pc, link); q; q = TAILQ_NEXT(q, link))
		if (pconn_ready(q))
			return true;
	return false;
}

/* Whether @pc may start DATA frames: through the handshake and not the control lane. */
static bool pconn_carries_data(const struct xd_pconn *pc)
{
	return pconn_ready(pc) && !pconn_control_lane(pc);
}

static bool pconn_wants_write(const struct xd_pconn *pc)
{
	if (pc->lane_tx || pc->wait_tx)
		return false; /* the lane's end (lane_done) looks again */
	if (!pc->connected)
		return true; /* the connect completes when the socket turns writable */
	if (!STAILQ_EMPTY(&pc->ctrlq) || pc->tx_xfer || pc->tx_wf || !STAILQ_EMPTY(&pc->wq))
		return true;
	return pconn_carries_data(pc) && !TAILQ_EMPTY(&pc->peer->sendq);
}

/*
 * Arms the write callback for what is queued. While the socket takes all we give it, the
 * callback is made active for later in this loop turn rather than added to epoll: the frames
 * queued meanwhile still leave in one sendmsg (pconn_write_ctrl()), without the two epoll_ctl
 * calls and the extra epoll_wait that arming and disarming cost per frame (a pairing queues
 * several). Only a full socket or a spent budget (tx_wait) waits for epoll to say writable.
 */
static void pconn_update_write(struct xd_pconn *pc)
{
	if (pc->dead)
		return;
	if (!pconn_wants_write(pc))
		event_del(pc->wev);
	else if (pc->tx_wait || !pc->connected)
		event_add(pc->wev, NULL);
	else
		event_active(pc->wev, EV_WRITE, 0);
}

/* Starts the next DATA frame from the round-robin queue. Returns false if there is none. */
static bool pconn_start_data(struct xd_pconn *pc)
{
	struct xd_xfer *x = xd_xfer_sendq_next(&pc->peer->sendq, 0);
	struct xp_peer_hdr h = { .type = XP_PEER_DATA };

	if (!x)
		return false;
	/* A file's frames are larger: each is a job of the file lane, with two wakeups. */
	uint32_t chunk = xd_xfer_mapped(x) ? XD_TCP_CHUNK : XD_TCP_FILE_CHUNK;
	h.length = xd_xfer_next_chunk(x, chunk, &h.offset, &h.xfer, &h.flags);
	if (!h.length)
		return false;
	xd_xfer_ref(x);
	xd_busypoll_note_bulk(pc->d, h.length);
	pc->tx_xfer = x;
	pc->tx_off = h.offset;
	pc->tx_len = h.length;
	pc->tx_sent = 0;
	xp_peer_hdr_pack(&h, pc->tx_hdr);
	return true;
}

/*
 * A DATA frame with bytes in files: the header (@hdr, NULL once sent) goes alone with
 * MSG_MORE, then the payload through the regions' kinds (sendfile for a file). Returns bytes
 * written, 0 when the socket is full, or -errno.
 */
static ssize_t pconn_write_unmapped(struct xd_pconn *pc, const struct iovec *hdr,
				    uint32_t payload_done)
{
	ssize_t w;

	if (hdr) {
		w = send(pc->fd, hdr->iov_base, hdr->iov_len, MSG_NOSIGNAL | MSG_MORE);
		return w >= 0 ? w : errno == EAGAIN ? 0 : -errno;
	}
	uint64_t off = pc->tx_off + payload_done, len = pc->tx_len - payload_done;
	/* Cached pages go at once, as mapped memory does; the disk is waited for on a worker. */
	if (!xd_xfer_send_cached(pc->tx_xfer, off, len) &&
	    lane_submit(pc, true, pc->tx_xfer, off, (uint32_t)len))
		return 0; /* on a worker: lane_done() counts what it sent */
	w = xd_xfer_send(pc->tx_xfer, off, len, pc->fd);
	return w == -EAGAIN ? 0 : w;
}

/* @w more bytes of the current DATA frame are out; at its end the transfer is told. */
static void pconn_data_sent(struct xd_pconn *pc, uint32_t w)
{
	pc->tx_sent += w;
	if (pc->tx_sent == XP_PEER_HDR_LEN + pc->tx_len) {
		struct xd_xfer *x = pc->tx_xfer;
		pc->tx_xfer = NULL;
		if (x->io_err)
			xd_xfer_io_failed(x); /* the zeros that stood in for it are out */
		else
			xd_xfer_data_sent(x, pc->tx_len);
		xd_xfer_unref(x);
	}
}

/* Writes what it can of the current DATA frame. Returns bytes written, or -errno. */
static ssize_t pconn_write_data(struct xd_pconn *pc)
{
	struct iovec iov[XD_XFER_IOV_MAX];
	int n = 0;
	uint32_t payload_done = pc->tx_sent > XP_PEER_HDR_LEN ? pc->tx_sent - XP_PEER_HDR_LEN : 0;

	if (pc->tx_sent < XP_PEER_HDR_LEN)
		iov[n++] =
			(struct iovec){ pc->tx_hdr + pc->tx_sent, XP_PEER_HDR_LEN - pc->tx_sent };
	ssize_t w;
	if (!xd_xfer_mapped(pc->tx_xfer)) {
		w = pconn_write_unmapped(pc, n ? &iov[0] : NULL, payload_done);
	} else {
		n += xd_xfer_iov(pc->tx_xfer, pc->tx_off + payload_done, pc->tx_len - payload_done,
				 iov + n, XD_XFER_IOV_MAX - n);
		w = writev(pc->fd, iov, n);
		if (w < 0)
			w = errno == EAGAIN ? 0 : -errno;
	}
	if (w <= 0)
		return w;
	pconn_data_sent(pc, (uint32_t)w);
	return w;
}

/* The iovecs of what is left of window frame @wf (at most @max). */
static int wframe_iov(const struct xd_wframe *wf, struct iovec *iov, int max)
{
	uint32_t done = wf->sent > wf->hdrlen ? wf->sent - wf->hdrlen : 0;
	int n = 0;

	if (wf->sent < wf->hdrlen)
		iov[n++] = (struct iovec){ (uint8_t *)wf->hdr + wf->sent, wf->hdrlen - wf->sent };
	if (wf->x && wf->len > done)
		n += xd_xfer_iov(wf->x, wf->off + done, wf->len - done, iov + n, max - n);
	return n;
}

/* Window frame @wf is all on the wire. */
static void wframe_sent(struct xd_wframe *wf)
{
	if (wf->x)
		xd_xfer_data_sent(wf->x, wf->len);
	xd_xfer_unref(wf->x);
	free(wf);
}

#define XD_WFRAME_COALESCE (256u << 10) /* bytes of window frames given to one writev */

/*
 * Writes what it can of the window frame under way and of those queued behind it, in one
 * writev: a batch of small gets and puts (or the owner's replies to them) costs one system
 * call, not one each. Returns bytes written, or -errno.
 */
static ssize_t pconn_write_wframe(struct xd_pconn *pc)
{
	struct iovec iov[XD_XFER_IOV_MAX];
	int n = wframe_iov(pc->tx_wf, iov, XD_XFER_IOV_MAX);
	uint64_t bytes = pc->tx_wf->hdrlen + pc->tx_wf->len - pc->tx_wf->sent;
	struct xd_wframe *next;

	/* Whole frames only behind the first, and none of a revoked transfer (dropped later). */
	STAILQ_FOREACH(next, &pc->wq, link) {
		if ((next->x && next->x->wdrop) || bytes >= XD_WFRAME_COALESCE ||
		    n + 1 + (next->x ? (int)next->x->nsegs : 0) > XD_XFER_IOV_MAX)
			break;
		n += wframe_iov(next, iov + n, XD_XFER_IOV_MAX - n);
		bytes += next->hdrlen + next->len;
	}
	ssize_t w = writev(pc->fd, iov, n);
	if (w < 0)
		return errno == EAGAIN ? 0 : -errno;
	for (size_t left = (size_t)w; left > 0;) {
		struct xd_wframe *wf = pc->tx_wf;
		uint32_t need = wf->hdrlen + wf->len - wf->sent;
		uint32_t take = left < need ? (uint32_t)left : need;
		wf->sent += take;
		left -= take;
		if (take < need)
			break;
		pc->tx_wf = NULL;
		wframe_sent(wf);
		if (left > 0 && (pc->tx_wf = STAILQ_FIRST(&pc->wq))) {
			STAILQ_REMOVE_HEAD(&pc->wq, link); /* (the one the writev took next) */
			pc->wq_n--;
		}
	}
	return w;
}

/* Takes the next window frame to send, dropping those of revoked transfers. */
static bool pconn_start_wframe(struct xd_pconn *pc)
{
	struct xd_wframe *wf;

	while ((wf = STAILQ_FIRST(&pc->wq))) {
		STAILQ_REMOVE_HEAD(&pc->wq, link);
		pc->wq_n--;
		if (!wf->x || !wf->x->wdrop) {
			pc->tx_wf = wf;
			return true;
		}
		xd_xfer_unref(wf->x);
		free(wf);
	}
	return false;
}

/*
 * Writes what it can of the queued control frames, up to XD_XFER_IOV_MAX of them in one sendmsg:
 * the CLAIMs (or CLAIM_OKs, DONEs) of a batch of pairings cost one system call, not one each.
 * Returns bytes written, or -errno.
 */
static ssize_t pconn_write_ctrl(struct xd_pconn *pc)
{
	struct iovec iov[XD_XFER_IOV_MAX];
	struct msghdr mh = { .msg_iov = iov };
	struct xd_frame *f = STAILQ_FIRST(&pc->ctrlq);

	iov[mh.msg_iovlen++] = (struct iovec){ f->data + pc->ctrl_sent, f->len - pc->ctrl_sent };
	for (f = STAILQ_NEXT(f, link); f && mh.msg_iovlen < XD_XFER_IOV_MAX;
	     f = STAILQ_NEXT(f, link))
		iov[mh.msg_iovlen++] = (struct iovec){ f->data, f->len };
	ssize_t w = sendmsg(pc->fd, &mh, MSG_NOSIGNAL);
	if (w < 0)
		return errno == EAGAIN ? 0 : -errno;
	for (size_t left = (size_t)w; left > 0;) {
		f = STAILQ_FIRST(&pc->ctrlq);
		size_t need = f->len - pc->ctrl_sent;
		if (left < need) {
			pc->ctrl_sent += (uint32_t)left;
			break;
		}
		left -= need;
		STAILQ_REMOVE_HEAD(&pc->ctrlq, link);
		pc->ctrlq_bytes -= (uint32_t)(sizeof(*f) + f->len);
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

	if (pc->lane_tx || pc->wait_tx)
		return 0; /* (an EV_WRITE activated before the lane took the socket) */
	pc->tx_wait = false;
	while (budget > 0) {
		ssize_t w;
		/* A control frame may not cut into a DATA frame already begun, nor the reverse. */
		if (pc->tx_xfer)
			w = pconn_write_data(pc);
		else if (pc->tx_wf)
			w = pconn_write_wframe(pc);
		else if (!STAILQ_EMPTY(&pc->ctrlq))
			w = pconn_write_ctrl(pc);
		else if (pconn_ready(pc) && pconn_start_wframe(pc))
			continue;
		else if (pconn_carries_data(pc) && pconn_start_data(pc))
			continue;
		else
			break;
		if (w < 0)
			return (int)w;
		if (w == 0) {
			pc->tx_wait = true; /* the socket is full */
			break;
		}
		pc->last_tx_us = xd_now_us();
		if (pc->peer)
			pc->peer->bytes_sent += (uint64_t)w;
		budget = (uint64_t)w < budget ? budget - (uint64_t)w : 0;
	}
	if (budget == 0)
		pc->tx_wait = true; /* the others' turn: epoll brings us back */
	pconn_update_write(pc);	    /* still armed if anything is left: the loop comes back */
	return 0;
}

/*
 * Writes @pc's queued control frames now, not at the end of this loop turn, unless a frame is
 * under way (never cut into) or the socket is full. A failure is left to the write callback
 * (pconn_update_write() keeps it due): the caller may be in the middle of a request.
 */
static void pconn_flush_ctrl(struct xd_pconn *pc)
{
	if (pc->dead || !pc->connected || pc->tx_wait || pc->ctrlq_over || pc->lane_tx ||
	    pc->wait_tx || pc->tx_xfer || pc->tx_wf)
		return;
	while (!STAILQ_EMPTY(&pc->ctrlq)) {
		ssize_t w = pconn_write_ctrl(pc);
		if (w <= 0) {
			pc->tx_wait = w == 0; /* the socket is full: epoll says when it is not */
			break;
		}
		pc->last_tx_us = xd_now_us();
		if (pc->peer)
			pc->peer->bytes_sent += (uint64_t)w;
	}
	pconn_update_write(pc);
}

/* A complete control frame arrived. Returns 0 or -errno (a protocol error). */
static int pconn_dispatch_ctrl(struct xd_pconn *pc)
{
	json_t *json = NULL;

	/* Binary pairing frames (§10.8): their lengths were checked with the header. */
	if (pc->rx.flags & XP_PEER_BINARY)
		return pconn_ready(pc) ?
			       pc->d->xfer_events->ctrl_bin(pc->peer, 0, &pc->rx,
							    (uint8_t *)pc->rx_ctrl, pc->rx.length) :
			       -EPROTO;
	/* Window requests and acks carry binary payloads (PROTOCOL.md §10.7). */
	if (pc->rx.type == XP_PEER_WGET || pc->rx.type == XP_PEER_WACK)
		return pconn_ready(pc) ?
			       pc->d->xfer_events->wframe(pc->peer, pc->id, &pc->rx,
							  (uint8_t *)pc->rx_ctrl, pc->rx.length) :
			       -EPROTO;
	if (pc->rx.length) {
		json = xp_json_loadb(pc->rx_ctrl, pc->rx.length, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(json)) {
			json_decref(json);
			return -EPROTO;
		}
	}
	int rc;
	if (pc->rx.type == XP_PEER_HELLO)
		rc = handle_hello(pc, json);
	else if (pc->rx.type == XP_PEER_AUTH)
		rc = handle_auth(pc, json);
	else if (!pconn_ready(pc))
		rc = -EPROTO; /* HELLO (and AUTH) must come first */
	else if (pc->rx.type == XP_PEER_PING)
		rc = pconn_queue(pc, XP_PEER_PONG, 0, 0, NULL);
	else if (pc->rx.type == XP_PEER_PONG)
		rc = 0;
	else
		rc = pc->d->xfer_events->ctrl(pc->peer, 0, &pc->rx, json);
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
	xd_busypoll_note_bulk(pc->d, pc->rx.length);
	if (pc->rx.type == XP_PEER_DATA) {
		if (!pconn_ready(pc))
			return -EPROTO;
		int err = 0;
		pc->rx_xfer = pc->d->xfer_events->data_target(pc->peer, &pc->rx, &err);
		return err;
	}
	if (pc->rx.type == XP_PEER_WPUT) {
		pc->rx_wmeta_len = XP_WIN_PREFIX_LEN;
		pc->rx_wdata = false;
		if (!pc->rx_wstage && !(pc->rx_wstage = malloc(XD_WSTAGE)))
			return -ENOMEM;
		return pconn_ready(pc) ? 0 : -EPROTO;
	}
	pc->rx_ctrl = malloc(pc->rx.length + 1);
	return pc->rx_ctrl ? 0 : -ENOMEM;
}

/*
 * A pipe DATA for a file is spliced through (@fds), made at start: its two fds are there from
 * the first moment, so the daemon's fd count does not change with the first file transfer.
 * Returns 0 or -errno.
 */
static int splice_pipe_open(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		fds[0] = fds[1] = -1;
		return -errno;
	}
	/* A frame's megabyte in one splice where the limit allows (pipe-max-size). */
	fcntl(fds[1], F_SETPIPE_SZ, (int)XD_TCP_CHUNK);
	return 0;
}

/* Copies what @pc read ahead into @iov (@n entries), in order, as far as it goes. Bytes. */
static size_t ra_take(struct xd_pconn *pc, const struct iovec *iov, int n)
{
	size_t done = 0;

	for (int i = 0; i < n && pc->ra_off < pc->ra_len; i++) {
		size_t have = pc->ra_len - pc->ra_off;
		size_t k = iov[i].iov_len < have ? iov[i].iov_len : have;
		memcpy(iov[i].iov_base, pc->ra + pc->ra_off, k);
		pc->ra_off += (uint32_t)k;
		done += k;
	}
	if (pc->ra_off == pc->ra_len)
		pc->ra_off = pc->ra_len = 0;
	return done;
}

/*
 * Whether a read of @want bytes may fill the read-ahead buffer first: a small one, on a
 * connection whose peer is known (its HELLO came) and has no transfer that may receive DATA
 * into a file region here (p->file_receivers). A DATA frame for a file is read from the socket
 * by the file lane's worker, so none of its bytes may sit in the buffer; and an honest peer
 * sends one only after this daemon made the transfer (claim.c counts it then, before the CLAIM
 * or CLAIM_OK that tells the peer), so what was read ahead before cannot be its DATA, and none
 * is read ahead after. pconn_read_unmapped() refuses a DATA frame that says otherwise. DATA
 * of a set may come on any of its connections (chunks go round-robin): the count is the set's.
 */
static bool ra_allowed(struct xd_pconn *pc, size_t want)
{
	return want <= XD_TCP_RA_SMALL && pc->peer && pc->peer->file_receivers == 0 &&
	       (pc->ra || (pc->ra = malloc(XD_TCP_RA)));
}

/* Counts a read(2)/readv(2) of @pc's socket on its peer (list.peers), once the peer is known. */
static void pconn_count_read(struct xd_pconn *pc, bool fill)
{
	if (!pc->peer)
		return;
	pc->peer->socket_reads++;
	pc->peer->read_ahead_fills += fill;
}

/*
 * readv(2) of @pc's socket through its read-ahead buffer: what was read ahead comes first;
 * else a small read fills the buffer with one read(2) and is served from it; else the bytes go
 * straight into @iov. Returns as readv(2) does.
 */
static ssize_t pconn_readv(struct xd_pconn *pc, const struct iovec *iov, int n)
{
	size_t want = 0;
	ssize_t r;

	if (pc->ra_len > pc->ra_off)
		return (ssize_t)ra_take(pc, iov, n);
	if (pc->rx_drained) {
		errno = EAGAIN; /* (the read that would say so costs a system call a wakeup) */
		return -1;
	}
	for (int i = 0; i < n; i++)
		want += iov[i].iov_len;
	bool fill = ra_allowed(pc, want);
	pconn_count_read(pc, fill);
	if (!fill) {
		r = readv(pc->fd, iov, n);
		pc->rx_drained = r >= 0 && (size_t)r < want;
		return r;
	}
	r = read(pc->fd, pc->ra, XD_TCP_RA);
	pc->rx_drained = r >= 0 && r < (ssize_t)XD_TCP_RA;
	if (r <= 0)
		return r;
	pc->ra_off = 0;
	pc->ra_len = (uint32_t)r;
	return (ssize_t)ra_take(pc, iov, n);
}

/*
 * DATA payload for a transfer with bytes in files, through the regions' kinds (splice into a
 * file). Returns as read(2) does: bytes, 0 at the socket's end, -1 with errno.
 */
static ssize_t pconn_read_unmapped(struct xd_pconn *pc, uint32_t left)
{
	struct xd_tcp *t = pc->d->tcp;

	if (pc->ra_len > pc->ra_off) {
		/* (its bytes were sent before the transfer was made, or before its peer's HELLO
		 * was read: see ra_allowed()) */
		errno = EPROTO;
		return -1;
	}

	if (lane_submit(pc, false, pc->rx_xfer, pc->rx.offset + pc->rx_got, left)) {
		errno = EAGAIN; /* on a worker: lane_done() counts what it received */
		return -1;
	}
	ssize_t r = xd_xfer_recv(pc->rx_xfer, pc->rx.offset + pc->rx_got, left, pc->fd,
				 t->splice_pipe, t->scratch, sizeof(t->scratch));

	if (r >= 0)
		return r;
	if (r == -ECONNRESET)
		return 0;
	errno = (int)-r;
	return -1;
}

/*
 * Adds the next frame's header behind @n iovecs that take all @left bytes still due of the
 * frame being read (else nothing): one readv then takes the rest of this frame and the next
 * header, so a run of small frames (a batch of window gets and puts, or their replies) costs
 * one system call a frame, not two. No byte past that header is read before the header says
 * where its payload goes. Returns the new count.
 */
static int pconn_iov_next_hdr(struct xd_pconn *pc, struct iovec *iov, int n, uint32_t left)
{
	size_t covered = 0;

	for (int i = 0; i < n; i++)
		covered += iov[i].iov_len;
	if (covered == left && n < XD_XFER_IOV_MAX)
		iov[n++] = (struct iovec){ pc->rx_hdr, XP_PEER_HDR_LEN };
	return n;
}

/* Reads DATA payload into the transfer's mapping, or drops it. Returns bytes or -errno. */
static ssize_t pconn_read_data(struct xd_pconn *pc)
{
	char *scratch = pc->d->tcp->scratch;
	size_t cap = sizeof(pc->d->tcp->scratch);
	uint32_t left = pc->rx.length - pc->rx_got;
	struct iovec iov[XD_XFER_IOV_MAX];
	int n;

	if (pc->rx_xfer && !xd_xfer_live(pc->rx_xfer)) {
		/* Its operation ended: no byte may land in that buffer any more. */
		xd_xfer_unref(pc->rx_xfer);
		pc->rx_xfer = NULL;
	}
	if (!pc->rx_xfer) {
		iov[0] = (struct iovec){ scratch, left < cap ? left : cap };
		n = pconn_iov_next_hdr(pc, iov, 1, left);
	} else if (!xd_xfer_mapped(pc->rx_xfer)) {
		return pconn_read_unmapped(pc, left); /* (file I/O: the next header read alone) */
	} else {
		n = xd_xfer_iov(pc->rx_xfer, pc->rx.offset + pc->rx_got, left, iov,
				XD_XFER_IOV_MAX);
		n = pconn_iov_next_hdr(pc, iov, n, left);
	}
	return pconn_readv(pc, iov, n);
}

static int pconn_finish_frame(struct xd_pconn *pc)
{
	int rc = 0;

	if (pc->rx.type == XP_PEER_DATA || pc->rx.type == XP_PEER_WPUT) {
		struct xd_xfer *x = pc->rx_xfer;
		pc->rx_xfer = NULL;
		if (x && x->io_err)
			xd_xfer_io_failed(x); /* the rest of the frame was dropped */
		else if (x)
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

/* Copies the @n payload bytes read with a WPUT's prefix into its landing (always mapped). */
static void pconn_wstage_land(struct xd_pconn *pc, uint32_t n)
{
	struct iovec iov[XD_XFER_IOV_MAX];
	const uint8_t *from = pc->rx_wstage + pc->rx_wmeta_len;

	if (!pc->rx_xfer || !xd_xfer_live(pc->rx_xfer) || !xd_xfer_mapped(pc->rx_xfer))
		return; /* (dropped: as pconn_read_data() drops what it reads) */
	int k = xd_xfer_iov(pc->rx_xfer, 0, n, iov, XD_XFER_IOV_MAX);
	for (int i = 0; i < k; from += iov[i].iov_len, i++)
		memcpy(iov[i].iov_base, from, iov[i].iov_len);
}

/*
 * @r more bytes of a WPUT arrived in rx_wstage. Once its prefix and tag are all here, window.c
 * says where the payload lands (or that it is dropped); the payload bytes read with them are
 * copied there, and the rest is read as a DATA frame's, into a transfer that is exactly its
 * range. Returns 0 or -errno.
 */
static int pconn_wmeta_got(struct xd_pconn *pc, uint32_t r)
{
	struct xp_win_prefix wp;
	int err = 0;

	pc->rx_got += r;
	if (pc->rx_got >= XP_WIN_PREFIX_LEN && pc->rx_wmeta_len == XP_WIN_PREFIX_LEN) {
		if (xp_win_prefix_unpack(pc->rx_wstage, &wp) < 0 || wp.length == 0 ||
		    (uint64_t)xp_win_meta_len(&wp) + wp.length != pc->rx.length)
			return -EPROTO;
		pc->rx_wmeta_len = xp_win_meta_len(&wp);
	}
	if (pc->rx_got < pc->rx_wmeta_len)
		return 0;
	pc->rx_xfer = pc->d->xfer_events->wput_target(pc->peer, pc->id, &pc->rx, pc->rx_wstage,
						      pc->rx_wmeta_len, &err);
	if (err)
		return err;
	uint32_t staged = pc->rx_got - pc->rx_wmeta_len;
	pconn_wstage_land(pc, staged);
	pc->rx_wdata = true;
	pc->rx.length -= pc->rx_wmeta_len; /* the payload alone, at offset 0 of its landing */
	pc->rx.offset = 0;
	pc->rx_got = staged;
	return pc->rx_got == pc->rx.length ? pconn_finish_frame(pc) : 0;
}

/* @n more bytes of a frame's header arrived: once whole, its payload is prepared for. */
static int pconn_hdr_got(struct xd_pconn *pc, uint32_t n)
{
	if ((pc->rx_hdr_got += n) < XP_PEER_HDR_LEN)
		return 0;
	int rc = pconn_begin_payload(pc);
	if (rc == 0 && pc->rx.length == 0)
		rc = pconn_finish_frame(pc);
	return rc;
}

/*
 * @r bytes were read for the payload under way, the last of them (past its @left) the start of
 * the next header (pconn_iov_next_hdr()). Returns 0 or -errno.
 */
static int pconn_payload_got(struct xd_pconn *pc, uint32_t r, uint32_t left)
{
	uint32_t mine = r < left ? r : left;
	int rc;

	if ((pc->rx_got += mine) < pc->rx.length)
		return 0;
	if ((rc = pconn_finish_frame(pc)) || r == mine || pc->dead)
		return rc;
	return pconn_hdr_got(pc, r - mine);
}

/*
 * Reads a WPUT's prefix and tag (with a small payload, and then the next header) into
 * rx_wstage. Returns as readv(2) does; a protocol error in *@rc.
 */
static ssize_t pconn_read_wstage(struct xd_pconn *pc, int *rc)
{
	uint32_t stage = pc->rx.length < XD_WSTAGE ? pc->rx.length : XD_WSTAGE;
	struct iovec iov[2] = { { pc->rx_wstage + pc->rx_got, stage - pc->rx_got } };
	ssize_t r =
		pconn_readv(pc, iov, pconn_iov_next_hdr(pc, iov, 1, pc->rx.length - pc->rx_got));

	if (r > 0) {
		uint32_t mine = (uint32_t)r < stage - pc->rx_got ? (uint32_t)r : stage - pc->rx_got;
		*rc = pconn_wmeta_got(pc, mine);
		/* (a frame read whole has ended: the bytes past it are the next header's) */
		if (*rc == 0 && (uint32_t)r > mine && !pc->dead)
			*rc = pconn_hdr_got(pc, (uint32_t)r - mine);
	}
	return r;
}

/* One read step. Returns bytes consumed (> 0), 0 when the socket is drained, or -errno. */
static ssize_t pconn_read_step(struct xd_pconn *pc)
{
	ssize_t r;

	if (pc->rx_hdr_got < XP_PEER_HDR_LEN) {
		struct iovec hdr = { pc->rx_hdr + pc->rx_hdr_got,
				     XP_PEER_HDR_LEN - pc->rx_hdr_got };
		r = pconn_readv(pc, &hdr, 1);
		if (r > 0) {
			int rc = pconn_hdr_got(pc, (uint32_t)r);
			if (rc)
				return rc;
		}
	} else if (pc->rx.type == XP_PEER_WPUT && !pc->rx_wdata) {
		int rc = 0;
		r = pconn_read_wstage(pc, &rc);
		if (rc)
			return rc;
	} else {
		uint32_t left = pc->rx.length - pc->rx_got;
		if (pc->rx.type == XP_PEER_DATA || pc->rx.type == XP_PEER_WPUT) {
			r = pconn_read_data(pc);
		} else {
			struct iovec iov[2] = { { pc->rx_ctrl + pc->rx_got, left } };
			r = pconn_readv(pc, iov, pconn_iov_next_hdr(pc, iov, 1, left));
		}
		if (r > 0) {
			int rc = pconn_payload_got(pc, (uint32_t)r, left);
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

/* PROTOCOL.md §10.4: whatever broke a TCP connection, the transfers on it end ECONNRESET. */
static void pconn_error(struct xd_pconn *pc, int err)
{
	if (!pc->peer) {
		xd_log(XD_LOG_INFO, "peer connection from %s dropped before HELLO: %s", pc->addr,
		       strerror(-err));
		pconn_kill(pc);
	} else if (err == -EPROTO) {
		xd_link_fail(pc->peer, ECONNRESET,
			     "protocol error on a connection (message type %s)",
			     xp_peer_type_name(pc->rx.type));
	} else if (err == -ECONNRESET && !pc->hello_rx && !pc->d->keys.n) {
		/* A keyed daemon cuts a connection that offers no authentication at its HELLO. */
		xd_link_fail(pc->peer, ECONNRESET,
			     "the daemon at %s closed the connection at the handshake (does it "
			     "require a cluster key, which this daemon has none of?)",
			     pc->addr);
	} else if (err == -ECONNRESET) {
		xd_link_fail(pc->peer, ECONNRESET, "peer daemon closed the connection");
	} else if (err == -EACCES) {
		xd_link_fail(pc->peer, EACCES,
			     "the daemon at %s did not authenticate with the cluster key",
			     pc->addr);
	} else {
		xd_link_fail(pc->peer, ECONNRESET, "connection to %s failed: %s", pc->addr,
			     strerror(-err));
	}
}

/* ---- the file lane ---- */

/*
 * Whether the lane's socket turned ready again within XD_LANE_POLL_MS, and the lane has time
 * left: a worker that waits a moment for the peer finishes a frame in one job, where handing
 * back at every full (or empty) socket costs a wakeup of the loop and one of a worker each.
 */
static bool lane_ready_again(const struct xd_file_lane *l, uint64_t deadline_us)
{
	struct pollfd pfd = { .fd = l->sock, .events = l->send ? POLLOUT : POLLIN };

	return xd_now_us() < deadline_us && poll(&pfd, 1, XD_LANE_POLL_MS) == 1;
}

/*
 * On a worker: moves the lane's payload bytes until done, failed, or the socket stays full (or
 * empty) for XD_LANE_POLL_MS; at most about XD_LANE_HOLD_MS in all, so that a peer that
 * trickles its bytes cannot hold the lane.
 */
static void lane_work(void *arg)
{
	struct xd_file_lane *l = arg;
	uint64_t deadline = xd_now_us() + XD_LANE_HOLD_MS * 1000;

	l->moved = 0;
	l->err = 0;
	while (l->moved < l->len && !l->err) {
		uint64_t off = l->off + l->moved, left = l->len - l->moved;
		ssize_t r = l->send ? xd_xfer_send(l->x, off, left, l->sock) :
				      xd_xfer_recv(l->x, off, left, l->sock, l->pipefd, l->scratch,
						   sizeof(l->scratch));
		if (r > 0)
			l->moved += (uint32_t)r;
		else if (r == 0 || r != -EAGAIN || !lane_ready_again(l, deadline))
			l->err = r < 0 ? (int)r : -EAGAIN;
	}
}

/* Lets every connection waiting for the lane try again (the first to run takes it). */
static void lane_wake(struct xd_tcp *t)
{
	struct xd_pconn *pc;

	/*
	 * Activated (not merely armed) in the order they came: their callbacks run in that order
	 * at this loop turn, so the oldest takes the lane and the others queue again behind it, in
	 * the same order; armed, they would race in the order epoll reports them.
	 */
	while ((pc = TAILQ_FIRST(&t->lane_waiters))) {
		TAILQ_REMOVE(&t->lane_waiters, pc, lane_link);
		if (pc->wait_rx) {
			pc->wait_rx = false;
			event_add(pc->rev, NULL);
			event_active(pc->rev, EV_READ, 0);
		}
		if (pc->wait_tx) {
			pc->wait_tx = false;
			pconn_update_write(pc);
			event_active(pc->wev, EV_WRITE, 0);
		}
	}
}

/* The lane's receive ended: its bytes count, the frame may be complete. */
static void lane_received(struct xd_pconn *pc, const struct xd_file_lane *l)
{
	int rc = l->err == -EAGAIN ? 0 : l->err;

	if (l->moved) {
		pc->rx_got += l->moved;
		pc->last_rx_us = xd_now_us();
		pc->peer->bytes_received += l->moved;
	}
	if (rc == 0 && pc->rx_got == pc->rx.length)
		rc = pconn_finish_frame(pc);
	if (rc)
		pconn_error(pc, rc);
	else if (!pc->dead)		  /* (the frame's end may have failed the set) */
		event_add(pc->rev, NULL); /* the rest of the frame, and what follows it */
}

/* The lane's send ended: its bytes count, the frame may be complete. */
static void lane_sent(struct xd_pconn *pc, const struct xd_file_lane *l)
{
	if (l->moved) {
		pc->last_tx_us = xd_now_us();
		pc->peer->bytes_sent += l->moved;
		pconn_data_sent(pc, l->moved);
	}
	if (l->err && l->err != -EAGAIN) {
		pconn_error(pc, l->err);
		return;
	}
	pc->tx_wait = l->err == -EAGAIN; /* the socket stayed full: epoll says when it is not */
	pconn_update_write(pc);		 /* the rest of the frame, and what is queued behind it */
}

/* On the loop thread, once the worker is through with the lane's connection. */
static void lane_done(void *arg)
{
	struct xd_file_lane *l = arg;
	struct xd_pconn *pc = l->pc;
	struct xd_tcp *t = pc->d->tcp;
	struct xd_xfer *x = l->x; /* (pc->rx_xfer or tx_xfer holds it until pconn_free) */

	l->pc = NULL;
	l->x = NULL;
	pc->lane_rx = pc->lane_tx = false;
	if (!l->send)
		xd_xfer_landed(pc->d, x); /* first: an end that waited for these bytes applies */
	if (pc->dead)
		xd_defer(pc->d, &pc->free_later, pconn_free, pc); /* pconn_kill() left it */
	else if (l->send)
		lane_sent(pc, l);
	else
		lane_received(pc, l);
	lane_wake(t);
}

/*
 * Hands [@off, +@len) of @x (@send: to @pc's socket, else from it) to its lane: at once if it
 * is free, else @pc waits its turn (no reads or writes of that direction meanwhile). Returns
 * false if there are no workers (the caller moves the bytes itself, on the loop).
 */
static bool lane_submit(struct xd_pconn *pc, bool send, struct xd_xfer *x, uint64_t off,
			uint32_t len)
{
	struct xd_tcp *t = pc->d->tcp;
	bool may_hang = xd_xfer_may_hang(x);
	struct xd_file_lane *l = &t->lanes[may_hang];

	if (l->pc) {
		if (!pc->wait_rx && !pc->wait_tx)
			TAILQ_INSERT_TAIL(&t->lane_waiters, pc, lane_link);
		*(send ? &pc->wait_tx : &pc->wait_rx) = true;
		if (!send)
			event_del(pc->rev);
		return true;
	}
	l->pc = pc;
	l->x = x;
	l->send = send;
	l->off = off;
	l->len = len;
	l->sock = pc->fd;
	*(send ? &pc->lane_tx : &pc->lane_rx) = true;
	if (!send)
		event_del(pc->rev);
	if (xd_work_submit(pc->d, lane_work, lane_done, l, may_hang) == 0) {
		if (!send)
			xd_xfer_landing(x); /* (its op's end waits for lane_done()) */
		return true;
	}
	l->pc = NULL;
	pc->lane_rx = pc->lane_tx = false;
	if (!send)
		event_add(pc->rev, NULL);
	return false;
}

/*
 * Sets the socket's SO_RCVLOWAT for what @pc waits for next. Inside the payload of a DATA frame
 * (or a WPUT's) bound for a mapping, with at least XD_TCP_RCVLOWAT of it still due, nothing but
 * those bytes can come first on this connection, so waking the loop only once that much is
 * queued loses nothing: a 1 MiB frame then costs ~4 wakeups and reads, not the 5-9 of waking at
 * every segment (bench-win reads/op), each a system call, an epoll round and the socket's lock.
 * Anything else (a header, a control frame, the end of a payload) wakes at one byte, as before.
 * The kernel wakes early anyway under memory pressure or at the peer's FIN, and setting the
 * mark signals readiness that already holds (tcp_set_rcvlowat()). Bytes waiting below the mark
 * count as heard for keepalive (pconn_unread()).
 */
static void pconn_lowat(struct xd_pconn *pc)
{
	bool bulk =
		pc->rx_hdr_got == XP_PEER_HDR_LEN &&
		(pc->rx.type == XP_PEER_DATA || (pc->rx.type == XP_PEER_WPUT && pc->rx_wdata)) &&
		pc->rx.length - pc->rx_got >= XD_TCP_RCVLOWAT && pc->rx_xfer &&
		xd_xfer_mapped(pc->rx_xfer);
	int want = bulk ? (int)XD_TCP_RCVLOWAT : 1;

	if (want != pc->rx_lowat &&
	    setsockopt(pc->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
		pc->rx_lowat = want;
}

/*
 * Reads and handles frames until the socket is drained, it fails, or the budget is spent.
 * Drained is also a read that came back short (rx_drained): the socket had nothing more at that
 * moment, and a read to hear EAGAIN would cost one more system call at each wakeup. What
 * arrives later makes the socket readable again (the event is level-triggered).
 */
static void pconn_read_some(struct xd_pconn *pc)
{
	uint64_t budget = XD_PEER_READ_BUDGET;

	if (pc->lane_rx || pc->wait_rx)
		return; /* (an EV_READ activated before the lane took the socket) */
	pc->rx_drained = false;
	pc->rx_below = 0; /* (what was queued is read now) */

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
	/* Bytes read ahead do not make the socket readable: come back for them this turn. */
	if (!pc->dead && pc->ra_len > pc->ra_off && !pc->lane_rx && !pc->wait_rx)
		event_active(pc->rev, EV_READ, 0);
	if (!pc->dead)
		pconn_lowat(pc); /* (a file lane's worker polls the socket too: it needs 1) */
}

static void pconn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_pconn *pc = arg;
	uint64_t t0 = xd_now_us();

	pconn_read_some(pc);
	xd_loop_note(pc->d, t0, "a read of the peer connection to", pc->addr);
}

static struct xd_pconn *pconn_new(struct xd_daemon *d, int fd, bool outgoing)
{
	struct xd_pconn *pc = calloc(1, sizeof(*pc));

	if (!pc)
		return NULL;
	pc->d = d;
	pc->fd = fd;
	pc->outgoing = outgoing;
	pc->rx_lowat = 1;
	pc->started_us = pc->last_rx_us = pc->last_tx_us = xd_now_us();
	STAILQ_INIT(&pc->ctrlq);
	STAILQ_INIT(&pc->wq);
	pc->rev = event_new(d->base, fd, EV_READ | EV_PERSIST, pconn_read_cb, pc);
	pc->wev = event_new(d->base, fd, EV_WRITE | EV_PERSIST, pconn_write_cb, pc);
	if (!pc->rev || !pc->wev) {
		pc->fd = -1; /* the caller still owns fd */
		pconn_free(pc);
		return NULL;
	}
	return pc;
}

/* Reads the integer sysctl at @path (a file under /proc/sys). Returns it, or -1 if unreadable. */
static int sysctl_int(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC), v = -1;
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (n > 0) {
		buf[n] = '\0';
		v = atoi(buf);
	}
	if (fd >= 0)
		close(fd);
	return v;
}

/*
 * Warns once, at the first peer connection (@fd, its options set), where the kernel will shrink
 * the connections' congestion window whenever they pause: with net.ipv4.tcp_slow_start_after_idle
 * at 1, its default, a connection that sent nothing for one retransmission timeout (200 ms or
 * more) starts its next transfer from slow start again, and one whose sends do not fill the
 * window has it cut every timeout. Sporadic transfers between two nodes, the usual traffic of
 * KV-cache hand-offs, then never run at the link's speed (reads after 3 s idle took 2-7x as long
 * over the test rig; scripts/BENCHMARKS.md, "TCP after an idle pause"). BBR is exempt (the kernel
 * leaves the window of a congestion control that paces itself alone). The sysctl is the host's,
 * so xferd only says it.
 */
static void idle_restart_check(struct xd_daemon *d, int fd)
{
	char cc[16] = "";
	socklen_t len = sizeof(cc) - 1;

	if (d->tcp->idle_restart_checked)
		return;
	d->tcp->idle_restart_checked = true;
	if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &len) < 0 || !strncmp(cc, "bbr", 3))
		return;
	if (sysctl_int("/proc/sys/net/ipv4/tcp_slow_start_after_idle") == 1)
		xd_log(XD_LOG_WARN,
		       "net.ipv4.tcp_slow_start_after_idle is 1: peer connections (%s) restart "
		       "from slow start after 200 ms idle, so sporadic transfers run well below "
		       "the link's speed; set it to 0: `sysctl -w net.ipv4.tcp_slow_start_after_idle=0` "
		       "now, and at every boot lib/sysctl.d/60-xferd.conf (make install) does",
		       cc);
}

static void set_tcp_options(struct xd_daemon *d, int fd)
{
	int one = 1;
	unsigned timeout = (unsigned)d->cfg.keepalive_timeout_ms;

	/* Control messages are small and latency-bound; DATA frames are large anyway. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Bounds how long unacknowledged data may sit on a cut link before the kernel gives up. */
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout));
	if (d->cfg.tcp_congestion[0] && !d->tcp->cc_unusable)
		setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, d->cfg.tcp_congestion,
			   (socklen_t)strlen(d->cfg.tcp_congestion));
	if (d->cfg.tcp_notsent_lowat)
		setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &d->cfg.tcp_notsent_lowat,
			   sizeof(d->cfg.tcp_notsent_lowat));
	idle_restart_check(d, fd);
}

/*
 * Tries the congestion control the config names on a socket of its own: one this host has not
 * built, or (without CAP_NET_ADMIN) not in net.ipv4.tcp_allowed_congestion_control, is warned
 * of once and the connections keep the host's default (cc_unusable), rather than each failing
 * to set it silently. The config itself stays as written (--check-config, SIGHUP compare it).
 */
static void tcp_congestion_check(struct xd_daemon *d)
{
	const char *cc = d->cfg.tcp_congestion;
	int fd = cc[0] ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;

	if (fd < 0)
		return; /* (no socket now: each connection tries, as it would anyway) */
	if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) < 0) {
		xd_log(XD_LOG_WARN,
		       "tcp_congestion \"%s\" cannot be set here (%s): peer connections use the "
		       "host's default (net.ipv4.tcp_congestion_control; without CAP_NET_ADMIN only "
		       "those in net.ipv4.tcp_allowed_congestion_control)",
		       cc, strerror(errno));
		d->tcp->cc_unusable = true;
	}
	close(fd);
}

static int pconn_send_hello(struct xd_pconn *pc)
{
	bool keyed = pc->d->keys.n > 0;

	if (keyed && xd_random(pc->nonce, sizeof(pc->nonce)) < 0)
		return -EIO;
	json_t *hello = xd_hello_json(pc->d, keyed ? pc->nonce : NULL);
	int rc = hello ? pconn_queue(pc, XP_PEER_HELLO, 0, 0, hello) : -ENOMEM;

	json_decref(hello);
	return rc;
}

/* Keyed daemons: answers the peer's HELLO with our proof (PROTOCOL.md §10.2). */
static int pconn_send_auth(struct xd_pconn *pc)
{
	uint8_t mac[XD_MAC_LEN];
	char hex[2 * XD_MAC_LEN + 1];

	if (xd_auth_mac_out(pc->d, pc->outgoing, &pc->hello, pc->nonce, mac) < 0)
		return -EIO;
	xp_hex_encode(mac, sizeof(mac), hex);
	json_t *auth = json_pack("{s:s}", "mac", hex);
	int rc = auth ? pconn_queue(pc, XP_PEER_AUTH, 0, 0, auth) : -ENOMEM;

	json_decref(auth);
	return rc;
}

/* Files an accepted connection under the peer its HELLO names. Returns 0 or -errno. */
static int attach_accepted(struct xd_pconn *pc, const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	struct xd_daemon *d = pc->d;
	struct xd_peer *p = d->link_events->attach(d, &xd_transport_tcp_ops, node, epoch, pc->addr);
	struct tcp_set *set = p ? tcp_set_get(p) : NULL;

	if (!set)
		return -ENOMEM;
	if (set->nconns >= XD_MAX_PCONNS)
		return -EMFILE;
	TAILQ_REMOVE(&d->tcp->hello, pc, link);
	TAILQ_INSERT_TAIL(&set->conns, pc, link);
	set->nconns++;
	pc->peer = p;
	pc->id = ++set->next_id;
	/* Keyed, our HELLO went out with the challenge, before the peer's AUTH. */
	int rc = d->keys.n ? 0 : pconn_send_hello(pc);
	if (rc == 0)
		d->link_events->up(p, epoch);
	return rc;
}

/* The first HELLO of an outgoing connection makes the set usable; more connections follow. */
static int outgoing_hello(struct xd_pconn *pc, const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	struct xd_peer *p = pc->peer;

	if (memcmp(node, p->node, XP_ID_BYTES) != 0) {
		char got[2 * XP_ID_BYTES + 1];
		xp_hex_encode(node, XP_ID_BYTES, got);
		xd_link_fail(p, EHOSTUNREACH, "the daemon at %s is node %s, not the owner",
			     pc->addr, got);
		return 0;
	}
	if (p->state == XD_PEER_UP) {
		if (epoch != p->epoch)
			xd_link_fail(p, ECONNRESET, "peer daemon restarted while connecting");
		return 0;
	}
	/* peer_connections for DATA, and the control lane (pconn_control_lane()). */
	for (int i = tcp_set(p)->nconns; i < p->d->cfg.peer_connections + 1; i++) {
		int err;
		if (!pconn_connect(p, &p->endpoints[p->next_endpoint], &err))
			xd_log(XD_LOG_WARN, "peer %s: extra connection failed: %s", p->node_hex,
			       strerror(-err));
	}
	p->d->link_events->up(p, epoch);
	return 0;
}

/* What a connection's peer says it is, once it is proven (or unkeyed, believed). */
static int pconn_trusted(struct xd_pconn *pc)
{
	int rc = pc->outgoing ? outgoing_hello(pc, pc->hello.node, pc->hello.epoch) :
				attach_accepted(pc, pc->hello.node, pc->hello.epoch);
	struct xd_pconn *q;

	/* (every connection of a set is to one run of one daemon: they all say the same) */
	if (rc == 0 && !pc->dead && pc->peer) {
		pc->peer->binary_pairing = pc->hello.binary_pairing;
		pc->peer->read_ok_in_data = pc->hello.read_ok_in_data;
		if (pc->authenticated)
			xd_link_key_proven(pc->peer, pc->key_id);
	}
	/* One more connection through the handshake may make the first the control lane. */
	if (rc == 0 && !pc->dead && pc->peer)
		TAILQ_FOREACH(q, &tcp_set(pc->peer)->conns, link)
			pconn_update_write(q);
	return rc;
}

static int handle_hello(struct xd_pconn *pc, json_t *json)
{
	bool keyed = pc->d->keys.n > 0;
	char node[2 * XP_ID_BYTES + 1];

	if (pc->hello_rx || xd_hello_parse(json, &pc->hello) < 0)
		return -EPROTO;
	if (pc->hello.version != XP_PEER_VERSION) {
		xd_log(XD_LOG_WARN, "peer %s speaks peer protocol %lld, not %d", pc->addr,
		       (long long)pc->hello.version, XP_PEER_VERSION);
		return -EPROTO;
	}
	pc->hello_rx = true;
	if (!keyed)
		return pconn_trusted(pc);
	xp_hex_encode(pc->hello.node, XP_ID_BYTES, node);
	if (!pc->hello.has_nonce) {
		xd_log(XD_LOG_WARN,
		       "peer connection %s (says node %s) refused: it offers no authentication "
		       "(no cluster key, or --insecure-peers)",
		       pc->addr, node);
		return -EACCES;
	}
	/* The acceptor answers with its own challenge, then both prove the key. */
	int rc = pc->outgoing ? 0 : pconn_send_hello(pc);
	return rc ? rc : pconn_send_auth(pc);
}

static int handle_auth(struct xd_pconn *pc, json_t *json)
{
	const char *hex;
	uint8_t mac[XD_MAC_LEN];
	char node[2 * XP_ID_BYTES + 1];

	if (!pc->d->keys.n || !pc->hello_rx || pc->authenticated || !json ||
	    json_unpack(json, "{s:s}", "mac", &hex) || xp_hex_decode(hex, mac, sizeof(mac)))
		return -EPROTO;
	int rc = xd_auth_check(pc->d, pc->outgoing, &pc->hello, pc->nonce, mac, &pc->key_id);
	if (rc < 0) {
		xp_hex_encode(pc->hello.node, XP_ID_BYTES, node);
		xd_log(XD_LOG_WARN,
		       "peer connection %s (says node %s) failed authentication: its proof does "
		       "not match the cluster key",
		       pc->addr, node);
		return -EACCES;
	}
	pc->authenticated = true;
	return pconn_trusted(pc);
}

/* The socket turned writable: finish the connect, then send what is queued. */
static void pconn_writable(struct xd_pconn *pc, evutil_socket_t fd)
{
	int rc = 0;

	if (pc->ctrlq_over && !pc->peer) {
		pconn_kill(pc);
		return;
	}
	if (pc->ctrlq_over) {
		xd_link_fail(pc->peer, ECONNRESET,
			     "peer %s does not read: %u bytes of control messages queued", pc->addr,
			     pc->ctrlq_bytes);
		return;
	}
	if (!pc->connected) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			xd_link_fail(pc->peer, EHOSTUNREACH, "could not connect to %s: %s",
				     pc->addr, strerror(err));
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

static void pconn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_pconn *pc = arg;
	uint64_t t0 = xd_now_us();

	pconn_writable(pc, fd);
	xd_loop_note(pc->d, t0, "a write to the peer connection to", pc->addr);
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
	struct tcp_set *set = tcp_set_get(p);
	struct sockaddr_storage ss;
	socklen_t len;

	if (!set) {
		*err = -ENOMEM;
		return NULL;
	}
	/* (xd_peer_for_meta checked it first; every connection of the set passes here) */
	if ((*err = xd_netaddr_allowed(p->d->cfg.peer_allow, p->d->cfg.npeer_allow, ep->addr)) <
		    0 ||
	    (*err = resolve(ep, &ss, &len)) < 0)
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
	pc->id = ++set->next_id;
	TAILQ_INSERT_TAIL(&set->conns, pc, link);
	set->nconns++;
	event_add(pc->wev, NULL); /* writable = connected (or failed) */
	return pc;
}

/*
 * Logs a refused connection, at most once a second: a flood would otherwise fill the log as
 * fast as it connects. The refusals in between are counted into the next line.
 */
static void refuse_log(struct xd_tcp *t, const char *host, const char *why)
{
	uint64_t now = xd_now_us();

	if (t->refused_log_us && now - t->refused_log_us < 1000000) {
		t->refused++;
		return;
	}
	xd_log(XD_LOG_WARN, "peer connection from %s refused: %s (%u more refused before)", host,
	       why, t->refused);
	t->refused_log_us = now;
	t->refused = 0;
}

/* Why a connection from @host may not wait for its HELLO now (NULL: it may). */
static const char *pending_full(struct xd_daemon *d, const char *host)
{
	const struct xd_pconn *pc;
	int total = 0, same = 0;

	TAILQ_FOREACH(pc, &d->tcp->hello, link) {
		total++;
		same += strcmp(pc->host, host) == 0;
	}
	if (total >= d->cfg.max_pending_peer_conns)
		return "too many connections before HELLO (max_pending_peer_conns)";
	if (same >= XD_PENDING_PER_ADDR)
		return "too many connections before HELLO from this address";
	return NULL;
}

static void listeners_enable(struct xd_tcp *t, bool on)
{
	for (int i = 0; i < t->nlisteners; i++) {
		if (on)
			event_add(t->listeners[i].ev, NULL);
		else
			event_del(t->listeners[i].ev);
	}
}

static void tcp_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_daemon *d = arg;

	if (!d->stopping)
		listeners_enable(d->tcp, true);
}

/*
 * accept() failed with EMFILE or ENFILE. The pending connection stays in the backlog and the
 * listener stays readable, so returning would call us again at once: 100% CPU (libevent is
 * level-triggered). Give up the reserve fd to accept that connection and close it, so the peer
 * learns at once instead of waiting in a full backlog, then rest the listeners for a while
 * (tmux, memcached and libuv do the same).
 */
static void accept_exhausted(struct xd_daemon *d, int lfd, int err)
{
	struct xd_tcp *t = d->tcp;
	struct timeval tv = { XD_ACCEPT_PAUSE_MS / 1000, (XD_ACCEPT_PAUSE_MS % 1000) * 1000 };

	if (t->reserve_fd >= 0) {
		close(t->reserve_fd);
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			close(fd);
		t->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	listeners_enable(t, false);
	evtimer_add(t->resume_timer, &tv);
	xd_log(XD_LOG_WARN, "accepting peer connections: %s; pausing for %d ms", strerror(err),
	       XD_ACCEPT_PAUSE_MS);
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct xd_daemon *d = arg;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[64] = "?", port[8] = "?";
	const char *refuse = NULL;

	int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE)
			accept_exhausted(d, lfd, errno);
		return;
	}
	if (d->stopping) {
		close(fd);
		return;
	}
	getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	/*
	 * accept() gives the lowest free fd, so one this high means fewer than the reserve are
	 * left: those are for local clients (a region.register's memfd arrives as an fd, and a
	 * truncated one costs that client its connection) and for the regions they make.
	 */
	if (!xd_netaddr_sockaddr_allowed(d->cfg.peer_allow, d->cfg.npeer_allow,
					 (struct sockaddr *)&ss))
		refuse = "outside peer_allow";
	else if (fd >= d->tcp->fd_ceiling)
		refuse = "the daemon is near its fd limit";
	else
		refuse = pending_full(d, host);
	if (refuse) {
		close(fd);
		refuse_log(d->tcp, host, refuse);
		return;
	}
	set_tcp_options(d, fd);
	struct xd_pconn *pc = pconn_new(d, fd, false);
	if (!pc) {
		close(fd);
		return;
	}
	snprintf(pc->addr, sizeof(pc->addr), "%s:%s", host, port);
	snprintf(pc->host, sizeof(pc->host), "%s", host);
	pc->connected = true;
	if (TAILQ_EMPTY(&d->tcp->hello)) {
		struct timeval tv = { 0, 100000 };
		evtimer_add(d->tcp->handshake_timer, &tv);
	}
	TAILQ_INSERT_TAIL(&d->tcp->hello, pc, link);
	event_add(pc->rev, NULL);
}

/*
 * Closes the connections that have not said HELLO within handshake_timeout_ms: each holds an
 * fd and a place under the caps until it does. The list is in accept order, so the expired
 * ones are at its head. Runs every 100 ms while the list is not empty.
 */
static void tcp_handshake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_daemon *d = arg;
	uint64_t now = xd_now_us(), limit_us = d->cfg.handshake_timeout_ms * 1000;
	struct xd_pconn *pc;
	char first[80] = "";
	int n = 0;

	while ((pc = TAILQ_FIRST(&d->tcp->hello)) && now - pc->started_us >= limit_us) {
		if (!n++)
			snprintf(first, sizeof(first), "%s", pc->addr);
		pconn_kill(pc);
	}
	if (n)
		xd_log(XD_LOG_WARN,
		       "peer connection from %s closed (and %d more): no HELLO within %llu ms "
		       "(handshake_timeout_ms)",
		       first, n - 1, (unsigned long long)d->cfg.handshake_timeout_ms);
	if (!TAILQ_EMPTY(&d->tcp->hello)) {
		struct timeval tv = { 0, 100000 };
		evtimer_add(d->tcp->handshake_timer, &tv);
	}
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
	strcpy(ep->transport, xd_transport_tcp_ops.name);
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
	struct xd_listener *l = &d->tcp->listeners[d->tcp->nlisteners];
	l->fd = fd;
	l->ev = event_new(d->base, fd, EV_READ | EV_PERSIST, accept_cb, d);
	if (!l->ev || event_add(l->ev, NULL) < 0) {
		xd_event_free(l->ev);
		close(fd);
		return -ENOMEM;
	}
	d->tcp->nlisteners++;
	xd_log(XD_LOG_INFO, "accepting peer daemons on %s:%u", bound->addr, bound->port);
	return 0;
}

static bool wildcard(const char *addr)
{
	/* (fill_endpoints(): tcp_start() set bound[i] for each of the nlisteners) */
	/* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
	return strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0 || addr[0] == '\0';
}

/* Metadata endpoints: the advertised (or listened-on) TCP addresses. */
static int fill_endpoints(struct xd_daemon *d, const struct xp_endpoint *bound)
{
	int before = d->nendpoints;

	for (int i = 0; i < d->cfg.nadvertise && d->nendpoints < XP_MAX_ENDPOINTS; i++) {
		if (split_addr(d->cfg.advertise[i], &d->endpoints[d->nendpoints]) < 0) {
			xd_log(XD_LOG_ERR, "advertise address \"%s\" must be ADDR:PORT",
			       d->cfg.advertise[i]);
			return -EINVAL;
		}
		d->nendpoints++;
	}
	for (int i = 0; !d->cfg.nadvertise && i < d->tcp->nlisteners; i++)
		if (!wildcard(bound[i].addr) && d->nendpoints < XP_MAX_ENDPOINTS)
			d->endpoints[d->nendpoints++] = bound[i];
	if (d->tcp->nlisteners && d->nendpoints == before)
		xd_log(XD_LOG_WARN, "listening on a wildcard address only: pass --advertise so "
				    "metadata tells peers where to connect");
	return 0;
}

/* ---- the ops table ---- */

static int tcp_connect(struct xd_peer *p, const struct xp_endpoint *ep)
{
	int err;

	return pconn_connect(p, ep, &err) ? 0 : err;
}

static int tcp_send_ctrl(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags,
			 uint64_t xfer, const json_t *json)
{
	struct tcp_set *set = tcp_set(p);
	struct xd_pconn *pc;

	/* Control messages go on the first connection through the handshake. */
	if (set)
		TAILQ_FOREACH(pc, &set->conns, link)
			if (pconn_ready(pc))
				return pconn_queue(pc, type, flags, xfer, json);
	return -ENOTCONN;
}

static int tcp_send_bin(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
			const uint8_t *buf, uint32_t len)
{
	struct tcp_set *set = tcp_set(p);
	struct xd_pconn *pc;

	/* (on the control lane, as tcp_send_ctrl()) */
	if (set)
		TAILQ_FOREACH(pc, &set->conns, link)
			if (pconn_ready(pc))
				return pconn_queue_bin(pc, type, flags, xfer, buf, len);
	return -ENOTCONN;
}

/* A window lane: the connection named *@lane, or (0, or gone) a data connection by @key. */
static struct xd_pconn *wframe_lane(struct tcp_set *set, uint32_t *lane, uint64_t key)
{
	struct xd_pconn *pc, *first = NULL;
	int n = 0;

	TAILQ_FOREACH(pc, &set->conns, link) {
		if (*lane && pc->id == *lane && pconn_ready(pc))
			return pc;
		n += pconn_carries_data(pc);
		if (!first && pconn_ready(pc))
			first = pc;
	}
	if (n == 0)
		return first ? (*lane = first->id, first) : NULL;
	int pick = (int)(key % (uint64_t)n);
	TAILQ_FOREACH(pc, &set->conns, link)
		if (pconn_carries_data(pc) && pick-- == 0)
			break;
	*lane = pc->id;
	return pc;
}

static int tcp_send_wframe(struct xd_peer *p, uint32_t *lane, uint64_t key, const uint8_t *hdr,
			   uint32_t hdrlen, struct xd_xfer *x, uint64_t off, uint32_t len)
{
	struct tcp_set *set = tcp_set(p);
	struct xd_pconn *pc = set ? wframe_lane(set, lane, key) : NULL;

	if (!pc)
		return -ENOTCONN;
	if (pc->wq_n >= XD_WFRAMES_MAX)
		return -ENOBUFS;
	xd_busypoll_note_bulk(pc->d, x ? len : 0);
	struct xd_wframe *wf = malloc(sizeof(*wf) + hdrlen);
	if (!wf)
		return -ENOMEM;
	*wf = (struct xd_wframe){ .x = x, .off = off, .len = x ? len : 0, .hdrlen = hdrlen };
	memcpy(wf->hdr, hdr, hdrlen);
	if (x)
		xd_xfer_ref(x);
	STAILQ_INSERT_TAIL(&pc->wq, wf, link);
	pc->wq_n++;
	pconn_update_write(pc);
	return 0;
}

static void tcp_flush_ctrl(struct xd_peer *p)
{
	struct tcp_set *set = tcp_set(p);
	struct xd_pconn *pc;

	if (set)
		TAILQ_FOREACH(pc, &set->conns, link)
			if (pconn_ready(pc) && !STAILQ_EMPTY(&pc->ctrlq))
				pconn_flush_ctrl(pc);
}

static void tcp_kick(struct xd_peer *p)
{
	struct tcp_set *set = tcp_set(p);
	struct xd_pconn *pc;

	if (set)
		TAILQ_FOREACH(pc, &set->conns, link)
			pconn_update_write(pc);
}

/*
 * Whether bytes from the peer wait unread in @pc's socket: the peer spoke, only this side has
 * not read yet (a connection waiting for the file lane, or a lane worker slow in its file).
 */
static bool pconn_unread(const struct xd_pconn *pc)
{
	int n = 0;

	return (pc->wait_rx || pc->lane_rx) &&
	       (pc->ra_len > pc->ra_off || (ioctl(pc->fd, FIONREAD, &n) == 0 && n > 0));
}

/*
 * Whether bytes arrived below the socket's SO_RCVLOWAT mark (pconn_lowat()) since the last
 * check: they do not wake the loop, yet the peer is heard. Only growth counts, so a peer that
 * sends a byte of a payload and then nothing is as silent as one that sends nothing.
 */
static bool pconn_heard_below_mark(struct xd_pconn *pc)
{
	int n = 0;

	if (pc->rx_lowat <= 1 || ioctl(pc->fd, FIONREAD, &n) < 0 || n <= pc->rx_below)
		return false;
	pc->rx_below = n;
	return true;
}

static void tcp_keepalive(struct xd_peer *p)
{
	struct xd_daemon *d = p->d;
	struct tcp_set *set = tcp_set(p);
	uint64_t now = xd_now_us();
	struct xd_pconn *pc, *tmp;

	if (!set)
		return;
	TAILQ_FOREACH_SAFE(pc, &set->conns, link, tmp) {
		if (!pconn_ready(pc))
			continue;
		if (pconn_unread(pc) || pconn_heard_below_mark(pc))
			pc->last_rx_us =
				now; /* heard: bytes wait that this side did not read yet */
		if (xd_link_silent(p, pc->last_rx_us, now))
			return;
		if ((now - pc->last_tx_us) / 1000 >= d->cfg.keepalive_ms &&
		    STAILQ_EMPTY(&pc->ctrlq) && !pc->tx_xfer)
			pconn_queue(pc, XP_PEER_PING, 0, 0, NULL);
	}
}

static void tcp_close(struct xd_peer *p)
{
	struct tcp_set *set = tcp_set(p);
	struct xd_pconn *pc;

	if (!set)
		return;
	while ((pc = TAILQ_FIRST(&set->conns)))
		pconn_kill(pc);
	free(set);
	p->tstate = NULL;
}

static int tcp_nconns(const struct xd_peer *p)
{
	return tcp_set(p) ? tcp_set(p)->nconns : 0;
}

static uint64_t tcp_last_rx_us(const struct xd_peer *p)
{
	const struct xd_pconn *pc;
	uint64_t last = 0;

	if (tcp_set(p))
		TAILQ_FOREACH(pc, &tcp_set(p)->conns, link)
			if (pc->last_rx_us > last)
				last = pc->last_rx_us;
	return last;
}

/*
 * What @pc carries, as this daemon sends (the peer decides for its own side): "control" (the
 * control lane), "data", "control+data" (the set's only connection through the handshake), or
 * "handshake" (HELLO or AUTH still due).
 */
static const char *pconn_role(const struct xd_pconn *pc)
{
	const struct xd_pconn *q;
	int ready = 0;

	if (!pconn_ready(pc))
		return "handshake";
	if (pconn_control_lane(pc))
		return "control";
	TAILQ_FOREACH(q, &tcp_set(pc->peer)->conns, link)
		ready += pconn_ready(q);
	return ready > 1 ? "data" : "control+data";
}

/* The local port of socket @fd (0 if unknown): with "remote", what ss(8) shows of it. */
static int local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	/* (getsockname() filled ss) */
	/* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port) : 0;
}

static json_t *pconn_json(const struct xd_pconn *pc)
{
	json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:i}", "id", (json_int_t)pc->id, "role",
			      pconn_role(pc), "direction", pc->outgoing ? "out" : "in", "remote",
			      pc->addr, "local_port", local_port(pc->fd));

	if (o && xd_tcp_info_add(o, pc->fd)) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

static json_t *tcp_conns_json(const struct xd_peer *p)
{
	json_t *arr = json_array();
	const struct xd_pconn *pc;

	if (arr && tcp_set(p))
		TAILQ_FOREACH(pc, &tcp_set(p)->conns, link)
			if (json_array_append_new(arr, pconn_json(pc))) {
				json_decref(arr);
				return NULL;
			}
	return arr;
}

static bool tcp_pending_output(const struct xd_peer *p)
{
	const struct xd_pconn *pc;

	if (tcp_set(p))
		TAILQ_FOREACH(pc, &tcp_set(p)->conns, link)
			if (!STAILQ_EMPTY(&pc->ctrlq))
				return true;
	return false;
}

/*
 * See xd_transport_ops.tx_stalled_since: a connection that writes (however little of the
 * frames queued on it belongs to a given transfer) is one whose peer reads; one that has bytes
 * waiting and wrote none since last_tx_us is one whose peer does not (keepalive PINGs keep an
 * idle connection's last_tx_us fresh, and cannot pass a full socket).
 */
static uint64_t tcp_tx_stalled_since(const struct xd_peer *p)
{
	const struct xd_pconn *pc;
	uint64_t oldest = 0;

	if (tcp_set(p))
		TAILQ_FOREACH(pc, &tcp_set(p)->conns, link) {
			bool waiting = !STAILQ_EMPTY(&pc->ctrlq) || pc->tx_xfer || pc->tx_wf ||
				       !STAILQ_EMPTY(&pc->wq);
			if (waiting && (!oldest || pc->last_tx_us < oldest))
				oldest = pc->last_tx_us;
		}
	return oldest;
}

/* The timers, the reserve fd and the fd ceiling of accept_cb(). Returns 0 or -errno. */
static int tcp_start_bounds(struct xd_daemon *d)
{
	struct xd_tcp *t = d->tcp;
	struct rlimit rl;

	t->handshake_timer = evtimer_new(d->base, tcp_handshake_cb, d);
	t->resume_timer = evtimer_new(d->base, tcp_resume_cb, d);
	if (!t->handshake_timer || !t->resume_timer)
		return -ENOMEM;
	t->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (t->reserve_fd < 0)
		return -errno;
	t->fd_ceiling = INT32_MAX;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)INT32_MAX) {
		/* A quarter of a small limit, XD_FD_RESERVE_MAX of a large one. */
		rlim_t reserve = rl.rlim_cur / 4;
		if (reserve > XD_FD_RESERVE_MAX)
			reserve = XD_FD_RESERVE_MAX;
		t->fd_ceiling = (int)(rl.rlim_cur - reserve);
	}
	return 0;
}

static int tcp_start(struct xd_daemon *d)
{
	struct xp_endpoint bound[XD_MAX_LISTEN];

	d->tcp = calloc(1, sizeof(*d->tcp));
	if (!d->tcp)
		return -ENOMEM;
	TAILQ_INIT(&d->tcp->hello);
	TAILQ_INIT(&d->tcp->lane_waiters);
	d->tcp->reserve_fd = -1;
	d->tcp->splice_pipe[0] = d->tcp->splice_pipe[1] = -1;
	d->tcp->remote_pipe[0] = d->tcp->remote_pipe[1] = -1;
	tcp_congestion_check(d);
	d->tcp->lanes[0].pipefd = d->tcp->splice_pipe;
	d->tcp->lanes[1].pipefd = d->tcp->remote_pipe;
	int rc = splice_pipe_open(d->tcp->splice_pipe);
	if (rc == 0)
		rc = splice_pipe_open(d->tcp->remote_pipe);
	if (rc == 0)
		rc = tcp_start_bounds(d);
	if (rc < 0)
		return rc;
	for (int i = 0; i < d->cfg.nlisten; i++) {
		rc = listen_on(d, d->cfg.listen[i], &bound[i]);
		if (rc < 0)
			return rc;
		d->listen_eps[d->nlisten_eps++] = bound[i];
	}
	return fill_endpoints(d, bound);
}

/* After every peer set failed (peer.c): what is left are connections before HELLO. */
static void tcp_fini(struct xd_daemon *d)
{
	struct xd_tcp *t = d->tcp;
	struct xd_pconn *pc;

	if (!t)
		return;
	while ((pc = TAILQ_FIRST(&t->hello)))
		pconn_kill(pc);
	for (int i = 0; i < t->nlisteners; i++) {
		xd_event_free(t->listeners[i].ev);
		close(t->listeners[i].fd);
	}
	xd_event_free(t->handshake_timer);
	xd_event_free(t->resume_timer);
	if (t->reserve_fd >= 0)
		close(t->reserve_fd);
	for (int i = 0; i < 2; i++) {
		if (t->splice_pipe[i] >= 0)
			close(t->splice_pipe[i]);
		if (t->remote_pipe[i] >= 0)
			close(t->remote_pipe[i]);
	}
	xd_defer_flush(d);
	free(t);
	d->tcp = NULL;
}

static bool tcp_usable(const struct xd_daemon *d, const char **why)
{
	return true; /* connecting out needs no listener */
}

const struct xd_transport_ops xd_transport_tcp_ops = {
	.name = "tcp",
	.network = true,
	.authenticates = true,
	.quick_end = true,
	.start = tcp_start,
	.fini = tcp_fini,
	.usable = tcp_usable,
	.connect = tcp_connect,
	.send_ctrl = tcp_send_ctrl,
	.send_bin = tcp_send_bin,
	.send_wframe = tcp_send_wframe,
	.kick = tcp_kick,
	.flush_ctrl = tcp_flush_ctrl,
	.keepalive = tcp_keepalive,
	.close = tcp_close,
	.nconns = tcp_nconns,
	.last_rx_us = tcp_last_rx_us,
	.conns_json = tcp_conns_json,
	.pending_output = tcp_pending_output,
	.tx_stalled_since = tcp_tx_stalled_since,
};
