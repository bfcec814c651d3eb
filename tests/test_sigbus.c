// SPDX-License-Identifier: MIT
/*
 * Client memory whose pages vanish under the daemon (issue 12): a hugetlb memfd with a hole
 * punched after registration, while no free huge page is left to refill it, makes the daemon's
 * copy fault with SIGBUS. The op must end ERRORED with EFAULT and the daemon keep serving. A
 * plain memfd's punched hole reads back as zeros and refills on write: its transfers complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define KiB 1024ul
#define MiB (1024ul * KiB)
#define HUGE_PAGE (2 * MiB)
#define WAIT_MS 60000
#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"
#define POOL 16 /* huge pages the tests add to the pool (32 MiB) */

static long read_long(const char *path)
{
	char buf[32] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	return n > 0 ? strtol(buf, NULL, 10) : -1;
}

static int write_long(const char *path, long v)
{
	char buf[32];
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int len = snprintf(buf, sizeof(buf), "%ld\n", v);
	ssize_t n = fd < 0 ? -1 : write(fd, buf, (size_t)len);
	int err = n == len ? 0 : -errno;

	if (fd >= 0)
		close(fd);
	return err;
}

static long saved_pool = -1;

static void pool_restore(void *arg)
{
	(void)arg;
	if (saved_pool >= 0)
		write_long(NR_HUGEPAGES, saved_pool);
	saved_pool = -1;
}

/* Grows the huge page pool by POOL pages or skips the test. Returns the cleanup hook. */
static int pool_grow(void)
{
	long now = read_long(NR_HUGEPAGES);
	int hook;

	if (now < 0)
		harness_skip("no " NR_HUGEPAGES ": the kernel has no hugetlbfs");
	saved_pool = now;
	hook = harness_cleanup_push(pool_restore, NULL);
	if (write_long(NR_HUGEPAGES, now + POOL) < 0 || read_long(NR_HUGEPAGES) < now + POOL)
		harness_skip("cannot add 16 huge pages to " NR_HUGEPAGES
			     " (not root, or no contiguous memory)");
	return hook;
}

static void pool_shrink(int hook)
{
	harness_cleanup_pop(hook);
	pool_restore(NULL);
}

/* A hugetlb memfd of @size bytes sealed against shrinking, filled from @seed. */
static int huge_memfd(size_t size, uint64_t seed)
{
	int fd = memfd_create("xfer-huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
	void *p;

	if (fd < 0)
		harness_skip("memfd_create(MFD_HUGETLB) failed");
	CHECK(ftruncate(fd, (off_t)size) == 0);
	CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED);
	td_fill(p, size, seed);
	munmap(p, size);
	return fd;
}

static void punch(int fd, off_t off, off_t len)
{
	CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) == 0);
}

/*
 * Takes every free huge page, so that a punched hole cannot be refilled and a touch of it is a
 * SIGBUS. Returns the memfd holding them; closing it gives them back.
 */
static int hog_pool(void)
{
	int fd = memfd_create("xfer-hog", MFD_CLOEXEC | MFD_HUGETLB);
	off_t off = 0;

	CHECK(fd >= 0);
	CHECK(ftruncate(fd, 1l << 40) == 0);
	while (fallocate(fd, 0, off, HUGE_PAGE) == 0)
		off += HUGE_PAGE;
	return fd;
}

static struct xfer_client *conn(struct td *d, const char *name)
{
	struct xfer_client *c = NULL;

	CHECK_OK(xfer_connect(d->sock, name, &c));
	return c;
}

static struct td *cur_daemon; /* the one started last: named when a wait fails */

static void wait_end(struct xfer_client *c, uint64_t op, struct xfer_op_info *info)
{
	int rc = xfer_wait(c, op, WAIT_MS, info);

	if (rc && cur_daemon) {
		usleep(100 * 1000); /* if it is dying, let it finish and say so */
		td_check_alive(cur_daemon, "while an op ran");
	}
	if (rc)
		harness_fail(__FILE__, __LINE__, "xfer_wait(op %llu): %s (%s)",
			     (unsigned long long)op, xfer_strerror(rc), xfer_last_error(c));
}

/*
 * A readable over @pregion (client @pc) read into @aregion (client @ac), @len bytes. Returns
 * the active side's end in *ai and the passive side's in *pi.
 */
static void pair_read(struct xfer_client *pc, uint64_t pregion, struct xfer_client *ac,
		      uint64_t aregion, size_t len, struct xfer_op_info *pi,
		      struct xfer_op_info *ai)
{
	struct xfer_desc pd = { pregion, 0, len }, ad = { aregion, 0, len };
	uint64_t pop = 0, aop = 0;
	char *meta = NULL;

	CHECK_OK(xfer_readable(pc, &pd, 1, NULL, &pop, &meta));
	if (xfer_read(ac, meta, &ad, 1, NULL, &aop) && cur_daemon) {
		usleep(100 * 1000);
		td_check_alive(cur_daemon, "after op.read");
	}
	CHECK(aop != 0);
	wait_end(ac, aop, ai);
	wait_end(pc, pop, pi);
	CHECK_OK(xfer_release(pc, pop));
	CHECK_OK(xfer_release(ac, aop));
	free(meta);
}

/* Two fresh clients move 1 MiB through the daemon: it still serves. */
static void check_serves(struct td *d)
{
	struct xfer_client *a = conn(d, "after-a"), *b = conn(d, "after-b");
	struct xfer_buf x, y;
	uint64_t rx, ry;
	struct xfer_op_info pi, ai;

	td_check_alive(d, "after the fault");
	CHECK_OK(xfer_buf_alloc(MiB, &x));
	CHECK_OK(xfer_buf_alloc(MiB, &y));
	td_fill(x.addr, MiB, 7);
	CHECK_OK(xfer_region_register(a, x.fd, 0, 0, "x", &rx));
	CHECK_OK(xfer_region_register(b, y.fd, 0, 0, "y", &ry));
	pair_read(a, rx, b, ry, MiB, &pi, &ai);
	CHECK_EQ_INT(ai.state, XFER_COMPLETE);
	CHECK_MEM_EQ(y.addr, x.addr, MiB);
	CHECK_OK(xfer_region_deregister(a, rx, 0));
	CHECK_OK(xfer_region_deregister(b, ry, 0));
	xfer_buf_free(&x);
	xfer_buf_free(&y);
	xfer_close(a);
	xfer_close(b);
}

static void check_efault(const char *side, const struct xfer_op_info *info)
{
	if (info->state != XFER_ERRORED || info->error != -EFAULT || !strstr(info->cause, "vanish"))
		harness_fail(__FILE__, __LINE__, "%s: op %llu is %s (%s: %s), want ERRORED EFAULT",
			     side, (unsigned long long)info->op, xfer_state_name(info->state),
			     harness_errname(info->error), info->cause);
	harness_note("%s: %s", side, info->cause);
}

/*
 * A hugetlb region of @len bytes (rounded up to huge pages) whose pages from @hole on are
 * punched after registration with the pool empty, read by another client: @len above 64 KiB
 * copies on a worker thread, up to 64 KiB on the event loop thread.
 */
static void huge_punched_after(size_t len, size_t hole)
{
	size_t size = (len + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	int hook = pool_grow();
	struct td d;
	struct xfer_client *pc, *ac;
	struct xfer_buf dst;
	uint64_t pr, ar;
	struct xfer_op_info pi, ai;
	int fd = huge_memfd(size, len), hog;

	CHECK_OK(td_start(&d, NULL));
	cur_daemon = &d;
	pc = conn(&d, "huge-owner");
	ac = conn(&d, "reader");
	CHECK_OK(xfer_region_register(pc, fd, 0, len, "huge", &pr));
	CHECK_OK(xfer_buf_alloc(len, &dst));
	CHECK_OK(xfer_region_register(ac, dst.fd, 0, 0, "dst", &ar));
	punch(fd, (off_t)hole, (off_t)(size - hole));
	hog = hog_pool();
	pair_read(pc, pr, ac, ar, len, &pi, &ai);
	td_check_alive(&d, "after a copy from punched hugetlb pages");
	check_efault("reader", &ai);
	CHECK_EQ_INT(pi.state, XFER_ERRORED);
	CHECK_EQ_INT(pi.error, -EFAULT);
	CHECK(ai.bytes <= hole);
	check_serves(&d);
	close(hog);
	CHECK_OK(xfer_region_deregister(pc, pr, 0));
	CHECK_OK(xfer_region_deregister(ac, ar, 0));
	xfer_buf_free(&dst);
	xfer_close(pc);
	xfer_close(ac);
	close(fd);
	CHECK_EQ_INT(td_stop(&d), 0);
	pool_shrink(hook);
}

TEST(huge_punched_after_register_worker_copy)
{
	/* faults half way; 8 MiB copies by streaming stores (local.c XD_COPY_STREAM) */
	huge_punched_after(8 * MiB, 4 * MiB);
}

TEST(huge_punched_after_register_worker_copy_at_once)
{
	huge_punched_after(8 * MiB, 0);
}

TEST(huge_punched_after_register_inline_copy)
{
	huge_punched_after(64 * KiB, 0);
}

/* The same with the hugetlb memfd as the reader's destination: the copy faults on a store. */
static void huge_punched_dest(size_t len)
{
	int hook = pool_grow();
	struct td d;
	struct xfer_client *pc, *ac;
	struct xfer_buf src;
	uint64_t pr, ar;
	struct xfer_op_info pi, ai;
	int fd = huge_memfd(len, 3), hog;

	CHECK_OK(td_start(&d, NULL));
	cur_daemon = &d;
	pc = conn(&d, "owner");
	ac = conn(&d, "huge-reader");
	CHECK_OK(xfer_buf_alloc(len, &src));
	CHECK_OK(xfer_region_register(pc, src.fd, 0, 0, "src", &pr));
	CHECK_OK(xfer_region_register(ac, fd, 0, 0, "huge", &ar));
	punch(fd, 0, (off_t)len);
	hog = hog_pool();
	pair_read(pc, pr, ac, ar, len, &pi, &ai);
	td_check_alive(&d, "after a copy into punched hugetlb pages");
	check_efault("reader", &ai);
	check_serves(&d);
	close(hog);
	CHECK_OK(xfer_region_deregister(pc, pr, 0));
	CHECK_OK(xfer_region_deregister(ac, ar, 0));
	xfer_buf_free(&src);
	xfer_close(pc);
	xfer_close(ac);
	close(fd);
	CHECK_EQ_INT(td_stop(&d), 0);
	pool_shrink(hook);
}

TEST(huge_punched_destination)
{
	huge_punched_dest(4 * MiB);
}

/* 8 MiB: the daemon's streaming stores (local.c XD_COPY_STREAM) fault, not memmove's. */
TEST(huge_punched_destination_streaming)
{
	huge_punched_dest(8 * MiB);
}

/*
 * Punched before registration with the pool empty: the daemon's mmap cannot reserve the pages,
 * so the registration is refused (ENOMEM). With pages to be had, the hole is refilled with
 * zeros and the transfer completes.
 */
TEST(huge_punched_before_register)
{
	size_t len = 4 * MiB;
	int hook = pool_grow();
	struct td d;
	struct xfer_client *pc, *ac;
	struct xfer_buf dst;
	uint64_t pr = 0, ar;
	struct xfer_op_info pi, ai;
	int fd = huge_memfd(len, 5), hog;
	uint8_t *want = malloc(len);
	int rc;

	CHECK(want);
	CHECK_OK(td_start(&d, NULL));
	cur_daemon = &d;
	pc = conn(&d, "huge-owner");
	ac = conn(&d, "reader");
	punch(fd, 0, (off_t)HUGE_PAGE);
	hog = hog_pool();
	rc = xfer_region_register(pc, fd, 0, 0, "huge", &pr);
	harness_note("register with the pool empty: %s (%s)", harness_errname(rc),
		     xfer_last_error(pc));
	CHECK(rc == -ENOMEM || rc == -EFAULT);
	td_check_alive(&d, "after registering a punched hugetlb memfd");
	close(hog);
	CHECK_OK(xfer_region_register(pc, fd, 0, 0, "huge", &pr));
	CHECK_OK(xfer_buf_alloc(len, &dst));
	CHECK_OK(xfer_region_register(ac, dst.fd, 0, 0, "dst", &ar));
	pair_read(pc, pr, ac, ar, len, &pi, &ai);
	CHECK_EQ_INT(ai.state, XFER_COMPLETE);
	td_fill(want, len, 5);
	memset(want, 0, HUGE_PAGE);
	CHECK_MEM_EQ(dst.addr, want, len);
	CHECK_OK(xfer_region_deregister(pc, pr, 0));
	CHECK_OK(xfer_region_deregister(ac, ar, 0));
	xfer_buf_free(&dst);
	free(want);
	xfer_close(pc);
	xfer_close(ac);
	close(fd);
	CHECK_EQ_INT(td_stop(&d), 0);
	pool_shrink(hook);
}

/*
 * A plain (shmem) memfd: a punched hole reads back as zeros, no fault, and the transfer moves
 * what the memfd then holds, punched before registration or after, worker or inline copy.
 */
static void plain_punched(size_t len, bool before)
{
	struct td d;
	struct xfer_client *pc, *ac;
	struct xfer_buf src, dst;
	uint64_t pr, ar;
	struct xfer_op_info pi, ai;
	size_t hole = len / 4, hole_len = len / 2;
	uint8_t *want = malloc(len);

	CHECK(want);
	CHECK_OK(td_start(&d, NULL));
	cur_daemon = &d;
	pc = conn(&d, "owner");
	ac = conn(&d, "reader");
	CHECK_OK(xfer_buf_alloc(len, &src));
	CHECK_OK(xfer_buf_alloc(len, &dst));
	td_fill(src.addr, len, len);
	if (before)
		punch(src.fd, (off_t)hole, (off_t)hole_len);
	CHECK_OK(xfer_region_register(pc, src.fd, 0, 0, "src", &pr));
	CHECK_OK(xfer_region_register(ac, dst.fd, 0, 0, "dst", &ar));
	if (!before)
		punch(src.fd, (off_t)hole, (off_t)hole_len);
	td_fill(dst.addr, len, ~(uint64_t)len);
	pair_read(pc, pr, ac, ar, len, &pi, &ai);
	td_check_alive(&d, "after a copy from a punched plain memfd");
	if (ai.state != XFER_COMPLETE || pi.state != XFER_COMPLETE)
		harness_fail(__FILE__, __LINE__, "reader %s (%s), owner %s",
			     xfer_state_name(ai.state), ai.cause, xfer_state_name(pi.state));
	td_fill(want, len, len);
	memset(want + hole, 0, hole_len);
	CHECK_MEM_EQ(src.addr, want, len);
	CHECK_MEM_EQ(dst.addr, want, len);
	CHECK_OK(xfer_region_deregister(pc, pr, 0));
	CHECK_OK(xfer_region_deregister(ac, ar, 0));
	xfer_buf_free(&src);
	xfer_buf_free(&dst);
	free(want);
	xfer_close(pc);
	xfer_close(ac);
	CHECK_EQ_INT(td_stop(&d), 0);
}

TEST(plain_punched_after_register_worker_copy)
{
	plain_punched(8 * MiB, false);
}

TEST(plain_punched_after_register_inline_copy)
{
	plain_punched(64 * KiB, false);
}

TEST(plain_punched_before_register)
{
	plain_punched(8 * MiB, true);
}

/* The guard covers client memory only: any other SIGBUS still has its default action. */
TEST(sigbus_outside_a_copy_still_kills)
{
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	cur_daemon = NULL;
	check_serves(&d); /* the handler is installed and has guarded copies */
	CHECK_OK(td_signal(&d, SIGBUS));
#ifdef __SANITIZE_ADDRESS__
	/* The previous action is ASan's handler: it reports the signal and exits 1. */
	CHECK_EQ_INT(td_wait_exit(&d), 1);
#else
	CHECK_EQ_INT(td_wait_exit(&d), 128 + SIGBUS);
#endif
}
