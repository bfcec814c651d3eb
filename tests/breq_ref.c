// SPDX-License-Identifier: MIT
/*
 * The jansson reading of an op.batch of gets and puts, in the daemon's terms (breq_ref.h).
 * Written from PROTOCOL.md §5.2 and batch_opts(), not from the text reader: each member is
 * looked up by name, its type checked as the daemon checks it, absent options given the
 * defaults the daemon gives them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "breq_ref.h"

static bool differ(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return false;
}

/* A member that must be an integer equal to @want. */
static bool int_is(const json_t *v, int64_t want)
{
	return json_is_integer(v) && json_integer_value(v) == want;
}

/* Option @key of @params as a boolean: absent is false; *@n counts it when present. */
static bool opt_bool(const json_t *params, const char *key, bool *ok, size_t *n)
{
	const json_t *v = json_object_get(params, key);

	if (!v)
		return false;
	(*n)++;
	*ok = *ok && json_is_boolean(v);
	return json_is_true(v);
}

static bool entry_agrees(const json_t *e, const struct xp_batch_req *rq, size_t i, char *why,
			 size_t whylen)
{
	const struct xp_breq_entry *x = &rq->e[i];
	const char *name = json_string_value(json_array_get(e, 0));
	const json_t *descs = json_array_get(e, 3), *tag = json_array_get(e, 4);

	if (!json_is_array(e) || json_array_size(e) != (x->tag ? 5u : 4u))
		return differ(why, whylen, "entry %zu: not an array of %d", i, x->tag ? 5 : 4);
	if (!name || strcmp(name, x->put ? "put" : "get") != 0)
		return differ(why, whylen, "entry %zu: its kind", i);
	if (!int_is(json_array_get(e, 1), x->window) || !int_is(json_array_get(e, 2), x->offset))
		return differ(why, whylen, "entry %zu: its window or offset", i);
	if (!json_is_array(descs) || json_array_size(descs) != x->ndescs)
		return differ(why, whylen, "entry %zu: its descriptor count", i);
	for (size_t k = 0; k < x->ndescs; k++) {
		const json_t *d = json_array_get(descs, k);
		const struct xp_breq_desc *w = &rq->d[x->desc0 + k];
		if (!json_is_array(d) || json_array_size(d) != 3 ||
		    !int_is(json_array_get(d, 0), w->region) ||
		    !int_is(json_array_get(d, 1), w->offset) ||
		    !int_is(json_array_get(d, 2), w->length))
			return differ(why, whylen, "entry %zu: descriptor %zu", i, k);
	}
	if (x->tag && (!json_is_string(tag) || json_string_length(tag) != x->taglen ||
		       memcmp(json_string_value(tag), x->tag, x->taglen) != 0))
		return differ(why, whylen, "entry %zu: its tag", i);
	return true;
}

static bool options_agree(const json_t *params, const struct xp_batch_req *rq, char *why,
			  size_t whylen)
{
	const json_t *timeout = json_object_get(params, "timeout_ms");
	const json_t *event = json_object_get(params, "event");
	size_t n = 1 + (timeout != NULL) + (event != NULL); /* ("ops") */
	bool ok = true;
	bool release = opt_bool(params, "release_on_end", &ok, &n);
	bool end_only = opt_bool(params, "end_only", &ok, &n);
	const json_t *reply = json_object_get(params, "reply");

	n += reply != NULL;
	if (!ok || (reply && !json_is_boolean(reply)))
		return differ(why, whylen, "a boolean option is not a boolean");
	if (json_object_size(params) != n)
		return differ(why, whylen, "params has members beside ops and the options");
	if (timeout ? !int_is(timeout, rq->timeout_ms) : rq->timeout_ms != -1)
		return differ(why, whylen, "timeout_ms");
	if (release != rq->release_on_end || end_only != rq->end_only ||
	    (reply && json_is_false(reply)) != rq->posted)
		return differ(why, whylen, "release_on_end, end_only or reply");
	const char *ev = event ? json_string_value(event) : "each";
	if (!ev || (strcmp(ev, "batch") != 0 && strcmp(ev, "each") != 0) ||
	    (strcmp(ev, "batch") == 0) != rq->event_batch)
		return differ(why, whylen, "event");
	return true;
}

bool breq_agrees(const char *buf, size_t len, const struct xp_batch_req *rq, char *why,
		 size_t whylen)
{
	struct xp_request req;
	char err[256];
	bool ok = false;

	if (xp_request_parse(buf, len, &req, err, sizeof(err)) != 0)
		differ(why, whylen, "jansson's way refuses it: %s", err);
	else if (req.method != XP_M_OP_BATCH || req.id != rq->id)
		differ(why, whylen, "another method or id (%lld)", (long long)req.id);
	else if (options_agree(req.params, rq, why, whylen)) {
		const json_t *ops = json_object_get(req.params, "ops");
		ok = json_is_array(ops) && json_array_size(ops) == rq->n;
		if (!ok)
			differ(why, whylen, "ops is not an array of %zu", rq->n);
		for (size_t i = 0; ok && i < rq->n; i++)
			ok = entry_agrees(json_array_get(ops, i), rq, i, why, whylen);
	}
	xp_request_fini(&req);
	return ok;
}
