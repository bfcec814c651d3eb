/* SPDX-License-Identifier: MIT */
/*
 * xferbench_net: cross-node benchmark and checker of xferd, built only on the public
 * libxferclient API. One process holds two clients: a passive one on the owner's daemon
 * (--passive SOCKET) and an active one on the other daemon (--active SOCKET). Unix sockets are
 * files, so both daemons are reachable from one process even when each runs in its own network
 * namespace; the bytes themselves go daemon to daemon over TCP.
 *
 *   bench  read and write throughput for sizes --min..--max (x4 steps), then the latency of a
 *          small operation; a table, or with --json one JSON object per line
 *   lat    the latency part only
 *   check  multi-descriptor (scatter/gather) reads and writes whose descriptor boundaries differ
 *          on the two sides, up to 1024 descriptors, every byte and every gap checked
 *   win    one-sided gets and puts on a window of the passive client's buffer, opened by the
 *          active one, N kept in flight (PROTOCOL.md §5.1): the owner's client is not involved
 *
 * Every timed operation goes through the public calls an application makes: readable/writable
 * on the passive client, read/write on the active one, wait for COMPLETE on both. Buffers are
 * registered once, before timing; sources are filled with a per-size pattern and destinations
 * checked after the timed iterations, so a stale or misplaced chunk is caught.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"

#define MAX_DESCS 1024 /* PROTOCOL.md section 9 */
#define MAX_INFLIGHT 128
#define GAP_BYTE 0xa5

struct opts {
	const char *passive; /* socket of the owner's daemon */
	const char *active;  /* socket of the claiming daemon */
	uint64_t min, max;
	int iters;    /* 0: chosen per size */
	int inflight; /* operations in flight at once */
	int lat_iters;
	uint64_t lat_size;
	double seconds; /* time budget per size and kind */
	int gap_ms;	/* bench --gap: idle time before each transfer (the peer link idles) */
	bool json;
	const char *expect_transport; /* check: "tcp" unless told */
	uint64_t sizes[16];	      /* pipe: --sizes */
	int nsizes;
	int depths[16]; /* pipe: --depths, operations in flight */
	int ndepths;
	uint64_t pool;	/* reg: --pool, the size of the touched pool registered once (0: none) */
	int batch;	/* --batch: win: gets/puts per op.batch (one event each); pipe: pairs per
			  op.batch on each side; 1: one by one */
	bool batch_end; /* pipe --batch-end: each side's batch ends as one op.batch_done */
	bool post;	/* win --post: batches posted (XFER_OP_POST), not waited for, even of one;
			 * pipe --batch-end --post: the active side's batches */
	const char *passive_dir, *active_dir; /* set: that side's buffer is a file in it */
	int spin_us; /* --spin: clients busy-poll this long for a reply or an event (0: sleep) */
};

/* Waits for @op; 0 only if it ended COMPLETE with @len bytes moved (and over @transport). */
static int wait_complete(struct xfer_client *c, uint64_t op, uint64_t len, const char *who,
			 const char *transport)
{
	return bench_wait_complete(c, op, len, who, 120000, transport, NULL);
}

/* The two clients and their buffers. */
struct bench {
	const struct opts *o;
	struct xfer_client *pc, *ac; /* passive (owner) and active clients */
	struct bench_buf pb, ab;     /* one buffer on each */
	char pnode[64], anode[64];
};

/*
 * One transfer of @n descriptor lists: passive ops on the owner, active ops on the other side,
 * @count of them in flight at once (operation k uses pd[k], ad[k]). Returns 0 when every op on
 * both sides ended COMPLETE; *ns is the time from the first passive call to the last active
 * COMPLETE.
 */
static int transfer(struct bench *b, bool write, int count, struct xfer_desc *const *pd,
		    const size_t *pn, struct xfer_desc *const *ad, const size_t *an, uint64_t len,
		    const char *transport, uint64_t *ns)
{
	uint64_t pop[MAX_INFLIGHT], aop[MAX_INFLIGHT], t0;
	char *md[MAX_INFLIGHT] = { 0 };
	int err = 0, k, np = 0, na = 0;

	t0 = bench_now_ns();
	for (k = 0; k < count && !err; k++) {
		err = write ? xfer_writable(b->pc, pd[k], pn[k], NULL, &pop[k], &md[k]) :
			      xfer_readable(b->pc, pd[k], pn[k], NULL, &pop[k], &md[k]);
		if (err)
			bench_fail(b->pc, write ? "xfer_writable" : "xfer_readable", err);
		else
			np++;
	}
	for (k = 0; k < count && !err; k++) {
		err = write ? xfer_write(b->ac, md[k], ad[k], an[k], NULL, &aop[k]) :
			      xfer_read(b->ac, md[k], ad[k], an[k], NULL, &aop[k]);
		if (err)
			bench_fail(b->ac, write ? "xfer_write" : "xfer_read", err);
		else
			na++;
	}
	for (k = 0; k < na && !err; k++)
		err = wait_complete(b->ac, aop[k], len, write ? "write" : "read", transport);
	*ns = bench_now_ns() - t0;
	for (k = 0; k < np && !err; k++)
		err = wait_complete(b->pc, pop[k], len, write ? "writable" : "readable", transport);
	for (k = 0; k < na; k++)
		xfer_release(b->ac, aop[k]);
	for (k = 0; k < np; k++)
		xfer_release(b->pc, pop[k]);
	for (k = 0; k < count; k++)
		free(md[k]);
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* bench                                                                                    */

struct result {
	uint64_t size;
	int iters, inflight;
	double gbps_median, gbps_best; /* GB/s = 1e9 bytes/s, per transfer of inflight ops */
	uint64_t ns_median;
};

static int bench_one(struct bench *b, bool write, uint64_t size, struct result *r)
{
	const struct opts *o = b->o;
	int inflight = o->inflight, iters, i, k, err = 0;
	struct xfer_desc pdv[MAX_INFLIGHT], adv[MAX_INFLIGHT], *pd[MAX_INFLIGHT], *ad[MAX_INFLIGHT];
	size_t pn[MAX_INFLIGHT], an[MAX_INFLIGHT], bad;
	uint64_t *ns, total_ns = 0, seed = size * 2 + (write ? 1 : 0);
	struct bench_buf *src = write ? &b->ab : &b->pb, *dst = write ? &b->pb : &b->ab;

	while (inflight > 1 && size * (uint64_t)inflight > b->pb.buf.length)
		inflight--;
	iters = o->iters;
	if (!iters) {
		/* About 2 GiB moved per size and kind, at least 3 and at most 2000 transfers. */
		uint64_t want = (2 * BENCH_GIB) / (size * (uint64_t)inflight);

		iters = want < 3 ? 3 : want > 2000 ? 2000 : (int)want;
	}
	ns = calloc((size_t)iters, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	for (k = 0; k < inflight; k++) {
		pdv[k] = (struct xfer_desc){ b->pb.region, (uint64_t)k * size, size };
		adv[k] = (struct xfer_desc){ b->ab.region, (uint64_t)k * size, size };
		pd[k] = &pdv[k];
		ad[k] = &adv[k];
		pn[k] = an[k] = 1;
		bench_pattern_fill((char *)src->buf.addr + k * size, size,
				   seed + (uint64_t)k * 7919);
		memset((char *)dst->buf.addr + k * size, 0, size);
	}
	for (i = 0; i < iters && !err; i++) {
		if (o->gap_ms) /* (untimed: the peer link idles meanwhile) */
			usleep((useconds_t)o->gap_ms * 1000);
		err = transfer(b, write, inflight, pd, pn, ad, an, size, NULL, &ns[i]);
		total_ns += ns[i];
		/* Within the time budget, but at least 3 transfers. */
		if (!o->iters && i >= 2 && (double)total_ns / 1e9 > o->seconds) {
			iters = i + 1;
			break;
		}
	}
	if (!err) {
		for (k = 0; k < inflight; k++) {
			if (!bench_pattern_check((char *)dst->buf.addr + k * size, size,
						 seed + (uint64_t)k * 7919, &bad)) {
				fprintf(stderr,
					"xferbench_net: %s %" PRIu64
					" bytes: mismatch at byte %zu of op %d\n",
					write ? "write" : "read", size, bad, k);
				err = -EIO;
			}
		}
	}
	if (!err) {
		uint64_t med = bench_percentile(ns, (size_t)iters, 50), best = ns[0];
		uint64_t bytes = size * (uint64_t)inflight;

		r->size = size;
		r->iters = iters;
		r->inflight = inflight;
		r->ns_median = med;
		r->gbps_median = bench_gbps(bytes, med);
		r->gbps_best = bench_gbps(bytes, best);
	}
	free(ns);
	return err;
}

static int latency(struct bench *b, bool write, uint64_t *med, uint64_t *p99, uint64_t *claim_med,
		   uint64_t *claim_p99)
{
	const struct opts *o = b->o;
	uint64_t *ns = calloc((size_t)o->lat_iters, sizeof(*ns));
	uint64_t *cl = calloc((size_t)o->lat_iters, sizeof(*cl));
	const struct bench_pair p = {
		.pas = b->pc,
		.act = b->ac,
		.pd = { b->pb.region, 0, o->lat_size },
		.ad = { b->ab.region, 0, o->lat_size },
		.write = write,
		.timeout_ms = 120000,
		.pas_what = "passive",
		.act_what = "active",
	};
	struct bench_times t;
	int i, err = 0;

	if (!ns || !cl) {
		free(ns);
		free(cl);
		return -ENOMEM;
	}
	for (i = 0; i < o->lat_iters && !err; i++) {
		err = bench_pair_run(&p, &t);
		if (err)
			break;
		ns[i] = t.done - t.start;
		cl[i] = t.claimed - t.start;
	}
	if (!err) {
		*med = bench_percentile(ns, (size_t)o->lat_iters, 50);
		*p99 = bench_percentile(ns, (size_t)o->lat_iters, 99);
		*claim_med = bench_percentile(cl, (size_t)o->lat_iters, 50);
		*claim_p99 = bench_percentile(cl, (size_t)o->lat_iters, 99);
	}
	free(ns);
	free(cl);
	return err;
}

static int run_lat(struct bench *b)
{
	const struct opts *o = b->o;
	uint64_t med[2], p99[2], claim[2], claim99[2];
	char sz[32];
	int err = 0;

	for (int w = 0; w < 2 && !err; w++)
		err = latency(b, w, &med[w], &p99[w], &claim[w], &claim99[w]);
	if (err)
		return err;
	bench_fmt_size(o->lat_size, sz, sizeof(sz));
	if (o->json) {
		for (int w = 0; w < 2; w++)
			printf("{\"kind\":\"%s\",\"latency\":true,\"size\":%" PRIu64
			       ",\"iters\":%d,"
			       "\"us_median\":%.1f,\"us_p99\":%.1f,\"us_claim_median\":%.1f,"
			       "\"us_claim_p99\":%.1f}\n",
			       w ? "write" : "read", o->lat_size, o->lat_iters, med[w] / 1e3,
			       p99[w] / 1e3, claim[w] / 1e3, claim99[w] / 1e3);
	} else {
		printf("\nsmall-op latency, %s, %d round trips each (passive call to active COMPLETE):\n",
		       sz, o->lat_iters);
		for (int w = 0; w < 2; w++)
			printf("  %-5s median %7.1f us   p99 %7.1f us   (claim accepted after %.1f us,"
			       " p99 %.1f us)\n",
			       w ? "write" : "read", med[w] / 1e3, p99[w] / 1e3, claim[w] / 1e3,
			       claim99[w] / 1e3);
	}
	fflush(stdout);
	return 0;
}

static int run_bench(struct bench *b)
{
	const struct opts *o = b->o;
	struct result rr, rw;
	char sz[32];
	int err = 0;

	if (!o->json) {
		printf("%-10s %6s %9s %12s %12s %12s %12s\n", "size", "iters", "inflight",
		       "read GB/s", "(best)", "write GB/s", "(best)");
	}
	for (uint64_t s = o->min; s <= o->max && !err; s *= 4) {
		err = bench_one(b, false, s, &rr);
		if (!err)
			err = bench_one(b, true, s, &rw);
		if (err)
			break;
		if (o->json) {
			printf("{\"kind\":\"read\",\"size\":%" PRIu64
			       ",\"iters\":%d,\"inflight\":%d,"
			       "\"gbps_median\":%.4f,\"gbps_best\":%.4f,\"us_median\":%.1f}\n",
			       s, rr.iters, rr.inflight, rr.gbps_median, rr.gbps_best,
			       rr.ns_median / 1e3);
			printf("{\"kind\":\"write\",\"size\":%" PRIu64
			       ",\"iters\":%d,\"inflight\":%d,"
			       "\"gbps_median\":%.4f,\"gbps_best\":%.4f,\"us_median\":%.1f}\n",
			       s, rw.iters, rw.inflight, rw.gbps_median, rw.gbps_best,
			       rw.ns_median / 1e3);
		} else {
			printf("%-10s %6d %9d %12.3f %12.3f %12.3f %12.3f\n",
			       bench_fmt_size(s, sz, sizeof(sz)), rr.iters, rr.inflight,
			       rr.gbps_median, rr.gbps_best, rw.gbps_median, rw.gbps_best);
		}
		fflush(stdout);
		if (s > UINT64_MAX / 4)
			break;
	}
	if (!err && o->lat_iters > 0)
		err = run_lat(b);
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* check: scatter/gather with different boundaries on the two sides                          */

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/*
 * Cuts @total bytes into @n pieces (each >= 1 byte, random lengths) placed in order in a
 * buffer of @cap bytes with random gaps between them. Returns 0, or -ENOSPC if they do not fit.
 */
static int make_descs(uint64_t region, uint64_t total, size_t n, uint64_t cap, struct xfer_desc *d)
{
	uint64_t left = total, off = 0, slack;
	size_t i;

	if (n > total)
		return -EINVAL;
	slack = cap > total ? cap - total : 0;
	for (i = 0; i < n; i++) {
		uint64_t remain_pieces = n - i - 1, len, gap;

		if (i == n - 1) {
			len = left;
		} else {
			uint64_t span = 2 * (left - remain_pieces) / (n - i);

			len = 1 + rnd() % (span ? span : 1);
		}
		if (len > left - remain_pieces)
			len = left - remain_pieces;
		if (len == 0)
			len = 1;
		gap = slack ? rnd() % (slack / (n + 1) + 1) : 0;
		slack -= gap;
		off += gap;
		d[i] = (struct xfer_desc){ region, off, len };
		off += len;
		left -= len;
	}
	return off <= cap ? 0 : -ENOSPC;
}

/* Copies the bytes of @d[0..n) of @base, in order, into @out. */
static void gather(const char *base, const struct xfer_desc *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		memcpy(out, base + d[i].offset, d[i].length);
		out += d[i].length;
	}
}

/* True if every byte of @buf outside @d[0..n) is GAP_BYTE. */
static bool gaps_intact(const char *buf, uint64_t cap, const struct xfer_desc *d, size_t n,
			uint64_t *bad)
{
	uint64_t off = 0;

	for (size_t i = 0; i <= n; i++) {
		uint64_t end = i < n ? d[i].offset : cap;

		for (; off < end; off++) {
			if ((unsigned char)buf[off] != GAP_BYTE) {
				*bad = off;
				return false;
			}
		}
		if (i < n)
			off = d[i].offset + d[i].length;
	}
	return true;
}

struct check_case {
	uint64_t total;
	size_t pn, an;
};

static int check_one(struct bench *b, bool write, const struct check_case *cc, uint64_t cap)
{
	static struct xfer_desc pd[MAX_DESCS], ad[MAX_DESCS];
	const struct opts *o = b->o;
	struct bench_buf *src = write ? &b->ab : &b->pb, *dst = write ? &b->pb : &b->ab;
	struct xfer_desc *sd = write ? ad : pd, *dd = write ? pd : ad;
	size_t sn = write ? cc->an : cc->pn, dn = write ? cc->pn : cc->an;
	struct xfer_desc *pdp = pd, *adp = ad;
	char *want = NULL, *got = NULL, sz[32];
	uint64_t ns, bad = 0;
	int err;

	err = make_descs(b->pb.region, cc->total, cc->pn, cap, pd);
	if (!err)
		err = make_descs(b->ab.region, cc->total, cc->an, cap, ad);
	if (err) {
		fprintf(stderr, "xferbench_net: check: cannot lay out %zu/%zu descriptors\n",
			cc->pn, cc->an);
		return err;
	}
	want = malloc(cc->total);
	got = malloc(cc->total);
	if (!want || !got) {
		free(want);
		free(got);
		return -ENOMEM;
	}
	bench_pattern_fill(src->buf.addr, cap, rnd());
	memset(dst->buf.addr, GAP_BYTE, cap);
	gather(src->buf.addr, sd, sn, want);
	err = transfer(b, write, 1, &pdp, &cc->pn, &adp, &cc->an, cc->total, o->expect_transport,
		       &ns);
	if (!err) {
		gather(dst->buf.addr, dd, dn, got);
		if (memcmp(want, got, cc->total)) {
			for (bad = 0; bad < cc->total && want[bad] == got[bad]; bad++)
				;
			fprintf(stderr,
				"xferbench_net: check %s %s, %zu passive / %zu active descriptors: "
				"byte %" PRIu64 " of the stream differs\n",
				write ? "write" : "read", bench_fmt_size(cc->total, sz, sizeof(sz)),
				cc->pn, cc->an, bad);
			err = -EIO;
		} else if (!gaps_intact(dst->buf.addr, cap, dd, dn, &bad)) {
			fprintf(stderr,
				"xferbench_net: check %s %s, %zu/%zu descriptors: byte %" PRIu64
				" outside the destination's descriptors was written\n",
				write ? "write" : "read", bench_fmt_size(cc->total, sz, sizeof(sz)),
				cc->pn, cc->an, bad);
			err = -EIO;
		}
	}
	printf("%s %s %-5s %10s  %4zu passive / %4zu active descriptors\n", err ? "FAIL" : "ok  ",
	       "check", write ? "write" : "read", bench_fmt_size(cc->total, sz, sizeof(sz)), cc->pn,
	       cc->an);
	fflush(stdout);
	free(want);
	free(got);
	return err;
}

static int run_check(struct bench *b)
{
	uint64_t cap = b->pb.buf.length < b->ab.buf.length ? b->pb.buf.length : b->ab.buf.length;
	uint64_t big = cap / 2;
	const struct check_case cases[] = {
		{ 1, 1, 1 },
		{ 4096, 1, 1 },
		{ 4096, 3, 7 },
		{ 65537, 13, 2 },
		{ BENCH_MIB + 1, 1024, 1 },
		{ BENCH_MIB + 1, 1, 1024 },
		{ 3 * BENCH_MIB + 5, 1024, 1000 },
		{ big, 5, 3 },
		{ big, 1024, 17 },
		{ big, 1, 1 },
	};
	int failed = 0, err = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (int w = 0; w < 2; w++) {
			err = check_one(b, w, &cases[i], cap);
			if (err)
				failed++;
			if (err && err != -EIO)
				return err; /* the daemon refused or failed: no point going on */
		}
	}
	return failed ? -EIO : 0;
}

#define MAX_LIST 16

/* ---------------------------------------------------------------------------------------- */
/* pipelines: N operations kept in flight, the driver shared by pipe and win                 */

/*
 * One slot of a pipeline: a pairing (pipe) or a get/put (win) on its own slice of both
 * buffers: slot k moves bytes between offset k * size of the active side's buffer and the
 * same offset of the owner's.
 */
struct slot {
	uint64_t pop, aop; /* passive and active operation ids (UINT64_MAX: none) */
	uint64_t batch;	   /* win --batch, pipe --batch-end: the (active) op.batch it went in */
	uint64_t pbatch;   /* pipe --batch-end: the passive side's op.batch; 0 once it ended */
	uint64_t t0;	   /* when the request that started it was made */
	uint64_t seq;	   /* the stamp its source carries */
	int ends;	   /* ends seen */
	int err;	   /* first failure seen, -errno */
};

struct pipeline;

/* Starts slots @k0 .. @k0 + @n - 1 (already armed): one mode's requests. Returns 0 or -errno. */
typedef int (*pipeline_start_fn)(struct pipeline *pl, int k0, int n);

struct pipeline {
	struct bench *b;
	bool write;	   /* pipe write / win put: bytes flow from the active side to the owner */
	uint64_t size;	   /* bytes per slot */
	int depth;	   /* slots in flight */
	int unit;	   /* slots started together (--batch): depth is a multiple of it */
	int ends_per_slot; /* pipe: 2 (both sides' operations), win: 1 */
	uint64_t handle;   /* win: the opened window */
	struct xfer_client *clients[2]; /* whose events end the slots */
	int nclients;
	pipeline_start_fn start;
	struct slot slots[MAX_INFLIGHT];
	int stray; /* events for no slot of ours */
};

struct pipe_result {
	uint64_t ops;
	double gbps;		      /* GB/s over the whole run */
	double us_p50, us_p99, us_op; /* latency tails; elapsed time per operation */
};

/*
 * Writes @seq into the first and last 8 bytes of the @size bytes at @p: every operation moves
 * a new stamp, so a destination holding an earlier operation's bytes (or another slot's) is
 * caught without refilling whole buffers inside the timed loop.
 */
static void stamp_put(char *p, uint64_t size, uint64_t seq)
{
	memcpy(p, &seq, size < 8 ? size : 8);
	if (size >= 16)
		memcpy(p + size - 8, &seq, 8);
}

static bool stamp_ok(const char *p, uint64_t size, uint64_t seq)
{
	uint64_t a = 0, z = seq, want = seq;

	memcpy(&a, p, size < 8 ? size : 8);
	if (size >= 16)
		memcpy(&z, p + size - 8, 8);
	if (size < 8) /* the stamp is cut to the size on both sides */
		want &= (1ULL << (8 * size)) - 1;
	return a == want && z == seq;
}

static struct bench_buf *pipeline_src(const struct pipeline *pl)
{
	return pl->write ? &pl->b->ab : &pl->b->pb;
}

static struct bench_buf *pipeline_dst(const struct pipeline *pl)
{
	return pl->write ? &pl->b->pb : &pl->b->ab;
}

/* Resets slot @k for a new operation stamped @seq, started at @t0. */
static void slot_arm(struct pipeline *pl, int k, uint64_t seq, uint64_t t0)
{
	pl->slots[k] = (struct slot){ .pop = UINT64_MAX, .aop = UINT64_MAX, .t0 = t0, .seq = seq };
	stamp_put((char *)pipeline_src(pl)->buf.addr + (uint64_t)k * pl->size, pl->size, seq);
}

/* Records one end of slot @s: @state, @bytes moved, @error and @cause as the event gave them. */
static void slot_end(struct pipeline *pl, struct slot *s, uint64_t op, enum xfer_state state,
		     uint64_t bytes, int error, const char *cause)
{
	s->ends++;
	if (state == XFER_COMPLETE && bytes == pl->size)
		return;
	fprintf(stderr,
		"xferbench_net: op %" PRIu64 " %s after %" PRIu64 " of %" PRIu64 " bytes: %s\n", op,
		xfer_state_name(state), bytes, pl->size, cause ? cause : "");
	s->err = s->err ?: (error ?: -EIO);
}

/*
 * op.changed of any client of the pipeline: ends are learned from notifications, and every
 * operation is made with release_on_end, so no op.wait and no op.release round trip is spent
 * per operation: what an application that pipelines does.
 */
static void pipeline_op_cb(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct pipeline *pl = arg;

	(void)c;
	if (info->state < XFER_COMPLETE)
		return;
	for (int k = 0; k < pl->depth; k++) {
		struct slot *s = &pl->slots[k];
		if (s->ends < pl->ends_per_slot && (info->op == s->aop || info->op == s->pop)) {
			slot_end(pl, s, info->op, info->state, info->bytes, info->error,
				 info->cause);
			return;
		}
	}
	pl->stray++;
}

/*
 * Where slot @s keeps the id of the op.batch that client @c's ends come in: a pipe's passive
 * side (clients[0]) and active side each have one, from their own daemon's id space.
 */
static uint64_t *slot_batch(const struct pipeline *pl, struct slot *s, const struct xfer_client *c)
{
	return pl->nclients == 2 && c == pl->clients[0] ? &s->pbatch : &s->batch;
}

/*
 * op.batch_done (win --batch, pipe --batch --batch-end): the ends of one batch's operations
 * (their order is not checked: every one must be COMPLETE with the slot's size).
 */
static void pipeline_batch_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct pipeline *pl = arg;
	int k0 = 0;

	while (k0 < pl->depth && (!ev->batch || *slot_batch(pl, &pl->slots[k0], c) != ev->batch))
		k0++;
	if (k0 == pl->depth) {
		pl->stray++;
		return;
	}
	/* A batch's slots are consecutive; an event with more or fewer ends fails all of them. */
	for (int i = 0; i < pl->unit && k0 + i < pl->depth; i++) {
		struct slot *s = &pl->slots[k0 + i];
		*slot_batch(pl, s, c) = 0; /* (this side's end is in) */
		if (ev->n == (size_t)pl->unit)
			slot_end(pl, s, ev->ends[i].op, ev->ends[i].state, ev->ends[i].bytes,
				 ev->ends[i].error, NULL);
		else
			slot_end(pl, s, 0, XFER_ERRORED, 0, -EIO,
				 "wrong number of ends in a batch");
	}
}

/*
 * Waits up to a second for the clients' fds @pfd to turn readable; with --spin it first polls
 * without sleeping for up to that long, yielding the CPU between tries (as ucx_perftest polls:
 * waking a sleeping process costs tens of microseconds here). Returns 0 or -errno.
 */
static int pipeline_poll(struct pipeline *pl, struct pollfd *pfd)
{
	uint64_t until = bench_now_ns() + (uint64_t)pl->b->o->spin_us * 1000;
	int n;

	while ((n = poll(pfd, (nfds_t)pl->nclients, 0)) == 0 && bench_now_ns() < until)
		sched_yield();
	if (n == 0)
		n = poll(pfd, (nfds_t)pl->nclients, 1000);
	return n < 0 && errno != EINTR ? -errno : 0;
}

/* Delivers the pipeline's events until slot @k ended (or 120 s passed). */
static int pipeline_wait_slot(struct pipeline *pl, int k)
{
	struct pollfd pfd[2];
	uint64_t deadline = bench_now_ns() + 120 * 1000000000ULL;

	for (int i = 0; i < pl->nclients; i++)
		pfd[i] = (struct pollfd){ xfer_get_fd(pl->clients[i]), POLLIN, 0 };
	while (pl->slots[k].ends < pl->ends_per_slot) {
		if (bench_now_ns() > deadline) {
			fprintf(stderr, "xferbench_net: slot %d did not end in 120 s\n", k);
			return -ETIMEDOUT;
		}
		int err = pipeline_poll(pl, pfd);
		if (err < 0)
			return err;
		for (int i = 0; i < pl->nclients; i++) {
			int rc = xfer_dispatch(pl->clients[i]);
			if (rc < 0)
				return bench_fail(NULL, "xfer_dispatch", rc);
		}
	}
	return 0;
}

/* Waits for slot @k and checks its stamp; *lat_ns from its request on. */
static int pipeline_finish_slot(struct pipeline *pl, int k, uint64_t *lat_ns)
{
	struct slot *s = &pl->slots[k];
	int err = pipeline_wait_slot(pl, k);

	*lat_ns = bench_now_ns() - s->t0;
	err = err ?: s->err;
	if (!err && !stamp_ok((char *)pipeline_dst(pl)->buf.addr + (uint64_t)k * pl->size, pl->size,
			      s->seq)) {
		fprintf(stderr,
			"xferbench_net: %s %" PRIu64 " bytes: operation %" PRIu64
			" of slot %d left another operation's bytes\n",
			pl->write ? "write" : "read", pl->size, s->seq, k);
		err = -EIO;
	}
	return err;
}

/* Whole slots compared source to destination once the pipeline is empty. */
static int pipeline_check_all(const struct pipeline *pl)
{
	for (int k = 0; k < pl->depth; k++) {
		uint64_t off = (uint64_t)k * pl->size;
		if (memcmp((char *)pipeline_src(pl)->buf.addr + off,
			   (char *)pipeline_dst(pl)->buf.addr + off, pl->size)) {
			fprintf(stderr, "xferbench_net: %s %" PRIu64 " bytes: slot %d differs\n",
				pl->write ? "write" : "read", pl->size, k);
			return -EIO;
		}
	}
	return 0;
}

static void pipeline_set_callbacks(struct pipeline *pl, bool on)
{
	for (int i = 0; i < pl->nclients; i++) {
		xfer_set_event_cb(pl->clients[i], on ? pipeline_op_cb : NULL, on ? pl : NULL);
		xfer_set_batch_cb(pl->clients[i], on ? pipeline_batch_cb : NULL, on ? pl : NULL);
	}
}

/* Arms and starts the @pl->unit slots of group @g with stamps from @seq. */
static int pipeline_start_group(struct pipeline *pl, int g, uint64_t seq)
{
	uint64_t t0 = bench_now_ns();

	for (int i = 0; i < pl->unit; i++)
		slot_arm(pl, g * pl->unit + i, seq + (uint64_t)i, t0);
	return pl->start(pl, g * pl->unit, pl->unit);
}

/*
 * Keeps @pl->depth slots in flight for --seconds and at least 4 * depth (and 64) operations:
 * slots go in groups of @pl->unit; the oldest group is waited for (slot by slot, each checked),
 * then started again. Fills *r unless it fails. Returns 0 or -errno.
 */
static int pipeline_run(struct pipeline *pl, struct pipe_result *r)
{
	uint64_t min_ops = 4 * (uint64_t)pl->depth > 64 ? 4 * (uint64_t)pl->depth : 64;
	uint64_t cap = 1 << 18, *lat = malloc(cap * sizeof(*lat)), started = 0, done = 0, t0;
	int err = 0, g, groups = pl->depth / pl->unit;

	if (!lat)
		return -ENOMEM;
	pipeline_set_callbacks(pl, true);
	bench_pattern_fill(pipeline_src(pl)->buf.addr, pl->size * (uint64_t)pl->depth,
			   pl->size * 31 + (pl->write ? 7 : 0));
	memset(pipeline_dst(pl)->buf.addr, 0, pl->size * (uint64_t)pl->depth);
	t0 = bench_now_ns();
	for (g = 0; g < groups && !err; g++, started += (uint64_t)pl->unit)
		err = pipeline_start_group(pl, g, started + 1);
	for (g = 0; !err && done < started; g = (g + 1) % groups) {
		for (int i = 0; i < pl->unit && !err; i++, done++)
			err = pipeline_finish_slot(pl, g * pl->unit + i, &lat[done % cap]);
		double secs = (bench_now_ns() - t0) / 1e9;
		if (!err && (started < min_ops || secs < pl->b->o->seconds) &&
		    started + (uint64_t)pl->unit <= cap) {
			err = pipeline_start_group(pl, g, started + 1);
			started += (uint64_t)pl->unit;
		}
	}
	/* After an error the rest of the pipeline still has to end before the next cell. */
	for (int k = 0; err && k < pl->depth; k++)
		if (pl->slots[k].t0 && pl->slots[k].ends < pl->ends_per_slot)
			pipeline_wait_slot(pl, k);
	uint64_t elapsed = bench_now_ns() - t0;
	pipeline_set_callbacks(pl, false);
	if (!err && pl->stray) {
		fprintf(stderr, "xferbench_net: %d events for operations not in flight\n",
			pl->stray);
		err = -EIO;
	}
	err = err ?: pipeline_check_all(pl);
	if (!err) {
		size_t n = done < cap ? done : cap;
		r->ops = done;
		r->gbps = bench_gbps(pl->size * done, elapsed);
		r->us_p50 = bench_percentile(lat, n, 50) / 1e3;
		r->us_p99 = bench_percentile(lat, n, 99) / 1e3;
		r->us_op = elapsed / 1e3 / (double)done;
	}
	free(lat);
	return err;
}

/* A slot that could not be started is marked ended with @err (its ends will not come). */
static void slot_fail(struct pipeline *pl, struct slot *s, int err)
{
	s->ends = pl->ends_per_slot;
	s->err = err;
}

/* Prints one pipeline row (--json: an object with @tag set) for pipe and win. */
static void pipeline_print(const struct opts *o, const char *tag, const char *kind, uint64_t size,
			   int depth, const struct pipe_result *r)
{
	char sz[32];

	if (o->json)
		printf("{\"%s\":true,\"kind\":\"%s\",\"size\":%" PRIu64
		       ",\"depth\":%d,\"batch\":%d,\"batch_end\":%s,\"post\":%s,\"spin_us\":%d"
		       ",\"ops\":%" PRIu64 ",\"gbps\":%.4f,\"us_p50\":%.1f,\"us_p99\":%.1f"
		       ",\"us_per_op\":%.2f}\n",
		       tag, kind, size, depth, o->batch, o->batch_end ? "true" : "false",
		       o->post ? "true" : "false", o->spin_us, r->ops, r->gbps, r->us_p50,
		       r->us_p99, r->us_op);
	else
		printf("%-5s %9s %6d %6d %7" PRIu64 " %9.3f %10.1f %10.1f %9.1f\n", kind,
		       bench_fmt_size(size, sz, sizeof(sz)), depth, o->batch, r->ops, r->gbps,
		       r->us_p50, r->us_p99, r->us_op);
	fflush(stdout);
}

static void pipeline_print_header(const struct opts *o)
{
	if (!o->json)
		printf("%-5s %9s %6s %6s %7s %9s %10s %10s %9s\n", "kind", "size", "depth", "batch",
		       "ops", "GB/s", "p50 us", "p99 us", "us/op");
}

/* @depth rounded up to whole groups of --batch, at most MAX_INFLIGHT. */
static int pipeline_depth(const struct opts *o, int depth)
{
	depth = (depth + o->batch - 1) / o->batch * o->batch;
	return depth > MAX_INFLIGHT ? MAX_INFLIGHT / o->batch * o->batch : depth;
}

/*
 * Runs one pipeline per direction x --sizes x --depths, each a copy of @mode (the mode's
 * clients, start function and ends) and prints its row, named @from_owner for bytes moving from
 * the owner to the active side and @to_owner for the other way. Returns 0 or the first -errno.
 */
static int pipeline_cells(struct bench *b, const struct pipeline *mode, const char *tag,
			  const char *from_owner, const char *to_owner)
{
	const struct opts *o = b->o;
	int err = 0;

	for (int w = 0; w < 2 && !err; w++) {
		for (int si = 0; si < o->nsizes && !err; si++) {
			for (int di = 0; di < o->ndepths && !err; di++) {
				struct pipeline *pl = malloc(sizeof(*pl));
				struct pipe_result r;
				if (!pl)
					return -ENOMEM;
				*pl = *mode;
				pl->b = b;
				pl->write = w;
				pl->size = o->sizes[si];
				pl->depth = pipeline_depth(o, o->depths[di]);
				pl->unit = o->batch;
				err = pipeline_run(pl, &r);
				if (!err)
					pipeline_print(o, tag, w ? to_owner : from_owner, pl->size,
						       pl->depth, &r);
				free(pl);
			}
		}
	}
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* pipe: a sustained pipeline of pairings, N in flight, per-operation latency tails           */

/* Starts the pair of slot @k: passive call on the owner, active call (claim) on the other. */
static int pipe_start_one(struct pipeline *pl, int k)
{
	struct bench *b = pl->b;
	struct xfer_desc pd = { b->pb.region, (uint64_t)k * pl->size, pl->size };
	struct xfer_desc ad = { b->ab.region, (uint64_t)k * pl->size, pl->size };
	/* Only ends are waited for: no IN_PROGRESS events (XFER_OP_END_ONLY). */
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_END_ONLY };
	/* The claim is not waited for (XFER_OP_NOWAIT): its refusal would come as an end. */
	struct xfer_op_opts active_opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_NOWAIT |
						     XFER_OP_END_ONLY };
	struct slot *s = &pl->slots[k];
	char *md = NULL;
	int err;

	err = pl->write ? xfer_writable(b->pc, &pd, 1, &opts, &s->pop, &md) :
			  xfer_readable(b->pc, &pd, 1, &opts, &s->pop, &md);
	if (err) {
		slot_fail(pl, s, err);
		return bench_fail(b->pc, pl->write ? "xfer_writable" : "xfer_readable", err);
	}
	err = pl->write ? xfer_write(b->ac, md, &ad, 1, &active_opts, &s->aop) :
			  xfer_read(b->ac, md, &ad, 1, &active_opts, &s->aop);
	free(md);
	if (err) {
		slot_fail(pl, s, err);
		xfer_release(b->pc, s->pop);
		return bench_fail(b->ac, pl->write ? "xfer_write" : "xfer_read", err);
	}
	return 0;
}

/*
 * pipe --batch: starts the pairs of slots @k0 .. @k0 + @n - 1 with two requests, an op.batch of
 * their passive operations on the owner and one of their active operations (claims not waited
 * for) on the other side; with --batch-end each batch's ends come as one event. A slot that
 * could not be started is marked ended with the error.
 */
static int pipe_start_batch(struct pipeline *pl, int k0, int n)
{
	struct bench *b = pl->b;
	struct xfer_desc pd[MAX_INFLIGHT], ad[MAX_INFLIGHT];
	struct xfer_batch_op pops[MAX_INFLIGHT], aops[MAX_INFLIGHT];
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_END_ONLY |
					      (b->o->batch_end ? XFER_OP_BATCH_EVENT : 0) };
	uint64_t pbatch = 0, abatch = 0;
	size_t pmade = 0, amade = 0;
	int err;

	for (int i = 0; i < n; i++) {
		uint64_t off = (uint64_t)(k0 + i) * pl->size;
		pd[i] = (struct xfer_desc){ b->pb.region, off, pl->size };
		ad[i] = (struct xfer_desc){ b->ab.region, off, pl->size };
		pops[i] = (struct xfer_batch_op){ .kind = pl->write ? XFER_WRITABLE : XFER_READABLE,
						  .descs = &pd[i],
						  .n = 1 };
	}
	err = xfer_batch(b->pc, pops, (size_t)n, &opts, &pmade, &pbatch);
	if (err)
		bench_fail(b->pc, "xfer_batch (passive)", err);
	for (size_t i = 0; i < pmade; i++) {
		pl->slots[k0 + (int)i].pbatch = pbatch;
		aops[i] = (struct xfer_batch_op){ .kind = pl->write ? XFER_WRITE : XFER_READ,
						  .descs = &ad[i],
						  .n = 1,
						  .metadata = pops[i].made_metadata };
	}
	/*
	 * With --post the active batch is not waited for: its op.batch_done answers it (and
	 * names a refused entry), so the client is not woken for a reply it does not need.
	 */
	struct xfer_op_opts aopts = opts;
	if (b->o->post && b->o->batch_end)
		aopts.flags |= XFER_OP_POST;
	int aerr = pmade ? xfer_batch(b->ac, aops, pmade, &aopts, &amade, &abatch) : 0;
	if (!aerr && (aopts.flags & XFER_OP_POST))
		amade = pmade; /* (posted: all of them go on, their ends come in the event) */
	if (aerr)
		bench_fail(b->ac, "xfer_batch (active)", aerr);
	for (int i = 0; i < n; i++) {
		struct slot *s = &pl->slots[k0 + i];
		if ((size_t)i < pmade)
			free(pops[i].made_metadata);
		s->pop = (size_t)i < pmade ? pops[i].op : UINT64_MAX;
		s->aop = (size_t)i < amade ? aops[i].op : UINT64_MAX;
		s->batch = abatch;
		if ((size_t)i >= amade) { /* no active op: its end will not come */
			s->ends = (size_t)i < pmade ? 1 : 2;
			s->err = err ?: aerr;
			if ((size_t)i < pmade) /* the passive one's end comes with the cancel */
				xfer_cancel(b->pc, s->pop);
		}
	}
	return err ?: aerr;
}

/* Starts the pairs of @n slots from @k0 (one by one for n == 1, else as two batches). */
static int pipe_start(struct pipeline *pl, int k0, int n)
{
	return n == 1 ? pipe_start_one(pl, k0) : pipe_start_batch(pl, k0, n);
}

static int run_pipe(struct bench *b)
{
	struct pipeline mode = {
		.ends_per_slot = 2, .clients = { b->pc, b->ac }, .nclients = 2, .start = pipe_start
	};

	pipeline_print_header(b->o);
	return pipeline_cells(b, &mode, "pipe", "read", "write");
}

/* ---------------------------------------------------------------------------------------- */
/* win: one-sided gets and puts on a window, N in flight                                     */

/* Starts slot @k's get or put: the active buffer's slice k to/from window slice k. */
static int win_start_one(struct pipeline *pl, int k)
{
	struct bench *b = pl->b;
	uint64_t off = (uint64_t)k * pl->size;
	struct xfer_desc d = { b->ab.region, off, pl->size };
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END };
	struct slot *s = &pl->slots[k];
	int err = pl->write ? xfer_put(b->ac, pl->handle, off, &d, 1, NULL, &opts, &s->aop) :
			      xfer_get(b->ac, pl->handle, off, &d, 1, NULL, &opts, &s->aop);

	if (err) {
		slot_fail(pl, s, err);
		return bench_fail(b->ac, pl->write ? "xfer_put" : "xfer_get", err);
	}
	return 0;
}

/*
 * win --batch: the gets or puts of slots @k0 .. @k0 + @n - 1 in one op.batch, one end event;
 * with --post not waited for (its event is its answer).
 */
static int win_start_batch(struct pipeline *pl, int k0, int n)
{
	struct bench *b = pl->b;
	struct xfer_desc d[MAX_INFLIGHT];
	struct xfer_batch_op ops[MAX_INFLIGHT];
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT |
					      (b->o->post ? XFER_OP_POST : 0) };
	uint64_t id = 0;

	for (int i = 0; i < n; i++) {
		uint64_t off = (uint64_t)(k0 + i) * pl->size;
		d[i] = (struct xfer_desc){ b->ab.region, off, pl->size };
		ops[i] = (struct xfer_batch_op){ .kind = pl->write ? XFER_PUT : XFER_GET,
						 .handle = pl->handle,
						 .offset = off,
						 .descs = &d[i],
						 .n = 1 };
	}
	int err = xfer_batch(b->ac, ops, (size_t)n, &opts, NULL, &id);
	for (int i = 0; i < n; i++) {
		pl->slots[k0 + i].batch = id;
		if (err)
			slot_fail(pl, &pl->slots[k0 + i], err);
	}
	return err ? bench_fail(b->ac, "xfer_batch", err) : 0;
}

static int win_start(struct pipeline *pl, int k0, int n)
{
	return n == 1 && !pl->b->o->post ? win_start_one(pl, k0) : win_start_batch(pl, k0, n);
}

static int run_win(struct bench *b)
{
	uint64_t window, handle;
	char *meta = NULL;
	int err = xfer_window_create(b->pc, b->pb.region, 0, 0, XFER_ACCESS_READWRITE, 0, &window,
				     &meta);

	if (err)
		return bench_fail(b->pc, "xfer_window_create", err);
	err = xfer_window_open(b->ac, meta, &handle, NULL, NULL);
	free(meta);
	if (err)
		return bench_fail(b->ac, "xfer_window_open", err);
	struct pipeline mode = { .ends_per_slot = 1,
				 .handle = handle,
				 .clients = { b->ac },
				 .nclients = 1,
				 .start = win_start };
	pipeline_print_header(b->o);
	err = pipeline_cells(b, &mode, "win", "get", "put");
	xfer_window_close(b->ac, handle);
	xfer_window_close(b->pc, window);
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* reg: the cost of registering                                                              */

/* Register + deregister of one resident @size memfd, for --seconds (at least 100 times). */
static int reg_rate(struct bench *b, uint64_t size)
{
	struct xfer_buf buf = { .fd = -1 };
	uint64_t cap = 1 << 20, n = 0, *ns = malloc(cap * sizeof(*ns)), t0, t;
	int err = ns ? xfer_buf_alloc(size, &buf) : -ENOMEM;
	char sz[32];

	if (!err)
		memset(buf.addr, 0x5a, size); /* resident: the client touched every page */
	t0 = bench_now_ns();
	while (!err && n < cap && (n < 100 || (bench_now_ns() - t0) / 1e9 < b->o->seconds)) {
		uint64_t region;
		t = bench_now_ns();
		err = xfer_region_register(b->pc, buf.fd, 0, 0, NULL, &region);
		if (err) {
			bench_fail(b->pc, "xfer_region_register", err);
			break;
		}
		err = xfer_region_deregister(b->pc, region, 0);
		if (err)
			bench_fail(b->pc, "xfer_region_deregister", err);
		ns[n++] = bench_now_ns() - t;
	}
	if (!err) {
		double secs = (bench_now_ns() - t0) / 1e9;
		bench_fmt_size(size, sz, sizeof(sz));
		if (b->o->json)
			printf("{\"reg\":\"rate\",\"size\":%" PRIu64 ",\"count\":%" PRIu64
			       ",\"per_s\":%.0f,\"us_p50\":%.1f,\"us_p99\":%.1f}\n",
			       size, n, n / secs, bench_percentile(ns, n, 50) / 1e3,
			       bench_percentile(ns, n, 99) / 1e3);
		else
			printf("register+deregister %s resident: %.0f/s (p50 %.1f us, p99 %.1f us)\n",
			       sz, n / secs, bench_percentile(ns, n, 50) / 1e3,
			       bench_percentile(ns, n, 99) / 1e3);
	}
	free(ns);
	xfer_buf_free(&buf);
	return err;
}

/* Registers a --pool bytes memfd every page of which the client wrote (no bytes move). */
static int reg_pool(struct bench *b, uint64_t size)
{
	struct xfer_buf buf = { .fd = -1 };
	uint64_t region = 0, t;
	int err = xfer_buf_alloc(size, &buf);
	char sz[32];

	if (err)
		return bench_fail(NULL, "xfer_buf_alloc", err);
	bench_pattern_fill(buf.addr, size, 77);
	t = bench_now_ns();
	err = xfer_region_register(b->pc, buf.fd, 0, 0, "pool", &region);
	t = bench_now_ns() - t;
	if (err)
		bench_fail(b->pc, "xfer_region_register", err);
	if (!err) {
		double gib = (double)size / BENCH_GIB;
		bench_fmt_size(size, sz, sizeof(sz));
		if (b->o->json)
			printf("{\"reg\":\"pool\",\"size\":%" PRIu64 ",\"s\":%.4f,"
			       "\"s_per_gib\":%.4f}\n",
			       size, t / 1e9, t / 1e9 / gib);
		else
			printf("register %s pool the client touched: %.3f s (%.3f s per GiB)\n", sz,
			       t / 1e9, t / 1e9 / gib);
		err = xfer_region_deregister(b->pc, region, 0);
	}
	xfer_buf_free(&buf);
	return err;
}

static int run_reg(struct bench *b)
{
	int err = reg_rate(b, BENCH_MIB);

	if (!err)
		err = reg_rate(b, 4 * BENCH_KIB);
	if (!err && b->o->pool)
		err = reg_pool(b, b->o->pool);
	fflush(stdout);
	return err;
}

/* Parses "4K,64K,1M" (@sizes) or "1,8,16" (else) into @out. Returns the count, or -EINVAL. */
static int parse_list(const char *arg, bool sizes, uint64_t *out)
{
	char buf[256], *save = NULL, *tok;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		char *end;
		if (n == MAX_LIST)
			return -EINVAL;
		if (sizes) {
			if (bench_parse_size(tok, &v))
				return -EINVAL;
		} else {
			v = strtoull(tok, &end, 10);
			if (*end || v < 1 || v > MAX_INFLIGHT)
				return -EINVAL;
		}
		out[n++] = v;
	}
	return n ? n : -EINVAL;
}

/* ---------------------------------------------------------------------------------------- */

static int node_of(struct xfer_client *c, char *out, size_t len)
{
	char *res = NULL, *p, *q;
	int err = xfer_call(c, "stats", NULL, &res);

	snprintf(out, len, "?");
	if (err)
		return err;
	p = strstr(res, "\"node\":\"");
	if (p) {
		p += 8;
		q = strchr(p, '"');
		if (q && (size_t)(q - p) < len)
			snprintf(out, len, "%.*s", (int)(q - p), p);
	}
	free(res);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xferbench_net bench|lat|check|pipe|win|reg --passive SOCKET --active SOCKET "
		"[options]\n"
		"  --passive SOCKET  the owner's daemon: readable/writable are made there\n"
		"  --active SOCKET   the other daemon: read/write are issued there\n"
		"  --min SIZE        bench: smallest size (default 4K); sizes grow x4\n"
		"  --max SIZE        bench: largest size (default 1G); check: buffer size (64M)\n"
		"  --iters N         bench: transfers per size (default: ~2 GiB per size, 3..2000)\n"
		"  --seconds S       bench: time budget per size and kind when --iters is not set (2)\n"
		"  --gap MS          bench: idle MS milliseconds before each transfer (default 0),\n"
		"                    as between a node's sporadic transfers; give --iters too\n"
		"  --inflight N      bench: operations in flight at once (default 1, max %d)\n"
		"  --lat-iters N     latency round trips (default 1000; 0 skips latency)\n"
		"  --lat-size SIZE   latency operation size (default 64)\n"
		"  --transport NAME  check: transport every op must report (default tcp)\n"
		"  --sizes LIST      pipe, win: sizes (default 4K,64K,1M,16M)\n"
		"  --depths LIST     pipe, win: operations in flight (default 1,8,16,32)\n"
		"  --pool SIZE       reg: also register a touched pool of SIZE once (default 0)\n"
		"  --batch N         win: post N gets/puts per op.batch, their ends as one event;\n"
		"                    pipe: start N pairs with one op.batch on each side\n"
		"                    (default 1: one call each); the depth is rounded up to N\n"
		"  --batch-end       pipe --batch: each side's batch ends as one event\n"
		"                    (op.batch_done), not one op.changed per operation\n"
		"  --post            win: post each batch (of --batch entries, 1 too) without\n"
		"                    waiting for its reply (XFER_OP_POST): its event answers it;\n"
		"                    pipe --batch-end: post the active side's batches so\n"
		"                    (the passive side's reply carries the metadata)\n"
		"  --spin US         pipe, win: the clients busy-poll up to US microseconds for a\n"
		"                    reply or an event before they sleep (xfer_set_spin(), and\n"
		"                    the waits for ends), as ucx_perftest polls (default 0)\n"
		"  --json            bench/lat/pipe/reg: one JSON object per line\n"
		"  --passive-file DIR, --active-file DIR  back that side's buffer with a file\n"
		"                    in DIR (a file region: the daemon moves it by file I/O)\n"
		"pipe keeps N pairs in flight (waiting for the oldest) and prints per-op latency p50/p99;\n"
		"reg times register+deregister of a resident 1 MiB and 4 KiB memfd on --passive\n",
		MAX_INFLIGHT);
}

/* The modes, each with its default --max. */
static const struct mode {
	const char *name;
	int (*run)(struct bench *b);
	uint64_t max;
} modes[] = {
	{ "bench", run_bench, BENCH_GIB },
	{ "lat", run_lat, BENCH_GIB },
	{ "check", run_check, 64 * BENCH_MIB },
	{ "pipe", run_pipe, 0 },
	{ "win", run_win, 0 },
	{ "reg", run_reg, 0 },
};

/* bench_getopt() callback: stores option @ch of @ctx, a struct opts. */
static int set_opt(void *ctx, int ch, const char *arg)
{
	struct opts *o = ctx;

	switch (ch) {
	case 'p':
		o->passive = arg;
		break;
	case 'a':
		o->active = arg;
		break;
	case 'm':
	case 'M':
	case 'L':
		if (bench_parse_size(arg, ch == 'm' ? &o->min :
					  ch == 'M' ? &o->max :
						      &o->lat_size)) {
			fprintf(stderr, "xferbench_net: bad size '%s'\n", arg);
			return 2;
		}
		break;
	case 'i':
		o->iters = atoi(arg);
		break;
	case 's':
		o->seconds = atof(arg);
		break;
	case 'f':
		o->inflight = atoi(arg);
		break;
	case 'g':
		o->gap_ms = atoi(arg);
		break;
	case 'l':
		o->lat_iters = atoi(arg);
		break;
	case 't':
		o->expect_transport = arg;
		break;
	case 'j':
		o->json = true;
		break;
	case 'S':
	case 'D': {
		uint64_t v[MAX_LIST];
		int n = parse_list(arg, ch == 'S', v);
		if (n < 0) {
			fprintf(stderr, "xferbench_net: bad list '%s'\n", arg);
			return 2;
		}
		for (int i = 0; i < n; i++)
			if (ch == 'S')
				o->sizes[i] = v[i];
			else
				o->depths[i] = (int)v[i];
		*(ch == 'S' ? &o->nsizes : &o->ndepths) = n;
		break;
	}
	case 'P':
		if (bench_parse_size(arg, &o->pool)) {
			fprintf(stderr, "xferbench_net: bad size '%s'\n", arg);
			return 2;
		}
		break;
	case 'F':
		o->passive_dir = arg;
		break;
	case 'B':
		o->batch = atoi(arg);
		if (o->batch < 1 || o->batch > MAX_INFLIGHT) {
			fprintf(stderr, "xferbench_net: --batch takes 1..%d\n", MAX_INFLIGHT);
			return 2;
		}
		break;
	case 'G':
		o->active_dir = arg;
		break;
	case 'E':
		o->batch_end = true;
		break;
	case 'o':
		o->post = true;
		break;
	case 'y':
		o->spin_us = atoi(arg);
		if (o->spin_us < 0 || o->spin_us > XFER_SPIN_MAX_US) {
			fprintf(stderr, "xferbench_net: --spin takes 0..%d\n", XFER_SPIN_MAX_US);
			return 2;
		}
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/* Parses the command line into @o and *mode. Returns 0, or 2 for a usage error. */
static int parse_opts(int argc, char **argv, struct opts *o, const struct mode **mode)
{
	static const struct option lo[] = {
		{ "passive", required_argument, NULL, 'p' },
		{ "active", required_argument, NULL, 'a' },
		{ "min", required_argument, NULL, 'm' },
		{ "max", required_argument, NULL, 'M' },
		{ "iters", required_argument, NULL, 'i' },
		{ "seconds", required_argument, NULL, 's' },
		{ "inflight", required_argument, NULL, 'f' },
		{ "gap", required_argument, NULL, 'g' },
		{ "lat-iters", required_argument, NULL, 'l' },
		{ "lat-size", required_argument, NULL, 'L' },
		{ "transport", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "sizes", required_argument, NULL, 'S' },
		{ "depths", required_argument, NULL, 'D' },
		{ "batch", required_argument, NULL, 'B' },
		{ "batch-end", no_argument, NULL, 'E' },
		{ "post", no_argument, NULL, 'o' },
		{ "spin", required_argument, NULL, 'y' },
		{ "pool", required_argument, NULL, 'P' },
		{ "passive-file", required_argument, NULL, 'F' },
		{ "active-file", required_argument, NULL, 'G' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int rc = bench_getopt(argc, argv, "p:a:h", lo, set_opt, o, usage);

	if (rc)
		return rc;
	if (optind != argc - 1 || !o->passive || !o->active || o->iters < 0 || o->lat_iters < 0 ||
	    o->inflight < 1 || o->inflight > MAX_INFLIGHT || o->seconds <= 0 || o->gap_ms < 0 ||
	    o->gap_ms > 60000)
		goto bad;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(argv[optind], modes[i].name))
			*mode = &modes[i];
	if (!*mode)
		goto bad;
	if (!o->max)
		o->max = (*mode)->max;
	if (o->min > o->max)
		o->min = o->max;
	return 0;
bad:
	usage(stderr);
	return 2;
}

/*
 * pipe, win: the largest size times the deepest pipeline, as run: each depth rounded up to
 * whole --batch groups (pipeline_depth()), so that --depths 16 --batch 32 has 32 slots.
 */
static uint64_t pipe_buf_size(const struct opts *o)
{
	uint64_t size = 0;
	int depth = 0;

	for (int i = 0; i < o->nsizes; i++)
		size = o->sizes[i] > size ? o->sizes[i] : size;
	for (int i = 0; i < o->ndepths; i++) {
		int d = pipeline_depth(o, o->depths[i]);
		depth = d > depth ? d : depth;
	}
	return size * (uint64_t)depth;
}

/* The size of the buffer registered on each side for @mode. */
static uint64_t buf_size(const struct opts *o, const struct mode *mode)
{
	uint64_t bufsize;

	if (mode->run == run_lat)
		bufsize = o->lat_size > 4096 ? o->lat_size : 4096;
	else if (mode->run == run_check)
		bufsize = o->max;
	else if (mode->run == run_pipe || mode->run == run_win)
		bufsize = pipe_buf_size(o);
	else if (mode->run == run_reg)
		bufsize = 4096;
	else
		bufsize = o->max * (uint64_t)o->inflight;
	/* Past 2 GiB, bench_one() lowers inflight to fit. */
	if (mode->run == run_bench && bufsize > 2 * BENCH_GIB)
		bufsize = o->max > 2 * BENCH_GIB ? o->max : 2 * BENCH_GIB;
	return o->lat_size > bufsize ? o->lat_size : bufsize;
}

/* One side's buffer: a memfd, or a file in @dir (NULL: memfd). */
static int side_buf_create(struct xfer_client *c, uint64_t size, const char *dir, const char *name,
			   struct bench_buf *rb)
{
	if (dir)
		return bench_file_create(c, size, dir, name, rb);
	return bench_buf_create(c, size, name, rb);
}

int main(int argc, char **argv)
{
	struct opts o = { .min = 4 * BENCH_KIB,
			  .max = 0,
			  .inflight = 1,
			  .lat_iters = 1000,
			  .lat_size = 64,
			  .seconds = 2.0,
			  .expect_transport = "tcp",
			  .sizes = { 4 * BENCH_KIB, 64 * BENCH_KIB, BENCH_MIB, 16 * BENCH_MIB },
			  .nsizes = 4,
			  .depths = { 1, 8, 16, 32 },
			  .ndepths = 4,
			  .batch = 1 };
	struct bench b = { .o = &o };
	const struct mode *mode = NULL;
	uint64_t bufsize;
	int err;

	bench_prog = "xferbench_net";
	err = parse_opts(argc, argv, &o, &mode);
	if (err)
		return err;
	if (bench_connect(o.passive, "xferbench_net-passive", NULL, &b.pc))
		return 1;
	if (bench_connect(o.active, "xferbench_net-active", NULL, &b.ac)) {
		xfer_close(b.pc);
		return 1;
	}
	if (o.spin_us) {
		xfer_set_spin(b.pc, (unsigned)o.spin_us);
		xfer_set_spin(b.ac, (unsigned)o.spin_us);
	}
	node_of(b.pc, b.pnode, sizeof(b.pnode));
	node_of(b.ac, b.anode, sizeof(b.anode));
	bufsize = buf_size(&o, mode);
	err = side_buf_create(b.pc, bufsize, o.passive_dir, "xferbench_net-passive", &b.pb);
	if (!err)
		err = side_buf_create(b.ac, bufsize, o.active_dir, "xferbench_net-active", &b.ab);
	if (!err) {
		if (!o.json)
			printf("# passive node %s (%s), active node %s (%s)\n", b.pnode, o.passive,
			       b.anode, o.active);
		err = mode->run(&b);
	}
	bench_buf_destroy(b.ac, &b.ab, 1);
	bench_buf_destroy(b.pc, &b.pb, 1);
	xfer_close(b.ac);
	xfer_close(b.pc);
	if (err)
		fprintf(stderr, "xferbench_net: %s failed: %s\n", mode->name, xfer_strerror(err));
	return err ? 1 : 0;
}
