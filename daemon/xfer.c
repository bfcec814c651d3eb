// SPDX-License-Identifier: MIT
/*
 * One cross-node transfer's bytes: where they are (segments of regions, each referenced), the
 * cursor that cuts them into chunks for the peer set's round-robin queue, and the counts of
 * what left and landed. Transports call these; what a count means (DONE, completion) is told
 * upward through d->xfer_events.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "transport.h"
#include "xp_peer.h"

void xd_xfer_ref(struct xd_xfer *x)
{
	x->refs++;
}

void xd_xfer_unref(struct xd_xfer *x)
{
	if (!x || --x->refs > 0)
		return;
	if (x->on_free)
		x->on_free(x);
	for (uint32_t i = 0; i < x->nsegs; i++)
		xd_region_unref(x->segs[i].region);
	free(x->segs);
	free(x->rsegs);
	free(x);
}

struct xd_xfer *xd_xfer_find(struct xd_peer *p, uint64_t id, bool active)
{
	return XD_IDMAP_OBJ(xd_idmap_get(&p->xfer_ids[active], id), struct xd_xfer, idnode);
}

bool xd_xfer_live(const struct xd_xfer *x)
{
	/* (a window's landing or get reply has no op at the owner: alive until revoked) */
	return x->op != NULL || (x->wfast && !x->active && !x->wdrop);
}

bool xd_xfer_has_more(const struct xd_xfer *x)
{
	return x->next_off < x->length;
}

uint64_t xd_xfer_bytes(const struct xd_xfer *x)
{
	return x->source ? x->sent : x->received;
}

/* ---- the peer set's send queue ---- */

void xd_xfer_sendq_insert(struct xd_xfer_list *q, struct xd_xfer *x)
{
	if (!x->queued && x->next_off < x->length) {
		TAILQ_INSERT_TAIL(q, x, send_link);
		x->queued = true;
	}
}

void xd_xfer_sendq_remove(struct xd_xfer_list *q, struct xd_xfer *x)
{
	if (x->queued) {
		TAILQ_REMOVE(q, x, send_link);
		x->queued = false;
	}
}

struct xd_xfer *xd_xfer_sendq_next(struct xd_xfer_list *q, uint32_t via)
{
	struct xd_xfer *x;

	TAILQ_FOREACH(x, q, send_link)
		if (!via || x->via == via)
			break;
	if (x) {
		TAILQ_REMOVE(q, x, send_link);
		TAILQ_INSERT_TAIL(q, x, send_link); /* round-robin: one chunk per turn */
	}
	return x;
}

void xd_xfer_advance(struct xd_xfer *x, uint64_t len)
{
	x->next_off += len;
	if (x->next_off == x->length)
		xd_xfer_sendq_remove(&x->peer->sendq, x);
}

uint32_t xd_xfer_next_chunk(struct xd_xfer *x, uint32_t max, uint64_t *off, uint64_t *xfer,
			    uint8_t *flags)
{
	uint64_t left = x->length - x->next_off;
	uint32_t len = left < max ? (uint32_t)left : max;

	*off = x->next_off;
	*xfer = x->id;
	*flags = x->active ? XP_PEER_FROM_ACTIVE : 0;
	xd_xfer_advance(x, len);
	return len;
}

uint32_t xd_xfer_slice(const struct xd_xfer *x, uint64_t off, uint64_t len, struct xd_seg *out,
		       uint32_t max)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < x->nsegs && len > 0 && n < max; i++) {
		const struct xd_seg *s = &x->segs[i];
		if (off >= s->length) {
			off -= s->length;
			continue;
		}
		uint64_t take = s->length - off < len ? s->length - off : len;
		out[n++] = (struct xd_seg){ s->region, s->offset + off, take };
		len -= take;
		off = 0;
	}
	return n;
}

int xd_xfer_iov(const struct xd_xfer *x, uint64_t off, uint64_t len, struct iovec *iov, int max)
{
	struct xd_seg segs[XD_XFER_IOV_MAX];
	uint32_t n = xd_xfer_slice(x, off, len, segs,
				   max < XD_XFER_IOV_MAX ? (uint32_t)max : XD_XFER_IOV_MAX);

	for (uint32_t i = 0; i < n; i++)
		iov[i] = (struct iovec){ segs[i].region->base + segs[i].offset, segs[i].length };
	return (int)n;
}

/* ---- bytes of any memory kind (mem.c) ---- */

bool xd_xfer_mapped(const struct xd_xfer *x)
{
	for (uint32_t i = 0; i < x->nsegs; i++)
		if (!x->segs[i].region->mem->mapped)
			return false;
	return true;
}

bool xd_xfer_may_hang(const struct xd_xfer *x)
{
	for (uint32_t i = 0; i < x->nsegs; i++) {
		const struct xd_region *r = x->segs[i].region;
		if (!r->mem->mapped && !r->fs_local)
			return true;
	}
	return false;
}

/* The segment holding transfer offset @off, and the offset in it; NULL past the end. */
static const struct xd_seg *seg_at(const struct xd_xfer *x, uint64_t *off)
{
	for (uint32_t i = 0; i < x->nsegs; i++) {
		if (*off < x->segs[i].length)
			return &x->segs[i];
		*off -= x->segs[i].length;
	}
	return NULL;
}

/* What goes out in place of a failed region's bytes: the frame's length is promised. */
static const uint8_t xfer_zeros[64 * 1024];

ssize_t xd_xfer_send(struct xd_xfer *x, uint64_t off, uint64_t len, int sock)
{
	if (x->io_err) {
		size_t n = len < sizeof(xfer_zeros) ? (size_t)len : sizeof(xfer_zeros);
		ssize_t w = send(sock, xfer_zeros, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		return w >= 0 ? w : errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	uint64_t in = off;
	const struct xd_seg *s = seg_at(x, &in);
	if (!s)
		return -EINVAL;
	uint64_t n = s->length - in < len ? s->length - in : len;
	ssize_t w = s->region->mem->send(s->region, s->offset + in, (size_t)n, sock, &x->io_err,
					 x->io_why, sizeof(x->io_why));
	/* A region that failed before moving anything: the zeros start now. */
	return w == 0 && x->io_err ? xd_xfer_send(x, off, len, sock) : w;
}

bool xd_xfer_send_cached(const struct xd_xfer *x, uint64_t off, uint64_t len)
{
	uint64_t in = off;
	const struct xd_seg *s = seg_at(x, &in);

	if (x->io_err || !s || s->region->mem->mapped)
		return true; /* (zeros, or nothing to send: no disk either way) */
	uint64_t n = s->length - in < len ? s->length - in : len;
	return s->region->mem->send_cached &&
	       s->region->mem->send_cached(s->region, s->offset + in, (size_t)n);
}

ssize_t xd_xfer_recv(struct xd_xfer *x, uint64_t off, uint64_t len, int sock, const int pipefd[2],
		     void *scratch, size_t scratchlen)
{
	if (x->io_err) {
		ssize_t r = read(sock, scratch, len < scratchlen ? (size_t)len : scratchlen);
		return r > 0 ? r : r == 0 ? -ECONNRESET : errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	const struct xd_seg *s = seg_at(x, &off);
	if (!s)
		return -EINVAL;
	uint64_t n = s->length - off < len ? s->length - off : len;
	ssize_t r = s->region->mem->recv(s->region, s->offset + off, (size_t)n, sock, pipefd,
					 &x->io_err, x->io_why, sizeof(x->io_why));
	return r;
}

void xd_xfer_io_failed(struct xd_xfer *x)
{
	if (x->io_told)
		return;
	x->io_told = true;
	x->peer->d->xfer_events->io_failed(x);
}

/* ---- counts, told upward ---- */

void xd_xfer_data_sent(struct xd_xfer *x, uint32_t len)
{
	x->sent += len;
	x->peer->d->xfer_events->data_sent(x);
}

void xd_xfer_data_received(struct xd_xfer *x, uint32_t len)
{
	x->received += len;
	x->peer->d->xfer_events->data_received(x);
}

void xd_xfer_landing(struct xd_xfer *x)
{
	x->landing = true;
}

void xd_xfer_landed(struct xd_daemon *d, struct xd_xfer *x)
{
	x->landing = false;
	d->xfer_events->landed(x);
}

void xd_xfer_request_posted(struct xd_xfer *x)
{
	x->requests_out++;
}

void xd_xfer_request_done(struct xd_xfer *x)
{
	x->requests_out--;
	x->peer->d->xfer_events->request_done(x);
}

void xd_xfer_all_posted(struct xd_xfer *x)
{
	x->peer->d->xfer_events->all_posted(x);
}
