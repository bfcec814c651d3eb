/* SPDX-License-Identifier: MIT */
/*
 * xferbench: demo and benchmark client of xferd, built only on the public libxferclient API.
 * "demo" moves one buffer between two client processes with readable/read, then writable/write,
 * and checks every byte. "bench" measures the local transport against single-thread memcpy of
 * the same sizes in the same run, and the latency of a small operation.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"

#define DEMO_SIZE (256 * BENCH_MIB)
#define BENCH_MAX BENCH_GIB
#define LAT_SIZE 64
#define LAT_ITERS 1000
#define DEPTH_DEFAULT 4
#define DEPTH_MAX 64
#define MD_LINE_MAX 20000 /* metadata is at most 16384 characters (PROTOCOL.md section 9) */

struct opts {
	const char *socket; /* NULL: $XFERD_SOCKET, else the library's default */
	uint64_t size;	    /* demo: bytes to move */
	uint64_t max;	    /* bench: largest size */
	int iters;	    /* bench: 0 = chosen per size */
	int turn_in;	    /* bench --turns IN,OUT: the pipe the turn comes in on, or -1 */
	int turn_out;	    /* ... and the one it leaves on */
	bool turn_first;    /* bench --turn-first: this process holds the turn at the start */
	int depth;	    /* bench --depth: pairings in flight in the in-flight rows */
};

/*
 * Lockstep with another bench process (--turns IN,OUT; scripts/bench.sh runs the C and the
 * Python client so): a process works only while it holds the turn, one byte passed over a
 * pipe, and passes it after every round. The two clients then never run at once, yet their
 * rounds come within milliseconds of each other, so the drift of this shared VM (the same
 * 16 MiB copy runs at 11-18 GB/s from one second to the next) falls on both alike instead of
 * on whichever ran during a slow second. EOF on IN (the other process ended) leaves this one
 * to run on alone.
 */
struct turns {
	int in, out; /* -1: no lockstep */
	bool held;   /* this process may work */
	bool alone;  /* the other process ended */
};

/* Waits for the turn (at once if held, alone, or no lockstep). Returns 0 or -errno. */
static int turn_take(struct turns *t)
{
	char byte;

	while (t->in >= 0 && !t->held && !t->alone) {
		ssize_t n = read(t->in, &byte, 1);

		if (n == 1)
			t->held = true;
		else if (n == 0)
			t->alone = true;
		else if (errno != EINTR)
			return -errno;
	}
	return 0;
}

/* Hands the turn to the other process. Returns 0 or -errno. */
static int turn_pass(struct turns *t)
{
	if (t->out < 0 || !t->held || t->alone)
		return 0;
	t->held = false;
	while (write(t->out, "t", 1) != 1) {
		if (errno == EPIPE) { /* (SIGPIPE is ignored: it ended) */
			t->alone = t->held = true;
			return 0;
		}
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

/* Ends a round: lets the other process run one, then takes the turn back. */
static int turn_between(struct turns *t)
{
	int err = turn_pass(t);

	return err ? err : turn_take(t);
}

static int client_open(const struct opts *o, const char *name, struct xfer_client **c)
{
	static const char hint[] = "  start one (xferd --foreground --socket PATH) and pass "
				   "--socket PATH or set XFERD_SOCKET\n";

	return bench_connect(o->socket, name, hint, c);
}

/* Deregisters and frees @rb, saying so if the daemon refused; a zeroed @rb is fine. */
static void reg_buf_destroy(struct xfer_client *c, struct bench_buf *rb)
{
	int err = bench_buf_destroy(c, rb, 0);

	if (err)
		bench_fail(c, "xfer_region_deregister", err);
}

/* Waits without a deadline for @op; 0 only if it ended COMPLETE with all @len bytes moved. */
static int wait_complete(struct xfer_client *c, uint64_t op, uint64_t len, const char *who,
			 struct xfer_op_info *info)
{
	return bench_wait_complete(c, op, len, who, -1, NULL, info);
}

/* ---------------------------------------------------------------------------------------- */
/* demo: two processes, metadata through a pipe                                             */

enum demo_phase { DEMO_READ, DEMO_WRITE, DEMO_PHASES };

/* Records expected: the active side sends one per phase, the passive one for the write. */
#define DEMO_RECS 3

/* What a child tells the parent about one phase; smaller than PIPE_BUF, so written atomically. */
struct demo_rec {
	int phase;
	int verified; /* 1 if this process checked the bytes and they matched */
	uint64_t ns;  /* active side: claim to completion; 0 if not measured here */
	char transport[16];
};

struct demo_pipes {
	int md[2];  /* passive -> active: metadata, one line per phase */
	int ack[2]; /* active -> passive: "read checked, offer the next buffer" */
	int res[2]; /* both children -> parent: struct demo_rec */
};

static int write_all(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len) {
		ssize_t n = write(fd, c, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		c += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads one '\n'-terminated line into @buf (without the newline). Returns 0 or -errno. */
static int read_line(int fd, char *buf, size_t len)
{
	size_t i = 0;

	while (i + 1 < len) {
		ssize_t n = read(fd, buf + i, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		if (buf[i] == '\n') {
			buf[i] = '\0';
			return 0;
		}
		i++;
	}
	return -EMSGSIZE;
}

static void demo_report(const struct demo_pipes *p, int phase, bool ok, uint64_t ns,
			const char *transport)
{
	struct demo_rec r = { .phase = phase, .verified = ok, .ns = ns };
	int err;

	snprintf(r.transport, sizeof(r.transport), "%s", transport);
	err = write_all(p->res[1], &r, sizeof(r));
	if (err)
		fprintf(stderr, "xferbench: cannot report to the parent: %s\n", strerror(-err));
}

static void say(const char *role, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const char *role, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("  [%s] ", role);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* Passive side: offer the buffer with op.readable/op.writable and hand out the metadata. */
static int demo_offer(struct xfer_client *c, struct bench_buf *rb, bool writable,
		      const struct demo_pipes *p, uint64_t *op)
{
	struct xfer_desc d = { rb->region, 0, rb->buf.length };
	char *md = NULL;
	int err;

	err = writable ? xfer_writable(c, &d, 1, NULL, op, &md) :
			 xfer_readable(c, &d, 1, NULL, op, &md);
	if (err)
		return bench_fail(c, writable ? "xfer_writable" : "xfer_readable", err);
	say("passive",
	    "op.%s -> op %" PRIu64 "; metadata (%zu chars, %.24s...) goes to the "
	    "active process through a pipe",
	    writable ? "writable" : "readable", *op, strlen(md), md);
	err = write_all(p->md[1], md, strlen(md));
	if (!err)
		err = write_all(p->md[1], "\n", 1);
	free(md);
	if (err)
		fprintf(stderr, "xferbench: passive: metadata pipe: %s\n", strerror(-err));
	return err;
}

static int demo_passive_run(struct xfer_client *c, struct bench_buf *rb, const struct demo_pipes *p)
{
	struct xfer_op_info info;
	char line[16];
	uint64_t op;
	bool ok;
	int err;

	err = demo_offer(c, rb, false, p, &op);
	if (!err)
		err = wait_complete(c, op, rb->buf.length, "passive: readable", &info);
	if (err)
		return err;
	say("passive", "readable op %" PRIu64 " COMPLETE: the active process has read it all", op);
	xfer_release(c, op);

	memset(rb->buf.addr, 0, rb->buf.length);
	err = read_line(p->ack[0], line, sizeof(line));
	if (err)
		return err;
	err = demo_offer(c, rb, true, p, &op);
	if (!err)
		err = wait_complete(c, op, rb->buf.length, "passive: writable", &info);
	if (err)
		return err;
	ok = bench_verify("passive: after write", rb->buf.addr, rb->buf.length, 2);
	say("passive", "writable op %" PRIu64 " COMPLETE; every byte written into it %s", op,
	    ok ? "matches the pattern" : "does NOT match");
	demo_report(p, DEMO_WRITE, ok, 0, info.transport);
	xfer_release(c, op);
	return ok ? 0 : -EIO;
}

static int demo_passive(const struct opts *o, const struct demo_pipes *p)
{
	struct xfer_client *c = NULL;
	struct bench_buf rb;
	char sz[32];
	int err;

	err = client_open(o, "xferbench-passive", &c);
	if (err)
		return err;
	err = bench_buf_create(c, o->size, "demo-passive", &rb);
	if (err)
		goto out_close;
	bench_pattern_fill(rb.buf.addr, rb.buf.length, 1);
	say("passive",
	    "client %" PRIu64 ": %s sealed memfd registered as region %" PRIu64
	    " in %.1f ms, filled with a PRNG pattern",
	    xfer_client_id(c), bench_fmt_size(o->size, sz, sizeof(sz)), rb.region,
	    (double)rb.reg_ns / 1e6);
	err = demo_passive_run(c, &rb, p);
	reg_buf_destroy(c, &rb);
out_close:
	xfer_close(c);
	return err;
}

/* Active side of one phase: claim @md with op.read or op.write and time it to completion. */
static int demo_claim(struct xfer_client *c, struct bench_buf *rb, const char *md, bool write,
		      uint64_t *ns, struct xfer_op_info *info)
{
	struct xfer_desc d = { rb->region, 0, rb->buf.length };
	uint64_t op, t0 = bench_now_ns();
	int err;

	err = write ? xfer_write(c, md, &d, 1, NULL, &op) : xfer_read(c, md, &d, 1, NULL, &op);
	if (err)
		return bench_fail(c, write ? "xfer_write" : "xfer_read", err);
	err = wait_complete(c, op, rb->buf.length, write ? "active: write" : "active: read", info);
	*ns = bench_now_ns() - t0;
	xfer_release(c, op);
	return err;
}

static int demo_active_run(struct xfer_client *c, struct bench_buf *rb, const struct demo_pipes *p)
{
	static char md[MD_LINE_MAX];
	struct xfer_op_info info;
	uint64_t ns;
	bool ok;
	int err;

	err = read_line(p->md[0], md, sizeof(md));
	if (!err)
		err = demo_claim(c, rb, md, false, &ns, &info);
	if (err)
		return err;
	ok = bench_verify("active: after read", rb->buf.addr, rb->buf.length, 1);
	say("active ", "op.read COMPLETE over the '%s' transport in %.2f ms (%.2f GB/s); bytes %s",
	    info.transport, (double)ns / 1e6, bench_gbps(rb->buf.length, ns),
	    ok ? "verified" : "WRONG");
	demo_report(p, DEMO_READ, ok, ns, info.transport);
	if (!ok)
		return -EIO;

	bench_pattern_fill(rb->buf.addr, rb->buf.length, 2);
	say("active ", "filled its buffer with a second pattern, asks for a writable buffer");
	err = write_all(p->ack[1], "next\n", 5);
	if (!err)
		err = read_line(p->md[0], md, sizeof(md));
	if (!err)
		err = demo_claim(c, rb, md, true, &ns, &info);
	if (err)
		return err;
	say("active ", "op.write COMPLETE over the '%s' transport in %.2f ms (%.2f GB/s)",
	    info.transport, (double)ns / 1e6, bench_gbps(rb->buf.length, ns));
	demo_report(p, DEMO_WRITE, false, ns, info.transport);
	return 0;
}

static int demo_active(const struct opts *o, const struct demo_pipes *p)
{
	struct xfer_client *c = NULL;
	struct bench_buf rb;
	char sz[32];
	int err;

	err = client_open(o, "xferbench-active", &c);
	if (err)
		return err;
	err = bench_buf_create(c, o->size, "demo-active", &rb);
	if (err)
		goto out_close;
	say("active ", "client %" PRIu64 ": %s zeroed memfd registered as region %" PRIu64,
	    xfer_client_id(c), bench_fmt_size(o->size, sz, sizeof(sz)), rb.region);
	err = demo_active_run(c, &rb, p);
	reg_buf_destroy(c, &rb);
out_close:
	xfer_close(c);
	return err;
}

/*
 * Forks one child running @fn; the child closes the pipe ends it does not use (@passive says
 * which), so that either side sees end-of-file when the other one dies.
 */
static pid_t demo_spawn(int (*fn)(const struct opts *, const struct demo_pipes *),
			const struct opts *o, const struct demo_pipes *p, bool passive)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		perror("xferbench: fork");
		return -1;
	}
	if (pid == 0) {
		close(p->res[0]);
		close(p->md[passive ? 0 : 1]);
		close(p->ack[passive ? 1 : 0]);
		exit(fn(o, p) ? 1 : 0);
	}
	return pid;
}

/* Waits for both children; if one fails, stops the other so nothing waits for a deadline. */
static bool demo_reap(pid_t pas, pid_t act)
{
	bool ok = true, killed = false;
	int left = 2, st;

	while (left > 0) {
		pid_t pid = waitpid(-1, &st, 0);

		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			break;
		if (pid != pas && pid != act)
			continue;
		left--;
		if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) || killed)
			continue;
		fprintf(stderr, "xferbench: the %s process failed; stopping the other one\n",
			pid == pas ? "passive" : "active");
		ok = false;
		killed = left > 0 && kill(pid == pas ? act : pas, SIGTERM) == 0;
	}
	return ok && left == 0;
}

static void demo_print(const struct demo_rec *recs, size_t n, uint64_t size)
{
	static const char *const names[] = { "readable/read", "writable/write" };
	uint64_t ns[DEMO_PHASES] = { 0 };
	bool ok[DEMO_PHASES] = { false };
	const char *tr[DEMO_PHASES] = { "?", "?" };
	char sz[32];
	size_t i;

	for (i = 0; i < n; i++) {
		int ph = recs[i].phase;

		if (ph < 0 || ph >= DEMO_PHASES)
			continue;
		ns[ph] = recs[i].ns ? recs[i].ns : ns[ph];
		ok[ph] = ok[ph] || recs[i].verified;
		if (recs[i].transport[0])
			tr[ph] = recs[i].transport;
	}
	printf("\n%-16s %10s %10s %10s %-9s %s\n", "mode", "size", "time", "GB/s", "transport",
	       "verified");
	for (i = 0; i < DEMO_PHASES; i++)
		printf("%-16s %10s %8.2f ms %10.2f %-9s %s\n", names[i],
		       bench_fmt_size(size, sz, sizeof(sz)), (double)ns[i] / 1e6,
		       bench_gbps(size, ns[i]), tr[i], ok[i] ? "yes" : "NO");
}

static int run_demo(const struct opts *o)
{
	struct demo_pipes p;
	struct demo_rec recs[DEMO_RECS + 1];
	size_t n = 0;
	pid_t pas, act;
	bool ok;

	if (pipe2(p.md, O_CLOEXEC) || pipe2(p.ack, O_CLOEXEC) || pipe2(p.res, O_CLOEXEC)) {
		perror("xferbench: pipe");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	pas = demo_spawn(demo_passive, o, &p, true);
	act = pas < 0 ? -1 : demo_spawn(demo_active, o, &p, false);
	close(p.md[0]);
	close(p.md[1]);
	close(p.ack[0]);
	close(p.ack[1]);
	close(p.res[1]);
	if (pas > 0 && act < 0)
		kill(pas, SIGTERM);
	/*
	 * Note that the children are reaped before their records are read: the few records fit in
	 * the pipe, and reaping first lets a failure of one child stop the other at once instead of
	 * leaving it waiting for its operation's deadline.
	 */
	ok = pas > 0 && act > 0 && demo_reap(pas, act);
	while (n < sizeof(recs) / sizeof(recs[0]) &&
	       read(p.res[0], &recs[n], sizeof(recs[n])) == (ssize_t)sizeof(recs[n]))
		n++;
	close(p.res[0]);
	if (n)
		demo_print(recs, n, o->size);
	ok = ok && n == DEMO_RECS;
	printf("\n%s\n", ok ? "demo: both transfers verified" : "demo: FAILED");
	return ok ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------- */
/* bench: one process, two connections (passive and active), regions reused per size        */

struct bench {
	struct xfer_client *pas, *act;
	struct bench_buf pbuf, abuf; /* passive's and active's buffers of the current size */
	struct turns turns;	     /* --turns: lockstep with another bench process */
};

/*
 * One pair of operations of @len bytes: the passive connection offers pbuf (readable, or
 * writable when @write), the active one claims it with abuf. Fills @t. Returns 0 or -errno.
 */
static int run_pair(struct bench *b, uint64_t len, bool write, struct bench_times *t)
{
	const struct bench_pair p = {
		.pas = b->pas,
		.act = b->act,
		.pd = { b->pbuf.region, 0, len },
		.ad = { b->abuf.region, 0, len },
		.write = write,
		.timeout_ms = -1,
	};

	return bench_pair_run(&p, t);
}

/* Timed memcpy from the passive buffer into the active one; returns ns. */
static uint64_t bench_memcpy(struct bench *b, size_t len)
{
	uint64_t t0 = bench_now_ns();

	memcpy(b->abuf.buf.addr, b->pbuf.buf.addr, len);
	__asm__ __volatile__("" ::: "memory");
	return bench_now_ns() - t0;
}

/*
 * One round: read (passive -> active) and write (active -> passive), each of fresh data that
 * is then checked in full, and a memcpy of the same size. @round seeds the patterns so a
 * transfer that moved nothing cannot pass on the previous round's bytes.
 */
static int bench_round(struct bench *b, size_t len, unsigned int round, uint64_t ns[3])
{
	uint64_t seed = 1000 + 2ULL * round;
	struct bench_times t;
	int err;

	bench_pattern_fill(b->pbuf.buf.addr, len, seed);
	err = run_pair(b, len, false, &t);
	if (err)
		return err;
	ns[0] = t.done - t.offered;
	if (!bench_verify("bench read", b->abuf.buf.addr, len, seed))
		return -EIO;

	bench_pattern_fill(b->abuf.buf.addr, len, seed + 1);
	err = run_pair(b, len, true, &t);
	if (err)
		return err;
	ns[1] = t.done - t.offered;
	if (!bench_verify("bench write", b->pbuf.buf.addr, len, seed + 1))
		return -EIO;

	ns[2] = bench_memcpy(b, len);
	return 0;
}

static int bench_iters(const struct opts *o, uint64_t size)
{
	uint64_t n = BENCH_GIB / size;

	if (o->iters > 0)
		return o->iters;
	return n < 5 ? 5 : n > 200 ? 200 : (int)n;
}

/*
 * Takes the turn, then registers b->pbuf and b->abuf of @bytes each, named @pname and @aname
 * (making them is work the other bench process must not overlap). Returns 0 or -errno; free
 * them with bench_bufs_destroy() either way.
 */
static int bench_bufs_create(struct bench *b, uint64_t bytes, const char *pname, const char *aname)
{
	int err = turn_take(&b->turns);

	if (!err)
		err = bench_buf_create(b->pas, bytes, pname, &b->pbuf);
	if (!err)
		err = bench_buf_create(b->act, bytes, aname, &b->abuf);
	return err;
}

static void bench_bufs_destroy(struct bench *b)
{
	reg_buf_destroy(b->act, &b->abuf);
	reg_buf_destroy(b->pas, &b->pbuf);
}

/* Registers both buffers of @size, runs a warm-up round and @iters rounds, prints one row. */
static int bench_size(struct bench *b, const struct opts *o, uint64_t size)
{
	int iters = bench_iters(o, size), err, i, k;
	uint64_t *ns[3], med[3], reg_ns = 0;
	char sz[32];

	ns[0] = calloc((size_t)iters * 3, sizeof(uint64_t));
	if (!ns[0])
		return -ENOMEM;
	ns[1] = ns[0] + iters;
	ns[2] = ns[1] + iters;
	err = bench_bufs_create(b, size, "bench-passive", "bench-active");
	reg_ns = b->pbuf.reg_ns;
	for (i = -1; !err && i < iters; i++) {
		uint64_t r[3];

		err = bench_round(b, size, (unsigned int)(i + 1), r);
		for (k = 0; !err && i >= 0 && k < 3; k++)
			ns[k][i] = r[k];
		/* The Python bench starts at 1 MiB: a smaller size is one turn as a whole. */
		if (!err && size >= BENCH_MIB)
			err = turn_between(&b->turns);
	}
	bench_bufs_destroy(b);
	if (!err)
		err = turn_pass(&b->turns);
	if (!err) {
		for (k = 0; k < 3; k++)
			med[k] = bench_percentile(ns[k], (size_t)iters, 50);
		printf("%9s %5d %9.2f %8.2f %8.2f %6.2fx %8.2f %6.2fx %9.1f %9.1f  yes\n",
		       bench_fmt_size(size, sz, sizeof(sz)), iters, (double)reg_ns / 1e6,
		       bench_gbps(size, med[2]), bench_gbps(size, med[0]),
		       (double)med[2] / (double)med[0], bench_gbps(size, med[1]),
		       (double)med[2] / (double)med[1], (double)med[0] / 1e3, (double)med[1] / 1e3);
		fflush(stdout);
	}
	free(ns[0]);
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* bench --depth N: pairings in flight, through the library's events (no thread, no xfer_wait) */

/*
 * An in-flight round moves IFL_SLICES_PER_SLOT x depth pairings, each between slices of its
 * own of the two buffers, so that every pairing's bytes are checked after the round: a slice
 * moved twice in one round would hide a second pairing that moved nothing. Two per slot is
 * the fewest that still starts new pairings as others end.
 */
#define IFL_SLICES_PER_SLOT 2
#define IFL_SIDE_MAX (512 * BENCH_MIB) /* bytes of one side's slices: the rows stop before */
#define IFL_POLL_MS 60000	       /* no event for this long: the round failed */

/* One pairing in flight: the slice it moves and the two operations' ids (0: not made yet). */
struct ifl_slot {
	uint64_t pop, aop;
	bool pend, aend; /* the passive's / the active's end was seen */
	bool busy;
};

/* The state of one in-flight round of one direction, shared with the event callbacks. */
struct ifl_round {
	struct bench *b;
	uint64_t size;
	bool write;
	int depth, total; /* pairings in flight at most; pairings of the round */
	int started, ended;
	struct ifl_slot *slot; /* @depth entries */
	int err;	       /* the first failure, -errno */
};

static int ifl_total(int depth)
{
	return depth * IFL_SLICES_PER_SLOT;
}

/* Records @info as the end of the pairing it belongs to (op ids are stored by the library
 * before it delivers an event that came during the call that made the op). */
static void ifl_end(struct ifl_round *r, bool passive, const struct xfer_op_info *info)
{
	int i;

	for (i = 0; i < r->depth; i++) {
		struct ifl_slot *s = &r->slot[i];

		if (!s->busy || (passive ? s->pop : s->aop) != info->op)
			continue;
		if (info->state != XFER_COMPLETE || info->bytes != r->size) {
			fprintf(stderr,
				"xferbench: in flight: %s op %" PRIu64 " ended %s after %" PRIu64
				" of %" PRIu64 " bytes: %s (%s)\n",
				passive ? "passive" : "active", info->op,
				xfer_state_name(info->state), info->bytes, r->size, info->cause,
				xfer_strerror(info->error));
			r->err = r->err ? r->err : info->error ? info->error : -EIO;
		}
		*(passive ? &s->pend : &s->aend) = true;
		if (s->pend && s->aend) {
			s->busy = false;
			r->ended++;
		}
		return;
	}
	fprintf(stderr,
		"xferbench: in flight: an end for op %" PRIu64 ", no pairing of the round\n",
		info->op);
	r->err = r->err ? r->err : -EPROTO;
}

static void ifl_on_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct ifl_round *r = arg;

	if (info->state == XFER_COMPLETE || info->state == XFER_CANCELLED ||
	    info->state == XFER_ERRORED)
		ifl_end(r, c == r->b->pas, info);
}

/*
 * Starts pairing number r->started in free slot @s: the passive offer, then the active claim
 * with XFER_OP_NOWAIT, both released by the daemon at their ends: the flags the Python package
 * gives every operation (xferd/_clib.py op_flags), so the daemon does the same work for both.
 */
static int ifl_start(struct ifl_round *r, struct ifl_slot *s)
{
	static const struct xfer_op_opts popts = { 0, XFER_OP_RELEASE_ON_END };
	static const struct xfer_op_opts aopts = { 0, XFER_OP_RELEASE_ON_END | XFER_OP_NOWAIT };
	struct bench *b = r->b;
	uint64_t off = (uint64_t)r->started * r->size;
	struct xfer_desc pd = { b->pbuf.region, off, r->size },
			 ad = { b->abuf.region, off, r->size };
	char *md = NULL;
	int err;

	*s = (struct ifl_slot){ .busy = true };
	r->started++;
	err = r->write ? xfer_writable(b->pas, &pd, 1, &popts, &s->pop, &md) :
			 xfer_readable(b->pas, &pd, 1, &popts, &s->pop, &md);
	if (err)
		return bench_fail(b->pas, r->write ? "xfer_writable" : "xfer_readable", err);
	err = r->write ? xfer_write(b->act, md, &ad, 1, &aopts, &s->aop) :
			 xfer_read(b->act, md, &ad, 1, &aopts, &s->aop);
	free(md);
	return err ? bench_fail(b->act, r->write ? "xfer_write" : "xfer_read", err) : 0;
}

/*
 * Fills every free slot with the round's next pairings, again while the calls' own events free
 * slots (all of them may end inside these calls: nothing would then wake a poll()).
 * Returns 0 or -errno.
 */
static int ifl_refill(struct ifl_round *r)
{
	bool again = true;
	int i, err = 0;

	while (again && !err && !r->err) {
		again = false;
		for (i = 0; !err && !r->err && i < r->depth && r->started < r->total; i++) {
			if (!r->slot[i].busy) {
				err = ifl_start(r, &r->slot[i]);
				again = true;
			}
		}
	}
	return err ? err : r->err;
}

/* Sleeps in poll() until either connection has events, then takes them. Returns 0 or -errno. */
static int ifl_take_events(struct ifl_round *r)
{
	struct pollfd pfd[2] = { { xfer_get_fd(r->b->pas), POLLIN, 0 },
				 { xfer_get_fd(r->b->act), POLLIN, 0 } };
	int n = poll(pfd, 2, IFL_POLL_MS), err = 0;

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (n == 0) {
		fprintf(stderr,
			"xferbench: in flight: no event in %d s with %d of %d pairings ended\n",
			IFL_POLL_MS / 1000, r->ended, r->total);
		return -ETIMEDOUT;
	}
	if (pfd[0].revents)
		err = xfer_dispatch(r->b->pas);
	if (err >= 0 && pfd[1].revents)
		err = xfer_dispatch(r->b->act);
	return err < 0 ? bench_fail(NULL, "xfer_dispatch", err) : r->err;
}

/*
 * One timed direction of an in-flight round: r->total pairings, at most r->depth at once, a new
 * one started as soon as one has ended on both sides. Returns 0 and *ns, from the first offer
 * to the last end, or -errno.
 */
static int ifl_run(struct ifl_round *r, uint64_t *ns)
{
	uint64_t t0;
	int err = 0;

	xfer_set_event_cb(r->b->pas, ifl_on_event, r);
	xfer_set_event_cb(r->b->act, ifl_on_event, r);
	t0 = bench_now_ns();
	while (!err && r->ended < r->total) {
		err = ifl_refill(r);
		if (!err && r->ended < r->total)
			err = ifl_take_events(r);
	}
	*ns = bench_now_ns() - t0;
	xfer_set_event_cb(r->b->act, NULL, NULL);
	xfer_set_event_cb(r->b->pas, NULL, NULL);
	return err;
}

/* The pattern of slice @j of a round's direction @dir (0 read, 1 write): each slice its own. */
static uint64_t ifl_seed(unsigned int round, int dir, int total, int j)
{
	return 500000 + (2ULL * round + (unsigned int)dir) * (uint64_t)total + (uint64_t)j;
}

static void ifl_fill(void *buf, uint64_t size, unsigned int round, int dir, int total)
{
	int j;

	for (j = 0; j < total; j++)
		bench_pattern_fill((char *)buf + (size_t)j * size, size,
				   ifl_seed(round, dir, total, j));
}

static bool ifl_check(const char *who, const void *buf, uint64_t size, unsigned int round, int dir,
		      int total)
{
	int j;

	for (j = 0; j < total; j++)
		if (!bench_verify(who, (const char *)buf + (size_t)j * size, size,
				  ifl_seed(round, dir, total, j)))
			return false;
	return true;
}

/*
 * One in-flight round: fill the passive slices, read them all in flight, check every active
 * slice; fill the active slices, write them all in flight, check every passive slice. The
 * filling and checking is untimed, as in bench_round(). Returns 0 and ns[2] or -errno.
 */
static int ifl_round(struct bench *b, uint64_t size, int depth, unsigned int round, uint64_t ns[2])
{
	struct ifl_slot *slot = calloc((size_t)depth, sizeof(*slot));
	int total = ifl_total(depth), dir, err = 0;

	if (!slot)
		return -ENOMEM;
	for (dir = 0; !err && dir < 2; dir++) {
		struct ifl_round r = { .b = b,
				       .size = size,
				       .write = dir == 1,
				       .depth = depth,
				       .total = total,
				       .slot = slot };
		void *src = dir ? b->abuf.buf.addr : b->pbuf.buf.addr;
		void *dst = dir ? b->pbuf.buf.addr : b->abuf.buf.addr;

		memset(slot, 0, (size_t)depth * sizeof(*slot));
		ifl_fill(src, size, round, dir, total);
		err = ifl_run(&r, &ns[dir]);
		if (!err && !ifl_check(dir ? "in flight write" : "in flight read", dst, size, round,
				       dir, total))
			err = -EIO;
	}
	free(slot);
	return err;
}

/* Whether the in-flight rows run at @size: from 1 MiB (the Python bench's first size) while
 * one side's slices stay within IFL_SIDE_MAX. xferbench.py decides alike (inflight_sizes). */
static bool ifl_size_ok(uint64_t size, int depth)
{
	return size >= BENCH_MIB && size * (uint64_t)ifl_total(depth) <= IFL_SIDE_MAX;
}

static void ifl_header(int depth)
{
	printf("\nin flight (--depth %d), a separate measure: %d pairings of a size at once, a new one "
	       "started as one ends (the library's\nevents, one thread), %d per round, each on "
	       "slices of its own of the two buffers; time = the round's first offer\nto its last "
	       "end seen on both sides (offers and claims included), median of the rounds after "
	       "one warm-up;\nGB/s = the round's bytes / its time; every slice checked in full\n\n",
	       depth, depth, ifl_total(depth));
	printf("%9s %5s %5s %5s %9s %9s %9s %9s  %s\n", "size", "iters", "depth", "pairs", "read",
	       "write", "read us", "write us", "verified");
	printf("%9s %5s %5s %5s %9s %9s %9s %9s\n", "", "", "", "", "GB/s", "GB/s", "/round",
	       "/round");
}

/* Registers both sides' slices of @size, runs a warm-up round and @iters rounds, prints a row. */
static int ifl_size(struct bench *b, const struct opts *o, uint64_t size)
{
	int iters = bench_iters(o, size), total = ifl_total(o->depth), err, i;
	uint64_t *ns = calloc((size_t)iters * 2, sizeof(uint64_t)), med[2];
	char sz[32];

	if (!ns)
		return -ENOMEM;
	err = bench_bufs_create(b, size * (uint64_t)total, "ifl-passive", "ifl-active");
	for (i = -1; !err && i < iters; i++) {
		uint64_t r[2];

		err = ifl_round(b, size, o->depth, (unsigned int)(i + 1), r);
		if (!err && i >= 0) {
			ns[i] = r[0];
			ns[iters + i] = r[1];
		}
		if (!err)
			err = turn_between(&b->turns);
	}
	bench_bufs_destroy(b);
	if (!err)
		err = turn_pass(&b->turns);
	if (!err) {
		med[0] = bench_percentile(ns, (size_t)iters, 50);
		med[1] = bench_percentile(ns + iters, (size_t)iters, 50);
		printf("%9s %5d %5d %5d %9.2f %9.2f %9.1f %9.1f  yes  in flight\n",
		       bench_fmt_size(size, sz, sizeof(sz)), iters, o->depth, total,
		       bench_gbps(size * (uint64_t)total, med[0]),
		       bench_gbps(size * (uint64_t)total, med[1]), (double)med[0] / 1e3,
		       (double)med[1] / 1e3);
	}
	free(ns);
	return err;
}

static void lat_row(const char *what, uint64_t *v, size_t n)
{
	uint64_t med = bench_percentile(v, n, 50), p99 = bench_percentile(v, n, 99);

	printf("  %-52s %8.1f us %8.1f us\n", what, (double)med / 1e3, (double)p99 / 1e3);
}

/* Pins the calling process to @cpu (< 0: leaves it alone). Returns 0 or -errno. */
static int pin_cpu(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

/*
 * Round trips of @LAT_SIZE bytes over a SOCK_SEQPACKET socketpair to a forked echo process,
 * this process on CPU @cpu_self and the echo on @cpu_echo (< 0: wherever the scheduler puts
 * them). The control RPCs above pay at least this. Returns 0 or -errno.
 */
static int unix_rtt(uint64_t *v, int iters, int cpu_self, int cpu_echo)
{
	char buf[LAT_SIZE] = { 0 };
	int sv[2], i, err;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		if (pin_cpu(cpu_echo))
			_exit(1);
		while (read(sv[1], buf, sizeof(buf)) > 0 && write(sv[1], buf, sizeof(buf)) > 0)
			;
		_exit(0);
	}
	close(sv[1]);
	err = pid < 0 ? -errno : pin_cpu(cpu_self);
	for (i = 0; !err && i < iters; i++) {
		uint64_t t0 = bench_now_ns();

		if (write(sv[0], buf, sizeof(buf)) != sizeof(buf) ||
		    read(sv[0], buf, sizeof(buf)) != sizeof(buf))
			err = -EIO;
		v[i] = bench_now_ns() - t0;
	}
	close(sv[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return err;
}

/* Prints the AF_UNIX round-trip baselines: as scheduled, same CPU, and across two CPUs. */
static int unix_baselines(uint64_t *v)
{
	cpu_set_t saved;
	int err;

	if (sched_getaffinity(0, sizeof(saved), &saved))
		return -errno;
	err = unix_rtt(v, LAT_ITERS, -1, -1);
	if (!err)
		lat_row("baseline: AF_UNIX round trip, 2 processes", v, LAT_ITERS);
	if (!err && CPU_COUNT(&saved) >= 2 && !unix_rtt(v, LAT_ITERS, 0, 0))
		lat_row("  both pinned to one CPU", v, LAT_ITERS);
	if (!err && CPU_COUNT(&saved) >= 2 && !unix_rtt(v, LAT_ITERS, 0, 1))
		lat_row("  pinned to two different CPUs (a wakeup per message)", v, LAT_ITERS);
	sched_setaffinity(0, sizeof(saved), &saved);
	return err;
}

/* Small-operation latency: @LAT_ITERS rounds of readable + read + wait on 64-byte regions. */
static int bench_latency(struct bench *b)
{
	uint64_t *v = calloc(4 * LAT_ITERS, sizeof(uint64_t)), *p[4];
	int err, i;

	if (!v)
		return -ENOMEM;
	for (i = 0; i < 4; i++)
		p[i] = v + i * LAT_ITERS;
	/* (the latency rounds are one turn) */
	err = bench_bufs_create(b, 4096, "lat-passive", "lat-active");
	for (i = -10; !err && i < LAT_ITERS; i++) {
		struct bench_times t;

		err = run_pair(b, LAT_SIZE, false, &t);
		if (err || i < 0)
			continue;
		p[0][i] = t.done - t.start;
		p[1][i] = t.offered - t.start;
		p[2][i] = t.claimed - t.offered;
		p[3][i] = t.done - t.claimed;
	}
	bench_bufs_destroy(b);
	if (!err) {
		printf("\nsmall-op latency, %d B, %d rounds after 10 warm-up:\n", LAT_SIZE,
		       LAT_ITERS);
		printf("  %-52s %11s %11s\n", "", "median", "p99");
		lat_row("readable + read + wait (one whole round)", p[0], LAT_ITERS);
		lat_row("  op.readable (passive creates, gets metadata)", p[1], LAT_ITERS);
		lat_row("  op.read (claim accepted)", p[2], LAT_ITERS);
		lat_row("  op.wait (until the active side sees COMPLETE)", p[3], LAT_ITERS);
		err = unix_baselines(v);
	}
	if (!err)
		err = turn_pass(&b->turns);
	free(v);
	return err;
}

/* "baseline": only the AF_UNIX round trips, the floor of every control call (needs no daemon). */
static int run_baseline(const struct opts *o)
{
	uint64_t *v = calloc(LAT_ITERS, sizeof(uint64_t));
	int err = v ? 0 : -ENOMEM;

	if (!err) {
		printf("  %-52s %11s %11s\n", "", "median", "p99");
		err = unix_baselines(v);
	}
	free(v);
	if (err)
		fprintf(stderr, "xferbench: baseline FAILED: %s\n", xfer_strerror(err));
	return err ? 1 : 0;
}

static void bench_header(const struct opts *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	printf("xferbench: local transport of xferd at %s, %ld CPUs\n",
	       bench_socket_name(o->socket), cpus);
	printf("time per op = claim (op.read/op.write) to active-side COMPLETE, median of the "
	       "iterations after one warm-up;\nmemcpy = single-thread memcpy of the same size "
	       "between the same two pre-faulted memfd mappings, same run;\nratio = memcpy time / "
	       "op time (1.00x = as fast as memcpy); GB/s = 1e9 bytes/s; every transfer is "
	       "checked in full\n\n");
	printf("%9s %5s %9s %8s %8s %7s %8s %7s %9s %9s  %s\n", "size", "iters", "reg ms", "memcpy",
	       "read", "ratio", "write", "ratio", "read us", "write us", "verified");
	printf("%9s %5s %9s %8s %8s %7s %8s\n", "", "", "(1 side)", "GB/s", "GB/s", "", "GB/s");
}

static int run_bench(const struct opts *o)
{
	static const uint64_t sizes[] = {
		4 * BENCH_KIB,	64 * BENCH_KIB,	 BENCH_MIB, 16 * BENCH_MIB,
		64 * BENCH_MIB, 256 * BENCH_MIB, BENCH_GIB,
	};
	struct bench b = { .turns = { o->turn_in, o->turn_out, o->turn_first, false } };
	bool header = false; /* the in-flight rows' */
	size_t i;
	int err;

	signal(SIGPIPE, SIG_IGN); /* (a pass to a process that ended is EPIPE) */
	err = client_open(o, "xferbench-passive", &b.pas);
	if (!err)
		err = client_open(o, "xferbench-active", &b.act);
	if (!err)
		bench_header(o);
	for (i = 0; !err && i < sizeof(sizes) / sizeof(sizes[0]) && sizes[i] <= o->max; i++)
		err = bench_size(&b, o, sizes[i]);
	for (i = 0; !err && i < sizeof(sizes) / sizeof(sizes[0]) && sizes[i] <= o->max; i++) {
		if (!ifl_size_ok(sizes[i], o->depth))
			continue;
		if (!header)
			ifl_header(o->depth);
		header = true;
		err = ifl_size(&b, o, sizes[i]);
	}
	if (!err)
		err = bench_latency(&b);
	if (!err)
		printf("\nnote: on this 2-vCPU VM, waking a process on the other vCPU costs ~50 us "
		       "(guest halt-polling is off),\nso each control round trip may pay it: small-op "
		       "latency is dominated by wakeups, not by copying.\n");
	xfer_close(b.act);
	xfer_close(b.pas);
	if (err)
		fprintf(stderr, "xferbench: bench FAILED: %s\n", xfer_strerror(err));
	return err ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xferbench demo  [--socket PATH] [--size SIZE]   (default 256M)\n"
		"       xferbench bench [--socket PATH] [--max SIZE] [--iters N]   (default 1G)\n"
		"                       [--turns IN,OUT [--turn-first]]   (lockstep with another\n"
		"                       bench process over two pipes: a byte passed after each round)\n"
		"                       [--depth N]   (pairings in flight in the in-flight rows, 1-64;\n"
		"                       default 4)\n"
		"       xferbench baseline   (AF_UNIX round trips between two processes only)\n"
		"Needs a running xferd: --socket PATH, else $XFERD_SOCKET, else "
		"/run/xferd/xferd.sock.\n"
		"SIZE takes K, M, G suffixes (powers of 1024).\n");
}

/* --turns IN,OUT: two open fds (pipes from scripts/bench.sh). Returns 0 or -EINVAL. */
static int parse_turns(const char *arg, struct opts *o)
{
	int in, out, end = 0;

	if (sscanf(arg, "%d,%d%n", &in, &out, &end) != 2 || arg[end] || in < 0 || out < 0 ||
	    fcntl(in, F_GETFD) < 0 || fcntl(out, F_GETFD) < 0)
		return -EINVAL;
	o->turn_in = in;
	o->turn_out = out;
	return 0;
}

/* bench_getopt() callback: stores option @c of @ctx, a struct opts. */
static int set_opt(void *ctx, int c, const char *arg)
{
	struct opts *o = ctx;

	switch (c) {
	case 's':
		o->socket = arg;
		return 0;
	case 'z':
		if (!bench_parse_size(arg, &o->size))
			return 0;
		break;
	case 'm':
		if (!bench_parse_size(arg, &o->max))
			return 0;
		break;
	case 'i':
		o->iters = atoi(arg);
		if (o->iters > 0)
			return 0;
		break;
	case 't':
		if (parse_turns(arg, o) == 0)
			return 0;
		break;
	case 'f':
		o->turn_first = true;
		return 0;
	case 'd':
		o->depth = atoi(arg);
		if (o->depth >= 1 && o->depth <= DEPTH_MAX &&
		    strspn(arg, "0123456789") == strlen(arg))
			return 0;
		break;
	default:
		return -EINVAL;
	}
	fprintf(stderr, "xferbench: bad value '%s' for --%s\n", arg,
		c == 'z' ? "size" :
		c == 'm' ? "max" :
		c == 't' ? "turns" :
		c == 'd' ? "depth" :
			   "iters");
	return 2;
}

/* Parses the options after the mode. Returns 0, or 2 for a usage error. */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "size", required_argument, NULL, 'z' },
		{ "max", required_argument, NULL, 'm' },
		{ "iters", required_argument, NULL, 'i' },
		{ "turns", required_argument, NULL, 't' },
		{ "turn-first", no_argument, NULL, 'f' },
		{ "depth", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int rc = bench_getopt(argc, argv, "s:z:m:i:t:fd:h", lopts, set_opt, o, usage);

	if (rc || optind == argc)
		return rc;
	fprintf(stderr, "xferbench: unexpected argument '%s'\n", argv[optind]);
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(const struct opts *);
	} modes[] = { { "demo", run_demo }, { "bench", run_bench }, { "baseline", run_baseline } };
	struct opts o = { .size = DEMO_SIZE,
			  .max = BENCH_MAX,
			  .turn_in = -1,
			  .turn_out = -1,
			  .depth = DEPTH_DEFAULT };
	size_t i;
	int rc;

	bench_prog = "xferbench";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	rc = parse_opts(argc - 1, argv + 1, &o);
	if (rc)
		return rc;
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(argv[1], modes[i].name))
			return modes[i].run(&o);
	fprintf(stderr, "xferbench: unknown mode '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
