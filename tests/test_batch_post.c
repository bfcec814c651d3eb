// SPDX-License-Identifier: MIT
/*
 * Posted batches (op.batch "reply": false, libxferclient's XFER_OP_POST) against real xferd
 * processes: a client posts gets and puts, one per call, without waiting for a reply; each
 * batch's op.batch_done is its whole answer. Bytes are compared after every round, across two
 * daemons (TCP, keyed) and on one. Refusals: an entry refused mid-batch and the ones after it
 * come as ends with op 0 (ERRORED with its errno, then CANCELLED) and the daemon's sentence;
 * the library's and the daemon's rules (a posted batch needs one event, carries no passive
 * entry); no reply is ever sent to a posted batch. Hostile: a client that posts refused batches
 * without reading is cut at its queue bound, and the daemon's memory and fds stay bounded.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"
#include "xp_fdmsg.h"

#define BLOCK 4096ul
#define NBLOCKS 64
#define WAIT_MS 60000

/* An owner with a window over its buffer, an opener on the same or another daemon. */
struct rig {
	struct td a, b; /* b is not started on one node */
	struct td_key key;
	bool cross;
	struct xfer_client *owner, *opener;
	struct xfer_buf obuf, pbuf;
	uint64_t oregion, pregion, window, handle;
};

static void node_start(struct rig *r, struct td *d)
{
	char cfg[300];

	snprintf(cfg, sizeof(cfg), "{\"listen\": [\"127.0.0.1:0\"], \"peer_key_file\": \"%s\"}",
		 r->key.path);
	CHECK_OK(td_start(d, cfg));
}

static void rig_start(struct rig *r, bool cross)
{
	char *meta = NULL;

	memset(r, 0, sizeof(*r));
	r->cross = cross;
	CHECK_OK(td_key_make(&r->key));
	node_start(r, &r->a);
	if (cross)
		node_start(r, &r->b);
	CHECK_OK(xfer_connect(r->a.sock, "owner", &r->owner));
	CHECK_OK(xfer_connect(cross ? r->b.sock : r->a.sock, "poster", &r->opener));
	CHECK_OK(xfer_buf_alloc(NBLOCKS * BLOCK, &r->obuf));
	CHECK_OK(xfer_buf_alloc(NBLOCKS * BLOCK, &r->pbuf));
	CHECK_OK(xfer_region_register(r->owner, r->obuf.fd, 0, 0, "owner", &r->oregion));
	CHECK_OK(xfer_region_register(r->opener, r->pbuf.fd, 0, 0, "poster", &r->pregion));
	CHECK_OK(xfer_window_create(r->owner, r->oregion, 0, 0, XFER_ACCESS_READWRITE, 0,
				    &r->window, &meta));
	CHECK_OK(xfer_window_open(r->opener, meta, &r->handle, NULL, NULL));
	free(meta);
}

static void rig_stop(struct rig *r)
{
	CHECK_OK(xfer_window_close(r->opener, r->handle));
	CHECK_OK(xfer_window_close(r->owner, r->window));
	xfer_close(r->opener);
	xfer_close(r->owner);
	xfer_buf_free(&r->pbuf);
	xfer_buf_free(&r->obuf);
	if (r->cross)
		CHECK_EQ_INT(td_stop(&r->b), 0);
	CHECK_EQ_INT(td_stop(&r->a), 0);
	td_key_remove(&r->key);
}

/* The batch events a poster received, by the batch ids xfer_batch() gave. */
struct posted {
	uint64_t ids[NBLOCKS];
	int nids, events, stray;
	size_t ends, complete;
	struct xfer_batch_end last[4]; /* the ends of the last event (up to 4) */
	size_t last_n;
	char why[256]; /* xfer_last_error() inside the last callback */
};

static void posted_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct posted *p = arg;
	bool ours = false;

	for (int i = 0; i < p->nids; i++)
		ours |= p->ids[i] == ev->batch;
	p->stray += !ours;
	p->events++;
	p->ends += ev->n;
	p->last_n = ev->n;
	for (size_t i = 0; i < ev->n; i++) {
		p->complete += ev->ends[i].state == XFER_COMPLETE;
		if (i < 4)
			p->last[i] = ev->ends[i];
	}
	snprintf(p->why, sizeof(p->why), "%s", xfer_last_error(c));
}

/* Takes events until @events batch events arrived. */
static void wait_events(struct xfer_client *c, struct posted *p, int events)
{
	long long until = td_now_ms() + WAIT_MS;

	while (p->events < events) {
		CHECK(td_now_ms() < until);
		CHECK(xfer_dispatch(c) >= 0);
		usleep(1000);
	}
}

/* Posts one get or put of block @i (window block @i <-> poster block NBLOCKS - 1 - @i). */
static void post_one(struct rig *r, struct posted *p, enum xfer_kind kind, size_t i)
{
	struct xfer_desc d = { r->pregion, (NBLOCKS - 1 - i) * BLOCK, BLOCK };
	struct xfer_batch_op op = {
		.kind = kind, .handle = r->handle, .offset = i * BLOCK, .descs = &d, .n = 1
	};
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT |
					      XFER_OP_POST };

	op.op = 12345; /* (a posted entry's id is not known: the library zeroes it) */
	CHECK_OK(xfer_batch(r->opener, &op, 1, &opts, NULL, &p->ids[p->nids]));
	CHECK(p->ids[p->nids] != 0);
	CHECK_EQ_INT(op.op, 0);
	for (int k = 0; k < p->nids; k++)
		CHECK(p->ids[k] != p->ids[p->nids]);
	p->nids++;
}

/* Every block's bytes where a put (@put) or get left them. */
static void check_blocks(const struct rig *r, bool put)
{
	for (size_t i = 0; i < NBLOCKS; i++) {
		const char *w = (const char *)r->obuf.addr + i * BLOCK;
		const char *m = (const char *)r->pbuf.addr + (NBLOCKS - 1 - i) * BLOCK;
		if (memcmp(w, m, BLOCK))
			harness_fail(__FILE__, __LINE__, "%s of block %zu: bytes differ",
				     put ? "put" : "get", i);
	}
}

/*
 * NBLOCKS puts posted one per call with all of them in flight, then NBLOCKS gets the same way
 * (new bytes in the window meanwhile): one event each, with the id the call gave, COMPLETE,
 * every byte where it belongs.
 */
static void one_per_call(bool cross)
{
	struct rig r;
	struct posted p = { 0 };

	rig_start(&r, cross);
	xfer_set_batch_cb(r.opener, posted_cb, &p);
	td_fill(r.pbuf.addr, NBLOCKS * BLOCK, 11);
	memset(r.obuf.addr, 0, NBLOCKS * BLOCK);
	for (size_t i = 0; i < NBLOCKS; i++)
		post_one(&r, &p, XFER_PUT, i);
	wait_events(r.opener, &p, NBLOCKS);
	CHECK_EQ_INT(p.stray, 0);
	CHECK_EQ_INT(p.ends, NBLOCKS);
	CHECK_EQ_INT(p.complete, NBLOCKS);
	check_blocks(&r, true);

	p = (struct posted){ 0 };
	td_fill(r.obuf.addr, NBLOCKS * BLOCK, 12);
	memset(r.pbuf.addr, 0, NBLOCKS * BLOCK);
	for (size_t i = 0; i < NBLOCKS; i++)
		post_one(&r, &p, XFER_GET, i);
	wait_events(r.opener, &p, NBLOCKS);
	CHECK_EQ_INT(p.stray, 0);
	CHECK_EQ_INT(p.complete, NBLOCKS);
	check_blocks(&r, false);
	xfer_set_batch_cb(r.opener, NULL, NULL);
	rig_stop(&r);
}

TEST(cross_posted_gets_and_puts_one_per_call)
{
	one_per_call(true);
}

TEST(local_posted_gets_and_puts_one_per_call)
{
	one_per_call(false);
}

/*
 * A posted batch of three puts whose second passes the window's end: the first stands (its
 * bytes land), the second is an ERRORED end with op 0 and EINVAL, the third a CANCELLED one,
 * and the daemon's sentence is xfer_last_error() in the callback.
 */
TEST(cross_posted_refusal_is_in_the_event)
{
	struct rig r;
	struct posted p = { 0 };
	struct xfer_desc d = { 0, 0, BLOCK };
	struct xfer_batch_op ops[3];
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT |
					      XFER_OP_POST };

	rig_start(&r, true);
	d.region = r.pregion;
	for (int i = 0; i < 3; i++)
		ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
						 .handle = r.handle,
						 .offset = i == 1 ? NBLOCKS * BLOCK : 0,
						 .descs = &d,
						 .n = 1 };
	xfer_set_batch_cb(r.opener, posted_cb, &p);
	td_fill(r.pbuf.addr, BLOCK, 21);
	memset(r.obuf.addr, 0, BLOCK);
	CHECK_OK(xfer_batch(r.opener, ops, 3, &opts, NULL, &p.ids[0]));
	p.nids = 1;
	wait_events(r.opener, &p, 1);
	CHECK_EQ_INT(p.stray, 0);
	CHECK_EQ_INT(p.last_n, 3);
	CHECK_EQ_INT(p.complete, 1);
	/* (ends come in the order they ended: the refusals first, at the request) */
	CHECK_EQ_INT(p.last[0].op, 0);
	CHECK_EQ_INT(p.last[0].state, XFER_ERRORED);
	CHECK_EQ_INT(p.last[0].error, -EINVAL);
	CHECK_EQ_INT(p.last[1].op, 0);
	CHECK_EQ_INT(p.last[1].state, XFER_CANCELLED);
	CHECK_EQ_INT(p.last[1].error, -ECANCELED);
	CHECK(p.last[2].op != 0);
	CHECK_EQ_INT(p.last[2].state, XFER_COMPLETE);
	if (!strstr(p.why, "op.batch entry 1: ") || !strstr(p.why, "passes the end of window"))
		harness_fail(__FILE__, __LINE__, "the refusal's sentence: \"%s\"", p.why);
	CHECK_MEM_EQ(r.obuf.addr, r.pbuf.addr, BLOCK);
	xfer_set_batch_cb(r.opener, NULL, NULL);
	rig_stop(&r);
}

/*
 * A posted batch of 100 puts whose last passes the window's end: the daemon sends its event in
 * two parts (the first 36 ends as text with "more", the last 64 with the refusal), and the
 * library gives one event of 100 ends: 99 COMPLETE, the refusal's ERRORED end, its sentence.
 */
TEST(local_posted_refusal_after_many_entries_is_one_event)
{
	enum { N = 100 };
	struct rig r;
	struct posted p = { 0 };
	struct xfer_desc d = { 0, 0, BLOCK };
	struct xfer_batch_op ops[N];
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT |
					      XFER_OP_POST };

	rig_start(&r, false);
	d.region = r.pregion;
	for (int i = 0; i < N; i++)
		ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
						 .handle = r.handle,
						 .offset = i == N - 1 ? NBLOCKS * BLOCK :
									(i % NBLOCKS) * BLOCK,
						 .descs = &d,
						 .n = 1 };
	xfer_set_batch_cb(r.opener, posted_cb, &p);
	td_fill(r.pbuf.addr, BLOCK, 23);
	CHECK_OK(xfer_batch(r.opener, ops, N, &opts, NULL, &p.ids[0]));
	p.nids = 1;
	wait_events(r.opener, &p, 1);
	usleep(100 * 1000); /* (a second event would come right behind the first) */
	CHECK_EQ_INT(xfer_dispatch(r.opener), 0);
	CHECK_EQ_INT(p.events, 1);
	CHECK_EQ_INT(p.stray, 0);
	CHECK_EQ_INT(p.ends, N);
	CHECK_EQ_INT(p.complete, N - 1);
	CHECK_EQ_INT(p.last[0].op, 0);
	CHECK_EQ_INT(p.last[0].state, XFER_ERRORED);
	CHECK_EQ_INT(p.last[0].error, -EINVAL);
	if (!strstr(p.why, "op.batch entry 99: ") || !strstr(p.why, "passes the end of window"))
		harness_fail(__FILE__, __LINE__, "the refusal's sentence: \"%s\"", p.why);
	for (int i = 0; i < NBLOCKS; i++)
		CHECK_MEM_EQ((char *)r.obuf.addr + i * BLOCK, r.pbuf.addr, BLOCK);
	xfer_set_batch_cb(r.opener, NULL, NULL);
	rig_stop(&r);
}

/* What the library refuses before sending: a posted batch needs one event, no passive entry. */
TEST(local_posted_batch_rules_in_the_library)
{
	struct rig r;
	struct xfer_desc d = { 0, 0, BLOCK };
	struct xfer_batch_op op = { .kind = XFER_PUT, .descs = &d, .n = 1 };
	struct xfer_op_opts opts = { .flags = XFER_OP_POST };
	uint64_t id = 7;

	rig_start(&r, false);
	d.region = r.pregion;
	op.handle = r.handle;
	CHECK_ERR(xfer_batch(r.opener, &op, 1, &opts, NULL, &id), -EINVAL);
	CHECK(strstr(xfer_last_error(r.opener), "needs XFER_OP_BATCH_EVENT") != NULL);
	CHECK_EQ_INT(id, 0);
	opts.flags |= XFER_OP_BATCH_EVENT;
	op.kind = XFER_READABLE;
	CHECK_ERR(xfer_batch(r.opener, &op, 1, &opts, NULL, &id), -EINVAL);
	CHECK(strstr(xfer_last_error(r.opener), "carries no readable or writable") != NULL);
	rig_stop(&r);
}

/* Sends one packet, waiting while the socket is full. Returns 0 or -errno. */
static int send_waiting(int sock, const char *text, size_t len)
{
	int rc;

	while ((rc = xp_packet_send(sock, text, len, NULL, 0)) == -EAGAIN) {
		struct pollfd pfd = { .fd = sock, .events = POLLOUT };
		if (poll(&pfd, 1, 10000) <= 0)
			return -ETIMEDOUT;
	}
	return rc;
}

/* Receives the next packet on @sock, notification or reply, into @rep. Returns 0 or -errno. */
static int raw_recv(int sock, struct xp_reply *rep)
{
	static char buf[65536];
	struct xp_fdset fds;
	int n = xp_packet_recv(sock, buf, sizeof(buf), &fds, 0);

	if (n < 0)
		return n;
	xp_fdset_close(&fds);
	return xp_reply_parse(buf, (size_t)n, rep);
}

/*
 * The daemon's rules, raw: "reply": false without "event": "batch" is refused (answered: there
 * is nothing else to answer with); a posted batch's passive entry is refused into its event; a
 * posted batch is never answered: the stats request sent right after it gets the next reply,
 * and the batch's event carries the request's own id.
 */
static void posted_passive_refused(int sock, const char *posted);

TEST(local_posted_batch_rules_in_the_daemon)
{
	struct td d;
	struct xp_reply rep;
	int sock;

	CHECK_OK(td_start(&d, NULL));
	CHECK((sock = td_raw_connect(&d)) >= 0);
	CHECK_OK(td_raw_hello(sock));
	CHECK_OK(td_raw_call(sock,
			     "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"op.batch\",\"params\":"
			     "{\"ops\":[[\"put\",1,0,[[1,0,1]]]],\"reply\":false}}",
			     NULL, 0, &rep));
	CHECK(!rep.result && rep.id == 5);
	CHECK(strstr(rep.message, "reply false needs event \"batch\"") != NULL);
	xp_reply_fini(&rep);
	/* the long and the compact form of a readable entry alike */
	static const char *const posted[] = {
		"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"op.batch\",\"params\":{\"ops\":"
		"[{\"method\":\"op.readable\",\"params\":{\"descs\":[{\"region\":1,\"offset\":0,"
		"\"length\":1}]}},[\"get\",1,0,[[1,0,1]]]],\"event\":\"batch\",\"reply\":false}}",
		"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"op.batch\",\"params\":{\"ops\":"
		"[[\"readable\",[[1,0,1]]],[\"get\",1,0,[[1,0,1]]]],\"event\":\"batch\",\"reply\":false}}",
	};
	for (size_t k = 0; k < 2; k++)
		posted_passive_refused(sock, posted[k]);
	close(sock);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* Posted batch @posted (id 6, a readable entry first, then a get) is refused in its event. */
static void posted_passive_refused(int sock, const char *posted)
{
	static const char stats[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"stats\"}";
	struct xp_reply rep;

	CHECK_OK(send_waiting(sock, posted, strlen(posted)));
	CHECK_OK(send_waiting(sock, stats, sizeof(stats) - 1));
	bool answered = false, event = false;
	while (!answered || !event) {
		CHECK_OK(raw_recv(sock, &rep));
		if (rep.notification) {
			CHECK(strcmp(rep.method, "op.batch_done") == 0);
			json_t *ops = json_object_get(rep.params, "ops");
			CHECK_EQ_INT(json_integer_value(json_object_get(rep.params, "batch")), 6);
			CHECK_EQ_INT(json_array_size(ops), 2);
			CHECK(strcmp(json_string_value(
					     json_object_get(json_array_get(ops, 0), "errno")),
				     "EINVAL") == 0);
			CHECK_EQ_INT(json_integer_value(json_object_get(rep.params, "failed")), 0);
			CHECK(strstr(json_string_value(json_object_get(rep.params, "message")),
				     "carries no op.readable") != NULL);
			event = true;
		} else {
			CHECK_EQ_INT(rep.id, 7); /* (never 6: a posted batch gets no reply) */
			CHECK(rep.result != NULL);
			answered = true;
		}
		xp_reply_fini(&rep);
	}
}

/*
 * Hostile: a client posts refused batches (no such handle) as fast as it can and never reads
 * their events. The daemon queues at most its bound for it, cuts it ("client stopped
 * reading"), and stays up with its memory and fds where they were; a new client is served.
 */
TEST(local_posted_flood_without_reading_is_cut)
{
	static const char flood[] =
		"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"op.batch\",\"params\":{\"ops\":"
		"[[\"put\",999,0,[[1,0,1]]]],\"event\":\"batch\",\"reply\":false}}";
	struct td d;
	struct xfer_client *c;
	int sock, sent = 0, rc = 0;

	CHECK_OK(td_start(&d, NULL));
	int fds0 = td_quiet_fd_count(&d, 0);
	long long rss0 = td_status_kib(d.pid, "VmRSS");
	CHECK((sock = td_raw_connect(&d)) >= 0);
	CHECK_OK(td_raw_hello(sock));
	while (sent < 100000 && (rc = send_waiting(sock, flood, sizeof(flood) - 1)) == 0)
		sent++;
	CHECK(rc == -EPIPE || rc == -ECONNRESET);
	close(sock);
	td_check_alive(&d, "after the flood");
	CHECK_EQ_INT(td_quiet_fd_count(&d, 0), fds0);
	long long rss = td_status_kib(d.pid, "VmRSS");
	harness_note("%d posted before the cut; RSS %lld -> %lld KiB", sent, rss0, rss);
#ifndef __SANITIZE_ADDRESS__
	/* (ASan's quarantine keeps freed events resident: the cut above is the check there.) */
	if (rss - rss0 > 48 * 1024)
		harness_fail(__FILE__, __LINE__, "daemon grew from %lld to %lld KiB", rss0, rss);
#endif
	CHECK_OK(xfer_connect(d.sock, "after", &c));
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}
