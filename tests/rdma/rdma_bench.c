/* SPDX-License-Identifier: MIT */
/*
 * rdma_bench: xferd cross-node throughput, as an application sees it, for scripts/bench-rdma.sh.
 * One process holds a client on each daemon; buffers are allocated and registered once, before
 * timing. One timed operation = readable (or writable) on PASSIVE_SOCKET's daemon, read (or
 * write) on ACTIVE_SOCKET's daemon, wait until both are COMPLETE, release both: the full cost of
 * a transfer through the public API, one at a time.
 *
 *   rdma_bench PASSIVE_SOCKET ACTIVE_SOCKET SECONDS read|write|both SIZE...
 *
 * For each kind (read, then write, or the one named) and SIZE (bytes), runs transfers for about
 * SECONDS (at least 3) and prints one line:
 *   xferd read SIZE iters N seconds S MiB/s X transport T
 * MiB/s = bytes moved / wall time / 2^20 (perftest's MB/sec counts the same way). The
 * destination is compared with the source after each size. Exit 0 when everything completed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xferclient.h"

struct side {
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t region;
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

/* One transfer of @len bytes; 0, or -1 with a message on stderr. @tr gets the transport. */
static int one(struct side *p, struct side *a, int read, size_t len, char *tr, size_t trlen)
{
	struct xfer_desc pd = { p->region, 0, len }, ad = { a->region, 0, len };
	struct xfer_op_opts opts = { .timeout_ms = 120000 };
	struct xfer_op_info pi, ai;
	uint64_t pop, aop;
	char *meta = NULL;
	int rc;

	rc = read ? xfer_readable(p->c, &pd, 1, &opts, &pop, &meta) :
		    xfer_writable(p->c, &pd, 1, &opts, &pop, &meta);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: passive op: %s (%s)\n", xfer_strerror(rc),
			xfer_last_error(p->c));
		return -1;
	}
	rc = read ? xfer_read(a->c, meta, &ad, 1, &opts, &aop) :
		    xfer_write(a->c, meta, &ad, 1, &opts, &aop);
	free(meta);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: active op: %s (%s)\n", xfer_strerror(rc),
			xfer_last_error(a->c));
		xfer_release(p->c, pop);
		return -1;
	}
	rc = xfer_wait(a->c, aop, 150000, &ai);
	if (rc == 0)
		rc = xfer_wait(p->c, pop, 150000, &pi);
	xfer_release(a->c, aop);
	xfer_release(p->c, pop);
	if (rc < 0) {
		fprintf(stderr, "rdma_bench: wait: %s\n", xfer_strerror(rc));
		return -1;
	}
	if (ai.state != XFER_COMPLETE || pi.state != XFER_COMPLETE) {
		fprintf(stderr, "rdma_bench: %s of %zu bytes: active %s (%s), passive %s (%s)\n",
			read ? "read" : "write", len, xfer_state_name(ai.state), ai.cause,
			xfer_state_name(pi.state), pi.cause);
		return -1;
	}
	snprintf(tr, trlen, "%s", ai.transport);
	return 0;
}

int main(int argc, char **argv)
{
	struct side p = { 0 }, a = { 0 };
	size_t max = 0;
	double secs;
	int err = 0;

	if (argc < 6 || (strcmp(argv[4], "read") && strcmp(argv[4], "write") &&
			  strcmp(argv[4], "both"))) {
		fprintf(stderr, "usage: rdma_bench PASSIVE_SOCKET ACTIVE_SOCKET SECONDS "
				"read|write|both SIZE...\n");
		return 2;
	}
	secs = atof(argv[3]);
	for (int i = 5; i < argc; i++) {
		size_t s = strtoull(argv[i], NULL, 0);
		if (s == 0) {
			fprintf(stderr, "rdma_bench: bad size '%s'\n", argv[i]);
			return 2;
		}
		max = s > max ? s : max;
	}
	if (side_open(argv[1], "rdma_bench-passive", max, &p) ||
	    side_open(argv[2], "rdma_bench-active", max, &a))
		return 1;
	for (int read = 1; read >= 0 && !err; read--) {
		if (strcmp(argv[4], "both") && strcmp(argv[4], read ? "read" : "write"))
			continue;
		struct side *src = read ? &p : &a, *dst = read ? &a : &p;

		for (size_t i = 0; i < max; i++)
			((uint8_t *)src->buf.addr)[i] = (uint8_t)(i * 131 + (size_t)read * 7 + 1);
		for (int k = 5; k < argc && !err; k++) {
			size_t len = strtoull(argv[k], NULL, 0);
			char tr[16] = "";
			int iters = 0;
			double t0, t;

			memset(dst->buf.addr, 0, len);
			if (one(&p, &a, read, len, tr, sizeof(tr))) { /* warm-up, not timed */
				err = 1;
				break;
			}
			t0 = now();
			do {
				if (one(&p, &a, read, len, tr, sizeof(tr))) {
					err = 1;
					break;
				}
				iters++;
				t = now() - t0;
			} while (!err && (t < secs || iters < 3) && iters < 10000);
			if (err)
				break;
			if (memcmp(src->buf.addr, dst->buf.addr, len) != 0) {
				fprintf(stderr, "rdma_bench: %s of %zu bytes: destination differs\n",
					read ? "read" : "write", len);
				err = 1;
				break;
			}
			printf("xferd %s %zu iters %d seconds %.3f MiB/s %.2f transport %s\n",
			       read ? "read" : "write", len, iters, t,
			       (double)len * iters / t / 1048576.0, tr);
			fflush(stdout);
		}
	}
	xfer_close(a.c);
	xfer_close(p.c);
	xfer_buf_free(&a.buf);
	xfer_buf_free(&p.buf);
	return err;
}
