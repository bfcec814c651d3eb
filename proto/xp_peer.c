// SPDX-License-Identifier: MIT
/* The peer protocol's 24-byte header, packed little-endian whatever the host order. */
#include <errno.h>
#include <string.h>
#include "xp_peer.h"

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

void xp_peer_hdr_pack(const struct xp_peer_hdr *h, uint8_t out[XP_PEER_HDR_LEN])
{
	out[0] = h->type;
	out[1] = h->flags;
	put_le(out + 2, h->credits, 2);
	put_le(out + 4, h->length, 4);
	put_le(out + 8, h->xfer, 8);
	put_le(out + 16, h->offset, 8);
}

void xp_peer_hdr_unpack(const uint8_t in[XP_PEER_HDR_LEN], struct xp_peer_hdr *h)
{
	h->type = in[0];
	h->flags = in[1];
	h->credits = (uint16_t)get_le(in + 2, 2);
	h->length = (uint32_t)get_le(in + 4, 4);
	h->xfer = get_le(in + 8, 8);
	h->offset = get_le(in + 16, 8);
}

const char *xp_peer_type_name(int type)
{
	switch (type) {
#define XP_PEER_TYPE_CASE(name, value) \
	case value:                    \
		return #name;
		XP_PEER_TYPES(XP_PEER_TYPE_CASE)
#undef XP_PEER_TYPE_CASE
	}
	return "UNKNOWN";
}

/* Whether a binary pairing frame (§10.8) has its type's length. */
static bool bin_len_valid(const struct xp_peer_hdr *h)
{
	switch (h->type) {
	case XP_PEER_CLAIM:
		return h->length == XP_CLAIM_BIN_FIXED + XP_ID_BYTES ||
		       h->length == XP_CLAIM_BIN_FIXED + XP_CLAIM_BIN_PROOF_LEN;
	case XP_PEER_CLAIM_OK:
		return h->length == XP_CLAIM_OK_BIN_LEN;
	case XP_PEER_DONE:
		return h->length == XP_DONE_BIN_LEN;
	case XP_PEER_DONE_ACK:
		return h->length == 0;
	default:
		return false; /* no other message has a binary layout */
	}
}

bool xp_peer_hdr_valid(const struct xp_peer_hdr *h)
{
	if (h->flags & XP_PEER_BINARY)
		return bin_len_valid(h);
	if (h->type < XP_PEER_HELLO || h->type > XP_PEER_TYPE_MAX)
		return false;
	if (h->type == XP_PEER_DATA)
		return h->length > 0 && h->length <= XP_PEER_MAX_DATA;
	if (h->type == XP_PEER_WPUT)
		return h->length > XP_WIN_PREFIX_LEN &&
		       h->length <= XP_WIN_MAX_META + XP_PEER_MAX_DATA;
	if (h->type == XP_PEER_WGET)
		return h->length >= XP_WIN_PREFIX_LEN && h->length <= XP_WIN_MAX_META;
	if (h->type == XP_PEER_WACK)
		return h->length == 0;
	return h->length <= XP_PEER_MAX_CTRL;
}

uint64_t xp_peer_bin_field(const uint8_t *in, uint32_t len)
{
	return get_le(in, (int)len);
}

void xp_peer_bin_put(uint8_t *out, uint64_t v, uint32_t len)
{
	put_le(out, v, (int)len);
}

uint32_t xp_claim_bin_pack(const struct xp_claim_bin *c, uint8_t out[XP_CLAIM_BIN_MAX])
{
	uint32_t cred = c->flags & XP_CLAIM_BIN_PROOF ? XP_CLAIM_BIN_PROOF_LEN : XP_ID_BYTES;

	put_le(out, c->op, 8);
	put_le(out + 8, c->epoch, 8);
	put_le(out + 16, c->length, 8);
	put_le(out + 24, c->stage_max, 4);
	out[28] = c->kind;
	out[29] = c->meta_kind;
	out[30] = c->flags;
	out[31] = 0;
	memcpy(out + 32, c->node, XP_ID_BYTES);
	memcpy(out + XP_CLAIM_BIN_FIXED, c->cred, cred);
	return XP_CLAIM_BIN_FIXED + cred;
}

int xp_claim_bin_unpack(const uint8_t *in, uint32_t len, struct xp_claim_bin *c)
{
	if (len < XP_CLAIM_BIN_FIXED)
		return -EPROTO;
	c->op = get_le(in, 8);
	c->epoch = get_le(in + 8, 8);
	c->length = get_le(in + 16, 8);
	c->stage_max = (uint32_t)get_le(in + 24, 4);
	c->kind = in[28];
	c->meta_kind = in[29];
	c->flags = in[30];
	uint32_t cred = c->flags & XP_CLAIM_BIN_PROOF ? XP_CLAIM_BIN_PROOF_LEN : XP_ID_BYTES;
	/* (the JSON CLAIM's integers are JSON's: at most INT64_MAX; the same here) */
	if (len != XP_CLAIM_BIN_FIXED + cred || in[31] != 0 ||
	    (c->flags & ~(XP_CLAIM_BIN_PROOF | XP_CLAIM_BIN_QUICK)) ||
	    (c->kind != XP_KIND_READ && c->kind != XP_KIND_WRITE) ||
	    c->meta_kind >= XP_KIND_COUNT || c->op > INT64_MAX || c->epoch > INT64_MAX ||
	    c->length > INT64_MAX || c->length == 0)
		return -EPROTO;
	memcpy(c->node, in + 32, XP_ID_BYTES);
	memset(c->cred, 0, sizeof(c->cred));
	memcpy(c->cred, in + XP_CLAIM_BIN_FIXED, cred);
	return 0;
}

void xp_win_prefix_pack(const struct xp_win_prefix *w, uint8_t out[XP_WIN_PREFIX_LEN])
{
	put_le(out, w->window, 8);
	put_le(out + 8, w->handle, 8);
	put_le(out + 16, w->length, 4);
	put_le(out + 20, w->tag_len, 2);
	put_le(out + 22, w->flags, 2);
}

int xp_win_prefix_unpack(const uint8_t in[XP_WIN_PREFIX_LEN], struct xp_win_prefix *w)
{
	w->window = get_le(in, 8);
	w->handle = get_le(in + 8, 8);
	w->length = (uint32_t)get_le(in + 16, 4);
	w->tag_len = (uint16_t)get_le(in + 20, 2);
	w->flags = (uint16_t)get_le(in + 22, 2);
	if (w->tag_len > XP_MAX_TAG || (w->flags & ~(XP_WIN_LAST | XP_WIN_PIECE | XP_WIN_SEQ)) ||
	    ((w->flags & XP_WIN_SEQ) && !w->tag_len))
		return -EPROTO;
	return 0;
}

uint32_t xp_win_meta_len(const struct xp_win_prefix *w)
{
	return XP_WIN_PREFIX_LEN + (w->flags & XP_WIN_SEQ ? XP_WIN_SEQ_LEN : 0) + w->tag_len;
}

void xp_rdma_hello_pack(const struct xp_rdma_hello *h, uint8_t out[XP_RDMA_HELLO_LEN])
{
	memset(out, 0, XP_RDMA_HELLO_LEN);
	put_le(out, XP_RDMA_HELLO_MAGIC, 4);
	out[4] = XP_PEER_VERSION;
	memcpy(out + 8, h->node, XP_ID_BYTES);
	put_le(out + 24, h->epoch, 8);
	out[5] = h->control ? XP_RDMA_HELLO_CONTROL : 0;
	if (h->has_nonce) {
		out[5] |= XP_RDMA_HELLO_NONCE;
		memcpy(out + 32, h->nonce, XP_RDMA_NONCE_LEN);
	}
}

int xp_rdma_hello_unpack(const void *data, size_t len, struct xp_rdma_hello *h)
{
	const uint8_t *p = data;

	if (!p || len < XP_RDMA_HELLO_MIN_LEN || get_le(p, 4) != XP_RDMA_HELLO_MAGIC ||
	    p[4] != XP_PEER_VERSION || (p[5] & ~(XP_RDMA_HELLO_NONCE | XP_RDMA_HELLO_CONTROL)))
		return -EPROTO;
	h->has_nonce = p[5] & XP_RDMA_HELLO_NONCE;
	h->control = p[5] & XP_RDMA_HELLO_CONTROL;
	if (h->has_nonce && len < XP_RDMA_HELLO_LEN)
		return -EPROTO;
	memcpy(h->node, p + 8, XP_ID_BYTES);
	h->epoch = get_le(p + 24, 8);
	if (h->has_nonce)
		memcpy(h->nonce, p + 32, XP_RDMA_NONCE_LEN);
	else
		memset(h->nonce, 0, XP_RDMA_NONCE_LEN);
	return 0;
}
