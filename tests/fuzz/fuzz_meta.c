// SPDX-License-Identifier: MIT
/*
 * libFuzzer target over metadata decoding (proto/xp_meta.c), the string a client hands the
 * daemon with op.read/op.write and which names the owner, its endpoints and the token. Any
 * input must decode or be refused without a crash or a leak; one that decodes must encode and
 * decode again to the same fields (the round trip the daemon relies on when it hands metadata
 * out).
 *
 * Byte 0 picks the form of the rest: even, it is the metadata string as a client sends it; odd,
 * it is the JSON inside, which the target wraps ("xfer1." + base64url) so that mutations reach
 * the fields instead of dying in the base64 layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xp_meta.h"
#include "fuzz_target.h"

const char fuzz_target_corpus[] = "corpus-meta";

__attribute__((noreturn)) static void die(const char *what, const char *s)
{
	fprintf(stderr, "fuzz_meta: %s\nfuzz_meta: metadata %.300s\n", what, s);
	abort();
}

/* "xfer1." + base64url(@in) without padding, NUL-terminated, malloc'd. */
static char *wrap(const uint8_t *in, size_t n)
{
	static const char abc[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t plen = strlen(XP_META_PREFIX);
	char *out = malloc(plen + (n + 2) / 3 * 4 + 1), *o;

	if (!out)
		die("out of memory", "");
	memcpy(out, XP_META_PREFIX, plen);
	o = out + plen;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		v |= i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0;
		v |= i + 2 < n ? in[i + 2] : 0;
		*o++ = abc[v >> 18 & 63];
		*o++ = abc[v >> 12 & 63];
		if (i + 1 < n)
			*o++ = abc[v >> 6 & 63];
		if (i + 2 < n)
			*o++ = abc[v & 63];
	}
	*o = '\0';
	return out;
}

static bool same(const struct xp_meta *a, const struct xp_meta *b)
{
	if (a->kind != b->kind || memcmp(a->node, b->node, XP_ID_BYTES) || a->epoch != b->epoch ||
	    a->op != b->op || memcmp(a->token, b->token, XP_ID_BYTES) ||
	    a->nendpoints != b->nendpoints || a->nlengths != b->nlengths || a->total != b->total)
		return false;
	for (int i = 0; i < a->nendpoints; i++)
		if (strcmp(a->endpoints[i].transport, b->endpoints[i].transport) ||
		    strcmp(a->endpoints[i].addr, b->endpoints[i].addr) ||
		    a->endpoints[i].port != b->endpoints[i].port)
			return false;
	return memcmp(a->lengths, b->lengths, a->nlengths * sizeof(*a->lengths)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct xp_meta m, again;
	char err[256], *s, *enc = NULL;

	if (size == 0)
		return 0;
	if (data[0] & 1) {
		s = wrap(data + 1, size - 1);
	} else {
		/* (a NUL inside ends the string here, as it would in a JSON-RPC string) */
		s = malloc(size);
		if (!s)
			die("out of memory", "");
		memcpy(s, data + 1, size - 1);
		s[size - 1] = '\0';
	}
	if (xp_meta_decode(s, &m, err, sizeof(err)) == 0) {
		if (xp_meta_encode(&m, &enc) < 0)
			die("metadata that decodes does not encode", s);
		if (xp_meta_decode(enc, &again, err, sizeof(err)) < 0) {
			fprintf(stderr, "fuzz_meta: re-encoded %.300s: %s\n", enc, err);
			die("its own encoding does not decode", s);
		}
		if (!same(&m, &again)) {
			fprintf(stderr, "fuzz_meta: re-encoded %.300s\n", enc);
			die("the round trip changed a field", s);
		}
		xp_meta_fini(&again);
		xp_meta_fini(&m);
		free(enc);
	}
	free(s);
	return 0;
}

void fuzz_target_fini(void)
{
}
