// SPDX-License-Identifier: MIT
/*
 * events.subscribe (PROTOCOL.md §7) against a real xferd: a subscriber sees other clients'
 * operations created, started and ended; a subscriber that never reads costs the daemon at most
 * XD_EVENTS_MAX_QUEUED packets and is not cut off, and learns how many events it missed (every
 * event is either delivered or counted); at most 16 subscribers of users other than root, who
 * cannot lock root out; params refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define MAX_SUBSCRIBERS 16 /* XD_MAX_SUBSCRIBERS, for users other than root */
#define NOBODY 65534
#define MAX_QUEUED 64 /* XD_EVENTS_MAX_QUEUED */

struct seen {
	int events;
	int created, in_progress, complete, cancelled;
	uint64_t bytes_complete;
};

static void count_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct seen *s = arg;

	s->events++;
	s->created += info->state == XFER_INITIALIZED;
	s->in_progress += info->state == XFER_IN_PROGRESS;
	s->cancelled += info->state == XFER_CANCELLED;
	if (info->state == XFER_COMPLETE) {
		s->complete++;
		s->bytes_complete += info->bytes;
	}
}

/* Subscribes @c. Returns 0 or -errno; *dropped (if not NULL) is the daemon's count. */
static int subscribe(struct xfer_client *c, long long *dropped)
{
	char *text;
	int rc = xfer_call(c, "events.subscribe", NULL, &text);

	if (rc < 0)
		return rc;
	json_t *r = json_loads(text, 0, NULL);
	free(text);
	if (dropped)
		*dropped = json_integer_value(json_object_get(r, "dropped"));
	json_decref(r);
	return 0;
}

/* The daemon's resident memory, KiB, or -1. */
static long rss_kib(pid_t pid)
{
	return (long)td_status_kib(pid, "VmRSS");
}

/* Lets the daemon's events reach @c, then delivers them (a call returns after its reply). */
static void settle(struct xfer_client *c)
{
	CHECK_OK(subscribe(c, NULL));
}

/* A local readable/read pair of @len bytes moved between two clients; bytes checked. */
static void local_pair(struct td *d, size_t len)
{
	struct xfer_client *a, *b;
	struct xfer_buf src, dst;
	uint64_t ra, rb, pa, pb;
	struct xfer_op_info info;
	char *meta;

	CHECK_OK(xfer_connect(d->sock, "owner", &a));
	CHECK_OK(xfer_connect(d->sock, "reader", &b));
	CHECK_OK(xfer_buf_alloc(len, &src));
	CHECK_OK(xfer_buf_alloc(len, &dst));
	memset(src.addr, 0x5a, len);
	CHECK_OK(xfer_region_register(a, src.fd, 0, len, "src", &ra));
	CHECK_OK(xfer_region_register(b, dst.fd, 0, len, "dst", &rb));
	struct xfer_desc da = { ra, 0, len }, db = { rb, 0, len };
	CHECK_OK(xfer_readable(a, &da, 1, NULL, &pa, &meta));
	CHECK_OK(xfer_read(b, meta, &db, 1, NULL, &pb));
	CHECK_OK(xfer_wait(b, pb, 10000, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	CHECK_OK(xfer_wait(a, pa, 10000, &info));
	CHECK_MEM_EQ(src.addr, dst.addr, len);
	free(meta);
	xfer_close(a);
	xfer_close(b);
	xfer_buf_free(&src);
	xfer_buf_free(&dst);
}

/* A subscriber sees the creation, start and end of both sides of another client's transfer. */
TEST(subscriber_sees_other_clients_ops)
{
	struct td d;
	struct xfer_client *w;
	struct seen s = { 0 };

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "watcher", &w));
	xfer_set_event_cb(w, count_event, &s);
	CHECK_OK(subscribe(w, NULL));
	local_pair(&d, 1 << 20);
	settle(w);
	harness_note("%d events: %d created, %d in progress, %d complete", s.events, s.created,
		     s.in_progress, s.complete);
	CHECK(s.created >= 1); /* the readable (the read is IN_PROGRESS from the start) */
	CHECK_EQ_INT(s.complete, 2);
	CHECK(s.bytes_complete == 2u << 20);
	xfer_close(w);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/*
 * A subscriber that never reads while another client makes 2 x 4000 events: the daemon neither
 * cuts it off (its generic bound is 4096 unread packets) nor holds more than 64 events for it;
 * once it reads, every event is either delivered or counted as dropped.
 */
TEST_TIMEOUT(slow_subscriber_bounded, 120)
{
	enum { OPS = 4000 };
	struct td d;
	struct xfer_client *w, *g;
	struct xfer_buf buf;
	struct seen s = { 0 };
	uint64_t region, op;
	long long dropped = -1;
	char *meta;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "slow-watcher", &w));
	xfer_set_event_cb(w, count_event, &s);
	CHECK_OK(subscribe(w, NULL));
	CHECK_OK(xfer_connect(d.sock, "generator", &g));
	CHECK_OK(xfer_buf_alloc(4096, &buf));
	CHECK_OK(xfer_region_register(g, buf.fd, 0, 4096, "g", &region));
	struct xfer_desc desc = { region, 0, 4096 };
	long before = rss_kib(d.pid);
	for (int i = 0; i < OPS; i++) { /* each: created, then CANCELLED */
		CHECK_OK(xfer_readable(g, &desc, 1, NULL, &op, &meta));
		free(meta);
		CHECK_OK(xfer_cancel(g, op));
		CHECK_OK(xfer_release(g, op));
	}
	long after = rss_kib(d.pid);
	CHECK_OK(subscribe(w, &dropped)); /* still connected; delivers what was queued */
	harness_note("%d events delivered, %lld dropped of %d; RSS %ld -> %ld KiB", s.events,
		     dropped, 2 * OPS, before, after);
	CHECK_EQ_INT(s.events + (int)dropped, 2 * OPS);
	CHECK(dropped > 0);
	/* The daemon's queue (64) plus what the kernel's socket buffer holds. */
	CHECK(s.events < 2 * OPS / 4);
#ifndef __SANITIZE_ADDRESS__
	CHECK(after - before < 4 * 1024);
#endif
	/* Reading again, it gets events again. */
	int was = s.events;
	xfer_close(g);
	local_pair(&d, 4096);
	settle(w);
	CHECK(s.events > was);
	CHECK_OK(subscribe(w, &dropped));
	CHECK_EQ_INT(s.events + (int)dropped, 2 * OPS + (s.events - was));
	xfer_close(w);
	xfer_buf_free(&buf);
	CHECK_EQ_INT(td_stop(&d), 0);
}

struct cap_case {
	struct td *d;
	int ready[2]; /* the child writes a byte once it holds its 16 subscriptions */
};

/*
 * As nobody: 16 subscriptions, the 17th refused naming the cap, a closed one frees its place.
 * (Run as another user the test needs no switch.)
 */
static void cap_child(void *arg)
{
	struct cap_case *cc = arg;
	struct xfer_client *c[MAX_SUBSCRIBERS + 1];

	if (geteuid() == 0) {
		CHECK_OK(setgroups(0, NULL) < 0 ? -errno : 0);
		CHECK_OK(setgid(NOBODY) < 0 ? -errno : 0);
		CHECK_OK(setuid(NOBODY) < 0 ? -errno : 0);
	}
	for (int i = 0; i <= MAX_SUBSCRIBERS; i++)
		CHECK_OK(xfer_connect(cc->d->sock, "sub", &c[i]));
	for (int i = 0; i < MAX_SUBSCRIBERS; i++)
		CHECK_OK(subscribe(c[i], NULL));
	CHECK_OK(subscribe(c[0], NULL)); /* again: no second place taken */
	CHECK_ERR(subscribe(c[MAX_SUBSCRIBERS], NULL), -EDQUOT);
	harness_note("17th: %s", xfer_last_error(c[MAX_SUBSCRIBERS]));
	CHECK(strstr(xfer_last_error(c[MAX_SUBSCRIBERS]), "16") != NULL);
	xfer_close(c[3]);
	for (int tries = 0; subscribe(c[MAX_SUBSCRIBERS], NULL) < 0 && tries < 100; tries++)
		usleep(10000); /* the daemon sees the close at its next loop turn */
	CHECK_OK(subscribe(c[MAX_SUBSCRIBERS], NULL));
	CHECK(write(cc->ready[1], "r", 1) == 1);
	pause(); /* held until the parent has checked that root still gets in */
}

/*
 * At most 16 subscriptions of users other than root, and those cannot lock root out of
 * watching. Params are refused.
 */
TEST(subscribers_capped_params_refused)
{
	struct cap_case cc;
	struct xfer_client *root;
	struct pollfd pfd;
	char *text = NULL, byte;
	struct td d;

	CHECK_OK(td_start(&d, "{\"socket_mode\": 438}"));
	cc.d = &d;
	CHECK_OK(pipe2(cc.ready, O_CLOEXEC) < 0 ? -errno : 0);
	/* the test dir is 0700; the socket itself is the daemon's to guard */
	CHECK_OK(chmod(d.dir, 0755) < 0 ? -errno : 0);
	pid_t pid = td_spawn(cap_child, &cc);
	CHECK_OK(pid);
	close(cc.ready[1]);
	pfd = (struct pollfd){ .fd = cc.ready[0], .events = POLLIN };
	/* a child that failed exits: the pipe then reads EOF, and td_wait_child says why */
	CHECK(poll(&pfd, 1, 30000) == 1 && read(cc.ready[0], &byte, 1) == 1);
	close(cc.ready[0]);
	CHECK_OK(xfer_connect(d.sock, "root-watcher", &root));
	if (geteuid() == 0)
		CHECK_OK(subscribe(root, NULL)); /* nobody holds 16: root still gets in */
	CHECK_ERR(xfer_call(root, "events.subscribe", "{\"all\": true}", &text), -EINVAL);
	free(text);
	kill(pid, SIGKILL);
	td_wait_child(pid, 10000);
	xfer_close(root);
	CHECK_EQ_INT(td_stop(&d), 0);
}
