// SPDX-License-Identifier: MIT
/*
 * Operations end to end through libxferclient against the real xferd: the four kinds at several
 * sizes with byte-exact checks, separate processes, scatter/gather with mismatched boundaries,
 * refusals, many concurrent clients, deadlines, cancels, kill -9 of either side, events, and
 * SIGTERM with an operation pending.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"
#include "xp_meta.h"

#define KiB 1024ul
#define MiB (1024ul * KiB)
#define GiB (1024ul * MiB)
#define WAIT_MS 60000 /* "it ended at all": generous on a slow machine */

/* A buffer registered as a region of one client. */
struct tbuf {
	struct xfer_buf buf;
	uint64_t region;
};

static struct xfer_client *conn(struct td *d, const char *name)
{
	struct xfer_client *c = NULL;
	int rc = xfer_connect(d->sock, name, &c);

	if (rc && harness_in_test_process()) {
		usleep(100 * 1000); /* if it is dying, let it finish and say so */
		td_check_alive(d, "before a client could connect");
	}
	CHECK_OK(rc);
	return c;
}

static void tbuf_make(struct xfer_client *c, size_t len, struct tbuf *t)
{
	CHECK_OK(xfer_buf_alloc(len, &t->buf));
	CHECK_OK(xfer_region_register(c, t->buf.fd, 0, 0, "test", &t->region));
}

/* Deregisters (which must succeed: every op on it has ended) and frees. */
static void tbuf_free(struct xfer_client *c, struct tbuf *t)
{
	if (c)
		CHECK_OK(xfer_region_deregister(c, t->region, 0));
	xfer_buf_free(&t->buf);
}

/* A daemon with two clients, @a (owner side) and @b, each with one registered buffer. */
static void duo_start(struct td *d, struct xfer_client **a, const char *aname,
		      struct xfer_client **b, const char *bname, size_t len, struct tbuf *pb,
		      struct tbuf *ab)
{
	CHECK_OK(td_start(d, NULL));
	*a = conn(d, aname);
	*b = conn(d, bname);
	tbuf_make(*a, len, pb);
	tbuf_make(*b, len, ab);
}

/* Undoes duo_start(); the daemon must stop cleanly. */
static void duo_stop(struct td *d, struct xfer_client *a, struct tbuf *pb, struct xfer_client *b,
		     struct tbuf *ab)
{
	tbuf_free(a, pb);
	tbuf_free(b, ab);
	xfer_close(a);
	xfer_close(b);
	CHECK_EQ_INT(td_stop(d), 0);
}

static void check_info(const char *what, const struct xfer_op_info *info, enum xfer_state state,
		       int err)
{
	if (info->state != state || info->error != err)
		harness_fail(__FILE__, __LINE__, "%s: op %llu is %s (%s: %s), want %s (%s)", what,
			     (unsigned long long)info->op, xfer_state_name(info->state),
			     harness_errname(info->error), info->cause, xfer_state_name(state),
			     harness_errname(err));
	if (state != XFER_COMPLETE && state != XFER_INITIALIZED && !info->cause[0])
		harness_fail(__FILE__, __LINE__, "%s: op %llu is %s without a cause", what,
			     (unsigned long long)info->op, xfer_state_name(state));
}

/* Waits for @op to end and returns its final snapshot. */
static void wait_end(struct xfer_client *c, uint64_t op, struct xfer_op_info *info)
{
	int rc = xfer_wait(c, op, WAIT_MS, info);

	if (rc)
		harness_fail(__FILE__, __LINE__, "xfer_wait(op %llu): %s (%s)",
			     (unsigned long long)op, xfer_strerror(rc), xfer_last_error(c));
}

static void expect_state(struct xfer_client *c, uint64_t op, enum xfer_state state)
{
	struct xfer_op_info info;

	CHECK_OK(xfer_status(c, op, &info));
	if (info.state != state)
		harness_fail(__FILE__, __LINE__, "op %llu is %s, want %s", (unsigned long long)op,
			     xfer_state_name(info.state), xfer_state_name(state));
}

/* A passive op of @kind over @descs. Returns its id and *meta. */
static uint64_t passive(struct xfer_client *c, enum xfer_kind kind, const struct xfer_desc *descs,
			size_t n, const struct xfer_op_opts *opts, char **meta)
{
	uint64_t op = 0;
	int rc = kind == XFER_READABLE ? xfer_readable(c, descs, n, opts, &op, meta) :
					 xfer_writable(c, descs, n, opts, &op, meta);

	if (rc)
		harness_fail(__FILE__, __LINE__, "%s: %s (%s)", xfer_kind_name(kind),
			     xfer_strerror(rc), xfer_last_error(c));
	return op;
}

/* The active op matching passive @kind. Returns its id. */
static uint64_t active(struct xfer_client *c, enum xfer_kind pkind, const char *meta,
		       const struct xfer_desc *descs, size_t n)
{
	uint64_t op = 0;
	int rc = pkind == XFER_READABLE ? xfer_read(c, meta, descs, n, NULL, &op) :
					  xfer_write(c, meta, descs, n, NULL, &op);

	if (rc)
		harness_fail(__FILE__, __LINE__, "claim of %s metadata: %s (%s)",
			     xfer_kind_name(pkind), xfer_strerror(rc), xfer_last_error(c));
	return op;
}

/*
 * Waits for both sides and checks both COMPLETE over @len bytes. The passive side is told first
 * (PROTOCOL.md 5), so once the active side is COMPLETE the passive one must be too.
 */
static void wait_pair(struct xfer_client *pc, uint64_t pop, struct xfer_client *ac, uint64_t aop,
		      uint64_t len)
{
	struct xfer_op_info pi, ai;

	wait_end(ac, aop, &ai);
	check_info("active side", &ai, XFER_COMPLETE, 0);
	CHECK_OK(xfer_status(pc, pop, &pi));
	check_info("passive side once the active side is COMPLETE", &pi, XFER_COMPLETE, 0);
	wait_end(pc, pop, &pi);
	check_info("passive side", &pi, XFER_COMPLETE, 0);
	CHECK_EQ_INT(pi.length, len);
	CHECK_EQ_INT(pi.bytes, len);
	CHECK_EQ_INT(ai.length, len);
	CHECK_EQ_INT(ai.bytes, len);
	CHECK_STR_EQ(pi.transport, "local");
	CHECK_STR_EQ(ai.transport, "local");
}

/*
 * One transfer of @len bytes between two clients: the passive side (@pkind) on @pc, the active
 * side on @ac. The source holds a seeded pattern, the destination another; afterwards the
 * destination must equal the source and the source be unchanged.
 */
static void transfer(struct xfer_client *pc, struct xfer_client *ac, enum xfer_kind pkind,
		     size_t len, uint64_t seed, struct tbuf *pb, struct tbuf *ab)
{
	struct xfer_desc pd = { pb->region, 0, len }, ad = { ab->region, 0, len };
	struct tbuf *src = pkind == XFER_READABLE ? pb : ab;
	struct tbuf *dst = pkind == XFER_READABLE ? ab : pb;
	uint64_t pop, aop;
	char *meta = NULL;

	td_fill(src->buf.addr, len, seed);
	td_fill(dst->buf.addr, len, ~seed);
	pop = passive(pc, pkind, &pd, 1, NULL, &meta);
	expect_state(pc, pop, XFER_INITIALIZED);
	aop = active(ac, pkind, meta, &ad, 1);
	wait_pair(pc, pop, ac, aop, len);
	CHECK_MEM_EQ(dst->buf.addr, src->buf.addr, len);
	/* the source is what the pattern says: compare it against a fresh copy */
	td_fill(dst->buf.addr, len, seed);
	CHECK_MEM_EQ(src->buf.addr, dst->buf.addr, len);
	CHECK_OK(xfer_release(pc, pop));
	CHECK_OK(xfer_release(ac, aop));
	free(meta);
}

static void run_pair(enum xfer_kind pkind, size_t len)
{
	struct xfer_client *a, *b;
	struct tbuf pb, ab;
	struct td d;

	duo_start(&d, &a, "passive", &b, "active", len, &pb, &ab);
	transfer(a, b, pkind, len, len * 31 + pkind, &pb, &ab);
	/* and once more on the same regions, the other way round */
	transfer(a, b, pkind, len, len * 37 + pkind + 1, &pb, &ab);
	duo_stop(&d, a, &pb, b, &ab);
}

TEST(readable_read_4k)
{
	run_pair(XFER_READABLE, 4 * KiB);
}
TEST(readable_read_1m)
{
	run_pair(XFER_READABLE, 1 * MiB);
}
TEST(readable_read_64m)
{
	run_pair(XFER_READABLE, 64 * MiB);
}
TEST(writable_write_4k)
{
	run_pair(XFER_WRITABLE, 4 * KiB);
}
TEST(writable_write_1m)
{
	run_pair(XFER_WRITABLE, 1 * MiB);
}
TEST(writable_write_64m)
{
	run_pair(XFER_WRITABLE, 64 * MiB);
}

/* Both sides on one connection work as well. */
TEST(readable_read_same_connection)
{
	struct xfer_client *a;
	struct tbuf pb, ab;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	a = conn(&d, "both");
	tbuf_make(a, 64 * KiB, &pb);
	tbuf_make(a, 64 * KiB, &ab);
	transfer(a, a, XFER_READABLE, 64 * KiB, 5, &pb, &ab);
	transfer(a, a, XFER_WRITABLE, 64 * KiB, 6, &pb, &ab);
	tbuf_free(a, &pb);
	tbuf_free(a, &ab);
	xfer_close(a);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* ---- passive and active in separate processes ---- */

struct proc_args {
	struct td *d;
	enum xfer_kind pkind;
	size_t len;
	uint64_t seed;
	int pipe_w; /* the passive child writes its metadata here */
};

static void write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		CHECK(w > 0);
		p += w;
		n -= w;
	}
}

/* Reads one NUL-terminated string (at most @cap bytes) from @fd. */
static void read_str(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n < cap) {
		ssize_t r = read(fd, buf + n, 1);

		if (r <= 0)
			harness_fail(__FILE__, __LINE__, "pipe closed before the metadata arrived");
		if (buf[n++] == '\0')
			return;
	}
	harness_fail(__FILE__, __LINE__, "metadata longer than %zu", cap);
}

/* The passive child: offers its buffer, hands the metadata over, checks its own end. */
static void passive_child(void *arg)
{
	struct proc_args *pa = arg;
	struct xfer_client *c = conn(pa->d, "passive-child");
	struct xfer_op_info info;
	struct xfer_desc desc;
	struct tbuf t;
	char *meta;
	uint64_t op;

	tbuf_make(c, pa->len, &t);
	td_fill(t.buf.addr, pa->len, pa->pkind == XFER_READABLE ? pa->seed : ~pa->seed);
	desc = (struct xfer_desc){ t.region, 0, pa->len };
	op = passive(c, pa->pkind, &desc, 1, NULL, &meta);
	write_all(pa->pipe_w, meta, strlen(meta) + 1);
	wait_end(c, op, &info);
	check_info("passive child", &info, XFER_COMPLETE, 0);
	CHECK_EQ_INT(info.bytes, pa->len);
	if (pa->pkind == XFER_WRITABLE) {
		void *want = malloc(pa->len);

		CHECK(want != NULL);
		td_fill(want, pa->len, pa->seed);
		CHECK_MEM_EQ(t.buf.addr, want, pa->len);
		free(want);
	}
	free(meta);
	tbuf_free(c, &t);
	xfer_close(c);
}

static void run_processes(enum xfer_kind pkind, size_t len)
{
	struct proc_args pa = { .pkind = pkind, .len = len, .seed = 0xfeed + pkind };
	char meta[XP_METADATA_MAX + 1];
	struct xfer_op_info info;
	struct xfer_client *b;
	struct xfer_desc desc;
	struct tbuf t;
	struct td d;
	int p[2];
	pid_t pid;

	CHECK_OK(td_start(&d, NULL));
	pa.d = &d;
	CHECK_OK(pipe2(p, O_CLOEXEC) < 0 ? -errno : 0);
	pa.pipe_w = p[1];
	pid = td_spawn(passive_child, &pa);
	CHECK_OK(pid);
	close(p[1]);
	read_str(p[0], meta, sizeof(meta));
	close(p[0]);
	b = conn(&d, "active-parent");
	tbuf_make(b, len, &t);
	td_fill(t.buf.addr, len, pkind == XFER_READABLE ? ~pa.seed : pa.seed);
	desc = (struct xfer_desc){ t.region, 0, len };
	wait_end(b, active(b, pkind, meta, &desc, 1), &info);
	check_info("active parent", &info, XFER_COMPLETE, 0);
	if (pkind == XFER_READABLE) {
		void *want = malloc(len);

		CHECK(want != NULL);
		td_fill(want, len, pa.seed);
		CHECK_MEM_EQ(t.buf.addr, want, len);
		free(want);
	}
	CHECK_EQ_INT(td_wait_child(pid, WAIT_MS), 0);
	tbuf_free(b, &t);
	xfer_close(b);
	CHECK_EQ_INT(td_stop(&d), 0);
}

TEST(readable_read_separate_processes_16m)
{
	run_processes(XFER_READABLE, 16 * MiB);
}
TEST(writable_write_separate_processes_16m)
{
	run_processes(XFER_WRITABLE, 16 * MiB);
}

/* ---- scatter/gather with boundaries that do not line up ---- */

/* Copies the bytes @descs name (in the regions @t) into @out, in order. */
static void gather(const struct xfer_desc *descs, size_t n, struct tbuf *t, size_t nt, char *out)
{
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;

		while (j < nt && t[j].region != descs[i].region)
			j++;
		CHECK(j < nt);
		memcpy(out, (char *)t[j].buf.addr + descs[i].offset, descs[i].length);
		out += descs[i].length;
	}
}

/* Checks that the bytes of @t outside @descs equal those in @before (a copy of each region). */
static void check_outside(const struct xfer_desc *descs, size_t n, struct tbuf *t, size_t nt,
			  char **before, size_t len)
{
	for (size_t j = 0; j < nt; j++) {
		char *now = t[j].buf.addr;

		/* put the named ranges back as they were, then the whole region must match */
		for (size_t i = 0; i < n; i++)
			if (descs[i].region == t[j].region)
				memcpy(before[j] + descs[i].offset, now + descs[i].offset,
				       descs[i].length);
		CHECK_MEM_EQ(now, before[j], len);
	}
}

/*
 * One transfer from two regions of @rlen bytes per side (the passive side's @pd over a's, the
 * active side's @ad over b's; region indexes in the .region fields) with byte checks: what
 * arrived is the source's bytes in descriptor order, and nothing outside the descriptors moved.
 */
static void run_layout(enum xfer_kind pkind, size_t rlen, const struct xfer_desc *pdi, size_t np,
		       const struct xfer_desc *adi, size_t na)
{
	struct xfer_client *a, *b;
	struct tbuf pt[2], at[2];
	struct xfer_desc pd[8], ad[8];
	char *before[2], *want, *got;
	size_t total = 0;
	uint64_t pop, aop;
	struct tbuf *dst;
	char *meta;
	struct td d;

	CHECK(np <= 8 && na <= 8);
	CHECK_OK(td_start(&d, NULL));
	a = conn(&d, "multi-passive");
	b = conn(&d, "multi-active");
	for (int i = 0; i < 2; i++) {
		tbuf_make(a, rlen, &pt[i]);
		tbuf_make(b, rlen, &at[i]);
		td_fill(pt[i].buf.addr, rlen, 100 + i);
		td_fill(at[i].buf.addr, rlen, 200 + i);
	}
	for (size_t i = 0; i < np; i++) {
		pd[i] = pdi[i];
		pd[i].region = pt[pdi[i].region].region;
		total += pd[i].length;
	}
	for (size_t i = 0; i < na; i++) {
		ad[i] = adi[i];
		ad[i].region = at[adi[i].region].region;
	}
	want = malloc(total);
	got = malloc(total);
	CHECK(want && got);
	/* what must arrive: the source side's bytes in descriptor order */
	if (pkind == XFER_READABLE)
		gather(pd, np, pt, 2, want);
	else
		gather(ad, na, at, 2, want);
	dst = pkind == XFER_READABLE ? at : pt;
	for (int i = 0; i < 2; i++) {
		before[i] = malloc(rlen);
		CHECK(before[i] != NULL);
		memcpy(before[i], dst[i].buf.addr, rlen);
	}
	pop = passive(a, pkind, pd, np, NULL, &meta);
	aop = active(b, pkind, meta, ad, na);
	wait_pair(a, pop, b, aop, total);
	if (pkind == XFER_READABLE) {
		gather(ad, na, at, 2, got);
		check_outside(ad, na, at, 2, before, rlen);
	} else {
		gather(pd, np, pt, 2, got);
		check_outside(pd, np, pt, 2, before, rlen);
	}
	CHECK_MEM_EQ(got, want, total);
	for (int i = 0; i < 2; i++) {
		free(before[i]);
		tbuf_free(a, &pt[i]);
		tbuf_free(b, &at[i]);
	}
	free(want);
	free(got);
	free(meta);
	xfer_close(a);
	xfer_close(b);
	CHECK_EQ_INT(td_stop(&d), 0);
}

static void run_multi(enum xfer_kind pkind)
{
	const struct xfer_desc pd[] = { { 0, 100, 1000 }, { 1, 0, 5000 }, { 0, 3000, 2192 } };
	const struct xfer_desc ad[] = { { 0, 0, 4096 }, { 1, 512, 4096 } };

	run_layout(pkind, 8192, pd, 3, ad, 2);
}

TEST(multi_desc_mismatched_readable_read)
{
	run_multi(XFER_READABLE);
}
TEST(multi_desc_mismatched_writable_write)
{
	run_multi(XFER_WRITABLE);
}

/*
 * A copy of 8 MiB or more takes the daemon's streaming-store path (local.c XD_COPY_STREAM),
 * which stores aligned blocks and copies an unaligned head and a short tail apart: pieces at odd
 * offsets, of odd lengths, one under 256 bytes, boundaries of the two sides not lining up.
 */
static void run_multi_large(enum xfer_kind pkind)
{
	const struct xfer_desc pd[] = { { 0, 3, 5 * MiB + 1 },
					{ 1, 9 * MiB + 1, 100 },
					{ 1, 71, 4 * MiB + 333 },
					{ 0, 6 * MiB + 5, 1 * MiB + 13 } };
	const struct xfer_desc ad[] = { { 0, 1, 7 * MiB }, { 1, 129, 3 * MiB + 447 } };

	run_layout(pkind, 12 * MiB, pd, 4, ad, 2);
}

TEST(multi_desc_large_unaligned_readable_read)
{
	run_multi_large(XFER_READABLE);
}
TEST(multi_desc_large_unaligned_writable_write)
{
	run_multi_large(XFER_WRITABLE);
}

/*
 * A large copy between overlapping ranges of one region has memmove's result (streaming stores
 * are only for ranges apart: a forward block copy would overwrite source bytes not yet read).
 */
static void overlap_once(struct xfer_client *c, struct tbuf *t, size_t len, size_t src_off,
			 size_t dst_off, uint64_t seed)
{
	struct xfer_desc pd = { t->region, src_off, len }, ad = { t->region, dst_off, len };
	size_t rlen = t->buf.length;
	char *want = malloc(rlen), *meta = NULL;
	uint64_t pop, aop;

	CHECK(want != NULL);
	td_fill(t->buf.addr, rlen, seed);
	memcpy(want, t->buf.addr, rlen);
	memmove(want + dst_off, want + src_off, len);
	pop = passive(c, XFER_READABLE, &pd, 1, NULL, &meta);
	aop = active(c, XFER_READABLE, meta, &ad, 1);
	wait_pair(c, pop, c, aop, len);
	CHECK_MEM_EQ(t->buf.addr, want, rlen);
	CHECK_OK(xfer_release(c, pop));
	CHECK_OK(xfer_release(c, aop));
	free(meta);
	free(want);
}

TEST(large_copy_between_overlapping_ranges)
{
	struct xfer_client *a;
	struct tbuf t;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	a = conn(&d, "overlap");
	tbuf_make(a, 25 * MiB, &t);
	overlap_once(a, &t, 12 * MiB + 3, 0, 4097, 1);		 /* destination after the source */
	overlap_once(a, &t, 12 * MiB + 3, 4097, 0, 2);		 /* destination before it */
	overlap_once(a, &t, 12 * MiB + 3, 64, 12 * MiB + 67, 3); /* apart, one region */
	tbuf_free(a, &t);
	xfer_close(a);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* ---- refusals: decided before any byte moves; the passive op stays claimable ---- */

struct refusal_env {
	struct td d;
	struct xfer_client *a, *b;
	struct tbuf pb, ab, small, big;
};

static void refusal_setup(struct refusal_env *e)
{
	CHECK_OK(td_start(&e->d, NULL));
	e->a = conn(&e->d, "owner");
	e->b = conn(&e->d, "claimer");
	tbuf_make(e->a, 8192, &e->pb);
	tbuf_make(e->b, 8192, &e->ab);
	tbuf_make(e->b, 4096, &e->small);
	tbuf_make(e->b, 16384, &e->big);
}

static void refusal_teardown(struct refusal_env *e)
{
	tbuf_free(e->a, &e->pb);
	tbuf_free(e->b, &e->ab);
	tbuf_free(e->b, &e->small);
	tbuf_free(e->b, &e->big);
	xfer_close(e->a);
	xfer_close(e->b);
	CHECK_EQ_INT(td_stop(&e->d), 0);
}

/* A claim that must be refused with @want, leaving the passive op INITIALIZED. */
static void expect_refused(struct refusal_env *e, uint64_t pop, enum xfer_kind akind,
			   const char *meta, const struct xfer_desc *desc, int want)
{
	uint64_t aop = 0;
	int rc = akind == XFER_READ ? xfer_read(e->b, meta, desc, 1, NULL, &aop) :
				      xfer_write(e->b, meta, desc, 1, NULL, &aop);

	if (rc != want)
		harness_fail(__FILE__, __LINE__, "%s claim: got %s, want %s (%s)",
			     xfer_kind_name(akind), harness_errname(rc), harness_errname(want),
			     xfer_last_error(e->b));
	if (!xfer_last_error(e->b)[0])
		harness_fail(__FILE__, __LINE__, "refusal %s without a message",
			     harness_errname(want));
	expect_state(e->a, pop, XFER_INITIALIZED);
}

static void refusals(enum xfer_kind pkind)
{
	enum xfer_kind wrong = pkind == XFER_READABLE ? XFER_WRITE : XFER_READ;
	enum xfer_kind right = pkind == XFER_READABLE ? XFER_READ : XFER_WRITE;
	struct refusal_env e;
	struct xfer_desc pd, ad, sd, bd;
	uint64_t pop;
	char *meta;

	refusal_setup(&e);
	pd = (struct xfer_desc){ e.pb.region, 0, 8192 };
	ad = (struct xfer_desc){ e.ab.region, 0, 8192 };
	sd = (struct xfer_desc){ e.small.region, 0, 4096 };
	bd = (struct xfer_desc){ e.big.region, 0, 16384 };
	td_fill(e.pb.buf.addr, 8192, 1);
	td_fill(e.ab.buf.addr, 8192, 2);
	pop = passive(e.a, pkind, &pd, 1, NULL, &meta);
	expect_refused(&e, pop, wrong, meta, &ad, -EINVAL);
	expect_refused(&e, pop, right, meta, &sd, -EMSGSIZE);
	expect_refused(&e, pop, right, meta, &bd, -EMSGSIZE);
	/* now the correct claim: it works and moves the right bytes */
	wait_pair(e.a, pop, e.b, active(e.b, pkind, meta, &ad, 1), 8192);
	CHECK_MEM_EQ(e.pb.buf.addr, e.ab.buf.addr, 8192);
	free(meta);
	refusal_teardown(&e);
}

TEST(refuse_read_of_writable_and_size_mismatch)
{
	refusals(XFER_WRITABLE);
}
TEST(refuse_write_of_readable_and_size_mismatch)
{
	refusals(XFER_READABLE);
}

TEST(refuse_second_claim)
{
	struct refusal_env e;
	struct xfer_desc pd, ad;
	struct xfer_op_info info;
	uint64_t pop, aop, aop2 = 0;
	char *meta;
	int rc;

	refusal_setup(&e);
	pd = (struct xfer_desc){ e.pb.region, 0, 8192 };
	ad = (struct xfer_desc){ e.ab.region, 0, 8192 };
	pop = passive(e.a, XFER_READABLE, &pd, 1, NULL, &meta);
	aop = active(e.b, XFER_READABLE, meta, &ad, 1);
	rc = xfer_read(e.b, meta, &ad, 1, NULL, &aop2);
	CHECK_OK(xfer_status(e.a, pop, &info));
	/* EALREADY always fits; ECANCELED ("already ended") only once the first claim finished */
	if (rc != -EALREADY && !(rc == -ECANCELED && info.state == XFER_COMPLETE))
		harness_fail(__FILE__, __LINE__, "second claim: got %s (%s), want EALREADY",
			     harness_errname(rc), xfer_last_error(e.b));
	wait_pair(e.a, pop, e.b, aop, 8192);
	/* and after it ended, too */
	rc = xfer_read(e.b, meta, &ad, 1, NULL, &aop2);
	if (rc != -EALREADY && rc != -ECANCELED)
		harness_fail(__FILE__, __LINE__, "claim of a completed op: got %s (%s)",
			     harness_errname(rc), xfer_last_error(e.b));
	free(meta);
	refusal_teardown(&e);
}

TEST(refuse_tampered_token)
{
	struct refusal_env e;
	struct xfer_desc pd, ad;
	struct xp_meta m;
	char *meta, *bad, err[128];
	uint64_t pop;

	refusal_setup(&e);
	pd = (struct xfer_desc){ e.pb.region, 0, 8192 };
	ad = (struct xfer_desc){ e.ab.region, 0, 8192 };
	td_fill(e.pb.buf.addr, 8192, 3);
	pop = passive(e.a, XFER_READABLE, &pd, 1, NULL, &meta);
	CHECK_OK(xp_meta_decode(meta, &m, err, sizeof(err)));
	m.token[XP_ID_BYTES - 1] ^= 1;
	CHECK_OK(xp_meta_encode(&m, &bad));
	xp_meta_fini(&m);
	expect_refused(&e, pop, XFER_READ, bad, &ad, -EACCES);
	expect_refused(&e, pop, XFER_READ, "xfer1.bm9wZQ", &ad, -EBADMSG);
	wait_pair(e.a, pop, e.b, active(e.b, XFER_READABLE, meta, &ad, 1), 8192);
	CHECK_MEM_EQ(e.ab.buf.addr, e.pb.buf.addr, 8192);
	free(bad);
	free(meta);
	refusal_teardown(&e);
}

/* ---- 50 concurrent clients x 20 operations ---- */

#define NCHILD 50
#define NOPS 20

struct many_args {
	struct td *d;
	int child;
};

static void many_child(void *arg)
{
	struct many_args *ma = arg;
	struct xfer_client *a = conn(ma->d, "many-a"), *b = conn(ma->d, "many-b");
	size_t len = 64 * KiB + ma->child * 4 * KiB;
	struct tbuf pb, ab;

	tbuf_make(a, len, &pb);
	tbuf_make(b, len, &ab);
	for (int i = 0; i < NOPS; i++)
		transfer(a, b, i % 2 ? XFER_WRITABLE : XFER_READABLE, len - i * 8,
			 (uint64_t)ma->child << 32 | i, &pb, &ab);
	tbuf_free(a, &pb);
	tbuf_free(b, &ab);
	xfer_close(a);
	xfer_close(b);
}

TEST_TIMEOUT(concurrent_50_clients_x_20_ops, 240)
{
	struct many_args args[NCHILD];
	pid_t pids[NCHILD];
	long long done = 0, regions = -1;
	int failed = 0;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	for (int i = 0; i < NCHILD; i++) {
		args[i] = (struct many_args){ &d, i };
		pids[i] = td_spawn(many_child, &args[i]);
		CHECK_OK(pids[i]);
	}
	for (int i = 0; i < NCHILD; i++) {
		int rc = td_wait_child(pids[i], 200000);

		if (rc == -ETIMEDOUT)
			td_kill9(pids[i]);
		if (rc != 0) {
			harness_note("child %d ended with %d", i, rc);
			failed++;
		}
	}
	CHECK_EQ_INT(failed, 0);
	CHECK_OK(td_stat(&d, "ops_completed", &done));
	CHECK_EQ_INT(done, 2 * NCHILD * NOPS);
	if (td_wait_stat(&d, "regions", 0, 5000, &regions))
		harness_fail(__FILE__, __LINE__, "%lld regions left after every client left",
			     regions);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* ---- deadlines ---- */

TEST(deadline_unclaimed_readable_errors_etimedout)
{
	struct xfer_op_opts opts = { .timeout_ms = 200 };
	struct xfer_client *a, *b;
	struct xfer_op_info info;
	struct tbuf pb, ab;
	struct xfer_desc pd, ad;
	long long t0, elapsed;
	uint64_t op, aop;
	char *meta;
	struct td d;

	duo_start(&d, &a, "deadline", &b, "late", 4096, &pb, &ab);
	pd = (struct xfer_desc){ pb.region, 0, 4096 };
	ad = (struct xfer_desc){ ab.region, 0, 4096 };
	t0 = td_now_ms();
	op = passive(a, XFER_READABLE, &pd, 1, &opts, &meta);
	wait_end(a, op, &info);
	elapsed = td_now_ms() - t0;
	check_info("unclaimed readable", &info, XFER_ERRORED, -ETIMEDOUT);
	CHECK_EQ_INT(info.timeout_ms, 200);
	/* it cannot end before its deadline; the upper bound is only "it ended at all" */
	if (elapsed < 195)
		harness_fail(__FILE__, __LINE__, "deadline of 200 ms fired after %lld ms", elapsed);
	/* a late claim is refused: the operation has ended */
	CHECK_ERR(xfer_read(b, meta, &ad, 1, NULL, &aop), -ECANCELED);
	free(meta);
	duo_stop(&d, a, &pb, b, &ab);
}

TEST(wait_timeout_leaves_op_running)
{
	struct xfer_client *a, *b;
	struct xfer_op_info info;
	struct tbuf pb, ab;
	struct xfer_desc pd, ad;
	uint64_t op;
	char *meta;
	struct td d;

	duo_start(&d, &a, "waiter", &b, "claimer", 4096, &pb, &ab);
	td_fill(pb.buf.addr, 4096, 9);
	pd = (struct xfer_desc){ pb.region, 0, 4096 };
	ad = (struct xfer_desc){ ab.region, 0, 4096 };
	op = passive(a, XFER_READABLE, &pd, 1, NULL, &meta);
	CHECK_ERR(xfer_wait(a, op, 100, &info), -ETIMEDOUT);
	expect_state(a, op, XFER_INITIALIZED);
	wait_pair(a, op, b, active(b, XFER_READABLE, meta, &ad, 1), 4096);
	CHECK_MEM_EQ(ab.buf.addr, pb.buf.addr, 4096);
	free(meta);
	duo_stop(&d, a, &pb, b, &ab);
}

/* ---- cancel ---- */

TEST(cancel_before_claim_refuses_later_read)
{
	struct xfer_client *a, *b;
	struct xfer_op_info info;
	struct tbuf pb, ab;
	struct xfer_desc pd, ad;
	uint64_t op, aop;
	char *meta;
	struct td d;

	duo_start(&d, &a, "canceller", &b, "reader", 4096, &pb, &ab);
	pd = (struct xfer_desc){ pb.region, 0, 4096 };
	ad = (struct xfer_desc){ ab.region, 0, 4096 };
	op = passive(a, XFER_READABLE, &pd, 1, NULL, &meta);
	CHECK_OK(xfer_cancel(a, op));
	CHECK_OK(xfer_status(a, op, &info));
	check_info("cancelled readable", &info, XFER_CANCELLED, -ECANCELED);
	CHECK_ERR(xfer_read(b, meta, &ad, 1, NULL, &aop), -ECANCELED);
	CHECK(xfer_last_error(b)[0] != '\0');
	/* cancelling again changes nothing */
	CHECK_OK(xfer_cancel(a, op));
	CHECK_OK(xfer_status(a, op, &info));
	check_info("cancelled twice", &info, XFER_CANCELLED, -ECANCELED);
	free(meta);
	duo_stop(&d, a, &pb, b, &ab);
}

static size_t big_len(void)
{
	return harness_large() ? 1 * GiB : 256 * MiB;
}

/*
 * One attempt at cancelling mid-transfer from the passive (@by_passive) or active side.
 * Returns true if the cancel landed (both sides CANCELLED with a cause), false if the transfer
 * genuinely finished first (its bytes are then checked).
 */
static bool cancel_attempt(struct xfer_client *a, struct xfer_client *b, struct tbuf *pb,
			   struct tbuf *ab, size_t len, bool by_passive)
{
	struct xfer_desc pd = { pb->region, 0, len }, ad = { ab->region, 0, len };
	struct xfer_op_info pi, ai;
	uint64_t pop, aop;
	char *meta;

	memset(ab->buf.addr, 0, len);
	pop = passive(a, XFER_READABLE, &pd, 1, NULL, &meta);
	aop = active(b, XFER_READABLE, meta, &ad, 1);
	CHECK_OK(by_passive ? xfer_cancel(a, pop) : xfer_cancel(b, aop));
	wait_end(b, aop, &ai);
	wait_end(a, pop, &pi);
	free(meta);
	CHECK_OK(xfer_release(a, pop));
	CHECK_OK(xfer_release(b, aop));
	if (pi.state == XFER_COMPLETE || ai.state == XFER_COMPLETE) {
		/* finished before the cancel arrived: then every byte must be there */
		CHECK_EQ_INT(pi.state, XFER_COMPLETE);
		CHECK_MEM_EQ(ab->buf.addr, pb->buf.addr, len);
		return false;
	}
	check_info("cancelled passive side", &pi, XFER_CANCELLED, -ECANCELED);
	check_info("cancelled active side", &ai, XFER_CANCELLED, -ECANCELED);
	CHECK(pi.bytes <= len && ai.bytes <= len);
	return true;
}

static void cancel_mid_transfer(bool by_passive)
{
	size_t len = big_len();
	struct xfer_client *a, *b;
	struct tbuf pb, ab;
	struct td d;
	int tries;

	duo_start(&d, &a, "owner", &b, "reader", len, &pb, &ab);
	td_fill(pb.buf.addr, len, 77);
	for (tries = 1; tries <= 5; tries++) {
		if (cancel_attempt(a, b, &pb, &ab, len, by_passive))
			break;
		harness_note("try %d: the %zu-byte transfer finished before the cancel", tries,
			     len);
	}
	if (tries > 5)
		harness_fail(__FILE__, __LINE__, "cancel never landed mid-transfer in 5 tries");
	/* every op has ended: both regions deregister, no copy still holds them */
	duo_stop(&d, a, &pb, b, &ab);
}

TEST_TIMEOUT(cancel_mid_transfer_by_passive_side, 120)
{
	cancel_mid_transfer(true);
}
TEST_TIMEOUT(cancel_mid_transfer_by_active_side, 120)
{
	cancel_mid_transfer(false);
}

/* ---- kill -9 of either side mid-transfer ---- */

struct kill_args {
	struct td *d;
	size_t len;
	bool passive;			/* the child owns the readable; else the child reads */
	char meta[XP_METADATA_MAX + 1]; /* the parent's readable, for a reading child */
	int pipe_w;
};

/* The child of a kill test: does its half, says so on the pipe, then waits to be killed. */
static void kill_child(void *arg)
{
	struct kill_args *ka = arg;
	struct xfer_client *c = conn(ka->d, "doomed");
	struct xfer_desc desc;
	struct tbuf t;
	char *meta = NULL;
	uint64_t op;

	tbuf_make(c, ka->len, &t);
	desc = (struct xfer_desc){ t.region, 0, ka->len };
	if (ka->passive) {
		passive(c, XFER_READABLE, &desc, 1, NULL, &meta);
		write_all(ka->pipe_w, meta, strlen(meta) + 1);
	} else {
		op = active(c, XFER_READABLE, ka->meta, &desc, 1);
		write_all(ka->pipe_w, &op, sizeof(op));
	}
	for (;;)
		pause();
}

/* The daemon's fds and regions are back to @fds and @regions. */
static void check_daemon_back(struct td *d, int fds, long long regions)
{
	long long r = -1;
	int n = td_quiet_fd_count(d, 1);

	if (n != fds)
		harness_fail(__FILE__, __LINE__, "daemon has %d fds, baseline %d", n, fds);
	if (td_wait_stat(d, "regions", regions, 10000, &r))
		harness_fail(__FILE__, __LINE__, "daemon has %lld regions, baseline %lld", r,
			     regions);
}

/* One attempt. Returns true if the kill landed mid-transfer, false if it finished first. */
static bool kill_attempt(struct td *d, struct xfer_client *b, struct tbuf *t, bool kill_passive)
{
	struct kill_args ka = { .d = d, .len = t->buf.length, .passive = kill_passive };
	struct xfer_desc desc = { t->region, 0, t->buf.length };
	struct xfer_op_info info;
	char *meta = NULL;
	uint64_t op = 0, child_op;
	int p[2];
	pid_t pid;

	CHECK_OK(pipe2(p, O_CLOEXEC) < 0 ? -errno : 0);
	ka.pipe_w = p[1];
	if (!kill_passive) {
		op = passive(b, XFER_READABLE, &desc, 1, NULL, &meta);
		snprintf(ka.meta, sizeof(ka.meta), "%s", meta);
	}
	pid = td_spawn(kill_child, &ka);
	CHECK_OK(pid);
	close(p[1]);
	if (kill_passive) {
		read_str(p[0], ka.meta, sizeof(ka.meta));
		op = active(b, XFER_READABLE, ka.meta, &desc, 1);
	} else {
		CHECK_EQ_INT(read(p[0], &child_op, sizeof(child_op)), sizeof(child_op));
	}
	CHECK_OK(td_kill9(pid));
	close(p[0]);
	wait_end(b, op, &info);
	free(meta);
	CHECK_OK(xfer_release(b, op));
	if (info.state == XFER_COMPLETE)
		return false;
	/* PROTOCOL.md 6: the paired operation becomes ERRORED with ECONNRESET and a cause */
	check_info("survivor of a kill -9", &info, XFER_ERRORED, -ECONNRESET);
	return true;
}

static void kill_mid_transfer(bool kill_passive)
{
	long long regions = -1;
	struct xfer_client *b;
	struct tbuf t;
	struct td d;
	int fds, tries;

	CHECK_OK(td_start(&d, NULL));
	b = conn(&d, "survivor");
	tbuf_make(b, big_len(), &t);
	CHECK_OK(td_stat(&d, "regions", &regions));
	fds = td_quiet_fd_count(&d, 1);
	CHECK_OK(fds);
	for (tries = 1; tries <= 5; tries++) {
		bool landed = kill_attempt(&d, b, &t, kill_passive);

		check_daemon_back(&d, fds, regions);
		if (landed)
			break;
		harness_note("try %d: the transfer finished before the kill", tries);
	}
	if (tries > 5)
		harness_fail(__FILE__, __LINE__, "kill -9 never landed mid-transfer in 5 tries");
	tbuf_free(b, &t);
	xfer_close(b);
	CHECK_EQ_INT(td_stop(&d), 0);
}

TEST_TIMEOUT(kill9_passive_owner_mid_read, 120)
{
	kill_mid_transfer(true);
}
TEST_TIMEOUT(kill9_reader_mid_read, 120)
{
	kill_mid_transfer(false);
}

/*
 * Clients that hang up right after a claim, while the transfer finishes or its completion is
 * being pushed to them: the daemon must survive, and end where it started.
 */
static void hang_up_round(struct td *d, int i)
{
	/* sizes whose copy ends about when the hang-up reaches the daemon */
	static const size_t lens[] = { 4 * KiB, 16 * KiB, 256 * KiB, 1 * MiB };
	size_t len = lens[i % 4];
	struct xfer_client *a = conn(d, "hangs-up"), *b = conn(d, "claims");
	struct xfer_op_info info;
	struct xfer_desc pd, ad;
	struct tbuf pb, ab;
	uint64_t aop;
	char *meta;

	tbuf_make(a, len, &pb);
	tbuf_make(b, len, &ab);
	td_fill(pb.buf.addr, len, i);
	pd = (struct xfer_desc){ pb.region, 0, len };
	ad = (struct xfer_desc){ ab.region, 0, len };
	passive(a, XFER_READABLE, &pd, 1, NULL, &meta);
	aop = active(b, XFER_READABLE, meta, &ad, 1);
	if (i % 3 == 2) {
		/* only the owner leaves: the reader ends COMPLETE or ERRORED ECONNRESET */
		xfer_close(a);
		wait_end(b, aop, &info);
		if (info.state == XFER_COMPLETE)
			CHECK_MEM_EQ(ab.buf.addr, pb.buf.addr, len);
		else
			check_info("reader whose owner left", &info, XFER_ERRORED, -ECONNRESET);
		xfer_close(b);
	} else if (i % 3 == 1) {
		xfer_close(b);
		xfer_close(a);
	} else {
		xfer_close(a);
		xfer_close(b);
	}
	free(meta);
	xfer_buf_free(&pb.buf);
	xfer_buf_free(&ab.buf);
}

TEST(hang_up_right_after_claim)
{
	long long regions = -1;
	struct td d;
	int base;

	CHECK_OK(td_start(&d, NULL));
	base = td_quiet_fd_count(&d, 0);
	CHECK_OK(base);
	for (int i = 0; i < 100; i++) {
		hang_up_round(&d, i);
		td_check_alive(&d, "after clients hung up mid-operation");
	}
	CHECK_EQ_INT(td_quiet_fd_count(&d, 0), base);
	if (td_wait_stat(&d, "regions", 0, 10000, &regions))
		harness_fail(__FILE__, __LINE__, "%lld regions left after every client left",
			     regions);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* ---- events ---- */

struct events {
	uint64_t op;
	int seen;
	bool complete;
	struct xfer_op_info last;
};

static void on_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct events *ev = arg;

	if (info->op != ev->op)
		return;
	ev->seen++;
	ev->last = *info;
	if (info->state == XFER_COMPLETE)
		ev->complete = true;
}

TEST(event_callback_via_get_fd_and_dispatch)
{
	struct events ev = { 0 };
	struct xfer_client *a, *b;
	struct xfer_op_info info;
	struct tbuf pb, ab;
	struct xfer_desc pd, ad;
	long long end;
	char *meta;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	a = conn(&d, "events");
	b = conn(&d, "reader");
	xfer_set_event_cb(a, on_event, &ev);
	tbuf_make(a, 256 * KiB, &pb);
	tbuf_make(b, 256 * KiB, &ab);
	td_fill(pb.buf.addr, 256 * KiB, 11);
	pd = (struct xfer_desc){ pb.region, 0, 256 * KiB };
	ad = (struct xfer_desc){ ab.region, 0, 256 * KiB };
	ev.op = passive(a, XFER_READABLE, &pd, 1, NULL, &meta);
	/* nothing has been claimed yet: dispatch returns at once, and no COMPLETE is seen */
	CHECK_OK(xfer_dispatch(a));
	CHECK(!ev.complete);
	wait_end(b, active(b, XFER_READABLE, meta, &ad, 1), &info);
	check_info("reader", &info, XFER_COMPLETE, 0);
	end = td_now_ms() + WAIT_MS;
	while (!ev.complete && td_now_ms() < end) {
		struct pollfd pfd = { .fd = xfer_get_fd(a), .events = POLLIN };

		CHECK(pfd.fd >= 0);
		CHECK_OK(poll(&pfd, 1, 1000) < 0 ? -errno : 0);
		CHECK_OK(xfer_dispatch(a));
	}
	CHECK(ev.complete);
	CHECK_EQ_INT(ev.last.op, ev.op);
	CHECK_EQ_INT(ev.last.kind, XFER_READABLE);
	CHECK_EQ_INT(ev.last.state, XFER_COMPLETE);
	CHECK_EQ_INT(ev.last.length, 256 * KiB);
	CHECK_EQ_INT(ev.last.bytes, 256 * KiB);
	CHECK_MEM_EQ(ab.buf.addr, pb.buf.addr, 256 * KiB);
	free(meta);
	duo_stop(&d, a, &pb, b, &ab);
}

/* Counts every operation event a callback sees, and the ends among them. */
struct event_count {
	int seen, ends;
};

static void count_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct event_count *n = arg;

	n->seen++;
	if (info->state == XFER_COMPLETE || info->state == XFER_CANCELLED ||
	    info->state == XFER_ERRORED)
		n->ends++;
}

/* Reads @len bytes of readable @meta on @b and waits for the read's end. */
static void read_all(struct xfer_client *b, const char *meta, const struct xfer_desc *ad)
{
	struct xfer_op_info info;

	wait_end(b, active(b, XFER_READABLE, meta, ad, 1), &info);
	check_info("reader", &info, XFER_COMPLETE, 0);
}

/*
 * xfer_dispatch_end() hands the waiting ends over one per call, in order, each after the
 * events before it went to the callback, which never sees an end it returned; 0 once none is
 * left; without a callback it only drains (as xfer_dispatch()).
 */
TEST(dispatch_end_returns_ends_one_at_a_time)
{
	struct event_count n = { 0 };
	struct xfer_client *a, *b;
	struct xfer_op_info end;
	struct xfer_desc pd[2], ad[2];
	struct tbuf pb, ab;
	uint64_t op[2];
	char *meta[2];
	struct td d;

	duo_start(&d, &a, "ends", &b, "reader", 128 * KiB, &pb, &ab);
	xfer_set_event_cb(a, count_event, &n);
	td_fill(pb.buf.addr, 128 * KiB, 13);
	for (int i = 0; i < 2; i++) {
		pd[i] = (struct xfer_desc){ pb.region, i * 64 * KiB, 64 * KiB };
		ad[i] = (struct xfer_desc){ ab.region, i * 64 * KiB, 64 * KiB };
		op[i] = passive(a, XFER_READABLE, &pd[i], 1, NULL, &meta[i]);
	}
	CHECK_EQ_INT(xfer_dispatch_end(a, &end), 0); /* nothing claimed yet */
	for (int i = 0; i < 2; i++)
		read_all(b, meta[i], &ad[i]); /* the owner's ends are pushed before the reader's */
	CHECK_MEM_EQ(ab.buf.addr, pb.buf.addr, 128 * KiB);
	for (int i = 0; i < 2; i++) {
		memset(&end, 0, sizeof(end));
		CHECK_EQ_INT(xfer_dispatch_end(a, &end), 1);
		CHECK_EQ_INT(end.op, op[i]);
		check_info("owner", &end, XFER_COMPLETE, 0);
		CHECK_EQ_INT(end.bytes, 64 * KiB);
		CHECK_EQ_INT(n.seen, i + 1); /* its IN_PROGRESS went to the callback first */
		CHECK_EQ_INT(n.ends, 0);
	}
	CHECK_EQ_INT(xfer_dispatch_end(a, &end), 0);
	CHECK_EQ_INT(xfer_dispatch_end(NULL, &end), -EINVAL);
	CHECK_EQ_INT(xfer_dispatch_end(a, NULL), -EINVAL);
	xfer_set_event_cb(a, NULL, NULL);
	free(meta[0]);
	op[0] = passive(a, XFER_READABLE, &pd[0], 1, NULL, &meta[0]);
	read_all(b, meta[0], &ad[0]);
	CHECK_EQ_INT(xfer_dispatch_end(a, &end), 0);
	CHECK_EQ_INT(n.seen, 2);
	for (int i = 0; i < 2; i++)
		free(meta[i]);
	duo_stop(&d, a, &pb, b, &ab);
}

/* ---- release on end ---- */

static bool ended(enum xfer_state st)
{
	return st == XFER_COMPLETE || st == XFER_CANCELLED || st == XFER_ERRORED;
}

/* Delivers events on @a and @b until both @ea and @eb saw their op end. */
static void dispatch_until_ended(struct xfer_client *a, struct events *ea, struct xfer_client *b,
				 struct events *eb)
{
	long long end = td_now_ms() + WAIT_MS;

	while (!(ended(ea->last.state) && ended(eb->last.state)) && td_now_ms() < end) {
		struct pollfd pfd[2] = { { xfer_get_fd(a), POLLIN, 0 },
					 { xfer_get_fd(b), POLLIN, 0 } };

		CHECK_OK(poll(pfd, 2, 1000) < 0 ? -errno : 0);
		CHECK_OK(xfer_dispatch(a));
		CHECK_OK(xfer_dispatch(b));
	}
}

/* Once its end was pushed, an op made with XFER_OP_RELEASE_ON_END is gone: -ENOENT. */
static void check_forgotten(struct td *d, struct xfer_client *c, uint64_t op)
{
	struct xfer_op_info info;
	long long n;

	CHECK_EQ_INT(xfer_status(c, op, &info), -ENOENT);
	CHECK_EQ_INT(xfer_release(c, op), -ENOENT);
	CHECK_OK(td_wait_stat(d, "ops", 0, WAIT_MS, &n));
}

TEST(release_on_end_forgets_both_sides_after_their_end)
{
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END };
	struct events ea = { 0 }, eb = { 0 };
	struct xfer_client *a, *b;
	struct tbuf pb, ab;
	struct xfer_desc pd, ad;
	char *meta;
	struct td d;

	duo_start(&d, &a, "passive", &b, "active", 1 * MiB, &pb, &ab);
	xfer_set_event_cb(a, on_event, &ea);
	xfer_set_event_cb(b, on_event, &eb);
	td_fill(pb.buf.addr, 1 * MiB, 21);
	pd = (struct xfer_desc){ pb.region, 0, 1 * MiB };
	ad = (struct xfer_desc){ ab.region, 0, 1 * MiB };
	ea.op = passive(a, XFER_READABLE, &pd, 1, &opts, &meta);
	CHECK_OK(xfer_read(b, meta, &ad, 1, &opts, &eb.op));
	dispatch_until_ended(a, &ea, b, &eb);
	CHECK(ea.complete && eb.complete);
	CHECK_MEM_EQ(ab.buf.addr, pb.buf.addr, 1 * MiB);
	check_forgotten(&d, a, ea.op);
	check_forgotten(&d, b, eb.op);
	free(meta);
	duo_stop(&d, a, &pb, b, &ab);
}

TEST(release_on_end_after_cancel_and_unknown_flags_refused)
{
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END };
	struct xfer_op_opts bad = { .flags = 0x80 };
	struct events ea = { 0 }, none = { .last.state = XFER_COMPLETE }; /* b has no op */
	struct xfer_client *a, *b;
	struct tbuf pb, ab;
	struct xfer_desc pd;
	uint64_t op;
	char *meta = NULL;
	struct td d;

	duo_start(&d, &a, "passive", &b, "unused", 64 * KiB, &pb, &ab);
	xfer_set_event_cb(a, on_event, &ea);
	pd = (struct xfer_desc){ pb.region, 0, 64 * KiB };
	CHECK_EQ_INT(xfer_readable(a, &pd, 1, &bad, &op, &meta), -EINVAL);
	CHECK(strstr(xfer_last_error(a), "flags") != NULL);
	ea.op = passive(a, XFER_WRITABLE, &pd, 1, &opts, &meta);
	CHECK_OK(xfer_cancel(a, ea.op));
	dispatch_until_ended(a, &ea, b, &none);
	CHECK_EQ_INT(ea.last.state, XFER_CANCELLED);
	check_forgotten(&d, a, ea.op);
	free(meta);
	duo_stop(&d, a, &pb, b, &ab);
}

/* ---- SIGTERM with an operation pending ---- */

TEST(sigterm_cancels_pending_op_with_eshutdown)
{
	struct xfer_client *a;
	struct xfer_op_info info;
	struct xfer_desc pd;
	struct tbuf pb;
	uint64_t op;
	char *meta;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	a = conn(&d, "pending");
	tbuf_make(a, 4096, &pb);
	pd = (struct xfer_desc){ pb.region, 0, 4096 };
	op = passive(a, XFER_READABLE, &pd, 1, NULL, &meta);
	CHECK_OK(td_signal(&d, SIGTERM));
	wait_end(a, op, &info);
	check_info("op pending at SIGTERM", &info, XFER_CANCELLED, -ESHUTDOWN);
	CHECK_EQ_INT(td_wait_exit(&d), 0);
	free(meta);
	tbuf_free(NULL, &pb);
	xfer_close(a);
}

/* The busy_poll object of `stats`: field @f ("polls", ...). */
static long long busy_poll_stat(struct td *d, const char *f)
{
	char key[64];
	long long v = -1;

	snprintf(key, sizeof(key), "busy_poll.%s", f);
	CHECK_OK(td_stat(d, key, &v));
	return v;
}

/* CPU time of the daemon's event loop thread (its main thread), in ms. */
static long long loop_cpu_ms(struct td *d)
{
	char path[64];
	unsigned long long ns = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)d->pid, (int)d->pid);
	FILE *f = fopen(path, "re");
	CHECK(f != NULL);
	CHECK(fscanf(f, "%llu", &ns) == 1);
	fclose(f);
	return (long long)(ns / 1000000);
}

/*
 * busypoll.c: small transfers close together are followed by polls (busy_poll.polls grows);
 * bulk copies (>= 256 KiB) hold them back (skipped_bulk grows); an idle daemon does not poll:
 * its loop thread uses next to no CPU over half a second (a poll that never ended would use
 * it all). No timing is asserted but that bound, 10x what an idle loop needs on a loaded CI.
 */
TEST(busy_poll_after_small_transfers_not_bulk_not_idle)
{
	struct xfer_client *a, *b;
	struct tbuf pb, ab;
	struct td d;

	duo_start(&d, &a, "passive", &b, "active", 1 * MiB, &pb, &ab);
	CHECK_EQ_INT(busy_poll_stat(&d, "us"), 100);
	for (int i = 0; i < 20; i++)
		transfer(a, b, XFER_READABLE, 4 * KiB, 100 + i, &pb, &ab);
	CHECK(busy_poll_stat(&d, "polls") > 0);
	for (int i = 0; i < 5; i++)
		transfer(a, b, XFER_READABLE, 1 * MiB, 200 + i, &pb, &ab);
	CHECK(busy_poll_stat(&d, "skipped_bulk") > 0);
	usleep(100 * 1000);
	long long cpu = loop_cpu_ms(&d);
	usleep(500 * 1000);
	CHECK(loop_cpu_ms(&d) - cpu < 50);
	duo_stop(&d, a, &pb, b, &ab);
}

/* busy_poll_us 0: the loop never polls. */
TEST(busy_poll_off)
{
	struct xfer_client *a, *b;
	struct tbuf pb, ab;
	struct td d;

	CHECK_OK(td_start(&d, "{\"busy_poll_us\": 0}"));
	a = conn(&d, "passive");
	b = conn(&d, "active");
	tbuf_make(a, 4 * KiB, &pb);
	tbuf_make(b, 4 * KiB, &ab);
	CHECK_EQ_INT(busy_poll_stat(&d, "us"), 0);
	for (int i = 0; i < 20; i++)
		transfer(a, b, XFER_READABLE, 4 * KiB, 300 + i, &pb, &ab);
	CHECK_EQ_INT(busy_poll_stat(&d, "polls"), 0);
	duo_stop(&d, a, &pb, b, &ab);
}
