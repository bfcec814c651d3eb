// SPDX-License-Identifier: MIT
/*
 * The record of one request being handled (struct xd_call): unpacking its params and recording
 * its refusal. Pure functions on the record, no I/O, so that every layer a handler reaches can
 * say why it refuses without calling back up into the control layer that will send the reply;
 * and the pages of listings, which every list method cuts the same way.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xferd.h"

int xd_fail(struct xd_call *call, int code, int cause_errno, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(call->message, sizeof(call->message), fmt, ap);
	va_end(ap);
	call->code = code;
	call->cause_errno = cause_errno;
	return -cause_errno;
}

/*
 * The key whose value failed a validation (@err) just before @pos of @fmt. jansson reports
 * the position in the format string (one past the value's letter), not the key, so walk the
 * (flat, "{s:X, s?X}") format and the arguments in step: a key takes a const char *, each value
 * one pointer. Errors about the object as a whole (keys left unpacked, a key missing, whose
 * text names it) are about no one value. The last value's position is the closing '}'.
 */
static const char *failed_key(const char *fmt, const json_error_t *err, va_list ap)
{
	enum json_error_code code = json_error_code(err);
	int pos = err->position;
	const char *key = NULL;
	bool want_key = true;

	if (code == json_error_end_of_input_expected || code == json_error_item_not_found ||
	    pos <= 0 || pos >= (int)strlen(fmt))
		return NULL;
	/* cppcheck-suppress arrayIndexThenCheck ; i stops at fmt's NUL: pos only stops it sooner */
	for (int i = 1; fmt[i] && i <= pos; i++) {
		char ch = fmt[i];
		if (ch == ' ' || ch == ',' || ch == ':' || ch == '?' || ch == '}')
			continue;
		if (want_key)
			key = va_arg(ap, const char *);
		else
			(void)va_arg(ap, void *);
		want_key = !want_key;
	}
	return key;
}

int xd_unpack_params(struct xd_call *call, const char *fmt, ...)
{
	json_error_t jerr;
	va_list ap, keys;

	va_start(ap, fmt);
	va_copy(keys, ap);
	int rc = json_vunpack_ex(call->params, &jerr, JSON_STRICT, fmt, ap);
	va_end(ap);
	const char *key = rc && strcmp(jerr.source, "<validation>") == 0 && fmt[0] == '{' ?
				  failed_key(fmt, &jerr, keys) :
				  NULL;
	va_end(keys);
	if (rc == 0)
		return 0;
	if (key)
		return xd_fail(call, XP_E_PARAMS, EINVAL, "invalid params: \"%s\": %s", key,
			       jerr.text);
	return xd_fail(call, XP_E_PARAMS, EINVAL, "invalid params: %s", jerr.text);
}

/* ---- listings by pages ---- */

static int page_item_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct xd_page_item *)a)->id, y = ((const struct xd_page_item *)b)->id;

	return x < y ? -1 : x > y;
}

int xd_page_begin(struct xd_call *call, struct xd_page *pg)
{
	json_int_t after = -1, limit = XD_PAGE_LIMIT;

	if (xd_unpack_params(call, "{s?I, s?I}", "after", &after, "limit", &limit))
		return -EINVAL;
	return xd_page_start(call, pg, after, limit);
}

int xd_page_start(struct xd_call *call, struct xd_page *pg, json_int_t after, json_int_t limit)
{
	memset(pg, 0, sizeof(*pg));
	if (after < -1 || limit < 1 || limit > XD_PAGE_LIMIT_MAX)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "after must not be negative and limit must be 1 to %d",
			       XD_PAGE_LIMIT_MAX);
	pg->after = after;
	pg->limit = (size_t)limit;
	pg->arr = json_array();
	if (!pg->arr)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	return 0;
}

/*
 * The byte budget is what keeps a reply within one packet whatever the entries hold: a reply
 * larger than XP_MAX_MSG cannot be sent at all, and the client would wait for it forever. The
 * count limit alone cannot promise that, since names, endpoints and causes vary in length.
 */
int xd_page_add(struct xd_page *pg, uint64_t id, json_t *entry)
{
	size_t size;

	if (!entry)
		return -ENOMEM;
	size = json_dumpb(entry, NULL, 0, JSON_COMPACT) + 1; /* and its comma */
	if (json_array_size(pg->arr) >= pg->limit ||
	    (json_array_size(pg->arr) && pg->bytes + size > XD_PAGE_BYTES)) {
		json_decref(entry);
		pg->more = true;
		return 0;
	}
	if (json_array_append_new(pg->arr, entry))
		return -ENOMEM;
	pg->bytes += size;
	pg->last = id;
	return 1;
}

int xd_page_finish(struct xd_call *call, struct xd_page *pg, const char *key, int rc)
{
	if (rc >= 0)
		call->result = pg->more ? json_pack("{s:o, s:I}", key, pg->arr, "next",
						    (json_int_t)pg->last) :
					  json_pack("{s:o}", key, pg->arr);
	else
		json_decref(pg->arr);
	pg->arr = NULL;
	if (rc < 0 || !call->result)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	return 0;
}

/* Entries are made only for the page, not for the whole list: a page costs its own size. */
int xd_page_fill(struct xd_page *pg, struct xd_page_item *items, size_t n,
		 json_t *(*entry)(const void *p, void *arg), void *arg)
{
	int rc = 1;

	if (n > 1)
		qsort(items, n, sizeof(*items), page_item_cmp);
	for (size_t i = 0; i < n && rc > 0; i++)
		rc = xd_page_add(pg, items[i].id, entry(items[i].p, arg));
	return rc < 0 ? rc : 0;
}
