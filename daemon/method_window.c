// SPDX-License-Identifier: MIT
/*
 * The window.*, op.get, op.put, op.batch and list.windows methods: params checked and handed
 * to window.c (windows and handles), to a local copy, or to a transfer on another node
 * (claim.c). op.batch runs many of these (and the four pairing methods) in one request.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transport.h"

int xd_handle_window_create(struct xd_call *call)
{
	json_int_t region, offset = 0, length = 0;
	const char *access, *openers = "many";

	if (xd_unpack_params(call, "{s:I, s?I, s?I, s:s, s?s}", "region", &region, "offset",
			     &offset, "length", &length, "access", &access, "openers", &openers))
		return -EINVAL;
	if (call->conn->d->stopping)
		return xd_fail(call, XP_E_FAILED, ESHUTDOWN, "the daemon is stopping");
	int mode = xp_access_from_name(access);
	if (mode < 0)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "access must be \"read\", \"write\" or \"readwrite\"");
	if (strcmp(openers, "one") != 0 && strcmp(openers, "many") != 0)
		return xd_fail(call, XP_E_FAILED, EINVAL, "openers must be \"one\" or \"many\"");
	if (region < 0 || offset < 0 || length < 0)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "region, offset and length must not be negative");
	return xd_window_create(call, (uint64_t)region, (uint64_t)offset, (uint64_t)length, mode,
				strcmp(openers, "many") == 0);
}

int xd_handle_window_open(struct xd_call *call)
{
	const char *metadata;
	struct xp_meta m;

	if (xd_unpack_params(call, "{s:s}", "metadata", &metadata))
		return -EINVAL;
	if (call->conn->d->stopping)
		return xd_fail(call, XP_E_FAILED, ESHUTDOWN, "the daemon is stopping");
	int rc = xd_metadata_decode(call, metadata, &m);
	if (rc == 0)
		rc = xd_window_open(call, &m);
	xp_meta_fini(&m);
	return rc;
}

int xd_handle_window_close(struct xd_call *call)
{
	json_int_t id;

	if (xd_unpack_params(call, "{s:I}", "window", &id))
		return -EINVAL;
	if (id < 0)
		return xd_fail(call, XP_E_FAILED, ENOENT, "no window %lld", (long long)id);
	return xd_window_close(call, (uint64_t)id);
}

int xd_handle_list_windows(struct xd_call *call)
{
	return xd_windows_list(call);
}

/* The local pair of a get or put: the owner's internal op, then the copy. */
static int start_local(struct xd_call *call, struct xd_op *active, struct xd_wclaim *wc)
{
	int err;
	struct xd_op *passive = xd_window_claim(call->conn->d, NULL, wc, &err, call->message,
						sizeof(call->message));

	if (!passive) {
		call->code = XP_E_FAILED;
		call->cause_errno = -err;
		xd_op_discard(active);
		return err;
	}
	xd_op_start(call, active, XP_ST_IN_PROGRESS);
	int rc = xd_op_start_local(active, passive);
	if (rc) /* the op exists and has ended: the client learns why from its state */
		xd_op_end(active, XP_ST_ERRORED, -rc, "could not start the copy: %s",
			  strerror(-rc));
	return 0;
}

static int start_remote(struct xd_call *call, struct xd_op *active, const struct xd_wclaim *wc,
			const struct xd_wtarget *t)
{
	active->wreq = calloc(1, sizeof(*active->wreq));
	if (!active->wreq) {
		xd_op_discard(active);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	*active->wreq = (struct xd_wreq){ .window = t->window,
					  .handle = wc->handle,
					  .offset = wc->offset,
					  .has_tag = wc->tag != NULL };
	if (wc->tag)
		snprintf(active->wreq->tag, sizeof(active->wreq->tag), "%s", wc->tag);
	int rc = xd_remote_window_op(call, active, t);
	if (rc)
		xd_op_discard(active);
	return rc;
}

/* What a get or put asks: op.get's or op.put's params, or a compact op.batch entry's. */
struct wreq_in {
	enum xp_kind kind;
	json_int_t window, offset, timeout; /**< timeout -1: none given */
	json_t *descs;			    /**< borrowed; NULL: @raw */
	const struct xp_breq_desc *raw;	    /**< a batch read as text: its @nraw descriptors */
	size_t nraw;
	const char *tag; /**< borrowed; NULL: none */
	int release_on_end;
};

/*
 * {"op": @id}, or NULL when out of memory. Built directly: json_pack() parses its format on
 * every call, and a batch of small gets or puts builds one per operation.
 */
static json_t *op_result(uint64_t id)
{
	json_t *r = json_object();

	if (r && json_object_set_new_nocheck(r, "op", json_integer((json_int_t)id))) {
		json_decref(r);
		r = NULL;
	}
	return r;
}

/*
 * Starts get or put @rq of @call's client. Returns 0 and *@made (its op), or fails @call. A
 * posted batch's entry (@call->no_reply) gets no result: nothing would read it.
 */
static int op_window_start(struct xd_call *call, const struct wreq_in *rq, struct xd_op **made)
{
	enum xp_kind kind = rq->kind;
	json_int_t window = rq->window, offset = rq->offset;
	const char *tag = rq->tag;
	struct xd_wtarget t;

	if (call->conn->d->stopping)
		return xd_fail(call, XP_E_FAILED, ESHUTDOWN, "the daemon is stopping");
	if (window < 0 || offset < 0)
		return xd_fail(call, XP_E_FAILED, EINVAL, "window and offset must not be negative");
	if (tag && strlen(tag) > XP_MAX_TAG)
		return xd_fail(call, XP_E_FAILED, EINVAL, "a notify tag has at most %d bytes",
			       XP_MAX_TAG);
	struct xd_op *active =
		rq->descs ? xd_op_new(call, kind, rq->descs, rq->timeout, rq->release_on_end) :
			    xd_op_new_raw(call, kind, rq->raw, rq->nraw, rq->timeout,
					  rq->release_on_end);
	if (!active)
		return -call->cause_errno;
	struct xd_wclaim wc = { kind, 0, (uint64_t)window, (uint64_t)offset, active->length, tag };
	if (xd_window_check(call, &wc, &t)) {
		xd_op_discard(active);
		return -call->cause_errno;
	}
	wc.window = t.window;
	int rc = t.peer ? start_remote(call, active, &wc, &t) : start_local(call, active, &wc);
	if (rc == 0 && !call->no_reply)
		call->result = op_result(active->id);
	*made = rc == 0 ? active : NULL;
	return rc;
}

/* op.get and op.put: {window, offset, descs, tag?, timeout_ms?, release_on_end?}. */
int xd_handle_op_window(struct xd_call *call)
{
	struct wreq_in rq = { .kind = call->method == XP_M_OP_GET ? XP_KIND_GET : XP_KIND_PUT,
			      .timeout = -1 };
	struct xd_op *op;

	if (xd_unpack_params(call, "{s:I, s:I, s:o, s?s, s?I, s?b}", "window", &rq.window, "offset",
			     &rq.offset, "descs", &rq.descs, "tag", &rq.tag, "timeout_ms",
			     &rq.timeout, "release_on_end", &rq.release_on_end))
		return -EINVAL;
	return op_window_start(call, &rq, &op);
}

/* ---- op.batch ---- */

static int batch_method(const char *name)
{
	int m = xp_method_from_name(name);

	switch (m) {
	case XP_M_OP_GET:
	case XP_M_OP_PUT:
	case XP_M_OP_READABLE:
	case XP_M_OP_WRITABLE:
	case XP_M_OP_READ:
	case XP_M_OP_WRITE:
		return m;
	default:
		return -EINVAL;
	}
}

/* Runs a batch entry of method @m (batch_method()) as its own request @sub. */
static int batch_run(struct xd_call *sub, int m)
{
	switch (m) {
	case XP_M_OP_GET:
	case XP_M_OP_PUT:
		return xd_handle_op_window(sub);
	case XP_M_OP_READ:
	case XP_M_OP_WRITE:
		/*
		 * A batch is answered at once, so its reads and writes never wait for the
		 * owner's answer to their claims (nowait): a refusal is the op's end.
		 */
		if (json_object_set_new(sub->params, "nowait", json_true()))
			return xd_fail(sub, XP_E_INTERNAL, ENOMEM, "out of memory");
		return xd_handle_op_active(sub);
	default:
		return xd_handle_op_passive(sub);
	}
}

/* What an op.batch applies to each of its entries. */
struct batch_opts {
	json_int_t timeout;	/**< "timeout_ms", -1: none (as an entry's own -1) */
	bool release_on_end;	/**< (false: as when absent) */
	bool end_only;		/**< for the pairing entries (false: as when absent) */
	struct xd_batch *batch; /**< "event": "batch": the ops' ends go there */
	bool posted;		/**< "reply": false: no reply, refusals go into the event */
	size_t reply_bytes;	/**< what the entries' results take of the reply, at most */
};

/* @params (a copy the entry owns) gets the batch's options it does not name itself. */
static int batch_defaults(json_t *params, const struct batch_opts *bo)
{
	if (bo->timeout != -1 && !json_object_get(params, "timeout_ms") &&
	    json_object_set_new(params, "timeout_ms", json_integer(bo->timeout)))
		return -ENOMEM;
	if (bo->release_on_end && !json_object_get(params, "release_on_end") &&
	    json_object_set_new(params, "release_on_end", json_true()))
		return -ENOMEM;
	return 0;
}

/*
 * A compact entry ["get" | "put", window, offset, [[region, offset, length], ...], tag?] (so
 * that 1024 fit one packet) into @rq, with the batch's @bo options. Read in place: no params
 * object is built for it. Returns 0, or -EINVAL when it is not one.
 */
static int compact_entry(json_t *entry, const struct batch_opts *bo, struct wreq_in *rq)
{
	size_t n = json_array_size(entry);
	const char *name = json_string_value(json_array_get(entry, 0));
	json_t *window = json_array_get(entry, 1), *offset = json_array_get(entry, 2);

	/* (read by hand, not by json_unpack(), which parses its format on every entry) */
	if ((n != 4 && n != 5) || !name || (strcmp(name, "get") && strcmp(name, "put")) ||
	    !json_is_integer(window) || !json_is_integer(offset) ||
	    !json_is_array(rq->descs = json_array_get(entry, 3)) ||
	    (n == 5 && !(rq->tag = json_string_value(json_array_get(entry, 4)))))
		return -EINVAL;
	rq->window = json_integer_value(window);
	rq->offset = json_integer_value(offset);
	rq->kind = strcmp(name, "get") == 0 ? XP_KIND_GET : XP_KIND_PUT;
	rq->timeout = bo->timeout;
	rq->release_on_end = bo->release_on_end;
	return 0;
}

/*
 * A compact pairing entry ["readable" | "writable", descs] or ["read" | "write", metadata,
 * descs], descs [[region, offset, length], ...], into @in with the batch's @bo options: read in
 * place, as a get's or put's. Returns 0, or -EINVAL when it is not one.
 */
static int compact_pair_entry(json_t *entry, const struct batch_opts *bo, struct xd_pair_in *in)
{
	const char *name = json_string_value(json_array_get(entry, 0));
	int k = name ? xp_kind_from_name(name) : -EINVAL;
	bool active = k == XP_KIND_READ || k == XP_KIND_WRITE;

	if (!active && k != XP_KIND_READABLE && k != XP_KIND_WRITABLE)
		return -EINVAL;
	if (json_array_size(entry) != (active ? 3u : 2u))
		return -EINVAL;
	in->kind = (enum xp_kind)k;
	in->metadata = active ? json_string_value(json_array_get(entry, 1)) : NULL;
	in->descs = json_array_get(entry, active ? 2 : 1);
	if ((active && !in->metadata) || !json_is_array(in->descs))
		return -EINVAL;
	in->timeout = bo->timeout;
	in->release_on_end = bo->release_on_end;
	in->end_only = bo->end_only;
	in->nowait = active; /* (as batch_run() asks of the long form) */
	return 0;
}

/* The new op of a successful (pairing) entry, to join the batch's one event; or NULL. */
static struct xd_op *batch_op(struct xd_call *call, const struct batch_opts *bo, json_t *result)
{
	json_t *id = json_object_get(result, "op");

	return bo->batch && json_is_integer(id) ?
		       xd_op_find_own(call, (uint64_t)json_integer_value(id)) :
		       NULL;
}

/*
 * The reply to a batch is one packet (XP_MAX_MSG): its results, the envelope, and a refusal's
 * message beside them (call->message, up to 6 bytes a byte once escaped). A result is {"op"},
 * or with a readable's or writable's metadata ~300 bytes: 1024 of those would not fit, and a
 * reply that does not fit is never sent (the client would wait for it, its ops made unknown).
 */
#define BATCH_RESULTS_MAX (XP_MAX_MSG - 2048)
#define BATCH_RESULT_SMALL 32 /* {"op": N} and a comma, at most */

/* Bytes result @r takes in the reply, at most. */
static size_t result_bytes(const json_t *r)
{
	const char *metadata = json_string_value(json_object_get(r, "metadata"));

	return BATCH_RESULT_SMALL + (metadata ? strlen(metadata) + 16 : 0);
}

static int batch_reply_full(struct xd_call *call, size_t i)
{
	return xd_fail(
		call, XP_E_FAILED, EMSGSIZE,
		"op.batch entry %zu: the reply would pass %d bytes (XP_MAX_MSG; a readable's "
		"or writable's metadata takes ~300): it and the entries after it were not "
		"run, send them in another batch",
		i, XP_MAX_MSG);
}

/*
 * Entry @i's result @r (@sub's) takes its place in the reply, or it does not fit: then its
 * passive op, which nobody was given (its metadata is in @r only), is taken back and @call
 * fails. An entry with a result of another kind ran only with room for it (batch_entry()).
 */
static int batch_reply_take(struct xd_call *call, size_t i, struct xd_call *sub,
			    struct batch_opts *bo)
{
	size_t bytes = result_bytes(sub->result);

	if (bo->reply_bytes + bytes <= BATCH_RESULTS_MAX) {
		bo->reply_bytes += bytes;
		return 0;
	}
	json_t *id = json_object_get(sub->result, "op");
	struct xd_op *op =
		json_is_integer(id) ? xd_op_find_own(call, (uint64_t)json_integer_value(id)) : NULL;
	if (op && xp_kind_passive(op->kind) && op->state == XP_ST_INITIALIZED)
		xd_op_forget(op);
	json_decref(sub->result);
	sub->result = NULL;
	return batch_reply_full(call, i);
}

/* Entry @i's @sub ended in @rc: its result into @results (with @op into the batch), or why. */
static int batch_entry_end(struct xd_call *call, size_t i, struct xd_call *sub, int rc,
			   struct xd_op *op, json_t *results, struct batch_opts *bo)
{
	if (rc < 0) {
		json_decref(sub->result);
		return xd_fail(call, sub->code, sub->cause_errno, "op.batch entry %zu: %s", i,
			       sub->message);
	}
	if (results && !sub->no_reply && batch_reply_take(call, i, sub, bo) < 0)
		return -call->cause_errno;
	if ((op && bo->batch && xd_batch_join(bo->batch, op) < 0) ||
	    (results && !sub->no_reply && json_array_append_new(results, sub->result)))
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "op.batch entry %zu: out of memory", i);
	return 0;
}

/* Runs compact get or put entry @i (@rq) as its own request. */
static int batch_compact(struct xd_call *call, size_t i, const struct wreq_in *rq, json_t *results,
			 struct batch_opts *bo)
{
	struct xd_call sub = { .conn = call->conn,
			       .id = call->id,
			       .method = rq->kind == XP_KIND_GET ? XP_M_OP_GET : XP_M_OP_PUT,
			       .code = XP_E_FAILED,
			       .compact = true,
			       .no_reply = bo->posted };
	struct xd_op *op = NULL;
	int rc = op_window_start(&sub, rq, &op);

	return batch_entry_end(call, i, &sub, rc, op, results, bo);
}

#define XD_POSTED_PASSIVE_MSG                                                            \
	"op.batch entry %zu: a batch posted with reply false carries no op.readable or " \
	"op.writable (their metadata comes in the reply)"

/* Runs compact pairing entry @i (@in) as its own request. */
static int batch_compact_pair(struct xd_call *call, size_t i, const struct xd_pair_in *in,
			      json_t *results, struct batch_opts *bo)
{
	static const enum xp_method methods[] = {
		[XP_KIND_READABLE] = XP_M_OP_READABLE,
		[XP_KIND_WRITABLE] = XP_M_OP_WRITABLE,
		[XP_KIND_READ] = XP_M_OP_READ,
		[XP_KIND_WRITE] = XP_M_OP_WRITE,
	};
	struct xd_call sub = { .conn = call->conn,
			       .id = call->id,
			       .method = methods[in->kind],
			       .code = XP_E_FAILED,
			       .compact = true };
	struct xd_op *op = NULL;

	if (bo->posted && xp_kind_passive(in->kind))
		return xd_fail(call, XP_E_FAILED, EINVAL, XD_POSTED_PASSIVE_MSG, i);
	int rc = xd_pair_start(&sub, in, &op);

	return batch_entry_end(call, i, &sub, rc, op, results, bo);
}

/* Runs entry @i of a batch as its own request; its result or error goes into @results. */
static int batch_entry(struct xd_call *call, size_t i, json_t *entry, json_t *results,
		       struct batch_opts *bo)
{
	struct xd_call sub = { .conn = call->conn, .id = call->id, .code = XP_E_FAILED };
	const char *name;
	json_t *params = NULL, *owned = NULL;
	json_error_t jerr;
	struct wreq_in rq = { 0 };
	struct xd_pair_in pin;
	int rc;

	/* (room for the smallest result first: only a passive op's can be taken back) */
	if (results && !bo->posted && bo->reply_bytes + BATCH_RESULT_SMALL > BATCH_RESULTS_MAX)
		return batch_reply_full(call, i);
	if (json_is_array(entry) && compact_entry(entry, bo, &rq) == 0)
		return batch_compact(call, i, &rq, results, bo);
	if (json_is_array(entry) && compact_pair_entry(entry, bo, &pin) == 0)
		return batch_compact_pair(call, i, &pin, results, bo);
	if (json_is_array(entry))
		params = NULL;
	else if (json_unpack_ex(entry, &jerr, JSON_STRICT, "{s:s, s:o}", "method", &name, "params",
				&params) ||
		 !json_is_object(params))
		params = NULL;
	else
		params = owned = json_copy(params); /* (the batch's options go into the copy) */
	if (params && batch_defaults(params, bo)) {
		json_decref(owned);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	if (!params)
		return xd_fail(call, XP_E_PARAMS, EINVAL,
			       "op.batch entry %zu must be {\"method\", \"params\": {...}}, "
			       "[\"get\" | \"put\", window, offset, [[region, offset, length], "
			       "...], tag?], [\"readable\" | \"writable\", descs] or "
			       "[\"read\" | \"write\", metadata, descs]",
			       i);
	int m = batch_method(name);
	if (m < 0) {
		json_decref(owned);
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "op.batch entry %zu: a batch carries op.get, op.put, op.readable, "
			       "op.writable, op.read and op.write only",
			       i);
	}
	if (bo->posted && (m == XP_M_OP_READABLE || m == XP_M_OP_WRITABLE)) {
		json_decref(owned);
		return xd_fail(call, XP_E_FAILED, EINVAL, XD_POSTED_PASSIVE_MSG, i);
	}
	bool pairing = m == XP_M_OP_READABLE || m == XP_M_OP_WRITABLE || m == XP_M_OP_READ ||
		       m == XP_M_OP_WRITE;
	if (pairing && bo->end_only && !json_object_get(params, "end_only") &&
	    json_object_set_new(params, "end_only", json_true())) {
		json_decref(owned);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	sub.method = m;
	sub.params = params;
	rc = batch_run(&sub, m);
	json_decref(owned);
	return batch_entry_end(call, i, &sub, rc, rc < 0 ? NULL : batch_op(call, bo, sub.result),
			       results, bo);
}

/* A batch's event (@event_batch: one for the batch) as its options @bo ask. */
static int batch_begin(struct xd_call *call, struct batch_opts *bo, bool event_batch)
{
	/* A posted batch's event is its only answer: without one the client would learn nothing. */
	if (bo->posted && !event_batch)
		return xd_fail(
			call, XP_E_FAILED, EINVAL,
			"reply false needs event \"batch\" (the batch's event is its answer)");
	if (event_batch && !(bo->batch = xd_batch_create(call, bo->posted)))
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	return 0;
}

/*
 * op.batch {"ops": [{"method", "params"}, ...]}: each entry as if sent alone, in order. The
 * first refused entry stops the batch; the reply is still a result, with the ids of the
 * entries before it (which stand) and the refusal: {"results", "failed", "errno", "message"}
 * (PROTOCOL.md §5.2).
 */
/*
 * The batch's options: {"timeout_ms"?, "release_on_end"?, "end_only"? (pairing entries only),
 * "event"?: "each" | "batch"}.
 */
static int batch_opts(struct xd_call *call, struct batch_opts *bo, json_t **ops)
{
	const char *event = "each";
	json_t *timeout = NULL, *release_on_end = NULL, *end_only = NULL, *reply = NULL;

	memset(bo, 0, sizeof(*bo));
	if (xd_unpack_params(call, "{s:o, s?o, s?o, s?o, s?s, s?o}", "ops", ops, "timeout_ms",
			     &timeout, "release_on_end", &release_on_end, "end_only", &end_only,
			     "event", &event, "reply", &reply))
		return -EINVAL;
	if (!json_is_array(*ops) || json_array_size(*ops) == 0 ||
	    json_array_size(*ops) > XP_MAX_BATCH)
		return xd_fail(call, XP_E_FAILED, EINVAL, "ops must be an array of 1 to %d entries",
			       XP_MAX_BATCH);
	if ((timeout && !json_is_integer(timeout)) ||
	    (release_on_end && !json_is_boolean(release_on_end)) ||
	    (end_only && !json_is_boolean(end_only)) || (reply && !json_is_boolean(reply)))
		return xd_fail(call, XP_E_PARAMS, EINVAL,
			       "timeout_ms must be an integer, release_on_end, end_only and reply "
			       "booleans");
	if (strcmp(event, "each") != 0 && strcmp(event, "batch") != 0)
		return xd_fail(call, XP_E_FAILED, EINVAL, "event must be \"each\" or \"batch\"");
	bo->timeout = timeout ? json_integer_value(timeout) : -1;
	bo->release_on_end = release_on_end && json_is_true(release_on_end);
	bo->end_only = end_only && json_is_true(end_only);
	bo->posted = reply && json_is_false(reply);
	return batch_begin(call, bo, strcmp(event, "batch") == 0);
}

/*
 * A posted batch's refusal of entry @failed of @n: the refused entry and the ones after it go
 * into its event, which is then its whole answer (no reply).
 */
static void batch_refuse_posted(struct xd_call *call, const struct batch_opts *bo, size_t n,
				size_t failed)
{
	if (xd_batch_refuse(bo->batch, failed, n - failed - 1, call->cause_errno, call->message))
		xd_log(XD_LOG_ERR, "batch %llu: out of memory recording its refusal",
		       (unsigned long long)bo->batch->id);
}

/* The result: {"results", "batch"?} and, when entry @failed (>= 0) was refused, why. */
static int batch_result(struct xd_call *call, const struct batch_opts *bo, json_t *results,
			long failed)
{
	json_t *r = json_pack("{s:o}", "results", results);

	if (r && bo->batch &&
	    json_object_set_new(r, "batch", json_integer((json_int_t)bo->batch->id))) {
		json_decref(r);
		r = NULL;
	}
	if (r && failed >= 0 &&
	    (json_object_set_new(r, "failed", json_integer(failed)) ||
	     json_object_set_new(r, "errno", json_string(xp_errno_name(call->cause_errno))) ||
	     json_object_set_new(r, "message", json_string(call->message)))) {
		json_decref(r);
		r = NULL;
	}
	xd_batch_seal(bo->batch);
	call->result = r;
	call->no_reply = bo->posted;
	return r ? 0 : xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
}

int xd_handle_op_batch(struct xd_call *call)
{
	json_t *ops, *entry, *results;
	struct batch_opts bo;
	size_t i;

	if (batch_opts(call, &bo, &ops))
		return -call->cause_errno;
	results = json_array();
	if (!results) {
		xd_batch_seal(bo.batch);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	long failed = -1;
	json_array_foreach(ops, i, entry) {
		/* a refused entry stops it: the ones before it stand, their ids go with the why */
		if (batch_entry(call, i, entry, results, &bo) < 0) {
			if (bo.posted)
				batch_refuse_posted(call, &bo, json_array_size(ops), i);
			failed = (long)i;
			break;
		}
	}
	/*
	 * The batch's CLAIMs leave before its reply: the owner's daemon can answer them while
	 * this client wakes for the reply, rather than after (on two busy CPUs, the difference is
	 * a wakeup on the path of every pairing of the batch).
	 */
	xd_peers_flush_ctrl(call->conn->d);
	return batch_result(call, &bo, results, failed);
}

/* ---- op.batch read as text (xp_batch_req_read()) ---- */

/* Runs entry @i of @rq as batch_compact() runs a compact one; its op's id into *@id. */
static int batch_text_entry(struct xd_call *call, const struct xp_batch_req *rq, size_t i,
			    struct batch_opts *bo, uint64_t *id)
{
	const struct xp_breq_entry *e = &rq->e[i];
	char tag[XP_MAX_TAG + 1];
	struct wreq_in in = { .kind = e->put ? XP_KIND_PUT : XP_KIND_GET,
			      .window = e->window,
			      .offset = e->offset,
			      .timeout = bo->timeout,
			      .raw = rq->d + e->desc0,
			      .nraw = e->ndescs,
			      .release_on_end = bo->release_on_end };
	/* (no {"op"} result: the reply is written from the ids) */
	struct xd_call sub = { .conn = call->conn,
			       .id = call->id,
			       .method = e->put ? XP_M_OP_PUT : XP_M_OP_GET,
			       .code = XP_E_FAILED,
			       .compact = true,
			       .no_reply = true };
	struct xd_op *op = NULL;

	if (e->tag) { /* (xp_batch_req_read() bounds it by XP_MAX_TAG) */
		memcpy(tag, e->tag, e->taglen);
		tag[e->taglen] = '\0';
		in.tag = tag;
	}
	int rc = op_window_start(&sub, &in, &op);
	if (op)
		*id = op->id;
	return batch_entry_end(call, i, &sub, rc, op, NULL, bo);
}

/* The reply to a batch whose @n entries all made ops (@ids), written as text. */
static int batch_reply_text(struct xd_call *call, const struct batch_opts *bo, const uint64_t *ids,
			    size_t n)
{
	char text[XP_BREQ_ENTRIES * 32 + 128];
	uint64_t batch = bo->batch ? bo->batch->id : 0;
	bool has_batch = bo->batch != NULL;

	xd_batch_seal(bo->batch); /* (its event, if all ops ended already, before the reply) */
	int len = xp_batch_reply_text(text, sizeof(text), call->id, ids, n, has_batch, batch);
	if (len < 0) /* (a bug: the buffer holds XP_BREQ_ENTRIES of them) */
		return xd_fail(call, XP_E_INTERNAL, EMSGSIZE, "op.batch reply too long");
	xd_conn_send_text(call->conn, text, (size_t)len); /* (a failure closes the connection) */
	call->answered = true;
	return 0;
}

/* {"results": [{"op"} for @ids[0..@n)]} (a refused batch's reply is built as JSON). */
static json_t *batch_results_json(const uint64_t *ids, size_t n)
{
	json_t *results = json_array();

	for (size_t i = 0; results && i < n; i++)
		if (json_array_append_new(results, op_result(ids[i]))) {
			json_decref(results);
			results = NULL;
		}
	return results;
}

int xd_handle_op_batch_text(struct xd_call *call, const struct xp_batch_req *rq)
{
	struct batch_opts bo = { .timeout = rq->timeout_ms,
				 .release_on_end = rq->release_on_end,
				 .end_only = rq->end_only,
				 .posted = rq->posted };
	uint64_t ids[XP_BREQ_ENTRIES];
	long failed = -1;

	if (batch_begin(call, &bo, rq->event_batch))
		return -call->cause_errno;
	for (size_t i = 0; i < rq->n; i++) {
		/* (as xd_handle_op_batch(): a refused entry stops it, the ones before it stand) */
		if (batch_text_entry(call, rq, i, &bo, &ids[i]) < 0) {
			if (bo.posted)
				batch_refuse_posted(call, &bo, rq->n, i);
			failed = (long)i;
			break;
		}
	}
	xd_peers_flush_ctrl(call->conn->d); /* (as xd_handle_op_batch()) */
	if (bo.posted && failed < 0) {
		xd_batch_seal(bo.batch);
		call->answered = true; /* (its event is its answer) */
		return 0;
	}
	if (failed < 0)
		return batch_reply_text(call, &bo, ids, rq->n);
	json_t *results = batch_results_json(ids, bo.posted ? 0 : (size_t)failed);
	if (!results) {
		xd_batch_seal(bo.batch);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	return batch_result(call, &bo, results, failed);
}
