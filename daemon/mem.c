// SPDX-License-Identifier: MIT
/*
 * A region's memory: its kind (a mapped memfd, or a file moved by file I/O: struct
 * xd_mem_ops), the registrations transports made of it (RDMA memory regions), and the
 * references that keep both alive. It sits in the transport layer because transports hold
 * regions too (a transfer's pages, a memory window's), while registering a client's fd and
 * deciding who may use it is region.c's. It reaches the transports through d->transports, the
 * table main.c hands it, since transports call down into it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>
#include "transport.h"

#define XD_MINCORE_PAGES 4096 /* pages asked about per mincore() call (16 MiB of 4 KiB) */

/* A read(2)-style result of a socket call as this file's convention: bytes, or -errno. */
static ssize_t sock_result(ssize_t n)
{
	if (n > 0)
		return n;
	if (n == 0)
		return -ECONNRESET;
	return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/* ---- memfd: mapped ---- */

static ssize_t memfd_send(const struct xd_region *r, uint64_t off, size_t len, int sock, int *err,
			  char *why, size_t whylen)
{
	return sock_result(send(sock, r->base + off, len, MSG_NOSIGNAL | MSG_DONTWAIT));
}

static ssize_t memfd_recv(const struct xd_region *r, uint64_t off, size_t len, int sock,
			  const int pipefd[2], int *err, char *why, size_t whylen)
{
	return sock_result(recv(sock, r->base + off, len, MSG_DONTWAIT));
}

static void memfd_release(struct xd_region *r)
{
	/* A large mapping goes on a worker: unmapping it can take a large part of a second. */
	if (r->map && r->map_len > XD_UNMAP_INLINE_MAX && r->d->unmap_later &&
	    r->d->unmap_later(r->d, r->map, r->map_len) == 0)
		return;
	if (r->map && munmap(r->map, r->map_len) < 0)
		xd_log(XD_LOG_ERR, "munmap of region %llu: %s", (unsigned long long)r->id,
		       strerror(errno));
}

const struct xd_mem_ops xd_mem_memfd = {
	.name = "memfd",
	.mapped = true,
	.send = memfd_send,
	.recv = memfd_recv,
	.release = memfd_release,
};

/* ---- file: never mapped ---- */

static void file_short(const struct xd_region *r, uint64_t off, int *err, char *why, size_t whylen)
{
	*err = EIO;
	snprintf(why, whylen,
		 "the file of region %llu ends before byte %llu of its range (truncated under the "
		 "transfer?)",
		 (unsigned long long)r->id, (unsigned long long)off);
}

static void file_failed(const struct xd_region *r, const char *what, int e, int *err, char *why,
			size_t whylen)
{
	*err = e;
	snprintf(why, whylen, "%s the file of region %llu failed: %s", what,
		 (unsigned long long)r->id, strerror(e));
}

/*
 * sendfile from the page cache: the file's pages go to the socket without a copy through this
 * process. A read of pages not yet cached waits for the disk on the loop thread; tcp.c's write
 * budget bounds how much one turn takes.
 */
static ssize_t file_send(const struct xd_region *r, uint64_t off, size_t len, int sock, int *err,
			 char *why, size_t whylen)
{
	off_t pos = (off_t)(r->file_off + off);
	ssize_t n = sendfile(sock, r->fd, &pos, len);

	if (n > 0)
		return n;
	if (n == 0) {
		file_short(r, off, err, why, whylen);
		return 0;
	}
	if (errno == EAGAIN)
		return -EAGAIN;
	if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT)
		return -errno;
	file_failed(r, "reading", errno, err, why, whylen);
	return 0;
}

/* Empties @pipefd of bytes that could not go to the file (dropped). */
static void pipe_drain(const int pipefd[2])
{
	char buf[4096];

	while (read(pipefd[0], buf, sizeof(buf)) > 0) {
	}
}

/*
 * Socket -> pipe -> file with splice: the socket's pages are moved into the pipe, then copied
 * once into the page cache (read + pwrite would copy twice). The pipe is drained before
 * returning, so the next call finds it empty.
 */
static ssize_t file_recv(const struct xd_region *r, uint64_t off, size_t len, int sock,
			 const int pipefd[2], int *err, char *why, size_t whylen)
{
	ssize_t n = splice(sock, NULL, pipefd[1], NULL, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);

	if (n <= 0)
		return sock_result(n);
	loff_t pos = (loff_t)(r->file_off + off);
	for (ssize_t left = n; left > 0;) {
		ssize_t w = splice(pipefd[0], NULL, r->fd, &pos, (size_t)left, SPLICE_F_MOVE);
		if (w <= 0) {
			file_failed(r, "writing", w == 0 ? EIO : errno, err, why, whylen);
			pipe_drain(pipefd);
			break;
		}
		left -= w;
	}
	return n;
}

/* cachestat(2) (Linux 6.5): how much of a file range is in the page cache. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct xd_cachestat_range {
	uint64_t off, len;
};
struct xd_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/*
 * Every page of the range is cached: sendfile copies it to the socket without waiting for the
 * disk, cheap enough for the loop. On a kernel without cachestat, never (a worker sends it).
 */
static bool file_send_cached(const struct xd_region *r, uint64_t off, size_t len)
{
	uint64_t pos = r->file_off + off, page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct xd_cachestat_range range = { pos, len };
	struct xd_cachestat cs;

	if (len == 0)
		return true;
	if (!r->fs_local)
		return false; /* (FUSE may ask its process for attributes even of cached pages) */
	if (syscall(__NR_cachestat, r->fd, &range, &cs, 0) < 0)
		return false;
	return cs.nr_cache >= (pos + len - 1) / page - pos / page + 1;
}

/*
 * Closers: detached threads that close fds whose close(2) may never return (a FUSE FLUSH the
 * file system does not answer). At most XD_CLOSERS_MAX: a hostile file system could otherwise
 * hold one thread per fd a client sends. Past that, fds wait in close_queue for the next closer
 * that gets free (each queued fd is still one of the daemon's: its fd limit bounds the queue).
 */
#define XD_CLOSERS_MAX 32
#define XD_CLOSER_STACK (64u << 10)

static pthread_mutex_t closers_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned closers_alive;
static int *close_queue; /* (a LIFO: any order will do) */
static size_t close_queued, close_queue_cap;

/* Under closers_mu: the next fd to close, or -1 (the closer then ends, counted out). */
static int closer_next(void)
{
	if (close_queued > 0)
		return close_queue[--close_queued];
	closers_alive--;
	return -1;
}

static void *close_main(void *arg)
{
	int fd = (int)(intptr_t)arg;

	while (fd >= 0) {
		close(fd);
		pthread_mutex_lock(&closers_mu);
		fd = closer_next();
		pthread_mutex_unlock(&closers_mu);
	}
	return NULL;
}

/* Under closers_mu: keeps @fd for a closer. Returns 0, or -ENOMEM. */
static int close_enqueue(int fd)
{
	if (close_queued == close_queue_cap) {
		size_t cap = close_queue_cap ? 2 * close_queue_cap : 64;
		int *q = realloc(close_queue, cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		close_queue = q;
		close_queue_cap = cap;
	}
	close_queue[close_queued++] = fd;
	return 0;
}

static int closer_start(int fd)
{
	pthread_attr_t at;
	pthread_t t;
	int rc;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, XD_CLOSER_STACK);
	rc = pthread_create(&t, &at, close_main, (void *)(intptr_t)fd);
	pthread_attr_destroy(&at);
	return -rc;
}

int xd_mem_close_later(int fd)
{
	int rc = 0;

	if (fd < 0)
		return 0;
	pthread_mutex_lock(&closers_mu);
	if (closers_alive >= XD_CLOSERS_MAX) {
		rc = close_enqueue(fd);
		pthread_mutex_unlock(&closers_mu);
		if (rc == 0)
			return 0;
	} else {
		closers_alive++;
		pthread_mutex_unlock(&closers_mu);
		if ((rc = closer_start(fd)) == 0)
			return 0;
		pthread_mutex_lock(&closers_mu);
		closers_alive--;
		pthread_mutex_unlock(&closers_mu);
	}
	xd_log(XD_LOG_WARN, "no thread to close a file's fd (%s): closed on the loop",
	       strerror(-rc));
	close(fd);
	return rc;
}

/*
 * Whether closing @fd cannot wait in a file system: a memfd (shmem has no flush), a pipe or a
 * socket (their own file operations, whatever file system a FIFO is on). Asked without a call
 * into the file system: statx AT_STATX_DONT_SYNC answers from the cached inode.
 */
static bool close_is_quick(int fd)
{
	struct statx stx;

	if (fcntl(fd, F_GET_SEALS) >= 0)
		return true;
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) < 0 ||
	    !(stx.stx_mask & STATX_TYPE))
		return false;
	return S_ISFIFO(stx.stx_mode) || S_ISSOCK(stx.stx_mode);
}

int xd_close_client_fd(int fd)
{
	if (fd < 0)
		return 0;
	if (close_is_quick(fd)) {
		close(fd);
		return 0;
	}
	return xd_mem_close_later(fd);
}

static void file_release(struct xd_region *r)
{
	if (r->fd >= 0 && r->fs_local)
		close(r->fd);
	else if (r->fd >= 0)
		xd_mem_close_later(r->fd);
	r->fd = -1;
}

const struct xd_mem_ops xd_mem_file = {
	.name = "file",
	.mapped = false,
	.send = file_send,
	.recv = file_recv,
	.release = file_release,
	.send_cached = file_send_cached,
};

/* ---- file opened O_DIRECT: aligned bounce buffers, edge blocks read back ---- */

#define XD_DIRECT_PIECE (256u << 10) /* bytes per bounce: one socket call, one copy step */

/* The span of the file, aligned to its direct I/O blocks, that covers [pos, pos + n). */
struct dio_span {
	uint64_t start, end;
};

static struct dio_span dio_span(const struct xd_region *r, uint64_t pos, size_t n)
{
	uint64_t a = r->dio_align;

	return (struct dio_span){ pos / a * a, (pos + n + a - 1) / a * a };
}

static uint8_t *dio_alloc(const struct xd_region *r, size_t len)
{
	size_t align = r->dio_mem_align > 4096 ? r->dio_mem_align : 4096;
	void *p = NULL;

	return posix_memalign(&p, align, len) ? NULL : p;
}

/* Exactly @len bytes at file position @pos. Returns 0, -ENODATA at the file's end, or -errno. */
static int dio_pread(const struct xd_region *r, uint8_t *buf, size_t len, uint64_t pos)
{
	while (len > 0) {
		ssize_t n = pread(r->fd, buf, len, (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n ? -errno : -ENODATA;
		buf += n;
		pos += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int dio_pwrite(const struct xd_region *r, const uint8_t *buf, size_t len, uint64_t pos)
{
	while (len > 0) {
		ssize_t n = pwrite(r->fd, buf, len, (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n ? -errno : -EIO;
		buf += n;
		pos += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static void dio_failed(const struct xd_region *r, uint64_t off, int rc, const char *what, int *err,
		       char *why, size_t whylen)
{
	if (rc == -ENODATA)
		file_short(r, off, err, why, whylen);
	else
		file_failed(r, what, -rc, err, why, whylen);
}

/*
 * Fills the bytes of @s's first and last blocks outside [pos, pos + n) in @b (which holds @s)
 * from the file, so that writing @s back changes only [pos, pos + n): an unaligned piece is
 * read, modified and written whole. Pieces of one transfer are written one after the other
 * (the loop thread, or one copy worker), so no two of them modify one block at once.
 */
static int dio_edges(const struct xd_region *r, uint8_t *b, struct dio_span s, uint64_t pos,
		     size_t n)
{
	uint64_t a = r->dio_align;
	uint8_t *blk;
	int rc = 0;

	if (pos == s.start && pos + n == s.end)
		return 0;
	blk = dio_alloc(r, a);
	if (!blk)
		return -ENOMEM;
	if (pos > s.start && !(rc = dio_pread(r, blk, a, s.start)))
		memcpy(b, blk, pos - s.start);
	if (!rc && pos + n < s.end && !(rc = dio_pread(r, blk, a, s.end - a)))
		memcpy(b + (pos + n - s.start), blk + (pos + n - (s.end - a)), s.end - (pos + n));
	free(blk);
	return rc;
}

/*
 * Reads [@off, +@n) of @r into a new bounce (free() it); *@head is where @off is in it.
 * Returns the bounce, or NULL with *@rc -errno.
 */
static uint8_t *dio_read(const struct xd_region *r, uint64_t off, size_t n, size_t *head, int *rc)
{
	uint64_t pos = r->file_off + off;
	struct dio_span s = dio_span(r, pos, n);
	uint8_t *b = dio_alloc(r, s.end - s.start);

	*rc = b ? dio_pread(r, b, s.end - s.start, s.start) : -ENOMEM;
	if (*rc) {
		free(b);
		return NULL;
	}
	*head = pos - s.start;
	return b;
}

/* Writes @n bytes of @src at [@off, +@n) of @r. Returns 0 or -errno (-ENODATA: truncated). */
static int dio_write(const struct xd_region *r, uint64_t off, const uint8_t *src, size_t n)
{
	uint64_t pos = r->file_off + off;
	struct dio_span s = dio_span(r, pos, n);
	uint8_t *b = dio_alloc(r, s.end - s.start);
	int rc;

	if (!b)
		return -ENOMEM;
	memcpy(b + (pos - s.start), src, n);
	rc = dio_edges(r, b, s, pos, n);
	if (!rc)
		rc = dio_pwrite(r, b, s.end - s.start, s.start);
	free(b);
	return rc;
}

/*
 * O_DIRECT file -> socket: a piece read into an aligned bounce and sent from it. What the
 * socket does not take is read again by the next call (a bounce is not kept between calls).
 */
static ssize_t direct_send(const struct xd_region *r, uint64_t off, size_t len, int sock, int *err,
			   char *why, size_t whylen)
{
	size_t n = len < XD_DIRECT_PIECE ? len : XD_DIRECT_PIECE, head;
	int rc;
	uint8_t *b = dio_read(r, off, n, &head, &rc);

	if (!b) {
		dio_failed(r, off, rc, "reading", err, why, whylen);
		return 0;
	}
	ssize_t w = sock_result(send(sock, b + head, n, MSG_NOSIGNAL | MSG_DONTWAIT));
	free(b);
	return w;
}

/* Socket -> O_DIRECT file: received into an aligned bounce, its edge blocks read back, written. */
static ssize_t direct_recv(const struct xd_region *r, uint64_t off, size_t len, int sock,
			   const int pipefd[2], int *err, char *why, size_t whylen)
{
	uint64_t pos = r->file_off + off;
	size_t n = len < XD_DIRECT_PIECE ? len : XD_DIRECT_PIECE;
	struct dio_span s = dio_span(r, pos, n);
	uint8_t *b = dio_alloc(r, s.end - s.start);

	if (!b)
		return -ENOMEM;
	ssize_t got = recv(sock, b + (pos - s.start), n, MSG_DONTWAIT);
	if (got <= 0) {
		free(b);
		return sock_result(got);
	}
	s = dio_span(r, pos, (size_t)got);
	int rc = dio_edges(r, b, s, pos, (size_t)got);
	if (!rc)
		rc = dio_pwrite(r, b, s.end - s.start, s.start);
	if (rc)
		dio_failed(r, off, rc, "writing", err, why, whylen);
	free(b);
	return got;
}

const struct xd_mem_ops xd_mem_file_direct = {
	.name = "file",
	.mapped = false,
	.send = direct_send,
	.recv = direct_recv,
	.release = file_release,
};

int xd_mem_file_direct_check(struct xd_region *r, int fd, uint64_t off, uint64_t len, char *msg,
			     size_t msglen)
{
	struct statx stx;
	int fl = fcntl(fd, F_GETFL);

	r->dio_align = r->dio_mem_align = 0;
	if (fl < 0 || !(fl & O_DIRECT))
		return 0;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) < 0 ||
	    !(stx.stx_mask & STATX_DIOALIGN) || stx.stx_dio_offset_align == 0) {
		snprintf(msg, msglen,
			 "the fd is O_DIRECT but its file system reports no direct I/O alignment "
			 "(statx STATX_DIOALIGN): it does not do O_DIRECT for this file");
		return -EINVAL;
	}
	/*
	 * Note that a piece written O_DIRECT that does not cover whole blocks reads its edge
	 * blocks back first (dio_edges()): a write-only descriptor would fail that mid-transfer.
	 */
	if ((fl & O_ACCMODE) == O_WRONLY) {
		snprintf(msg, msglen,
			 "an O_DIRECT file region must be open for reading too (O_RDWR, not "
			 "O_WRONLY): an unaligned write reads its edge blocks back");
		return -EBADF;
	}
	uint32_t a = stx.stx_dio_offset_align;
	if (off % a || len % a) {
		snprintf(
			msg, msglen,
			"an O_DIRECT file region's offset and length must be multiples of %u bytes "
			"(its file system's direct I/O alignment); offset %llu, length %llu",
			a, (unsigned long long)off, (unsigned long long)len);
		return -EINVAL;
	}
	r->dio_align = a;
	r->dio_mem_align = stx.stx_dio_mem_align;
	return 1;
}

/*
 * Client memory <-> a bounce, by the kernel (process_vm_readv/writev on this very process): a
 * page that vanished under the copy (hugetlb hole punched) is EFAULT here, not a SIGBUS on a
 * copy worker. Returns 0 or -errno.
 */
static int mapped_move(uint8_t *dst, const uint8_t *src, size_t n, bool from_map)
{
	struct iovec local = { from_map ? dst : (void *)src, n };
	struct iovec remote = { from_map ? (void *)src : dst, n };
	ssize_t w = from_map ? process_vm_readv(getpid(), &local, 1, &remote, 1, 0) :
			       process_vm_writev(getpid(), &local, 1, &remote, 1, 0);

	if (w < 0)
		return -errno;
	return (size_t)w == n ? 0 : -EFAULT;
}

/* ---- staging buffers: mapped memory of the daemon's own (RDMA staging, rdma.c) ---- */

static void staging_release(struct xd_region *r)
{
	/* The pool owns the buffers and frees them with its device. */
}

const struct xd_mem_ops xd_mem_staging = {
	.name = "staging",
	.mapped = true,
	.release = staging_release,
};

/* pread into a mapping until @len bytes are in; EOF first is a file shorter than its region. */
static int file_to_mem(uint8_t *dst, const struct xd_region *src, uint64_t soff, uint64_t len,
		       uint64_t *done, char *why, size_t whylen)
{
	int err = 0;

	while (len > 0) {
		ssize_t n = pread(src->fd, dst, len, (off_t)(src->file_off + soff));
		if (n == 0)
			file_short(src, soff, &err, why, whylen);
		else if (n < 0 && errno != EINTR)
			file_failed(src, "reading", errno, &err, why, whylen);
		if (err)
			return err;
		if (n < 0)
			continue;
		dst += n;
		soff += (uint64_t)n;
		len -= (uint64_t)n;
		*done += (uint64_t)n;
	}
	return 0;
}

static int mem_to_file(const struct xd_region *dst, uint64_t doff, const uint8_t *src, uint64_t len,
		       uint64_t *done, char *why, size_t whylen)
{
	int err = 0;

	while (len > 0) {
		ssize_t n = pwrite(dst->fd, src, len, (off_t)(dst->file_off + doff));
		if (n <= 0 && !(n < 0 && errno == EINTR)) {
			file_failed(dst, "writing", n == 0 ? EIO : errno, &err, why, whylen);
			return err;
		}
		if (n < 0)
			continue;
		src += n;
		doff += (uint64_t)n;
		len -= (uint64_t)n;
		*done += (uint64_t)n;
	}
	return 0;
}

/* copy_file_range: the kernel copies (or reflinks) without the bytes passing through here. */
static int file_to_file(const struct xd_region *dst, uint64_t doff, const struct xd_region *src,
			uint64_t soff, uint64_t len, uint64_t *done, char *why, size_t whylen)
{
	int err = 0;

	while (len > 0) {
		loff_t in = (loff_t)(src->file_off + soff), out = (loff_t)(dst->file_off + doff);
		ssize_t n = copy_file_range(src->fd, &in, dst->fd, &out, len, 0);
		if (n == 0)
			file_short(src, soff, &err, why, whylen);
		else if (n < 0 && errno != EINTR)
			file_failed(dst, "copying into", errno, &err, why, whylen);
		if (err)
			return err;
		if (n < 0)
			continue;
		soff += (uint64_t)n;
		doff += (uint64_t)n;
		len -= (uint64_t)n;
		*done += (uint64_t)n;
	}
	return 0;
}

/* One piece of a file side into @buf (pread, or through a bounce if O_DIRECT). */
static int piece_read(const struct xd_region *src, uint64_t soff, uint8_t *buf, size_t n, char *why,
		      size_t whylen)
{
	uint64_t ignored = 0;
	int rc, err = 0;
	size_t head;

	if (src->mem->mapped)
		rc = mapped_move(buf, src->base + soff, n, true);
	else if (!src->dio_align)
		return file_to_mem(buf, src, soff, n, &ignored, why, whylen);
	else {
		uint8_t *b = dio_read(src, soff, n, &head, &rc);
		if (b)
			memcpy(buf, b + head, n);
		free(b);
	}
	if (rc)
		dio_failed(src, soff, rc, "reading", &err, why, whylen);
	return err;
}

static int piece_write(const struct xd_region *dst, uint64_t doff, const uint8_t *buf, size_t n,
		       char *why, size_t whylen)
{
	uint64_t ignored = 0;
	int rc, err = 0;

	if (dst->mem->mapped)
		rc = mapped_move(dst->base + doff, buf, n, false);
	else if (!dst->dio_align)
		return mem_to_file(dst, doff, buf, n, &ignored, why, whylen);
	else
		rc = dio_write(dst, doff, buf, n);
	if (rc)
		dio_failed(dst, doff, rc, "writing", &err, why, whylen);
	return err;
}

/* A copy with an O_DIRECT side: piece by piece through a buffer of this daemon's. */
static int copy_direct(const struct xd_region *dst, uint64_t doff, const struct xd_region *src,
		       uint64_t soff, uint64_t len, uint64_t *done, char *why, size_t whylen)
{
	uint8_t *buf = malloc(XD_DIRECT_PIECE);
	int err = 0;

	if (!buf) {
		snprintf(why, whylen, "out of memory for an O_DIRECT copy");
		return ENOMEM;
	}
	while (len > 0 && !err) {
		size_t n = len < XD_DIRECT_PIECE ? (size_t)len : XD_DIRECT_PIECE;
		err = piece_read(src, soff, buf, n, why, whylen);
		if (!err)
			err = piece_write(dst, doff, buf, n, why, whylen);
		if (err)
			break;
		soff += n;
		doff += n;
		len -= n;
		*done += n;
	}
	free(buf);
	return err;
}

int xd_mem_copy(const struct xd_region *dst, uint64_t doff, const struct xd_region *src,
		uint64_t soff, uint64_t len, uint64_t *done, char *why, size_t whylen)
{
	if (src->dio_align || dst->dio_align)
		return copy_direct(dst, doff, src, soff, len, done, why, whylen);
	if (src->mem->mapped)
		return mem_to_file(dst, doff, src->base + soff, len, done, why, whylen);
	if (dst->mem->mapped)
		return file_to_mem(dst->base + doff, src, soff, len, done, why, whylen);
	return file_to_file(dst, doff, src, soff, len, done, why, whylen);
}

int xd_mem_sync(const struct xd_region *r)
{
	if (r->mem->mapped || !r->sync)
		return 0;
	return fdatasync(r->fd) < 0 ? errno : 0;
}

int xd_region_register_transports(struct xd_region *r, char *msg, size_t len)
{
	if (!r->mem->mapped)
		return 0; /* a file has no pages to register: it is never mapped */
	for (int i = 0; r->d->transports[i]; i++) {
		const struct xd_transport_ops *t = r->d->transports[i];
		int rc = t->register_region ? t->register_region(r->d, r, msg, len) : 0;
		if (rc < 0) {
			xd_region_deregister_transports(r);
			return rc;
		}
	}
	return 0;
}

bool xd_region_register_blocks(const struct xd_region *r)
{
	for (int i = 0; r->mem->mapped && r->d->transports[i]; i++) {
		const struct xd_transport_ops *t = r->d->transports[i];
		if (t->register_blocks && t->register_blocks(r->d, r->length))
			return true;
	}
	return false;
}

void xd_region_deregister_transports(struct xd_region *r)
{
	for (int i = 0; r->d->transports[i]; i++)
		if (r->d->transports[i]->deregister_region)
			r->d->transports[i]->deregister_region(r);
}

json_t *xd_region_devices_json(const struct xd_region *r)
{
	json_t *all = json_array();

	for (int i = 0; all && r->d->transports[i]; i++) {
		if (!r->d->transports[i]->region_json)
			continue;
		json_t *mine = r->d->transports[i]->region_json(r->d, r);
		int rc = mine ? json_array_extend(all, mine) : -1;
		json_decref(mine);
		if (rc < 0) {
			json_decref(all);
			return NULL;
		}
	}
	return all;
}

void xd_region_uncharge(struct xd_region *r)
{
	if (!r->charged)
		return;
	/* Bytes first: a uid's record goes once it holds nothing (a file charges no bytes). */
	if (r->charge)
		xd_uncharge(r->d, NULL, r->uid, XD_RES_BYTES, r->charge);
	if (r->fd_charged)
		xd_uncharge(r->d, NULL, r->uid, XD_RES_FDS, 1);
	xd_uncharge(r->d, NULL, r->uid, XD_RES_REGIONS, 1);
	r->charge = 0;
	r->charged = r->fd_charged = false;
}

void xd_region_ref(struct xd_region *r)
{
	r->refs++;
}

void xd_region_unref(struct xd_region *r)
{
	if (!r || --r->refs > 0)
		return;
	xd_region_deregister_transports(r); /* before the unmap: registrations pin these pages */
	r->mem->release(r);
	xd_region_uncharge(r);
	free(r);
}

bool xd_pages_resident(void *addr, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), step = XD_MINCORE_PAGES * page;
	unsigned char vec[XD_MINCORE_PAGES];

	for (size_t off = 0; off < len; off += step) {
		size_t n = len - off < step ? len - off : step, pages = (n + page - 1) / page;
		if (mincore((uint8_t *)addr + off, n, vec) < 0)
			return false; /* e.g. ENOMEM on a range not mapped: not known to be there */
		for (size_t i = 0; i < pages; i++)
			if (!(vec[i] & 1))
				return false;
	}
	return true;
}

/*
 * The whole memfd is allocated (st_blocks counts every page it holds, 512-byte units) and the
 * machine has no swap, so none of those pages can be anywhere but in memory: free to ask,
 * the caller has fstat()ed already, and the common case (a buffer the client filled).
 */
static bool memfd_all_in_memory(const struct stat *st)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t need = ((uint64_t)st->st_size + page - 1) & ~(page - 1);
	struct sysinfo si;

	if (st->st_blocks < 0 || (uint64_t)st->st_blocks * 512 < need)
		return false;
	return sysinfo(&si) == 0 && si.totalswap == 0;
}

/* cachestat(2) of the pages covering [off, +len) of @fd: 1 all cached, 0 not, -1 can't tell. */
static int memfd_range_cached(int fd, uint64_t off, uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t first = off / page, last = (off + len - 1) / page;
	struct xd_cachestat_range range = { first * page, (last - first + 1) * page };
	struct xd_cachestat cs;

	if (syscall(__NR_cachestat, fd, &range, &cs, 0) < 0)
		return -1; /* ENOSYS before Linux 6.5; EOPNOTSUPP for hugetlb */
	return cs.nr_cache >= last - first + 1;
}

bool xd_memfd_resident(int fd, const struct stat *st, uint64_t off, uint64_t len, void *map,
		       size_t map_len)
{
	int cached;

	if (len == 0 || memfd_all_in_memory(st))
		return true;
	cached = memfd_range_cached(fd, off, len);
	if (cached >= 0)
		return cached;
	return xd_pages_resident(map, map_len);
}
