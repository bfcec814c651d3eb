/* SPDX-License-Identifier: MIT */
/*
 * The peer protocol's framing (PROTOCOL.md §10): a 24-byte little-endian header, then the
 * payload: JSON for control messages, raw bytes for DATA.
 */
#ifndef XP_PEER_H
#define XP_PEER_H

#include <stddef.h>
#include <stdint.h>
#include "xp_meta.h"

#define XP_PEER_VERSION 1
#define XP_PEER_HDR_LEN 24
#define XP_PEER_MAX_CTRL (64u * 1024)	    /* control payload */
#define XP_PEER_MAX_DATA (4u * 1024 * 1024) /* DATA payload */
#define XP_PEER_FROM_ACTIVE 0x01	    /* flags: xfer is in the sender's id space */
#define XP_PEER_BINARY 0x02		    /* flags: the payload is the binary layout of §10.8 */

#define XP_PEER_TYPES(X) \
	X(HELLO, 1)      \
	X(CLAIM, 2)      \
	X(CLAIM_OK, 3)   \
	X(CLAIM_ERR, 4)  \
	X(DATA, 5)       \
	X(DONE, 6)       \
	X(DONE_ACK, 7)   \
	X(CANCEL, 8)     \
	X(PING, 9)       \
	X(PONG, 10)      \
	X(CREDIT, 11)    \
	X(AUTH, 12)      \
	X(WOPEN, 13)     \
	X(WOPEN_OK, 14)  \
	X(WOPEN_ERR, 15) \
	X(WCLOSE, 16)    \
	X(WCLAIM, 17)    \
	X(WPUT, 18)      \
	X(WGET, 19)      \
	X(WACK, 20)      \
	X(STAGE, 21)     \
	X(STAGED, 22)    \
	X(WNOTIFY, 23)   \
	X(WNOTIFY_ACK, 24)

enum xp_peer_type {
/* NOLINTNEXTLINE(bugprone-macro-parentheses): each value is an integer literal */
#define XP_PEER_TYPE_ENUM(name, value) XP_PEER_##name = value,
	XP_PEER_TYPES(XP_PEER_TYPE_ENUM)
#undef XP_PEER_TYPE_ENUM
		XP_PEER_TYPE_MAX = 24
};

struct xp_peer_hdr {
	uint8_t type;
	uint8_t flags;
	uint16_t credits; /* RDMA: receive buffers the sender has re-posted; 0 on TCP */
	uint32_t length;
	uint64_t xfer;
	uint64_t offset;
};

void xp_peer_hdr_pack(const struct xp_peer_hdr *h, uint8_t out[XP_PEER_HDR_LEN]);
void xp_peer_hdr_unpack(const uint8_t in[XP_PEER_HDR_LEN], struct xp_peer_hdr *h);
/* The message name ("CLAIM_OK"), or "UNKNOWN". */
const char *xp_peer_type_name(int type);
/* Whether @h obeys the framing limits: known type, payload within its limit. */
bool xp_peer_hdr_valid(const struct xp_peer_hdr *h);

/*
 * The binary pairing frames (PROTOCOL.md §10.8): CLAIM, CLAIM_OK, DONE and DONE_ACK with
 * XP_PEER_BINARY, sent on TCP to a peer whose HELLO said "binary_pairing". A CLAIM is 48
 * bytes, then the credential: op u64 | epoch u64 | length u64 | stage_max u32 | kind u8 |
 * metadata kind u8 | flags u8 | zero u8 | node (16 bytes) | proof (32) or token (16), integers
 * little-endian, kinds as enum xp_kind. CLAIM_OK is flags u32, DONE bytes u64, DONE_ACK empty.
 * xp_peer_hdr_valid() checks each length.
 */
#define XP_CLAIM_BIN_FIXED 48
#define XP_CLAIM_BIN_PROOF_LEN 32 /* HMAC-SHA256 */
#define XP_CLAIM_BIN_MAX (XP_CLAIM_BIN_FIXED + XP_CLAIM_BIN_PROOF_LEN)
#define XP_CLAIM_BIN_PROOF 0x01u /* the credential is a proof (else the token) */
#define XP_CLAIM_BIN_QUICK 0x02u /* the claimer offers the short end (§10.3) */
#define XP_CLAIM_OK_BIN_LEN 4
#define XP_CLAIM_OK_QUICK 0x01u /* the owner takes the short end */
#define XP_DONE_BIN_LEN 8

struct xp_claim_bin {
	uint64_t op, epoch, length;
	uint32_t stage_max;
	uint8_t kind, meta_kind, flags;
	uint8_t node[XP_ID_BYTES];
	uint8_t cred[XP_CLAIM_BIN_PROOF_LEN]; /**< the proof, or the token in its first 16 bytes */
};

/* Packs @c into @out. Returns the payload's length (64 or 80 bytes). */
uint32_t xp_claim_bin_pack(const struct xp_claim_bin *c, uint8_t out[XP_CLAIM_BIN_MAX]);
/*
 * Decodes a binary CLAIM of @len bytes. Returns 0, or -EPROTO: a length that does not match the
 * credential the flags name, unknown flags, a non-zero pad byte, a kind other than read or
 * write, an unknown metadata kind, op, epoch or length above INT64_MAX, a zero length.
 */
int xp_claim_bin_unpack(const uint8_t *in, uint32_t len, struct xp_claim_bin *c);
/* A binary CLAIM_OK's or DONE's one field: the little-endian integer of @len (4 or 8) bytes. */
uint64_t xp_peer_bin_field(const uint8_t *in, uint32_t len);
void xp_peer_bin_put(uint8_t *out, uint64_t v, uint32_t len);

/*
 * The one-sided TCP window frames (PROTOCOL.md §10.7). WPUT and WGET carry, after the 24-byte
 * header (xfer: the opener's op id, offset: where in the window), this 24-byte prefix, then the
 * notify tag (tag_len bytes), then (WPUT) the payload: window u64 | handle u64 | data length
 * u32 | tag length u16 | flags u16, little-endian. A put larger than one frame goes as several
 * WPUTs in a row; the last has XP_WIN_LAST and alone carries the tag. The pieces of a striped
 * put each have XP_WIN_LAST; all but the first also XP_WIN_PIECE (sent only to an owner whose
 * WOPEN_OK said "pieces"), so that the owner counts the put once.
 */
#define XP_WIN_PREFIX_LEN 24
#define XP_WIN_LAST 0x0001u
#define XP_WIN_PIECE 0x0002u
/*
 * XP_WIN_SEQ (a tagged WPUT's last frame or a tagged WGET, sent only to an owner whose WOPEN_OK
 * said "seq"): the prefix is followed by the handle's count of its tagged gets and puts, u64
 * LE (1, 2, ...), before the tag; the owner notifies in that order whatever connection each
 * came on, so that a handle's tagged puts may be spread over the set's data connections.
 */
#define XP_WIN_SEQ 0x0004u
#define XP_WIN_SEQ_LEN 8
#define XP_WIN_MAX_META (XP_WIN_PREFIX_LEN + XP_WIN_SEQ_LEN + XP_MAX_TAG)

struct xp_win_prefix {
	uint64_t window, handle;
	uint32_t length;
	uint16_t tag_len, flags;
};

void xp_win_prefix_pack(const struct xp_win_prefix *w, uint8_t out[XP_WIN_PREFIX_LEN]);
/* Decodes a prefix. Returns 0, or -EPROTO (unknown flags, a tag over XP_MAX_TAG, SEQ without a
 * tag). The frame's own rules (PIECE only with LAST, on an untagged WPUT) are the receiver's to
 * check. */
int xp_win_prefix_unpack(const uint8_t in[XP_WIN_PREFIX_LEN], struct xp_win_prefix *w);
/* The bytes of prefix, count (SEQ) and tag that precede a frame's payload. */
uint32_t xp_win_meta_len(const struct xp_win_prefix *w);

/*
 * The HELLO of an RDMA connection, in the rdma_cm connect and accept private data (PROTOCOL.md
 * §10.5): magic "xfer" (LE) | version | flags | 2 zero bytes | node | epoch (LE) | nonce.
 * Flags bit 0 (XP_RDMA_HELLO_NONCE): the 16-byte nonce at byte 32 is present (the sender has
 * the cluster key, §10.2). Presence is marked by the flag, never by the length: IB/RoCE may pad
 * received private data with zeros (a 32-byte HELLO of an older peer arrives as 56 bytes).
 */
#define XP_RDMA_HELLO_LEN 48
#define XP_RDMA_HELLO_MIN_LEN 32 /* without the nonce */
#define XP_RDMA_HELLO_MAGIC 0x78666572u
#define XP_RDMA_HELLO_NONCE 0x01u
/* Flags bit 1: the connection carries control messages, no data (a set's control queue pair). */
#define XP_RDMA_HELLO_CONTROL 0x02u
#define XP_RDMA_NONCE_LEN 16

struct xp_rdma_hello {
	uint8_t node[XP_ID_BYTES];
	uint64_t epoch;
	bool has_nonce;
	bool control; /**< XP_RDMA_HELLO_CONTROL */
	uint8_t nonce[XP_RDMA_NONCE_LEN];
};

void xp_rdma_hello_pack(const struct xp_rdma_hello *h, uint8_t out[XP_RDMA_HELLO_LEN]);
/*
 * Decodes @len bytes of private data. Returns 0, or -EPROTO (short, bad magic or version,
 * unknown flags, a nonce flagged but cut off).
 */
int xp_rdma_hello_unpack(const void *data, size_t len, struct xp_rdma_hello *h);

#endif /* XP_PEER_H */
