// SPDX-License-Identifier: MIT
/*
 * The record of one request being handled (struct xd_call): unpacking its params and recording
 * its refusal. Pure functions on the record, no I/O, so that every layer a handler reaches can
 * say why it refuses without calling back up into the control layer that will send the reply.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
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
 * The key whose value failed a validation at @pos of @fmt. jansson reports the position in the
 * format string, not the key, so walk the (flat, "{s:X, s?X}") format and the arguments in
 * step: a key takes a const char *, each value one pointer.
 */
static const char *failed_key(const char *fmt, int pos, va_list ap)
{
	const char *key = NULL;
	bool want_key = true;

	if (pos <= 0 || pos >= (int)strlen(fmt) || fmt[pos] == '}')
		return NULL; /* not about one value: unknown keys, say */
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
				  failed_key(fmt, jerr.position, keys) :
				  NULL;
	va_end(keys);
	if (rc == 0)
		return 0;
	if (key)
		return xd_fail(call, XP_E_PARAMS, EINVAL, "invalid params: \"%s\": %s", key,
			       jerr.text);
	return xd_fail(call, XP_E_PARAMS, EINVAL, "invalid params: %s", jerr.text);
}
