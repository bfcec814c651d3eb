// SPDX-License-Identifier: MIT
/*
 * Operation metadata: "xfer1." + unpadded base64url of a compact JSON object. Decoding is
 * strict (unknown keys, wrong types, bad alphabet and trailing bits are refused) because the
 * string crosses trust boundaries: it arrives from another application through any channel.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "xp_meta.h"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static char *base64url_encode(const unsigned char *in, size_t n)
{
	char *out = malloc(n / 3 * 4 + 5);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = in[i] << 16;
		if (i + 1 < n)
			v |= in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = b64url[(v >> 18) & 63];
		out[o++] = b64url[(v >> 12) & 63];
		if (i + 1 < n)
			out[o++] = b64url[(v >> 6) & 63];
		if (i + 2 < n)
			out[o++] = b64url[v & 63];
	}
	out[o] = '\0';
	return out;
}

static int b64url_value(char c)
{
	const char *p = c ? strchr(b64url, c) : NULL;
	return p ? (int)(p - b64url) : -1;
}

/* Decodes unpadded base64url into a malloc'd buffer. Returns the length or -EBADMSG. */
static int base64url_decode(const char *in, size_t n, unsigned char **out)
{
	if (n % 4 == 1)
		return -EBADMSG;
	unsigned char *buf = malloc(n / 4 * 3 + 3);
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int v = b64url_value(in[i]);
		if (v < 0)
			goto err;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[o++] = (acc >> bits) & 0xff;
		}
	}
	if (acc & ((1u << bits) - 1)) /* non-canonical trailing bits */
		goto err;
	*out = buf;
	return (int)o;
err:
	free(buf);
	return -EBADMSG;
}

void xp_hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int xp_hex_decode(const char *in, uint8_t *out, size_t n)
{
	if (strlen(in) != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_value(in[2 * i]), lo = hex_value(in[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static json_t *endpoints_to_json(const struct xp_meta *m)
{
	json_t *arr = json_array();

	for (int i = 0; arr && i < m->nendpoints; i++) {
		const struct xp_endpoint *ep = &m->endpoints[i];
		json_t *o = ep->addr[0] ? json_pack("{s:s, s:s, s:i}", "transport", ep->transport,
						    "addr", ep->addr, "port", ep->port) :
					  json_pack("{s:s}", "transport", ep->transport);
		if (json_array_append_new(arr, o)) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

static json_t *lengths_to_json(const struct xp_meta *m)
{
	json_t *arr = json_array();

	for (uint32_t i = 0; arr && i < m->nlengths; i++) {
		if (json_array_append_new(arr, json_integer((json_int_t)m->lengths[i]))) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

int xp_meta_encode(const struct xp_meta *m, char **out)
{
	char node[2 * XP_ID_BYTES + 1], token[2 * XP_ID_BYTES + 1];

	xp_hex_encode(m->node, XP_ID_BYTES, node);
	xp_hex_encode(m->token, XP_ID_BYTES, token);
	json_t *o = json_pack("{s:i, s:s, s:s, s:I, s:o, s:I, s:s, s:o}", "v", 1, "kind",
			      xp_kind_name(m->kind), "node", node, "epoch", (json_int_t)m->epoch,
			      "endpoints", endpoints_to_json(m), "op", (json_int_t)m->op, "token",
			      token, "lengths", lengths_to_json(m));
	if (o && m->kind == XP_KIND_WINDOW &&
	    json_object_set_new(o, "access", json_string(xp_access_name(m->access)))) {
		json_decref(o);
		o = NULL;
	}
	if (!o)
		return -ENOMEM;
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		return -ENOMEM;
	char *b64 = base64url_encode((unsigned char *)text, strlen(text));
	free(text);
	if (!b64)
		return -ENOMEM;
	size_t len = strlen(XP_META_PREFIX) + strlen(b64) + 1;
	*out = malloc(len);
	if (*out)
		snprintf(*out, len, "%s%s", XP_META_PREFIX, b64);
	free(b64);
	return *out ? 0 : -ENOMEM;
}

static int bad(char *err, size_t errlen, const char *msg)
{
	snprintf(err, errlen, "metadata %s", msg);
	return -EBADMSG;
}

static int decode_endpoints(json_t *arr, struct xp_meta *m, char *err, size_t errlen)
{
	size_t i;
	json_t *v;

	if (json_array_size(arr) == 0 || json_array_size(arr) > XP_MAX_ENDPOINTS)
		return bad(err, errlen, "must name 1 to 8 endpoints");
	json_array_foreach(arr, i, v) {
		struct xp_endpoint *ep = &m->endpoints[i];
		const char *transport, *addr = "";
		int port = 0;
		json_error_t jerr;
		if (json_unpack_ex(v, &jerr, JSON_STRICT, "{s:s, s?s, s?i}", "transport",
				   &transport, "addr", &addr, "port", &port))
			return bad(err, errlen, "has a malformed endpoint");
		if (strlen(transport) >= sizeof(ep->transport) ||
		    strlen(addr) >= sizeof(ep->addr) || port < 0 || port > 65535)
			return bad(err, errlen, "has an endpoint out of range");
		/* (encoding drops the port of an endpoint without an address: local's) */
		if (!addr[0] && port)
			return bad(err, errlen, "has an endpoint with a port but no address");
		strcpy(ep->transport, transport);
		strcpy(ep->addr, addr);
		ep->port = (uint16_t)port;
	}
	m->nendpoints = (int)i;
	return 0;
}

static int decode_lengths(json_t *arr, struct xp_meta *m, char *err, size_t errlen)
{
	size_t n = json_array_size(arr), i;
	json_t *v;

	if (n == 0 || n > XP_MAX_DESCS)
		return bad(err, errlen, "must carry 1 to 1024 lengths");
	m->lengths = calloc(n, sizeof(*m->lengths));
	if (!m->lengths)
		return -ENOMEM;
	m->nlengths = (uint32_t)n;
	json_array_foreach(arr, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) <= 0)
			return bad(err, errlen, "lengths must be positive integers");
		m->lengths[i] = (uint64_t)json_integer_value(v);
		if (__builtin_add_overflow(m->total, m->lengths[i], &m->total))
			return bad(err, errlen, "lengths overflow");
	}
	return 0;
}

static int decode_object(json_t *o, struct xp_meta *m, char *err, size_t errlen)
{
	json_t *endpoints, *lengths;
	const char *kind, *node, *token, *access = NULL;
	json_int_t version, epoch, op;
	json_error_t jerr;

	if (json_unpack_ex(o, &jerr, JSON_STRICT, "{s:I, s:s, s:s, s:I, s:o, s:I, s:s, s:o, s?s}",
			   "v", &version, "kind", &kind, "node", &node, "epoch", &epoch,
			   "endpoints", &endpoints, "op", &op, "token", &token, "lengths", &lengths,
			   "access", &access)) {
		snprintf(err, errlen, "metadata fields are wrong: %s", jerr.text);
		return -EBADMSG;
	}
	if (version != 1)
		return bad(err, errlen, "has an unsupported version (this daemon reads v1)");
	int k = xp_kind_from_name(kind);
	if (k != XP_KIND_READABLE && k != XP_KIND_WRITABLE && k != XP_KIND_WINDOW)
		return bad(err, errlen, "kind must be readable, writable or window");
	m->kind = k;
	/* A window names its access mode and one length; an operation has no access. */
	if ((k == XP_KIND_WINDOW) != (access != NULL))
		return bad(err, errlen, "has \"access\" exactly when its kind is window");
	if (access && (m->access = xp_access_from_name(access)) < 0)
		return bad(err, errlen, "access must be read, write or readwrite");
	if (k == XP_KIND_WINDOW && json_array_size(lengths) != 1)
		return bad(err, errlen, "of a window must carry exactly one length");
	if (xp_hex_decode(node, m->node, XP_ID_BYTES) ||
	    xp_hex_decode(token, m->token, XP_ID_BYTES))
		return bad(err, errlen, "node and token must be 32 hex digits");
	if (epoch < 0 || op < 0)
		return bad(err, errlen, "epoch and op must not be negative");
	m->epoch = (uint64_t)epoch;
	m->op = (uint64_t)op;
	int rc = decode_endpoints(endpoints, m, err, errlen);
	return rc ? rc : decode_lengths(lengths, m, err, errlen);
}

int xp_meta_decode(const char *s, struct xp_meta *m, char *err, size_t errlen)
{
	size_t plen = strlen(XP_META_PREFIX);
	unsigned char *raw = NULL;

	memset(m, 0, sizeof(*m));
	if (strnlen(s, XP_METADATA_MAX + 1) > XP_METADATA_MAX)
		return bad(err, errlen, "is longer than 16384 characters");
	if (strncmp(s, XP_META_PREFIX, plen) != 0)
		return bad(err, errlen, "must start with \"xfer1.\"");
	int n = base64url_decode(s + plen, strlen(s + plen), &raw);
	if (n < 0)
		return n == -ENOMEM ? n :
				      bad(err, errlen, "is not valid base64url after \"xfer1.\"");
	json_error_t jerr;
	json_t *o = json_loadb((char *)raw, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	free(raw);
	if (!o)
		return bad(err, errlen, "does not decode to JSON (truncated or corrupted)");
	int rc = decode_object(o, m, err, errlen);
	json_decref(o);
	if (rc)
		xp_meta_fini(m);
	return rc;
}

void xp_meta_fini(struct xp_meta *m)
{
	free(m->lengths);
	m->lengths = NULL;
	m->nlengths = 0;
}
