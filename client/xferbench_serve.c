/* SPDX-License-Identifier: MIT */
/*
 * xferbench_serve: a disaggregated-serving workload on two daemons, built only on the public
 * libxferclient API. Requests arrive at a prefill node (--active) as a Poisson process; each
 * one's KV cache (per layer, a K and a V block of tokens x --kv-bytes) moves to the decode node
 * (--passive) as one pairing: the decode worker offers a writable over its per-layer
 * descriptors (K blocks in one half of its slot, V blocks in the other, so that the two sides'
 * descriptors do not line up) and the prefill worker writes its layer-ordered blocks into it.
 * Prompt lengths are log-normal (--median-tokens, --sigma), cut at --max-tokens.
 *
 * The arrival rate is --load x --link-Bps / mean request size. Each request's latency is from
 * its arrival to the decode side's COMPLETE; beside it the program simulates a perfectly
 * shared link (processor sharing at --link-Bps) on the same arrivals and sizes, and prints
 * p50/p99 of both, of the bytes/link time, and their ratios (one JSON line with --json).
 *
 * --model windows moves the same requests one-sidedly instead (the NIXL / KV-cache pattern): the
 * decode worker exposes its whole buffer once as a write window, the prefill worker opens it
 * once, and each request is one op.batch of puts, a put per block, each tagged with the
 * request's number; the request is done on the decode side when the last of its blocks' tags
 * has been notified (the bytes are in place), with no operation created on the decode side.
 *
 * Every request stamps the first and last 8 bytes of each of its blocks with its number and
 * the block's; the decode side's blocks are checked after COMPLETE, and every 8th request (and
 * the last) is compared block by block in full.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"

#define MAX_LAYERS 256
#define UNIT (1ull << 20) /* pool allocation unit */

struct opts {
	const char *passive, *active, *trace;
	double link_Bps, load, seconds, sigma;
	uint64_t median_tokens, max_tokens, kv_bytes, pool;
	int layers;
	uint64_t seed;
	bool json;
	bool windows; /* --model windows */
	int handles;  /* windows: the prefill side's handles of the window (--handles) */
};

struct req {
	double arrive_s, size_s; /* arrival time, bytes/link */
	uint64_t bytes, tokens;
	uint64_t off; /* slot in both pools, UNIT-aligned; UINT64_MAX before it has one */
	uint64_t pop, aop;
	uint64_t batch; /* windows: the prefill side's batch of puts */
	int h;		/* windows: which of the prefill side's handles it went on */
	int notes;	/* windows: blocks notified on the decode side */
	int ends;
	int err;
	double done_s; /* the decode side's COMPLETE, seconds from the start */
};

struct serve {
	const struct opts *o;
	struct xfer_client *pc, *ac;
	struct bench_buf pb, ab;
	struct req *reqs;
	size_t n, next, done;
	uint8_t *used; /* one byte per UNIT of the pools */
	size_t units;
	uint64_t t0;
	int failed;
	uint64_t window;    /* windows: the decode side's window */
	uint64_t *handle;   /* windows: the prefill side's handles of it (--handles) */
	int *busy;	    /* windows: requests under way on each handle */
	int last_h;	    /* windows: the handle the last request went on */
	FILE *trace;	    /* --trace: a line per request */
	size_t submitting;  /* windows: the request inside xfer_batch() */
	size_t pool_waits;  /* requests submitted > 1 ms late: pools full, or a call under way */
	double pool_wait_s; /* and how late, all together */
};

static double now_s(const struct serve *s)
{
	return (bench_now_ns() - s->t0) / 1e9;
}

static uint64_t rng;

static double uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(void)
{
	return sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform());
}

/* The arrivals and sizes, all drawn before the run. Returns the count. */
static size_t make_requests(const struct opts *o, struct req **out)
{
	uint64_t block = 2 * (uint64_t)o->layers * o->kv_bytes; /* K and V of every layer */
	double mean = 0, t = 0;
	size_t cap = 1 << 20, n = 0;
	struct req *r = calloc(cap, sizeof(*r));

	rng = o->seed * 0x9e3779b97f4a7c15ULL + 1;
	/* The mean size by sampling, so that the rate hits the load. */
	for (int i = 0; i < 100000; i++) {
		double tok = exp(log((double)o->median_tokens) + o->sigma * normal());
		mean += (tok > o->max_tokens ? o->max_tokens :
			 tok < 1	     ? 1 :
					       (uint64_t)tok) *
			(double)block;
	}
	mean /= 100000;
	double rate = o->load * o->link_Bps / mean;
	rng = o->seed * 0x9e3779b97f4a7c15ULL + 7;
	while (r && n < cap) {
		t += -log(uniform()) / rate;
		if (t > o->seconds)
			break;
		double tok = exp(log((double)o->median_tokens) + o->sigma * normal());
		uint64_t tokens = tok > o->max_tokens ? o->max_tokens : tok < 1 ? 1 : (uint64_t)tok;
		r[n] = (struct req){ .arrive_s = t,
				     .tokens = tokens,
				     .bytes = tokens * block,
				     .size_s = tokens * block / o->link_Bps,
				     .off = UINT64_MAX };
		n++;
	}
	*out = r;
	return r ? n : 0;
}

/* calloc() for the report's arrays: a benchmark that cannot hold them has nothing to report. */
static void *report_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "xferbench_serve: out of memory for the report of %zu requests\n",
			n);
		exit(1);
	}
	return p;
}

/*
 * A perfectly shared link on the same arrivals (processor sharing at @link bytes/s: every
 * request in the system gets an equal share at every instant): each request's finish time.
 */
static void simulate_shared(const struct req *r, size_t n, double link, double *finish)
{
	double *left = report_calloc(n, sizeof(*left)), t = 0;
	bool *live = report_calloc(n, sizeof(*live));
	size_t next = 0, active = 0;

	for (;;) {
		size_t who = SIZE_MAX;
		for (size_t i = 0; i < next; i++)
			if (live[i] && (who == SIZE_MAX || left[i] < left[who]))
				who = i;
		if (who == SIZE_MAX && next == n)
			break;
		double ta = next < n ? r[next].arrive_s : INFINITY;
		double tf = who == SIZE_MAX ? INFINITY : t + left[who] * (double)active / link;
		double until = ta < tf ? ta : tf;
		for (size_t i = 0; i < next; i++)
			if (live[i])
				left[i] -= (until - t) * link / (double)active;
		t = until;
		if (tf <= ta) {
			for (size_t i = 0; i < next; i++) {
				if (live[i] &&
				    (i == who || left[i] <= 1.0)) { /* a byte: rounding */
					live[i] = false;
					finish[i] = t;
					active--;
				}
			}
		} else {
			left[next] = (double)r[next].bytes;
			live[next++] = true;
			active++;
		}
	}
	free(left);
	free(live);
}

/*
 * The same link serving the requests one at a time in the order they came (FIFO): what one
 * handle's in-order notifications allow at best. Each request's finish time.
 */
static void simulate_fifo(const struct req *r, size_t n, double link, double *finish)
{
	double t = 0;

	for (size_t i = 0; i < n; i++) {
		t = (t > r[i].arrive_s ? t : r[i].arrive_s) + (double)r[i].bytes / link;
		finish[i] = t;
	}
}

/* First fit of @bytes in the pools; UINT64_MAX when they are full right now. */
static uint64_t pool_get(struct serve *s, uint64_t bytes)
{
	size_t need = (bytes + UNIT - 1) / UNIT, run = 0;

	for (size_t u = 0; u < s->units; u++) {
		run = s->used[u] ? 0 : run + 1;
		if (run == need) {
			memset(s->used + u + 1 - need, 1, need);
			return (u + 1 - need) * UNIT;
		}
	}
	return UINT64_MAX;
}

static void pool_put(struct serve *s, uint64_t off, uint64_t bytes)
{
	memset(s->used + off / UNIT, 0, (bytes + UNIT - 1) / UNIT);
}

/* Block @i (layer i/2, K if even, V if odd) of a request: where it is on each side. */
static void block_at(const struct serve *s, const struct req *r, int i, uint64_t *aoff,
		     uint64_t *poff, uint64_t *len)
{
	uint64_t blen = r->bytes / (2 * (uint64_t)s->o->layers);
	int layer = i / 2, v = i % 2;

	*len = blen;
	*aoff = r->off + (uint64_t)i * blen; /* prefill: layer by layer, K then V */
	*poff = r->off + ((uint64_t)v * s->o->layers + layer) * blen; /* decode: all K, then V */
}

static void stamp(uint8_t *p, uint64_t len, uint64_t v)
{
	memcpy(p, &v, 8);
	memcpy(p + len - 8, &v, 8);
}

/* Request @k's blocks on both sides (@pd decode, @ad prefill); stamps the prefill side's. */
static int fill_blocks(struct serve *s, size_t k, struct xfer_desc *pd, struct xfer_desc *ad)
{
	struct req *r = &s->reqs[k];
	int nb = 2 * s->o->layers;

	for (int i = 0; i < nb; i++) {
		uint64_t ao, po, len;
		block_at(s, r, i, &ao, &po, &len);
		pd[i] = (struct xfer_desc){ s->pb.region, po, len };
		ad[i] = (struct xfer_desc){ s->ab.region, ao, len };
		stamp((uint8_t *)s->ab.buf.addr + ao, len, ((uint64_t)k << 16) | (uint64_t)i);
	}
	return nb;
}

/* The pairing model: a writable over the decode side's blocks, written by the prefill side. */
static int submit_pairing(struct serve *s, size_t k)
{
	struct req *r = &s->reqs[k];
	struct xfer_desc pd[2 * MAX_LAYERS], ad[2 * MAX_LAYERS];
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END, .timeout_ms = 600000 };
	int nb = fill_blocks(s, k, pd, ad), err;
	char *md = NULL;

	err = xfer_writable(s->pc, pd, (size_t)nb, &opts, &r->pop, &md);
	if (err)
		return bench_fail(s->pc, "xfer_writable", err);
	err = xfer_write(s->ac, md, ad, (size_t)nb, &opts, &r->aop);
	free(md);
	if (err)
		return bench_fail(s->ac, "xfer_write", err);
	return 0;
}

/*
 * The handle for a new request: the first idle one after the last used, else the least busy.
 * A handle's tagged puts are notified in the order posted (PROTOCOL.md §10.7), so requests on
 * one handle finish one after the other; on handles of their own they move side by side.
 */
static int pick_handle(struct serve *s)
{
	int best = -1;

	for (int i = 1; i <= s->o->handles; i++) {
		int h = (s->last_h + i) % s->o->handles;
		if (best < 0 || s->busy[h] < s->busy[best])
			best = h;
	}
	s->last_h = best;
	return best;
}

/*
 * The windows model: one batch of puts into the decode side's window, a put per block, each
 * tagged with the request's number (the decode side counts them: window_cb()).
 */
static int submit_puts(struct serve *s, size_t k)
{
	struct req *r = &s->reqs[k];
	struct xfer_desc pd[2 * MAX_LAYERS], ad[2 * MAX_LAYERS];
	struct xfer_batch_op ops[2 * MAX_LAYERS];
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT,
				     .timeout_ms = 600000 };
	int nb = fill_blocks(s, k, pd, ad), err;
	char tag[24];

	snprintf(tag, sizeof(tag), "%zu", k);
	r->h = pick_handle(s);
	s->busy[r->h]++;
	for (int i = 0; i < nb; i++)
		ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
						 .handle = s->handle[r->h],
						 .offset =
							 pd[i].offset, /* the window is all of pb */
						 .descs = &ad[i],
						 .n = 1,
						 .tag = tag };
	s->submitting = k;
	err = xfer_batch(s->ac, ops, (size_t)nb, &opts, NULL, &r->batch);
	s->submitting = SIZE_MAX;
	if (err)
		return bench_fail(s->ac, "xfer_batch", err);
	return 0;
}

static int submit(struct serve *s, size_t k)
{
	return s->o->windows ? submit_puts(s, k) : submit_pairing(s, k);
}

/* The decode side's blocks of request @k: stamps always, every byte when @full. */
static int check(struct serve *s, size_t k, bool full)
{
	struct req *r = &s->reqs[k];

	for (int i = 0; i < 2 * s->o->layers; i++) {
		uint64_t ao, po, len, want = ((uint64_t)k << 16) | (uint64_t)i, a, z;
		block_at(s, r, i, &ao, &po, &len);
		const uint8_t *p = (const uint8_t *)s->pb.buf.addr + po;
		memcpy(&a, p, 8);
		memcpy(&z, p + len - 8, 8);
		if (a != want || z != want ||
		    (full && memcmp(p, (const uint8_t *)s->ab.buf.addr + ao, len))) {
			fprintf(stderr, "xferbench_serve: request %zu, block %d: wrong bytes\n", k,
				i);
			return -EIO;
		}
	}
	return 0;
}

static void event_cb(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct serve *s = arg;
	bool passive = c == s->pc;

	if (info->state < XFER_COMPLETE)
		return;
	for (size_t k = s->done; k < s->next; k++) {
		struct req *r = &s->reqs[k];
		if (r->ends >= 2 || info->op != (passive ? r->pop : r->aop))
			continue;
		r->ends++;
		if (passive)
			r->done_s = now_s(s);
		if (info->state != XFER_COMPLETE) {
			fprintf(stderr, "xferbench_serve: request %zu: %s: %s\n", k,
				xfer_state_name(info->state), info->cause);
			r->err = info->error ?: -EIO;
		}
		return;
	}
}

/* The request whose batch @batch is; the one being submitted if none has it yet. */
static struct req *request_of_batch(struct serve *s, uint64_t batch)
{
	for (size_t k = s->done; k < s->next; k++)
		if (s->reqs[k].batch == batch)
			return &s->reqs[k];
	return s->submitting < s->next ? &s->reqs[s->submitting] : NULL;
}

/* Windows: the prefill side's puts of one request all ended. */
static void batch_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct serve *s = arg;
	struct req *r = request_of_batch(s, ev->batch);

	(void)c;
	if (!r) {
		fprintf(stderr, "xferbench_serve: an event for unknown batch %" PRIu64 "\n",
			ev->batch);
		s->failed = -EPROTO;
		return;
	}
	for (size_t i = 0; i < ev->n && !r->err; i++) {
		if (ev->ends[i].state == XFER_COMPLETE)
			continue;
		fprintf(stderr, "xferbench_serve: request %zu: a put %s\n", (size_t)(r - s->reqs),
			xfer_state_name(ev->ends[i].state));
		r->err = ev->ends[i].error ?: -EIO;
	}
	r->ends++;
}

/* Windows: a block's bytes are in the decode side's buffer; the last one ends the request. */
static void window_cb(struct xfer_client *c, const struct xfer_window_event *ev, void *arg)
{
	struct serve *s = arg;
	char *end;

	(void)c;
	if (ev->type == XFER_WINDOW_CLOSED) {
		fprintf(stderr, "xferbench_serve: the window was closed: %s\n", ev->cause);
		s->failed = ev->error ?: -EIO;
		return;
	}
	errno = 0;
	unsigned long long k = strtoull(ev->tag, &end, 10);
	if (errno || end == ev->tag || *end || k >= s->next) {
		fprintf(stderr, "xferbench_serve: a notification with tag '%s'\n", ev->tag);
		s->failed = -EPROTO;
		return;
	}
	struct req *r = &s->reqs[k];
	if (++r->notes == 2 * s->o->layers) {
		r->done_s = now_s(s);
		r->ends++;
	}
}

/* Frees the slots of finished requests, checking their bytes, oldest first. */
static int reap(struct serve *s)
{
	for (size_t k = 0; k < s->next; k++) {
		struct req *r = &s->reqs[k];
		if (r->off >= UINT64_MAX - 1 || r->ends < 2) /* not started, or reaped */
			continue;
		int err = r->err ?: check(s, k, k % 8 == 0 || k + 1 == s->n);
		pool_put(s, r->off, r->bytes);
		if (s->o->windows)
			s->busy[r->h]--;
		r->off = UINT64_MAX - 1; /* done */
		if (err)
			return err;
	}
	while (s->done < s->next && s->reqs[s->done].off == UINT64_MAX - 1)
		s->done++;
	return 0;
}

static int pump(struct serve *s, int timeout_ms)
{
	struct pollfd pfd[2] = { { xfer_get_fd(s->pc), POLLIN, 0 },
				 { xfer_get_fd(s->ac), POLLIN, 0 } };
	int rc;

	if (poll(pfd, 2, timeout_ms) < 0 && errno != EINTR)
		return -errno;
	if ((rc = xfer_dispatch(s->pc)) < 0 || (rc = xfer_dispatch(s->ac)) < 0)
		return bench_fail(NULL, "xfer_dispatch", rc);
	return s->failed ?: reap(s);
}

static int run(struct serve *s)
{
	int err = 0;

	s->t0 = bench_now_ns();
	while (!err && s->done < s->n) {
		double t = now_s(s);
		if (s->next < s->n && s->reqs[s->next].arrive_s <= t) {
			struct req *r = &s->reqs[s->next];
			r->off = pool_get(s, r->bytes);
			if (r->off != UINT64_MAX) {
				if (t - r->arrive_s > 0.001) { /* waited for room or for a call */
					s->pool_waits++;
					s->pool_wait_s += t - r->arrive_s;
				}
				s->next++; /* before submit(): its events may come during the calls */
				err = submit(s, s->next - 1);
				continue;
			}
			err = pump(s, 1); /* the pools are full: wait for a slot */
			continue;
		}
		double wait = s->next < s->n ? s->reqs[s->next].arrive_s - t : 1.0;
		err = pump(s, wait > 1.0 ? 1000 : (int)(wait * 1000));
		if (now_s(s) > s->o->seconds + 600) {
			fprintf(stderr,
				"xferbench_serve: requests still open 600 s after the last\n");
			err = -ETIMEDOUT;
		}
	}
	return err;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_double);
	size_t i = (size_t)(p / 100 * (double)n);
	return v[i < n ? i : n - 1];
}

static void report(struct serve *s)
{
	size_t n = s->n;
	double *lat = report_calloc(n, sizeof(double)), *ps = report_calloc(n, sizeof(double));
	double *fin = report_calloc(n, sizeof(double)), *sz = report_calloc(n, sizeof(double));
	double *ff = report_calloc(n, sizeof(double)), *fi = report_calloc(n, sizeof(double));
	uint64_t bytes = 0;

	simulate_shared(s->reqs, n, s->o->link_Bps, fin);
	simulate_fifo(s->reqs, n, s->o->link_Bps, ff);
	for (size_t k = 0; k < n; k++) {
		const struct req *r = &s->reqs[k];
		lat[k] = r->done_s - r->arrive_s;
		ps[k] = fin[k] - r->arrive_s;
		fi[k] = ff[k] - r->arrive_s;
		sz[k] = r->size_s;
		bytes += r->bytes;
		if (s->trace)
			fprintf(s->trace, "%zu %.3f %.1f %.3f %.3f %.3f %d\n", k, r->arrive_s * 1e3,
				(double)r->bytes / (1 << 20), lat[k] * 1e3, ps[k] * 1e3,
				fi[k] * 1e3, s->o->windows ? r->h : -1);
	}
	double l50 = pct(lat, n, 50), l99 = pct(lat, n, 99), p50 = pct(ps, n, 50),
	       p99 = pct(ps, n, 99), s50 = pct(sz, n, 50), s99 = pct(sz, n, 99),
	       f50 = pct(fi, n, 50), f99 = pct(fi, n, 99);
	double offered = bytes / s->o->seconds / s->o->link_Bps;
	const char *model = s->o->windows ? "windows" : "pairing";
	if (s->o->json) {
		printf("{\"model\":\"%s\",\"requests\":%zu,\"offered_load\":%.3f,"
		       "\"link_GBps\":%.3f,\"ms_p50\":%.2f,\"ms_p99\":%.2f,\"shared_ms_p50\":%.2f,"
		       "\"shared_ms_p99\":%.2f,\"size_ms_p50\":%.2f,\"size_ms_p99\":%.2f,"
		       "\"mib_p50\":%.1f,\"mib_p99\":%.1f,\"pool_waits\":%zu,\"pool_wait_ms\":%.1f,"
		       "\"fifo_ms_p50\":%.2f,\"fifo_ms_p99\":%.2f,\"handles\":%d}\n",
		       model, n, offered, s->o->link_Bps / 1e9, l50 * 1e3, l99 * 1e3, p50 * 1e3,
		       p99 * 1e3, s50 * 1e3, s99 * 1e3, s50 * s->o->link_Bps / (1 << 20),
		       s99 * s->o->link_Bps / (1 << 20), s->pool_waits, s->pool_wait_s * 1e3,
		       f50 * 1e3, f99 * 1e3, s->o->windows ? s->o->handles : 0);
	} else {
		printf("%zu requests, offered load %.2f of %.3f GB/s; ms p50 / p99:\n", n, offered,
		       s->o->link_Bps / 1e9);
		printf("  xferd %-13s %9.1f %9.1f\n", model, l50 * 1e3, l99 * 1e3);
		printf("  shared link (sim.)  %9.1f %9.1f\n", p50 * 1e3, p99 * 1e3);
		printf("  one at a time (sim.)%9.1f %9.1f\n", f50 * 1e3, f99 * 1e3);
		printf("  bytes / link        %9.1f %9.1f\n", s50 * 1e3, s99 * 1e3);
		printf("  p99 / shared p99: %.2fx (target <= 1.2x)\n", l99 / p99);
		printf("  %zu requests waited for room in the pools, %.1f ms in all\n",
		       s->pool_waits, s->pool_wait_s * 1e3);
	}
	free(lat);
	free(ps);
	free(fin);
	free(sz);
	free(ff);
	free(fi);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xferbench_serve --passive DECODE_SOCKET --active PREFILL_SOCKET "
		"--link-Bps BYTES_PER_S [options]\n"
		"  --load F           offered load, fraction of the link (default 0.6)\n"
		"  --seconds S        arrivals during S seconds (default 60)\n"
		"  --layers N         layers of the model (default 32: 7B-class)\n"
		"  --kv-bytes N       bytes of K (or V) per token per layer (default 8192: hidden 4096,"
		" fp16)\n"
		"  --median-tokens N  median prompt length (default 128)\n"
		"  --sigma F          log-normal sigma of prompt lengths (default 1.2)\n"
		"  --max-tokens N     prompt lengths cut here (default 2048)\n"
		"  --pool SIZE        buffer on each node (default 3G)\n"
		"  --seed N           (default 1)\n"
		"  --model M          pairing (a writable + write per request, default) or windows\n"
		"                     (one window opened once; a batch of tagged puts per request)\n"
		"  --handles N        windows: the prefill side opens the window N times (1..64,"
		" default 1)\n"
		"                     and puts each request on an idle handle\n"
		"  --json             one JSON line\n"
		"  --trace FILE       a line per request: number, arrival ms, MiB, latency ms, the\n"
		"                     shared link's and one-at-a-time latency ms, handle\n");
}

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
	case 'B':
		o->link_Bps = atof(arg);
		break;
	case 'l':
		o->load = atof(arg);
		break;
	case 's':
		o->seconds = atof(arg);
		break;
	case 'L':
		o->layers = atoi(arg);
		break;
	case 'k':
		o->kv_bytes = strtoull(arg, NULL, 10);
		break;
	case 'm':
		o->median_tokens = strtoull(arg, NULL, 10);
		break;
	case 'g':
		o->sigma = atof(arg);
		break;
	case 'M':
		o->max_tokens = strtoull(arg, NULL, 10);
		break;
	case 'P':
		return bench_parse_size(arg, &o->pool) ? 2 : 0;
	case 'S':
		o->seed = strtoull(arg, NULL, 10);
		break;
	case 'j':
		o->json = true;
		break;
	case 'H':
		o->handles = atoi(arg);
		break;
	case 'T':
		o->trace = arg;
		break;
	case 'o':
		if (strcmp(arg, "windows") && strcmp(arg, "pairing")) {
			fprintf(stderr,
				"xferbench_serve: --model is pairing or windows, not '%s'\n", arg);
			return -EINVAL;
		}
		o->windows = !strcmp(arg, "windows");
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/*
 * Windows: the decode side exposes its whole buffer for writing; the prefill side opens it
 * --handles times (one opener, or up to 64).
 */
static int window_setup(struct serve *s)
{
	int n = s->o->handles, err;
	char *md = NULL;

	s->handle = calloc((size_t)n, sizeof(*s->handle));
	s->busy = calloc((size_t)n, sizeof(*s->busy));
	if (!s->handle || !s->busy)
		return -ENOMEM;
	err = xfer_window_create(s->pc, s->pb.region, 0, 0, XFER_ACCESS_WRITE,
				 n == 1 ? XFER_WINDOW_ONE_OPENER : 0, &s->window, &md);
	if (err)
		return bench_fail(s->pc, "xfer_window_create", err);
	for (int i = 0; i < n && !err; i++)
		err = xfer_window_open(s->ac, md, &s->handle[i], NULL, NULL);
	free(md);
	if (err)
		return bench_fail(s->ac, "xfer_window_open", err);
	return 0;
}

static void window_teardown(struct serve *s)
{
	for (int i = 0; s->handle && i < s->o->handles; i++)
		if (s->handle[i])
			xfer_window_close(s->ac, s->handle[i]);
	if (s->window)
		xfer_window_close(s->pc, s->window);
	free(s->handle);
	free(s->busy);
}

static void set_callbacks(struct serve *s, bool on)
{
	void *arg = on ? s : NULL;

	xfer_set_event_cb(s->pc, on ? event_cb : NULL, arg);
	xfer_set_event_cb(s->ac, on ? event_cb : NULL, arg);
	xfer_set_window_cb(s->pc, on ? window_cb : NULL, arg);
	xfer_set_window_cb(s->ac, on ? window_cb : NULL, arg);
	xfer_set_batch_cb(s->ac, on ? batch_cb : NULL, arg);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "passive", required_argument, NULL, 'p' },
		{ "active", required_argument, NULL, 'a' },
		{ "link-Bps", required_argument, NULL, 'B' },
		{ "load", required_argument, NULL, 'l' },
		{ "seconds", required_argument, NULL, 's' },
		{ "layers", required_argument, NULL, 'L' },
		{ "kv-bytes", required_argument, NULL, 'k' },
		{ "median-tokens", required_argument, NULL, 'm' },
		{ "sigma", required_argument, NULL, 'g' },
		{ "max-tokens", required_argument, NULL, 'M' },
		{ "pool", required_argument, NULL, 'P' },
		{ "seed", required_argument, NULL, 'S' },
		{ "json", no_argument, NULL, 'j' },
		{ "handles", required_argument, NULL, 'H' },
		{ "trace", required_argument, NULL, 'T' },
		{ "model", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .load = 0.6,
			  .seconds = 60,
			  .layers = 32,
			  .kv_bytes = 8192,
			  .median_tokens = 128,
			  .sigma = 1.2,
			  .max_tokens = 2048,
			  .pool = 3 * BENCH_GIB,
			  .seed = 1,
			  .handles = 1 };
	struct serve s = { .o = &o, .submitting = SIZE_MAX };
	int err;

	bench_prog = "xferbench_serve";
	err = bench_getopt(argc, argv, "h", lo, set_opt, &o, usage);
	if (err)
		return err;
	uint64_t largest = o.max_tokens * 2 * (uint64_t)o.layers * o.kv_bytes;
	if (!o.passive || !o.active || o.link_Bps <= 0 || o.load <= 0 || o.seconds <= 0 ||
	    o.layers < 1 || o.layers > MAX_LAYERS || o.kv_bytes < 8 || o.median_tokens < 1 ||
	    o.max_tokens < 1 || o.handles < 1 || o.handles > 64 || o.pool < largest ||
	    o.pool / UNIT == 0) {
		usage(stderr);
		return 2;
	}
	s.n = make_requests(&o, &s.reqs);
	s.units = (size_t)(o.pool / UNIT);
	s.used = calloc(s.units, 1);
	if (!s.n || !s.used) {
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): main() returns, the exit frees it */
		fprintf(stderr, "xferbench_serve: no requests (or out of memory)\n");
		return 1;
	}
	if (bench_connect(o.passive, "xferbench_serve-decode", NULL, &s.pc) ||
	    bench_connect(o.active, "xferbench_serve-prefill", NULL, &s.ac))
		return 1;
	err = bench_buf_create(s.pc, o.pool, "decode-kv", &s.pb);
	if (!err)
		err = bench_buf_create(s.ac, o.pool, "prefill-kv", &s.ab);
	if (!err && o.windows)
		err = window_setup(&s);
	if (!err) {
		bench_pattern_fill(s.ab.buf.addr, o.pool, o.seed);
		set_callbacks(&s, true);
		err = run(&s);
		set_callbacks(&s, false);
	}
	if (!err && o.trace && !(s.trace = fopen(o.trace, "w"))) {
		err = -errno;
		fprintf(stderr, "xferbench_serve: %s: %s\n", o.trace, strerror(errno));
	}
	if (!err)
		report(&s);
	if (s.trace)
		fclose(s.trace);
	window_teardown(&s);
	bench_buf_destroy(s.ac, &s.ab, 1);
	bench_buf_destroy(s.pc, &s.pb, 1);
	xfer_close(s.ac);
	xfer_close(s.pc);
	free(s.reqs);
	free(s.used);
	if (err)
		fprintf(stderr, "xferbench_serve: failed: %s\n", xfer_strerror(err));
	return err ? 1 : 0;
}
