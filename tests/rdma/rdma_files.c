/* SPDX-License-Identifier: MIT */
/*
 * rdma_files: file regions between two daemons over RDMA (staging buffers, PROTOCOL.md
 * §10.5.1), through the public libxferclient API:
 *
 *   - file -> memory, memory -> file and file -> file, as reads and as writes, with the file on
 *     the owner's side, on the active side, or both; regions at file offsets and descriptors at
 *     region offsets that are not page-aligned, lengths 1 B, 4 KiB + 3 and 3 MiB + 5 (chunk
 *     boundaries fall inside a page); every target byte compared with the source stream, the
 *     bytes around the target range untouched;
 *   - with BIG_BYTES: one file -> file read of that size (checked a MiB at a time);
 *   - a source file truncated after registration (the owner's, and the active side's): both
 *     operations ERRORED with EIO, both daemons serving on;
 *   - a target file on a full filesystem (SMALL_DIR, a small tmpfs), owner's and active side's:
 *     ERRORED with ENOSPC;
 *   - at the end, every staging buffer of both daemons back in its pool (list.devices).
 *
 *   rdma_files PASSIVE_SOCKET ACTIVE_SOCKET DIR SMALL_DIR [BIG_BYTES]
 *   rdma_files -D DIRECT_DIR PASSIVE_SOCKET ACTIVE_SOCKET
 *
 * With -D only the O_DIRECT cases run, in DIRECT_DIR (a file system that does O_DIRECT, e.g. an
 * ext4 image on a loop device): the same pairings with each file registered through an O_DIRECT
 * descriptor, its region at an aligned file offset and of an aligned length (the rule of
 * PROTOCOL.md §4), the descriptor inside it at an unaligned offset and length, so that the
 * staged chunks' edges fall inside direct I/O blocks, which both neighbours read, modify and
 * write; then the staging buffers back in their pools.
 *
 * Prints "ok - NAME" or "FAIL - NAME (why)" per case; exit 0 when every case passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xferclient.h"

#define GAP 0xa5
#define WAIT_MS 600000
#define MIB (1024ULL * 1024ULL)
#define HEAD (4096 + 123)      /* region offset in the file: not page-aligned */
#define LEAD 77		       /* descriptor offset in the region */
#define TAIL 333	       /* bytes after the descriptor in the region */
#define DIRECT_HEAD (3 * 4096) /* -D: region offset in the file (direct I/O alignment) */
#define DIRECT_ALIGN 4096      /* -D: region lengths rounded up to this (ext4's block) */

static int failures;
static const char *dir, *small_dir;
static bool direct; /* -D: files in dir are registered O_DIRECT */

/* Byte @i of the source stream of a case seeded @seed. */
static uint8_t pat(uint64_t i, uint32_t seed)
{
	uint64_t x = (i + seed) * 0x9E3779B97F4A7C15ull;

	return (uint8_t)(x >> 56);
}

/* One end of a transfer: a file region or a memory region, the descriptor at LEAD. */
struct end {
	struct xfer_client *c;
	bool file;
	int fd;
	char path[256];
	struct xfer_buf buf;
	uint64_t region;
	uint64_t head; /* the region's offset in the file */
	uint64_t len;  /* of the region: LEAD + size + TAIL (-D: rounded up to DIRECT_ALIGN) */
};

/* The region's bytes [@off, +@n) into @out. */
static int end_bytes(const struct end *e, uint64_t off, uint8_t *out, size_t n)
{
	if (!e->file) {
		memcpy(out, (uint8_t *)e->buf.addr + off, n);
		return 0;
	}
	return pread(e->fd, out, n, (off_t)(e->head + off)) == (ssize_t)n ? 0 : -1;
}

/* Fills @e's region: the source stream at LEAD (@source), GAP everywhere else. */
static int end_fill(struct end *e, uint64_t size, bool source, uint32_t seed)
{
	uint8_t *chunk = malloc(MIB);

	if (!chunk)
		return -1;
	for (uint64_t off = 0; off < e->len; off += MIB) {
		size_t n = e->len - off < MIB ? (size_t)(e->len - off) : MIB;
		for (size_t i = 0; i < n; i++) {
			uint64_t at = off + i;
			bool in = source && at >= LEAD && at < LEAD + size;
			chunk[i] = in ? pat(at - LEAD, seed) : GAP;
		}
		if (!e->file)
			memcpy((uint8_t *)e->buf.addr + off, chunk, n);
		else if (pwrite(e->fd, chunk, n, (off_t)(e->head + off)) != (ssize_t)n) {
			free(chunk);
			return -1;
		}
	}
	free(chunk);
	return 0;
}

/*
 * Makes @e on @c: a file in @where (created 0600, HEAD bytes before the region, opened
 * read-only for a source, write-only for a target) or a memory buffer. Returns 0 or -errno.
 */
static int end_open(struct end *e, struct xfer_client *c, bool file, bool source, uint64_t size,
		    uint32_t seed, const char *where, const char *name, char *why, size_t wlen)
{
	int rc;

	memset(e, 0, sizeof(*e));
	e->c = c;
	e->file = file;
	e->fd = -1;
	e->len = LEAD + size + TAIL;
	e->head = HEAD;
	if (direct) {
		e->len = (e->len + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
		e->head = DIRECT_HEAD;
	}
	if (file) {
		snprintf(e->path, sizeof(e->path), "%s/%s", where, name);
		int w = open(e->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (w < 0) {
			snprintf(why, wlen, "create %s: %s", e->path, strerror(errno));
			return -errno;
		}
		e->fd = w;
		if (ftruncate(w, (off_t)(e->head + e->len)) < 0) { /* (sparse: no space used yet) */
			snprintf(why, wlen, "ftruncate %s: %s", e->path, strerror(errno));
			return -errno;
		}
		if (where == dir && end_fill(e, size, source, seed) < 0) {
			snprintf(why, wlen, "filling %s: %s", e->path, strerror(errno));
			return -EIO;
		}
		/*
		 * The daemon gets a descriptor that allows exactly the side's direction (an
		 * O_DIRECT target reads too: the edge blocks of its unaligned writes).
		 */
		int tflags = direct ? O_RDWR | O_DIRECT : O_WRONLY;
		int fd = open(e->path,
			      (source ? O_RDONLY | (direct ? O_DIRECT : 0) : tflags) | O_CLOEXEC);
		rc = fd < 0 ?
			     -errno :
			     xfer_region_register_file(c, fd, e->head, e->len, 0, name, &e->region);
		if (fd >= 0)
			close(fd);
	} else {
		rc = xfer_buf_alloc(e->len, &e->buf);
		if (rc == 0 && end_fill(e, size, source, seed) < 0)
			rc = -EIO;
		if (rc == 0)
			rc = xfer_region_register(c, e->buf.fd, 0, 0, name, &e->region);
	}
	if (rc < 0)
		snprintf(why, wlen, "%s region of %" PRIu64 " bytes: %s (%s)",
			 file ? "file" : "memory", e->len, xfer_strerror(rc), xfer_last_error(c));
	return rc;
}

static void end_close(struct end *e)
{
	if (e->region)
		xfer_region_deregister(e->c, e->region, 1);
	if (e->file) {
		if (e->fd >= 0)
			close(e->fd);
		unlink(e->path);
	} else if (e->buf.addr) {
		xfer_buf_free(&e->buf);
	}
	e->region = 0;
}

/* 0 if @dst holds the stream at LEAD and GAP around it. */
static int end_check(const struct end *dst, uint64_t size, uint32_t seed, char *why, size_t len)
{
	uint8_t *got = malloc(MIB);
	int rc = 0;

	if (!got) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	for (uint64_t off = 0; off < dst->len && rc == 0; off += MIB) {
		size_t n = dst->len - off < MIB ? (size_t)(dst->len - off) : MIB;
		if (end_bytes(dst, off, got, n) < 0) {
			snprintf(why, len, "reading the target back: %s", strerror(errno));
			rc = -1;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			uint64_t at = off + i;
			bool in = at >= LEAD && at < LEAD + size;
			uint8_t want = in ? pat(at - LEAD, seed) : GAP;
			if (got[i] != want) {
				snprintf(why, len, "%s byte %" PRIu64 " is %#x, expected %#x",
					 in ? "stream" : "gap", in ? at - LEAD : at, got[i], want);
				rc = -1;
				break;
			}
		}
	}
	free(got);
	return rc;
}

/* The two operations' ends: both @want (COMPLETE, or ERRORED with @err), transport rdma. */
static int check_info(const char *who, const struct xfer_op_info *info, enum xfer_state want,
		      int err, uint64_t total, char *why, size_t len)
{
	if (info->state != want || (err && info->error != -err)) {
		snprintf(why, len, "%s op ended %s (%s): %s, expected %s%s%s", who,
			 xfer_state_name(info->state), xfer_strerror(info->error),
			 info->cause[0] ? info->cause : "no cause", xfer_state_name(want),
			 err ? " with " : "", err ? xfer_strerror(-err) : "");
		return -1;
	}
	if (strcmp(info->transport, "rdma") != 0) {
		snprintf(why, len, "%s op has transport '%s', expected rdma", who, info->transport);
		return -1;
	}
	if (want == XFER_COMPLETE && info->bytes != total) {
		snprintf(why, len, "%s op moved %" PRIu64 " of %" PRIu64 " bytes", who, info->bytes,
			 total);
		return -1;
	}
	return 0;
}

/*
 * Pairs the passive op over @p with the active one over @a (@read: readable/read, else
 * writable/write) and waits for both. Returns 0 with both infos, or -1 with @why.
 */
static int run_pair(struct end *p, struct end *a, bool read, uint64_t size, struct xfer_op_info *pi,
		    struct xfer_op_info *ai, char *why, size_t len)
{
	struct xfer_op_opts opts = { .timeout_ms = WAIT_MS };
	struct xfer_desc pd = { p->region, LEAD, size }, ad = { a->region, LEAD, size };
	uint64_t pop, aop;
	char *meta = NULL;
	int rc = read ? xfer_readable(p->c, &pd, 1, &opts, &pop, &meta) :
			xfer_writable(p->c, &pd, 1, &opts, &pop, &meta);

	if (rc < 0) {
		snprintf(why, len, "%s: %s (%s)", read ? "readable" : "writable", xfer_strerror(rc),
			 xfer_last_error(p->c));
		return -1;
	}
	rc = read ? xfer_read(a->c, meta, &ad, 1, &opts, &aop) :
		    xfer_write(a->c, meta, &ad, 1, &opts, &aop);
	free(meta);
	if (rc < 0) {
		snprintf(why, len, "%s refused: %s (%s)", read ? "read" : "write",
			 xfer_strerror(rc), xfer_last_error(a->c));
		xfer_release(p->c, pop);
		return -1;
	}
	rc = xfer_wait(a->c, aop, WAIT_MS, ai);
	if (rc == 0)
		rc = xfer_wait(p->c, pop, WAIT_MS, pi);
	xfer_release(a->c, aop);
	xfer_release(p->c, pop);
	if (rc < 0) {
		snprintf(why, len, "wait: %s", xfer_strerror(rc));
		return -1;
	}
	return 0;
}

static void result(const char *name, const char *why)
{
	if (why[0]) {
		printf("FAIL - %s (%s)\n", name, why);
		failures++;
	} else {
		printf("ok - %s\n", name);
	}
	fflush(stdout);
}

/* One byte-exact case: the passive end a file or not (@pfile), the active end (@afile). */
static void byte_case(struct xfer_client *pc, struct xfer_client *ac, bool read, bool pfile,
		      bool afile, uint64_t size)
{
	static uint32_t seed = 1;
	struct end p, a;
	struct xfer_op_info pi, ai;
	char name[200], why[512] = "";
	bool psrc = read;

	seed += 7;
	snprintf(name, sizeof(name), "%s: %s on the owner, %s on the active side, %" PRIu64 " B",
		 read ? "readable/read" : "writable/write",
		 pfile ? (direct ? "O_DIRECT file" : "file") : "memory",
		 afile ? (direct ? "O_DIRECT file" : "file") : "memory", size);
	if (end_open(&p, pc, pfile, psrc, size, seed, dir, "p.file", why, sizeof(why)) == 0 &&
	    end_open(&a, ac, afile, !psrc, size, seed, dir, "a.file", why, sizeof(why)) == 0 &&
	    run_pair(&p, &a, read, size, &pi, &ai, why, sizeof(why)) == 0 &&
	    check_info("passive", &pi, XFER_COMPLETE, 0, size, why, sizeof(why)) == 0 &&
	    check_info("active", &ai, XFER_COMPLETE, 0, size, why, sizeof(why)) == 0)
		end_check(psrc ? &a : &p, size, seed, why, sizeof(why));
	end_close(&p);
	end_close(&a);
	result(name, why);
}

/*
 * A failure case: @read or write of @size bytes where the end that is a file is cut short
 * (@truncate: its source file shrinks to 1 MiB + 100 after registration) or lies on SMALL_DIR
 * (a target that runs out of space). Both ops must end ERRORED with @err.
 */
static void fail_case(struct xfer_client *pc, struct xfer_client *ac, bool read, bool owner_file,
		      bool truncate, int err, uint64_t size)
{
	struct end p, a;
	struct xfer_op_info pi, ai;
	char name[200], why[512] = "";
	bool psrc = read, file_src = owner_file ? psrc : !psrc;

	snprintf(name, sizeof(name), "%s: the %s's %s file %s -> both ERRORED %s",
		 read ? "readable/read" : "writable/write", owner_file ? "owner" : "active side",
		 file_src ? "source" : "target",
		 truncate ? "truncated after registration" : "on a full filesystem",
		 xfer_strerror(-err));
	const char *pwhere = owner_file && !truncate ? small_dir : dir;
	const char *awhere = !owner_file && !truncate ? small_dir : dir;
	if (end_open(&p, pc, owner_file, psrc, size, 3, pwhere, "p.fail", why, sizeof(why)) ||
	    end_open(&a, ac, !owner_file, !psrc, size, 3, awhere, "a.fail", why, sizeof(why)))
		goto out;
	if (truncate && truncate64(owner_file ? p.path : a.path, p.head + MIB + 100) < 0) {
		snprintf(why, sizeof(why), "truncate: %s", strerror(errno));
		goto out;
	}
	if (run_pair(&p, &a, read, size, &pi, &ai, why, sizeof(why)) == 0 &&
	    check_info("passive", &pi, XFER_ERRORED, err, size, why, sizeof(why)) == 0)
		check_info("active", &ai, XFER_ERRORED, err, size, why, sizeof(why));
out:
	end_close(&p);
	end_close(&a);
	result(name, why);
}

/* Waits (up to 20 s) until @c's daemon has every staging buffer back; 0 or -1 with @why. */
static int staging_idle(struct xfer_client *c, const char *who, char *why, size_t len)
{
	char *res = NULL;

	for (int i = 0; i < 200; i++) {
		free(res);
		res = NULL;
		if (xfer_call(c, "list.devices", NULL, &res) < 0) {
			snprintf(why, len, "%s: list.devices failed", who);
			return -1;
		}
		const char *s = strstr(res, "\"staging\"");
		if (s && strstr(s, "\"in_use\":0") && strstr(res, "\"registered\":true")) {
			free(res);
			return 0;
		}
		usleep(100000);
	}
	snprintf(why, len, "%s: staging buffers still taken after 20 s: %.300s", who, res);
	free(res);
	return -1;
}

/*
 * -D: the pairings with O_DIRECT files. 5 MiB + 5 is several chunks of either node's staging
 * buffers (1 MiB, 256 KiB), drained into the target by the copy workers while the next ones move.
 */
static void direct_cases(struct xfer_client *pc, struct xfer_client *ac)
{
	const uint64_t sizes[] = { 1, 4096 + 3, 5 * MIB + 5 };
	char path[300], why[512] = "";
	uint64_t region = 0;

	/* A write-only O_DIRECT fd is refused at registration, the rule named. */
	snprintf(path, sizeof(path), "%s/wronly", dir);
	int w = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int fd = w >= 0 && ftruncate(w, 4 * DIRECT_ALIGN) == 0 ?
			 open(path, O_WRONLY | O_DIRECT | O_CLOEXEC) :
			 -1;
	int rc = fd < 0 ? -errno : xfer_region_register_file(pc, fd, 0, 0, 0, "wronly", &region);
	if (rc != -EBADF || !strstr(xfer_last_error(pc), "must be open for reading too"))
		snprintf(why, sizeof(why), "registration: %s (%s), expected EBADF naming the rule",
			 rc ? xfer_strerror(rc) : "accepted", rc ? xfer_last_error(pc) : "");
	if (region)
		xfer_region_deregister(pc, region, 1);
	if (fd >= 0)
		close(fd);
	if (w >= 0)
		close(w);
	unlink(path);
	result("a write-only O_DIRECT file region: refused (EBADF), the rule named", why);

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int read = 1; read >= 0; read--)
			for (int kinds = 1; kinds < 4; kinds++)
				byte_case(pc, ac, read, kinds & 1, kinds & 2, sizes[s]);
}

int main(int argc, char **argv)
{
	struct xfer_client *pc = NULL, *ac = NULL;
	uint64_t big = 0;
	char why[512] = "";

	direct = argc == 5 && strcmp(argv[1], "-D") == 0;
	if (direct) {
		dir = argv[1 + 1];
		argv += 2;
	} else if (argc < 5 || argc > 6) {
		fprintf(stderr, "usage: rdma_files PASSIVE_SOCKET ACTIVE_SOCKET DIR SMALL_DIR "
				"[BIG_BYTES]\n       rdma_files -D DIRECT_DIR PASSIVE_SOCKET "
				"ACTIVE_SOCKET\n");
		return 2;
	} else {
		dir = argv[3];
		small_dir = argv[4];
	}
	if (argc == 6)
		big = strtoull(argv[5], NULL, 0);
	if (xfer_connect(argv[1], "rdma_files-passive", &pc) < 0 ||
	    xfer_connect(argv[2], "rdma_files-active", &ac) < 0) {
		printf("FAIL - rdma_files setup (cannot reach the daemons)\n");
		return 1;
	}
	if (direct) {
		direct_cases(pc, ac);
		goto pools;
	}
	const uint64_t sizes[] = { 1, 4096 + 3, 3 * MIB + 5 };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int read = 1; read >= 0; read--)
			for (int kinds = 1; kinds < 4; kinds++) /* (memory to memory: elsewhere) */
				byte_case(pc, ac, read, kinds & 1, kinds & 2, sizes[s]);
	if (big)
		byte_case(pc, ac, true, true, true, big);
	/* (4 MiB: several chunks go before the cut at 1 MiB + 100; 3 MiB on a 1 MiB tmpfs) */
	fail_case(pc, ac, true, true, true, EIO, 4 * MIB);
	fail_case(pc, ac, false, false, true, EIO, 4 * MIB);
	fail_case(pc, ac, false, true, false, ENOSPC, 3 * MIB);
	fail_case(pc, ac, true, false, false, ENOSPC, 3 * MIB);
	/* The daemons still serve after the failures. */
	byte_case(pc, ac, true, true, false, 2 * MIB + 1);
pools:
	if (staging_idle(pc, "owner's daemon", why, sizeof(why)) == 0)
		staging_idle(ac, "active side's daemon", why, sizeof(why));
	result("every staging buffer of both daemons back in its pool", why);
	xfer_close(pc);
	xfer_close(ac);
	return failures ? 1 : 0;
}
