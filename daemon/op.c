// SPDX-License-Identifier: MIT
/*
 * Operations and their state machine (PROTOCOL.md §5-§6):
 *
 *   passive: INITIALIZED --claim--> IN_PROGRESS --copy done--> COMPLETE
 *   active:                  (created on claim) IN_PROGRESS --copy done--> COMPLETE
 *   any state that has not ended --cancel/deadline/disconnect/shutdown--> CANCELLED | ERRORED
 *
 * Whatever ends one side ends its pair, with a cause naming why. An end requested while a copy
 * runs is applied when the copy returns, so no one is told CANCELLED while bytes still land in
 * their buffer, and no mapping goes away under a worker thread.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "transport.h"

/* ---- lookup, listing, notification ---- */

/* (by the index, not a walk of d->ops: a batch names up to 1024, a peer one a claim) */
static struct xd_op *op_find(struct xd_daemon *d, uint64_t id)
{
	return XD_IDMAP_OBJ(xd_idmap_get(&d->op_ids, id), struct xd_op, by_id);
}

struct xd_op *xd_op_lookup(struct xd_call *call, uint64_t id)
{
	struct xd_op *op = op_find(call->conn->d, id);

	if (!op || !op->owner) { /* (an op its owner let go of is gone, even if not yet freed) */
		xd_fail(call, XP_E_FAILED, ENOENT, "no operation %llu", (unsigned long long)id);
		return NULL;
	}
	if (!xd_conn_may_access(call->conn, op->owner)) {
		xd_fail(call, XP_E_FAILED, EPERM, "operation %llu belongs to another client",
			(unsigned long long)id);
		return NULL;
	}
	return op;
}

static uint64_t op_bytes(const struct xd_op *op)
{
	if (op->job)
		return xd_transport_local(op->d)->copy_progress(op->job);
	return op->xfer ? xd_xfer_bytes(op->xfer) : op->bytes;
}

json_t *xd_op_to_json(const struct xd_op *op)
{
	uint64_t age = (xd_now_us() - op->created_us) / 1000;
	json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:I, s:I}", "op",
			      (json_int_t)op->id, "kind", xp_kind_name(op->kind), "state",
			      xp_state_name(op->state), "length", (json_int_t)op->length, "bytes",
			      (json_int_t)op_bytes(op), "transport", op->transport, "peer",
			      op->peer, "client", (json_int_t)op->client_id, "timeout_ms",
			      (json_int_t)op->timeout_ms, "age_ms", (json_int_t)age);

	if (o && op->wreq &&
	    json_object_set_new(o, "window", json_integer((json_int_t)op->wreq->handle))) {
		json_decref(o);
		return NULL;
	}
	if (o && op->cause_errno &&
	    (json_object_set_new(o, "errno", json_string(xp_errno_name(op->cause_errno))) ||
	     json_object_set_new(o, "cause", json_string(op->cause)))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/*
 * Tells @op's owner of its new state, and the event subscribers (events.subscribe) that may
 * see it. @to_owner false: the owner learns it from a reply instead.
 */
static void notify(struct xd_op *op, bool to_owner)
{
	if (!op->owner)
		return;
	if (op->life == XD_OP_CLAIMING)
		to_owner = false; /* its client learns of it from the reply to op.read/op.write */
	if (!to_owner && !op->d->event_subscribers)
		return;
	json_t *msg = xp_build_notification(XP_NOTIFY_OP_CHANGED, xd_op_to_json(op));
	if (msg && to_owner)
		xd_client_send(op->owner, msg);
	if (msg && op->d->event_subscribers)
		op->d->clients->publish(op->d, op->owner, msg);
	json_decref(msg);
}

/* ---- batches with one event (op.batch "event": "batch") ---- */

static void batch_free(struct xd_batch *b)
{
	xd_defer_cancel(b->d, &b->push_later);
	free(b->ends);
	json_decref(b->refusal);
	free(b);
}

/* @b's ends [@from, @from + @n) as the array op.batch_done lists, or NULL when out of memory. */
static json_t *batch_ends_json(const struct xd_batch *b, size_t from, size_t n)
{
	json_t *arr = json_array();

	for (size_t i = from; arr && i < from + n; i++) {
		const struct xp_batch_end *e = &b->ends[i];
		json_t *o = json_pack("{s:I, s:s, s:I}", "op", (json_int_t)e->op, "state",
				      xp_state_name((enum xp_state)e->state), "bytes",
				      (json_int_t)e->bytes);
		if (o && e->err &&
		    json_object_set_new(o, "errno", json_string(xp_errno_name(e->err)))) {
			json_decref(o);
			o = NULL;
		}
		if (!o || json_array_append_new(arr, o)) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return arr;
}

/*
 * The last part of a refused batch's event, through jansson (its message quotes client text):
 * @b's ends from @from on, with the refusal's members.
 */
static void batch_push_refusal(struct xd_batch *b, struct xd_conn *c, size_t from)
{
	json_t *ends = batch_ends_json(b, from, b->nends - from);
	json_t *params = ends ? json_pack("{s:I, s:o}", "batch", (json_int_t)b->id, "ops", ends) :
				NULL;
	json_t *msg;

	if (params && json_object_update(params, b->refusal)) {
		json_decref(params);
		params = NULL;
	}
	msg = xp_build_notification(XP_NOTIFY_BATCH_DONE, params);
	if (msg)
		xd_client_send(c, msg);
	json_decref(msg);
}

#define BATCH_END_TEXT_MAX 128 /* bytes of one end's text, at most (20-digit values, errno) */
#define BATCH_TEXT_STACK 4096  /* a batch's text up to this size is written on the stack */
#define BATCH_REFUSAL_ENDS 64  /* a refused batch's last ends, sent with its message */

/*
 * Pushes @b's ends [0, @upto) as op.batch_done text (xp_batch_done_part()): one packet, or
 * parts of as many ends as fit in one, each but the last saying "more" (PROTOCOL.md §5.2), or
 * all of them when @more_after (the refusal's part follows). A long batch whose ends carry
 * errnos and long ids passes 64 KiB (1024 ends of ~70 bytes): sent as one, it was dropped, and
 * its client waited for it for ever. Returns 0, or -errno when a part could not be written.
 */
static int batch_push_text(struct xd_batch *b, struct xd_conn *c, size_t upto, bool more_after)
{
	char stack[BATCH_TEXT_STACK], *text = stack;
	size_t cap = BATCH_END_TEXT_MAX * (upto + 1), from = 0, taken;
	int len = 0;

	if (cap > XP_MAX_MSG)
		cap = XP_MAX_MSG;
	/* cppcheck-suppress legacyUninitvar ; its address, not its bytes */
	if (cap > sizeof(stack) && !(text = malloc(cap)))
		return -ENOMEM;
	do {
		/* (no ends: an empty list, and b->ends may be NULL) */
		const struct xp_batch_end *next = upto ? b->ends + from : NULL;
		len = xp_batch_done_part(text, cap, b->id, next, upto - from, more_after, &taken);
		if (len > 0)
			xd_client_send_text(c, text, (size_t)len);
		from += taken;
	} while (len > 0 && from < upto);
	if (text != stack)
		free(text);
	return len < 0 ? len : 0;
}

/*
 * Pushes @b's op.batch_done and frees @b. Its ends are written as text (xp_batch_done_part()):
 * no jansson object per end, the daemon's largest cost per posted operation after the kernel's.
 * A short batch's text is written on the stack: a malloc() of 1 KiB or more makes glibc
 * consolidate its fast bins first, which with a batch's JSON just freed cost ~5% of the opener
 * daemon's CPU at 4 KiB (batches of 8). A refused batch's last ends go with its message.
 */
static void batch_push_cb(void *arg)
{
	struct xd_batch *b = arg;
	struct xd_conn *c = xd_client_find(b->d, b->client);
	size_t tail = b->nends < BATCH_REFUSAL_ENDS ? b->nends : BATCH_REFUSAL_ENDS;
	size_t upto = b->refusal ? b->nends - tail : b->nends;

	if (c && (upto > 0 || !b->refusal) && batch_push_text(b, c, upto, b->refusal) < 0)
		xd_log(XD_LOG_WARN, "client %llu: batch %llu's op.batch_done could not be written",
		       (unsigned long long)c->id, (unsigned long long)b->id);
	if (c && b->refusal)
		batch_push_refusal(b, c, upto);
	batch_free(b);
}

static void batch_maybe_done(struct xd_batch *b)
{
	if (b->sealed && b->pending == 0)
		xd_defer(b->d, &b->push_later, batch_push_cb, b);
}

struct xd_batch *xd_batch_create(struct xd_call *call, bool posted)
{
	struct xd_batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->d = call->conn->d;
	b->id = posted ? (uint64_t)call->id : ++b->d->next_batch;
	b->client = call->conn->id;
	return b;
}

/* Appends an end to @b's list (one per entry of its request). Returns 0 or -ENOMEM. */
static int batch_add_end(struct xd_batch *b, uint64_t op, enum xp_state state, uint64_t bytes,
			 int cause_errno)
{
	if (b->nends == b->ends_cap) {
		size_t cap = b->ends_cap ? 2 * b->ends_cap : 8;
		struct xp_batch_end *ends = realloc(b->ends, cap * sizeof(*ends));
		if (!ends)
			return -ENOMEM;
		b->ends = ends;
		b->ends_cap = cap;
	}
	b->ends[b->nends++] = (struct xp_batch_end){
		.op = op, .bytes = bytes, .state = (int32_t)state, .err = cause_errno
	};
	return 0;
}

/* Records @op's end in its batch (a compact entry: the cause is op.status's, while listed). */
static void batch_op_ended(struct xd_op *op)
{
	struct xd_batch *b = op->batch;

	if (batch_add_end(b, op->id, op->state, op_bytes(op), op->cause_errno) < 0)
		xd_log(XD_LOG_ERR, "batch %llu: out of memory recording op %llu",
		       (unsigned long long)b->id, (unsigned long long)op->id);
	op->batch = NULL;
	b->pending--;
	batch_maybe_done(b);
}

int xd_batch_join(struct xd_batch *b, struct xd_op *op)
{
	op->batch = b;
	b->pending++;
	if (xp_state_terminal(op->state))
		batch_op_ended(op); /* (it ended while its request ran: a refused local copy) */
	return 0;
}

/* One end for an entry that made no op (op 0): @state with @cause_errno. Returns 0 or -ENOMEM. */
static int batch_add_unmade(struct xd_batch *b, enum xp_state state, int cause_errno)
{
	return batch_add_end(b, 0, state, 0, cause_errno ?: EIO); /* (it always names one) */
}

int xd_batch_refuse(struct xd_batch *b, size_t failed, size_t skipped, int cause_errno,
		    const char *message)
{
	json_decref(b->refusal);
	b->refusal = json_pack("{s:I, s:s}", "failed", (json_int_t)failed, "message", message);
	if (!b->refusal || batch_add_unmade(b, XP_ST_ERRORED, cause_errno))
		return -ENOMEM;
	for (size_t i = 0; i < skipped; i++)
		if (batch_add_unmade(b, XP_ST_CANCELLED, ECANCELED))
			return -ENOMEM;
	return 0;
}

void xd_batch_seal(struct xd_batch *b)
{
	if (!b)
		return;
	b->sealed = true;
	batch_maybe_done(b);
}

struct xd_op *xd_op_find_own(struct xd_call *call, uint64_t id)
{
	struct xd_op *op = op_find(call->conn->d, id);

	/* (by client id: an op released on its end has no owner any more, but is still here) */
	return op && op->client_id == call->conn->id && !op->internal ? op : NULL;
}

static void notify_owner(struct xd_op *op)
{
	/* (a batch's ops end into op.batch_done; subscribers still see them change) */
	notify(op, !op->batch);
}

/* ---- waiters (op.wait, and op.cancel while a copy stops) ---- */

static void waiter_free(struct xd_waiter *w)
{
	xd_uncharge(w->op->d, w->conn->use, w->conn->uid, XD_RES_WAITS, 1);
	TAILQ_REMOVE(&w->op->waiters, w, op_link);
	TAILQ_REMOVE(&w->conn->waiters, w, conn_link);
	xd_event_free(w->timer);
	free(w);
}

static void waiter_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_waiter *w = arg;
	char msg[128];

	snprintf(msg, sizeof(msg), "op %llu is still %s after %llu ms",
		 (unsigned long long)w->op->id, xp_state_name(w->op->state),
		 (unsigned long long)w->timeout_ms);
	xd_client_reply_error(w->conn, w->id, XP_E_FAILED, ETIMEDOUT, msg);
	waiter_free(w);
}

int xd_waiter_add(struct xd_call *call, struct xd_op *op, int64_t timeout_ms)
{
	struct xd_conn *c = call->conn;
	char msg[200];
	/* A waiter is a deferred reply the daemon must keep: bounded per connection and in all. */
	int rc = xd_charge(op->d, c->use, c->uid, XD_RES_WAITS, 1, msg, sizeof(msg));

	if (rc)
		return xd_fail(call, XP_E_FAILED, -rc, "%s", msg);
	struct xd_waiter *w = calloc(1, sizeof(*w));
	if (!w) {
		xd_uncharge(op->d, c->use, c->uid, XD_RES_WAITS, 1);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	w->conn = call->conn;
	w->op = op;
	w->id = call->id;
	if (timeout_ms >= 0) {
		struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
		w->timeout_ms = (uint64_t)timeout_ms;
		w->timer = evtimer_new(op->d->base, waiter_timeout_cb, w);
		event_base_update_cache_time(op->d->base); /* (from now: see arm_deadline()) */
		if (!w->timer || evtimer_add(w->timer, &tv) < 0) {
			xd_event_free(w->timer);
			free(w);
			xd_uncharge(op->d, c->use, c->uid, XD_RES_WAITS, 1);
			return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		}
	}
	TAILQ_INSERT_TAIL(&op->waiters, w, op_link);
	TAILQ_INSERT_TAIL(&call->conn->waiters, w, conn_link);
	call->deferred = true;
	return 0;
}

static void waiters_reply(struct xd_op *op)
{
	struct xd_waiter *w;

	while ((w = TAILQ_FIRST(&op->waiters))) {
		xd_client_reply(w->conn, w->id, xd_op_to_json(op));
		waiter_free(w);
	}
}

/* ---- region holds ---- */

/* Whether segs[0..i) already name segs[i]'s region (each op counts once per region). */
static bool region_seen_before(const struct xd_op *op, uint32_t i)
{
	for (uint32_t j = 0; j < i; j++)
		if (op->segs[j].region == op->segs[i].region)
			return true;
	return false;
}

static void hold_regions(struct xd_op *op)
{
	for (uint32_t i = 0; i < op->nsegs; i++) {
		xd_region_ref(op->segs[i].region);
		if (!region_seen_before(op, i))
			op->segs[i].region->live_ops++;
	}
}

static void drop_regions(struct xd_op *op)
{
	for (uint32_t i = 0; i < op->nsegs; i++)
		if (!region_seen_before(op, i))
			op->segs[i].region->live_ops--;
	/* Unref after counting: an unref may free a region an earlier seg names again. */
	for (uint32_t i = 0; i < op->nsegs; i++)
		xd_region_unref(op->segs[i].region);
}

/* ---- the lifecycle (enum xd_op_life in xferd.h) ---- */

/* Whether @life holds the op's regions (listed, not yet ended). */
static bool life_holds_regions(enum xd_op_life life)
{
	return life != XD_OP_NEW && life != XD_OP_ENDED;
}

bool xd_op_ending(const struct xd_op *op)
{
	return op->life == XD_OP_ENDING || op->life == XD_OP_ENDING_RELEASED;
}

/*
 * The one place an op's life changes. Takes the regions on entering a life that holds them
 * and lets them go on leaving it; anything else a move needs is its caller's. A move the
 * diagram does not have is a bug here, never something a client or peer can cause.
 */
static void op_enter(struct xd_op *op, enum xd_op_life to)
{
	static const unsigned allowed[] = {
		[XD_OP_NEW] = 1u << XD_OP_CLAIMING | 1u << XD_OP_OPEN,
		[XD_OP_CLAIMING] = 1u << XD_OP_OPEN | 1u << XD_OP_ENDED,
		[XD_OP_OPEN] = 1u << XD_OP_ENDING | 1u << XD_OP_ENDED,
		[XD_OP_ENDING] = 1u << XD_OP_ENDING_RELEASED | 1u << XD_OP_ENDED,
		[XD_OP_ENDING_RELEASED] = 1u << XD_OP_ENDED,
		[XD_OP_ENDED] = 0,
	};

	assert(allowed[op->life] & (1u << to));
	if (!life_holds_regions(op->life) && life_holds_regions(to))
		hold_regions(op);
	else if (life_holds_regions(op->life) && !life_holds_regions(to))
		drop_regions(op);
	op->life = to;
}

/* ---- ending ---- */

static void count_end(struct xd_op *op)
{
	struct xd_daemon *d = op->d;

	enum xd_end end = XD_END_ERRORED;

	if (op->state == XP_ST_COMPLETE) {
		d->stats.ops_completed++;
		end = XD_END_COMPLETE;
	} else if (op->state == XP_ST_CANCELLED) {
		d->stats.ops_cancelled++;
		end = XD_END_CANCELLED;
	} else {
		d->stats.ops_failed++;
	}
	d->counters.ops_ended[op->kind][xd_metric_transport(d, op->transport)][end]++;
	xd_hist_observe(&d->counters.op_duration[op->kind], xd_now_us() - op->created_us);
}

/* Bytes moved by @op's transport (stats.bytes_moved and the metrics' per-transport count). */
static void count_bytes(struct xd_op *op, uint64_t bytes)
{
	op->d->stats.bytes_moved += bytes;
	op->d->counters.bytes_moved[xd_metric_transport(op->d, op->transport)] += bytes;
}

static void op_free(struct xd_op *op);

static void forget_cb(void *arg)
{
	xd_op_forget(arg);
}

/* Takes @op off its owner's books (its count of operations; lookups find it no more). */
static void detach_owner(struct xd_op *op)
{
	if (op->owner && op->charged)
		xd_uncharge(op->d, op->owner->use, op->owner->uid, XD_RES_OPS, 1);
	op->charged = false;
	op->owner = NULL;
}

/* Forgets @op at the next loop turn: callers up the stack may still hold it. */
static void forget_soon(struct xd_op *op)
{
	xd_defer(op->d, &op->forget_later, forget_cb, op);
}

/*
 * A remote claim ended before its answer: the client's op.read/op.write gets the error, and
 * the op, whose id it never learned, is forgotten at the next loop turn (callers up the stack
 * may still hold it).
 */
static void refuse_pending_claim(struct xd_op *op)
{
	if (op->owner)
		xd_client_reply_error(op->owner, op->reply_id, XP_E_FAILED, op->cause_errno,
				      op->cause);
	forget_soon(op);
}

/*
 * Cuts an incomplete UTF-8 sequence off the end of @s: a cause cut to length (a peer's message
 * quoted in ours) may end inside a character, and jansson refuses such a string, which would
 * leave the operation unreportable.
 */
static void utf8_trim_tail(char *s)
{
	size_t n = strlen(s), i = n;

	while (i > 0 && n - i < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
		i--; /* s[i..n) are continuation bytes */
	unsigned char lead = i > 0 ? (unsigned char)s[i - 1] : 0;
	size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;

	if (lead < 0xC0)
		s[i] = '\0'; /* no lead byte before them: stray bytes (or nothing to cut) */
	else if (need != n - i)
		s[i - 1] = '\0';
}

/*
 * Applies a terminal state now: no copy is running on @op. @cause may be op->cause itself (an
 * end recorded earlier).
 */
static void op_finish(struct xd_op *op, enum xp_state state, int err, const char *cause)
{
	bool claiming = op->life == XD_OP_CLAIMING;

	op->state = state;
	op->cause_errno = err;
	if (cause != op->cause)
		xd_strcopy(op->cause, sizeof(op->cause), cause);
	utf8_trim_tail(op->cause);
	if (op->xfer)
		op->d->remote->op_ended(op);
	event_del(op->deadline);
	op_enter(op, XD_OP_ENDED);
	count_end(op);
	if (claiming)
		refuse_pending_claim(op);
	notify_owner(op);
	if (op->batch)
		batch_op_ended(op);
	waiters_reply(op);
	if (op->release_on_end && op->owner) { /* its end was the owner's last word on it */
		detach_owner(op); /* gone for lookups at once; freed at the next loop turn */
		forget_soon(op);
	}
	if (op->internal) { /* no client holds it: its window hears of the end, then it goes */
		void (*on_end)(struct xd_op *) = op->on_end;
		op->on_end = NULL;
		if (on_end)
			on_end(op);
		forget_soon(op);
	}
	struct xd_op *pair = op->pair;
	if (pair && !xp_state_terminal(pair->state) && state != XP_ST_COMPLETE)
		xd_op_end(pair, state, err, "peer operation %llu ended: %s",
			  (unsigned long long)op->id, cause);
}

static bool apply_pending_end(struct xd_op *op);

/* Records the end xd_op_end() was asked for, to be applied now or once drained. */
static void op_record_end(struct xd_op *op, enum xp_state state, int err, const char *fmt,
			  va_list ap)
{
	op->end_state = state;
	op->cause_errno = err;
	vsnprintf(op->cause, sizeof(op->cause), fmt, ap);
}

void xd_op_end(struct xd_op *op, enum xp_state state, int err, const char *fmt, ...)
{
	va_list ap;

	if (op->held_slot) {
		/* Its notification still waits: the op ends now (deadline, cancel), not then. */
		*op->held_slot = NULL;
		op->held_slot = NULL;
		va_start(ap, fmt);
		op_record_end(op, state, err, fmt, ap);
		va_end(ap);
		if (apply_pending_end(op))
			forget_soon(op); /* (released: callers up the stack may hold it) */
		return;
	}
	if (xp_state_terminal(op->state) || xd_op_ending(op))
		return;
	op->end_state = state;
	op->cause_errno = err;
	va_start(ap, fmt);
	vsnprintf(op->cause, sizeof(op->cause), fmt, ap);
	va_end(ap);
	if (op->job) {
		op_enter(op, XD_OP_ENDING); /* applied in local_copy_done() */
		xd_transport_local(op->d)->copy_cancel(op->job);
		return;
	}
	if (op->xfer && op->d->remote->drain(op)) {
		/* Bytes of a one-sided claimer may still land in the buffer: the owner hears of
		 * the end once they cannot, so that it never reuses a buffer still being written. */
		op_enter(op, XD_OP_ENDING);
		return;
	}
	op_finish(op, state, err, op->cause);
}

static void op_free(struct xd_op *op)
{
	struct xd_waiter *w;

	while ((w = TAILQ_FIRST(&op->waiters))) {
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
		xd_client_reply_error(w->conn, w->id, XP_E_FAILED, ENOENT,
				      "operation was released while waiting for it");
		waiter_free(w);
	}
	if (op->pair)
		op->pair->pair = NULL;
	if (op->batch) /* (freed unended: shutdown's teardown) */
		batch_op_ended(op);
	if (life_holds_regions(op->life))
		drop_regions(op);
	TAILQ_REMOVE(&op->d->ops, op, link);
	xd_idmap_del(&op->d->op_ids, &op->by_id);
	xd_event_free(op->deadline);
	xd_defer_cancel(op->d, &op->forget_later);
	free(op->segs);
	free(op->wreq);
	free(op);
}

void xd_op_forget(struct xd_op *op)
{
	/* Every caller ended the op first: a running copy has left it ENDING, not OPEN. */
	assert(!op->job || xd_op_ending(op));
	detach_owner(op);
	if (op->life == XD_OP_ENDING)
		op_enter(op, XD_OP_ENDING_RELEASED);
	else if (op->life != XD_OP_ENDING_RELEASED)
		op_free(op);
}

/*
 * Applies the end that xd_op_end() recorded while a copy or a one-sided claimer held the
 * buffer. Returns whether the op is now to be freed (its owner released it meanwhile).
 */
static bool apply_pending_end(struct xd_op *op)
{
	bool released = op->life == XD_OP_ENDING_RELEASED;

	op_finish(op, op->end_state, op->cause_errno, op->cause);
	return released;
}

void xd_op_drained(struct xd_op *op)
{
	if (xd_op_ending(op) && apply_pending_end(op))
		op_free(op);
}

void xd_op_unhold(struct xd_op *op)
{
	op->held_slot = NULL;
	if (xd_op_ending(op) && apply_pending_end(op))
		forget_soon(op);
}

/* The local transport's report on the copy of @arg (the active op), on the loop thread. */
static void local_copy_done(void *arg, int err, uint64_t bytes, const char *why)
{
	struct xd_op *active = arg;
	struct xd_op *passive = active->pair;
	struct xd_op *sides[2] = { passive, active }; /* the owner hears first */
	bool free_side[2] = { false, false };

	for (int i = 0; i < 2; i++) {
		if (sides[i]) {
			sides[i]->job = NULL;
			sides[i]->bytes = bytes;
		}
	}
	if (err == 0 && !xd_op_ending(active) && !(passive && xd_op_ending(passive))) {
		count_bytes(active, bytes);
		if (passive)
			op_finish(passive, XP_ST_COMPLETE, 0, "");
		if (active->held_slot) { /* (window.c: its notification waits, so does its end) */
			active->end_state = XP_ST_COMPLETE;
			active->cause_errno = 0;
			active->cause[0] = '\0';
			op_enter(active, XD_OP_ENDING);
		} else if (!xp_state_terminal(active->state)) {
			op_finish(active, XP_ST_COMPLETE, 0, "");
		}
	} else {
		for (int i = 0; i < 2; i++)
			if (sides[i] && xd_op_ending(sides[i]))
				free_side[i] = apply_pending_end(sides[i]);
		if (!xp_state_terminal(active->state))
			op_finish(active, XP_ST_ERRORED, err ? err : EIO,
				  why ? why : "local copy failed");
	}
	/* Freed last: ending one side may end the other, which must still be there. */
	for (int i = 0; i < 2; i++)
		if (free_side[i])
			op_free(sides[i]);
}

/* ---- creation ---- */

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_op *op = arg;

	xd_op_end(op, XP_ST_ERRORED, ETIMEDOUT, "deadline of %llu ms passed before %s",
		  (unsigned long long)op->timeout_ms,
		  op->state == XP_ST_INITIALIZED ? "a peer claimed it" : "the transfer finished");
}

void xd_op_discard(struct xd_op *op)
{
	free(op->segs);
	free(op->wreq);
	xd_event_free(op->deadline);
	free(op);
}

struct xd_op *xd_op_create(struct xd_daemon *d, enum xp_kind kind)
{
	struct xd_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->d = d;
	op->kind = kind;
	TAILQ_INIT(&op->waiters);
	op->deadline = evtimer_new(d->base, deadline_cb, op);
	if (!op->deadline) {
		free(op);
		return NULL;
	}
	return op;
}

/*
 * Starts @op's deadline: timeout_ms from now. libevent counts a timeout from the time it cached
 * at the loop turn's start, which on a busy host can be milliseconds ago (the deadline would
 * fire that much early): refresh the cache first.
 */
static void arm_deadline(struct xd_op *op)
{
	struct timeval tv = { op->timeout_ms / 1000, (op->timeout_ms % 1000) * 1000 };

	event_base_update_cache_time(op->d->base);
	evtimer_add(op->deadline, &tv);
}

/* Lists @op under @call's client as @state, in @life (which holds its regions). */
static void op_start(struct xd_call *call, struct xd_op *op, enum xp_state state,
		     enum xd_op_life life)
{
	char msg[200];

	if (!op->id)
		op->id = ++op->d->next_op;
	op->owner = call->conn;
	op->state = state;
	op->created_us = xd_now_us();
	/*
	 * op_new() checked the limits in this same request, and the connection's own charge for
	 * being connected keeps its uid's entry: this cannot fail. Should it anyway, the op is
	 * simply not counted (never refunded either).
	 */
	op->charged = xd_charge(op->d, call->conn->use, call->conn->uid, XD_RES_OPS, 1, msg,
				sizeof(msg)) == 0;
	if (!op->charged)
		xd_log(XD_LOG_ERR, "op %llu not counted: %s", (unsigned long long)op->id, msg);
	TAILQ_INSERT_TAIL(&op->d->ops, op, link);
	xd_idmap_add(&op->d->op_ids, &op->by_id, op->id);
	op_enter(op, life);
	arm_deadline(op);
	notify(op, false); /* the owner gets the reply; subscribers see the new operation */
}

void xd_op_start_internal(struct xd_op *op)
{
	op->internal = true;
	op->id = ++op->d->next_op;
	op->state = XP_ST_INITIALIZED;
	op->created_us = xd_now_us();
	TAILQ_INSERT_TAIL(&op->d->ops, op, link);
	xd_idmap_add(&op->d->op_ids, &op->by_id, op->id);
	op_enter(op, XD_OP_OPEN);
	arm_deadline(op);
}

void xd_op_start(struct xd_call *call, struct xd_op *op, enum xp_state state)
{
	op_start(call, op, state, XD_OP_OPEN);
}

void xd_op_start_claim(struct xd_call *call, struct xd_op *op)
{
	if (op->claim_nowait) {
		/* Listed and open now: the owner's answer arrives as op.changed, not as a reply. */
		op_start(call, op, XP_ST_INITIALIZED, XD_OP_OPEN);
		return;
	}
	op->reply_id = call->id;
	call->deferred = true;
	op_start(call, op, XP_ST_INITIALIZED, XD_OP_CLAIMING);
}

/* Starts the copy of the local pair (@active, @passive). Returns 0 or -errno. */
static int start_local_copy(struct xd_op *active, struct xd_op *passive)
{
	const struct xd_transport_ops *t = xd_transport_local(active->d);
	int rc = active->kind == XP_KIND_READ || active->kind == XP_KIND_GET ?
			 t->copy(active->d, active->segs, active->nsegs, passive->segs,
				 passive->nsegs, local_copy_done, active, &active->job) :
			 t->copy(active->d, passive->segs, passive->nsegs, active->segs,
				 active->nsegs, local_copy_done, active, &active->job);

	if (rc == 0 && active->pair) /* both sides stay open until the copy reports back */
		active->pair->job = active->job;
	return rc;
}

/*
 * Whether @cl holds @passive's token, or proves it (a keyed peer's claim). Constant-time: the
 * token is the capability.
 */
static bool token_matches(const struct xd_daemon *d, const struct xd_claim *cl,
			  const struct xd_op *passive)
{
	return xd_token_held(d, cl->has_proof ? cl->proof : NULL, cl->token, cl->claimer,
			     cl->claimer_epoch, cl->op, cl->xfer, passive->token);
}

#define REFUSE(e, ...)                              \
	do {                                        \
		*err = -(e);                        \
		snprintf(msg, msglen, __VA_ARGS__); \
		return NULL;                        \
	} while (0)

struct xd_op *xd_claim_lookup(struct xd_daemon *d, const struct xd_claim *cl, int *err, char *msg,
			      size_t msglen)
{
	char node[2 * XP_ID_BYTES + 1];

	if (cl->meta_kind != cl->want)
		REFUSE(EINVAL, "metadata is for a %s operation; %s needs %s metadata",
		       xp_kind_name(cl->meta_kind), cl->method, xp_kind_name(cl->want));
	xp_hex_encode(cl->node, XP_ID_BYTES, node);
	if (memcmp(cl->node, d->node, XP_ID_BYTES) != 0)
		REFUSE(EHOSTUNREACH, "metadata names node %s; this daemon is node %s", node,
		       d->node_hex);
	if (cl->epoch != d->epoch)
		REFUSE(ESTALE,
		       "metadata is from an earlier run of the owner daemon (epoch %llu, "
		       "now %llu): it restarted",
		       (unsigned long long)cl->epoch, (unsigned long long)d->epoch);
	struct xd_op *passive = op_find(d, cl->op);
	if (!passive || !xp_kind_passive(passive->kind) || passive->internal)
		REFUSE(ENOENT, "the owner has no operation %llu (released, or never made)",
		       (unsigned long long)cl->op);
	if (!token_matches(d, cl, passive) || passive->kind != cl->want)
		REFUSE(EACCES, "metadata token does not match operation %llu",
		       (unsigned long long)cl->op);
	if (passive->transport[0]) /* set when a claim was accepted: exactly once */
		REFUSE(EALREADY, "operation %llu was already claimed; a claim is exactly-once",
		       (unsigned long long)cl->op);
	if (passive->state != XP_ST_INITIALIZED)
		REFUSE(ECANCELED, "operation %llu already ended %s: %s", (unsigned long long)cl->op,
		       xp_state_name(passive->state), passive->cause);
	if (passive->length != cl->length)
		REFUSE(EMSGSIZE, "total length %llu does not match the owner's %llu",
		       (unsigned long long)cl->length, (unsigned long long)passive->length);
	return passive;
}

void xd_op_set_in_progress(struct xd_op *op, const char *transport, const char *peer)
{
	if (op->life == XD_OP_CLAIMING) {
		/* The owner answered a cross-node claim: how long claims take, by transport. */
		xd_hist_observe(
			&op->d->counters.claim_latency[xd_metric_transport(op->d, transport)],
			xd_now_us() - op->created_us);
		op_enter(op, XD_OP_OPEN);
	}
	op->state = XP_ST_IN_PROGRESS;
	snprintf(op->transport, sizeof(op->transport), "%s", transport);
	snprintf(op->peer, sizeof(op->peer), "%s", peer);
	notify(op, !op->batch && !op->end_only); /* (subscribers see it either way) */
}

void xd_op_complete(struct xd_op *op)
{
	/* Cross-node: each daemon counts what it sent or received for its own side. */
	op->bytes = op->length;
	count_bytes(op, op->length);
	if (xd_op_ending(op)) {
		/* An end asked while the transfer was committed (claim.c): the transfer won. */
		op->end_state = XP_ST_COMPLETE;
		op->cause_errno = 0;
		op->cause[0] = '\0';
		xd_op_drained(op);
		return;
	}
	op_finish(op, XP_ST_COMPLETE, 0, "");
}

void xd_op_complete_held(struct xd_op *op, struct xd_op **slot)
{
	if (xd_op_ending(op)) { /* (an end was asked meanwhile: as xd_op_complete()) */
		xd_op_complete(op);
		return;
	}
	op->bytes = op->length;
	count_bytes(op, op->length);
	/* As a local opener's copy that is done (local_copy_done()): ends COMPLETE on unhold. */
	op->end_state = XP_ST_COMPLETE;
	op->cause_errno = 0;
	op->cause[0] = '\0';
	*slot = op;
	op->held_slot = slot;
	op_enter(op, XD_OP_ENDING);
}

static void pair_local(struct xd_op *active, struct xd_op *passive)
{
	const char *name = xd_transport_local(active->d)->name;

	active->pair = passive;
	passive->pair = active;
	snprintf(active->transport, sizeof(active->transport), "%s", name);
	snprintf(active->peer, sizeof(active->peer), "%s", name);
	xd_op_set_in_progress(passive, name, name);
}

int xd_op_start_local(struct xd_op *active, struct xd_op *passive)
{
	pair_local(active, passive);
	return start_local_copy(active, passive);
}

/* ---- whole-daemon events ---- */

void xd_ops_conn_closed(struct xd_conn *c)
{
	struct xd_waiter *w;
	struct xd_op *op, *tmp;

	while ((w = TAILQ_FIRST(&c->waiters)))
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
		waiter_free(w);
	TAILQ_FOREACH_SAFE(op, &c->d->ops, link, tmp) {
		if (op->owner != c)
			continue;
		xd_op_end(op, XP_ST_ERRORED, ECONNRESET,
			  "its client %llu (%s, pid %d) disconnected", (unsigned long long)c->id,
			  c->name, (int)c->pid);
		xd_op_forget(op);
	}
}

void xd_ops_shutdown(struct xd_daemon *d)
{
	struct xd_op *op;

	TAILQ_FOREACH(op, &d->ops, link)
		xd_op_end(op, XP_ST_CANCELLED, ESHUTDOWN, "the daemon is shutting down");
}

void xd_ops_fini(struct xd_daemon *d)
{
	struct xd_op *op;

	while ((op = TAILQ_FIRST(&d->ops))) {
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): the free unlinked it from here */
		op->job = NULL; /* the copier has stopped and freed its jobs */
		op_free(op);
	}
	xd_idmap_fini(&d->op_ids);
}
