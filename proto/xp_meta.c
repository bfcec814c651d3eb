// SPDX-License-Identifier: MIT
/*
 * Operation metadata: "xfer1." + unpadded base64url of a compact JSON object. Decoding is
 * strict (unknown keys, wrong types, bad alphabet and trailing bits are refused) because the
 * string crosses trust boundaries: it arrives from another application through any channel.
 *
 * Every pairing encodes one (owner) and decodes one (claimer), so both have a direct path for
 * the one layout this encoder writes, and jansson for everything else: the direct decoder
 * takes only text that the general one takes with the same result, and hands anything else
 * (other key orders, spacing, escapes, every error) to it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "xp_json.h"
#include "xp_meta.h"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Unpadded base64url of @n bytes of @in into @out (room for n / 3 * 4 + 4 and a NUL). */
static void base64url_encode_to(const unsigned char *in, size_t n, char *out)
{
	size_t o = 0;

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
}

/* Each base64url character's value plus one; 0 for every byte outside the alphabet. */
static const unsigned char b64url_plus1[256] = {
	['A'] = 1,  ['B'] = 2,	['C'] = 3,  ['D'] = 4,	['E'] = 5,  ['F'] = 6,	['G'] = 7,
	['H'] = 8,  ['I'] = 9,	['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14,
	['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21,
	['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28,
	['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35,
	['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
	['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
	['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
	['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['-'] = 63,
	['_'] = 64,
};

static int b64url_value(char c)
{
	return (int)b64url_plus1[(unsigned char)c] - 1;
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
		/* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): strlen(in) is 2 * n */
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

/* Text built in a caller's buffer; @full once something did not fit (nothing more goes in). */
struct meta_text {
	char *p;
	size_t len, cap;
	bool full;
};

static void text_put(struct meta_text *t, const char *s, size_t n)
{
	if (t->full || n >= t->cap - t->len) {
		t->full = true;
		return;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
}

static void text_str(struct meta_text *t, const char *s)
{
	text_put(t, s, strlen(s));
}

static void text_u64(struct meta_text *t, uint64_t v)
{
	char digits[20];
	int n = 0;

	do
		digits[sizeof(digits) - ++n] = (char)('0' + v % 10);
	while ((v /= 10) && n < (int)sizeof(digits));
	text_put(t, digits + sizeof(digits) - n, (size_t)n);
}

/* True when @s goes into JSON text as it is: printable ASCII, no '"' and no '\\'. */
static bool json_plain(const char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
			return false;
	return true;
}

/*
 * The metadata's JSON written straight into @t, byte for byte what jansson's compact dump of
 * the object xp_meta_encode_json() packs would be (tests/test_proto.c compares them). Returns
 * false (nothing usable in @t) when a string would need escapes or the text does not fit.
 */
static bool meta_text_direct(const struct xp_meta *m, struct meta_text *t)
{
	char hex[2 * XP_ID_BYTES + 1];

	/* (jansson writes numbers as json_int_t: past INT64_MAX its text would differ) */
	if (m->epoch > INT64_MAX || m->op > INT64_MAX)
		return false;
	for (uint32_t i = 0; i < m->nlengths; i++)
		if (m->lengths[i] > INT64_MAX)
			return false;
	text_str(t, "{\"v\":1,\"kind\":\"");
	text_str(t, xp_kind_name(m->kind));
	xp_hex_encode(m->node, XP_ID_BYTES, hex);
	text_str(t, "\",\"node\":\"");
	text_str(t, hex);
	text_str(t, "\",\"epoch\":");
	text_u64(t, m->epoch);
	text_str(t, ",\"endpoints\":[");
	for (int i = 0; i < m->nendpoints; i++) {
		const struct xp_endpoint *ep = &m->endpoints[i];
		if (!json_plain(ep->transport) || !json_plain(ep->addr))
			return false;
		text_str(t, i ? ",{\"transport\":\"" : "{\"transport\":\"");
		text_str(t, ep->transport);
		if (ep->addr[0]) {
			text_str(t, "\",\"addr\":\"");
			text_str(t, ep->addr);
			text_str(t, "\",\"port\":");
			text_u64(t, ep->port);
			text_str(t, "}");
		} else {
			text_str(t, "\"}");
		}
	}
	xp_hex_encode(m->token, XP_ID_BYTES, hex);
	text_str(t, "],\"op\":");
	text_u64(t, m->op);
	text_str(t, ",\"token\":\"");
	text_str(t, hex);
	text_str(t, "\",\"lengths\":[");
	for (uint32_t i = 0; i < m->nlengths; i++) {
		if (i)
			text_str(t, ",");
		text_u64(t, m->lengths[i]);
	}
	text_str(t, "]");
	if (m->kind == XP_KIND_WINDOW) {
		text_str(t, ",\"access\":\"");
		text_str(t, xp_access_name(m->access));
		text_str(t, "\"");
	}
	text_str(t, "}");
	return !t->full;
}

/* "xfer1." + base64url of @n bytes of @json, malloc'd into *@out. Returns 0 or -ENOMEM. */
static int meta_wrap(const char *json, size_t n, char **out)
{
	size_t plen = strlen(XP_META_PREFIX);

	*out = malloc(plen + n / 3 * 4 + 5);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, XP_META_PREFIX, plen);
	base64url_encode_to((const unsigned char *)json, n, *out + plen);
	return 0;
}

int xp_meta_encode(const struct xp_meta *m, char **out)
{
	char buf[2048];
	struct meta_text t = { buf, 0, sizeof(buf), false };

	if (meta_text_direct(m, &t))
		return meta_wrap(buf, t.len, out);
	return xp_meta_encode_json(m, out);
}

int xp_meta_encode_json(const struct xp_meta *m, char **out)
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
	int rc = meta_wrap(text, strlen(text), out);
	xp_json_free(text);
	return rc;
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

/* ---- the direct decoder: the encoder's own layout, nothing else ---- */

/*
 * A JSON integer without sign, fraction or leading zero, of at most 18 digits (so that it fits
 * jansson's json_int_t as it would for the general decoder; longer ones go to that one).
 */
static bool cur_u64(struct xp_cursor *c, uint64_t *v)
{
	int n = 0;

	*v = 0;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9' && n < 19) {
		*v = *v * 10 + (uint64_t)(*c->p++ - '0');
		n++;
	}
	return n > 0 && n <= 18 && !(n > 1 && c->p[-n] == '0');
}

/* The rest of a string (its opening quote taken) with no escapes, into @out (< @cap bytes). */
static bool cur_str(struct xp_cursor *c, char *out, size_t cap)
{
	size_t n = 0;

	for (; c->p < c->end && *c->p != '"'; c->p++) {
		if (*c->p < 0x20 || *c->p > 0x7e || *c->p == '\\' || n + 1 >= cap)
			return false;
		out[n++] = *c->p;
	}
	out[n] = '\0';
	return xp_cursor_lit(c, "\"");
}

/* The rest of a string that is 2 * XP_ID_BYTES hex digits, into @out. */
static bool cur_id(struct xp_cursor *c, uint8_t out[XP_ID_BYTES])
{
	char hex[2 * XP_ID_BYTES + 2];

	return cur_str(c, hex, sizeof(hex)) && xp_hex_decode(hex, out, XP_ID_BYTES) == 0;
}

/* One endpoint object as the encoder writes it: a transport, then an address and a port. */
static bool cur_endpoint(struct xp_cursor *c, struct xp_endpoint *ep)
{
	uint64_t port = 0;

	if (!xp_cursor_lit(c, "{\"transport\":\"") ||
	    !cur_str(c, ep->transport, sizeof(ep->transport)))
		return false;
	if (xp_cursor_lit(c, ",\"addr\":\"") &&
	    (!cur_str(c, ep->addr, sizeof(ep->addr)) || !ep->addr[0] ||
	     !xp_cursor_lit(c, ",\"port\":") || !cur_u64(c, &port) || port > 65535))
		return false;
	ep->port = (uint16_t)port;
	return xp_cursor_lit(c, "}");
}

static bool cur_endpoints(struct xp_cursor *c, struct xp_meta *m)
{
	do {
		if (m->nendpoints == XP_MAX_ENDPOINTS ||
		    !cur_endpoint(c, &m->endpoints[m->nendpoints++]))
			return false;
	} while (xp_cursor_lit(c, ","));
	return xp_cursor_lit(c, "]");
}

/* The lengths' array (its '[' taken): 1 to XP_MAX_DESCS positive lengths, no overflow. */
static bool cur_lengths(struct xp_cursor *c, struct xp_meta *m)
{
	size_t most = 1;

	for (const char *q = c->p; q < c->end && *q != ']'; q++)
		most += *q == ',';
	if (most > XP_MAX_DESCS || !(m->lengths = calloc(most, sizeof(*m->lengths))))
		return false;
	do {
		uint64_t v;
		if (m->nlengths == most || !cur_u64(c, &v) || v == 0 ||
		    __builtin_add_overflow(m->total, v, &m->total))
			return false;
		m->lengths[m->nlengths++] = v;
	} while (xp_cursor_lit(c, ","));
	return xp_cursor_lit(c, "]");
}

/* The fields after "kind", in the encoder's order. */
static bool cur_fields(struct xp_cursor *c, struct xp_meta *m)
{
	char access[16];

	if (!xp_cursor_lit(c, ",\"node\":\"") || !cur_id(c, m->node) ||
	    !xp_cursor_lit(c, ",\"epoch\":") || !cur_u64(c, &m->epoch) ||
	    !xp_cursor_lit(c, ",\"endpoints\":[") || !cur_endpoints(c, m) ||
	    !xp_cursor_lit(c, ",\"op\":") || !cur_u64(c, &m->op) ||
	    !xp_cursor_lit(c, ",\"token\":\"") || !cur_id(c, m->token) ||
	    !xp_cursor_lit(c, ",\"lengths\":[") || !cur_lengths(c, m))
		return false;
	bool has_access = xp_cursor_lit(c, ",\"access\":\"");
	if (has_access &&
	    (!cur_str(c, access, sizeof(access)) || (m->access = xp_access_from_name(access)) < 0))
		return false;
	/* (the general decoder's rules of kind and access, and of a window's one length) */
	if ((m->kind == XP_KIND_WINDOW) != has_access ||
	    (m->kind == XP_KIND_WINDOW && m->nlengths != 1))
		return false;
	return xp_cursor_lit(c, "}") && c->p == c->end;
}

/*
 * Decodes @n bytes of JSON text in exactly the encoder's layout into @m (zeroed). Returns
 * false, with @m zeroed again, for anything else: the general decoder then judges it.
 */
static bool meta_decode_direct(const char *json, size_t n, struct xp_meta *m)
{
	struct xp_cursor c = { json, json + n };
	char kind[16];

	if (xp_cursor_lit(&c, "{\"v\":1,\"kind\":\"") && cur_str(&c, kind, sizeof(kind))) {
		int k = xp_kind_from_name(kind);
		m->kind = k;
		if ((k == XP_KIND_READABLE || k == XP_KIND_WRITABLE || k == XP_KIND_WINDOW) &&
		    cur_fields(&c, m))
			return true;
	}
	xp_meta_fini(m);
	memset(m, 0, sizeof(*m));
	return false;
}

int xp_meta_decode_json(const char *json, size_t n, struct xp_meta *m, char *err, size_t errlen)
{
	json_error_t jerr;

	memset(m, 0, sizeof(*m));
	json_t *o = json_loadb(json, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		return bad(err, errlen, "does not decode to JSON (truncated or corrupted)");
	int rc = decode_object(o, m, err, errlen);
	json_decref(o);
	if (rc)
		xp_meta_fini(m);
	return rc;
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
	int rc = meta_decode_direct((char *)raw, (size_t)n, m) ?
			 0 :
			 xp_meta_decode_json((char *)raw, (size_t)n, m, err, errlen);
	free(raw);
	return rc;
}

void xp_meta_fini(struct xp_meta *m)
{
	free(m->lengths);
	m->lengths = NULL;
	m->nlengths = 0;
}
