// SPDX-License-Identifier: MIT
/*
 * The registration fast path (issue 14): pages a client already touched are in its memfd's page
 * cache, so the daemon registers them without faulting them into its own mapping (no worker
 * round trip for small ranges, no minor fault per page for large ones), while pages not in
 * memory are still populated, and charged, as before. Seen from outside through the daemon's
 * RssShmem (shared pages mapped in its page tables), and through the bytes a local pairing
 * moves out of such a region, holes punched after registration included.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define MIB (1ull << 20)

/* RssShmem of @pid in bytes: the shared memory pages its page tables map. */
static long long rss_shmem(pid_t pid)
{
	long long kib = td_status_kib(pid, "RssShmem");

	CHECK(kib >= 0);
	return kib * 1024;
}

/* A sealed memfd of @size mapped here, the bytes [@touch_off, +@touch_len) written. */
static int memfd_touched(size_t size, size_t touch_off, size_t touch_len, uint8_t **map)
{
	int fd = td_memfd(size, true);

	CHECK_OK(fd);
	*map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(*map != MAP_FAILED);
	if (touch_len)
		td_fill(*map + touch_off, touch_len, touch_off + 1);
	return fd;
}

/*
 * How much the daemon's RssShmem grows when @c registers @size bytes of which the client
 * touched [@touch_off, +@touch_len). The region stays registered (*region).
 */
static long long growth_on_register(struct td *d, struct xfer_client *c, size_t size,
				    size_t touch_off, size_t touch_len, uint64_t *region)
{
	uint8_t *map;
	int fd = memfd_touched(size, touch_off, touch_len, &map);
	long long before = rss_shmem(d->pid);

	CHECK_OK(xfer_region_register(c, fd, 0, 0, "t", region));
	long long grew = rss_shmem(d->pid) - before;
	harness_note("%zu MiB, %zu MiB touched: daemon RssShmem +%lld KiB", (size_t)(size / MIB),
		     (size_t)(touch_len / MIB), grew / 1024);
	munmap(map, size);
	close(fd);
	return grew;
}

/* A touched range is not faulted in again: small (no worker) and large (worker, skipped). */
TEST(resident_pages_not_populated_again)
{
	struct td d;
	struct xfer_client *c = NULL;
	uint64_t r1, r2;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	CHECK(growth_on_register(&d, c, 8 * MIB, 0, 8 * MIB, &r1) < (long long)MIB);
	CHECK(growth_on_register(&d, c, 64 * MIB, 0, 64 * MIB, &r2) < (long long)MIB);
	CHECK_OK(xfer_region_deregister(c, r1, 0));
	CHECK_OK(xfer_region_deregister(c, r2, 0));
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}

/*
 * Pages nobody touched are still populated (what the daemon charges is what it may fault in),
 * slice by slice: of 48 MiB with the middle 16 MiB touched, the other 32 MiB.
 */
TEST(absent_pages_still_populated)
{
	struct td d;
	struct xfer_client *c = NULL;
	uint64_t r1, r2;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	long long all = growth_on_register(&d, c, 8 * MIB, 0, 0, &r1);
	CHECK(all >= (long long)(8 * MIB) && all < (long long)(9 * MIB));
	long long part = growth_on_register(&d, c, 48 * MIB, 16 * MIB, 16 * MIB, &r2);
	CHECK(part >= (long long)(32 * MIB) && part < (long long)(33 * MIB));
	CHECK_OK(xfer_region_deregister(c, r1, 0));
	CHECK_OK(xfer_region_deregister(c, r2, 0));
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}

/* Reads @len bytes of @src_region into @dst_region through a local pairing on @c. */
static void local_copy(struct xfer_client *c, uint64_t src_region, uint64_t dst_region,
		       uint64_t len)
{
	struct xfer_desc sd = { src_region, 0, len }, dd = { dst_region, 0, len };
	struct xfer_op_info info;
	uint64_t pop, aop;
	char *meta = NULL;

	CHECK_OK(xfer_readable(c, &sd, 1, NULL, &pop, &meta));
	CHECK_OK(xfer_read(c, meta, &dd, 1, NULL, &aop));
	free(meta);
	CHECK_OK(xfer_wait(c, aop, 10000, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	CHECK_OK(xfer_wait(c, pop, 10000, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	CHECK_OK(xfer_release(c, aop));
	CHECK_OK(xfer_release(c, pop));
}

/*
 * A region registered by the fast path moves exactly the client's bytes; a hole punched in it
 * afterwards (which no seal stops) reads back as zeros and the daemon goes on: the copy faults
 * the page in under the same guard as before.
 */
TEST(resident_region_moves_its_bytes)
{
	const size_t len = 4 * MIB;
	struct td d;
	struct xfer_client *c = NULL;
	uint8_t *src, *dst, *want = malloc(len);
	uint64_t rs, rd;

	CHECK(want != NULL);
	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	int sfd = memfd_touched(len, 0, len, &src);
	int dfd = memfd_touched(len, 0, len, &dst);
	CHECK_OK(xfer_region_register(c, sfd, 0, 0, "src", &rs));
	CHECK_OK(xfer_region_register(c, dfd, 0, 0, "dst", &rd));
	memset(dst, 0, len);
	local_copy(c, rs, rd, len);
	CHECK_MEM_EQ(dst, src, len);

	CHECK_OK(fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, MIB, MIB));
	memcpy(want, src, len); /* the hole reads as zeros here too */
	for (size_t i = MIB; i < 2 * MIB; i++)
		CHECK(want[i] == 0);
	memset(dst, 0xee, len);
	local_copy(c, rs, rd, len);
	CHECK_MEM_EQ(dst, want, len);
	td_check_alive(&d, "after copying out of a region with a hole");

	CHECK_OK(xfer_region_deregister(c, rs, 0));
	CHECK_OK(xfer_region_deregister(c, rd, 0));
	munmap(src, len);
	munmap(dst, len);
	close(sfd);
	close(dfd);
	free(want);
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}
