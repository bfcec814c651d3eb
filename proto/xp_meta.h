/* SPDX-License-Identifier: MIT */
/*
 * Operation metadata: "xfer1." + base64url(JSON) naming the owner daemon, its epoch, how to
 * reach it, the operation, its 128-bit token and its descriptor lengths. No addresses or keys.
 */
#ifndef XP_META_H
#define XP_META_H

#include <stddef.h>
#include <stdint.h>
#include "xfer_proto.h"

#define XP_META_PREFIX "xfer1."
#define XP_ID_BYTES 16 /* node ids and tokens */
#define XP_MAX_ENDPOINTS 8

struct xp_endpoint {
	char transport[8]; /* "local", "tcp", "rdma" */
	char addr[64];	   /* "" for local */
	uint16_t port;
};

struct xp_meta {
	enum xp_kind kind; /* XP_KIND_READABLE, XP_KIND_WRITABLE or XP_KIND_WINDOW */
	uint8_t node[XP_ID_BYTES];
	uint64_t epoch;
	uint64_t op; /* the operation, or for a window the window id */
	int access;  /* a window's enum xp_access ("access"); 0 for operations */
	uint8_t token[XP_ID_BYTES];
	struct xp_endpoint endpoints[XP_MAX_ENDPOINTS];
	int nendpoints;
	uint64_t *lengths; /* owned; xp_meta_fini() frees */
	uint32_t nlengths;
	uint64_t total; /* sum of lengths, filled by decode */
};

/* Encodes @m into a malloc'd NUL-terminated string. Returns 0 or -errno. */
int xp_meta_encode(const struct xp_meta *m, char **out);

/*
 * Decodes @s strictly into @m. Returns 0, or -EBADMSG with the broken rule in @err.
 * On success the caller calls xp_meta_fini().
 */
int xp_meta_decode(const char *s, struct xp_meta *m, char *err, size_t errlen);
void xp_meta_fini(struct xp_meta *m);

/*
 * What xp_meta_encode() and xp_meta_decode() do for the layouts their direct paths leave out:
 * @m through jansson, and @n bytes of JSON text (the part after "xfer1." decoded) through
 * jansson. Same returns; tests compare the direct paths against them.
 */
int xp_meta_encode_json(const struct xp_meta *m, char **out);
int xp_meta_decode_json(const char *json, size_t n, struct xp_meta *m, char *err, size_t errlen);

/* Lower-case hex of @n bytes into @out (2n+1 bytes). */
void xp_hex_encode(const uint8_t *in, size_t n, char *out);
/* Parses exactly 2n hex digits. Returns 0 or -EINVAL. */
int xp_hex_decode(const char *in, uint8_t *out, size_t n);

#endif /* XP_META_H */
