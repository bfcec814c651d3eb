// SPDX-License-Identifier: MIT
/*
 * A fast path for the JSON both sides read and write most: compact objects and arrays of
 * integers and plain strings (metadata strings, ~300 bytes of base64url each, dominate a batch
 * of pairings). jansson reads and writes a string a character at a time through UTF-8 checks;
 * these scan it once. Anything outside that subset (an escape, a byte outside printable ASCII,
 * a real, a long integer, deep nesting, any doubt) is left to jansson for the whole text, so a
 * text is read or written exactly as jansson would, and every error is jansson's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "xp_json.h"

#define JF_MAX_DEPTH 64	 /* deeper: jansson's (whose own limit is 2048) */
#define JF_MAX_DIGITS 18 /* fits int64_t whatever the digits; longer: jansson's overflow rules */

/* ---- reading ---- */

struct jf_in {
	const char *p, *end;
	size_t flags;
	int depth;
};

static void in_ws(struct jf_in *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static bool in_peek(const struct jf_in *s, char c)
{
	return s->p < s->end && *s->p == c;
}

/* A byte a plain string may hold as it is: printable ASCII but the quote and the backslash. */
static bool plain_byte(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

/* A string of plain bytes: its bytes in *@str, *@n. false: not one (jansson decides). */
static bool in_string(struct jf_in *s, const char **str, size_t *n)
{
	const char *q;

	if (!in_peek(s, '"'))
		return false;
	for (q = s->p + 1; q < s->end && plain_byte((unsigned char)*q); q++)
		;
	if (q >= s->end || *q != '"')
		return false;
	*str = s->p + 1;
	*n = (size_t)(q - *str);
	s->p = q + 1;
	return true;
}

/* An integer of at most JF_MAX_DIGITS digits, as jansson writes them (no leading zero). */
static json_t *in_integer(struct jf_in *s)
{
	const char *q = s->p, *digits;
	bool negative = q < s->end && *q == '-';
	unsigned long long v = 0; /* (unsigned: past JF_MAX_DIGITS it wraps, and is not used) */

	q += negative;
	for (digits = q; q < s->end && *q >= '0' && *q <= '9'; q++)
		v = v * 10 + (unsigned long long)(*q - '0');
	size_t n = (size_t)(q - digits);
	if (n == 0 || n > JF_MAX_DIGITS || (n > 1 && *digits == '0') ||
	    (q < s->end && (*q == '.' || *q == 'e' || *q == 'E')))
		return NULL;
	s->p = q;
	return json_integer(negative ? -(json_int_t)v : (json_int_t)v);
}

static json_t *in_literal(struct jf_in *s, const char *word, json_t *value)
{
	size_t n = strlen(word);

	if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
		return NULL;
	s->p += n;
	return value;
}

static json_t *in_value(struct jf_in *s);

/*
 * After a member or an element: 1 at a ',' (another follows), 0 at @close (the container
 * ends), -1 at anything else (jansson decides). Consumes what it saw.
 */
static int in_after_item(struct jf_in *s, char close)
{
	in_ws(s);
	if (!in_peek(s, ',') && !in_peek(s, close))
		return -1;
	return *s->p++ == ',';
}

/* The members after '{'. NULL: jansson decides (a duplicate key under JSON_REJECT_DUPLICATES
 * among the reasons: jansson refuses it with its own message). */
static json_t *in_object(struct jf_in *s)
{
	json_t *o = json_object();

	s->p++;
	in_ws(s);
	if (o && in_peek(s, '}')) {
		s->p++;
		return o;
	}
	while (o) {
		const char *key;
		size_t n;
		in_ws(s);
		if (!in_string(s, &key, &n))
			break;
		in_ws(s);
		if (!in_peek(s, ':'))
			break;
		s->p++;
		in_ws(s);
		json_t *v = in_value(s);
		if (v && (s->flags & JSON_REJECT_DUPLICATES) && json_object_getn(o, key, n)) {
			json_decref(v);
			break;
		}
		if (!v || json_object_setn_new_nocheck(o, key, n, v)) /* (consumes v) */
			break;
		int next = in_after_item(s, '}');
		if (next == 0)
			return o;
		if (next < 0)
			break;
	}
	json_decref(o);
	return NULL;
}

static json_t *in_array(struct jf_in *s)
{
	json_t *a = json_array();

	s->p++;
	in_ws(s);
	if (a && in_peek(s, ']')) {
		s->p++;
		return a;
	}
	while (a) {
		in_ws(s);
		json_t *v = in_value(s);
		if (!v || json_array_append_new(a, v))
			break;
		int next = in_after_item(s, ']');
		if (next == 0)
			return a;
		if (next < 0)
			break;
	}
	json_decref(a);
	return NULL;
}

static json_t *in_value(struct jf_in *s)
{
	const char *str;
	size_t n;
	json_t *v = NULL;

	if (s->p >= s->end)
		return NULL;
	switch (*s->p) {
	case '{':
	case '[':
		if (++s->depth > JF_MAX_DEPTH)
			return NULL;
		v = *s->p == '{' ? in_object(s) : in_array(s);
		s->depth--;
		return v;
	case '"':
		return in_string(s, &str, &n) ? json_stringn_nocheck(str, n) : NULL;
	case 't':
		return in_literal(s, "true", json_true());
	case 'f':
		return in_literal(s, "false", json_false());
	case 'n':
		return in_literal(s, "null", json_null());
	default:
		return in_integer(s);
	}
}

json_t *xp_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *error)
{
	struct jf_in s = { buf, buf + len, flags, 0 };

	/* (jansson's other flags change what it takes: those texts are all its own) */
	if (!(flags & ~(size_t)JSON_REJECT_DUPLICATES)) {
		in_ws(&s);
		json_t *v = in_peek(&s, '{') || in_peek(&s, '[') ? in_value(&s) : NULL;
		in_ws(&s);
		if (v && s.p == s.end)
			return v;
		json_decref(v);
	}
	return json_loadb(buf, len, flags, error);
}

/* ---- writing ---- */

struct jf_out {
	char *buf;
	size_t len, cap, max;
};

static bool out_put(struct jf_out *o, const char *bytes, size_t n)
{
	if (o->len + n > o->max)
		return false; /* (jansson's text would be as long: it says so) */
	if (o->len + n > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		while (cap < o->len + n)
			cap *= 2;
		char *b = realloc(o->buf, cap);
		if (!b)
			return false;
		o->buf = b;
		o->cap = cap;
	}
	memcpy(o->buf + o->len, bytes, n);
	o->len += n;
	return true;
}

static bool out_string(struct jf_out *o, const char *str, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!plain_byte((unsigned char)str[i]))
			return false;
	return out_put(o, "\"", 1) && out_put(o, str, n) && out_put(o, "\"", 1);
}

static bool out_integer(struct jf_out *o, json_int_t v)
{
	char digits[24], *p = digits + sizeof(digits);
	/* (as unsigned: the most negative value has no positive twin) */
	unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;

	do
		*--p = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (v < 0)
		*--p = '-';
	return out_put(o, p, (size_t)(digits + sizeof(digits) - p));
}

static bool out_value(struct jf_out *o, const json_t *v, int depth);

static bool out_object(struct jf_out *o, const json_t *v, int depth)
{
	const char *key;
	json_t *member;
	bool first = true;

	if (!out_put(o, "{", 1))
		return false;
	json_object_foreach((json_t *)v, key, member) {
		if ((!first && !out_put(o, ",", 1)) || !out_string(o, key, strlen(key)) ||
		    !out_put(o, ":", 1) || !out_value(o, member, depth + 1))
			return false;
		first = false;
	}
	return out_put(o, "}", 1);
}

static bool out_array(struct jf_out *o, const json_t *v, int depth)
{
	size_t i;
	json_t *item;

	if (!out_put(o, "[", 1))
		return false;
	json_array_foreach(v, i, item) {
		if ((i && !out_put(o, ",", 1)) || !out_value(o, item, depth + 1))
			return false;
	}
	return out_put(o, "]", 1);
}

static bool out_value(struct jf_out *o, const json_t *v, int depth)
{
	if (depth > JF_MAX_DEPTH)
		return false;
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return out_object(o, v, depth);
	case JSON_ARRAY:
		return out_array(o, v, depth);
	case JSON_STRING:
		return out_string(o, json_string_value(v), json_string_length(v));
	case JSON_INTEGER:
		return out_integer(o, json_integer_value(v));
	case JSON_TRUE:
		return out_put(o, "true", 4);
	case JSON_FALSE:
		return out_put(o, "false", 5);
	case JSON_NULL:
		return out_put(o, "null", 4);
	default:
		return false; /* reals: jansson's format */
	}
}

char *xp_json_dumps(const json_t *v, size_t max, size_t *len)
{
	struct jf_out o = { .max = max };

	if (v && out_value(&o, v, 0) && out_put(&o, "", 1)) {
		*len = o.len - 1;
		return o.buf;
	}
	free(o.buf);
	/* (a malloc'd copy: jansson's own string may come from its allocator, xp_jalloc.c) */
	char *j = json_dumps(v, JSON_COMPACT), *s = j ? strdup(j) : NULL;
	xp_json_free(j);
	*len = s ? strlen(s) : 0;
	return s;
}

void xp_json_free(void *p)
{
	json_free_t f;

	json_get_alloc_funcs(NULL, &f);
	f(p);
}
