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
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
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

static void file_release(struct xd_region *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
}

const struct xd_mem_ops xd_mem_file = {
	.name = "file",
	.mapped = false,
	.send = file_send,
	.recv = file_recv,
	.release = file_release,
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

int xd_mem_copy(const struct xd_region *dst, uint64_t doff, const struct xd_region *src,
		uint64_t soff, uint64_t len, uint64_t *done, char *why, size_t whylen)
{
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
	xd_uncharge(r->d, NULL, r->uid, XD_RES_REGIONS, 1);
	r->charge = 0;
	r->charged = false;
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
