// SPDX-License-Identifier: MIT
/*
 * The control socket: the listener (bound, or taken from systemd), accepting with SO_PEERCRED,
 * reading one packet at a time, and each connection's queue of outgoing packets. A connection
 * is never freed inside its own callback: closing marks it and a reaper event frees it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "transport.h"

struct xd_outq_item {
	STAILQ_ENTRY(xd_outq_item) link;
	size_t len;
	char data[];
};

static int flush_queue(struct xd_conn *c);

/* Binds @path, replacing a stale socket file but never a live daemon's. */
static int bind_socket(const char *path, unsigned mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		xd_log(XD_LOG_ERR, "another daemon already listens on %s", path);
		return -EADDRINUSE;
	}
	unlink(path); /* stale: nobody answers */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, mode) < 0 ||
	    listen(fd, 128) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Takes the first packet of @c's queue off it, gives its bytes back and frees it. */
static void outq_pop(struct xd_conn *c)
{
	struct xd_outq_item *it = STAILQ_FIRST(&c->outq);

	STAILQ_REMOVE_HEAD(&c->outq, link);
	c->queued--;
	xd_uncharge(c->d, c->use, c->uid, XD_RES_QUEUED, it->len);
	free(it);
}

/* Drops what is still queued for @c (it will not be sent). */
static void outq_drop(struct xd_conn *c)
{
	while (!STAILQ_EMPTY(&c->outq))
		outq_pop(c);
}

static void conn_free(void *arg)
{
	struct xd_conn *c = arg;

	outq_drop(c);
	xd_event_free(c->rev);
	xd_event_free(c->wev);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

struct xd_conn *xd_conn_find(struct xd_daemon *d, uint64_t id)
{
	struct xd_conn *c;

	TAILQ_FOREACH(c, &d->conns, link)
		if (c->id == id)
			return c->closing ? NULL : c;
	return NULL;
}

/* xd_conn_close(), its log line at @level: a warning when the daemon cut the client. */
static void conn_close_at(struct xd_conn *c, int level, const char *why)
{
	if (c->closing)
		return;
	c->closing = true;
	xd_log(level, "client %llu (%s, pid %d, uid %u) closed: %s", (unsigned long long)c->id,
	       c->name, (int)c->pid, (unsigned)c->uid, why);
	event_del(c->rev);
	flush_queue(c); /* what is queued (an error naming why it closes) still goes, if it can */
	outq_drop(c);	/* the rest never will: its bytes go back to the uid's budget now */
	event_del(c->wev);
	xd_windows_conn_closed(c); /* (first: a window's ops end with its cause) */
	xd_ops_conn_closed(c);
	struct xd_region *r, *tmp;
	TAILQ_FOREACH_SAFE(r, &c->d->regions, link, tmp)
		if (r->owner == c)
			xd_region_release(r);
	TAILQ_REMOVE(&c->d->conns, c, link);
	if (c->subscribed)
		c->d->event_subscribers--;
	if (c->charged) /* last: the uid's entry stays while its regions and ops are refunded */
		xd_uncharge(c->d, NULL, c->uid, XD_RES_CLIENTS, 1);
	c->charged = false;
	/* Close the socket now so the client sees EOF at once; free the memory later. */
	close(c->fd);
	c->fd = -1;
	xd_defer(c->d, &c->free_later, conn_free, c);
}

void xd_conn_close(struct xd_conn *c, const char *why)
{
	conn_close_at(c, XD_LOG_INFO, why);
}

#define CTL_SEND_BATCH 64 /* packets given to one sendmmsg */

/*
 * Sends up to CTL_SEND_BATCH queued packets in one sendmmsg: the replies and events a loop turn
 * queued for @c (a batch's reply, the op.batch_done of every posted op that ended) cost one
 * system call, not one each. Returns packets sent, or -errno (-EAGAIN: the socket is full).
 */
static int send_queued(struct xd_conn *c)
{
	struct mmsghdr mm[CTL_SEND_BATCH];
	struct iovec iov[CTL_SEND_BATCH];
	struct xd_outq_item *it;
	unsigned n = 0;

	STAILQ_FOREACH(it, &c->outq, link) {
		if (n == CTL_SEND_BATCH)
			break;
		iov[n] = (struct iovec){ it->data, it->len };
		mm[n] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[n], .msg_iovlen = 1 } };
		n++;
	}
	int sent;
	do {
		sent = sendmmsg(c->fd, mm, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	} while (sent < 0 && errno == EINTR);
	if (sent < 0)
		return -errno;
	for (int i = 0; i < sent; i++) {
		it = STAILQ_FIRST(&c->outq);
		if (mm[i].msg_len != it->len)
			return -EMSGSIZE; /* (a SEQPACKET packet goes whole or not at all) */
		outq_pop(c);
	}
	return sent;
}

/* Sends queued packets until the socket is full. Returns 0 or -errno (not -EAGAIN). */
static int flush_queue(struct xd_conn *c)
{
	while (!STAILQ_EMPTY(&c->outq)) {
		int rc = send_queued(c);
		if (rc == -EAGAIN)
			break;
		if (rc < 0)
			return rc;
	}
	if (STAILQ_EMPTY(&c->outq))
		event_del(c->wev);
	else
		event_add(c->wev, NULL);
	/* conn_write_cb tells window.c: never from here, whose caller may be window.c sending. */
	if (c->notes_waiting && c->queued <= XD_NOTIFY_LOW)
		event_active(c->wev, EV_WRITE, 0);
	return 0;
}

/*
 * Closes @c from its own read callback at the next loop turn, logged at @level. Senders run deep
 * inside operation state changes; closing there would free operations under their feet.
 */
static void conn_close_later(struct xd_conn *c, int level, const char *why)
{
	if (!c->close_reason) {
		c->close_reason = why;
		c->close_level = level;
	}
	event_active(c->rev, EV_READ, 0);
}

void xd_conn_flush(struct xd_conn *c)
{
	if (!c->closing && !c->close_reason && flush_queue(c) < 0)
		conn_close_later(c, XD_LOG_INFO, "send failed (client gone)");
}

int xd_conn_send_text(struct xd_conn *c, const char *text, size_t len)
{
	char msg[160];
	int rc;

	if (c->closing || c->close_reason)
		return -ENOTCONN;
	/*
	 * Bounded in packets and in bytes (a reply can be 64 KiB, and 4096 of them 256 MiB), per
	 * connection and, for the bytes, per uid and in all (limits.c): what the daemon holds for
	 * clients that do not read is bounded however many connections a local user opens.
	 */
	if (c->queued >= XD_MAX_QUEUED) {
		conn_close_later(c, XD_LOG_WARN, "client stopped reading (4096 packets queued)");
		return -ENOBUFS;
	}
	rc = xd_charge(c->d, c->use, c->uid, XD_RES_QUEUED, len, msg, sizeof(msg));
	if (rc == -EDQUOT) {
		/* (xd_charge() named the limit: its scope, its size and what is in use) */
		snprintf(c->close_text, sizeof(c->close_text), "client stopped reading (%s)", msg);
		conn_close_later(c, XD_LOG_WARN, c->close_text);
		return -ENOBUFS;
	}
	if (rc < 0)
		return rc; /* (-ENOMEM, as a failed malloc of the packet below) */
	struct xd_outq_item *it = malloc(sizeof(*it) + len);
	if (!it) {
		xd_uncharge(c->d, c->use, c->uid, XD_RES_QUEUED, len);
		return -ENOMEM;
	}
	it->len = len;
	memcpy(it->data, text, len);
	STAILQ_INSERT_TAIL(&c->outq, it, link);
	c->queued++;
	if (c->queued > c->queued_max)
		c->queued_max = c->queued;
	/*
	 * Sent at the end of this loop turn (conn_write_cb, made active behind the callbacks
	 * already due), not now: what the turn queues for @c leaves in one sendmmsg, and the
	 * frames a request queued for a peer (tcp.c writes those the same way) leave first.
	 * A packet behind others waits for them: flush_queue() or epoll's writable brings it.
	 */
	if (c->queued == 1)
		event_active(c->wev, EV_WRITE, 0);
	return 0;
}

int xd_conn_send(struct xd_conn *c, const json_t *msg)
{
	char *text;

	if (c->closing || c->close_reason)
		return -ENOTCONN;
	int len = xp_dump(msg, &text);
	if (len < 0)
		return len;
	int rc = xd_conn_send_text(c, text, (size_t)len);
	free(text);
	return rc;
}

static void conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_conn *c = arg;

	if (flush_queue(c) < 0) {
		xd_conn_close(c, "send failed");
		return;
	}
	if (c->notes_waiting && c->queued <= XD_NOTIFY_LOW) {
		c->notes_waiting = false;
		xd_windows_conn_drained(c);
	}
}

/* A packet that breaks the framing rules: one error, then the connection is closed. */
static void protocol_violation(struct xd_conn *c, int err, const char *message)
{
	xd_reply_error(c, XP_ID_NONE, XP_E_INVALID_REQ, err, message);
	xd_conn_close(c, message);
}

/* Reads one packet. Returns true if the connection may be read again. */
static bool conn_read_one(struct xd_conn *c)
{
	char *buf = c->d->ctl_rxbuf;
	struct xp_fdset fds;
	int n = xp_packet_recv(c->fd, buf, sizeof(c->d->ctl_rxbuf), &fds, 1);

	if (n == -EAGAIN)
		return false;
	if (n == -EMSGSIZE)
		protocol_violation(c, EMSGSIZE, "packet exceeds 65536 bytes");
	else if (n == -ENOBUFS)
		protocol_violation(c, ENOBUFS, "control data truncated (too many fds)");
	else if (n < 0)
		xd_conn_close(c, n == -ECONNRESET ? "disconnected" : "receive failed");
	else
		c->d->ctl_dispatch(c, buf, (size_t)n, &fds);
	return !c->closing;
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_conn *c = arg;

	if (c->close_reason) {
		conn_close_at(c, c->close_level, c->close_reason);
		return;
	}
	uint64_t t0 = xd_now_us();

	/* A bounded batch per wakeup keeps one busy client from starving the others. */
	for (int i = 0; i < 16 && conn_read_one(c); i++)
		;
	xd_loop_note(c->d, t0, "the requests of a control connection", NULL);
}

static int conn_credentials(struct xd_conn *c)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->gid = cred.gid;
	return 0;
}

static struct xd_conn *conn_create(struct xd_daemon *d, int fd)
{
	struct xd_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		close(fd);
		return NULL;
	}
	c->d = d;
	c->fd = fd;
	c->id = ++d->next_client;
	c->created_us = xd_now_us();
	strcpy(c->name, "-");
	STAILQ_INIT(&c->outq);
	TAILQ_INIT(&c->waiters);
	c->rev = event_new(d->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
	c->wev = event_new(d->base, fd, EV_WRITE | EV_PERSIST, conn_write_cb, c);
	if (!c->rev || !c->wev || conn_credentials(c) < 0 || event_add(c->rev, NULL) < 0) {
		conn_free(c);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&d->conns, c, link);
	return c;
}

/*
 * Counts @c against the connection limits (per uid, global). Over them, @c gets one error
 * naming the limit and is closed, at accept rather than at hello: a refused connection then
 * never holds an fd, and a client that never says hello cannot take a place either. The
 * library reads the error as the answer to its hello. Returns false when @c was closed.
 */
static bool conn_charge(struct xd_conn *c)
{
	char msg[200];
	int rc = xd_charge(c->d, NULL, c->uid, XD_RES_CLIENTS, 1, msg, sizeof(msg));

	if (rc == 0) {
		c->charged = true;
		return true;
	}
	xd_reply_error(c, XP_ID_NONE, XP_E_FAILED, -rc, msg);
	xd_conn_close(c, msg);
	return false;
}

static void listen_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_daemon *d = arg;

	if (!d->stopping)
		event_add(d->listen_ev, NULL);
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct xd_daemon *d = arg;

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				/* Out of fds: pause accepting for a second instead of spinning. */
				struct timeval one = { 1, 0 };
				xd_log(XD_LOG_WARN, "accept: %s; pausing for 1 s", strerror(errno));
				event_del(d->listen_ev);
				event_base_once(d->base, -1, EV_TIMEOUT, listen_resume_cb, d, &one);
			}
			return;
		}
		struct xd_conn *c = conn_create(d, fd);
		if (c && conn_charge(c))
			xd_log(XD_LOG_DEBUG, "client %llu connected: pid %d uid %u",
			       (unsigned long long)c->id, (int)c->pid, (unsigned)c->uid);
	}
}

void xd_reply_result(struct xd_conn *c, int64_t id, json_t *result)
{
	json_t *msg = xp_build_result(id, result);

	if (msg)
		xd_conn_send(c, msg);
	json_decref(msg);
}

void xd_reply_error(struct xd_conn *c, int64_t id, int code, int err, const char *message)
{
	json_t *msg = xp_build_error(id, code, err, message);
	char ascii[512];

	if (!msg) {
		/*
		 * Messages quote client text cut to a length ("unknown method \"%.64s\""), which
		 * can split a UTF-8 sequence. jansson refuses such a string, and the request would
		 * get no reply at all: send it with every byte outside ASCII replaced instead.
		 */
		snprintf(ascii, sizeof(ascii), "%s", message);
		for (char *p = ascii; *p; p++)
			if ((unsigned char)*p >= 0x80)
				*p = '?';
		msg = xp_build_error(id, code, err, ascii);
	}
	if (msg)
		xd_conn_send(c, msg);
	json_decref(msg);
}

static void client_send(struct xd_conn *c, const json_t *msg)
{
	xd_conn_send(c, msg); /* a failure closes the connection: nothing for the sender to do */
}

static void client_send_text(struct xd_conn *c, const char *text, size_t len)
{
	xd_conn_send_text(c, text, len); /* (as client_send()) */
}

/* Hysteresis: once at XD_NOTIFY_HIGH, notifications wait till the queue is at XD_NOTIFY_LOW. */
static bool client_notes_wait(struct xd_conn *c)
{
	if (c->queued >= XD_NOTIFY_HIGH)
		c->notes_waiting = true;
	return c->notes_waiting;
}

static const struct xd_client_ops ctl_client_ops = {
	.send = client_send,
	.send_text = client_send_text,
	.reply = xd_reply_result,
	.reply_error = xd_reply_error,
	.find = xd_conn_find,
	.publish = xd_events_publish,
	.notes_wait = client_notes_wait,
};

int xd_ctl_start(struct xd_daemon *d, xd_packet_cb dispatch)
{
	int fd = xd_sd_listen_fd();

	if (fd >= 0) {
		d->listen_from_systemd = true;
		if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
		    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
			return -errno;
	} else if (fd == -ENOENT) {
		fd = bind_socket(d->cfg.socket_path, d->cfg.socket_mode);
	}
	if (fd < 0)
		return fd;
	d->listen_fd = fd;
	d->clients = &ctl_client_ops;
	d->ctl_dispatch = dispatch;
	/* (fds a client sent that no handler took: a FUSE file's close waits for its FLUSH) */
	xp_fdset_set_closer(xd_close_client_fd);
	d->listen_ev = event_new(d->base, fd, EV_READ | EV_PERSIST, accept_cb, d);
	if (!d->listen_ev || event_add(d->listen_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

void xd_ctl_stop_listening(struct xd_daemon *d)
{
	if (d->listen_ev)
		event_del(d->listen_ev);
	if (d->listen_fd >= 0) {
		close(d->listen_fd);
		d->listen_fd = -1;
		if (!d->listen_from_systemd)
			unlink(d->cfg.socket_path);
	}
}

bool xd_ctl_pending_output(struct xd_daemon *d)
{
	struct xd_conn *c;

	TAILQ_FOREACH(c, &d->conns, link)
		if (!STAILQ_EMPTY(&c->outq))
			return true;
	return false;
}

void xd_ctl_fini(struct xd_daemon *d)
{
	struct xd_conn *c;

	while ((c = TAILQ_FIRST(&d->conns)))
		xd_conn_close(c, "daemon stopping");
	xd_idmap_fini(&d->region_ids); /* (closing released every region: none is listed) */
	xd_defer_flush(d);
	xd_ctl_stop_listening(d);
	xd_event_free(d->listen_ev);
	d->listen_ev = NULL;
}
