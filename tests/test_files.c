// SPDX-License-Identifier: MIT
/*
 * File regions through libxferclient against the real xferd, on one node (the local transport;
 * tests/test_files.sh moves them across nodes): the registration rules, what a file's access
 * mode allows, file to memory, memory to file and file to file at unaligned offsets with
 * several descriptors, a source truncated under the copy, and fds back to their count after.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define KiB 1024ul
#define MiB (1024ul * KiB)
#define WAIT_MS 60000

/* A file in the daemon's temp dir, @len bytes of pattern @seed, open with @flags. */
static int tfile(struct td *d, const char *name, size_t len, uint64_t seed, int flags)
{
	char path[200];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", d->dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK_OK(-ftruncate(fd, (off_t)len));
	if (len) {
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		CHECK(p != MAP_FAILED);
		td_fill(p, len, seed);
		munmap(p, len);
	}
	close(fd);
	fd = open(path, flags | O_CLOEXEC);
	CHECK(fd >= 0);
	return fd;
}

/* @len bytes of @fd's file at @off (read through a new plain fd: @fd may be O_DIRECT). */
static void file_bytes(int fd, uint64_t off, void *out, size_t len)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int plain = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(plain >= 0);
	CHECK_EQ_INT(pread(plain, out, len, (off_t)off), (long long)len);
	close(plain);
}

/*
 * @d's dir can hold O_DIRECT files: the direct I/O alignment its file system reports, or the
 * test is skipped with the reason (tmpfs before Linux 6.6 has no O_DIRECT).
 */
static uint32_t dio_align_or_skip(struct td *d)
{
	char path[200];
	struct statx stx;
	int fd;

	snprintf(path, sizeof(path), "%s/dio-probe", d->dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		td_stop(d);
		harness_skip("the test dir's file system refuses O_DIRECT");
	}
	int rc = statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx);
	close(fd);
	unlink(path);
	if (rc < 0 || !(stx.stx_mask & STATX_DIOALIGN) || !stx.stx_dio_offset_align) {
		td_stop(d);
		harness_skip("the test dir's file system reports no direct I/O alignment");
	}
	return stx.stx_dio_offset_align;
}

static struct xfer_client *conn(struct td *d)
{
	struct xfer_client *c = NULL;

	CHECK_OK(xfer_connect(d->sock, "test_files", &c));
	return c;
}

/* region.register of @fd as a file: the errno it is refused with (0: accepted, deregistered). */
static int reg_file(struct xfer_client *c, int fd, uint64_t off, uint64_t len)
{
	uint64_t r;
	int rc = xfer_region_register_file(c, fd, off, len, 0, "f", &r);

	if (rc == 0)
		CHECK_OK(xfer_region_deregister(c, r, 0));
	return rc;
}

TEST(register_rules)
{
	struct td d;
	int p[2];

	CHECK_OK(td_start(&d, NULL));
	struct xfer_client *c = conn(&d);
	int fd = tfile(&d, "f", 8192, 1, O_RDONLY);
	CHECK_OK(reg_file(c, fd, 0, 0));
	CHECK_OK(reg_file(c, fd, 4095, 4097));
	CHECK_EQ_INT(reg_file(c, fd, 4096, 4097), -EINVAL); /* past the end of the file */
	CHECK(strstr(xfer_last_error(c), "end of the file"));
	CHECK_EQ_INT(reg_file(c, fd, 8192, 0), -EINVAL); /* empty */
	CHECK_OK(-pipe2(p, O_CLOEXEC));
	CHECK_EQ_INT(reg_file(c, p[0], 0, 1), -EBADF);
	CHECK(strstr(xfer_last_error(c), "a pipe"));
	int app = tfile(&d, "a", 4096, 2, O_WRONLY | O_APPEND);
	CHECK_EQ_INT(reg_file(c, app, 0, 0), -EBADF);
	CHECK(strstr(xfer_last_error(c), "O_APPEND"));
	int opath = open(d.dir, O_PATH | O_CLOEXEC);
	CHECK_EQ_INT(reg_file(c, opath, 0, 1), -EBADF);
	/* A file is not a memfd: without the kind it is refused as before. */
	uint64_t r;
	CHECK_EQ_INT(xfer_region_register(c, fd, 0, 0, "f", &r), -EBADF);
	CHECK_EQ_INT(xfer_region_register_file(c, fd, 0, 0, 0x80, "f", &r), -EINVAL);
	close(p[0]);
	close(p[1]);
	close(app);
	close(opath);
	close(fd);
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* An O_DIRECT fd registers only ranges its file system can serve: the rule is named. */
TEST(direct_register_rules)
{
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	uint32_t a = dio_align_or_skip(&d);
	struct xfer_client *c = conn(&d);
	int fd = tfile(&d, "f", 4 * a, 1, O_RDWR | O_DIRECT);
	CHECK_OK(reg_file(c, fd, 0, 0));
	CHECK_OK(reg_file(c, fd, a, 2 * a));
	CHECK_EQ_INT(reg_file(c, fd, 1, a), -EINVAL);
	CHECK(strstr(xfer_last_error(c), "O_DIRECT file region's offset and length must be "
					 "multiples of"));
	CHECK_EQ_INT(reg_file(c, fd, 0, a + 1), -EINVAL);
	CHECK(strstr(xfer_last_error(c), "direct I/O alignment"));
	close(fd);
	/* A write-only O_DIRECT fd cannot read back the edge blocks of an unaligned write. */
	fd = tfile(&d, "w", 4 * a, 1, O_WRONLY | O_DIRECT);
	CHECK_EQ_INT(reg_file(c, fd, 0, 0), -EBADF);
	CHECK(strstr(xfer_last_error(c), "O_DIRECT file region must be open for reading too"));
	close(fd);
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* The op of @kind over region @r (1 descriptor): the errno it is refused with, or 0. */
static int op_on(struct xfer_client *c, enum xfer_kind kind, uint64_t r, const char *meta)
{
	struct xfer_desc desc = { r, 0, 4096 };
	uint64_t op;
	char *m = NULL;
	int rc = kind == XFER_READABLE ? xfer_readable(c, &desc, 1, NULL, &op, &m) :
		 kind == XFER_WRITABLE ? xfer_writable(c, &desc, 1, NULL, &op, &m) :
		 kind == XFER_READ     ? xfer_read(c, meta, &desc, 1, NULL, &op) :
					 xfer_write(c, meta, &desc, 1, NULL, &op);

	if (rc == 0 && m)
		CHECK_OK(xfer_cancel(c, op));
	free(m);
	return rc;
}

TEST(access_mode_decides_the_use)
{
	struct xfer_buf b;
	uint64_t ro, wo, mem, op;
	char *readable = NULL, *writable = NULL;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	struct xfer_client *c = conn(&d);
	int rfd = tfile(&d, "r", 4096, 1, O_RDONLY), wfd = tfile(&d, "w", 4096, 2, O_WRONLY);
	CHECK_OK(xfer_region_register_file(c, rfd, 0, 0, 0, "ro", &ro));
	CHECK_OK(xfer_region_register_file(c, wfd, 0, 0, 0, "wo", &wo));
	CHECK_OK(xfer_buf_alloc(4096, &b));
	CHECK_OK(xfer_region_register(c, b.fd, 0, 0, "mem", &mem));
	struct xfer_desc md = { mem, 0, 4096 };
	CHECK_OK(xfer_readable(c, &md, 1, NULL, &op, &readable));
	CHECK_OK(xfer_writable(c, &md, 1, NULL, &op, &writable));
	/* read-only: a source, never a target */
	CHECK_OK(op_on(c, XFER_READABLE, ro, NULL));
	CHECK_EQ_INT(op_on(c, XFER_WRITABLE, ro, NULL), -EBADF);
	CHECK(strstr(xfer_last_error(c), "read-only"));
	CHECK_EQ_INT(op_on(c, XFER_READ, ro, readable), -EBADF);
	/* write-only: a target, never a source */
	CHECK_OK(op_on(c, XFER_WRITABLE, wo, NULL));
	CHECK_EQ_INT(op_on(c, XFER_READABLE, wo, NULL), -EBADF);
	CHECK(strstr(xfer_last_error(c), "write-only"));
	CHECK_EQ_INT(op_on(c, XFER_WRITE, wo, writable), -EBADF);
	free(readable);
	free(writable);
	xfer_close(c);
	xfer_buf_free(&b);
	close(rfd);
	close(wfd);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/*
 * One local transfer, readable/read: the source is a file or memory at region offset @soff,
 * the target likewise at @doff, @len bytes in three descriptors of different boundaries on
 * the two sides. Bytes compared, and nothing outside the range touched.
 */
static void copy_files(bool src_file, bool dst_file, uint64_t soff, uint64_t doff, size_t len,
		       int dio)
{
	size_t total = len + 2 * 8192;
	struct xfer_buf sb = { 0 }, db = { 0 };
	uint64_t sr, dr, pop, aop;
	char *meta = NULL;
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	if (dio)
		dio_align_or_skip(&d);
	struct xfer_client *c = conn(&d);
	int sfd = -1, dfd = -1;
	if (src_file) {
		sfd = tfile(&d, "src", total, 7, O_RDONLY | dio);
		CHECK_OK(xfer_region_register_file(c, sfd, soff, len, 0, "src", &sr));
	} else {
		CHECK_OK(xfer_buf_alloc(total, &sb));
		td_fill(sb.addr, total, 7);
		CHECK_OK(xfer_region_register(c, sb.fd, soff, len, "src", &sr));
	}
	if (dst_file) {
		dfd = tfile(&d, "dst", total, 9, O_RDWR | dio);
		CHECK_OK(xfer_region_register_file(c, dfd, doff, len, XFER_FILE_SYNC, "dst", &dr));
	} else {
		CHECK_OK(xfer_buf_alloc(total, &db));
		td_fill(db.addr, total, 9);
		CHECK_OK(xfer_region_register(c, db.fd, doff, len, "dst", &dr));
	}
	/* three descriptors a side, their boundaries elsewhere on each (one when too small) */
	size_t n = len >= 16 ? 3 : 1;
	struct xfer_desc pd[3] = { { sr, 0, 1 }, { sr, 1, len / 2 }, { sr, 1 + len / 2, 0 } };
	struct xfer_desc ad[3] = { { dr, 0, len / 3 }, { dr, len / 3, 5 }, { dr, len / 3 + 5, 0 } };
	pd[2].length = len - 1 - len / 2;
	ad[2].length = len - len / 3 - 5;
	if (n == 1) {
		pd[0].length = len;
		ad[0].length = len;
	}
	CHECK_OK(xfer_readable(c, pd, n, NULL, &pop, &meta));
	CHECK_OK(xfer_read(c, meta, ad, n, NULL, &aop));
	struct xfer_op_info ai, pi;
	CHECK_OK(xfer_wait(c, aop, WAIT_MS, &ai));
	CHECK_OK(xfer_wait(c, pop, WAIT_MS, &pi));
	CHECK_EQ_INT(ai.state, XFER_COMPLETE);
	CHECK_EQ_INT(pi.state, XFER_COMPLETE);
	CHECK_EQ_INT(ai.bytes, len);

	char *want = malloc(total), *got = malloc(total), *orig = malloc(total);
	CHECK(want && got && orig);
	td_fill(want, total, 7);
	td_fill(orig, total, 9);
	if (dst_file)
		file_bytes(dfd, 0, got, total);
	else
		memcpy(got, db.addr, total);
	CHECK_MEM_EQ(got + doff, want + soff, len);
	CHECK_MEM_EQ(got, orig, doff);
	CHECK_MEM_EQ(got + doff + len, orig + doff + len, total - doff - len);
	free(want);
	free(got);
	free(orig);
	free(meta);
	xfer_close(c);
	xfer_buf_free(&sb);
	xfer_buf_free(&db);
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	CHECK_EQ_INT(td_stop(&d), 0);
}

static void local_copy(bool src_file, bool dst_file, uint64_t soff, uint64_t doff, size_t len)
{
	copy_files(src_file, dst_file, soff, doff, len, 0);
}

/*
 * O_DIRECT files on the local transport: regions aligned (8 KiB: a multiple of every direct
 * I/O alignment there is), descriptors inside them not (three a side, boundaries at odd
 * bytes): the daemon bounces them, reading back the edge blocks it writes.
 */
TEST(local_direct_file_to_memory)
{
	copy_files(true, false, 8192, 13, MiB + 8192, O_DIRECT);
}

TEST(local_memory_to_direct_file)
{
	copy_files(false, true, 13, 8192, MiB + 8192, O_DIRECT);
}

TEST(local_direct_file_to_direct_file)
{
	copy_files(true, true, 8192, 8192, 3 * MiB, O_DIRECT);
}

TEST(local_file_to_memory_unaligned)
{
	local_copy(true, false, 4095, 13, MiB + 7);
}

TEST(local_memory_to_file_unaligned)
{
	local_copy(false, true, 13, 4097, MiB + 7);
}

TEST(local_file_to_file_unaligned)
{
	local_copy(true, true, 1, 8191, 3 * MiB + 5);
}

TEST(local_small_file_copies)
{
	local_copy(true, false, 0, 0, 3);
	local_copy(false, true, 1, 1, 100);
}

/* A source file cut short after registration: the read ends ERRORED (EIO) with a cause. */
TEST(local_truncated_source_errors)
{
	struct xfer_buf b;
	uint64_t sr, mr, pop, aop;
	char *meta = NULL, path[200];
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	struct xfer_client *c = conn(&d);
	int fd = tfile(&d, "src", 8 * MiB, 3, O_RDONLY);
	int before = td_fd_count(d.pid);
	CHECK_OK(xfer_region_register_file(c, fd, 0, 0, 0, "src", &sr));
	CHECK_OK(xfer_buf_alloc(8 * MiB, &b));
	CHECK_OK(xfer_region_register(c, b.fd, 0, 0, "dst", &mr));
	snprintf(path, sizeof(path), "%s/src", d.dir);
	CHECK_OK(-truncate(path, MiB));
	struct xfer_desc sd = { sr, 0, 8 * MiB }, md = { mr, 0, 8 * MiB };
	CHECK_OK(xfer_readable(c, &sd, 1, NULL, &pop, &meta));
	CHECK_OK(xfer_read(c, meta, &md, 1, NULL, &aop));
	struct xfer_op_info ai, pi;
	CHECK_OK(xfer_wait(c, aop, WAIT_MS, &ai));
	CHECK_OK(xfer_wait(c, pop, WAIT_MS, &pi));
	CHECK_EQ_INT(ai.state, XFER_ERRORED);
	CHECK_EQ_INT(ai.error, -EIO);
	CHECK(strstr(ai.cause, "truncated"));
	CHECK_EQ_INT(pi.state, XFER_ERRORED);
	td_check_alive(&d, "after a truncated source");
	CHECK_OK(xfer_release(c, aop));
	CHECK_OK(xfer_release(c, pop));
	CHECK_OK(xfer_region_deregister(c, sr, 0));
	CHECK_EQ_INT(td_wait_fd_count(&d, before, 5000), before); /* the file's fd went */
	free(meta);
	xfer_close(c);
	xfer_buf_free(&b);
	close(fd);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* A client that goes away lets go of its files: the daemon's fds are back where they were. */
TEST(files_closed_with_their_client)
{
	struct td d;

	CHECK_OK(td_start(&d, NULL));
	struct xfer_client *c = conn(&d);
	int before = td_fd_count(d.pid), fd = tfile(&d, "f", 4096, 1, O_RDONLY);
	for (int i = 0; i < 20; i++) {
		uint64_t r;
		CHECK_OK(xfer_region_register_file(c, fd, 0, 0, 0, "f", &r));
	}
	CHECK_EQ_INT(td_fd_count(d.pid), before + 20);
	xfer_close(c);
	CHECK_EQ_INT(td_wait_fd_count(&d, before - 1, 5000), before - 1); /* the client's too */
	close(fd);
	CHECK_EQ_INT(td_stop(&d), 0);
}
