// SPDX-License-Identifier: MIT
/*
 * libxferclient: one blocking JSON-RPC conversation with xferd per struct xfer_client, sealed
 * memfd buffers, and op.changed notifications queued while a call waits for its reply and
 * handed to the event callback only once the library's own state is consistent again.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>

#include "xferclient.h"
#include "xfer_proto.h"
#include "xp_fdmsg.h"
#include "xp_json.h"

#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 32)
#define XFER_HAVE_STRERRORDESC 1
#endif
#endif

#define CLIENT_DEFAULT_NAME "xferclient"
#define CLIENT_ERR_MAX 512
/*
 * Request ids must survive a trip through a double (< 2^53). A posted op.batch (XFER_OP_POST)
 * has bit 52 set, the others never: an error reply to such an id is a posted batch's refusal
 * (no one waits for it), and its id, which is its batch's, never meets a daemon-made one. A
 * request of xfer_post_op() has bit 51 set (and not 52): its reply, whatever it is, goes to
 * the reply callback, never to a call waiting for its own reply. Other ids stay below 2^51.
 */
#define CLIENT_POSTED_ID ((int64_t)1 << 52)
#define CLIENT_POSTED_OP ((int64_t)1 << 51)
#define CLIENT_MAX_ID CLIENT_POSTED_OP
#define CLIENT_SPIN_ENV "XFER_SPIN_US"
#define CLIENT_SPIN_UNSET UINT_MAX /* neither xfer_set_spin() nor XFER_SPIN_US: spin_for() */
/*
 * Unless told otherwise, only region.register and region.deregister spin, this long: the
 * daemon answers them from the same turn of its loop (tens of microseconds), while others may
 * wait on a peer or a worker for milliseconds, where a spin only burns CPU (measured: 64 KiB
 * pairings' p99 doubled with every call spinning 50 us).
 */
#define CLIENT_SPIN_QUICK_US 50

/* The public enums are cast straight from the protocol's; keep their orders identical. */
#define CLIENT_SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " must equal " #b)
CLIENT_SAME(XFER_UNINITIALIZED, XP_ST_UNINITIALIZED);
CLIENT_SAME(XFER_INITIALIZED, XP_ST_INITIALIZED);
CLIENT_SAME(XFER_IN_PROGRESS, XP_ST_IN_PROGRESS);
CLIENT_SAME(XFER_COMPLETE, XP_ST_COMPLETE);
CLIENT_SAME(XFER_CANCELLED, XP_ST_CANCELLED);
CLIENT_SAME(XFER_ERRORED, XP_ST_ERRORED);
CLIENT_SAME(XFER_READABLE, XP_KIND_READABLE);
CLIENT_SAME(XFER_WRITABLE, XP_KIND_WRITABLE);
CLIENT_SAME(XFER_READ, XP_KIND_READ);
CLIENT_SAME(XFER_WRITE, XP_KIND_WRITE);
CLIENT_SAME(XFER_GET, XP_KIND_GET);
CLIENT_SAME(XFER_PUT, XP_KIND_PUT);
CLIENT_SAME(XFER_ACCESS_READ, XP_ACCESS_READ);
CLIENT_SAME(XFER_ACCESS_WRITE, XP_ACCESS_WRITE);
CLIENT_SAME(XFER_ACCESS_READWRITE, XP_ACCESS_READWRITE);

/*
 * One notification waiting for delivery: op.changed, a window's, or a batch's; or the reply to
 * a request of xfer_post_op(), queued with them so that the order they arrived in is kept.
 */
struct client_event {
	struct client_event *next;
	bool is_window, is_batch, is_reply;
	struct xfer_op_info info;
	struct xfer_window_event wev;
	struct xfer_batch_event bev; /* bev.ends: owned */
	struct xfer_reply rep;	     /* its metadata is meta, its message why */
	char *meta;		     /* owned */
	char *why; /* a posted batch's refusal, for xfer_last_error() in its callback; owned */
};

#define FAST_ENDS 64 /* op.batch_done of more ends, or a reply of more ops, takes jansson's way */

/*
 * The ends of an op.batch_done that came in parts ("more": true on all but the last: a long
 * batch's ends do not fit one packet, PROTOCOL.md §5.2), gathered until the last, which is
 * delivered with them all as one event. The daemon sends a batch's parts one after the other.
 */
struct batch_parts {
	uint64_t batch;
	size_t n;
	struct xfer_batch_end *ends; /* NULL: no part waiting */
};

struct xfer_client {
	int sock;
	int64_t next_id;
	uint64_t id; /* the connection id hello returned */
	xfer_event_cb cb;
	void *cb_arg;
	xfer_window_cb wcb;
	void *wcb_arg;
	xfer_batch_cb bcb;
	void *bcb_arg;
	xfer_reply_cb rcb;
	void *rcb_arg;
	struct client_event *ev_head;
	struct client_event **ev_tail;
	bool delivering;       /* inside client_deliver(): no nested delivery */
	bool close_pending;    /* xfer_close() was called from the callback */
	unsigned spin_us;      /* xfer_set_spin() or XFER_SPIN_US; CLIENT_SPIN_UNSET: spin_for() */
	unsigned wait_spin_us; /* how long the call under way polls for its reply before sleeping */
	char *rxbuf;	       /* XP_MAX_MSG bytes */
	char last_error[CLIENT_ERR_MAX];
	struct batch_sink *sink;  /* xfer_batch() awaiting its reply: read back without jansson */
	struct batch_parts parts; /* an op.batch_done sent in parts, until its last */
};

/* The op.batch reply xfer_batch() awaits, read by xp_batch_reply_read() when it can be. */
struct batch_sink {
	int64_t id;
	size_t n;
	uint64_t ops[FAST_ENDS];
	uint64_t batch;
	bool got;
};

__attribute__((format(printf, 2, 3))) static void client_set_error(struct xfer_client *c,
								   const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
	va_end(ap);
}

/* Copies @src (NULL: "") into @dst of @size bytes, truncating. */
static void copy_str(char *dst, size_t size, const char *src)
{
	size_t n = src ? strnlen(src, size - 1) : 0;

	memcpy(dst, src ? src : "", n);
	dst[n] = '\0';
}

static void event_free(struct client_event *ev)
{
	if (ev) {
		free((void *)ev->bev.ends);
		free(ev->meta);
		free(ev->why);
	}
	free(ev);
}

static void client_free_events(struct xfer_client *c)
{
	struct client_event *ev;

	while ((ev = c->ev_head)) {
		c->ev_head = ev->next;
		event_free(ev);
	}
	c->ev_tail = &c->ev_head;
}

/* XFER_SPIN_US (microseconds, at most XFER_SPIN_MAX_US), or CLIENT_SPIN_UNSET. */
static unsigned client_spin_default(void)
{
	const char *env = getenv(CLIENT_SPIN_ENV);
	char *end;
	unsigned long v;

	if (!env || !*env)
		return CLIENT_SPIN_UNSET;
	errno = 0;
	v = strtoul(env, &end, 10);
	if (errno || *end || env[0] == '-')
		return CLIENT_SPIN_UNSET;
	return v > XFER_SPIN_MAX_US ? XFER_SPIN_MAX_US : (unsigned)v;
}

static void client_destroy(struct xfer_client *c)
{
	if (!c)
		return;
	if (c->sock >= 0)
		close(c->sock);
	client_free_events(c);
	free(c->parts.ends);
	free(c->rxbuf);
	free(c);
}

static struct xfer_client *client_create(void)
{
	struct xfer_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->sock = -1;
	c->next_id = 1;
	c->ev_tail = &c->ev_head;
	c->spin_us = client_spin_default();
	c->rxbuf = malloc(XP_MAX_MSG);
	if (!c->rxbuf) {
		client_destroy(c);
		return NULL;
	}
	return c;
}

/* ------------------------------------------------------------------------------------------ */
/* Operation objects */

static const char *obj_str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "";
}

/* The error of an op in @state whose errno the daemon named (@err > 0), or a generic one. */
static int end_error(int err, enum xfer_state state)
{
	if (err)
		return -err;
	if (state == XFER_CANCELLED)
		return -ECANCELED;
	if (state == XFER_ERRORED)
		return -EIO;
	return 0;
}

/* The error of an ended operation: its errno name, or a generic one when the daemon gave none. */
static int op_info_error(const json_t *obj, enum xfer_state state)
{
	return end_error(xp_errno_from_name(obj_str(obj, "errno")), state);
}

/*
 * Fills @info from an operation object (PROTOCOL.md section 5). Returns 0, or -EBADMSG when the
 * id, kind or state is missing or unknown; counters that are absent read as 0.
 */
static int op_info_parse(const json_t *obj, struct xfer_op_info *info)
{
	int kind, state;

	memset(info, 0, sizeof(*info));
	kind = xp_kind_from_name(obj_str(obj, "kind"));
	state = xp_state_from_name(obj_str(obj, "state"));
	if (xp_get_u64(obj, "op", &info->op) < 0 || kind < 0 || state < 0)
		return -EBADMSG;
	info->kind = (enum xfer_kind)kind;
	info->state = (enum xfer_state)state;
	xp_get_u64(obj, "length", &info->length);
	xp_get_u64(obj, "bytes", &info->bytes);
	xp_get_u64(obj, "client", &info->client);
	xp_get_u64(obj, "timeout_ms", &info->timeout_ms);
	xp_get_u64(obj, "age_ms", &info->age_ms);
	info->error = op_info_error(obj, info->state);
	copy_str(info->cause, sizeof(info->cause), obj_str(obj, "cause"));
	copy_str(info->transport, sizeof(info->transport), obj_str(obj, "transport"));
	copy_str(info->peer, sizeof(info->peer), obj_str(obj, "peer"));
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Events */

/*
 * Queues an op.changed notification for delivery. Nothing is queued without a callback, so an
 * application that never sets one does not accumulate events. Unknown notifications and
 * malformed ones are ignored: a newer daemon must not break an older client's calls, and a
 * dropped event is not fatal because xfer_wait() and xfer_status() ask the daemon directly.
 */
/* Fills @ev from window.notified or window.closed. Returns 0 or -EBADMSG. */
static int window_event_parse(const struct xp_reply *rep, struct xfer_window_event *ev)
{
	const json_t *p = rep->params;
	bool notified = strcmp(rep->method, XP_NOTIFY_WINDOW_NOTIFIED) == 0;
	int kind = xp_kind_from_name(obj_str(p, "kind"));

	memset(ev, 0, sizeof(*ev));
	ev->type = notified ? XFER_WINDOW_NOTIFIED : XFER_WINDOW_CLOSED;
	if (xp_get_u64(p, "window", &ev->window) < 0 || (notified && kind < 0))
		return -EBADMSG;
	if (notified) {
		ev->kind = (enum xfer_kind)kind;
		copy_str(ev->tag, sizeof(ev->tag), obj_str(p, "tag"));
		copy_str(ev->peer, sizeof(ev->peer), obj_str(p, "peer"));
		xp_get_u64(p, "offset", &ev->offset);
		xp_get_u64(p, "bytes", &ev->bytes);
		xp_get_u64(p, "handle", &ev->handle);
	} else {
		ev->error = -(xp_errno_from_name(obj_str(p, "errno")) ?: EIO);
		copy_str(ev->cause, sizeof(ev->cause), obj_str(p, "cause"));
	}
	return 0;
}

/* Fills @ev from op.batch_done {"batch", "ops": [{"op", "state", "bytes", "errno"?}]}. */
static int batch_event_parse(const struct xp_reply *rep, struct xfer_batch_event *ev)
{
	const json_t *ops = json_object_get(rep->params, "ops"), *o;
	struct xfer_batch_end *ends;
	size_t i;

	if (xp_get_u64(rep->params, "batch", &ev->batch) < 0 || !json_is_array(ops))
		return -EBADMSG;
	ends = calloc(json_array_size(ops) + 1, sizeof(*ends));
	if (!ends)
		return -ENOMEM;
	json_array_foreach(ops, i, o) {
		int state = xp_state_from_name(obj_str(o, "state"));
		if (xp_get_u64(o, "op", &ends[i].op) < 0 || state < 0) {
			free(ends);
			return -EBADMSG;
		}
		ends[i].state = (enum xfer_state)state;
		xp_get_u64(o, "bytes", &ends[i].bytes);
		ends[i].error = op_info_error(o, ends[i].state);
	}
	ev->n = json_array_size(ops);
	ev->ends = ends;
	return 0;
}

static void batch_parts_drop(struct batch_parts *bp)
{
	free(bp->ends);
	*bp = (struct batch_parts){ 0 };
}

/*
 * Takes a part of an op.batch_done into c->parts: @ev's ends are kept (moved out of @ev) while
 * @more says more parts follow, and put before its own in the last part. Returns 0 when @ev is
 * the batch's whole event now, -1 while parts are still due. Parts that break the rules (of
 * another batch than the parts before, more ends than a batch has) are dropped.
 */
static int batch_parts_take(struct xfer_client *c, struct xfer_batch_event *ev, bool more)
{
	struct batch_parts *bp = &c->parts;
	struct xfer_batch_end *all;

	if (bp->ends && bp->batch != ev->batch)
		batch_parts_drop(bp);
	if (!bp->ends && !more)
		return 0;
	if (bp->n + ev->n > XP_MAX_BATCH ||
	    !(all = realloc(bp->ends, (bp->n + ev->n + 1) * sizeof(*all)))) {
		batch_parts_drop(bp);
		return -1;
	}
	memcpy(all + bp->n, ev->ends, ev->n * sizeof(*all));
	free((void *)ev->ends);
	*bp = (struct batch_parts){ ev->batch, bp->n + ev->n, all };
	ev->ends = NULL;
	ev->n = 0;
	if (more)
		return -1;
	ev->ends = bp->ends; /* (the event owns them now) */
	ev->n = bp->n;
	*bp = (struct batch_parts){ 0 };
	return 0;
}

/* A posted batch's refusal (op.batch_done's "message", or an error reply's) for its event. */
static void batch_event_why(struct client_event *ev, const char *message)
{
	ev->why = message && *message ? strdup(message) : NULL;
}

/* Parses a notification into @ev when its callback is set. Returns 0, or -1 to drop it. */
static int event_parse(struct xfer_client *c, const struct xp_reply *rep, struct client_event *ev)
{
	if (strcmp(rep->method, XP_NOTIFY_OP_CHANGED) == 0)
		return c->cb && op_info_parse(rep->params, &ev->info) == 0 ? 0 : -1;
	if (strcmp(rep->method, XP_NOTIFY_WINDOW_NOTIFIED) == 0 ||
	    strcmp(rep->method, XP_NOTIFY_WINDOW_CLOSED) == 0) {
		ev->is_window = true;
		return c->wcb && window_event_parse(rep, &ev->wev) == 0 ? 0 : -1;
	}
	if (strcmp(rep->method, XP_NOTIFY_BATCH_DONE) == 0) {
		ev->is_batch = true;
		if (!c->bcb || batch_event_parse(rep, &ev->bev) < 0 ||
		    batch_parts_take(c, &ev->bev,
				     json_is_true(json_object_get(rep->params, "more"))))
			return -1;
		batch_event_why(ev, obj_str(rep->params, "message"));
		return 0;
	}
	return -1;
}

/*
 * Queues op.batch_done read straight from its text (xp_batch_done_read()) when it is in the
 * daemon's own form, without a jansson tree: a pipelining client takes one per batch, and
 * parsing it into ~5 values per end, then freeing them, was most of the client's CPU spent on
 * events. Returns false when the packet is anything else (jansson's way then decides).
 */
static bool client_queue_batch_text(struct xfer_client *c, int len)
{
	struct xp_batch_end raw[FAST_ENDS];
	struct xfer_batch_end *ends;
	struct client_event *ev;
	uint64_t batch;
	size_t n;

	/* (the last part of a batch sent in parts joins the others: jansson's way) */
	if (!c->bcb || c->parts.ends ||
	    xp_batch_done_read(c->rxbuf, (size_t)len, &batch, raw, FAST_ENDS, &n))
		return false;
	ev = calloc(1, sizeof(*ev));
	ends = calloc(n + 1, sizeof(*ends));
	if (!ev || !ends) { /* (dropped, as client_queue_event() drops it) */
		free(ev);
		free(ends);
		return true;
	}
	for (size_t i = 0; i < n; i++) {
		ends[i].op = raw[i].op;
		ends[i].state = (enum xfer_state)raw[i].state;
		ends[i].bytes = raw[i].bytes;
		ends[i].error = end_error(raw[i].err, ends[i].state);
	}
	ev->is_batch = true;
	ev->bev.batch = batch;
	ev->bev.n = n;
	ev->bev.ends = ends;
	*c->ev_tail = ev;
	c->ev_tail = &ev->next;
	return true;
}

static void client_queue_event(struct xfer_client *c, const struct xp_reply *rep)
{
	struct client_event *ev;

	if (!c->cb && !c->wcb && !c->bcb)
		return;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return;
	if (event_parse(c, rep, ev) < 0) {
		event_free(ev);
		return;
	}
	ev->next = NULL;
	*c->ev_tail = ev;
	c->ev_tail = &ev->next;
}

/*
 * An error reply to a posted op.batch (XFER_OP_POST; refused as a whole, e.g. by a daemon that
 * does not know "reply": false): no one waits for it, so it becomes the batch's event, with no
 * ends and the daemon's message for xfer_last_error().
 */
static void client_queue_refused_post(struct xfer_client *c, const struct xp_reply *rep)
{
	struct client_event *ev;

	if (!c->bcb || !(ev = calloc(1, sizeof(*ev))))
		return;
	ev->is_batch = true;
	ev->bev.batch = (uint64_t)rep->id;
	batch_event_why(ev, rep->message);
	*c->ev_tail = ev;
	c->ev_tail = &ev->next;
}

static struct client_event *client_pop_event(struct xfer_client *c)
{
	struct client_event *ev = c->ev_head;

	if (!ev)
		return NULL;
	c->ev_head = ev->next;
	if (!c->ev_head)
		c->ev_tail = &c->ev_head;
	return ev;
}

/*
 * Hands every queued event to the callback. Returns how many it delivered. The callback may
 * call back into the library: nested calls queue what they receive (delivering is set), and
 * this loop picks those up too. last_error is restored afterwards so that it still describes
 * the call that is returning, not one the callback made. When the callback called xfer_close(),
 * @c is freed here and must not be touched by the caller any more.
 */
static int client_deliver(struct xfer_client *c)
{
	char saved[CLIENT_ERR_MAX];
	struct client_event *ev;
	int n = 0;

	if (c->delivering || !c->ev_head)
		return 0;
	memcpy(saved, c->last_error, sizeof(saved));
	c->delivering = true;
	while ((ev = client_pop_event(c))) {
		if (ev->is_window && c->wcb && !c->close_pending) {
			c->wcb(c, &ev->wev, c->wcb_arg);
			n++;
		} else if (ev->is_batch && c->bcb && !c->close_pending) {
			if (ev->why)
				copy_str(c->last_error, sizeof(c->last_error), ev->why);
			c->bcb(c, &ev->bev, c->bcb_arg);
			n++;
		} else if (ev->is_reply && c->rcb && !c->close_pending) {
			c->rcb(c, &ev->rep, c->rcb_arg);
			n++;
		} else if (!ev->is_window && !ev->is_batch && !ev->is_reply && c->cb &&
			   !c->close_pending) {
			c->cb(c, &ev->info, c->cb_arg);
			n++;
		}
		event_free(ev);
	}
	c->delivering = false;
	if (c->close_pending) {
		client_destroy(c);
		return n;
	}
	memcpy(c->last_error, saved, sizeof(saved));
	return n;
}

/* Ends every public call that talks to the daemon: delivers what arrived, then returns @rc. */
static int client_finish(struct xfer_client *c, int rc)
{
	client_deliver(c);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Packets */

/* Waits until @sock is ready for @events. Returns 0 or -errno. */
static int sock_wait(int sock, short events)
{
	struct pollfd pfd = { .fd = sock, .events = events };

	for (;;) {
		if (poll(&pfd, 1, -1) >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/* Translates a transport failure into -errno and a sentence for xfer_last_error(). */
static int client_io_error(struct xfer_client *c, int rc)
{
	switch (rc) {
	case -ECONNRESET:
	case -EPIPE:
		client_set_error(c, "xferd closed the connection");
		return -ECONNRESET;
	case -ENOTCONN:
		client_set_error(c, "the connection is closed");
		return rc;
	case -EMSGSIZE:
		client_set_error(c, "xferd sent a packet larger than %d bytes", XP_MAX_MSG);
		return -EPROTO;
	default:
		client_set_error(c, "control socket: %s", xfer_strerror(rc));
		return rc;
	}
}

/* Sends one packet, waiting while the socket is full. Borrows @fd (-1: none). */
static int client_send_packet(struct xfer_client *c, const char *buf, size_t len, int fd)
{
	int rc;

	for (;;) {
		rc = xp_packet_send(c->sock, buf, len, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
		if (rc != -EAGAIN)
			break;
		rc = sock_wait(c->sock, POLLOUT);
		if (rc < 0)
			break;
	}
	return rc < 0 ? client_io_error(c, rc) : 0;
}

/*
 * Sends request @method with @params (consumed, even on failure; NULL: none) and fd @fd
 * (borrowed; -1: none). Returns 0 and the request's *id (@mark: 0, or CLIENT_POSTED_ID or
 * CLIENT_POSTED_OP for a request no call will wait for), or -errno.
 */
static int client_send(struct xfer_client *c, const char *method, json_t *params, int fd,
		       int64_t mark, int64_t *id)
{
	json_t *req;
	char *buf;
	int len, rc;

	if (c->sock < 0) {
		json_decref(params);
		return client_io_error(c, -ENOTCONN);
	}
	*id = c->next_id | mark;
	c->next_id = c->next_id + 1 < CLIENT_MAX_ID ? c->next_id + 1 : 1;
	req = xp_build_request(*id, method, params);
	if (!req) {
		client_set_error(c, "out of memory building %s", method);
		return -ENOMEM;
	}
	len = xp_dump(req, &buf);
	json_decref(req);
	if (len == -EMSGSIZE)
		client_set_error(c, "%s request is larger than %d bytes", method, XP_MAX_MSG);
	else if (len < 0)
		client_set_error(c, "out of memory encoding %s", method);
	if (len < 0)
		return len;
	rc = client_send_packet(c, buf, (size_t)len, fd);
	free(buf);
	return rc;
}

static uint64_t client_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One non-blocking receive into c->rxbuf. Returns the length, -EAGAIN or -errno. */
static int client_try_recv(struct xfer_client *c)
{
	struct xp_fdset fds;
	int rc = xp_packet_recv(c->sock, c->rxbuf, XP_MAX_MSG, &fds, 1);

	if (rc >= 0)
		xp_fdset_close(&fds); /* the daemon never sends fds; never keep strays */
	return rc;
}

/*
 * Keeps trying to receive for up to c->wait_spin_us before the caller sleeps in poll(): the daemon
 * usually answers within tens of microseconds, and waking a sleeping process on the other
 * vCPU costs about as much again (UCX polls for the same reason). Every packet is taken in
 * order whatever it is, so events are never skipped. Returns what client_try_recv() returned.
 */
static int client_spin_recv(struct xfer_client *c)
{
	uint64_t until = client_now_us() + c->wait_spin_us;
	int rc;

	/* Yielding lets a daemon queued on this very CPU run instead of waiting out the spin. */
	while ((rc = client_try_recv(c)) == -EAGAIN && client_now_us() < until)
		sched_yield();
	return rc;
}

/*
 * Receives one packet into c->rxbuf. Without @dontwait it waits as long as it takes: the daemon
 * always replies, and the socket may have been made non-blocking by an event loop, so it polls
 * rather than relying on a blocking recvmsg (after spinning c->wait_spin_us). Returns the length,
 * -EAGAIN (@dontwait only) or a transport error already translated by client_io_error().
 */
static int client_recv(struct xfer_client *c, bool dontwait)
{
	int rc;

	if (c->sock < 0)
		return client_io_error(c, -ENOTCONN);
	/* A reply is never there the moment a request went out: without a spin, sleep at once. */
	if (dontwait)
		rc = client_try_recv(c);
	else
		rc = c->wait_spin_us ? client_spin_recv(c) : -EAGAIN;
	while (rc == -EAGAIN && !dontwait) {
		rc = sock_wait(c->sock, POLLIN);
		if (rc == 0)
			rc = client_try_recv(c);
	}
	if (rc < 0 && rc != -EAGAIN)
		return client_io_error(c, rc);
	return rc;
}

/* Whether an error reply named its errno in data.errno (the parser says EIO when it did not). */
static bool reply_has_errno(const struct xp_reply *rep)
{
	json_t *data = json_object_get(json_object_get(rep->root, "error"), "data");

	return json_is_string(json_object_get(data, "errno"));
}

/* The -errno of an error reply. */
static int reply_errno(const struct xp_reply *rep)
{
	if (reply_has_errno(rep))
		return -rep->err;
	switch (rep->code) {
	case XP_E_PARSE:
	case XP_E_INVALID_REQ:
		return -EPROTO;
	case XP_E_NO_METHOD:
		return -ENOSYS;
	case XP_E_PARAMS:
		return -EINVAL;
	default:
		return -rep->err;
	}
}

/* Turns an error reply into -errno and keeps its message for xfer_last_error(). */
static int client_reply_error(struct xfer_client *c, const struct xp_reply *rep)
{
	copy_str(c->last_error, sizeof(c->last_error), rep->message);
	return reply_errno(rep);
}

/* Whether @rep answers a request of xfer_post_op() (bit 51 of its id set, and not bit 52). */
static bool reply_is_posted_op(const struct xp_reply *rep)
{
	return rep->id > 0 && (rep->id & CLIENT_POSTED_OP) && !(rep->id & CLIENT_POSTED_ID);
}

/*
 * Fills @ev from @rep, the reply to a request of xfer_post_op(): the operation made (and its
 * metadata), or the refusal's -errno and sentence. Returns 0, or -ENOMEM.
 */
static int posted_reply_parse(const struct xp_reply *rep, struct client_event *ev)
{
	const char *meta = NULL, *why = NULL;

	ev->is_reply = true;
	ev->rep.request = (uint64_t)rep->id;
	if (!rep->result) {
		ev->rep.error = reply_errno(rep);
		why = rep->message ? rep->message : "";
	} else if (xp_get_u64(rep->result, "op", &ev->rep.op) < 0) {
		ev->rep.error = -EPROTO;
		why = "xferd's reply lacks a valid \"op\"";
	} else {
		meta = obj_str(rep->result, "metadata");
	}
	/* (copied only when there is one: an accepted reply, the common case, allocates less) */
	ev->why = why ? strdup(why) : NULL;
	ev->meta = meta ? strdup(meta) : NULL;
	if ((why && !ev->why) || (meta && !ev->meta))
		return -ENOMEM;
	ev->rep.message = ev->why ? ev->why : "";
	ev->rep.metadata = ev->meta;
	return 0;
}

/*
 * Queues the reply to a request of xfer_post_op() for the reply callback, in arrival order
 * with the events (an operation's events may come before the reply that names it). Dropped
 * without a callback, as events are.
 */
static void client_queue_posted_reply(struct xfer_client *c, const struct xp_reply *rep)
{
	struct client_event *ev;

	if (!c->rcb || !(ev = calloc(1, sizeof(*ev))))
		return;
	if (posted_reply_parse(rep, ev) < 0) {
		/* Its waiter still hears of it, without the words (the op, if any, stays unnamed). */
		ev->rep = (struct xfer_reply){ .request = ev->rep.request,
					       .error = -ENOMEM,
					       .message = "" };
	}
	*c->ev_tail = ev;
	c->ev_tail = &ev->next;
}

/* Whether @rep answers request @want. An id-less error answers whatever was outstanding. */
static bool reply_matches(const struct xp_reply *rep, int64_t want)
{
	if (want == XP_ID_NONE)
		return false;
	return rep->id == want || (rep->id == XP_ID_NONE && !rep->result);
}

/*
 * Handles one received packet of @len bytes while waiting for the reply to @want (XP_ID_NONE:
 * no request outstanding). Notifications are queued; replies to other ids are stale (left by a
 * call that failed locally) and dropped. Sets *done when this was the awaited reply and then
 * returns 0 with *result (a new reference; may be NULL to discard) or the reply's -errno.
 */
static int client_handle_packet(struct xfer_client *c, int len, int64_t want, json_t **result,
				bool *done)
{
	struct xp_reply rep;
	int rc;

	if (client_queue_batch_text(c, len))
		return 0;
	if (c->sink && c->sink->id == want &&
	    xp_batch_reply_read(c->rxbuf, (size_t)len, want, c->sink->ops, c->sink->n,
				&c->sink->batch) == 0) {
		c->sink->got = true;
		*done = true;
		return 0;
	}
	rc = xp_reply_parse(c->rxbuf, (size_t)len, &rep);
	if (rc < 0) {
		xp_reply_fini(&rep);
		*done = want != XP_ID_NONE;
		client_set_error(c, "xferd sent a packet that is not a JSON-RPC reply");
		return -EPROTO;
	}
	if (rep.notification) {
		client_queue_event(c, &rep);
	} else if (reply_matches(&rep, want)) {
		*done = true;
		if (!rep.result)
			rc = client_reply_error(c, &rep);
		else if (result)
			*result = json_incref(rep.result);
	} else if (reply_is_posted_op(&rep)) {
		client_queue_posted_reply(c, &rep);
	} else if (rep.id != XP_ID_NONE && (rep.id & CLIENT_POSTED_ID) && !rep.result) {
		client_queue_refused_post(c, &rep);
	} else if (rep.id == XP_ID_NONE && !rep.result) {
		/* A protocol error about no request of ours; the daemon closes next. */
		copy_str(c->last_error, sizeof(c->last_error), rep.message);
	}
	xp_reply_fini(&rep);
	return rc;
}

/* Receives until the reply to @id arrives. Returns 0 and *result, or -errno. */
static int client_await(struct xfer_client *c, int64_t id, json_t **result)
{
	bool done = false;
	int rc;

	while (!done) {
		rc = client_recv(c, false);
		if (rc < 0)
			return rc;
		rc = client_handle_packet(c, rc, id, result, &done);
		if (rc < 0 && done)
			return rc;
	}
	return 0;
}

/* How long a blocking call of @method polls for its reply before it sleeps. */
static unsigned spin_for(const struct xfer_client *c, const char *method)
{
	if (c->spin_us != CLIENT_SPIN_UNSET)
		return c->spin_us;
	if (!strcmp(method, "region.register") || !strcmp(method, "region.deregister"))
		return CLIENT_SPIN_QUICK_US;
	return 0;
}

/* Waits for the reply to request @id (@method), sent already: what client_request() does next. */
static int client_request_sent(struct xfer_client *c, const char *method, int64_t id,
			       json_t **result)
{
	int rc;

	if (result)
		*result = NULL;
	c->wait_spin_us = spin_for(c, method);
	rc = client_await(c, id, result);
	c->wait_spin_us = 0;
	return rc;
}

/*
 * One request/reply round trip. Consumes @params, borrows @fd (-1: none). Returns 0 and
 * *result (a new reference the caller drops; @result may be NULL), or -errno with
 * xfer_last_error() saying why.
 */
static int client_request(struct xfer_client *c, const char *method, json_t *params, int fd,
			  json_t **result)
{
	int64_t id;
	int rc;

	if (result)
		*result = NULL;
	rc = client_send(c, method, params, fd, 0, &id);
	if (rc < 0)
		return rc;
	return client_request_sent(c, method, id, result);
}

/* Reads the non-negative integer @key of a result. Returns 0 or -EPROTO. */
static int result_u64(struct xfer_client *c, const json_t *result, const char *key, uint64_t *out)
{
	if (xp_get_u64(result, key, out) == 0)
		return 0;
	client_set_error(c, "xferd's reply lacks a valid \"%s\"", key);
	return -EPROTO;
}

/* ------------------------------------------------------------------------------------------ */
/* Session */

static const char *client_socket_path(const char *path)
{
	const char *env;

	if (path)
		return path;
	env = secure_getenv(XP_SOCKET_ENV);
	return env && *env ? env : XP_DEFAULT_SOCKET;
}

/* Opens the control socket and connects it to @path. Returns 0 or -errno. */
static int client_dial(struct xfer_client *c, const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t len = strlen(path);

	if (len == 0)
		return -EINVAL;
	if (len >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, len + 1);
	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->sock < 0)
		return -errno;
	if (connect(c->sock, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		return -errno;
	return 0;
}

/*
 * A daemon over its connection limits sends one error and closes at accept; if that was before
 * our hello went out, the send failed (EPIPE) and the error still waits unread. Returns its
 * -errno (the message kept for xfer_last_error()), or @rc when there is none.
 */
static int client_refusal(struct xfer_client *c, int rc)
{
	char saved[sizeof(c->last_error)];
	struct xp_reply rep;
	int len;

	copy_str(saved, sizeof(saved), c->last_error);
	len = client_recv(c, true);
	if (len >= 0 && xp_reply_parse(c->rxbuf, (size_t)len, &rep) == 0 && !rep.result &&
	    rep.id == XP_ID_NONE)
		rc = client_reply_error(c, &rep);
	else
		copy_str(c->last_error, sizeof(c->last_error), saved);
	if (len >= 0)
		xp_reply_fini(&rep);
	return rc;
}

/* Says hello as @name and records the connection id. Returns 0 or -errno. */
static int client_hello(struct xfer_client *c, const char *name)
{
	json_t *params, *result, *jname;
	uint64_t version;
	int rc;

	jname = json_string(name);
	if (!jname)
		return -EINVAL; /* not UTF-8 */
	params = json_pack("{s:i, s:o}", "version", XP_PROTO_VERSION, "client", jname);
	if (!params)
		return -ENOMEM;
	rc = client_request(c, "hello", params, -1, &result);
	if (rc == -ECONNRESET)
		rc = client_refusal(c, rc);
	if (rc < 0)
		return rc;
	rc = result_u64(c, result, "client", &c->id);
	if (!rc && xp_get_u64(result, "version", &version) == 0 && version != XP_PROTO_VERSION)
		rc = -EPROTONOSUPPORT;
	json_decref(result);
	return rc;
}

XFER_EXPORT int xfer_connect(const char *socket_path, const char *name, struct xfer_client **out)
{
	struct xfer_client *c;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	c = client_create();
	if (!c)
		return -ENOMEM;
	rc = client_dial(c, client_socket_path(socket_path));
	if (rc < 0)
		goto err_destroy;
	rc = client_hello(c, name ? name : CLIENT_DEFAULT_NAME);
	if (rc < 0)
		goto err_destroy;
	*out = c;
	return 0;

err_destroy:
	client_destroy(c);
	return rc;
}

XFER_EXPORT void xfer_close(struct xfer_client *c)
{
	if (!c)
		return;
	if (c->delivering) {
		/* Called from the callback: client_deliver() frees @c once the callback returns. */
		c->close_pending = true;
		close(c->sock);
		c->sock = -1;
		return;
	}
	client_destroy(c);
}

XFER_EXPORT const char *xfer_strerror(int err)
{
	const char *s;

	if (err == INT_MIN)
		return "Unknown error";
	if (err < 0)
		err = -err;
	if (err == 0)
		return "Success";
#if XFER_HAVE_STRERRORDESC
	/* Static storage and no locale lookup, unlike strerror(): safe from any thread. */
	s = strerrordesc_np(err);
#else
	/* musl's strerror() returns static strings and is thread-safe. */
	s = strerror(err);
#endif
	return s ? s : "Unknown error";
}

XFER_EXPORT const char *xfer_last_error(const struct xfer_client *c)
{
	return c ? c->last_error : "";
}

XFER_EXPORT uint64_t xfer_client_id(const struct xfer_client *c)
{
	return c ? c->id : 0;
}

XFER_EXPORT int xfer_set_spin(struct xfer_client *c, unsigned spin_us)
{
	if (!c || spin_us > XFER_SPIN_MAX_US)
		return -EINVAL;
	c->spin_us = spin_us;
	return 0;
}

XFER_EXPORT int xfer_get_fd(const struct xfer_client *c)
{
	return c ? c->sock : -EINVAL;
}

XFER_EXPORT void xfer_set_event_cb(struct xfer_client *c, xfer_event_cb cb, void *arg)
{
	if (!c)
		return;
	c->cb = cb;
	c->cb_arg = arg;
}

XFER_EXPORT void xfer_set_batch_cb(struct xfer_client *c, xfer_batch_cb cb, void *arg)
{
	if (!c)
		return;
	c->bcb = cb;
	c->bcb_arg = arg;
}

XFER_EXPORT void xfer_set_window_cb(struct xfer_client *c, xfer_window_cb cb, void *arg)
{
	if (!c)
		return;
	c->wcb = cb;
	c->wcb_arg = arg;
}

/* ------------------------------------------------------------------------------------------ */
/* Buffers */

XFER_EXPORT int xfer_buf_alloc(size_t length, struct xfer_buf *buf)
{
	void *addr;
	int fd, rc;

	if (!buf)
		return -EINVAL;
	buf->addr = NULL;
	buf->length = 0;
	buf->fd = -1;
	if (length == 0)
		return -EINVAL;
	if (length > (size_t)INT64_MAX)
		return -EFBIG;
	fd = memfd_create("xferclient", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)length) < 0)
		goto err_errno;
	/* Sealed before anyone maps it: the daemon's mapping can then never SIGBUS. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		goto err_errno;
	addr = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (addr == MAP_FAILED)
		goto err_errno;
	buf->addr = addr;
	buf->length = length;
	buf->fd = fd;
	return 0;

err_errno:
	rc = -errno;
	close(fd);
	return rc;
}

XFER_EXPORT void xfer_buf_free(struct xfer_buf *buf)
{
	/* addr says whether @buf is live: a zeroed struct has fd 0, which is not ours to close. */
	if (!buf || !buf->addr)
		return;
	munmap(buf->addr, buf->length);
	if (buf->fd >= 0)
		close(buf->fd);
	buf->addr = NULL;
	buf->length = 0;
	buf->fd = -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Regions */

/* Adds integer @key = @v to @obj. Returns 0, -EINVAL past JSON's int64 range, or -ENOMEM. */
static int obj_set_u64(json_t *obj, const char *key, uint64_t v)
{
	if (v > INT64_MAX)
		return -EINVAL;
	return json_object_set_new(obj, key, json_integer((json_int_t)v)) ? -ENOMEM : 0;
}

static int region_register_params(uint64_t offset, uint64_t length, const char *name, json_t **out)
{
	json_t *params = json_object();
	int rc = params ? 0 : -ENOMEM;

	if (!rc && name)
		rc = json_object_set_new(params, "name", json_string(name)) ? -EINVAL : 0;
	if (!rc)
		rc = obj_set_u64(params, "offset", offset);
	if (!rc && length)
		rc = obj_set_u64(params, "length", length);
	if (rc < 0) {
		json_decref(params);
		return rc;
	}
	*out = params;
	return 0;
}

#define REGION_FILE (1u << 31) /* region_register(): a file region (XFER_FILE_* below it) */

static int region_register(struct xfer_client *c, int fd, uint64_t offset, uint64_t length,
			   const char *name, unsigned kind, uint64_t *region)
{
	json_t *params, *result;
	int rc;

	if (fd < 0) {
		client_set_error(c, "region.register needs an open memfd or file");
		return -EBADF;
	}
	rc = region_register_params(offset, length, name, &params);
	if (!rc && (kind & REGION_FILE) &&
	    (json_object_set_new(params, "kind", json_string("file")) ||
	     ((kind & XFER_FILE_SYNC) && json_object_set_new(params, "sync", json_true())))) {
		json_decref(params);
		client_set_error(c, "out of memory");
		return -ENOMEM;
	}
	if (rc < 0) {
		/* json_string() refuses invalid UTF-8: the name is the only string here. */
		client_set_error(c, "region name must be UTF-8 and offsets at most 2^63-1");
		return rc;
	}
	rc = client_request(c, "region.register", params, fd, &result);
	if (rc < 0)
		return rc;
	rc = result_u64(c, result, "region", region);
	json_decref(result);
	return rc;
}

XFER_EXPORT int xfer_region_register(struct xfer_client *c, int fd, uint64_t offset,
				     uint64_t length, const char *name, uint64_t *region)
{
	uint64_t id;
	int rc;

	if (!c)
		return -EINVAL;
	rc = region_register(c, fd, offset, length, name, 0, &id);
	if (!rc && region)
		*region = id;
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_region_register_file(struct xfer_client *c, int fd, uint64_t offset,
					  uint64_t length, unsigned flags, const char *name,
					  uint64_t *region)
{
	uint64_t id;
	int rc;

	if (!c || (flags & ~(unsigned)XFER_FILE_SYNC))
		return -EINVAL;
	rc = region_register(c, fd, offset, length, name, REGION_FILE | flags, &id);
	if (!rc && region)
		*region = id;
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_region_deregister(struct xfer_client *c, uint64_t region, int force)
{
	json_t *params;
	int rc;

	if (!c)
		return -EINVAL;
	if (region > INT64_MAX)
		return client_finish(c, -ENOENT);
	params = json_pack("{s:I, s:b}", "region", (json_int_t)region, "force", force != 0);
	rc = params ? client_request(c, "region.deregister", params, -1, NULL) : -ENOMEM;
	return client_finish(c, rc);
}

/* ------------------------------------------------------------------------------------------ */
/* Operations */

static int descs_build(const struct xfer_desc *descs, size_t n, json_t **out)
{
	json_t *arr = json_array();
	json_t *d;
	int rc = arr ? 0 : -ENOMEM;

	for (size_t i = 0; !rc && i < n; i++) {
		d = json_object();
		if (!d)
			rc = -ENOMEM;
		if (!rc)
			rc = obj_set_u64(d, "region", descs[i].region);
		if (!rc)
			rc = obj_set_u64(d, "offset", descs[i].offset);
		if (!rc)
			rc = obj_set_u64(d, "length", descs[i].length);
		if (json_array_append_new(arr, d) && !rc)
			rc = -ENOMEM;
	}
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

static const char *op_params_error(int rc)
{
	switch (rc) {
	case -ENOMEM:
		return "out of memory";
	case -EBADMSG:
		return "metadata is not a valid xfer1. string";
	default:
		return "descriptor values must be at most 2^63-1";
	}
}

/*
 * Builds the params of op.readable/writable/read/write: the descriptors, the options, and
 * @metadata when not NULL. Returns 0 and *out, or -errno with last_error set.
 */
static int op_params(struct xfer_client *c, const char *metadata, const struct xfer_desc *descs,
		     size_t n, const struct xfer_op_opts *opts, json_t **out)
{
	json_t *params, *arr;
	int rc;

	if ((n && !descs) || n > XP_MAX_DESCS) {
		client_set_error(c, "an operation has 1 to %d descriptors", XP_MAX_DESCS);
		return -EINVAL;
	}
	const unsigned known = XFER_OP_RELEASE_ON_END | XFER_OP_NOWAIT | XFER_OP_END_ONLY;

	if (opts && (opts->flags & ~known)) {
		client_set_error(c, "unknown operation flags %#x", opts->flags & ~known);
		return -EINVAL;
	}
	if (opts && (opts->flags & XFER_OP_NOWAIT) && !metadata) {
		client_set_error(c, "XFER_OP_NOWAIT is for xfer_read and xfer_write only");
		return -EINVAL;
	}
	params = json_object();
	if (!params)
		return -ENOMEM;
	rc = descs_build(descs, n, &arr);
	if (!rc && json_object_set_new(params, "descs", arr))
		rc = -ENOMEM;
	if (!rc && opts && opts->timeout_ms)
		rc = obj_set_u64(params, "timeout_ms", opts->timeout_ms);
	if (!rc && opts && (opts->flags & XFER_OP_RELEASE_ON_END) &&
	    json_object_set_new(params, "release_on_end", json_true()))
		rc = -ENOMEM;
	if (!rc && opts && (opts->flags & XFER_OP_NOWAIT) &&
	    json_object_set_new(params, "nowait", json_true()))
		rc = -ENOMEM;
	if (!rc && opts && (opts->flags & XFER_OP_END_ONLY) &&
	    json_object_set_new(params, "end_only", json_true()))
		rc = -ENOMEM;
	if (!rc && metadata && json_object_set_new(params, "metadata", json_string(metadata)))
		rc = -EBADMSG; /* not UTF-8, so it cannot be metadata */
	if (rc < 0) {
		json_decref(params);
		client_set_error(c, "%s", op_params_error(rc));
		return rc;
	}
	*out = params;
	return 0;
}

/* Copies string @key of @result into a malloc'd *out. Returns 0, -EPROTO or -ENOMEM. */
static int result_strdup(struct xfer_client *c, const json_t *result, const char *key, char **out)
{
	const char *s = json_string_value(json_object_get(result, key));

	if (!s) {
		client_set_error(c, "xferd's reply lacks a valid \"%s\"", key);
		return -EPROTO;
	}
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

/* Sends @method with @params (consumed) and reads {"op": N, "metadata": "..."} back. */
static int op_start(struct xfer_client *c, const char *method, json_t *params, uint64_t *op,
		    char **metadata)
{
	json_t *result;
	uint64_t id;
	char *meta = NULL;
	int rc;

	rc = client_request(c, method, params, -1, &result);
	if (rc < 0)
		return rc;
	rc = result_u64(c, result, "op", &id);
	if (!rc && metadata)
		rc = result_strdup(c, result, "metadata", &meta);
	json_decref(result);
	if (rc < 0)
		return rc;
	if (op)
		*op = id;
	if (metadata)
		*metadata = meta;
	return 0;
}

static int op_passive(struct xfer_client *c, const char *method, const struct xfer_desc *descs,
		      size_t n, const struct xfer_op_opts *opts, uint64_t *op, char **metadata)
{
	json_t *params;
	int rc;

	if (!c)
		return -EINVAL;
	if (metadata)
		*metadata = NULL;
	rc = op_params(c, NULL, descs, n, opts, &params);
	if (!rc)
		rc = op_start(c, method, params, op, metadata);
	return client_finish(c, rc);
}

static int op_active(struct xfer_client *c, const char *method, const char *metadata,
		     const struct xfer_desc *descs, size_t n, const struct xfer_op_opts *opts,
		     uint64_t *op)
{
	json_t *params;
	int rc;

	if (!c)
		return -EINVAL;
	if (!metadata) {
		client_set_error(c, "%s needs metadata", method);
		return client_finish(c, -EINVAL);
	}
	rc = op_params(c, metadata, descs, n, opts, &params);
	if (!rc)
		rc = op_start(c, method, params, op, NULL);
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_readable(struct xfer_client *c, const struct xfer_desc *descs, size_t n,
			      const struct xfer_op_opts *opts, uint64_t *op, char **metadata)
{
	return op_passive(c, "op.readable", descs, n, opts, op, metadata);
}

XFER_EXPORT int xfer_writable(struct xfer_client *c, const struct xfer_desc *descs, size_t n,
			      const struct xfer_op_opts *opts, uint64_t *op, char **metadata)
{
	return op_passive(c, "op.writable", descs, n, opts, op, metadata);
}

XFER_EXPORT int xfer_read(struct xfer_client *c, const char *metadata,
			  const struct xfer_desc *descs, size_t n, const struct xfer_op_opts *opts,
			  uint64_t *op)
{
	return op_active(c, "op.read", metadata, descs, n, opts, op);
}

XFER_EXPORT int xfer_write(struct xfer_client *c, const char *metadata,
			   const struct xfer_desc *descs, size_t n, const struct xfer_op_opts *opts,
			   uint64_t *op)
{
	return op_active(c, "op.write", metadata, descs, n, opts, op);
}

XFER_EXPORT void xfer_set_reply_cb(struct xfer_client *c, xfer_reply_cb cb, void *arg)
{
	if (c) {
		c->rcb = cb;
		c->rcb_arg = arg;
	}
}

/* The method xfer_post_op() sends for @kind, or NULL (last_error set) when it makes none. */
static const char *post_method(struct xfer_client *c, enum xfer_kind kind, const char *metadata)
{
	static const char *const methods[] = {
		[XFER_READABLE] = "op.readable",
		[XFER_WRITABLE] = "op.writable",
		[XFER_READ] = "op.read",
		[XFER_WRITE] = "op.write",
	};
	bool active = kind == XFER_READ || kind == XFER_WRITE;

	if ((unsigned)kind > XFER_WRITE) {
		client_set_error(c,
				 "xfer_post_op makes readables, writables, reads and writes, not "
				 "%s",
				 xfer_kind_name(kind));
		return NULL;
	}
	if (active != (metadata != NULL)) {
		client_set_error(c, active ? "%s needs metadata" : "%s takes no metadata",
				 methods[kind]);
		return NULL;
	}
	return methods[kind];
}

XFER_EXPORT int xfer_post_op(struct xfer_client *c, enum xfer_kind kind, const char *metadata,
			     const struct xfer_desc *descs, size_t n,
			     const struct xfer_op_opts *opts, uint64_t *request)
{
	const char *method;
	json_t *params;
	int64_t id;
	int rc;

	if (!c || !request)
		return -EINVAL;
	*request = 0;
	if (!c->rcb) {
		client_set_error(c, "xfer_post_op needs a reply callback (xfer_set_reply_cb): the "
				    "reply is the request's only answer");
		return client_finish(c, -EINVAL);
	}
	method = post_method(c, kind, metadata);
	rc = method ? op_params(c, metadata, descs, n, opts, &params) : -EINVAL;
	if (!rc)
		rc = client_send(c, method, params, -1, CLIENT_POSTED_OP, &id);
	if (!rc)
		*request = (uint64_t)id;
	return client_finish(c, rc);
}

/*
 * Sends @method {"op": @op[, "timeout_ms": @timeout_ms > 0]} and parses the operation object
 * it returns into @info (may be NULL). Returns 0 or -errno.
 */
static int op_call(struct xfer_client *c, const char *method, uint64_t op, int timeout_ms,
		   struct xfer_op_info *info)
{
	struct xfer_op_info tmp;
	json_t *params, *result;
	int rc;

	if (op > INT64_MAX) {
		client_set_error(c, "no operation %llu", (unsigned long long)op);
		return -ENOENT;
	}
	if (timeout_ms > 0)
		params = json_pack("{s:I, s:i}", "op", (json_int_t)op, "timeout_ms", timeout_ms);
	else
		params = json_pack("{s:I}", "op", (json_int_t)op);
	if (!params)
		return -ENOMEM;
	rc = client_request(c, method, params, -1, &result);
	if (rc < 0)
		return rc;
	rc = op_info_parse(result, info ? info : &tmp);
	json_decref(result);
	if (rc < 0)
		client_set_error(c, "xferd's reply to %s is not an operation object", method);
	return rc < 0 ? -EPROTO : 0;
}

/* A zero timeout polls once with op.status, which every daemon answers without waiting. */
static int op_poll(struct xfer_client *c, uint64_t op, struct xfer_op_info *info)
{
	struct xfer_op_info now;
	int rc;

	rc = op_call(c, "op.status", op, 0, &now);
	if (rc < 0)
		return rc;
	if (!xp_state_terminal((enum xp_state)now.state)) {
		client_set_error(c, "op %llu is still %s", (unsigned long long)op,
				 xfer_state_name(now.state));
		return -ETIMEDOUT;
	}
	if (info)
		*info = now;
	return 0;
}

XFER_EXPORT int xfer_wait(struct xfer_client *c, uint64_t op, int timeout_ms,
			  struct xfer_op_info *info)
{
	int rc;

	if (!c)
		return -EINVAL;
	if (timeout_ms == 0)
		rc = op_poll(c, op, info);
	else
		rc = op_call(c, "op.wait", op, timeout_ms, info);
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_status(struct xfer_client *c, uint64_t op, struct xfer_op_info *info)
{
	if (!c)
		return -EINVAL;
	return client_finish(c, op_call(c, "op.status", op, -1, info));
}

XFER_EXPORT int xfer_cancel(struct xfer_client *c, uint64_t op)
{
	if (!c)
		return -EINVAL;
	return client_finish(c, op_call(c, "op.cancel", op, -1, NULL));
}

XFER_EXPORT int xfer_release(struct xfer_client *c, uint64_t op)
{
	json_t *params;
	int rc;

	if (!c)
		return -EINVAL;
	if (op > INT64_MAX)
		return client_finish(c, -ENOENT);
	params = json_pack("{s:I}", "op", (json_int_t)op);
	rc = params ? client_request(c, "op.release", params, -1, NULL) : -ENOMEM;
	return client_finish(c, rc);
}

/* ------------------------------------------------------------------------------------------ */
/* Event loop integration and raw calls */

static bool event_is_end(const struct client_event *ev)
{
	return !ev->is_window && !ev->is_batch && xp_state_terminal((enum xp_state)ev->info.state);
}

/*
 * Reads waiting packets without blocking until one queues an operation's end. Returns 1 and
 * *at (the link that points to that end, the last event queued), 0 when the socket is empty
 * first, or -errno.
 */
static int client_drain_to_end(struct xfer_client *c, struct client_event ***at)
{
	bool done = false;
	int rc;

	for (;;) {
		struct client_event **tail = c->ev_tail;

		rc = client_recv(c, true);
		if (rc == -EAGAIN)
			return 0;
		if (rc < 0)
			return rc;
		client_handle_packet(c, rc, XP_ID_NONE, NULL, &done);
		if (*tail && event_is_end(*tail)) {
			*at = tail;
			return 1;
		}
	}
}

/* Reads every waiting packet without blocking (an end queued stays queued). 0 or -errno. */
static int client_drain(struct xfer_client *c)
{
	struct client_event **at;
	int rc;

	while ((rc = client_drain_to_end(c, &at)) == 1)
		;
	return rc;
}

XFER_EXPORT int xfer_dispatch(struct xfer_client *c)
{
	int rc, n;

	if (!c)
		return -EINVAL;
	rc = client_drain(c);
	n = client_deliver(c); /* may free @c when the callback closed it */
	return rc < 0 ? rc : n;
}

XFER_EXPORT int xfer_dispatch_end(struct xfer_client *c, struct xfer_op_info *end)
{
	struct client_event **at, *ev = NULL;
	int rc;

	if (!c || !end)
		return -EINVAL;
	/* Nested in a callback the outer delivery keeps the order; without one no end is queued. */
	if (c->delivering || !c->cb) {
		rc = xfer_dispatch(c);
		return rc < 0 ? rc : 0;
	}
	rc = client_drain_to_end(c, &at);
	if (rc == 1) {
		ev = *at; /* the last event: unlinked, it goes to the caller after the ones before */
		*at = NULL;
		c->ev_tail = at;
	}
	client_deliver(c); /* may free @c when the callback closed it */
	if (ev) {
		*end = ev->info;
		event_free(ev);
	}
	return rc;
}

/* Parses @params_json into an object. Returns 0 and *out (NULL for NULL), or -EINVAL. */
static int call_params(struct xfer_client *c, const char *params_json, json_t **out)
{
	json_error_t jerr;
	json_t *params;

	*out = NULL;
	if (!params_json)
		return 0;
	params = json_loads(params_json, JSON_REJECT_DUPLICATES, &jerr);
	if (!params) {
		client_set_error(c, "params are not valid JSON: %s", jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(params)) {
		json_decref(params);
		client_set_error(c, "params must be a JSON object");
		return -EINVAL;
	}
	*out = params;
	return 0;
}

static int call(struct xfer_client *c, const char *method, const char *params_json,
		char **result_json)
{
	json_t *params, *result;
	int rc;

	rc = call_params(c, params_json, &params);
	if (rc < 0)
		return rc;
	rc = client_request(c, method, params, -1, &result);
	if (rc < 0)
		return rc;
	if (result_json) {
		*result_json = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!*result_json)
			rc = -ENOMEM;
	}
	json_decref(result);
	return rc;
}

XFER_EXPORT int xfer_call(struct xfer_client *c, const char *method, const char *params_json,
			  char **result_json)
{
	if (!c)
		return -EINVAL;
	if (result_json)
		*result_json = NULL;
	if (!method) {
		client_set_error(c, "xfer_call needs a method");
		return client_finish(c, -EINVAL);
	}
	return client_finish(c, call(c, method, params_json, result_json));
}

/* ------------------------------------------------------------------------------------------ */
/* Windows */

XFER_EXPORT int xfer_window_create(struct xfer_client *c, uint64_t region, uint64_t offset,
				   uint64_t length, enum xfer_access access, unsigned flags,
				   uint64_t *window, char **metadata)
{
	json_t *params, *result;
	int rc;

	if (!c)
		return -EINVAL;
	if (metadata)
		*metadata = NULL;
	if (region > INT64_MAX || offset > INT64_MAX || length > INT64_MAX ||
	    (flags & ~XFER_WINDOW_ONE_OPENER) || xp_access_from_name(xp_access_name(access)) < 0) {
		client_set_error(c, "window values out of range or unknown flags/access");
		return client_finish(c, -EINVAL);
	}
	params = json_pack("{s:I, s:I, s:s, s:s}", "region", (json_int_t)region, "offset",
			   (json_int_t)offset, "access", xp_access_name(access), "openers",
			   flags & XFER_WINDOW_ONE_OPENER ? "one" : "many");
	if (params && length &&
	    json_object_set_new(params, "length", json_integer((json_int_t)length)))
		json_decref(params), params = NULL;
	rc = params ? client_request(c, "window.create", params, -1, &result) : -ENOMEM;
	if (rc == 0) {
		uint64_t id;
		char *meta = NULL;
		rc = result_u64(c, result, "window", &id);
		if (!rc && metadata)
			rc = result_strdup(c, result, "metadata", &meta);
		json_decref(result);
		if (!rc && window)
			*window = id;
		if (!rc && metadata)
			*metadata = meta;
	}
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_window_open(struct xfer_client *c, const char *metadata, uint64_t *handle,
				 uint64_t *length, enum xfer_access *access)
{
	json_t *params, *result;
	uint64_t id, len;
	int rc;

	if (!c)
		return -EINVAL;
	if (!metadata) {
		client_set_error(c, "window.open needs metadata");
		return client_finish(c, -EINVAL);
	}
	params = json_pack("{s:s}", "metadata", metadata);
	if (!params) {
		client_set_error(c, "metadata is not a valid xfer1. string");
		return client_finish(c, -EBADMSG);
	}
	rc = client_request(c, "window.open", params, -1, &result);
	if (rc == 0) {
		int a = xp_access_from_name(obj_str(result, "access"));
		rc = result_u64(c, result, "window", &id);
		if (!rc)
			rc = result_u64(c, result, "length", &len);
		json_decref(result);
		if (!rc && a < 0)
			rc = -EPROTO;
		if (!rc && handle)
			*handle = id;
		if (!rc && length)
			*length = len;
		if (!rc && access)
			*access = (enum xfer_access)a;
	}
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_window_close(struct xfer_client *c, uint64_t window)
{
	json_t *params;

	if (!c)
		return -EINVAL;
	if (window > INT64_MAX) {
		client_set_error(c, "no window %llu", (unsigned long long)window);
		return client_finish(c, -ENOENT);
	}
	params = json_pack("{s:I}", "window", (json_int_t)window);
	return client_finish(c, params ? client_request(c, "window.close", params, -1, NULL) :
					 -ENOMEM);
}

/* The params of an op.get/op.put. Returns 0 and *out, or -errno with last_error set. */
static int window_op_params(struct xfer_client *c, uint64_t handle, uint64_t offset,
			    const struct xfer_desc *descs, size_t n, const char *tag,
			    const struct xfer_op_opts *opts, json_t **out)
{
	json_t *params;
	int rc = op_params(c, NULL, descs, n, opts, &params);

	if (rc)
		return rc;
	rc = obj_set_u64(params, "window", handle);
	if (!rc)
		rc = obj_set_u64(params, "offset", offset);
	if (!rc && tag && json_object_set_new(params, "tag", json_string(tag)))
		rc = -EINVAL; /* not UTF-8 */
	if (rc) {
		json_decref(params);
		client_set_error(c, "window, offset or tag out of range");
		return rc;
	}
	*out = params;
	return 0;
}

static int window_op(struct xfer_client *c, const char *method, uint64_t handle, uint64_t offset,
		     const struct xfer_desc *descs, size_t n, const char *tag,
		     const struct xfer_op_opts *opts, uint64_t *op)
{
	json_t *params;
	int rc;

	if (!c)
		return -EINVAL;
	rc = window_op_params(c, handle, offset, descs, n, tag, opts, &params);
	if (!rc)
		rc = op_start(c, method, params, op, NULL);
	return client_finish(c, rc);
}

XFER_EXPORT int xfer_put(struct xfer_client *c, uint64_t handle, uint64_t offset,
			 const struct xfer_desc *descs, size_t n, const char *tag,
			 const struct xfer_op_opts *opts, uint64_t *op)
{
	return window_op(c, "op.put", handle, offset, descs, n, tag, opts, op);
}

XFER_EXPORT int xfer_get(struct xfer_client *c, uint64_t handle, uint64_t offset,
			 const struct xfer_desc *descs, size_t n, const char *tag,
			 const struct xfer_op_opts *opts, uint64_t *op)
{
	return window_op(c, "op.get", handle, offset, descs, n, tag, opts, op);
}

/* The method of a pairing entry: "op.readable", "op.writable", "op.read" or "op.write". */
static const char *pairing_method(enum xfer_kind kind)
{
	switch (kind) {
	case XFER_READABLE:
		return "op.readable";
	case XFER_WRITABLE:
		return "op.writable";
	case XFER_READ:
		return "op.read";
	default:
		return "op.write";
	}
}

/* A compact entry's descriptors [[region, offset, length], ...], or NULL (the error set). */
static json_t *compact_descs(struct xfer_client *c, const struct xfer_batch_op *o, size_t i)
{
	json_t *descs = json_array();

	if (!o->descs || o->n == 0 || o->n > XP_MAX_DESCS) {
		client_set_error(c, "batch entry %zu: 1 to %d descriptors, values below 2^63", i,
				 XP_MAX_DESCS);
		json_decref(descs);
		return NULL;
	}
	for (size_t k = 0; descs && k < o->n; k++) {
		const struct xfer_desc *d = &o->descs[k];
		if (d->region > INT64_MAX || d->offset > INT64_MAX || d->length > INT64_MAX ||
		    json_array_append_new(descs, json_pack("[I, I, I]", (json_int_t)d->region,
							   (json_int_t)d->offset,
							   (json_int_t)d->length))) {
			client_set_error(c, "batch entry %zu: descriptor values must be below 2^63",
					 i);
			json_decref(descs);
			return NULL;
		}
	}
	if (!descs)
		client_set_error(c, "out of memory");
	return descs;
}

/*
 * A compact pairing entry (PROTOCOL.md §5.2): ["readable" | "writable", descs] or ["read" |
 * "write", metadata, descs], descs [[region, offset, length], ...]: the daemon reads it in
 * place, without the objects of the long form (a third of the daemon's work per entry).
 */
static json_t *pairing_batch_entry(struct xfer_client *c, const struct xfer_batch_op *o, size_t i)
{
	bool active = o->kind == XFER_READ || o->kind == XFER_WRITE;
	const char *name = pairing_method(o->kind) + strlen("op.");
	json_t *descs, *e;

	if (active && !o->metadata) {
		client_set_error(c, "batch entry %zu: a read or write needs metadata", i);
		return NULL;
	}
	if (!(descs = compact_descs(c, o, i)))
		return NULL;
	e = active ? json_pack("[s, s, o]", name, o->metadata, descs) :
		     json_pack("[s, o]", name, descs);
	if (!e)
		client_set_error(c, "batch entry %zu: the metadata is not UTF-8", i);
	return e;
}

/* One compact entry: ["get" | "put", handle, offset, [[region, offset, length], ...], tag?]. */
static json_t *window_batch_entry(struct xfer_client *c, const struct xfer_batch_op *o, size_t i)
{
	json_t *descs, *e;

	if (o->handle > INT64_MAX || o->offset > INT64_MAX) {
		client_set_error(c, "batch entry %zu: handle and offset must be below 2^63", i);
		return NULL;
	}
	if (!(descs = compact_descs(c, o, i)))
		return NULL;
	e = json_pack("[s, I, I, o]", o->kind == XFER_GET ? "get" : "put", (json_int_t)o->handle,
		      (json_int_t)o->offset, descs);
	if (e && o->tag && json_array_append_new(e, json_string(o->tag))) {
		client_set_error(c, "batch entry %zu: the tag is not UTF-8", i);
		json_decref(e);
		return NULL;
	}
	return e;
}

static json_t *batch_entry(struct xfer_client *c, const struct xfer_batch_op *o, size_t i)
{
	switch (o->kind) {
	case XFER_GET:
	case XFER_PUT:
		return window_batch_entry(c, o, i);
	case XFER_READABLE:
	case XFER_WRITABLE:
	case XFER_READ:
	case XFER_WRITE:
		return pairing_batch_entry(c, o, i);
	default:
		client_set_error(c, "batch entry %zu: unknown kind %d", i, (int)o->kind);
		return NULL;
	}
}

/* Refuses flags xfer_batch() does not know. Returns 0 or -EINVAL. */
static int batch_flags_check(struct xfer_client *c, const struct xfer_op_opts *opts)
{
	const unsigned known = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT | XFER_OP_END_ONLY |
			       XFER_OP_POST;

	if (opts && (opts->flags & ~known)) {
		client_set_error(c, "unknown batch flags %#x", opts->flags & ~known);
		return -EINVAL;
	}
	return 0;
}

static int batch_params(struct xfer_client *c, const struct xfer_batch_op *ops, size_t n,
			const struct xfer_op_opts *opts, json_t **out)
{
	json_t *arr = json_array();
	int rc = arr ? batch_flags_check(c, opts) : -ENOMEM;

	for (size_t i = 0; !rc && i < n; i++) {
		json_t *e = batch_entry(c, &ops[i], i);
		if (!e || json_array_append_new(arr, e))
			rc = -EINVAL;
	}
	if (rc) {
		json_decref(arr);
		return rc;
	}
	*out = json_pack("{s:o, s:b, s:s}", "ops", arr, "release_on_end",
			 opts && (opts->flags & XFER_OP_RELEASE_ON_END), "event",
			 opts && (opts->flags & XFER_OP_BATCH_EVENT) ? "batch" : "each");
	if (*out && opts && opts->timeout_ms &&
	    json_object_set_new(*out, "timeout_ms", json_integer(opts->timeout_ms))) {
		json_decref(*out);
		*out = NULL;
	}
	if (*out && opts && (opts->flags & XFER_OP_END_ONLY) &&
	    json_object_set_new(*out, "end_only", json_true())) {
		json_decref(*out);
		*out = NULL;
	}
	if (*out && opts && (opts->flags & XFER_OP_POST) &&
	    json_object_set_new(*out, "reply", json_false())) {
		json_decref(*out);
		*out = NULL;
	}
	return *out ? 0 : -ENOMEM;
}

/*
 * Fills ops[i].op (and the metadata of passive entries) from {"results": [...], "failed"?,
 * "message"?}; returns how many.
 */
static size_t batch_results(struct xfer_client *c, const json_t *result, struct xfer_batch_op *ops,
			    size_t n)
{
	const json_t *arr = json_object_get(result, "results");
	size_t i;

	for (i = 0; i < n && i < json_array_size(arr); i++) {
		const json_t *r = json_array_get(arr, i);
		if (xp_get_u64(r, "op", &ops[i].op) < 0)
			break;
		if ((ops[i].kind == XFER_READABLE || ops[i].kind == XFER_WRITABLE) &&
		    result_strdup(c, r, "metadata", &ops[i].made_metadata) < 0)
			break;
	}
	return i;
}

/* What XFER_OP_POST asks of a batch: its event is its answer, and no entry needs a reply. */
static int batch_post_check(struct xfer_client *c, const struct xfer_batch_op *ops, size_t n,
			    const struct xfer_op_opts *opts)
{
	if (!(opts->flags & XFER_OP_BATCH_EVENT)) {
		client_set_error(
			c, "XFER_OP_POST needs XFER_OP_BATCH_EVENT (the event is the answer)");
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (ops[i].kind == XFER_READABLE || ops[i].kind == XFER_WRITABLE) {
			client_set_error(c,
					 "batch entry %zu: a posted batch carries no readable or "
					 "writable (their metadata comes in a reply)",
					 i);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * A posted batch went out as request @id (@rc 0) or failed (@rc < 0): its entries have no op ids
 * (their ends say them), and *batch is the id its op.batch_done carries. Returns @rc.
 */
static int batch_posted(struct xfer_batch_op *ops, size_t n, int rc, int64_t id, uint64_t *batch)
{
	for (size_t i = 0; i < n; i++)
		ops[i].op = 0;
	if (!rc && batch)
		*batch = (uint64_t)id;
	return rc;
}

/* ---- small batches written straight as text ---- */

#define BATCH_TEXT_MAX 8192 /* a batch whose text may be longer goes through jansson */

/* Whether @s is written as it is between quotes: printable ASCII, no '"' and no backslash. */
static bool text_plain(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e || *s == '"' || *s == '\\')
			return false;
	return true;
}

/*
 * The text bytes entry @o may take beyond its descriptors, or 0 when it must take the long way:
 * a get or put with a handle or offset from 2^63 or a tag to escape, a read or write without
 * metadata or with metadata to escape (base64url never needs it), an unknown kind.
 */
static size_t entry_text_bound(const struct xfer_batch_op *o)
{
	switch (o->kind) {
	case XFER_GET:
	case XFER_PUT:
		if (o->handle > INT64_MAX || o->offset > INT64_MAX ||
		    (o->tag && !text_plain(o->tag)))
			return 0;
		return 64 + (o->tag ? strlen(o->tag) + 4 : 0);
	case XFER_READABLE:
	case XFER_WRITABLE:
		return 32;
	case XFER_READ:
	case XFER_WRITE:
		return o->metadata && text_plain(o->metadata) ? 32 + strlen(o->metadata) : 0;
	default:
		return 0;
	}
}

/*
 * Whether a batch may be written as text by batch_text(): every value one the long way accepts
 * (below 2^63, 1 to XP_MAX_DESCS descriptors), strings plain (entry_text_bound()), and the whole
 * at most BATCH_TEXT_MAX bytes. Anything else takes the long way, which names what is wrong.
 */
static bool batch_text_fits(const struct xfer_batch_op *ops, size_t n)
{
	size_t bound = 256; /* the envelope and the batch's options */

	for (size_t i = 0; i < n; i++) {
		const struct xfer_batch_op *o = &ops[i];
		size_t more = entry_text_bound(o);
		if (!more || !o->descs || o->n == 0 || o->n > XP_MAX_DESCS)
			return false;
		bound += more + o->n * 66;
		if (bound > BATCH_TEXT_MAX)
			return false;
		for (size_t k = 0; k < o->n; k++)
			if (o->descs[k].region > INT64_MAX || o->descs[k].offset > INT64_MAX ||
			    o->descs[k].length > INT64_MAX)
				return false;
	}
	return true;
}

/* The entry's head: "get",handle,offset or "readable" or "read","metadata" (then a comma). */
static void entry_text_head(struct xp_text *t, const struct xfer_batch_op *o)
{
	if (o->kind == XFER_GET || o->kind == XFER_PUT) {
		xp_text_put(t, o->kind == XFER_GET ? "get\"," : "put\",");
		xp_text_u64(t, o->handle);
		xp_text_put(t, ",");
		xp_text_u64(t, o->offset);
		xp_text_put(t, ",");
		return;
	}
	xp_text_put(t, pairing_method(o->kind) + strlen("op."));
	xp_text_put(t, "\",");
	if (o->kind == XFER_READ || o->kind == XFER_WRITE) {
		xp_text_put(t, "\"");
		xp_text_put(t, o->metadata);
		xp_text_put(t, "\",");
	}
}

/*
 * Writes request @id, op.batch of @ops (batch_text_fits()), into @t: the bytes jansson's compact
 * dump of batch_params()'s object gives (tests/test_batch_text.c compares them), without
 * building and freeing a dozen objects per entry (a third of a pipelining client's CPU at 4 KiB
 * gets and puts; for pairings, json_pack() and the dump were ~18% of the client's and daemon's
 * CPU together in local 4 KiB pairings in batches of 8).
 */
static void batch_text(struct xp_text *t, int64_t id, const struct xfer_batch_op *ops, size_t n,
		       const struct xfer_op_opts *opts)
{
	uint32_t flags = opts ? opts->flags : 0;

	xp_text_put(t, "{\"jsonrpc\":\"2.0\",\"id\":");
	xp_text_u64(t, (uint64_t)id);
	xp_text_put(t, ",\"method\":\"op.batch\",\"params\":{\"ops\":[");
	for (size_t i = 0; i < n; i++) {
		const struct xfer_batch_op *o = &ops[i];
		xp_text_put(t, i ? ",[\"" : "[\"");
		entry_text_head(t, o);
		xp_text_put(t, "[");
		for (size_t k = 0; k < o->n; k++) {
			xp_text_put(t, k ? ",[" : "[");
			xp_text_u64(t, o->descs[k].region);
			xp_text_put(t, ",");
			xp_text_u64(t, o->descs[k].offset);
			xp_text_put(t, ",");
			xp_text_u64(t, o->descs[k].length);
			xp_text_put(t, "]");
		}
		xp_text_put(t, "]");
		if ((o->kind == XFER_GET || o->kind == XFER_PUT) && o->tag) {
			xp_text_put(t, ",\"");
			xp_text_put(t, o->tag);
			xp_text_put(t, "\"");
		}
		xp_text_put(t, "]");
	}
	xp_text_put(t, (flags & XFER_OP_RELEASE_ON_END) ? "],\"release_on_end\":true" :
							  "],\"release_on_end\":false");
	xp_text_put(t,
		    (flags & XFER_OP_BATCH_EVENT) ? ",\"event\":\"batch\"" : ",\"event\":\"each\"");
	if (opts && opts->timeout_ms) {
		xp_text_put(t, ",\"timeout_ms\":");
		xp_text_u64(t, opts->timeout_ms);
	}
	if (flags & XFER_OP_END_ONLY)
		xp_text_put(t, ",\"end_only\":true");
	if (flags & XFER_OP_POST)
		xp_text_put(t, ",\"reply\":false");
	xp_text_put(t, "}}");
}

/*
 * Sends op.batch of @ops as text when batch_text_fits() (flags already checked). Returns 0 and
 * the request's *id, -errno, or 1 when the batch must take the long way.
 */
static int batch_send_text(struct xfer_client *c, const struct xfer_batch_op *ops, size_t n,
			   const struct xfer_op_opts *opts, int64_t *id)
{
	char buf[BATCH_TEXT_MAX];
	struct xp_text t = { buf, sizeof(buf), 0 };
	bool posted = opts && (opts->flags & XFER_OP_POST);

	if (c->sock < 0 || !batch_text_fits(ops, n))
		return 1;
	*id = posted ? c->next_id | CLIENT_POSTED_ID : c->next_id;
	c->next_id = c->next_id + 1 < CLIENT_MAX_ID ? c->next_id + 1 : 1;
	batch_text(&t, *id, ops, n, opts);
	if (t.len > t.cap)
		return -EMSGSIZE; /* (a bug: batch_text_fits() bounds it) */
	return client_send_packet(c, buf, t.len, -1);
}

/*
 * Sends op.batch of @ops: as text when batch_text_fits(), else built with jansson. Returns 0 and
 * the request's *id, or -errno.
 */
static int batch_send(struct xfer_client *c, const struct xfer_batch_op *ops, size_t n,
		      const struct xfer_op_opts *opts, int64_t *id)
{
	bool posted = opts && (opts->flags & XFER_OP_POST);
	json_t *params;
	int rc = batch_flags_check(c, opts);

	if (!rc && (rc = batch_send_text(c, ops, n, opts, id)) > 0)
		rc = batch_params(c, ops, n, opts, &params) ?:
			     client_send(c, "op.batch", params, -1, posted ? CLIENT_POSTED_ID : 0,
					 id);
	return rc;
}

/*
 * Awaits op.batch request @id's reply: read straight into @ops (*@made, *@batch) when it is in
 * the daemon's own form and no entry needs more than its op id (a readable's or writable's
 * metadata does), else left to the caller in *@result. Returns 0 or -errno.
 */
static int batch_await(struct xfer_client *c, int64_t id, struct xfer_batch_op *ops, size_t n,
		       size_t *made, uint64_t *batch, json_t **result)
{
	struct batch_sink sink = { .id = id, .n = n };
	int rc;

	for (size_t i = 0; i < n && sink.n; i++)
		if (ops[i].kind == XFER_READABLE || ops[i].kind == XFER_WRITABLE || n > FAST_ENDS)
			sink.n = 0;
	c->sink = sink.n ? &sink : NULL;
	rc = client_request_sent(c, "op.batch", id, result);
	c->sink = NULL;
	if (rc || !sink.got)
		return rc;
	for (size_t i = 0; i < n; i++)
		ops[i].op = sink.ops[i];
	*made = n;
	if (batch)
		*batch = sink.batch;
	return 0;
}

XFER_EXPORT int xfer_batch(struct xfer_client *c, struct xfer_batch_op *ops, size_t n,
			   const struct xfer_op_opts *opts, size_t *done, uint64_t *batch)
{
	json_t *result = NULL;
	size_t made = 0;
	int64_t id = 0;
	int rc;

	if (!c)
		return -EINVAL;
	if (batch)
		*batch = 0;
	if (!ops || n == 0 || n > XP_MAX_BATCH) {
		client_set_error(c, "a batch has 1 to %d entries", XP_MAX_BATCH);
		rc = -EINVAL;
	} else if (opts && (opts->flags & XFER_OP_POST)) {
		rc = batch_post_check(c, ops, n, opts) ?: batch_send(c, ops, n, opts, &id);
		return client_finish(c, batch_posted(ops, n, rc, id, batch));
	} else if (!(rc = batch_send(c, ops, n, opts, &id))) {
		rc = batch_await(c, id, ops, n, &made, batch, &result);
	}
	if (!rc && result) {
		made = batch_results(c, result, ops, n);
		if (batch && xp_get_u64(result, "batch", batch) < 0)
			*batch = 0;
		if (json_object_get(result, "failed")) {
			rc = -(xp_errno_from_name(obj_str(result, "errno")) ?: EIO);
			client_set_error(c, "%s", obj_str(result, "message"));
		} else if (made != n) {
			client_set_error(c, "xferd's reply to op.batch lacks results");
			rc = -EPROTO;
		}
		json_decref(result);
	}
	if (done)
		*done = made;
	return client_finish(c, rc);
}

/* ------------------------------------------------------------------------------------------ */
/* Names */

XFER_EXPORT const char *xfer_state_name(enum xfer_state s)
{
	return xp_state_name((enum xp_state)s);
}

XFER_EXPORT const char *xfer_kind_name(enum xfer_kind k)
{
	return xp_kind_name((enum xp_kind)k);
}
