// SPDX-License-Identifier: MIT
/*
 * Windows end to end through libxferclient against real xferd processes: on one node (local
 * transport) and across nodes (cross_*: daemons on 127.0.0.1, TCP, keyed, so that the open
 * proves the token): gets and puts byte-exact at many offsets, notify tags exactly once and in
 * order, access-mode and range refusals, revocation with transfers in flight, an opener and an
 * owner killed mid-stream, three nodes opening one window, batches of 1000 (one event), and
 * large and small gets and puts mixed (puts over several frames, scattered descriptors).
 *
 * XFER_WINDOWS_NODES=SOCK,SOCK[,SOCK] runs the same cases against daemons already running
 * (tests/rdma/run.sh: the two Soft-RoCE nodes of the VM) instead of starting its own, and
 * XFER_WINDOWS_TRANSPORT the transport cross-node gets and puts must report (default tcp).
 * Cases that need more nodes than given are skipped.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "xp_json.h"

#define KiB 1024ul
#define MiB (1024ul * KiB)
#define WAIT_MS 60000
#define XP_TAG_BUF 257

struct tbuf {
	struct xfer_buf buf;
	uint64_t region;
};

/* A node: one daemon, listening on 127.0.0.1 with the shared key in @keydir. */
struct node {
	struct td d;
};

static char keyfile[64];
static int key_users;		   /* nodes started with @keyfile and not stopped yet */
static const char *want_transport; /* set by the cross-node cases: what their ops must use */
static int nodes_used;		   /* external nodes handed out in this test */
static const char *owner_sock;	   /* the owner's daemon in on_one_node()/on_two_nodes() */

/* The @i-th socket of XFER_WINDOWS_NODES into @out, or false when there are fewer. */
static bool external_node(int i, char *out, size_t len)
{
	const char *p = getenv("XFER_WINDOWS_NODES");

	for (; p && *p && i > 0; i--)
		p = strchr(p, ',') ? strchr(p, ',') + 1 : "";
	if (!p || !*p)
		return false;
	size_t n = strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p);
	snprintf(out, len, "%.*s", (int)n, p);
	return true;
}

static bool external(void)
{
	return getenv("XFER_WINDOWS_NODES") != NULL;
}

static void cross_node(void)
{
	want_transport = getenv("XFER_WINDOWS_TRANSPORT") ?: "tcp";
}

static void key_make(void)
{
	uint8_t raw[32];
	char hex[65];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	CHECK(fd >= 0 && read(fd, raw, sizeof(raw)) == (ssize_t)sizeof(raw));
	close(fd);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	snprintf(keyfile, sizeof(keyfile), "/tmp/xferd-wkey-%d", (int)getpid());
	fd = open(keyfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, hex, 64) == 64);
	close(fd);
}

/* Starts node @n with the cluster key and the JSON members @extra in its config. */
static void node_start_with(struct node *n, const char *extra)
{
	char cfg[300];

	if (external()) {
		memset(&n->d, 0, sizeof(n->d));
		n->d.pid = -1;
		snprintf(n->d.dir, sizeof(n->d.dir), "/tmp");
		if (!external_node(nodes_used++, n->d.sock, sizeof(n->d.sock)))
			harness_skip("needs more nodes than XFER_WINDOWS_NODES names");
		return;
	}
	if (!keyfile[0])
		key_make();
	snprintf(cfg, sizeof(cfg), "{\"listen\": [\"127.0.0.1:0\"], \"peer_key_file\": \"%s\", %s}",
		 keyfile, extra);
	CHECK_OK(td_start(&n->d, cfg));
	key_users++;
}

static void node_start(struct node *n)
{
	node_start_with(n, "\"keepalive_timeout_ms\": 3000");
}

/* Stops node @n; the key file goes with the last node of the test that uses it. */
static void node_stop(struct node *n)
{
	if (external())
		return;
	CHECK_EQ_INT(td_stop(&n->d), 0);
	if (--key_users == 0) {
		unlink(keyfile);
		keyfile[0] = '\0';
	}
}

static struct xfer_client *conn(struct td *d, const char *name)
{
	struct xfer_client *c = NULL;

	CHECK_OK(xfer_connect(d->sock, name, &c));
	return c;
}

/* Runs @body with the window's owner and its opener connected to one daemon. */
static void on_one_node(void (*body)(struct xfer_client *owner, struct xfer_client *opener))
{
	struct node a;

	node_start(&a);
	owner_sock = a.d.sock;
	struct xfer_client *owner = conn(&a.d, "owner"), *opener = conn(&a.d, "opener");
	body(owner, opener);
	xfer_close(opener);
	xfer_close(owner);
	node_stop(&a);
}

/* Runs @body with the owner on one daemon and the opener on another (cross_node()'s transport). */
static void on_two_nodes(void (*body)(struct xfer_client *owner, struct xfer_client *opener))
{
	cross_node();
	struct node a, b;

	node_start(&a);
	node_start(&b);
	owner_sock = a.d.sock;
	struct xfer_client *owner = conn(&a.d, "owner"), *opener = conn(&b.d, "opener");
	body(owner, opener);
	xfer_close(opener);
	xfer_close(owner);
	node_stop(&b);
	node_stop(&a);
}

static void tbuf_make(struct xfer_client *c, size_t len, struct tbuf *t)
{
	CHECK_OK(xfer_buf_alloc(len, &t->buf));
	CHECK_OK(xfer_region_register(c, t->buf.fd, 0, 0, "test", &t->region));
}

static void fill(void *p, size_t len, unsigned seed)
{
	uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

static void wait_complete(struct xfer_client *c, uint64_t op)
{
	struct xfer_op_info info;

	CHECK_OK(xfer_wait(c, op, WAIT_MS, &info));
	if (info.state != XFER_COMPLETE)
		harness_fail(__FILE__, __LINE__, "op %llu ended %s: %s", (unsigned long long)op,
			     xfer_state_name(info.state), info.cause);
	if (want_transport && strcmp(info.transport, want_transport) != 0)
		harness_fail(__FILE__, __LINE__, "op %llu moved over %s, not %s",
			     (unsigned long long)op, info.transport, want_transport);
}

static void wait_ended(struct xfer_client *c, uint64_t op, struct xfer_op_info *info)
{
	CHECK_OK(xfer_wait(c, op, WAIT_MS, info));
}

/* The window events a client received. */
struct wevents {
	int notified, closed;
	char tags[1100][XP_TAG_BUF];
	uint64_t bytes[1100];
	int closed_error;
};

static void window_cb(struct xfer_client *c, const struct xfer_window_event *ev, void *arg)
{
	struct wevents *w = arg;

	if (ev->type == XFER_WINDOW_CLOSED) {
		w->closed++;
		w->closed_error = ev->error;
		return;
	}
	if (w->notified < 1100) {
		snprintf(w->tags[w->notified], sizeof(w->tags[0]), "%s", ev->tag);
		w->bytes[w->notified] = ev->bytes;
	}
	w->notified++;
}

/* Dispatches @c's events until @cond holds (or fails after WAIT_MS). */
#define WAIT_EVENTS(c, cond)                              \
	do {                                              \
		long long until_ = td_now_ms() + WAIT_MS; \
		while (!(cond)) {                         \
			CHECK(td_now_ms() < until_);      \
			CHECK(xfer_dispatch(c) >= 0);     \
			usleep(2000);                     \
		}                                         \
	} while (0)

/* Opens a window of @owner's @len-byte buffer in @opener's daemon. */
struct win {
	struct tbuf obuf;
	uint64_t window, handle;
	char *meta;
};

static void win_make(struct xfer_client *owner, struct xfer_client *opener, size_t len,
		     enum xfer_access access, struct win *w)
{
	uint64_t length;
	enum xfer_access got;

	tbuf_make(owner, len, &w->obuf);
	CHECK_OK(xfer_window_create(owner, w->obuf.region, 0, 0, access, 0, &w->window, &w->meta));
	CHECK(strncmp(w->meta, "xfer1.", 6) == 0);
	CHECK_OK(xfer_window_open(opener, w->meta, &w->handle, &length, &got));
	CHECK_EQ_INT(length, len);
	CHECK_EQ_INT(got, access);
}

/* Puts and gets at many offsets, each checked byte for byte on the other side. */
static void get_put_offsets(struct xfer_client *owner, struct xfer_client *opener)
{
	const size_t wlen = 4 * MiB, llen = 1 * MiB;
	static const uint64_t offs[] = {
		0, 1, 4095, 4096, 65537, 1 * MiB - 3, 3 * MiB, 3 * MiB + 7
	};
	static const uint64_t lens[] = { 1, 17, 4096, 65536, 1 * MiB - 9 };
	struct tbuf lbuf;
	struct win w;
	uint64_t op;

	win_make(owner, opener, wlen, XFER_ACCESS_READWRITE, &w);
	tbuf_make(opener, llen, &lbuf);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
			uint64_t off = offs[i], len = lens[j];
			if (off + len > wlen)
				continue;
			/* put: opener's bytes land in the owner's window, nothing around them */
			fill(lbuf.buf.addr, len, (unsigned)(i * 10 + j));
			memset(w.obuf.buf.addr, 0xEE, wlen);
			struct xfer_desc d = { lbuf.region, 0, len };
			CHECK_OK(xfer_put(opener, w.handle, off, &d, 1, NULL, NULL, &op));
			wait_complete(opener, op);
			CHECK_MEM_EQ((uint8_t *)w.obuf.buf.addr + off, lbuf.buf.addr, len);
			if (off)
				CHECK_EQ_INT(((uint8_t *)w.obuf.buf.addr)[off - 1], 0xEE);
			if (off + len < wlen)
				CHECK_EQ_INT(((uint8_t *)w.obuf.buf.addr)[off + len], 0xEE);
			/* get: the window's bytes into the opener's buffer */
			fill((uint8_t *)w.obuf.buf.addr + off, len, (unsigned)(i * 10 + j + 99));
			memset(lbuf.buf.addr, 0, len);
			CHECK_OK(xfer_get(opener, w.handle, off, &d, 1, NULL, NULL, &op));
			wait_complete(opener, op);
			CHECK_MEM_EQ(lbuf.buf.addr, (uint8_t *)w.obuf.buf.addr + off, len);
		}
	}
	CHECK_OK(xfer_window_close(opener, w.handle));
	CHECK_OK(xfer_window_close(owner, w.window));
	CHECK_OK(xfer_region_deregister(owner, w.obuf.region, 0));
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(local_get_put_many_offsets)
{
	on_one_node(get_put_offsets);
}

TEST(cross_get_put_many_offsets)
{
	on_two_nodes(get_put_offsets);
}

/* 300 tagged puts (and some untagged, and gets) in flight at once: each tag once, in order. */
static void notify_in_order(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 300 };
	static struct wevents ev;
	struct tbuf lbuf;
	struct win w;
	uint64_t ops[N];
	char tag[16];

	memset(&ev, 0, sizeof(ev));
	xfer_set_window_cb(owner, window_cb, &ev);
	win_make(owner, opener, N * 4 * KiB, XFER_ACCESS_READWRITE, &w);
	tbuf_make(opener, N * 4 * KiB, &lbuf);
	fill(lbuf.buf.addr, N * 4 * KiB, 5);
	for (int i = 0; i < N; i++) {
		/* sizes differ so that later ones could finish first */
		uint64_t len = i % 7 == 0 ? 4 * KiB : 1 + (uint64_t)i;
		struct xfer_desc d = { lbuf.region, (uint64_t)i * 4 * KiB, len };
		snprintf(tag, sizeof(tag), "t%03d", i);
		if (i % 5 == 4)
			CHECK_OK(xfer_put(opener, w.handle, (uint64_t)i * 4 * KiB, &d, 1, NULL,
					  NULL, &ops[i]));
		else
			CHECK_OK(xfer_put(opener, w.handle, (uint64_t)i * 4 * KiB, &d, 1, tag, NULL,
					  &ops[i]));
	}
	for (int i = 0; i < N; i++)
		wait_complete(opener, ops[i]);
	int want = N - N / 5;
	WAIT_EVENTS(owner, ev.notified >= want);
	usleep(100 * 1000);
	CHECK_OK(xfer_dispatch(owner) >= 0 ? 0 : -EIO);
	CHECK_EQ_INT(ev.notified, want); /* exactly once */
	for (int i = 0, k = 0; i < N; i++) {
		if (i % 5 == 4)
			continue;
		snprintf(tag, sizeof(tag), "t%03d", i);
		CHECK_STR_EQ(ev.tags[k], tag); /* in order */
		CHECK_EQ_INT(ev.bytes[k], i % 7 == 0 ? 4 * KiB : 1 + (uint64_t)i);
		k++;
	}
	for (int i = 0; i < N; i++) {
		uint64_t len = i % 7 == 0 ? 4 * KiB : 1 + (uint64_t)i;
		CHECK_MEM_EQ((uint8_t *)w.obuf.buf.addr + i * 4 * KiB,
			     (uint8_t *)lbuf.buf.addr + i * 4 * KiB, len);
	}
	CHECK_OK(xfer_window_close(owner, w.window));
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

/* Integer @key of @c's window @window in list.windows (@key "gets", "puts"), or -1. */
static long long window_count(struct xfer_client *c, uint64_t window, const char *key)
{
	char *text = NULL;
	long long v = -1;
	size_t i;
	json_t *row;

	CHECK_OK(xfer_call(c, "list.windows", NULL, &text));
	json_t *root = json_loads(text, 0, NULL);
	free(text);
	json_array_foreach(json_object_get(root, "windows"), i, row)
		if (json_integer_value(json_object_get(row, "window")) == (json_int_t)window)
			v = json_integer_value(json_object_get(row, key));
	json_decref(root);
	return v;
}

/*
 * What the owner counted of striped_in_flight's @gets gets and @puts puts: one each, however
 * many pieces a striped one went as, in list.windows (xferd_window_operations_total counts at
 * the same place). One-sided frames only: keyed RDMA ops count tagged ones (§10.6).
 */
static void owner_counted(struct xfer_client *owner, uint64_t window, long long gets,
			  long long puts)
{
	long long end = td_now_ms() + WAIT_MS;

	if (strcmp(want_transport, "tcp") != 0)
		return;
	/* (a get's reply is counted once its last byte left: the opener may see it first) */
	while (window_count(owner, window, "gets") < gets && td_now_ms() < end)
		usleep(2000);
	CHECK_EQ_INT(window_count(owner, window, "puts"), puts);
	CHECK_EQ_INT(window_count(owner, window, "gets"), gets);
}

/*
 * Large gets and puts in flight at once, striped over the set's connections (PROTOCOL.md
 * §10.7: untagged puts and get replies past 1 MiB go as pieces over the data connections;
 * tagged puts each on one, in turn): every byte where it belongs, every tag once, in order,
 * naming the whole put.
 */
static void striped_in_flight(struct xfer_client *owner, struct xfer_client *opener)
{
	static const uint64_t lens[] = { 1 * MiB + 3,	 3 * MiB + 1, 5 * MiB + 1, 17 * MiB + 5,
					 4 * KiB,	 256 * KiB,   2 * MiB,	   256 * KiB + 1,
					 9 * MiB + 4097, 1 * MiB };
	enum { N = sizeof(lens) / sizeof(lens[0]) };
	static struct wevents ev;
	uint64_t offs[N], ops[N], total = 0;
	struct tbuf lbuf;
	struct win w;
	char tag[16];

	for (int i = 0; i < N; i++)
		offs[i] = total + (uint64_t)i * 3, total = offs[i] + lens[i];
	memset(&ev, 0, sizeof(ev));
	xfer_set_window_cb(owner, window_cb, &ev);
	win_make(owner, opener, total, XFER_ACCESS_READWRITE, &w);
	tbuf_make(opener, total, &lbuf);
	for (int round = 0; round < 2; round++) {
		fill(lbuf.buf.addr, total, 11 + round);
		for (int i = 0; i < N; i++) {
			struct xfer_desc d = { lbuf.region, offs[i], lens[i] };
			snprintf(tag, sizeof(tag), "s%d", i);
			CHECK_OK(xfer_put(opener, w.handle, offs[i], &d, 1, i % 3 == 2 ? tag : NULL,
					  NULL, &ops[i]));
		}
		for (int i = 0; i < N; i++)
			wait_complete(opener, ops[i]);
		for (int i = 0; i < N; i++)
			CHECK_MEM_EQ((uint8_t *)w.obuf.buf.addr + offs[i],
				     (uint8_t *)lbuf.buf.addr + offs[i], lens[i]);
	}
	int want = 2 * (N / 3);
	WAIT_EVENTS(owner, ev.notified >= want);
	usleep(100 * 1000);
	CHECK_OK(xfer_dispatch(owner) >= 0 ? 0 : -EIO);
	CHECK_EQ_INT(ev.notified, want); /* exactly once */
	for (int k = 0; k < want; k++) {
		int i = 3 * (k % (N / 3)) + 2;
		snprintf(tag, sizeof(tag), "s%d", i);
		CHECK_STR_EQ(ev.tags[k], tag); /* in order */
		CHECK_EQ_INT(ev.bytes[k], lens[i]);
	}
	/* gets: the window's bytes into the opener's buffer, all in flight at once */
	fill(w.obuf.buf.addr, total, 77);
	memset(lbuf.buf.addr, 0, total);
	for (int i = 0; i < N; i++) {
		struct xfer_desc d = { lbuf.region, offs[i], lens[i] };
		CHECK_OK(xfer_get(opener, w.handle, offs[i], &d, 1, NULL, NULL, &ops[i]));
	}
	for (int i = 0; i < N; i++)
		wait_complete(opener, ops[i]);
	for (int i = 0; i < N; i++)
		CHECK_MEM_EQ((uint8_t *)lbuf.buf.addr + offs[i],
			     (uint8_t *)w.obuf.buf.addr + offs[i], lens[i]);
	owner_counted(owner, w.window, N, 2 * N);
	CHECK_OK(xfer_window_close(opener, w.handle));
	CHECK_OK(xfer_window_close(owner, w.window));
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(cross_striped_in_flight)
{
	on_two_nodes(striped_in_flight);
}

TEST(local_notify_exactly_once_in_order)
{
	on_one_node(notify_in_order);
}

TEST(cross_notify_exactly_once_in_order)
{
	on_two_nodes(notify_in_order);
}

/* Every refusal before any byte moves, and the window's bytes untouched. */
static void refusals(struct xfer_client *owner, struct xfer_client *opener, struct td *od)
{
	struct tbuf lbuf;
	struct win r;
	uint64_t op, h2;
	struct xfer_desc d;

	win_make(owner, opener, 64 * KiB, XFER_ACCESS_READ, &r);
	tbuf_make(opener, 128 * KiB, &lbuf);
	memset(r.obuf.buf.addr, 0x5A, 64 * KiB);
	fill(lbuf.buf.addr, 128 * KiB, 3);
	d = (struct xfer_desc){ lbuf.region, 0, 4 * KiB };
	CHECK_ERR(xfer_put(opener, r.handle, 0, &d, 1, NULL, NULL, &op), -EACCES);
	CHECK(strstr(xfer_last_error(opener), "read-only") != NULL);
	d.length = 64 * KiB + 1;
	CHECK_ERR(xfer_get(opener, r.handle, 0, &d, 1, NULL, NULL, &op), -EINVAL);
	CHECK(strstr(xfer_last_error(opener), "passes the end of window") != NULL);
	d.length = 2;
	CHECK_ERR(xfer_get(opener, r.handle, 64 * KiB - 1, &d, 1, NULL, NULL, &op), -EINVAL);
	CHECK_ERR(xfer_get(opener, r.handle, UINT64_MAX / 2, &d, 1, NULL, NULL, &op), -EINVAL);
	CHECK_ERR(xfer_get(opener, 999999, 0, &d, 1, NULL, NULL, &op), -ENOENT);
	/* a tag over 256 bytes */
	char big[300];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK_ERR(xfer_get(opener, r.handle, 0, &d, 1, big, NULL, &op), -EINVAL);
	/* the window's metadata is not an operation's, and the other way round */
	CHECK_ERR(xfer_read(opener, r.meta, &d, 1, NULL, &op), -EINVAL);
	char *opmeta = NULL;
	struct xfer_desc od1 = { r.obuf.region, 0, 2 };
	CHECK_OK(xfer_readable(owner, &od1, 1, NULL, &op, &opmeta));
	CHECK_ERR(xfer_window_open(opener, opmeta, &h2, NULL, NULL), -EINVAL);
	CHECK_OK(xfer_release(owner, op));
	free(opmeta);
	/* a tampered token */
	CHECK_ERR(xfer_window_open(opener, "xfer1.eyJ2IjoxfQ", &h2, NULL, NULL), -EBADMSG);
	/* the region cannot go while the window is open */
	CHECK_ERR(xfer_region_deregister(owner, r.obuf.region, 0), -EBUSY);
	/* openers: one */
	uint64_t w1;
	char *m1;
	CHECK_OK(xfer_window_create(owner, r.obuf.region, 4096, 4096, XFER_ACCESS_WRITE,
				    XFER_WINDOW_ONE_OPENER, &w1, &m1));
	CHECK_OK(xfer_window_open(opener, m1, &h2, NULL, NULL));
	uint64_t h3;
	CHECK_ERR(xfer_window_open(opener, m1, &h3, NULL, NULL), -EBUSY);
	d.length = 4096;
	CHECK_ERR(xfer_get(opener, h2, 0, &d, 1, NULL, NULL, &op), -EACCES); /* write-only */
	CHECK_OK(xfer_window_close(opener, h2));
	CHECK_OK(xfer_window_open(opener, m1, &h3, NULL, NULL)); /* free again */
	CHECK_OK(xfer_window_close(owner, w1));
	CHECK_ERR(xfer_window_open(opener, m1, &h2, NULL, NULL), -ENOENT);
	CHECK_ERR(xfer_window_close(owner, w1), -ENOENT);
	/* a handle revoked by the owner: refused, naming why */
	struct xfer_desc d4 = { lbuf.region, 0, 4096 };
	CHECK_ERR(xfer_put(opener, h3, 0, &d4, 1, NULL, NULL, &op), -ECANCELED);
	CHECK(strstr(xfer_last_error(opener), "closed by its owner") != NULL);
	CHECK_OK(xfer_window_close(opener, h3));
	free(m1);
	/* nothing moved into the read-only window */
	for (size_t i = 0; i < 64 * KiB; i++)
		if (((uint8_t *)r.obuf.buf.addr)[i] != 0x5A)
			harness_fail(__FILE__, __LINE__, "byte %zu of the window changed", i);
	td_check_alive(od, "after the refusals");
	CHECK_OK(xfer_window_close(owner, r.window));
	CHECK_OK(xfer_region_deregister(owner, r.obuf.region, 0));
	free(r.meta);
	xfer_buf_free(&r.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(local_refusals)
{
	struct node a;

	node_start(&a);
	struct xfer_client *owner = conn(&a.d, "owner"), *opener = conn(&a.d, "opener");
	refusals(owner, opener, &a.d);
	xfer_close(opener);
	xfer_close(owner);
	node_stop(&a);
}

TEST(cross_refusals)
{
	cross_node();
	struct node a, b;

	node_start(&a);
	node_start(&b);
	struct xfer_client *owner = conn(&a.d, "owner"), *opener = conn(&b.d, "opener");
	refusals(owner, opener, &a.d);
	xfer_close(opener);
	xfer_close(owner);
	node_stop(&b);
	node_stop(&a);
}

/* The owner closes the window with 32 puts of 1 MiB in flight: every one ends, none later. */
static void revoke_in_flight(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 32 };
	static struct wevents ev;
	struct tbuf lbuf;
	struct win w;
	uint64_t ops[N];
	int complete = 0, cancelled = 0;

	memset(&ev, 0, sizeof(ev));
	xfer_set_window_cb(opener, window_cb, &ev);
	win_make(owner, opener, 4 * MiB, XFER_ACCESS_WRITE, &w);
	tbuf_make(opener, 4 * MiB, &lbuf);
	for (int i = 0; i < N; i++) {
		struct xfer_desc d = { lbuf.region, 0, 4 * MiB };
		CHECK_OK(xfer_put(opener, w.handle, 0, &d, 1, "x", NULL, &ops[i]));
	}
	CHECK_OK(xfer_window_close(owner, w.window)); /* returns once nothing is in flight */
	memset(w.obuf.buf.addr, 0x11, 4 * MiB);	      /* the owner may reuse it at once */
	for (int i = 0; i < N; i++) {
		struct xfer_op_info info;
		wait_ended(opener, ops[i], &info);
		if (info.state == XFER_COMPLETE)
			complete++;
		else
			cancelled++;
		if (info.state == XFER_CANCELLED || info.state == XFER_ERRORED)
			CHECK(strstr(info.cause, "closed") != NULL ||
			      strstr(info.cause, "revoked") != NULL);
	}
	harness_note("revoked with %d complete, %d cancelled", complete, cancelled);
	WAIT_EVENTS(opener, ev.closed == 1);
	CHECK_EQ_INT(ev.closed_error, -ECANCELED);
	struct xfer_desc d = { lbuf.region, 0, 4096 };
	uint64_t op;
	CHECK_ERR(xfer_put(opener, w.handle, 0, &d, 1, NULL, NULL, &op), -ECANCELED);
	usleep(200 * 1000);
	for (size_t i = 0; i < 4 * MiB; i += 4096)
		if (((uint8_t *)w.obuf.buf.addr)[i] != 0x11)
			harness_fail(__FILE__, __LINE__, "byte %zu written after the revocation",
				     i);
	CHECK_OK(xfer_window_close(opener, w.handle));
	CHECK_OK(xfer_region_deregister(owner, w.obuf.region, 0));
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(local_revoke_in_flight)
{
	on_one_node(revoke_in_flight);
}

TEST(cross_revoke_in_flight)
{
	on_two_nodes(revoke_in_flight);
}

/* A child opens @meta on @sock and puts without end until it is killed. */
struct streamer {
	const char *sock, *meta;
};

static void stream_puts(void *arg)
{
	struct streamer *s = arg;
	struct xfer_client *c = NULL;
	struct tbuf t;
	uint64_t h, op;

	CHECK_OK(xfer_connect(s->sock, "streamer", &c));
	tbuf_make(c, 1 * MiB, &t);
	CHECK_OK(xfer_window_open(c, s->meta, &h, NULL, NULL));
	for (;;) {
		struct xfer_desc d = { t.region, 0, 1 * MiB };
		for (int i = 0; i < 16; i++)
			if (xfer_put(c, h, 0, &d, 1, "s", NULL, &op))
				pause(); /* revoked: wait to be killed */
		xfer_wait(c, op, WAIT_MS, NULL);
	}
}

static int windows_of(struct xfer_client *c, const char *what)
{
	char *json = NULL;
	int n = 0;

	CHECK_OK(xfer_call(c, "list.windows", NULL, &json));
	for (const char *p = json; (p = strstr(p, what)); p++)
		n++;
	free(json);
	return n;
}

TEST(cross_opener_killed_mid_stream)
{
	cross_node();
	struct node a, b;

	node_start(&a);
	node_start(&b);
	struct xfer_client *owner = conn(&a.d, "owner");
	struct tbuf obuf;
	uint64_t window;
	char *meta;
	tbuf_make(owner, 1 * MiB, &obuf);
	CHECK_OK(
		xfer_window_create(owner, obuf.region, 0, 0, XFER_ACCESS_WRITE, 0, &window, &meta));
	struct streamer s = { b.d.sock, meta };
	pid_t child = td_spawn(stream_puts, &s);
	CHECK(child > 0);
	long long until = td_now_ms() + WAIT_MS;
	while (windows_of(owner, "\"handle\"") == 0) /* it opened */
		CHECK(td_now_ms() < until);
	usleep(300 * 1000); /* puts are streaming */
	CHECK_OK(td_kill9(child));
	/* its daemon lets go of the handle: the owner's opener goes, nothing stays in flight */
	until = td_now_ms() + WAIT_MS;
	while (windows_of(owner, "\"handle\"") != 0)
		CHECK(td_now_ms() < until);
	/* A gone opener's ops end after it leaves the listing (over RDMA, once flushed). */
	while (windows_of(owner, "\"inflight\": 0") + windows_of(owner, "\"inflight\":0") != 1)
		CHECK(td_now_ms() < until);
	long long ops;
	CHECK_OK(td_wait_stat(&a.d, "ops", 0, 10000, &ops));
	CHECK_OK(xfer_window_close(owner, window));
	CHECK_OK(xfer_region_deregister(owner, obuf.region, 0));
	free(meta);
	xfer_buf_free(&obuf.buf);
	xfer_close(owner);
	node_stop(&b);
	node_stop(&a);
}

/*
 * A put that ends (here cancelled) while its WPUTs are queued behind gigabytes of the same
 * client's puts waits until they are written (PROTOCOL.md §10.7): that takes as long as the
 * backlog ahead of them takes to go, not as long as the peer takes to read. The daemon once
 * timed the wait by that put's own frames alone, and failed the set with "the peer took none
 * for N ms (keepalive_timeout_ms)" while the peer read at full speed: every transfer between
 * the two nodes ended ERRORED. Here keepalive_timeout_ms is 600 and the backlog (100 puts of
 * 64 MiB, posted faster than loopback moves them) takes longer than that: every put but the
 * cancelled one must complete.
 */
#define BACKLOG_PUTS 100
TEST(cross_put_ended_behind_a_backlog_keeps_the_set)
{
	cross_node();
	if (external())
		harness_skip("starts its own daemons (keepalive_timeout_ms 600)");
	struct node a, b;
	node_start_with(&a, "\"keepalive_ms\": 150, \"keepalive_timeout_ms\": 600");
	node_start_with(&b, "\"keepalive_ms\": 150, \"keepalive_timeout_ms\": 600");
	struct xfer_client *owner = conn(&a.d, "owner"), *opener = conn(&b.d, "opener");
	struct tbuf obuf, pbuf;
	uint64_t window, handle, cut;
	char *meta;
	static uint64_t ops[BACKLOG_PUTS];
	tbuf_make(owner, 64 * MiB, &obuf);
	tbuf_make(opener, 64 * MiB, &pbuf);
	CHECK_OK(
		xfer_window_create(owner, obuf.region, 0, 0, XFER_ACCESS_WRITE, 0, &window, &meta));
	CHECK_OK(xfer_window_open(opener, meta, &handle, NULL, NULL));
	struct xfer_desc d = { pbuf.region, 0, 64 * MiB };
	struct xfer_op_opts opts = { .timeout_ms = 120000 };
	for (int i = 0; i < BACKLOG_PUTS; i++)
		CHECK_OK(xfer_put(opener, handle, 0, &d, 1, NULL, &opts, &ops[i]));
	CHECK_OK(xfer_put(opener, handle, 0, &d, 1, NULL, &opts, &cut));
	CHECK_OK(xfer_cancel(opener, cut));
	struct xfer_op_info info;
	for (int i = 0; i < BACKLOG_PUTS; i++) {
		CHECK_OK(xfer_wait(opener, ops[i], 120000, &info));
		if (info.state != XFER_COMPLETE)
			harness_fail(__FILE__, __LINE__, "put %d of the backlog ended %d (%s): %s",
				     i, (int)info.state, strerror(-info.error), info.cause);
	}
	/* (its end waits for its frames to be written: the owner may have taken them all first) */
	CHECK_OK(xfer_wait(opener, cut, 120000, &info));
	if (info.state != XFER_CANCELLED && info.state != XFER_COMPLETE)
		harness_fail(__FILE__, __LINE__, "the cancelled put ended %d (%s): %s",
			     (int)info.state, strerror(-info.error), info.cause);
	CHECK_OK(xfer_window_close(opener, handle));
	CHECK_OK(xfer_window_close(owner, window));
	CHECK_OK(xfer_region_deregister(opener, pbuf.region, 0));
	CHECK_OK(xfer_region_deregister(owner, obuf.region, 0));
	free(meta);
	xfer_buf_free(&pbuf.buf);
	xfer_buf_free(&obuf.buf);
	xfer_close(opener);
	xfer_close(owner);
	node_stop(&b);
	node_stop(&a);
}

static void own_window(void *arg)
{
	const char **io = arg; /* [0] socket, [1] file to write the metadata to */
	struct xfer_client *c = NULL;
	struct tbuf t;
	uint64_t w;
	char *meta;

	CHECK_OK(xfer_connect(io[0], "owner", &c));
	tbuf_make(c, 1 * MiB, &t);
	CHECK_OK(xfer_window_create(c, t.region, 0, 0, XFER_ACCESS_READWRITE, 0, &w, &meta));
	FILE *f = fopen(io[1], "w");
	CHECK(f && fputs(meta, f) >= 0 && fclose(f) == 0);
	pause();
}

TEST(cross_owner_killed_mid_stream)
{
	cross_node();
	struct node a, b;
	static struct wevents ev;
	char path[80], meta[4096] = "";

	node_start(&a);
	node_start(&b);
	snprintf(path, sizeof(path), "%s/meta-%d", a.d.dir, (int)getpid());
	const char *io[2] = { a.d.sock, path };
	pid_t child = td_spawn(own_window, io);
	CHECK(child > 0);
	long long until = td_now_ms() + WAIT_MS;
	for (;;) {
		FILE *f = fopen(path, "r");
		if (f && fgets(meta, sizeof(meta), f) && strlen(meta) > 10) {
			fclose(f);
			break;
		}
		if (f)
			fclose(f);
		CHECK(td_now_ms() < until);
		usleep(10000);
	}
	struct xfer_client *opener = conn(&b.d, "opener");
	xfer_set_window_cb(opener, window_cb, &ev);
	struct tbuf t;
	uint64_t h, ops[64];
	tbuf_make(opener, 1 * MiB, &t);
	CHECK_OK(xfer_window_open(opener, meta, &h, NULL, NULL));
	struct xfer_desc d = { t.region, 0, 1 * MiB };
	for (int i = 0; i < 64; i++)
		CHECK_OK(xfer_get(opener, h, 0, &d, 1, NULL, NULL, &ops[i]));
	CHECK_OK(td_kill9(child));
	for (int i = 0; i < 64; i++) {
		struct xfer_op_info info;
		wait_ended(opener, ops[i], &info); /* each ends: none hangs */
	}
	WAIT_EVENTS(opener, ev.closed == 1);
	CHECK_EQ_INT(ev.closed_error, -ECONNRESET);
	CHECK_ERR(xfer_get(opener, h, 0, &d, 1, NULL, NULL, &ops[0]), -ECONNRESET);
	CHECK_OK(xfer_window_close(opener, h));
	xfer_buf_free(&t.buf);
	long long n;
	CHECK_OK(td_wait_stat(&a.d, "ops", 0, 10000, &n));
	unlink(path);
	xfer_close(opener);
	node_stop(&b);
	node_stop(&a);
}

/* Runs xferctl (beside this test's binary) on @sock with @args: its output must have @want. */
static void ctl_shows(const char *sock, const char *args, const char *want)
{
	char exe[512], cmd[1200], out[16384];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	CHECK(n > 0);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(cmd, sizeof(cmd), "%s/../xferctl --socket %s %s", exe, sock, args);
	FILE *f = popen(cmd, "r");
	CHECK(f != NULL);
	size_t got = fread(out, 1, sizeof(out) - 1, f);
	out[got] = '\0';
	CHECK_EQ_INT(pclose(f), 0);
	if (!strstr(out, want))
		harness_fail(__FILE__, __LINE__, "xferctl %s shows no \"%s\":\n%s", args, want,
			     out);
}

/* One readable window fanned out to three nodes (two remote, one local opener). */
TEST(cross_three_nodes_open_one_window)
{
	cross_node();
	struct node n[3];
	struct xfer_client *c[3];
	struct tbuf obuf, lb[3];
	uint64_t window, h[3], op[3];
	char *meta;

	const char *remote = want_transport;

	for (int i = 0; i < 3; i++) {
		node_start(&n[i]);
		c[i] = conn(&n[i].d, "client");
	}
	struct xfer_client *owner = conn(&n[0].d, "owner");
	tbuf_make(owner, 2 * MiB, &obuf);
	fill(obuf.buf.addr, 2 * MiB, 77);
	CHECK_OK(xfer_window_create(owner, obuf.region, 0, 0, XFER_ACCESS_READ, 0, &window, &meta));
	for (int i = 0; i < 3; i++) {
		tbuf_make(c[i], 2 * MiB, &lb[i]);
		CHECK_OK(xfer_window_open(c[i], meta, &h[i], NULL, NULL));
	}
	CHECK_EQ_INT(windows_of(owner, "\"handle\""), 3);
	ctl_shows(n[0].d.sock, "windows", "owner");
	ctl_shows(n[0].d.sock, "windows", "3 (many)");
	ctl_shows(n[0].d.sock, "--json windows", "\"openers_mode\":\"many\"");
	ctl_shows(n[1].d.sock, "windows", "opener");
	ctl_shows(n[1].d.sock, "windows", remote);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 3; i++) {
			struct xfer_desc d = { lb[i].region, 0, 2 * MiB };
			CHECK_OK(xfer_get(c[i], h[i], 0, &d, 1, NULL, NULL, &op[i]));
		}
		for (int i = 0; i < 3; i++) {
			want_transport = i ? remote :
					     "local"; /* (client 0 is on the owner's node) */
			wait_complete(c[i], op[i]);
			CHECK_MEM_EQ(lb[i].buf.addr, obuf.buf.addr, 2 * MiB);
			memset(lb[i].buf.addr, 0, 2 * MiB);
		}
	}
	CHECK_OK(xfer_window_close(owner, window));
	for (int i = 0; i < 3; i++) {
		xfer_close(c[i]);
		xfer_buf_free(&lb[i].buf);
	}
	xfer_buf_free(&obuf.buf);
	xfer_close(owner);
	free(meta);
	for (int i = 2; i >= 0; i--)
		node_stop(&n[i]);
}

static void count_changed(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	(*(int *)arg)++;
}

/* What a batch event delivered. */
struct bevents {
	int events;
	uint64_t batch;
	size_t n, complete;
	uint64_t *seen; /* op ids, in the order they ended */
};

static void batch_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct bevents *b = arg;

	b->events++;
	b->batch = ev->batch;
	b->n = ev->n;
	b->seen = calloc(ev->n + 1, sizeof(*b->seen));
	for (size_t i = 0; b->seen && i < ev->n; i++) {
		b->seen[i] = ev->ends[i].op;
		b->complete += ev->ends[i].state == XFER_COMPLETE;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The same 1000 gets, released on their ends, with one event: it lists each op once, all
 * COMPLETE, and no op.changed came for them.
 */
static void batch_one_event(struct xfer_client *opener, struct win *w, struct xfer_batch_op *ops,
			    size_t n)
{
	static struct bevents b;
	static uint64_t want[1000];
	struct xfer_op_opts opts = { .flags = XFER_OP_BATCH_EVENT | XFER_OP_RELEASE_ON_END };
	uint64_t batch = 0;
	size_t done = 0;
	int changed = 0;

	memset(&b, 0, sizeof(b));
	xfer_set_batch_cb(opener, batch_cb, &b);
	xfer_set_event_cb(opener, count_changed, &changed);
	for (size_t i = 0; i < n; i++) {
		ops[i].kind = XFER_GET;
		ops[i].offset = (uint64_t)(n - 1 - i) * 1024;
	}
	CHECK_OK(xfer_batch(opener, ops, n, &opts, &done, &batch));
	CHECK(batch != 0);
	WAIT_EVENTS(opener, b.events == 1);
	CHECK_EQ_INT(b.batch, batch);
	CHECK_EQ_INT(b.n, n);
	CHECK_EQ_INT(b.complete, n);
	for (size_t i = 0; i < n; i++)
		want[i] = ops[i].op;
	qsort(want, n, sizeof(want[0]), cmp_u64);
	qsort(b.seen, n, sizeof(b.seen[0]), cmp_u64);
	CHECK_MEM_EQ(b.seen, want, n * sizeof(want[0])); /* each once */
	CHECK_EQ_INT(changed, 0);
	struct xfer_op_info info;
	CHECK_ERR(xfer_status(opener, ops[0].op, &info), -ENOENT); /* released on its end */
	free(b.seen);
	xfer_set_batch_cb(opener, NULL, NULL);
	xfer_set_event_cb(opener, NULL, NULL);
	(void)w;
}

static void batch_1000(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 1000, LEN = 1024 };
	static struct xfer_batch_op ops[N];
	struct tbuf lbuf;
	struct win w;
	size_t done = 0;

	win_make(owner, opener, N * LEN, XFER_ACCESS_READWRITE, &w);
	tbuf_make(opener, N * LEN, &lbuf);
	fill(lbuf.buf.addr, N * LEN, 9);
	static struct xfer_desc d[N];
	for (int i = 0; i < N; i++) {
		/* entry i puts the opener's block i into the window's block N-1-i */
		d[i] = (struct xfer_desc){ lbuf.region, (uint64_t)i * LEN, LEN };
		ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
						 .handle = w.handle,
						 .offset = (uint64_t)(N - 1 - i) * LEN,
						 .descs = &d[i],
						 .n = 1 };
	}
	if (xfer_batch(opener, ops, N, NULL, &done, NULL))
		harness_fail(__FILE__, __LINE__, "batch: %s", xfer_last_error(opener));
	CHECK_EQ_INT(done, N);
	for (int i = 0; i < N; i++)
		wait_complete(opener, ops[i].op);
	for (int i = 0; i < N; i++)
		CHECK_MEM_EQ((uint8_t *)w.obuf.buf.addr + (N - 1 - i) * LEN,
			     (uint8_t *)lbuf.buf.addr + i * LEN, LEN);
	/* a batch stops at its first refused entry; the ones before it stand */
	ops[5].offset = N * LEN;
	CHECK_ERR(xfer_batch(opener, ops, 10, NULL, &done, NULL), -EINVAL);
	CHECK_EQ_INT(done, 5);
	CHECK(strstr(xfer_last_error(opener), "entry 5") != NULL);
	for (int i = 0; i < 5; i++)
		wait_complete(opener, ops[i].op);
	batch_one_event(opener, &w, ops, N);
	CHECK_OK(xfer_window_close(owner, w.window));
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(local_batch_of_1000)
{
	on_one_node(batch_1000);
}

TEST(cross_batch_of_1000)
{
	on_two_nodes(batch_1000);
}

/*
 * The rig of the tagged-ops tests: a read-write window over @len bytes of @owner's, opened by
 * @opener, its events into @ev (cleared first), and a buffer @lbuf of @opener's as large; the
 * opener's filled with pattern @seed, the window's with @seed + 1.
 */
static void tagged_rig(struct xfer_client *owner, struct xfer_client *opener, size_t len,
		       unsigned seed, struct wevents *ev, struct win *w, struct tbuf *lbuf)
{
	memset(ev, 0, sizeof(*ev));
	xfer_set_window_cb(owner, window_cb, ev);
	win_make(owner, opener, len, XFER_ACCESS_READWRITE, w);
	tbuf_make(opener, len, lbuf);
	fill(lbuf->buf.addr, len, seed);
	fill(w->obuf.buf.addr, len, seed + 1);
}

/*
 * Large and small tagged gets and puts in flight at once: puts larger than one frame (4 MiB,
 * XP_PEER_MAX_DATA) from three scattered descriptors, gets of ranges the owner filled, each
 * byte-exact, and every tag once in the order posted, gets and puts alike.
 */
static void large_mixed_in_order(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 8 };
	static const uint64_t sizes[] = { 5 * MiB + 3, 7, 4 * MiB + 1, 64 * KiB + 5 };
	const uint64_t slot = 6 * MiB;
	static struct wevents ev;
	struct tbuf lbuf;
	struct win w;
	uint64_t ops[N];
	char tag[16];

	tagged_rig(owner, opener, N * slot, 11, &ev, &w, &lbuf);
	for (int i = 0; i < N; i++) {
		uint64_t len = sizes[i / 2 % 4], base = (uint64_t)i * slot, a = len / 3,
			 b = 2 * len / 3;
		/* the local side in three pieces, out of order in the buffer */
		struct xfer_desc d[3] = { { lbuf.region, base + a, b - a },
					  { lbuf.region, base, a },
					  { lbuf.region, base + b, len - b } };
		snprintf(tag, sizeof(tag), "%c%d", i % 2 ? 'g' : 'p', i);
		if (i % 2)
			CHECK_OK(xfer_get(opener, w.handle, base, d, 3, tag, NULL, &ops[i]));
		else
			CHECK_OK(xfer_put(opener, w.handle, base, d, 3, tag, NULL, &ops[i]));
	}
	for (int i = 0; i < N; i++)
		wait_complete(opener, ops[i]);
	WAIT_EVENTS(owner, ev.notified >= N);
	for (int i = 0; i < N; i++) {
		uint64_t len = sizes[i / 2 % 4], base = (uint64_t)i * slot, a = len / 3,
			 b = 2 * len / 3;
		const uint8_t *win = (uint8_t *)w.obuf.buf.addr + base,
			      *loc = (uint8_t *)lbuf.buf.addr + base;
		snprintf(tag, sizeof(tag), "%c%d", i % 2 ? 'g' : 'p', i);
		CHECK_STR_EQ(ev.tags[i], tag);
		CHECK_EQ_INT(ev.bytes[i], len);
		CHECK_MEM_EQ(win, loc + a, b - a);
		CHECK_MEM_EQ(win + (b - a), loc, a);
		CHECK_MEM_EQ(win + b, loc + b, len - b);
	}
	CHECK_OK(xfer_window_close(owner, w.window));
	CHECK(xfer_dispatch(owner) >= 0);
	CHECK_EQ_INT(ev.notified, N); /* (the close's reply came after every event: exactly once) */
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(local_large_mixed_in_order)
{
	on_one_node(large_mixed_in_order);
}

TEST(cross_large_mixed_in_order)
{
	on_two_nodes(large_mixed_in_order);
}

/*
 * Tagged puts spread over the set's data connections (the owner orders their notifications by
 * the handle's count, XP_WIN_SEQ): a 9 MiB put then a 7-byte one, in turn, with tagged gets
 * between, all in flight at once. The small ones go on the other connection and land long
 * before the large one before them: the owner holds their notifications back. Every tag once,
 * in the order posted, each naming its whole put, and every byte where it belongs.
 */
static void spread_in_order(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 12 };
	const uint64_t slot = 9 * MiB + 64;
	static struct wevents ev;
	struct tbuf lbuf;
	struct win w;
	uint64_t ops[N], lens[N];
	char tag[16];

	tagged_rig(owner, opener, N * slot, 21, &ev, &w, &lbuf);
	for (int i = 0; i < N; i++) {
		uint64_t base = (uint64_t)i * slot;
		struct xfer_desc d = { lbuf.region, base, 0 };
		lens[i] = i % 3 == 0 ? 9 * MiB + 1 : i % 3 == 1 ? 7 : 4 * KiB;
		d.length = lens[i];
		snprintf(tag, sizeof(tag), "%c%d", i % 3 == 2 ? 'g' : 'p', i);
		if (i % 3 == 2)
			CHECK_OK(xfer_get(opener, w.handle, base, &d, 1, tag, NULL, &ops[i]));
		else
			CHECK_OK(xfer_put(opener, w.handle, base, &d, 1, tag, NULL, &ops[i]));
	}
	for (int i = 0; i < N; i++)
		wait_complete(opener, ops[i]);
	WAIT_EVENTS(owner, ev.notified >= N);
	for (int i = 0; i < N; i++) {
		const uint8_t *win = (uint8_t *)w.obuf.buf.addr + (uint64_t)i * slot,
			      *loc = (uint8_t *)lbuf.buf.addr + (uint64_t)i * slot;
		snprintf(tag, sizeof(tag), "%c%d", i % 3 == 2 ? 'g' : 'p', i);
		CHECK_STR_EQ(ev.tags[i], tag); /* in order */
		CHECK_EQ_INT(ev.bytes[i], lens[i]);
		CHECK_MEM_EQ(win, loc, lens[i]);
	}
	CHECK_OK(xfer_window_close(owner, w.window));
	CHECK(xfer_dispatch(owner) >= 0);
	CHECK_EQ_INT(ev.notified, N); /* exactly once */
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(cross_spread_in_order)
{
	on_two_nodes(spread_in_order);
}

/* The tags a slow owner took, checked in order as they come ("f0000", "f0001", ...). */
struct flood_seen {
	int next, wrong;
};

static void flood_cb(struct xfer_client *c, const struct xfer_window_event *ev, void *arg)
{
	struct flood_seen *s = arg;
	char want[16];

	if (ev->type != XFER_WINDOW_NOTIFIED)
		return;
	snprintf(want, sizeof(want), "f%04d", s->next++);
	s->wrong += strcmp(ev->tag, want) != 0;
}

/*
 * Field @key of the client named "owner" (@method list.clients) or of the first window's first
 * opener (list.windows), asked by a client of its own: the owner's would drain its queue.
 */
static long long listed(const char *method, const char *key)
{
	struct xfer_client *c = NULL;
	char *text = NULL;
	long long v = -1;
	size_t i;
	json_t *row;

	CHECK_OK(xfer_connect(owner_sock, "census", &c));
	CHECK_OK(xfer_call(c, method, NULL, &text));
	json_t *root = json_loads(text, 0, NULL);
	free(text);
	if (strcmp(method, "list.clients") == 0) {
		json_array_foreach(json_object_get(root, "clients"), i, row)
			if (strcmp(json_string_value(json_object_get(row, "name")), "owner") == 0)
				v = json_integer_value(json_object_get(row, key));
	} else {
		json_t *w = json_array_get(json_object_get(root, "windows"), 0);
		v = json_integer_value(
			json_object_get(json_array_get(json_object_get(w, "openers"), 0), key));
	}
	json_decref(root);
	xfer_close(c);
	return v;
}

/* A slow owner catches up: @owner takes all @n tags of the flood once and in order (@seen). */
static void owner_took_tags(struct xfer_client *owner, struct flood_seen *seen, int n)
{
	WAIT_EVENTS(owner, seen->next >= n);
	CHECK_EQ_INT(seen->next, n);
	CHECK_EQ_INT(seen->wrong, 0);
}

/*
 * The end of a slow-owner flood: @w's first @len bytes are the opener's @lbuf, the owner's queue
 * stayed near XD_NOTIFY_HIGH (1024); then the window, its metadata and both buffers go.
 */
static void slow_owner_done(struct xfer_client *owner, struct win *w, struct tbuf *lbuf, size_t len)
{
	CHECK_MEM_EQ(w->obuf.buf.addr, lbuf->buf.addr, len);
	long long most = listed("list.clients", "queued_max");
	CHECK(most >= 1024 && most <= 1024 + 64);
	CHECK_OK(xfer_window_close(owner, w->window));
	xfer_set_window_cb(owner, NULL, NULL);
	free(w->meta);
	xfer_buf_free(&w->obuf.buf);
	xfer_buf_free(&lbuf->buf);
}

/*
 * An opener floods tagged puts at an owner that reads nothing until some wait at its daemon
 * (PROTOCOL.md §10.9), then drains: the owner stays connected, takes every tag once and in
 * order, its queue stayed near XD_NOTIFY_HIGH, every put completes, every byte is there. The
 * puts stall with the owner: over TCP by WACKs, locally by their notifications, over RDMA (make
 * test-rdma) by the owner's WNOTIFY_ACK credit.
 */
static void slow_owner(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 3000, PER = 1000 };
	static struct xfer_batch_op ops[N];
	static struct xfer_desc d[N];
	static char tags[N][16];
	struct flood_seen seen = { 0, 0 };
	struct tbuf lbuf;
	struct win w;
	size_t done = 0;

	xfer_set_window_cb(owner, flood_cb, &seen);
	win_make(owner, opener, N, XFER_ACCESS_WRITE, &w);
	tbuf_make(opener, N, &lbuf);
	fill(lbuf.buf.addr, N, 31);
	for (int i = 0; i < N; i++) {
		snprintf(tags[i], sizeof(tags[i]), "f%04d", i);
		d[i] = (struct xfer_desc){ lbuf.region, (uint64_t)i, 1 };
		ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
						 .handle = w.handle,
						 .offset = (uint64_t)i,
						 .descs = &d[i],
						 .n = 1,
						 .tag = tags[i] };
	}
	for (int i = 0; i < N; i += PER) {
		CHECK_OK(xfer_batch(opener, ops + i, PER, NULL, &done, NULL));
		CHECK_EQ_INT(done, PER);
	}
	long long until = td_now_ms() + WAIT_MS;
	while (listed("list.windows", "waiting") <= 0) { /* the owner reads nothing till then */
		CHECK(td_now_ms() < until);
		usleep(10000);
	}
	owner_took_tags(owner, &seen, N);
	for (int i = 0; i < N; i++)
		wait_complete(opener, ops[i].op);
	slow_owner_done(owner, &w, &lbuf, N);
}

TEST(local_slow_owner_flood)
{
	on_one_node(slow_owner);
}

TEST(cross_slow_owner_flood)
{
	on_two_nodes(slow_owner);
}

/* Posts tagged 1-byte puts @from..@to-1 (tag "f%04d", window offset i % @len) in one batch. */
static void post_flood(struct xfer_client *opener, const struct win *w, const struct tbuf *lbuf,
		       size_t len, int from, int to, struct xfer_batch_op *ops)
{
	static struct xfer_desc d[1000];
	static char tags[1000][16];
	size_t done = 0;

	CHECK(to - from <= 1000);
	for (int i = from; i < to; i++) {
		uint64_t at = (uint64_t)i % len;
		snprintf(tags[i - from], sizeof(tags[0]), "f%04d", i);
		d[i - from] = (struct xfer_desc){ lbuf->region, at, 1 };
		ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
						 .handle = w->handle,
						 .offset = at,
						 .descs = &d[i - from],
						 .n = 1,
						 .tag = tags[i - from] };
	}
	CHECK_OK(xfer_batch(opener, ops + from, (size_t)(to - from), NULL, &done, NULL));
	CHECK_EQ_INT(done, to - from);
}

/*
 * More tagged puts at an owner that reads nothing than any opener may have waiting at the
 * owner's daemon (PROTOCOL.md §10.9: 1024 queued to the owner's client plus 4096 waiting;
 * 1024 waiting for a keyed RDMA opener, by its credit): the opener is slowed to the owner's
 * pace, never revoked. The opener keeps 3000 puts out and waits for the oldest; only when that
 * wait stalls and notifications wait at the owner's daemon (it is behind) does the owner read.
 * Every put ends COMPLETE, the owner takes every tag once and in order, its queue stayed near
 * XD_NOTIFY_HIGH, and the window holds the bytes. Over TCP a put waits for its WACK, locally
 * for its notification, over RDMA for the owner's WNOTIFY_ACK credit (make test-rdma); before
 * that credit existed the RDMA opener was revoked EDQUOT past 5120.
 */
static void slow_owner_past_bound(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 6000, PER = 500, OUT = 3000, LEN = 4096 };
	static struct xfer_batch_op ops[N];
	struct flood_seen seen = { 0, 0 };
	struct tbuf lbuf;
	struct win w;
	int posted = 0, ended = 0, stalls = 0, reads = 0;
	long long until = td_now_ms() + 4 * WAIT_MS;

	xfer_set_window_cb(owner, flood_cb, &seen);
	win_make(owner, opener, LEN, XFER_ACCESS_WRITE, &w);
	tbuf_make(opener, LEN, &lbuf);
	fill(lbuf.buf.addr, LEN, 53);
	while (ended < N) {
		CHECK(td_now_ms() < until);
		for (; posted < N && posted + PER - ended <= OUT; posted += PER)
			post_flood(opener, &w, &lbuf, LEN, posted, posted + PER, ops);
		struct xfer_op_info info;
		int rc = xfer_wait(opener, ops[ended].op, 100, &info);
		if (rc == -ETIMEDOUT) { /* held: the owner reads once it is behind (never before) */
			stalls++;
			if (listed("list.windows", "waiting") > 0) {
				CHECK(xfer_dispatch(owner) >= 0);
				reads++;
			}
			continue;
		}
		CHECK_OK(rc);
		if (info.state != XFER_COMPLETE)
			harness_fail(__FILE__, __LINE__, "put %d (op %llu) ended %s: %s", ended,
				     (unsigned long long)ops[ended].op, xfer_state_name(info.state),
				     info.cause);
		CHECK_OK(xfer_release(opener,
				      ops[ended].op)); /* (a client holds 4096 ops at most) */
		ended++;
	}
	CHECK(stalls > 0 &&
	      reads > 0); /* slowed: N puts cannot all end while the owner reads nothing */
	harness_note("%d puts, the opener held %d times, the owner read %d times", N, stalls,
		     reads);
	owner_took_tags(owner, &seen, N);
	slow_owner_done(owner, &w, &lbuf, LEN);
}

TEST(local_slow_owner_past_bound)
{
	if (external()) /* (the same local path as in make test: the VM's time goes to RDMA) */
		harness_skip("local openers are covered by make test");
	on_one_node(slow_owner_past_bound);
}

TEST(cross_slow_owner_past_bound)
{
	on_two_nodes(slow_owner_past_bound);
}

/* A window over a @len-byte temporary file of the owner's, opened by the opener. */
struct fwin {
	char path[32];
	int fd;
	uint64_t region, window, handle;
	char *meta;
};

static void fwin_open(struct xfer_client *owner, struct xfer_client *opener, size_t len,
		      enum xfer_access access, struct fwin *f)
{
	snprintf(f->path, sizeof(f->path), "/tmp/xferd-wfile-XXXXXX");
	f->meta = NULL;
	f->fd = mkstemp(f->path);
	CHECK(f->fd >= 0 && ftruncate(f->fd, (off_t)len) == 0);
	CHECK_OK(xfer_region_register_file(owner, f->fd, 0, 0, 0, "wfile", &f->region));
	CHECK_OK(xfer_window_create(owner, f->region, 0, 0, access, 0, &f->window, &f->meta));
	CHECK_OK(xfer_window_open(opener, f->meta, &f->handle, NULL, NULL));
}

static void fwin_close(struct xfer_client *owner, struct fwin *f)
{
	CHECK_OK(xfer_window_close(owner, f->window));
	free(f->meta);
	close(f->fd);
	unlink(f->path);
}

/* File regions move over TCP only: skips the test elsewhere. */
static void file_windows_need_tcp(void)
{
	cross_node();
	if (want_transport && strcmp(want_transport, "tcp") != 0)
		harness_skip("file regions move over tcp only (RDMA staging is not written yet)");
}

/*
 * Tagged puts into a window over a file go as claims (PROTOCOL.md §10.9): nothing slows their
 * opener, so once XD_WINDOW_MAX_INFLIGHT notifications wait for an owner that reads nothing,
 * its daemon refuses further puts (EDQUOT, naming the rule) instead of queueing without bound or
 * cutting the owner. The owner, still connected, then takes the tag of every put that
 * completed, once and in order, and each of those bytes is in the file.
 */
static void file_window_slow_owner(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { PER = 1000, MAX_PUTS = 8000, LEN = 8192 };
	static struct xfer_batch_op ops[PER];
	static struct xfer_desc d[PER];
	static char tags[MAX_PUTS][16];
	struct flood_seen seen = { 0, 0 };
	struct fwin f;
	struct tbuf lbuf;
	int sent = 0, completed = 0, refused = 0;
	size_t done = 0;

	fwin_open(owner, opener, LEN, XFER_ACCESS_WRITE, &f);
	xfer_set_window_cb(owner, flood_cb, &seen);
	tbuf_make(opener, LEN, &lbuf);
	fill(lbuf.buf.addr, LEN, 41);
	/* The owner reads nothing: its queue fills, then notifications wait, then puts are refused. */
	while (refused == 0 && sent < MAX_PUTS) {
		for (int i = 0; i < PER; i++, sent++) {
			uint64_t at = (uint64_t)sent % LEN;
			snprintf(tags[sent], sizeof(tags[sent]), "f%04d", sent);
			d[i] = (struct xfer_desc){ lbuf.region, at, 1 };
			ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
							 .handle = f.handle,
							 .offset = at,
							 .descs = &d[i],
							 .n = 1,
							 .tag = tags[sent] };
		}
		CHECK_OK(xfer_batch(opener, ops, PER, NULL, &done, NULL));
		CHECK_EQ_INT(done, PER);
		for (int i = 0; i < PER; i++) {
			struct xfer_op_info info;
			wait_ended(opener, ops[i].op, &info);
			if (info.state == XFER_COMPLETE) {
				/* in order: none completes after a refusal */
				CHECK_EQ_INT(refused, 0);
				completed++;
			} else {
				CHECK_EQ_INT(info.error, -EDQUOT);
				CHECK(strstr(info.cause, "10.9") != NULL);
				refused++;
			}
			/* (a client holds 4096 operations at most) */
			CHECK_OK(xfer_release(opener, ops[i].op));
		}
	}
	CHECK(refused > 0);
	CHECK(listed("list.clients", "queued_max") >= 1024); /* still connected, and was behind */
	WAIT_EVENTS(owner, seen.next >= completed);
	CHECK_EQ_INT(seen.next, completed);
	CHECK_EQ_INT(seen.wrong, 0);
	uint8_t *back = malloc(LEN);
	CHECK(back && pread(f.fd, back, LEN, 0) == LEN);
	CHECK_MEM_EQ(back, lbuf.buf.addr, completed < LEN ? (size_t)completed : LEN);
	free(back);
	xfer_set_window_cb(owner, NULL, NULL);
	fwin_close(owner, &f);
	xfer_buf_free(&lbuf.buf);
}

TEST(cross_file_window_slow_owner_refuses)
{
	file_windows_need_tcp();
	on_two_nodes(file_window_slow_owner);
}

/*
 * A window over a file region: its owner's daemon tells the opener so at the open, and gets and
 * puts go as claims (one-sided frames read and write mappings only), byte-exact both ways.
 */
static void file_window_get_put(struct xfer_client *owner, struct xfer_client *opener)
{
	const size_t len = 256 * KiB;
	struct fwin f;
	struct tbuf lbuf;
	uint64_t op;

	fwin_open(owner, opener, len, XFER_ACCESS_READWRITE, &f);
	tbuf_make(opener, len, &lbuf);
	fill(lbuf.buf.addr, len, 21);
	struct xfer_desc d = { lbuf.region, 0, 100 * KiB + 1 };
	CHECK_OK(xfer_put(opener, f.handle, 4097, &d, 1, NULL, NULL, &op));
	wait_complete(opener, op);
	uint8_t *back = malloc(len);
	CHECK(back && pread(f.fd, back, 100 * KiB + 1, 4097) == (ssize_t)(100 * KiB + 1));
	CHECK_MEM_EQ(back, lbuf.buf.addr, 100 * KiB + 1);
	memset(lbuf.buf.addr, 0, len);
	CHECK_OK(xfer_get(opener, f.handle, 4097, &d, 1, NULL, NULL, &op));
	wait_complete(opener, op);
	CHECK_MEM_EQ(lbuf.buf.addr, back, 100 * KiB + 1);
	free(back);
	fwin_close(owner, &f);
	xfer_buf_free(&lbuf.buf);
}

TEST(cross_window_over_a_file)
{
	file_windows_need_tcp();
	on_two_nodes(file_window_get_put);
}

/*
 * One op.batch of 4 tagged puts then 4 gets through xfer_call(): @text: the params in the
 * library's order ({"ops", "release_on_end", "event", "timeout_ms"}: their compact dump is the
 * text the daemon reads without jansson, xp_batch_req_read()), else in another order (jansson's
 * way). Way @way's puts fill window slots 8 * @way + i from the opener's same slots, tagged
 * "wWAY-I"; its gets read window slots 16 + 8 * @way + i into the opener's same slots. Entry
 * @bad, when below 8, asks for bytes past the window; @timeout_ms is the batch's. Returns the
 * result (json_decref() it).
 */
static json_t *batch_call(struct xfer_client *opener, const struct win *w, const struct tbuf *lbuf,
			  int way, bool text, int bad, long timeout_ms)
{
	enum { N = 8, LEN = 4096 };
	char ops[2048], params[2300], *reply = NULL;
	size_t o = 0;

	for (int i = 0; i < N; i++) {
		bool put = i < N / 2;
		uint64_t slot = (uint64_t)((put ? 0 : 16) + way * N + i) * LEN;
		o += (size_t)snprintf(
			ops + o, sizeof(ops) - o,
			put ? "%s[\"put\", %llu, %llu, [[%llu, %llu, %d]], \"w%d-%d\"]" :
			      "%s[\"get\", %llu, %llu, [[%llu, %llu, %d]]]",
			i ? ", " : "[", (unsigned long long)w->handle,
			(unsigned long long)(i == bad ? 64 * LEN : slot),
			(unsigned long long)lbuf->region, (unsigned long long)slot, LEN, way, i);
	}
	snprintf(ops + o, sizeof(ops) - o, "]");
	if (text)
		snprintf(params, sizeof(params),
			 "{\"ops\": %s, \"release_on_end\": true, \"event\": \"batch\", "
			 "\"timeout_ms\": %ld}",
			 ops, timeout_ms);
	else
		snprintf(params, sizeof(params),
			 "{\"timeout_ms\": %ld, \"ops\": %s, \"event\": \"batch\", "
			 "\"release_on_end\": true}",
			 timeout_ms, ops);
	CHECK_OK(xfer_call(opener, "op.batch", params, &reply));
	json_t *res = json_loads(reply, 0, NULL);
	CHECK(res != NULL);
	free(reply);
	return res;
}

/* Waits for @ev's tags of way @way's puts @from..@to-1 after the @base it had, and checks them. */
static void batch_tags(struct xfer_client *owner, struct wevents *ev, int base, int way, int from,
		       int to)
{
	char tag[16];

	WAIT_EVENTS(owner, ev->notified >= base + to - from);
	CHECK_EQ_INT(ev->notified, base + to - from); /* exactly once */
	for (int i = from; i < to; i++) {
		snprintf(tag, sizeof(tag), "w%d-%d", way, i);
		CHECK_STR_EQ(ev->tags[base + i - from], tag); /* in order */
		CHECK_EQ_INT(ev->bytes[base + i - from], 4096);
	}
}

/*
 * A batch of gets and puts read as text by the daemon does what the same batch read by jansson
 * does (two ways, one after the other on one window): the reply's op ids are the ones the
 * batch's one event lists, all COMPLETE and released on their ends; each put's tag is notified
 * once, in order, with its bytes; every byte lands; a bad entry stops both with the same
 * refusal, the entries before it standing.
 */
static void batch_text_as_jansson(struct xfer_client *owner, struct xfer_client *opener)
{
	enum { N = 8, LEN = 4096 };
	static struct wevents ev;
	static struct bevents b;
	struct xfer_op_info info;
	struct tbuf lbuf;
	struct win w;
	char *why[4] = { NULL, NULL, NULL, NULL };

	tagged_rig(owner, opener, 32 * LEN, 31, &ev, &w, &lbuf);
	xfer_set_batch_cb(opener, batch_cb, &b);
	for (int way = 0; way < 2; way++) {
		uint8_t *lb = lbuf.buf.addr, *wb = w.obuf.buf.addr;
		uint64_t ids[N];
		memset(&b, 0, sizeof(b));
		json_t *res = batch_call(opener, &w, &lbuf, way, way == 0, N, 60000);
		json_t *results = json_object_get(res, "results");
		CHECK_EQ_INT(json_array_size(results), N);
		for (int i = 0; i < N; i++)
			CHECK_OK(xp_get_u64(json_array_get(results, (size_t)i), "op", &ids[i]));
		WAIT_EVENTS(opener, b.events == 1);
		CHECK(json_integer_value(json_object_get(res, "batch")) == (json_int_t)b.batch);
		CHECK_EQ_INT(b.n, N);
		CHECK_EQ_INT(b.complete, N);
		qsort(ids, N, sizeof(ids[0]), cmp_u64);
		qsort(b.seen, N, sizeof(b.seen[0]), cmp_u64);
		CHECK_MEM_EQ(b.seen, ids, sizeof(ids));
		free(b.seen);
		CHECK_ERR(xfer_status(opener, ids[0], &info), -ENOENT); /* released on its end */
		batch_tags(owner, &ev, way * 6, way, 0, N / 2);
		CHECK_MEM_EQ(wb + way * N * LEN, lb + way * N * LEN, N / 2 * LEN);
		CHECK_MEM_EQ(lb + (16 + way * N + N / 2) * LEN, wb + (16 + way * N + N / 2) * LEN,
			     N / 2 * LEN);
		json_decref(res);
		memset(&b, 0, sizeof(b));
		res = batch_call(opener, &w, &lbuf, way, way == 0, 2, 60000);
		CHECK_EQ_INT(json_array_size(json_object_get(res, "results")), 2);
		CHECK_EQ_INT(json_integer_value(json_object_get(res, "failed")), 2);
		why[way] = strdup(json_string_value(json_object_get(res, "message")));
		WAIT_EVENTS(opener, b.events == 1); /* (the two before it, and the refusal) */
		free(b.seen);
		batch_tags(owner, &ev, way * 6 + 4, way, 0, 2);
		json_decref(res);
		/* a timeout out of range: refused at the first entry, by the same rule */
		memset(&b, 0, sizeof(b));
		res = batch_call(opener, &w, &lbuf, way, way == 0, N, 0);
		CHECK_EQ_INT(json_array_size(json_object_get(res, "results")), 0);
		why[2 + way] = strdup(json_string_value(json_object_get(res, "message")));
		WAIT_EVENTS(opener, b.events == 1); /* (an event of no ends) */
		CHECK_EQ_INT(b.n, 0);
		free(b.seen);
		json_decref(res);
	}
	CHECK(why[0] && strstr(why[0], "op.batch entry 2: ") == why[0]);
	CHECK_STR_EQ(why[0], why[1]);
	CHECK(why[2] && strstr(why[2], "op.batch entry 0: timeout_ms must be") == why[2]);
	CHECK_STR_EQ(why[2], why[3]);
	for (int k = 0; k < 4; k++)
		free(why[k]);
	xfer_set_batch_cb(opener, NULL, NULL);
	CHECK_OK(xfer_window_close(owner, w.window));
	free(w.meta);
	xfer_buf_free(&w.obuf.buf);
	xfer_buf_free(&lbuf.buf);
}

TEST(local_batch_text_as_jansson)
{
	on_one_node(batch_text_as_jansson);
}

TEST(cross_batch_text_as_jansson)
{
	on_two_nodes(batch_text_as_jansson);
}
