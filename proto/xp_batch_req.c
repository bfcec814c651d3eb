// SPDX-License-Identifier: MIT
/*
 * op.batch of gets and puts in the form libxferclient writes it, read by the daemon without a
 * jansson tree, and the reply to it written as text (PROTOCOL.md §5.2). perf of the opener
 * daemon at 4 KiB window gets in batches of 8 put ~15% of its CPU in parsing the request into
 * jansson values, reading them, building the {"op"} results and dumping the reply. Only the
 * exact form is read here; anything else, valid or not, goes jansson's way, which alone decides
 * what a request means and what is wrong with it.
 */
#include <errno.h>
#include <string.h>
#include "xp_json.h"

#define BREQ_MAX_ID ((uint64_t)1 << 53) /* as xp_request_parse(): ids survive a double */

static bool i63(struct xp_cursor *s, int64_t *v)
{
	uint64_t x;

	if (!xp_cursor_u63(s, &x))
		return false;
	*v = (int64_t)x;
	return true;
}

/* A boolean member's value: "true" or "false". */
static bool boolean(struct xp_cursor *s, bool *v)
{
	if (xp_cursor_lit(s, "true"))
		*v = true;
	else if (xp_cursor_lit(s, "false"))
		*v = false;
	else
		return false;
	return true;
}

/*
 * A quoted string jansson would read as the very bytes between the quotes: printable ASCII, no
 * '"' (its end) and no backslash (an escape), at most @max bytes.
 */
static bool plain_string(struct xp_cursor *s, const char **str, size_t *len, size_t max)
{
	const char *q;

	if (!xp_cursor_lit(s, "\""))
		return false;
	for (q = s->p; q < s->end && *q != '"'; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e || *q == '\\')
			return false;
	if (q >= s->end || (size_t)(q - s->p) > max)
		return false;
	*str = s->p;
	*len = (size_t)(q - s->p);
	s->p = q + 1;
	return true;
}

/* The descriptors [[region,offset,length],...] of entry @e (at least one). */
static bool descs(struct xp_cursor *s, struct xp_batch_req *rq, struct xp_breq_entry *e)
{
	e->desc0 = (uint32_t)rq->ndescs;
	if (!xp_cursor_lit(s, "["))
		return false;
	do {
		struct xp_breq_desc *d = &rq->d[rq->ndescs];
		if (rq->ndescs == XP_BREQ_DESCS || !xp_cursor_lit(s, "[") || !i63(s, &d->region) ||
		    !xp_cursor_lit(s, ",") || !i63(s, &d->offset) || !xp_cursor_lit(s, ",") ||
		    !i63(s, &d->length) || !xp_cursor_lit(s, "]"))
			return false;
		rq->ndescs++;
	} while (xp_cursor_lit(s, ","));
	e->ndescs = (uint32_t)(rq->ndescs - e->desc0);
	return xp_cursor_lit(s, "]");
}

/* One entry ["get"|"put",window,offset,[descs],"tag"?] into rq->e[rq->n]. */
static bool entry(struct xp_cursor *s, struct xp_batch_req *rq)
{
	struct xp_breq_entry *e = &rq->e[rq->n];

	if (xp_cursor_lit(s, "[\"get\","))
		e->put = false;
	else if (xp_cursor_lit(s, "[\"put\","))
		e->put = true;
	else
		return false;
	if (!i63(s, &e->window) || !xp_cursor_lit(s, ",") || !i63(s, &e->offset) ||
	    !xp_cursor_lit(s, ",") || !descs(s, rq, e))
		return false;
	e->tag = NULL;
	e->taglen = 0;
	if (xp_cursor_lit(s, ",") && !plain_string(s, &e->tag, &e->taglen, XP_MAX_TAG))
		return false;
	return xp_cursor_lit(s, "]");
}

/* The batch's options after "ops", each optional, in the order batch_text() writes them. */
static bool options(struct xp_cursor *s, struct xp_batch_req *rq)
{
	bool reply = true;

	rq->release_on_end = rq->end_only = rq->event_batch = false;
	rq->timeout_ms = -1;
	if (xp_cursor_lit(s, ",\"release_on_end\":") && !boolean(s, &rq->release_on_end))
		return false;
	if (xp_cursor_lit(s, ",\"event\":")) {
		if (xp_cursor_lit(s, "\"batch\""))
			rq->event_batch = true;
		else if (!xp_cursor_lit(s, "\"each\""))
			return false;
	}
	if (xp_cursor_lit(s, ",\"timeout_ms\":") && !i63(s, &rq->timeout_ms))
		return false;
	if (xp_cursor_lit(s, ",\"end_only\":") && !boolean(s, &rq->end_only))
		return false;
	if (xp_cursor_lit(s, ",\"reply\":") && !boolean(s, &reply))
		return false;
	rq->posted = !reply;
	return true;
}

int xp_batch_req_read(const char *buf, size_t len, struct xp_batch_req *rq)
{
	struct xp_cursor s = { buf, buf + len };
	uint64_t id;

	if (!xp_cursor_lit(&s, "{\"jsonrpc\":\"2.0\",\"id\":") || !xp_cursor_u63(&s, &id) ||
	    id >= BREQ_MAX_ID ||
	    !xp_cursor_lit(&s, ",\"method\":\"op.batch\",\"params\":{\"ops\":["))
		return 1;
	rq->id = (int64_t)id;
	rq->n = rq->ndescs = 0;
	do {
		if (rq->n == XP_BREQ_ENTRIES || !entry(&s, rq))
			return 1;
		rq->n++;
	} while (xp_cursor_lit(&s, ","));
	if (!xp_cursor_lit(&s, "]") || !options(&s, rq) || !xp_cursor_lit(&s, "}}") || s.p != s.end)
		return 1;
	return 0;
}

int xp_batch_reply_text(char *buf, size_t cap, int64_t id, const uint64_t *ops, size_t n,
			bool has_batch, uint64_t batch)
{
	struct xp_text t = { buf, cap, 0 };

	xp_text_put(&t, "{\"jsonrpc\":\"2.0\",\"id\":");
	xp_text_u64(&t, (uint64_t)id);
	xp_text_put(&t, ",\"result\":{\"results\":[");
	for (size_t i = 0; i < n; i++) {
		xp_text_put(&t, i ? ",{\"op\":" : "{\"op\":");
		xp_text_u64(&t, ops[i]);
		xp_text_put(&t, "}");
	}
	xp_text_put(&t, "]");
	if (has_batch) {
		xp_text_put(&t, ",\"batch\":");
		xp_text_u64(&t, batch);
	}
	xp_text_put(&t, "}}");
	return t.len <= cap ? (int)t.len : -EMSGSIZE;
}
