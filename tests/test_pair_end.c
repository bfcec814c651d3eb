// SPDX-License-Identifier: MIT
/*
 * How a pairing across nodes ends (PROTOCOL.md §10.3, §5), through libxferclient against two
 * real xferd processes on 127.0.0.1 (TCP, keyed):
 * - XFER_OP_END_ONLY: each side's client is pushed one event, the end, and no IN_PROGRESS; a
 *   refused claim still arrives as the ERRORED end. Every byte is compared.
 * - the short end (CLAIM and CLAIM_OK agree on "quick_end"): reads and writes of many sizes
 *   complete byte-exact on both sides, and an owner's cancel racing the end of a read leaves
 *   both sides agreeing (both COMPLETE, or both not).
 * - a claimer that stops answering once it has every byte cannot keep the owner's cancelled
 *   operation waiting past keepalive_timeout_ms, and the daemon keeps serving.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define SIZE (256 * 1024ul)
#define WAIT_MS 60000

struct rig {
	struct td a, b;
	struct td_key key;
	struct xfer_client *owner, *active;
	struct xfer_buf obuf, abuf;
	uint64_t oregion, aregion;
};

static void node_start(struct rig *r, struct td *d)
{
	char cfg[400];

	/* (a short keepalive: the hostile case below is bounded by it) */
	snprintf(cfg, sizeof(cfg),
		 "{\"listen\": [\"127.0.0.1:0\"], \"peer_key_file\": \"%s\", \"keepalive_ms\": "
		 "300, \"keepalive_timeout_ms\": 1500}",
		 r->key.path);
	CHECK_OK(td_start(d, cfg));
}

static void rig_start(struct rig *r)
{
	memset(r, 0, sizeof(*r));
	CHECK_OK(td_key_make(&r->key));
	node_start(r, &r->a);
	node_start(r, &r->b);
	CHECK_OK(xfer_connect(r->a.sock, "owner", &r->owner));
	CHECK_OK(xfer_connect(r->b.sock, "claimer", &r->active));
	CHECK_OK(xfer_buf_alloc(SIZE, &r->obuf));
	CHECK_OK(xfer_buf_alloc(SIZE, &r->abuf));
	CHECK_OK(xfer_region_register(r->owner, r->obuf.fd, 0, 0, "owner", &r->oregion));
	CHECK_OK(xfer_region_register(r->active, r->abuf.fd, 0, 0, "claimer", &r->aregion));
}

static void rig_stop(struct rig *r)
{
	xfer_close(r->active);
	xfer_close(r->owner);
	xfer_buf_free(&r->abuf);
	xfer_buf_free(&r->obuf);
	CHECK_EQ_INT(td_stop(&r->b), 0);
	CHECK_EQ_INT(td_stop(&r->a), 0);
	td_key_remove(&r->key);
}

/* The events one client was pushed. */
struct seen {
	int events, ends, complete;
	enum xfer_state last;
};

static void seen_cb(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct seen *s = arg;

	(void)c;
	s->events++;
	s->last = info->state;
	s->ends += info->state == XFER_COMPLETE || info->state == XFER_CANCELLED ||
		   info->state == XFER_ERRORED;
	s->complete += info->state == XFER_COMPLETE;
}

/* Delivers both clients' events until each saw @ends ends (or WAIT_MS passed). */
static void wait_ends(struct rig *r, struct seen *o, struct seen *a, int ends)
{
	long long until = td_now_ms() + WAIT_MS;

	while ((o->ends < ends || a->ends < ends) && td_now_ms() < until) {
		CHECK(xfer_dispatch(r->owner) >= 0);
		CHECK(xfer_dispatch(r->active) >= 0);
		usleep(1000);
	}
	CHECK_EQ_INT(o->ends, ends);
	CHECK_EQ_INT(a->ends, ends);
}

/* One pairing of @len bytes, both sides END_ONLY (and NOWAIT, RELEASE_ON_END). */
static void pair_end_only(struct rig *r, bool write, uint64_t len, struct seen *o, struct seen *a)
{
	struct xfer_desc od = { r->oregion, 0, len }, ad = { r->aregion, 0, len };
	struct xfer_op_opts po = { .flags = XFER_OP_END_ONLY | XFER_OP_RELEASE_ON_END };
	struct xfer_op_opts ao = { .flags = XFER_OP_END_ONLY | XFER_OP_RELEASE_ON_END |
					    XFER_OP_NOWAIT };
	uint64_t pop, aop;
	char *md;

	td_fill(write ? r->abuf.addr : r->obuf.addr, len, len + write);
	memset(write ? r->obuf.addr : r->abuf.addr, 0, len);
	CHECK_OK(write ? xfer_writable(r->owner, &od, 1, &po, &pop, &md) :
			 xfer_readable(r->owner, &od, 1, &po, &pop, &md));
	CHECK_OK(write ? xfer_write(r->active, md, &ad, 1, &ao, &aop) :
			 xfer_read(r->active, md, &ad, 1, &ao, &aop));
	free(md);
	*o = *a = (struct seen){ 0 };
	wait_ends(r, o, a, 1);
	CHECK_MEM_EQ(r->obuf.addr, r->abuf.addr, len);
}

/* END_ONLY: one event a side, the end; a refused claim's end still comes. */
TEST(end_only_pushes_the_end_alone)
{
	static const uint64_t lens[] = { 1, 4096, 65536, SIZE };
	struct seen o, a;
	struct rig r;

	rig_start(&r);
	xfer_set_event_cb(r.owner, seen_cb, &o);
	xfer_set_event_cb(r.active, seen_cb, &a);
	for (int w = 0; w < 2; w++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			pair_end_only(&r, w, lens[i], &o, &a);
			CHECK_EQ_INT(o.events, 1);
			CHECK_EQ_INT(a.events, 1);
			CHECK_EQ_INT(o.complete, 1);
			CHECK_EQ_INT(a.complete, 1);
		}
	/* a read of a writable's metadata: refused by the owner, the claimer's one event */
	struct xfer_desc od = { r.oregion, 0, 4096 }, ad = { r.aregion, 0, 4096 };
	struct xfer_op_opts ao = { .flags = XFER_OP_END_ONLY | XFER_OP_NOWAIT };
	uint64_t wop, aop;
	char *md;
	CHECK_OK(xfer_writable(r.owner, &od, 1, NULL, &wop, &md));
	a = (struct seen){ 0 };
	CHECK_OK(xfer_read(r.active, md, &ad, 1, &ao, &aop));
	free(md);
	struct xfer_op_info info;
	CHECK_OK(xfer_wait(r.active, aop, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_ERRORED);
	CHECK_EQ_INT(a.events, 1);
	CHECK_EQ_INT(a.last, XFER_ERRORED);
	CHECK_OK(xfer_release(r.active, aop));
	CHECK_OK(xfer_release(r.owner, wop));
	rig_stop(&r);
}

/* END_ONLY on op.batch: its pairing entries push their ends alone, one event per op. */
TEST(end_only_in_batches)
{
	enum { N = 4, BLK = 16384 };
	struct xfer_desc od[N], ad[N];
	struct xfer_batch_op pops[N], aops[N];
	struct xfer_op_opts opts = { .flags = XFER_OP_END_ONLY | XFER_OP_RELEASE_ON_END };
	struct seen o = { 0 }, a = { 0 };
	size_t made;
	struct rig r;

	rig_start(&r);
	xfer_set_event_cb(r.owner, seen_cb, &o);
	xfer_set_event_cb(r.active, seen_cb, &a);
	td_fill(r.obuf.addr, N * BLK, 5);
	memset(r.abuf.addr, 0, N * BLK);
	for (int i = 0; i < N; i++) {
		od[i] = (struct xfer_desc){ r.oregion, (uint64_t)i * BLK, BLK };
		ad[i] = (struct xfer_desc){ r.aregion, (uint64_t)i * BLK, BLK };
		pops[i] = (struct xfer_batch_op){ .kind = XFER_READABLE, .descs = &od[i], .n = 1 };
	}
	CHECK_OK(xfer_batch(r.owner, pops, N, &opts, &made, NULL));
	for (int i = 0; i < N; i++)
		aops[i] = (struct xfer_batch_op){ .kind = XFER_READ,
						  .descs = &ad[i],
						  .n = 1,
						  .metadata = pops[i].made_metadata };
	CHECK_OK(xfer_batch(r.active, aops, N, &opts, &made, NULL));
	for (int i = 0; i < N; i++)
		free(pops[i].made_metadata);
	wait_ends(&r, &o, &a, N);
	CHECK_EQ_INT(o.events, N);
	CHECK_EQ_INT(a.events, N);
	CHECK_EQ_INT(o.complete, N);
	CHECK_EQ_INT(a.complete, N);
	CHECK_MEM_EQ(r.obuf.addr, r.abuf.addr, N * BLK);
	rig_stop(&r);
}

/*
 * The owner cancels its readable as soon as the claimer's read was accepted: whichever way the
 * race goes (the cancel before the last byte is out, after it, or after the reader's DONE),
 * both sides end the same way, and COMPLETE means every byte is there.
 */
TEST(owner_cancel_at_the_end_of_a_read_leaves_both_sides_agreeing)
{
	struct xfer_desc od = { 0, 0, 65536 }, ad = { 0, 0, 65536 };
	struct xfer_op_info oi, ai;
	struct rig r;

	rig_start(&r);
	od.region = r.oregion;
	ad.region = r.aregion;
	for (int round = 0; round < 16; round++) {
		uint64_t pop, aop;
		char *md;
		td_fill(r.obuf.addr, 65536, 77 + round);
		memset(r.abuf.addr, 0, 65536);
		CHECK_OK(xfer_readable(r.owner, &od, 1, NULL, &pop, &md));
		CHECK_OK(xfer_read(r.active, md, &ad, 1, NULL, &aop)); /* accepted: bytes follow */
		free(md);
		CHECK_OK(xfer_cancel(r.owner, pop));
		CHECK_OK(xfer_wait(r.owner, pop, WAIT_MS, &oi));
		CHECK_OK(xfer_wait(r.active, aop, WAIT_MS, &ai));
		if ((oi.state == XFER_COMPLETE) != (ai.state == XFER_COMPLETE))
			harness_fail(__FILE__, __LINE__, "round %d: owner %s (%s), claimer %s (%s)",
				     round, xfer_state_name(oi.state), oi.cause,
				     xfer_state_name(ai.state), ai.cause);
		if (ai.state == XFER_COMPLETE)
			CHECK_MEM_EQ(r.obuf.addr, r.abuf.addr, 65536);
		CHECK_OK(xfer_release(r.owner, pop));
		CHECK_OK(xfer_release(r.active, aop));
	}
	rig_stop(&r);
}

/*
 * Hostile: the claimer's daemon never says its last word (stopped for good once the read was
 * accepted). The owner's cancel still ends its op within keepalive_timeout_ms (1.5 s) and a
 * tick, the owner's daemon keeps serving, and nothing of the transfer is left there.
 */
TEST(a_silent_claimer_cannot_hold_a_cancelled_op)
{
	struct xfer_desc od = { 0, 0, 65536 }, ad = { 0, 0, 65536 };
	struct xfer_op_info oi;
	uint64_t pop, aop;
	char *md;
	struct rig r;

	rig_start(&r);
	od.region = r.oregion;
	ad.region = r.aregion;
	CHECK_OK(xfer_readable(r.owner, &od, 1, NULL, &pop, &md));
	CHECK_OK(xfer_read(r.active, md, &ad, 1, NULL, &aop));
	free(md);
	CHECK_OK(kill(r.b.pid, SIGSTOP));
	long long t0 = td_now_ms();
	int rc = xfer_cancel(r.owner, pop);
	CHECK(rc == 0);
	CHECK_OK(xfer_wait(r.owner, pop, 10000, &oi));
	CHECK(oi.state == XFER_CANCELLED || oi.state == XFER_ERRORED || oi.state == XFER_COMPLETE);
	CHECK(td_now_ms() - t0 < 10000);
	CHECK_OK(xfer_release(r.owner, pop));
	/* the owner's daemon still serves: a local pairing on it */
	CHECK_OK(xfer_readable(r.owner, &od, 1, NULL, &pop, &md));
	free(md);
	CHECK_OK(xfer_cancel(r.owner, pop));
	CHECK_OK(xfer_release(r.owner, pop));
	CHECK_OK(kill(r.b.pid, SIGCONT));
	xfer_release(r.active, aop);
	rig_stop(&r);
}
