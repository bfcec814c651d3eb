// SPDX-License-Identifier: MIT
/*
 * The op.* and list.ops methods: their params checked and turned into operations (descriptors,
 * deadlines, metadata), then handed to the state machine in op.c, to a local copy, or to a
 * claim on another node (claim.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transport.h"

#define XD_MAX_TIMEOUT_MS 86400000ull /* a day: op and wait timeouts */

/*
 * A compact descriptor [region, offset, length] into the three: true, or false when @o is not
 * an array of exactly three integers. Read by hand: json_unpack_ex() parses its format string
 * on every call, a cost paid per operation in a batch of small gets or puts.
 */
static bool compact_desc(const json_t *o, json_int_t *region, json_int_t *offset,
			 json_int_t *length)
{
	const json_t *v[3];

	if (!json_is_array(o) || json_array_size(o) != 3)
		return false;
	for (size_t i = 0; i < 3; i++)
		if (!json_is_integer(v[i] = json_array_get(o, i)))
			return false;
	*region = json_integer_value(v[0]);
	*offset = json_integer_value(v[1]);
	*length = json_integer_value(v[2]);
	return true;
}

/* A descriptor's values, read from JSON or text: into @op's segment @i, or @call failed. */
static int desc_check(struct xd_call *call, json_int_t region, json_int_t offset, json_int_t length,
		      struct xd_op *op, size_t i)
{
	struct xd_seg *seg = &op->segs[i];
	uint64_t end;

	if (region < 0 || offset < 0 || length <= 0)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "descriptor offset must be >= 0 and length > 0");
	seg->region = xd_region_lookup(call, (uint64_t)region);
	if (!seg->region)
		return -call->cause_errno;
	if (__builtin_add_overflow((uint64_t)offset, (uint64_t)length, &end) ||
	    end > seg->region->length)
		return xd_fail(
			call, XP_E_FAILED, EINVAL,
			"descriptor [%lld, +%lld) passes the end of region %lld (%llu bytes)",
			(long long)offset, (long long)length, (long long)region,
			(unsigned long long)seg->region->length);
	seg->offset = (uint64_t)offset;
	seg->length = (uint64_t)length;
	if (__builtin_add_overflow(op->length, seg->length, &op->length))
		return xd_fail(call, XP_E_FAILED, EINVAL, "total length overflows");
	return 0;
}

/*
 * A descriptor {"region", "offset", "length"}, or in op.batch's compact get and put entries
 * (@call->compact, PROTOCOL.md §5.2) [region, offset, length]: read where it is, not rebuilt.
 */
static int parse_desc(struct xd_call *call, json_t *o, struct xd_op *op, size_t i)
{
	json_int_t region, offset, length;
	json_error_t jerr;

	if (call->compact && !compact_desc(o, &region, &offset, &length))
		return xd_fail(call, XP_E_PARAMS, EINVAL,
			       "invalid descriptor: a compact one is [region, offset, length], "
			       "three integers");
	if (!call->compact && json_unpack_ex(o, &jerr, JSON_STRICT, "{s:I, s:I, s:I}", "region",
					     &region, "offset", &offset, "length", &length))
		return xd_fail(call, XP_E_PARAMS, EINVAL, "invalid descriptor: %s", jerr.text);
	return desc_check(call, region, offset, length, op, i);
}

static int parse_descs(struct xd_call *call, json_t *arr, struct xd_op *op)
{
	size_t n = json_array_size(arr), i;
	json_t *v;

	if (!json_is_array(arr) || n == 0 || n > XP_MAX_DESCS)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "descs must be an array of 1 to %d descriptors", XP_MAX_DESCS);
	op->segs = calloc(n, sizeof(*op->segs));
	if (!op->segs)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	json_array_foreach(arr, i, v) {
		int rc = parse_desc(call, v, op, i);
		if (rc)
			return rc;
	}
	op->nsegs = (uint32_t)n;
	return 0;
}

/* The descriptors of a batch read as text (xp_batch_req_read()): as parse_descs() reads JSON. */
static int raw_descs(struct xd_call *call, const struct xp_breq_desc *d, size_t n, struct xd_op *op)
{
	/* (n >= 1: descs is required, and xp_batch_req_read() refuses an empty list) */
	/* NOLINTNEXTLINE(clang-analyzer-optin.portability.UnixAPI) */
	op->segs = calloc(n, sizeof(*op->segs));
	if (!op->segs)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		int rc = desc_check(call, d[i].region, d[i].offset, d[i].length, op, i);
		if (rc)
			return rc;
	}
	op->nsegs = (uint32_t)n;
	return 0;
}

/*
 * What a region's fd allows (a file's access mode; memfds allow both): a readable's or a
 * write's regions are read, a read's or a writable's written. Returns 0 or fails @call.
 */
static int check_access(struct xd_call *call, const struct xd_op *op)
{
	bool source = op->kind == XP_KIND_READABLE || op->kind == XP_KIND_WRITE;

	for (uint32_t i = 0; i < op->nsegs; i++) {
		const struct xd_region *r = op->segs[i].region;
		/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): desc_check set it */
		if (source && !r->may_read)
			return xd_fail(call, XP_E_FAILED, EBADF,
				       "region %llu's file is open write-only: it cannot be the "
				       "source of %s",
				       (unsigned long long)r->id, xp_kind_name(op->kind));
		/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): desc_check set it */
		if (!source && !r->may_write)
			return xd_fail(call, XP_E_FAILED, EBADF,
				       "region %llu's file is open read-only: it cannot be the "
				       "target of %s",
				       (unsigned long long)r->id, xp_kind_name(op->kind));
	}
	return 0;
}

/* @timeout is -1 when the request had none. */
static int check_timeout(struct xd_call *call, json_int_t timeout, uint64_t *out)
{
	if (timeout == -1) {
		*out = call->conn->d->cfg.default_timeout_ms;
		return 0;
	}
	if (timeout <= 0 || (uint64_t)timeout > XD_MAX_TIMEOUT_MS)
		return xd_fail(call, XP_E_FAILED, EINVAL, "timeout_ms must be 1 to %llu",
			       XD_MAX_TIMEOUT_MS);
	*out = (uint64_t)timeout;
	return 0;
}

/*
 * Builds an op from the descriptors, JSON @descs or, when it is NULL, @raw[0..@nraw) (1 to
 * XP_BREQ_DESCS of them); not yet listed, no deadline running.
 */
static struct xd_op *op_new(struct xd_call *call, enum xp_kind kind, json_t *descs,
			    const struct xp_breq_desc *raw, size_t nraw, json_int_t timeout,
			    int release_on_end)
{
	struct xd_conn *c = call->conn;
	char msg[200];

	/* Checked here, charged when the op is listed (op.c), before anything is allocated. */
	if (xd_charge_check(c->d, c->use, c->uid, XD_RES_OPS, 1, msg, sizeof(msg))) {
		xd_fail(call, XP_E_FAILED, EDQUOT, "%s; release ended operations", msg);
		return NULL;
	}
	struct xd_op *op = xd_op_create(c->d, kind);
	if (!op) {
		xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		return NULL;
	}
	op->release_on_end = release_on_end;
	op->client_id = c->id;
	if (check_timeout(call, timeout, &op->timeout_ms) ||
	    (descs ? parse_descs(call, descs, op) : raw_descs(call, raw, nraw, op)) ||
	    check_access(call, op)) {
		xd_op_discard(op);
		return NULL;
	}
	return op;
}

struct xd_op *xd_op_new(struct xd_call *call, enum xp_kind kind, json_t *descs, json_int_t timeout,
			int release_on_end)
{
	return op_new(call, kind, descs, NULL, 0, timeout, release_on_end);
}

struct xd_op *xd_op_new_raw(struct xd_call *call, enum xp_kind kind, const struct xp_breq_desc *raw,
			    size_t nraw, json_int_t timeout, int release_on_end)
{
	return op_new(call, kind, NULL, raw, nraw, timeout, release_on_end);
}

static json_t *passive_result(struct xd_op *op)
{
	struct xd_daemon *d = op->d;
	struct xp_meta m = { .kind = op->kind, .epoch = d->epoch, .op = op->id };
	char *metadata = NULL;

	memcpy(m.node, d->node, sizeof(m.node));
	memcpy(m.token, op->token, sizeof(m.token));
	memcpy(m.endpoints, d->endpoints, sizeof(m.endpoints));
	m.nendpoints = d->nendpoints;
	m.nlengths = op->nsegs;
	m.lengths = calloc(op->nsegs, sizeof(*m.lengths));
	if (!m.lengths)
		return NULL;
	for (uint32_t i = 0; i < op->nsegs; i++)
		m.lengths[i] = op->segs[i].length;
	int rc = xp_meta_encode(&m, &metadata);
	xp_meta_fini(&m);
	if (rc)
		return NULL;
	/*
	 * Built member by member, not with json_pack(): no format to read, and the metadata is
	 * ASCII by construction ("xfer1." and base64url), so it needs no UTF-8 check (a batch of
	 * readables returns one per entry).
	 */
	json_t *result = json_object();
	if (result &&
	    (json_object_set_new_nocheck(result, "op", json_integer((json_int_t)op->id)) ||
	     json_object_set_new_nocheck(result, "metadata",
					 json_stringn_nocheck(metadata, strlen(metadata))))) {
		json_decref(result); /* (a _set_new() takes its value, NULL or not, even failing) */
		result = NULL;
	}
	free(metadata);
	return result;
}

static int passive_start(struct xd_call *call, const struct xd_pair_in *in, struct xd_op **out)
{
	struct xd_op *op = xd_op_new(call, in->kind, in->descs, in->timeout, in->release_on_end);

	if (!op)
		return -call->cause_errno;
	op->end_only = in->end_only;
	if (xd_random_pooled(call->conn->d, op->token, sizeof(op->token)) < 0) {
		xd_op_discard(op);
		return xd_fail(call, XP_E_INTERNAL, EIO, "getrandom failed");
	}
	xd_op_start(call, op, XP_ST_INITIALIZED);
	call->result = passive_result(op);
	if (!call->result) /* nothing was given out: take the op back */
		xd_op_forget(op);
	else
		*out = op;
	return 0;
}

int xd_handle_op_passive(struct xd_call *call)
{
	struct xd_pair_in in = {
		.kind = call->method == XP_M_OP_READABLE ? XP_KIND_READABLE : XP_KIND_WRITABLE,
		.timeout = -1,
	};
	struct xd_op *op;

	if (xd_unpack_params(call, "{s:o, s?I, s?b, s?b}", "descs", &in.descs, "timeout_ms",
			     &in.timeout, "release_on_end", &in.release_on_end, "end_only",
			     &in.end_only))
		return -EINVAL;
	return xd_pair_start(call, &in, &op);
}

/* A local claim: the same refusals, all decided before any byte moves. */
static struct xd_op *claim_check(struct xd_call *call, const struct xp_meta *m,
				 const struct xd_op *active)
{
	struct xd_claim cl = {
		.want = active->kind == XP_KIND_READ ? XP_KIND_READABLE : XP_KIND_WRITABLE,
		.method = xp_method_name(call->method),
		.epoch = m->epoch,
		.op = m->op,
		.length = active->length,
		.meta_kind = m->kind,
	};
	int err;

	memcpy(cl.node, m->node, XP_ID_BYTES);
	memcpy(cl.token, m->token, XP_ID_BYTES);
	struct xd_op *passive =
		xd_claim_lookup(call->conn->d, &cl, &err, call->message, sizeof(call->message));
	if (!passive) {
		call->code = XP_E_FAILED;
		call->cause_errno = -err;
	}
	return passive;
}

int xd_metadata_decode(struct xd_call *call, const char *metadata, struct xp_meta *m)
{
	char err[200];
	int rc = xp_meta_decode(metadata, m, err, sizeof(err));

	if (rc == -ENOMEM)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	return rc ? xd_fail(call, XP_E_FAILED, EBADMSG, "%s", err) : 0;
}

static int active_start(struct xd_call *call, const struct xd_pair_in *in, struct xd_op **out)
{
	enum xp_kind kind = in->kind;
	bool nowait = in->nowait;
	struct xp_meta m;
	struct xd_op *active = xd_op_new(call, kind, in->descs, in->timeout, in->release_on_end);

	if (!active)
		return -call->cause_errno;
	active->end_only = in->end_only;
	int rc = xd_metadata_decode(call, in->metadata, &m);
	if (rc == 0 && m.kind == XP_KIND_WINDOW) {
		xp_meta_fini(&m);
		rc = xd_fail(call, XP_E_FAILED, EINVAL,
			     "metadata is for a window; %s needs %s metadata (windows take op.get "
			     "and op.put after window.open)",
			     xp_method_name(call->method),
			     kind == XP_KIND_READ ? "readable" : "writable");
	}
	if (rc == 0 && memcmp(m.node, call->conn->d->node, XP_ID_BYTES) != 0) {
		active->claim_nowait = nowait;
		rc = xd_remote_claim(call, active, &m); /* without nowait the reply waits */
		xp_meta_fini(&m);
		if (rc) {
			xd_op_discard(active);
		} else if (nowait) {
			call->result = json_pack("{s:I}", "op", (json_int_t)active->id);
			*out = active;
		}
		return rc;
	}
	struct xd_op *passive = rc ? NULL : claim_check(call, &m, active);
	xp_meta_fini(&m);
	if (!passive) {
		xd_op_discard(active);
		return -call->cause_errno;
	}
	xd_op_start(call, active, XP_ST_IN_PROGRESS);
	rc = xd_op_start_local(active, passive);
	if (rc) /* the op exists and has ended: the client learns why from its state */
		xd_op_end(active, XP_ST_ERRORED, -rc, "could not start the copy: %s",
			  strerror(-rc));
	call->result = json_pack("{s:I}", "op", (json_int_t)active->id);
	*out = active;
	return 0;
}

int xd_pair_start(struct xd_call *call, const struct xd_pair_in *in, struct xd_op **op)
{
	*op = NULL;
	if (call->conn->d->stopping)
		return xd_fail(call, XP_E_FAILED, ESHUTDOWN, "the daemon is stopping");
	return xp_kind_passive(in->kind) ? passive_start(call, in, op) : active_start(call, in, op);
}

int xd_handle_op_active(struct xd_call *call)
{
	struct xd_pair_in in = {
		.kind = call->method == XP_M_OP_READ ? XP_KIND_READ : XP_KIND_WRITE,
		.timeout = -1,
	};
	struct xd_op *op;

	if (xd_unpack_params(call, "{s:s, s:o, s?I, s?b, s?b, s?b}", "metadata", &in.metadata,
			     "descs", &in.descs, "timeout_ms", &in.timeout, "release_on_end",
			     &in.release_on_end, "nowait", &in.nowait, "end_only", &in.end_only))
		return -EINVAL;
	return xd_pair_start(call, &in, &op);
}

static int unpack_op(struct xd_call *call, struct xd_op **op)
{
	json_int_t id;

	if (xd_unpack_params(call, "{s:I}", "op", &id))
		return -EINVAL;
	*op = xd_op_lookup(call, (uint64_t)id);
	return *op ? 0 : -call->cause_errno;
}

int xd_handle_op_status(struct xd_call *call)
{
	struct xd_op *op;
	int rc = unpack_op(call, &op);

	if (rc)
		return rc;
	call->result = xd_op_to_json(op);
	return 0;
}

int xd_handle_op_wait(struct xd_call *call)
{
	json_int_t id, timeout = -1;

	if (xd_unpack_params(call, "{s:I, s?I}", "op", &id, "timeout_ms", &timeout))
		return -EINVAL;
	if (timeout < -1 || timeout > (json_int_t)XD_MAX_TIMEOUT_MS)
		return xd_fail(call, XP_E_FAILED, EINVAL, "timeout_ms must be 0 to %llu",
			       XD_MAX_TIMEOUT_MS);
	struct xd_op *op = xd_op_lookup(call, (uint64_t)id);
	if (!op)
		return -call->cause_errno;
	if (xp_state_terminal(op->state)) {
		call->result = xd_op_to_json(op);
		return 0;
	}
	return xd_waiter_add(call, op, timeout);
}

int xd_handle_op_cancel(struct xd_call *call)
{
	struct xd_op *op;
	int rc = unpack_op(call, &op);

	if (rc)
		return rc;
	if (op->owner == call->conn)
		xd_op_end(op, XP_ST_CANCELLED, ECANCELED, "cancelled by its owner");
	else
		xd_op_end(op, XP_ST_CANCELLED, ECANCELED, "cancelled by root (client %llu)",
			  (unsigned long long)call->conn->id);
	if (xp_state_terminal(op->state)) {
		call->result = xd_op_to_json(op);
		return 0;
	}
	return xd_waiter_add(call, op, -1); /* replies once the running copy has stopped */
}

int xd_handle_op_release(struct xd_call *call)
{
	struct xd_op *op;
	int rc = unpack_op(call, &op);

	if (rc)
		return rc;
	xd_op_end(op, XP_ST_CANCELLED, ECANCELED, "released by its owner before it ended");
	xd_op_forget(op);
	call->result = json_object();
	return 0;
}

static json_t *op_entry(const void *op, void *arg)
{
	return xd_op_to_json(op);
}

/* Pages by op id (PROTOCOL.md §7). */
int xd_handle_list_ops(struct xd_call *call)
{
	struct xd_daemon *d = call->conn->d;
	struct xd_page_item *items;
	struct xd_page pg;
	struct xd_op *op;
	size_t n = 0;
	int rc = xd_page_begin(call, &pg);

	if (rc)
		return rc;
	TAILQ_FOREACH(op, &d->ops, link)
		n++;
	items = calloc(n + 1, sizeof(*items));
	if (!items)
		return xd_page_finish(call, &pg, "ops", -ENOMEM);
	n = 0;
	TAILQ_FOREACH(op, &d->ops, link)
		if (op->owner && xd_conn_may_access(call->conn, op->owner) &&
		    (json_int_t)op->id > pg.after)
			items[n++] = (struct xd_page_item){ op->id, op };
	rc = xd_page_fill(&pg, items, n, op_entry, NULL);
	free(items);
	return xd_page_finish(call, &pg, "ops", rc);
}
