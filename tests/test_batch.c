// SPDX-License-Identifier: MIT
/*
 * Pairings in op.batch, through libxferclient against real xferd processes, on one node (local
 * transport) and across two (daemons on 127.0.0.1, TCP, keyed): one request carries many reads
 * and writes of another client's readables and writables, answered at once with their op ids;
 * their ends come as one batch event; every byte is compared. Refusals: a read paired with a
 * writable (accepted, then ERRORED with the owner's reason, the writable left as it was), bad
 * metadata (the batch stops at that entry, the ones before it stand), metadata of an operation
 * that is gone, and the per-connection operation limit (the batch stops where it is reached).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define BLOCK (64 * 1024ul)
#define NBLOCKS 32
#define WAIT_MS 60000

/* Two clients: the owner of the passive operations and the one that batches the active ones. */
struct rig {
	struct td a, b; /* b is not started on one node */
	struct td_key key;
	bool cross;
	struct xfer_client *owner, *active;
	struct xfer_buf obuf, abuf;
	uint64_t oregion, aregion;
};

static void node_start(struct rig *r, struct td *d, const char *limits)
{
	char cfg[400];

	snprintf(cfg, sizeof(cfg), "{\"listen\": [\"127.0.0.1:0\"], \"peer_key_file\": \"%s\"%s%s}",
		 r->key.path, limits ? ", " : "", limits ? limits : "");
	CHECK_OK(td_start(d, cfg));
}

/* Starts one or two daemons; @limits (NULL: none) is a config fragment for the active side. */
static void rig_start(struct rig *r, bool cross, const char *limits)
{
	memset(r, 0, sizeof(*r));
	r->cross = cross;
	CHECK_OK(td_key_make(&r->key));
	node_start(r, &r->a, cross ? NULL : limits);
	if (cross)
		node_start(r, &r->b, limits);
	CHECK_OK(xfer_connect(r->a.sock, "owner", &r->owner));
	CHECK_OK(xfer_connect(cross ? r->b.sock : r->a.sock, "batcher", &r->active));
	CHECK_OK(xfer_buf_alloc(2 * NBLOCKS * BLOCK, &r->obuf));
	CHECK_OK(xfer_buf_alloc(2 * NBLOCKS * BLOCK, &r->abuf));
	CHECK_OK(xfer_region_register(r->owner, r->obuf.fd, 0, 0, "owner", &r->oregion));
	CHECK_OK(xfer_region_register(r->active, r->abuf.fd, 0, 0, "batcher", &r->aregion));
}

static void rig_stop(struct rig *r)
{
	xfer_close(r->active);
	xfer_close(r->owner);
	xfer_buf_free(&r->abuf);
	xfer_buf_free(&r->obuf);
	if (r->cross)
		CHECK_EQ_INT(td_stop(&r->b), 0);
	CHECK_EQ_INT(td_stop(&r->a), 0);
	td_key_remove(&r->key);
}

/* What the batch event delivered. */
struct bevent {
	int events;
	uint64_t batch;
	size_t n, complete;
	int first_error;
};

static void batch_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct bevent *b = arg;

	(void)c;
	b->events++;
	b->batch = ev->batch;
	b->n = ev->n;
	for (size_t i = 0; i < ev->n; i++) {
		b->complete += ev->ends[i].state == XFER_COMPLETE;
		if (ev->ends[i].state != XFER_COMPLETE && !b->first_error)
			b->first_error = ev->ends[i].error;
	}
}

static void wait_batch(struct xfer_client *c, struct bevent *b)
{
	long long until = td_now_ms() + WAIT_MS;

	while (b->events == 0) {
		CHECK(td_now_ms() < until);
		CHECK(xfer_dispatch(c) >= 0);
		usleep(2000);
	}
}

/* The owner's block @i: readables are blocks 0..NBLOCKS-1, writables the NBLOCKS after. */
static struct xfer_desc owner_block(const struct rig *r, size_t i)
{
	return (struct xfer_desc){ r->oregion, i * BLOCK, BLOCK };
}

/*
 * NBLOCKS readables and NBLOCKS writables on the owner's side; one batch of a read of each
 * readable (into the active buffer's blocks in reverse order) and a write into each writable,
 * with one event. Every op COMPLETE on both sides, every byte where it belongs.
 */
static void pairings_in_one_batch(struct rig *r)
{
	static struct xfer_batch_op ops[2 * NBLOCKS];
	static struct xfer_desc adesc[2 * NBLOCKS];
	uint64_t passive[2 * NBLOCKS], batch = 0;
	char *meta[2 * NBLOCKS];
	struct xfer_op_opts opts = { .flags = XFER_OP_BATCH_EVENT | XFER_OP_RELEASE_ON_END };
	struct bevent b = { 0 };
	size_t done = 0;

	td_fill(r->obuf.addr, NBLOCKS * BLOCK, 11);
	td_fill((uint8_t *)r->abuf.addr + NBLOCKS * BLOCK, NBLOCKS * BLOCK, 12);
	for (size_t i = 0; i < 2 * NBLOCKS; i++) {
		struct xfer_desc od = owner_block(r, i);
		bool read = i < NBLOCKS;
		size_t ablock = read ? NBLOCKS - 1 - i : i;
		CHECK_OK((read ? xfer_readable : xfer_writable)(r->owner, &od, 1, NULL, &passive[i],
								&meta[i]));
		adesc[i] = (struct xfer_desc){ r->aregion, ablock * BLOCK, BLOCK };
		ops[i] = (struct xfer_batch_op){ .kind = read ? XFER_READ : XFER_WRITE,
						 .descs = &adesc[i],
						 .n = 1,
						 .metadata = meta[i] };
	}
	xfer_set_batch_cb(r->active, batch_cb, &b);
	if (xfer_batch(r->active, ops, 2 * NBLOCKS, &opts, &done, &batch))
		harness_fail(__FILE__, __LINE__, "batch: %s", xfer_last_error(r->active));
	CHECK_EQ_INT(done, 2 * NBLOCKS);
	CHECK(batch != 0);
	wait_batch(r->active, &b);
	CHECK_EQ_INT(b.batch, batch);
	CHECK_EQ_INT(b.n, 2 * NBLOCKS);
	CHECK_EQ_INT(b.complete, 2 * NBLOCKS);
	for (size_t i = 0; i < 2 * NBLOCKS; i++) {
		struct xfer_op_info info;
		CHECK_OK(xfer_wait(r->owner, passive[i], WAIT_MS, &info));
		CHECK_EQ_INT(info.state, XFER_COMPLETE);
		CHECK_STR_EQ(info.transport, r->cross ? "tcp" : "local");
		CHECK_OK(xfer_release(r->owner, passive[i]));
		free(meta[i]);
	}
	for (size_t i = 0; i < NBLOCKS; i++) /* reads: owner block i -> active block N-1-i */
		CHECK_MEM_EQ((uint8_t *)r->abuf.addr + (NBLOCKS - 1 - i) * BLOCK,
			     (uint8_t *)r->obuf.addr + i * BLOCK, BLOCK);
	CHECK_MEM_EQ((uint8_t *)r->obuf.addr + NBLOCKS * BLOCK, /* writes: block for block */
		     (uint8_t *)r->abuf.addr + NBLOCKS * BLOCK, NBLOCKS * BLOCK);
	xfer_set_batch_cb(r->active, NULL, NULL);
}

TEST(local_pairings_in_one_batch)
{
	struct rig r;

	rig_start(&r, false, NULL);
	pairings_in_one_batch(&r);
	rig_stop(&r);
}

TEST(cross_pairings_in_one_batch)
{
	struct rig r;

	rig_start(&r, true, NULL);
	pairings_in_one_batch(&r);
	rig_stop(&r);
}

/*
 * Across nodes a read of a writable's metadata is accepted (the batch does not wait for the
 * owner) and ends ERRORED with the owner's reason, and so does one of a released operation's;
 * on one node the daemon knows at once, and the entry is refused. Either way the writable is
 * untouched, and a proper write then fills it. Bad metadata stops the batch at its entry.
 */
static void refusals(struct rig *r)
{
	struct xfer_desc od = owner_block(r, 0), ad = { r->aregion, 0, BLOCK };
	struct xfer_batch_op ops[3];
	struct xfer_op_info info;
	uint64_t writable, gone;
	char *wmeta, *gmeta;
	size_t done = 0;

	CHECK_OK(xfer_writable(r->owner, &od, 1, NULL, &writable, &wmeta));
	CHECK_OK(xfer_readable(r->owner, &od, 1, NULL, &gone, &gmeta));
	CHECK_OK(xfer_cancel(r->owner, gone));
	CHECK_OK(xfer_release(r->owner, gone));
	ops[0] = (struct xfer_batch_op){
		.kind = XFER_READ, .descs = &ad, .n = 1, .metadata = wmeta
	};
	ops[1] = (struct xfer_batch_op){
		.kind = XFER_READ, .descs = &ad, .n = 1, .metadata = gmeta
	};
	ops[2] = (struct xfer_batch_op){
		.kind = XFER_WRITE, .descs = &ad, .n = 1, .metadata = "xfer1.bm90LW1ldGFkYXRh"
	};
	if (r->cross) {
		CHECK_ERR(xfer_batch(r->active, ops, 3, NULL, &done, NULL), -EBADMSG);
		CHECK_EQ_INT(done, 2);
		CHECK(strstr(xfer_last_error(r->active), "entry 2") != NULL);
		for (int i = 0; i < 2; i++) {
			CHECK_OK(xfer_wait(r->active, ops[i].op, WAIT_MS, &info));
			if (info.state != XFER_ERRORED || !info.cause[0])
				harness_fail(__FILE__, __LINE__,
					     "entry %d ended %s (%s), not ERRORED", i,
					     xfer_state_name(info.state), info.cause);
			CHECK_OK(xfer_release(r->active, ops[i].op));
		}
	} else {
		static const int want[3] = { -EINVAL, -ENOENT, -EBADMSG };
		for (int i = 0; i < 3; i++) {
			CHECK_ERR(xfer_batch(r->active, &ops[i], 1, NULL, &done, NULL), want[i]);
			CHECK_EQ_INT(done, 0);
			CHECK(strstr(xfer_last_error(r->active), "entry 0") != NULL);
		}
	}
	/* the writable was not spent by the wrong pairing: a write fills it */
	td_fill(r->abuf.addr, BLOCK, 21);
	memset(r->obuf.addr, 0, BLOCK);
	ops[0].kind = XFER_WRITE;
	CHECK_OK(xfer_batch(r->active, ops, 1, NULL, &done, NULL));
	CHECK_OK(xfer_wait(r->active, ops[0].op, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	CHECK_OK(xfer_wait(r->owner, writable, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	CHECK_MEM_EQ(r->obuf.addr, r->abuf.addr, BLOCK);
	CHECK_OK(xfer_release(r->active, ops[0].op));
	CHECK_OK(xfer_release(r->owner, writable));
	free(wmeta);
	free(gmeta);
}

TEST(local_batch_refusals)
{
	struct rig r;

	rig_start(&r, false, NULL);
	refusals(&r);
	rig_stop(&r);
}

TEST(cross_batch_refusals)
{
	struct rig r;

	rig_start(&r, true, NULL);
	refusals(&r);
	rig_stop(&r);
}

/* A batch of reads stops at the connection's operation limit; the ones before it go on. */
TEST(cross_batch_stops_at_the_op_limit)
{
	enum { LIMIT = 4, N = 8 };
	struct xfer_batch_op ops[N];
	struct xfer_desc od[N], ad[N];
	uint64_t passive[N];
	char *meta[N];
	struct rig r;
	size_t done = 0;

	rig_start(&r, true, "\"limits\": {\"ops\": 4}");
	td_fill(r.obuf.addr, N * BLOCK, 31);
	for (int i = 0; i < N; i++) {
		od[i] = owner_block(&r, (size_t)i);
		ad[i] = (struct xfer_desc){ r.aregion, (uint64_t)i * BLOCK, BLOCK };
		CHECK_OK(xfer_readable(r.owner, &od[i], 1, NULL, &passive[i], &meta[i]));
		ops[i] = (struct xfer_batch_op){
			.kind = XFER_READ, .descs = &ad[i], .n = 1, .metadata = meta[i]
		};
	}
	CHECK_ERR(xfer_batch(r.active, ops, N, NULL, &done, NULL), -EDQUOT);
	CHECK_EQ_INT(done, LIMIT);
	CHECK(strstr(xfer_last_error(r.active), "entry 4") != NULL);
	for (int i = 0; i < LIMIT; i++) {
		struct xfer_op_info info;
		CHECK_OK(xfer_wait(r.active, ops[i].op, WAIT_MS, &info));
		CHECK_EQ_INT(info.state, XFER_COMPLETE);
		CHECK_OK(xfer_release(r.active, ops[i].op));
	}
	CHECK_MEM_EQ(r.abuf.addr, r.obuf.addr, LIMIT * BLOCK);
	for (int i = 0; i < N; i++) {
		if (i >= LIMIT)
			CHECK_OK(xfer_cancel(r.owner, passive[i]));
		CHECK_OK(xfer_release(r.owner, passive[i]));
		free(meta[i]);
	}
	rig_stop(&r);
}

/* op.batch @ops_json (the "ops" array) of @c: its result, whose "failed" entry's message is
 * to contain @want (NULL: none may fail); @nresults entries stand. */
static void batch_raw(struct xfer_client *c, const char *ops_json, size_t nresults,
		      const char *want)
{
	char params[4096], *text = NULL;

	snprintf(params, sizeof(params), "{\"ops\": %s, \"release_on_end\": true}", ops_json);
	CHECK_OK(xfer_call(c, "op.batch", params, &text));
	json_t *res = json_loads(text, 0, NULL);
	const char *msg = json_string_value(json_object_get(res, "message"));
	CHECK_EQ_INT(json_array_size(json_object_get(res, "results")), nresults);
	if (want ? !msg || !strstr(msg, want) : msg != NULL)
		harness_fail(__FILE__, __LINE__, "op.batch %s: %s, want %s", ops_json, text,
			     want ? want : "no refusal");
	json_decref(res);
	free(text);
}

/*
 * Compact get and put entries are read in place (PROTOCOL.md §5.2): their descriptors are
 * [region, offset, length] and nothing else, while op.put's own stay objects. A bad one stops
 * the batch at its entry with the rule it broke; the entries before it stand, bytes land.
 */
TEST(local_compact_entries_checked)
{
	struct rig r;
	uint64_t window, handle, length;
	enum xfer_access access;
	char *meta = NULL, ops[512], *text = NULL;

	rig_start(&r, false, NULL);
	CHECK_OK(xfer_window_create(r.owner, r.oregion, 0, BLOCK, XFER_ACCESS_READWRITE, 0, &window,
				    &meta));
	CHECK_OK(xfer_window_open(r.active, meta, &handle, &length, &access));
	td_fill(r.abuf.addr, BLOCK, 5);
	memset(r.obuf.addr, 0, BLOCK);
	snprintf(ops, sizeof(ops), "[[\"put\", %llu, 0, [[%llu, 0, 4096], [%llu, 4096, 4096]]]]",
		 (unsigned long long)handle, (unsigned long long)r.aregion,
		 (unsigned long long)r.aregion);
	batch_raw(r.active, ops, 1, NULL);
	for (int i = 0; i < 1000 && memcmp(r.obuf.addr, r.abuf.addr, 8192); i++)
		usleep(10 * 1000); /* (released on its end: no op to wait for) */
	CHECK_MEM_EQ(r.obuf.addr, r.abuf.addr, 8192);
	static const char *const bad[][2] = {
		{ "{\"region\": ", ", \"offset\": 0, \"length\": 4096}" },
		{ "[", ", 0]" },
		{ "[", ", 0, 4096, 1]" },
		{ "[", ", 0, -1]" },
		{ "[", ", \"0\", 4096]" },
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		char desc[128];
		snprintf(desc, sizeof(desc), "%s%llu%s", bad[k][0], (unsigned long long)r.aregion,
			 bad[k][1]);
		snprintf(ops, sizeof(ops),
			 "[[\"get\", %llu, 0, [[%llu, 0, 4096]]], [\"get\", %llu, 0, [%s]]]",
			 (unsigned long long)handle, (unsigned long long)r.aregion,
			 (unsigned long long)handle, desc);
		batch_raw(r.active, ops, 1, "op.batch entry 1: ");
		batch_raw(r.active, ops, 1, k == 3 ? "length > 0" : "invalid descriptor");
	}
	snprintf(ops, sizeof(ops),
		 "{\"window\": %llu, \"offset\": 0, \"descs\": [[%llu, 0, 4096]]}",
		 (unsigned long long)handle, (unsigned long long)r.aregion);
	CHECK_ERR(xfer_call(r.active, "op.put", ops, &text), -EINVAL);
	CHECK(strstr(xfer_last_error(r.active), "invalid descriptor") != NULL);
	CHECK_OK(xfer_window_close(r.active, handle));
	CHECK_OK(xfer_window_close(r.owner, window));
	free(meta);
	rig_stop(&r);
}

/* The first "metadata" of op.batch @ops_json's result (the caller frees it). */
static char *batch_meta(struct xfer_client *c, const char *ops_json)
{
	char params[1024], *text = NULL;

	snprintf(params, sizeof(params), "{\"ops\": %s}", ops_json);
	CHECK_OK(xfer_call(c, "op.batch", params, &text));
	json_t *res = json_loads(text, 0, NULL);
	const char *m = json_string_value(
		json_object_get(json_array_get(json_object_get(res, "results"), 0), "metadata"));
	CHECK(m != NULL);
	char *meta = strdup(m);
	json_decref(res);
	free(text);
	return meta;
}

/*
 * Compact pairing entries (PROTOCOL.md §5.2): ["readable" | "writable", descs] and ["read" |
 * "write", metadata, descs], descs [[region, offset, length], ...], read in place; the long form
 * still works beside them. A bad one stops the batch at its entry with the rule it broke; the
 * entries before it stand, bytes land.
 */
TEST(local_compact_pairing_entries_checked)
{
	struct rig r;
	char ops[2048], *meta, *meta2;
	unsigned long long o = 0, a = 0;

	rig_start(&r, false, NULL);
	o = r.oregion;
	a = r.aregion;
	td_fill(r.obuf.addr, 2 * BLOCK, 21);
	snprintf(ops, sizeof(ops), "[[\"readable\", [[%llu, 0, 4096], [%llu, 4096, 4096]]]]", o, o);
	meta = batch_meta(r.owner, ops);
	snprintf(ops, sizeof(ops),
		 "[{\"method\": \"op.readable\", \"params\": {\"descs\": [{\"region\": %llu, "
		 "\"offset\": %lu, \"length\": 8192}]}}]",
		 o, BLOCK);
	meta2 = batch_meta(r.owner, ops);
	/* one compact read (its descriptors split differently), one long-form read */
	snprintf(ops, sizeof(ops),
		 "[[\"read\", \"%s\", [[%llu, 0, 8192]]], {\"method\": \"op.read\", \"params\": "
		 "{\"metadata\": \"%s\", \"descs\": [{\"region\": %llu, \"offset\": %lu, "
		 "\"length\": 8192}]}}]",
		 meta, a, meta2, a, BLOCK);
	batch_raw(r.active, ops, 2, NULL);
	for (int i = 0; i < 1000 && (memcmp(r.abuf.addr, r.obuf.addr, 8192) ||
				     memcmp((uint8_t *)r.abuf.addr + BLOCK,
					    (uint8_t *)r.obuf.addr + BLOCK, 8192));
	     i++)
		usleep(10 * 1000); /* (released on their ends: no op to wait for) */
	CHECK_MEM_EQ(r.abuf.addr, r.obuf.addr, 8192);
	CHECK_MEM_EQ((uint8_t *)r.abuf.addr + BLOCK, (uint8_t *)r.obuf.addr + BLOCK, 8192);
	free(meta2);
	free(meta);
	/* each bad entry (@ for the region) comes after a good one, which stands */
	static const char *const bad[][2] = {
		{ "[\"readable\", [{\"region\": @, \"offset\": 0, \"length\": 4096}]]",
		  "invalid descriptor" },
		{ "[\"readable\", [[@, 0, -1]]]", "length > 0" },
		{ "[\"readable\", [[@, 0]]]", "invalid descriptor" },
		{ "[\"writable\", [[@, 0, 4096, 1]]]", "invalid descriptor" },
		{ "[\"writable\", [[@, 0, 4096]], 1]", "entry 1 must be {\"method\"" },
		{ "[\"readable\", []]", "descs must be an array of 1 to" },
		{ "[\"read\", 5, [[@, 0, 4096]]]", "entry 1 must be {\"method\"" },
		{ "[\"read\", \"xfer1.e30\", [[@, 0, 4096]]]", "metadata" },
		{ "[\"write\", [[@, 0, 4096]]]", "entry 1 must be {\"method\"" },
		{ "[\"copy\", [[@, 0, 4096]]]", "entry 1 must be {\"method\"" },
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		char entry[256], *at;
		snprintf(entry, sizeof(entry), "%s", bad[k][0]);
		if ((at = strchr(entry, '@')))
			snprintf(at, sizeof(entry) - (size_t)(at - entry), "%llu%s", o,
				 strchr(bad[k][0], '@') + 1);
		snprintf(ops, sizeof(ops), "[[\"writable\", [[%llu, 0, 4096]]], %s]", o, entry);
		batch_raw(r.owner, ops, 1, "op.batch entry 1");
		batch_raw(r.owner, ops, 1, bad[k][1]);
	}
	rig_stop(&r);
}
