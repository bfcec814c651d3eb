/* SPDX-License-Identifier: MIT */
/*
 * The JSON-RPC 2.0 envelope over jansson: parsing requests (daemon side) and replies or
 * notifications (client side), and building the packets both send. No I/O here.
 */
#ifndef XP_JSON_H
#define XP_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <jansson.h>
#include "xfer_proto.h"

#define XP_ID_NONE (-1) /* "id": null, for errors about requests whose id was unreadable */

/* A decoded request. @root owns everything; the other pointers borrow from it. */
struct xp_request {
	json_t *root;
	int64_t id; /* XP_ID_NONE until read */
	enum xp_method method;
	json_t *params; /* an object; an empty one when the request had none */
};

/*
 * Parses one request packet. Returns 0, or a JSON-RPC error code (XP_E_PARSE, XP_E_INVALID_REQ,
 * XP_E_NO_METHOD) with a sentence naming the broken rule in @err. On error, req->id holds the
 * request id when it could be read (XP_ID_NONE otherwise). Always call xp_request_fini().
 */
int xp_request_parse(const void *buf, size_t len, struct xp_request *req, char *err, size_t errlen);
void xp_request_fini(struct xp_request *req);

/* A decoded packet from the daemon: a reply (to @id) or a notification (@method, @params). */
struct xp_reply {
	json_t *root;
	bool notification;
	int64_t id;
	json_t *result;	     /* success: the result */
	int code;	     /* failure: JSON-RPC code, else 0 */
	int err;	     /* failure: positive errno from data.errno (EIO if absent) */
	const char *message; /* failure: the daemon's sentence */
	const char *method;  /* notification */
	json_t *params;	     /* notification */
};

/* Parses a packet from the daemon. Returns 0 or -EBADMSG. Always call xp_reply_fini(). */
int xp_reply_parse(const void *buf, size_t len, struct xp_reply *rep);
void xp_reply_fini(struct xp_reply *rep);

/* Builders. Each consumes the json_t it is given, even on failure; NULL on ENOMEM. */
json_t *xp_build_request(int64_t id, const char *method, json_t *params);
json_t *xp_build_result(int64_t id, json_t *result);
json_t *xp_build_notification(const char *method, json_t *params);
/* @err is a positive errno; @message is copied. */
json_t *xp_build_error(int64_t id, int code, int err, const char *message);

/*
 * Serialises @msg compactly into a malloc'd buffer. Returns the length, -ENOMEM, or -EMSGSIZE
 * when it would exceed XP_MAX_MSG. Borrows @msg.
 */
int xp_dump(const json_t *msg, char **out);

/* One end in op.batch_done (PROTOCOL.md §5.2): {"op", "state", "bytes", "errno"?}. */
struct xp_batch_end {
	uint64_t op;	/* 0: an entry that made no op */
	uint64_t bytes; /* moved */
	int32_t state;	/* enum xp_state */
	int32_t err;	/* positive errno, 0: none (no "errno" member) */
};

/* JSON text written into @cap bytes at @p; @len past @cap means it did not fit. */
struct xp_text {
	char *p;
	size_t cap, len;
};

/*
 * Appends @s to @t (as far as @cap goes; @len counts it all). Inline, as are the cursor's
 * readers below: their strings are constants, whose lengths and comparisons the compiler then
 * folds (the daemon reads and answers every op.batch of gets and puts with them).
 */
static inline void xp_text_put(struct xp_text *t, const char *s)
{
	size_t n = strlen(s);

	if (t->len + n <= t->cap)
		memcpy(t->p + t->len, s, n);
	t->len += n;
}
/* Appends @v in decimal to @t. */
void xp_text_u64(struct xp_text *t, uint64_t v);

/* JSON text being read, from @p up to @end (the hand readers of the encoders' own layouts). */
struct xp_cursor {
	const char *p, *end;
};

/* Takes @lit and returns true if the text at @c goes on with exactly it; else moves nothing. */
static inline bool xp_cursor_lit(struct xp_cursor *c, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return false;
	c->p += n;
	return true;
}

static inline bool xp_cursor_digit(const struct xp_cursor *c, const char *q)
{
	return q < c->end && *q >= '0' && *q <= '9';
}

/*
 * Takes a value below 2^63 as xp_text_u64() writes it into *@v and returns true; else moves
 * nothing. No sign, no leading zero, at most 19 digits (which cannot wrap a uint64_t): anything
 * else is jansson's to judge (it refuses "01" and integers past INT64_MAX, which this must not
 * accept).
 */
static inline bool xp_cursor_u63(struct xp_cursor *c, uint64_t *v)
{
	const char *q = c->p;
	uint64_t x = 0;

	if (!xp_cursor_digit(c, q))
		return false;
	if (*q == '0') {
		if (xp_cursor_digit(c, q + 1))
			return false;
		q++;
	}
	for (; xp_cursor_digit(c, q); q++) {
		if (q - c->p >= 19)
			return false;
		x = x * 10 + (uint64_t)(*q - '0');
	}
	if (x > (uint64_t)INT64_MAX)
		return false;
	*v = x;
	c->p = q;
	return true;
}

/*
 * Writes the notification op.batch_done {"batch": @batch, "ops": [@ends...]} into @buf of @cap
 * bytes: the very bytes xp_dump() gives for the same object, with no jansson object made (a
 * daemon sends one per batch, one per operation when each is posted alone). Values must be below
 * 2^63. Returns the length, or -EMSGSIZE when it does not fit in @cap.
 */
int xp_batch_done_text(char *buf, size_t cap, uint64_t batch, const struct xp_batch_end *ends,
		       size_t n);
/*
 * One part of an op.batch_done too long for a packet (PROTOCOL.md §5.2): as
 * xp_batch_done_text(), with as many of the @n ends as fit in @cap (*@taken of them), and
 * "more": true after the list when some were left out or @more_after (another part follows).
 * Returns the length, or -EMSGSIZE when not one end fits.
 */
int xp_batch_done_part(char *buf, size_t cap, uint64_t batch, const struct xp_batch_end *ends,
		       size_t n, bool more_after, size_t *taken);

/*
 * Reads op.batch_done back from @buf of @len bytes when it is exactly in the form
 * xp_batch_done_text() writes (known state and errno names, values below 2^63, at most @cap
 * ends), without jansson: *@batch, and @ends[0..*@n). Returns 0, or 1 when it is anything else
 * (other spacing or order, a refusal's message, more ends): jansson's way decides what that is.
 */
int xp_batch_done_read(const char *buf, size_t len, uint64_t *batch, struct xp_batch_end *ends,
		       size_t cap, size_t *n);

/*
 * Reads the reply to op.batch request @id of @n gets, puts, reads or writes from @buf of @len
 * bytes when it is exactly in the form the daemon writes, {"jsonrpc":"2.0","id":@id,"result":
 * {"results":[{"op":N},... @n of them],"batch":B?}}, without jansson: @ops[0..@n) and *@batch
 * (0 when absent). Returns 0, or 1 when it is anything else (jansson's way decides).
 */
int xp_batch_reply_read(const char *buf, size_t len, int64_t id, uint64_t *ops, size_t n,
			uint64_t *batch);

/*
 * xp_batch_req.c: op.batch of gets and puts as libxferclient writes it (batch_text()), read
 * without jansson by the daemon: {"jsonrpc":"2.0","id":I,"method":"op.batch","params":{"ops":
 * [E,...],"release_on_end":B?,"event":"batch"|"each"?,"timeout_ms":T?,"end_only":B?,"reply":B?}}
 * with each E ["get"|"put",window,offset,[[region,offset,length],...],"tag"?], in that order.
 */
#define XP_BREQ_ENTRIES 64 /* a longer batch takes jansson's way */
#define XP_BREQ_DESCS 128  /* descriptors of all its entries */
struct xp_breq_desc {
	int64_t region, offset, length;
};
struct xp_breq_entry {
	bool put;
	int64_t window, offset;
	uint32_t desc0, ndescs; /* in xp_batch_req.d */
	const char *tag;	/* in the packet, not NUL-terminated; NULL: none */
	size_t taglen;		/* at most XP_MAX_TAG */
};
struct xp_batch_req {
	int64_t id;
	size_t n, ndescs;
	int64_t timeout_ms;				    /* -1: none given */
	bool release_on_end, end_only, event_batch, posted; /* posted: "reply": false */
	struct xp_breq_entry e[XP_BREQ_ENTRIES];
	struct xp_breq_desc d[XP_BREQ_DESCS];
};

/*
 * Reads request @buf of @len bytes into @rq when it is exactly in that form: ids below 2^53,
 * other values below 2^63 as xp_text_u64() writes them, 1 to XP_BREQ_ENTRIES entries with 1 to
 * XP_BREQ_DESCS descriptors among them, tags of printable ASCII without '"' or backslash and
 * at most XP_MAX_TAG bytes (the bytes jansson would decode). Returns 0, or 1 for anything else,
 * valid or not: jansson's way decides what that is. Reads nothing past @len.
 */
int xp_batch_req_read(const char *buf, size_t len, struct xp_batch_req *rq);

/*
 * Writes the reply to op.batch request @id whose @n entries made @ops (and batch @batch when
 * @has_batch) into @buf of @cap bytes: the very bytes xp_dump() gives for xp_build_result(@id,
 * {"results": [{"op"}...], "batch"?}), which xp_batch_reply_read() reads back. Values below
 * 2^63. Returns the length, or -EMSGSIZE when it does not fit.
 */
int xp_batch_reply_text(char *buf, size_t cap, int64_t id, const uint64_t *ops, size_t n,
			bool has_batch, uint64_t batch);

/*
 * xp_jfast.c: json_loadb() and json_dumps(JSON_COMPACT) with a fast path for compact texts of
 * objects, arrays, integers and printable-ASCII strings; anything else is jansson's, so that
 * the result (and any error, in @error) is always what jansson's would be.
 */
json_t *xp_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *error);
/*
 * The compact text of @v (borrowed) in a malloc'd string, its length in *@len, or NULL. @max
 * bounds the fast path only: a longer text comes from jansson, whole.
 */
char *xp_json_dumps(const json_t *v, size_t max, size_t *len);

/*
 * Reads a non-negative integer member @key of @obj into *out. Returns 0, -ENOENT when it is
 * absent, or -EINVAL when it has the wrong type or is negative (*out unchanged then).
 */
int xp_get_u64(const json_t *obj, const char *key, uint64_t *out);

/*
 * xp_jalloc.c: jansson's allocations through a cache of freed blocks, in size classes of
 * XP_JALLOC_STEP bytes up to XP_JALLOC_CLASSES of them, XP_JALLOC_KEEP kept per class. Only for
 * a process whose jansson is its own (the daemon): a string jansson returns (json_dumps()) must
 * then be freed with xp_json_free(), never free().
 */
#define XP_JALLOC_STEP 32
#define XP_JALLOC_CLASSES 16
#define XP_JALLOC_KEEP 512
struct xp_jalloc;
/*
 * Makes the calling thread's cache and sets jansson's allocator to it, for good (blocks already
 * made by jansson's default allocator must not be freed after: call it before any jansson
 * value exists). Returns the cache, or NULL when out of memory or one is installed already.
 */
struct xp_jalloc *xp_jalloc_install(void);
/* Frees the blocks @c keeps and @c; jansson goes on with malloc() and free() (NULL-safe). */
void xp_jalloc_drop(struct xp_jalloc *c);
/* Blocks @c gave again from its lists, made with malloc() while installed, and keeps now. */
void xp_jalloc_counts(const struct xp_jalloc *c, uint64_t *reused, uint64_t *made, size_t *kept);
/* Frees a string jansson returned (json_dumps()) with jansson's own free function. */
void xp_json_free(void *p);

#endif /* XP_JSON_H */
