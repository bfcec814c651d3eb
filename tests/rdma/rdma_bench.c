/* SPDX-License-Identifier: MIT */
/*
 * rdma_bench: xferd cross-node throughput, as an application sees it, for scripts/bench-rdma.sh.
 * One process holds a client on each daemon; buffers are allocated and registered once, before
 * timing. One transfer = readable (or writable) on PASSIVE_SOCKET's daemon, read (or write) on
 * ACTIVE_SOCKET's daemon, wait until both are COMPLETE, release both: the full cost of a
 * transfer through the public API. Completion is taken from the events the daemons push (poll on
 * both clients' fds), as an application on an event loop does, not asked for with op.wait.
 *
 *   rdma_bench [-d DEPTH] PASSIVE_SOCKET ACTIVE_SOCKET SECONDS read|write|both SIZE...
 *
 * DEPTH transfers (default 1) are kept in flight, each on its own slice of the buffers, the way
 * an inference engine issues a batch of KV-cache blocks: a new one starts as soon as the oldest
 * has ended. With DEPTH 1 every transfer pays its control round trips (create, claim, DONE,
 * DONE_ACK, wake-ups) alone; with more, they overlap the data of the others.
 *
 * For each kind (read, then write, or the one named) and SIZE (bytes), runs transfers for about
 * SECONDS (at least 3 transfers) and prints one line:
 *   xferd read SIZE depth D iters N seconds S MiB/s X transport T
 * MiB/s = bytes moved / wall time / 2^20 (perftest's MB/sec counts the same way). Every
 * destination slice is compared with its source after each size. Exit 0 when everything
 * completed.
 */
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xferclient.h"

#define MAX_DEPTH 64

struct side {
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t region;
};

/* One transfer in flight: its two operations and what their events said. */
struct slot {
	uint64_t passive_op, active_op;
	struct xfer_op_info passive_end, active_end; /* valid once the *_ended flag is set */
	int passive_ended, active_ended;
	int busy;
};

struct bench {
	struct side passive, active;
	int read;		/* 1: readable + read, 0: writable + write */
	size_t len;		/* bytes per transfer */
	struct slot slots[MAX_DEPTH];
	int depth;		/* slots in use */
	char transport[16];	/* of the last active operation that completed */
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

static int is_terminal(enum xfer_state st)
{
	return st == XFER_COMPLETE || st == XFER_CANCELLED || st == XFER_ERRORED;
}

/* Event callback of both clients: records the final state in the slot that owns the op. */
static void on_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct bench *b = arg;
	int active = c == b->active.c;

	if (!is_terminal(info->state))
		return;
	for (int k = 0; k < b->depth; k++) {
		struct slot *s = &b->slots[k];

		if (!s->busy)
			continue;
		if (active && s->active_op == info->op) {
			s->active_end = *info;
			s->active_ended = 1;
		} else if (!active && s->passive_op == info->op) {
			s->passive_end = *info;
			s->passive_ended = 1;
		}
	}
}

/* Starts the transfer of slot @k (bytes [k * len, (k + 1) * len) on both sides). */
static int slot_start(struct bench *b, struct slot *s, size_t k)
{
	struct xfer_desc pd = { b->passive.region, k * b->len, b->len };
	struct xfer_desc ad = { b->active.region, k * b->len, b->len };
	struct xfer_op_opts opts = { .timeout_ms = 120000 };
	char *meta = NULL;
	int rc;

	/* Set before the calls: an op's events may be delivered before they return. */
	*s = (struct slot){ .busy = 1, .passive_op = UINT64_MAX, .active_op = UINT64_MAX };
	rc = b->read ? xfer_readable(b->passive.c, &pd, 1, &opts, &s->passive_op, &meta) :
		       xfer_writable(b->passive.c, &pd, 1, &opts, &s->passive_op, &meta);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: passive op: %s (%s)\n", xfer_strerror(rc),
			xfer_last_error(b->passive.c));
		s->busy = 0;
		return -1;
	}
	rc = b->read ? xfer_read(b->active.c, meta, &ad, 1, &opts, &s->active_op) :
		       xfer_write(b->active.c, meta, &ad, 1, &opts, &s->active_op);
	free(meta);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: active op: %s (%s)\n", xfer_strerror(rc),
			xfer_last_error(b->active.c));
		xfer_release(b->passive.c, s->passive_op);
		s->busy = 0;
		return -1;
	}
	return 0;
}

/* Delivers pushed events until both operations of @s have ended; 0, or -1 after 150 s. */
static int slot_await(struct bench *b, struct slot *s)
{
	struct pollfd pfd[2] = { { xfer_get_fd(b->passive.c), POLLIN, 0 },
				 { xfer_get_fd(b->active.c), POLLIN, 0 } };
	double deadline = now() + 150;

	while (!(s->passive_ended && s->active_ended)) {
		if (now() > deadline) {
			fprintf(stderr, "rdma_bench: no end after 150 s\n");
			return -1;
		}
		if (poll(pfd, 2, 1000) < 0)
			continue;
		if ((pfd[0].revents && xfer_dispatch(b->passive.c) < 0) ||
		    (pfd[1].revents && xfer_dispatch(b->active.c) < 0)) {
			fprintf(stderr, "rdma_bench: a daemon went away\n");
			return -1;
		}
	}
	return 0;
}

/* Waits until both operations of @s have ended, releases them; 0 if both COMPLETE. */
static int slot_finish(struct bench *b, struct slot *s)
{
	const struct xfer_op_info *ai = &s->active_end, *pi = &s->passive_end;
	int rc = slot_await(b, s);

	xfer_release(b->active.c, s->active_op);
	xfer_release(b->passive.c, s->passive_op);
	s->busy = 0;
	if (rc < 0)
		return -1;
	if (ai->state != XFER_COMPLETE || pi->state != XFER_COMPLETE) {
		fprintf(stderr, "rdma_bench: %s of %zu bytes: active %s (%s), passive %s (%s)\n",
			b->read ? "read" : "write", b->len, xfer_state_name(ai->state), ai->cause,
			xfer_state_name(pi->state), pi->cause);
		return -1;
	}
	snprintf(b->transport, sizeof(b->transport), "%s", ai->transport);
	return 0;
}

/*
 * Keeps @depth transfers in flight until @secs have passed (and at least 3 have ended), then
 * lets the last ones end. Returns the number of transfers that ended, or -1; *elapsed gets the
 * wall time from the first start to the last end.
 */
static long run_pipeline(struct bench *b, int depth, double secs, double *elapsed)
{
	struct slot *slots = b->slots;
	long done = 0;
	int err = 0, k;
	double t0 = now();

	b->depth = depth;
	for (k = 0; k < depth && !err; k++)
		err = slot_start(b, &slots[k], (size_t)k);
	for (k = 0; !err; k = (k + 1) % depth) {
		if (!slots[k].busy)
			break; /* the oldest slot is idle: every slot has drained */
		err = slot_finish(b, &slots[k]);
		if (err)
			break;
		done++;
		if ((now() - t0 < secs || done < 3) && done < 100000)
			err = slot_start(b, &slots[k], (size_t)k);
	}
	*elapsed = now() - t0;
	for (k = 0; k < depth; k++) /* after an error: end what is still in flight */
		if (slots[k].busy)
			slot_finish(b, &slots[k]);
	return err ? -1 : done;
}

/* One size: fill the destination with zeros, warm up, time, check every byte. */
static int bench_size(struct bench *b, int depth, double secs)
{
	struct side *src = b->read ? &b->passive : &b->active;
	struct side *dst = b->read ? &b->active : &b->passive;
	size_t span = b->len * (size_t)depth;
	double t;
	long n;

	memset(dst->buf.addr, 0, span);
	if (run_pipeline(b, 1, 0, &t) < 0) /* warm-up: connection, caches; not timed */
		return -1;
	n = run_pipeline(b, depth, secs, &t);
	if (n < 0)
		return -1;
	if (memcmp(src->buf.addr, dst->buf.addr, span) != 0) {
		fprintf(stderr, "rdma_bench: %s of %zu bytes: destination differs\n",
			b->read ? "read" : "write", b->len);
		return -1;
	}
	printf("xferd %s %zu depth %d iters %ld seconds %.3f MiB/s %.2f transport %s\n",
	       b->read ? "read" : "write", b->len, depth, n, t,
	       (double)b->len * (double)n / t / 1048576.0, b->transport);
	fflush(stdout);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: rdma_bench [-d DEPTH] PASSIVE_SOCKET ACTIVE_SOCKET SECONDS "
			"read|write|both SIZE...\n");
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };
	const char *kind;
	size_t max = 0;
	int depth = 1, opt, err = 0;
	double secs;

	while ((opt = getopt(argc, argv, "d:")) != -1) {
		if (opt != 'd' || (depth = atoi(optarg)) < 1 || depth > MAX_DEPTH) {
			usage();
			return 2;
		}
	}
	argv += optind;
	argc -= optind;
	if (argc < 5 || (strcmp(argv[3], "read") && strcmp(argv[3], "write") &&
			 strcmp(argv[3], "both"))) {
		usage();
		return 2;
	}
	secs = atof(argv[2]);
	kind = argv[3];
	for (int i = 4; i < argc; i++) {
		size_t s = strtoull(argv[i], NULL, 0);
		if (s == 0) {
			fprintf(stderr, "rdma_bench: bad size '%s'\n", argv[i]);
			return 2;
		}
		max = s > max ? s : max;
	}
	if (side_open(argv[0], "rdma_bench-passive", max * (size_t)depth, &b.passive) ||
	    side_open(argv[1], "rdma_bench-active", max * (size_t)depth, &b.active))
		return 1;
	xfer_set_event_cb(b.passive.c, on_event, &b);
	xfer_set_event_cb(b.active.c, on_event, &b);
	for (b.read = 1; b.read >= 0 && !err; b.read--) {
		struct side *src = b.read ? &b.passive : &b.active;

		if (strcmp(kind, "both") && strcmp(kind, b.read ? "read" : "write"))
			continue;
		for (size_t i = 0; i < max * (size_t)depth; i++)
			((uint8_t *)src->buf.addr)[i] = (uint8_t)(i * 131 + (size_t)b.read * 7 + 1);
		for (int k = 4; k < argc && !err; k++) {
			b.len = strtoull(argv[k], NULL, 0);
			err = bench_size(&b, depth, secs) != 0;
		}
	}
	xfer_close(b.active.c);
	xfer_close(b.passive.c);
	xfer_buf_free(&b.active.buf);
	xfer_buf_free(&b.passive.buf);
	return err;
}
