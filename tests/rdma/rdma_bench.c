/* SPDX-License-Identifier: MIT */
/*
 * rdma_bench: xferd cross-node throughput, as applications see it, for scripts/bench-rdma.sh.
 *
 *   rdma_bench [-d DEPTH] [-m MARGIN] PASSIVE_SOCKET ACTIVE_SOCKET SECONDS read|write|both SIZE...
 *
 * One transfer = readable (or writable) on PASSIVE_SOCKET's daemon, read (or write) on
 * ACTIVE_SOCKET's daemon, until both are COMPLETE: the full cost of a transfer through the
 * public API. Its end is taken from the events the daemons push (as an application on an event
 * loop does), not asked for with op.wait, and both operations are made with
 * XFER_OP_RELEASE_ON_END, so no release round trip follows. DEPTH workers (threads, default 1)
 * each hold a client on both daemons and their own registered buffers, and run transfers one
 * after another, so DEPTH transfers are in flight, as when several requests of an inference
 * engine move KV blocks at once. With DEPTH 1, every transfer pays its control round trips
 * (create, claim, DONE, DONE_ACK, wake-ups) alone; with more, they overlap the others' data.
 *
 * For each kind (read, then write, or the one named) and SIZE (bytes), every worker runs
 * transfers for about SECONDS (at least one each), and one line is printed:
 *   xferd read SIZE depth D iters N seconds S MiB/s X transport T
 * N counts the transfers completed; MiB/s is the rate within the window [MARGIN, SECONDS -
 * MARGIN] after the start (-m MARGIN, default 0; S is the window's length), 2^20 bytes per
 * MiB as perftest's MB/sec. Each transfer's bytes are spread evenly over its own life (its
 * create call to its last end event), so a transfer that straddles an edge of the window counts
 * in part: counting whole transfers would make the figure jump with where the window's edges
 * fall among their ends, which come in bursts when DEPTH large transfers share the wire. The
 * margins leave out the start (every worker claiming at once) and the drain after SECONDS
 * (fewer than DEPTH still in flight), as perftest's -D mode leaves out the first and last
 * duration/4 seconds of its own run.
 * With -f DIR the source side's bytes are a file region instead (a file in DIR, the page cache:
 * file -> remote memory through the daemons' RDMA staging buffers, PROTOCOL.md §10.5.1), and
 * the lines say "read-file" / "write-file".
 * Each worker's destination is compared with its source after each size, outside the timed
 * window. Exit 0 when every transfer completed and every byte matched.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xferclient.h"

#define MAX_DEPTH 64

struct side {
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t region;
	uint64_t fregion; /* -f, the source side: a file region holding the buffer's bytes */
};

static const char *file_dir; /* -f DIR: sources are files there (the page cache), not memory */

/* What every worker shares: the run's parameters and the start line. */
struct run {
	int read;   /* 1: readable + read, 0: writable + write */
	size_t len; /* bytes per transfer */
	double secs;
	double margin; /* -m: seconds left out at either end */
	pthread_barrier_t start;
};

/* When each of a worker's transfers began and ended (now()), in an array grown as needed. */
struct span {
	double begin, end;
};

struct spans {
	struct span *v;
	size_t n, cap;
};

/* What the events said about one operation. */
struct awaited {
	uint64_t op;
	int ended;
	struct xfer_op_info info;
};

struct worker {
	pthread_t thread;
	struct run *run;
	struct side passive, active;
	struct awaited await_passive, await_active; /* the transfer under way */
	long done;				    /* transfers completed in the last run */
	struct spans spans;			    /* and when each of them ran */
	int err;
	char transport[16]; /* of the last active operation */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int side_open(const char *sock, const char *name, size_t len, struct side *s)
{
	int rc = xfer_connect(sock, name, &s->c);

	if (rc == 0)
		rc = xfer_buf_alloc(len, &s->buf);
	if (rc == 0)
		rc = xfer_region_register(s->c, s->buf.fd, 0, 0, name, &s->region);
	if (rc < 0)
		fprintf(stderr, "rdma_bench: %s (%s): %s %s\n", name, sock, xfer_strerror(rc),
			s->c ? xfer_last_error(s->c) : "");
	return rc;
}

static void side_close(struct side *s)
{
	xfer_close(s->c);
	xfer_buf_free(&s->buf);
}

static int is_end(enum xfer_state st)
{
	return st == XFER_COMPLETE || st == XFER_CANCELLED || st == XFER_ERRORED;
}

/* Event callback of a worker's two clients: notes the end of the operation it waits for. */
static void on_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct worker *w = arg;
	struct awaited *a = c == w->active.c ? &w->await_active : &w->await_passive;

	if (info->op == a->op && is_end(info->state)) {
		a->info = *info;
		a->ended = 1;
	}
}

/* Delivers pushed events until both operations have ended; 0, or -1 after 150 s. */
static int await_both(struct worker *w)
{
	struct pollfd pfd[2] = { { xfer_get_fd(w->passive.c), POLLIN, 0 },
				 { xfer_get_fd(w->active.c), POLLIN, 0 } };
	double deadline = now() + 150;

	while (!(w->await_passive.ended && w->await_active.ended)) {
		if (now() > deadline) {
			fprintf(stderr, "rdma_bench: no end within 150 s\n");
			return -1;
		}
		if (poll(pfd, 2, 1000) < 0)
			continue;
		if ((pfd[0].revents && xfer_dispatch(w->passive.c) < 0) ||
		    (pfd[1].revents && xfer_dispatch(w->active.c) < 0)) {
			fprintf(stderr, "rdma_bench: a daemon went away\n");
			return -1;
		}
	}
	return 0;
}

/* One transfer of run->len bytes; 0, or -1 with a message on stderr. */
static int transfer(struct worker *w)
{
	const struct run *r = w->run;
	struct xfer_desc pd = { w->passive.fregion ?: w->passive.region, 0, r->len };
	struct xfer_desc ad = { w->active.fregion ?: w->active.region, 0, r->len };
	struct xfer_op_opts opts = { .timeout_ms = 120000, .flags = XFER_OP_RELEASE_ON_END };
	struct xfer_client *pc = w->passive.c, *ac = w->active.c;
	const struct xfer_op_info *pi = &w->await_passive.info, *ai = &w->await_active.info;
	uint64_t *pop = &w->await_passive.op, *aop = &w->await_active.op;
	char *meta = NULL;
	int rc;

	/* An op's events may arrive before its create call returns (they are delivered after
	 * its results are stored): reset first, and let the calls write the ids in place. */
	w->await_passive = (struct awaited){ .op = UINT64_MAX };
	w->await_active = (struct awaited){ .op = UINT64_MAX };
	rc = r->read ? xfer_readable(pc, &pd, 1, &opts, pop, &meta) :
		       xfer_writable(pc, &pd, 1, &opts, pop, &meta);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: passive op: %s (%s)\n", xfer_strerror(rc),
			xfer_last_error(pc));
		return -1;
	}
	rc = r->read ? xfer_read(ac, meta, &ad, 1, &opts, aop) :
		       xfer_write(ac, meta, &ad, 1, &opts, aop);
	free(meta);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: active op: %s (%s)\n", xfer_strerror(rc),
			xfer_last_error(ac));
		xfer_release(pc, *pop);
		return -1;
	}
	if (await_both(w) < 0)
		return -1; /* (the operations end by their deadline and are forgotten then) */
	if (ai->state != XFER_COMPLETE || pi->state != XFER_COMPLETE) {
		fprintf(stderr, "rdma_bench: %s of %zu bytes: active %s (%s), passive %s (%s)\n",
			r->read ? "read" : "write", r->len, xfer_state_name(ai->state), ai->cause,
			xfer_state_name(pi->state), pi->cause);
		return -1;
	}
	snprintf(w->transport, sizeof(w->transport), "%s", ai->transport);
	return 0;
}

static int spans_add(struct spans *s, double begin, double end)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 1024;
		struct span *v = realloc(s->v, cap * sizeof(*v));
		if (!v) {
			fprintf(stderr, "rdma_bench: out of memory\n");
			return -1;
		}
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (struct span){ begin, end };
	return 0;
}

/* A worker's run: transfers until the time is up, then a check of every byte. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const struct run *r = w->run;
	struct side *src = r->read ? &w->passive : &w->active;
	struct side *dst = r->read ? &w->active : &w->passive;
	double end, begin;

	w->done = 0;
	w->spans.n = 0;
	memset(dst->buf.addr, 0, r->len);
	pthread_barrier_wait(&w->run->start);
	end = now() + r->secs;
	do {
		begin = now();
		w->err = transfer(w) ?: spans_add(&w->spans, begin, now());
		w->done += !w->err;
	} while (!w->err && now() < end && w->done < 100000);
	if (!w->err && memcmp(src->buf.addr, dst->buf.addr, r->len) != 0) {
		fprintf(stderr, "rdma_bench: %s of %zu bytes: destination differs\n",
			r->read ? "read" : "write", r->len);
		w->err = -1;
	}
	return NULL;
}

/* Bytes moved within [@from, @to]: each transfer's bytes spread evenly over its own span. */
static double bytes_within(const struct worker *ws, int depth, size_t len, double from, double to)
{
	double bytes = 0;

	for (int i = 0; i < depth; i++)
		for (size_t j = 0; j < ws[i].spans.n; j++) {
			const struct span *sp = &ws[i].spans.v[j];
			double lo = sp->begin > from ? sp->begin : from;
			double hi = sp->end < to ? sp->end : to;
			if (hi > lo)
				bytes += (double)len * (hi - lo) / (sp->end - sp->begin);
		}
	return bytes;
}

/* Runs @depth workers once over @r; prints the line. Returns 0 or -1. */
static int run_size(struct worker *ws, int depth, struct run *r)
{
	long total = 0;
	int err = 0, started = 0;
	double t0;

	pthread_barrier_init(&r->start, NULL, (unsigned)depth + 1);
	for (int i = 0; i < depth; i++) {
		ws[i].run = r;
		if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]) != 0) {
			/* the barrier would never open: say so and stop the whole program */
			fprintf(stderr, "rdma_bench: pthread_create failed\n");
			exit(1);
		}
		started++;
	}
	pthread_barrier_wait(&r->start);
	t0 = now();
	for (int i = 0; i < started; i++) {
		pthread_join(ws[i].thread, NULL);
		total += ws[i].done;
		err |= ws[i].err;
	}
	pthread_barrier_destroy(&r->start);
	if (err)
		return -1;
	double window = r->secs - 2 * r->margin;
	double bytes = bytes_within(ws, depth, r->len, t0 + r->margin, t0 + r->secs - r->margin);
	printf("xferd %s%s %zu depth %d iters %ld seconds %.3f MiB/s %.2f transport %s\n",
	       r->read ? "read" : "write", file_dir ? "-file" : "", r->len, depth, total, window,
	       bytes / window / 1048576.0, ws[0].transport);
	fflush(stdout);
	return 0;
}

static void fill(struct side *s, size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		((uint8_t *)s->buf.addr)[i] = (uint8_t)(i * 131 + (size_t)seed * 7 + 1);
}

/*
 * -f: @s's bytes (@len, filled) also as a file in file_dir, registered as a file region that
 * the source side's transfers use, read once first so that it is in the page cache.
 */
static int file_source(struct side *s, size_t len, int i)
{
	char path[512];
	int fd, rc = -EIO;

	snprintf(path, sizeof(path), "%s/rdma_bench.%d.src", file_dir, i);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0 && pwrite(fd, s->buf.addr, len, 0) == (ssize_t)len) {
		int ro = open(path, O_RDONLY | O_CLOEXEC);
		rc = ro < 0 ? -errno :
			      xfer_region_register_file(s->c, ro, 0, len, 0, "bench-file",
							&s->fregion);
		if (ro >= 0)
			close(ro);
	}
	if (fd >= 0)
		close(fd);
	unlink(path); /* (the daemon holds its own descriptor) */
	if (rc < 0)
		fprintf(stderr, "rdma_bench: file source %s: %s %s\n", path, xfer_strerror(rc),
			xfer_last_error(s->c));
	return rc;
}

static void file_source_drop(struct side *s)
{
	if (s->fregion)
		xfer_region_deregister(s->c, s->fregion, 1);
	s->fregion = 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: rdma_bench [-d DEPTH] [-m MARGIN] [-f DIR] PASSIVE_SOCKET ACTIVE_SOCKET SECONDS "
		"read|write|both SIZE...\n");
}

int main(int argc, char **argv)
{
	static struct worker ws[MAX_DEPTH];
	struct run r = { 0 };
	const char *kind;
	size_t max = 0;
	int depth = 1, opt, err = 0;

	while ((opt = getopt(argc, argv, "d:m:f:")) != -1) {
		if (opt == 'd' && (depth = atoi(optarg)) >= 1 && depth <= MAX_DEPTH)
			continue;
		if (opt == 'f') {
			file_dir = optarg;
			continue;
		}
		if (opt == 'm' && (r.margin = atof(optarg)) >= 0)
			continue;
		usage();
		return 2;
	}
	argv += optind;
	argc -= optind;
	if (argc < 5 ||
	    (strcmp(argv[3], "read") && strcmp(argv[3], "write") && strcmp(argv[3], "both"))) {
		usage();
		return 2;
	}
	r.secs = atof(argv[2]);
	if (!(r.secs > 2 * r.margin)) {
		fprintf(stderr, "rdma_bench: SECONDS must be more than twice MARGIN\n");
		return 2;
	}
	kind = argv[3];
	for (int i = 4; i < argc; i++) {
		size_t s = strtoull(argv[i], NULL, 0);
		if (s == 0) {
			fprintf(stderr, "rdma_bench: bad size '%s'\n", argv[i]);
			return 2;
		}
		max = s > max ? s : max;
	}
	for (int i = 0; i < depth && !err; i++) {
		err = side_open(argv[0], "rdma_bench-passive", max, &ws[i].passive) ||
		      side_open(argv[1], "rdma_bench-active", max, &ws[i].active);
		if (!err) {
			xfer_set_event_cb(ws[i].passive.c, on_event, &ws[i]);
			xfer_set_event_cb(ws[i].active.c, on_event, &ws[i]);
		}
	}
	for (r.read = 1; r.read >= 0 && !err; r.read--) {
		if (strcmp(kind, "both") && strcmp(kind, r.read ? "read" : "write"))
			continue;
		for (int i = 0; i < depth && !err; i++) {
			struct side *src = r.read ? &ws[i].passive : &ws[i].active;
			fill(src, max, r.read + i);
			file_source_drop(&ws[i].passive);
			file_source_drop(&ws[i].active);
			err = file_dir && file_source(src, max, i) < 0;
		}
		for (int k = 4; k < argc && !err; k++) {
			r.len = strtoull(argv[k], NULL, 0);
			err = run_size(ws, depth, &r) != 0;
		}
	}
	for (int i = 0; i < depth; i++) {
		side_close(&ws[i].active);
		side_close(&ws[i].passive);
		free(ws[i].spans.v);
	}
	return err;
}
