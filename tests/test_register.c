// SPDX-License-Identifier: MIT
/*
 * The registration fast path (issue 14): pages a client already touched are in its memfd's page
 * cache, so the daemon allocates nothing for them: a small range is answered without a worker
 * round trip (and without mapping its pages), a large one has them mapped on the worker by reads
 * (a fault per 16 pages, not one per page; else the first transfer into it takes a write fault
 * per page on the event loop), while pages not in memory are still populated, and charged, as
 * before. Seen from outside through the daemon's RssShmem (shared pages mapped in its page
 * tables), its minor faults, the memfd's allocated blocks, and through the bytes a local pairing
 * moves out of such a region, holes punched after registration included.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* Minor faults of @pid so far, all its threads (/proc/PID/stat field 10). */
static long long minor_faults(pid_t pid)
{
	char path[64], buf[1024];
	long long flt = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	CHECK(f != NULL);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* (the name may hold spaces) */
	CHECK(p != NULL);
	CHECK(sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %lld", &flt) == 1);
	return flt;
}

/* The bytes of memory @fd's file holds (allocated pages, whoever mapped them). */
static long long memfd_allocated(int fd)
{
	struct stat st;

	CHECK_OK(fstat(fd, &st));
	return (long long)st.st_blocks * 512;
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

/* What registering did: how much the daemon's RssShmem and the memfd's own memory grew. */
struct reg_growth {
	long long mapped;    /* the daemon's RssShmem */
	long long allocated; /* the memfd's allocated bytes */
};

/*
 * Registers @size bytes on @c of which the client touched [@touch_off, +@touch_len), and
 * says what grew. The region stays registered (*region).
 */
static struct reg_growth growth_on_register(struct td *d, struct xfer_client *c, size_t size,
					    size_t touch_off, size_t touch_len, uint64_t *region)
{
	uint8_t *map;
	int fd = memfd_touched(size, touch_off, touch_len, &map);
	long long rss = rss_shmem(d->pid), held = memfd_allocated(fd);

	CHECK_OK(xfer_region_register(c, fd, 0, 0, "t", region));
	struct reg_growth g = { rss_shmem(d->pid) - rss, memfd_allocated(fd) - held };
	harness_note("%zu MiB, %zu MiB touched: daemon RssShmem +%lld KiB, memfd +%lld KiB",
		     (size_t)(size / MIB), (size_t)(touch_len / MIB), g.mapped / 1024,
		     g.allocated / 1024);
	munmap(map, size);
	close(fd);
	return g;
}

/*
 * A touched range allocates nothing: small, it is answered at once without mapping its pages;
 * large, the worker maps them all into the daemon (by reads, a fault per 16 pages), so that
 * transfers into it take no fault per page on the event loop.
 */
TEST(resident_pages_mapped_not_allocated)
{
	struct td d;
	struct xfer_client *c = NULL;
	uint64_t r1, r2;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	struct reg_growth small = growth_on_register(&d, c, 8 * MIB, 0, 8 * MIB, &r1);
	CHECK(small.mapped < (long long)MIB);
	CHECK_EQ_INT(small.allocated, 0);
	struct reg_growth large = growth_on_register(&d, c, 64 * MIB, 0, 64 * MIB, &r2);
	CHECK(large.mapped >= (long long)(64 * MIB) && large.mapped < (long long)(65 * MIB));
	CHECK_EQ_INT(large.allocated, 0);
	CHECK_OK(xfer_region_deregister(c, r1, 0));
	CHECK_OK(xfer_region_deregister(c, r2, 0));
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}

/*
 * Pages nobody touched are still populated (what the daemon charges is what it may fault in),
 * slice by slice: of 48 MiB with the middle 16 MiB touched, the other 32 MiB are allocated, and
 * all 48 MiB mapped.
 */
TEST(absent_pages_still_populated)
{
	struct td d;
	struct xfer_client *c = NULL;
	uint64_t r1, r2;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	struct reg_growth all = growth_on_register(&d, c, 8 * MIB, 0, 0, &r1);
	CHECK(all.mapped >= (long long)(8 * MIB) && all.mapped < (long long)(9 * MIB));
	CHECK_EQ_INT(all.allocated, 8 * MIB);
	struct reg_growth part = growth_on_register(&d, c, 48 * MIB, 16 * MIB, 16 * MIB, &r2);
	CHECK(part.mapped >= (long long)(48 * MIB) && part.mapped < (long long)(49 * MIB));
	CHECK_EQ_INT(part.allocated, 32 * MIB);
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

/* Two touched memfds of @len bytes registered on @c: a source and a zeroed target. */
struct touched_pair {
	int sfd, dfd;
	uint8_t *src, *dst;
	uint64_t rs, rd;
	size_t len;
};

static void touched_pair_make(struct xfer_client *c, size_t len, struct touched_pair *t)
{
	t->len = len;
	t->sfd = memfd_touched(len, 0, len, &t->src);
	t->dfd = memfd_touched(len, 0, len, &t->dst);
	CHECK_OK(xfer_region_register(c, t->sfd, 0, 0, "src", &t->rs));
	CHECK_OK(xfer_region_register(c, t->dfd, 0, 0, "dst", &t->rd));
	memset(t->dst, 0, len);
}

static void touched_pair_drop(struct xfer_client *c, struct touched_pair *t)
{
	CHECK_OK(xfer_region_deregister(c, t->rs, 0));
	CHECK_OK(xfer_region_deregister(c, t->rd, 0));
	munmap(t->src, t->len);
	munmap(t->dst, t->len);
	close(t->sfd);
	close(t->dfd);
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
	uint8_t *want = malloc(len);
	struct touched_pair t;

	CHECK(want != NULL);
	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	touched_pair_make(c, len, &t);
	local_copy(c, t.rs, t.rd, len);
	CHECK_MEM_EQ(t.dst, t.src, len);

	CHECK_OK(fallocate(t.sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, MIB, MIB));
	memcpy(want, t.src, len); /* the hole reads as zeros here too */
	for (size_t i = MIB; i < 2 * MIB; i++)
		CHECK(want[i] == 0);
	memset(t.dst, 0xee, len);
	local_copy(c, t.rs, t.rd, len);
	CHECK_MEM_EQ(t.dst, want, len);
	td_check_alive(&d, "after copying out of a region with a hole");

	touched_pair_drop(c, &t);
	free(want);
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}

/*
 * Moving 64 MiB out of a touched region into another takes the daemon no fault per page:
 * registering mapped both (before, the copy took a write fault per 4 KiB page of the target,
 * 16,384, and a read fault per 16 of the source; over TCP the same faults fell on the event
 * loop, the stalls of the first 16 MiB window batches).
 */
TEST(transfer_into_resident_region_takes_no_faults)
{
	const size_t len = 64 * MIB;
	struct td d;
	struct xfer_client *c = NULL;
	struct touched_pair t;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	touched_pair_make(c, len, &t);
	long long before = minor_faults(d.pid);
	local_copy(c, t.rs, t.rd, len);
	long long faults = minor_faults(d.pid) - before;
	harness_note("the daemon's minor faults while copying 64 MiB: %lld", faults);
	/* A fault per page of the target would be 16,384; the daemon's own allocations fault a few,
	 * and under ASan its shadow of the two 64 MiB ranges (8 MiB each) ~2,200. */
	CHECK(faults < (long long)(len / 4096 / 4));
	CHECK_MEM_EQ(t.dst, t.src, len);
	touched_pair_drop(c, &t);
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}

/*
 * A small range is answered inline only when the pages of that range are in memory: of an 8 MiB
 * memfd with its first 4 MiB touched, the touched half registers without growing the daemon,
 * the whole still goes the populate way, which maps it in the daemon (st_blocks says "not
 * all", cachestat "not this range").
 */
TEST(resident_check_is_per_range)
{
	struct td d;
	struct xfer_client *c = NULL;
	uint64_t r1, r2;
	uint8_t *map;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-register", &c));
	int fd = memfd_touched(8 * MIB, 0, 4 * MIB, &map);
	long long before = rss_shmem(d.pid);
	CHECK_OK(xfer_region_register(c, fd, 0, 4 * MIB, "half", &r1));
	CHECK(rss_shmem(d.pid) - before < (long long)MIB);
	before = rss_shmem(d.pid);
	CHECK_OK(xfer_region_register(c, fd, 0, 0, "whole", &r2));
	long long grew = rss_shmem(d.pid) - before;
	CHECK(grew >= (long long)(4 * MIB) && grew < (long long)(9 * MIB));
	CHECK_OK(xfer_region_deregister(c, r1, 0));
	CHECK_OK(xfer_region_deregister(c, r2, 0));
	munmap(map, 8 * MIB);
	close(fd);
	xfer_close(c);
	CHECK_OK(td_stop(&d));
}

/* Lines of /proc/@pid/maps that map a memfd: the daemon's mappings of client regions. */
static int memfd_mappings(pid_t pid)
{
	char path[64], line[512];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "/memfd:"))
			n++;
	fclose(f);
	return n;
}

/* Waits up to 10 s for the daemon's memfd mappings to number @want; returns the last count. */
static int wait_memfd_mappings(struct td *d, int want)
{
	long long end = td_now_ms() + 10000;
	int n;

	while ((n = memfd_mappings(d->pid)) != want && td_now_ms() < end)
		usleep(10 * 1000);
	return n;
}

/*
 * A client registers two resident regions, asks for one to be deregistered (the daemon answers
 * before it unmaps) and is killed without reading the answer: the daemon ends up with the fds
 * and mappings it had before, however the kill falls against the unmapping.
 */
static void register_then_die(void *arg)
{
	struct td *d = arg;
	struct xfer_client *c = NULL;
	uint64_t r1, r2;
	uint8_t *map;
	char req[160];

	CHECK_OK(xfer_connect(d->sock, "test-register-dies", &c));
	int fd = memfd_touched(MIB, 0, MIB, &map);
	CHECK_OK(xfer_region_register(c, fd, 0, 0, "a", &r1));
	CHECK_OK(xfer_region_register(c, fd, 0, 0, "b", &r2));
	snprintf(req, sizeof(req),
		 "{\"jsonrpc\":\"2.0\",\"id\":999,\"method\":\"region.deregister\","
		 "\"params\":{\"region\":%llu}}",
		 (unsigned long long)r1);
	CHECK(send(xfer_get_fd(c), req, strlen(req), 0) == (ssize_t)strlen(req));
	kill(getpid(), SIGKILL);
}

TEST(client_killed_during_deregister_leaks_nothing)
{
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	int fds = td_quiet_fd_count(&d, 0), maps = memfd_mappings(d.pid);
	CHECK(fds > 0);
	for (int i = 0; i < 20; i++) {
		pid_t pid = td_spawn(register_then_die, &d);
		CHECK(pid > 0);
		CHECK_EQ_INT(td_wait_child(pid, 10000), 128 + SIGKILL);
	}
	CHECK_EQ_INT(td_quiet_fd_count(&d, 0), fds);
	CHECK_EQ_INT(wait_memfd_mappings(&d, maps), maps);
	long long regions = -1;
	CHECK_OK(td_stat(&d, "regions", &regions));
	CHECK_EQ_INT(regions, 0);
	td_check_alive(&d, "after clients died during deregistration");
	CHECK_OK(td_stop(&d));
}

static void count_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	(*(int *)arg)++;
}

/* The op.changed events @c receives over @rounds local pairings, drained by a last call. */
static int events_over_pairings(struct xfer_client *c, int rounds)
{
	uint8_t *src, *dst;
	uint64_t rs, rd;
	int events = 0;
	int sfd = memfd_touched(MIB, 0, MIB, &src), dfd = memfd_touched(MIB, 0, 0, &dst);

	xfer_set_event_cb(c, count_event, &events);
	CHECK_OK(xfer_region_register(c, sfd, 0, 0, "src", &rs));
	CHECK_OK(xfer_region_register(c, dfd, 0, 0, "dst", &rd));
	for (int i = 0; i < rounds; i++) {
		memset(dst, 0, MIB);
		local_copy(c, rs, rd, MIB);
		CHECK_MEM_EQ(dst, src, MIB);
	}
	CHECK_OK(xfer_region_deregister(c, rs, 0));
	CHECK_OK(xfer_region_deregister(c, rd, 0));
	xfer_set_event_cb(c, NULL, NULL);
	munmap(src, MIB);
	munmap(dst, MIB);
	close(sfd);
	close(dfd);
	return events;
}

/*
 * A client that spins for its replies (xfer_set_spin) receives the same events as one that
 * sleeps, and moves the same bytes; a spin past XFER_SPIN_MAX_US is refused.
 */
TEST(spinning_client_sees_every_event)
{
	struct td d;
	struct xfer_client *sleeper = NULL, *spinner = NULL;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "test-sleeps", &sleeper));
	CHECK_OK(xfer_set_spin(sleeper, 0));
	CHECK_OK(xfer_connect(d.sock, "test-spins", &spinner));
	CHECK_EQ_INT(xfer_set_spin(spinner, XFER_SPIN_MAX_US + 1), -EINVAL);
	CHECK_EQ_INT(xfer_set_spin(NULL, 10), -EINVAL);
	CHECK_OK(xfer_set_spin(spinner, XFER_SPIN_MAX_US));
	int slept = events_over_pairings(sleeper, 20);
	int spun = events_over_pairings(spinner, 20);
	harness_note("op.changed events over 20 pairings: %d sleeping, %d spinning", slept, spun);
	CHECK(slept > 0);
	CHECK_EQ_INT(spun, slept);
	xfer_close(spinner);
	xfer_close(sleeper);
	CHECK_OK(td_stop(&d));
}
