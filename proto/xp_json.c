// SPDX-License-Identifier: MIT
/*
 * The JSON-RPC 2.0 envelope. Requests are parsed strictly (duplicate keys rejected, members
 * type-checked) so that a handler only ever sees a known method and an object of params.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xp_json.h"

#define XP_MAX_ID ((int64_t)1 << 53) /* ids must survive a trip through a double */

static int fail(char *err, size_t errlen, int code, const char *msg)
{
	snprintf(err, errlen, "%s", msg);
	return code;
}

/* Reads the id member: returns 0 with req->id set, or an error code. */
static int parse_id(json_t *root, struct xp_request *req, char *err, size_t errlen)
{
	json_t *id = json_object_get(root, "id");

	if (!id)
		return fail(err, errlen, XP_E_INVALID_REQ,
			    "request has no \"id\" (notifications to the daemon are not accepted)");
	if (!json_is_integer(id) || json_integer_value(id) < 0 ||
	    json_integer_value(id) >= XP_MAX_ID)
		return fail(err, errlen, XP_E_INVALID_REQ,
			    "\"id\" must be an integer from 0 to 2^53-1");
	req->id = json_integer_value(id);
	return 0;
}

static int parse_envelope(json_t *root, struct xp_request *req, char *err, size_t errlen)
{
	if (!json_is_object(root))
		return fail(err, errlen, XP_E_INVALID_REQ, "a request must be a JSON object");
	int rc = parse_id(root, req, err, errlen);
	if (rc)
		return rc;
	const char *version = json_string_value(json_object_get(root, "jsonrpc"));
	if (!version || strcmp(version, "2.0") != 0)
		return fail(err, errlen, XP_E_INVALID_REQ, "\"jsonrpc\" must be \"2.0\"");
	const char *method = json_string_value(json_object_get(root, "method"));
	if (!method)
		return fail(err, errlen, XP_E_INVALID_REQ, "\"method\" must be a string");
	json_t *params = json_object_get(root, "params");
	if (params && !json_is_object(params))
		return fail(err, errlen, XP_E_INVALID_REQ, "\"params\" must be an object");
	const char *key;
	json_t *value;
	json_object_foreach(root, key, value) {
		if (strcmp(key, "jsonrpc") && strcmp(key, "id") && strcmp(key, "method") &&
		    strcmp(key, "params")) {
			snprintf(err, errlen, "unknown envelope member \"%.32s\"", key);
			return XP_E_INVALID_REQ;
		}
	}
	int m = xp_method_from_name(method);
	if (m < 0) {
		snprintf(err, errlen, "unknown method \"%.64s\"", method);
		return XP_E_NO_METHOD;
	}
	req->method = m;
	req->params = params ? json_incref(params) : json_object();
	return req->params ? 0 : fail(err, errlen, XP_E_INTERNAL, "out of memory");
}

int xp_request_parse(const void *buf, size_t len, struct xp_request *req, char *err, size_t errlen)
{
	json_error_t jerr;

	memset(req, 0, sizeof(*req));
	req->id = XP_ID_NONE;
	req->root = xp_json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!req->root) {
		snprintf(err, errlen, "packet is not valid JSON: %s at byte %d", jerr.text,
			 jerr.position);
		return XP_E_PARSE;
	}
	return parse_envelope(req->root, req, err, errlen);
}

void xp_request_fini(struct xp_request *req)
{
	json_decref(req->params);
	json_decref(req->root);
	req->params = NULL;
	req->root = NULL;
}

static int parse_error_member(json_t *error, struct xp_reply *rep)
{
	json_t *code = json_object_get(error, "code");
	const char *message = json_string_value(json_object_get(error, "message"));

	if (!json_is_integer(code) || !message)
		return -EBADMSG;
	rep->code = (int)json_integer_value(code);
	rep->message = message;
	const char *name =
		json_string_value(json_object_get(json_object_get(error, "data"), "errno"));
	rep->err = name ? xp_errno_from_name(name) : 0;
	if (!rep->err)
		rep->err = EIO;
	return 0;
}

int xp_reply_parse(const void *buf, size_t len, struct xp_reply *rep)
{
	memset(rep, 0, sizeof(*rep));
	rep->id = XP_ID_NONE;
	rep->root = xp_json_loadb(buf, len, 0, NULL);
	if (!json_is_object(rep->root))
		return -EBADMSG;
	json_t *id = json_object_get(rep->root, "id");
	const char *method = json_string_value(json_object_get(rep->root, "method"));
	if (method && !id) {
		rep->notification = true;
		rep->method = method;
		rep->params = json_object_get(rep->root, "params");
		return json_is_object(rep->params) ? 0 : -EBADMSG;
	}
	if (json_is_integer(id))
		rep->id = json_integer_value(id);
	else if (!json_is_null(id))
		return -EBADMSG;
	json_t *error = json_object_get(rep->root, "error");
	if (error)
		return parse_error_member(error, rep);
	rep->result = json_object_get(rep->root, "result");
	return rep->result ? 0 : -EBADMSG;
}

void xp_reply_fini(struct xp_reply *rep)
{
	json_decref(rep->root);
	rep->root = NULL;
}

json_t *xp_build_request(int64_t id, const char *method, json_t *params)
{
	if (!params)
		params = json_object();
	return json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id, "method",
			 method, "params", params);
}

static json_t *id_value(int64_t id)
{
	return id == XP_ID_NONE ? json_null() : json_integer(id);
}

json_t *xp_build_result(int64_t id, json_t *result)
{
	return json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", id_value(id), "result", result);
}

json_t *xp_build_notification(const char *method, json_t *params)
{
	return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
}

void xp_text_u64(struct xp_text *t, uint64_t v)
{
	char digits[21];
	int n = sizeof(digits) - 1;

	digits[n] = '\0';
	do {
		digits[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	xp_text_put(t, digits + n);
}

/* One end {"op","state","bytes","errno"?} of op.batch_done, after a comma unless @first. */
static void batch_end_text(struct xp_text *t, const struct xp_batch_end *e, bool first)
{
	xp_text_put(t, first ? "{\"op\":" : ",{\"op\":");
	xp_text_u64(t, e->op);
	xp_text_put(t, ",\"state\":\"");
	xp_text_put(t, xp_state_name((enum xp_state)e->state));
	xp_text_put(t, "\",\"bytes\":");
	xp_text_u64(t, e->bytes);
	if (e->err) {
		xp_text_put(t, ",\"errno\":\"");
		xp_text_put(t, xp_errno_name(e->err));
		xp_text_put(t, "\"");
	}
	xp_text_put(t, "}");
}

#define BATCH_MORE_TAIL "],\"more\":true}}" /* the longer of a part's two endings */

int xp_batch_done_part(char *buf, size_t cap, uint64_t batch, const struct xp_batch_end *ends,
		       size_t n, bool more_after, size_t *taken)
{
	struct xp_text t = { buf, cap, 0 };
	size_t i;

	xp_text_put(&t, "{\"jsonrpc\":\"2.0\",\"method\":\"" XP_NOTIFY_BATCH_DONE
			"\",\"params\":{\"batch\":");
	xp_text_u64(&t, batch);
	xp_text_put(&t, ",\"ops\":[");
	for (i = 0; i < n; i++) {
		size_t before = t.len;
		batch_end_text(&t, &ends[i], i == 0);
		if (t.len + strlen(BATCH_MORE_TAIL) > cap) {
			t.len = before; /* (that end goes in the next part) */
			break;
		}
	}
	*taken = i;
	xp_text_put(&t, i < n || more_after ? BATCH_MORE_TAIL : "]}}");
	return (n == 0 || i > 0) && t.len <= cap ? (int)t.len : -EMSGSIZE;
}

int xp_batch_done_text(char *buf, size_t cap, uint64_t batch, const struct xp_batch_end *ends,
		       size_t n)
{
	size_t taken;
	int len = xp_batch_done_part(buf, cap, batch, ends, n, false, &taken);

	return len >= 0 && taken == n ? len : -EMSGSIZE;
}

/* ---- op.batch_done read back (xp_batch_done_read()) ---- */

/* A quoted name of letters, digits and '_' (a state's or an errno's), NUL-terminated in @out. */
static bool bd_name(struct xp_cursor *s, char *out, size_t cap)
{
	const char *q;
	size_t n;

	if (!xp_cursor_lit(s, "\""))
		return false;
	for (q = s->p; q < s->end && *q != '"'; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
		      (*q >= '0' && *q <= '9') || *q == '_'))
			return false;
	n = (size_t)(q - s->p);
	if (q >= s->end || n == 0 || n >= cap)
		return false;
	memcpy(out, s->p, n);
	out[n] = '\0';
	s->p = q + 1;
	return true;
}

/* One end {"op","state","bytes","errno"?}, as xp_batch_done_text() writes it. */
static bool bd_end(struct xp_cursor *s, struct xp_batch_end *e)
{
	char name[32];
	int state, err = 0;

	if (!xp_cursor_lit(s, "{\"op\":") || !xp_cursor_u63(s, &e->op) ||
	    !xp_cursor_lit(s, ",\"state\":") || !bd_name(s, name, sizeof(name)) ||
	    (state = xp_state_from_name(name)) < 0 || !xp_cursor_lit(s, ",\"bytes\":") ||
	    !xp_cursor_u63(s, &e->bytes))
		return false;
	if (xp_cursor_lit(s, ",\"errno\":") &&
	    (!bd_name(s, name, sizeof(name)) || (err = xp_errno_from_name(name)) <= 0))
		return false;
	e->state = state;
	e->err = err;
	return xp_cursor_lit(s, "}");
}

int xp_batch_done_read(const char *buf, size_t len, uint64_t *batch, struct xp_batch_end *ends,
		       size_t cap, size_t *n)
{
	struct xp_cursor s = { buf, buf + len };
	size_t i = 0;

	if (!xp_cursor_lit(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"" XP_NOTIFY_BATCH_DONE
			       "\",\"params\":{\"batch\":") ||
	    !xp_cursor_u63(&s, batch) || !xp_cursor_lit(&s, ",\"ops\":["))
		return 1;
	if (!xp_cursor_lit(&s, "]")) {
		do {
			if (i == cap || !bd_end(&s, &ends[i]))
				return 1;
			i++;
		} while (xp_cursor_lit(&s, ","));
		if (!xp_cursor_lit(&s, "]"))
			return 1;
	}
	if (!xp_cursor_lit(&s, "}}") || s.p != s.end)
		return 1;
	*n = i;
	return 0;
}

int xp_batch_reply_read(const char *buf, size_t len, int64_t id, uint64_t *ops, size_t n,
			uint64_t *batch)
{
	struct xp_cursor s = { buf, buf + len };
	char digits[24];
	struct xp_text t = { digits, sizeof(digits) - 1, 0 };

	if (id < 0 || n == 0)
		return 1;
	xp_text_u64(&t, (uint64_t)id);
	digits[t.len] = '\0';
	if (!xp_cursor_lit(&s, "{\"jsonrpc\":\"2.0\",\"id\":") || !xp_cursor_lit(&s, digits) ||
	    !xp_cursor_lit(&s, ",\"result\":{\"results\":["))
		return 1;
	for (size_t i = 0; i < n; i++)
		if (!xp_cursor_lit(&s, i ? ",{\"op\":" : "{\"op\":") ||
		    !xp_cursor_u63(&s, &ops[i]) || !xp_cursor_lit(&s, "}"))
			return 1;
	if (!xp_cursor_lit(&s, "]"))
		return 1;
	*batch = 0;
	if (xp_cursor_lit(&s, ",\"batch\":") && !xp_cursor_u63(&s, batch))
		return 1;
	return xp_cursor_lit(&s, "}}") && s.p == s.end ? 0 : 1;
}

json_t *xp_build_error(int64_t id, int code, int err, const char *message)
{
	return json_pack("{s:s, s:o, s:{s:i, s:s, s:{s:s}}}", "jsonrpc", "2.0", "id", id_value(id),
			 "error", "code", code, "message", message, "data", "errno",
			 xp_errno_name(err));
}

int xp_dump(const json_t *msg, char **out)
{
	size_t len;
	char *s = xp_json_dumps(msg, XP_MAX_MSG, &len);

	if (!s)
		return -ENOMEM;
	if (len > XP_MAX_MSG) {
		free(s);
		return -EMSGSIZE;
	}
	*out = s;
	return (int)len;
}

int xp_get_u64(const json_t *obj, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(obj, key);

	if (!v)
		return -ENOENT;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}
