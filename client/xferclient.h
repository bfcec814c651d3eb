/* SPDX-License-Identifier: MIT */
/*
 * libxferclient: the thin C client of xferd. It speaks the control protocol
 * (proto/PROTOCOL.md) over the daemon's Unix socket, creates sealed memfd buffers, and surfaces
 * operation events. The client never touches RDMA and needs no privileges.
 *
 * Conventions:
 * - Every function returning int returns 0 (or a count) on success and a negative errno on
 *   failure. xfer_strerror() turns that into text; xfer_last_error() gives the daemon's own
 *   message for the last refused request, which names the rule that was broken.
 * - No function takes ownership of a caller's fd: the kernel duplicates it into the daemon.
 * - Strings returned through char ** are the caller's to free() unless said otherwise.
 *
 * Thread safety: a struct xfer_client is not thread-safe. Use one per thread, or serialise all
 * calls on one client with your own lock. Different clients are independent. xfer_strerror()
 * and the buffer functions are thread-safe.
 */
#ifndef XFERCLIENT_H
#define XFERCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(XFER_BUILDING_LIBRARY)
#define XFER_EXPORT __attribute__((visibility("default")))
#else
#define XFER_EXPORT
#endif

struct xfer_client;

/* One piece of an operation: @length bytes at @offset of registered region @region. */
struct xfer_desc {
	uint64_t region;
	uint64_t offset;
	uint64_t length;
};

enum xfer_state {
	XFER_UNINITIALIZED,
	XFER_INITIALIZED, /* passive side created, waiting for its peer */
	XFER_IN_PROGRESS, /* bytes moving */
	XFER_COMPLETE,	  /* every byte arrived (terminal) */
	XFER_CANCELLED,	  /* cancelled by either side or shutdown (terminal) */
	XFER_ERRORED,	  /* failed, see error and cause (terminal) */
};

/* XFER_GET and XFER_PUT: one-sided operations on an open window (xfer_get(), xfer_put()). */
enum xfer_kind { XFER_READABLE, XFER_WRITABLE, XFER_READ, XFER_WRITE, XFER_GET, XFER_PUT };

/* A snapshot of an operation, as the daemon reported it. */
struct xfer_op_info {
	uint64_t op;
	enum xfer_kind kind;
	enum xfer_state state;
	uint64_t length; /* total bytes of the descriptors */
	uint64_t bytes;	 /* bytes moved so far */
	uint64_t client; /* owning connection's id */
	uint64_t timeout_ms;
	uint64_t age_ms;
	int error;	    /* 0, or -errno once CANCELLED or ERRORED */
	char cause[256];    /* "" or the daemon's sentence naming the cause */
	char transport[16]; /* "local", "tcp", "rdma", or "" before claim */
	char peer[64];	    /* "local", a peer node id, or "" */
};

/* Options of an operation; pass NULL for the defaults. */
struct xfer_op_opts {
	uint32_t timeout_ms; /* deadline from creation; 0 = the daemon's default */
	uint32_t flags;	     /* XFER_OP_* */
};

/*
 * The daemon forgets the operation right after it pushed its end (COMPLETE, CANCELLED or
 * ERRORED) to the event callback: no xfer_release() needed, and a round trip per operation
 * saved. Take the end from the event (xfer_wait() may find it already gone: -ENOENT).
 */
#define XFER_OP_RELEASE_ON_END 0x1u

/*
 * For xfer_read()/xfer_write() only: return the operation id as soon as the daemon has made the
 * operation (one round trip to the local daemon), without waiting for the owner to accept the
 * claim (up to connect_timeout_ms across nodes). The claim's outcome then arrives as an event:
 * IN_PROGRESS once accepted, ERRORED with the refusal's errno and cause when refused. Refusals
 * the local daemon decides at once (bad metadata, a claim on this same node) are still the
 * call's error. An event may be delivered before the call returns (see xfer_set_event_cb).
 * An older library refuses the flag (-EINVAL); an older daemon ignores it and answers late.
 */
#define XFER_OP_NOWAIT 0x4u /* (0x2 is XFER_OP_BATCH_EVENT, for xfer_batch()) */

/*
 * For xfer_readable()/xfer_writable()/xfer_read()/xfer_write(): the daemon pushes only the
 * operation's end (COMPLETE, CANCELLED, ERRORED), not IN_PROGRESS. A client that only waits for
 * ends saves one event (a wakeup and a parse) per operation on each side of a pairing. With
 * XFER_OP_NOWAIT, a refused claim still arrives as the ERRORED end. An older daemon refuses it
 * (-EINVAL, an unknown param).
 */
#define XFER_OP_END_ONLY 0x8u

/* A sealed, mapped memfd buffer made by xfer_buf_alloc(). */
struct xfer_buf {
	void *addr; /* MAP_SHARED mapping of the whole memfd */
	size_t length;
	int fd; /* the memfd, O_CLOEXEC, sealed F_SEAL_SHRINK | F_SEAL_GROW */
};

/*
 * Connects to the daemon at @socket_path (NULL: $XFERD_SOCKET, else /run/xferd/xferd.sock) and
 * says hello as @name (NULL: "xferclient"). Returns 0 and *out, or -errno (-ENOENT or
 * -ECONNREFUSED when no daemon listens, -EPROTONOSUPPORT on a version mismatch).
 * The caller owns *out and frees it with xfer_close().
 */
XFER_EXPORT int xfer_connect(const char *socket_path, const char *name, struct xfer_client **out);

/*
 * Closes the connection and frees @c (NULL is fine). The daemon then ends this client's
 * operations and releases its regions; buffers from xfer_buf_alloc() stay the caller's.
 */
XFER_EXPORT void xfer_close(struct xfer_client *c);

/* Text for a negative errno from this library. Never NULL; thread-safe; static storage. */
XFER_EXPORT const char *xfer_strerror(int err);

/*
 * The daemon's message for the last request of @c that failed ("" if none), e.g. "memfd is not
 * sealed with F_SEAL_SHRINK". Owned by @c, valid until its next call.
 */
XFER_EXPORT const char *xfer_last_error(const struct xfer_client *c);

/* The connection id the daemon gave @c in hello. */
XFER_EXPORT uint64_t xfer_client_id(const struct xfer_client *c);

/*
 * Creates a memfd of @length bytes (MFD_CLOEXEC | MFD_ALLOW_SEALING), seals it against
 * shrinking and growing, and maps it MAP_SHARED read-write into @buf. Returns 0 or -errno.
 * The caller owns buf->fd and the mapping and releases both with xfer_buf_free().
 */
XFER_EXPORT int xfer_buf_alloc(size_t length, struct xfer_buf *buf);

/* Unmaps and closes a buffer from xfer_buf_alloc(); a zeroed or freed @buf is fine. */
XFER_EXPORT void xfer_buf_free(struct xfer_buf *buf);

/*
 * Registers @length bytes at @offset of memfd @fd (which must be sealed with F_SEAL_SHRINK) as a
 * region; @length 0 means "to the end of the memfd". @name may be NULL. Returns 0 and *region,
 * or -errno. Borrows @fd: the caller still owns it and may close it right after.
 */
XFER_EXPORT int xfer_region_register(struct xfer_client *c, int fd, uint64_t offset,
				     uint64_t length, const char *name, uint64_t *region);

/* xfer_region_register_file() flags */
#define XFER_FILE_SYNC 1u /* fdatasync the file before a transfer into it completes */

/*
 * Registers @length bytes at @offset of the regular file @fd as a region (@length 0: to the
 * end of the file). The daemon never maps it: it moves the bytes with file I/O, so a file
 * truncated meanwhile ends a transfer ERRORED, never the daemon. What @fd was opened for is
 * what the region may do: read (O_RDONLY) makes it a source (readable, write), write
 * (O_WRONLY) a target (read, writable), O_RDWR both; O_APPEND is refused. An O_DIRECT @fd is
 * moved with direct I/O: @offset and @length multiples of its file system's direct I/O
 * alignment, and open for reading even as a target (O_RDWR: an unaligned write reads its edge
 * blocks back), else -EINVAL / -EBADF naming the rule. @flags:
 * XFER_FILE_SYNC or 0. Returns 0 and *region, or -errno. Borrows @fd (the daemon keeps a
 * duplicate until the region is deregistered).
 */
XFER_EXPORT int xfer_region_register_file(struct xfer_client *c, int fd, uint64_t offset,
					  uint64_t length, unsigned flags, const char *name,
					  uint64_t *region);

/*
 * Deregisters @region. Returns -EBUSY while an operation that has not ended uses it, unless
 * @force is non-zero, which cancels those operations first.
 */
XFER_EXPORT int xfer_region_deregister(struct xfer_client *c, uint64_t region, int force);

/*
 * Passive operations: make the @n descriptors readable (or writable) once by a peer. Returns 0,
 * *op and *metadata (a NUL-terminated string the caller frees with free()), or -errno.
 */
XFER_EXPORT int xfer_readable(struct xfer_client *c, const struct xfer_desc *descs, size_t n,
			      const struct xfer_op_opts *opts, uint64_t *op, char **metadata);
XFER_EXPORT int xfer_writable(struct xfer_client *c, const struct xfer_desc *descs, size_t n,
			      const struct xfer_op_opts *opts, uint64_t *op, char **metadata);

/*
 * Active operations: read the bytes of readable @metadata into the descriptors, or write the
 * descriptors into writable @metadata's buffer. Returns 0 and *op once the owner accepted the
 * claim (the transfer then runs; wait for it), or -errno when it was refused (see
 * xfer_last_error(); the passive side is untouched). With XFER_OP_NOWAIT in opts->flags it
 * returns at once and the claim's outcome arrives as an event.
 */
XFER_EXPORT int xfer_read(struct xfer_client *c, const char *metadata,
			  const struct xfer_desc *descs, size_t n, const struct xfer_op_opts *opts,
			  uint64_t *op);
XFER_EXPORT int xfer_write(struct xfer_client *c, const char *metadata,
			   const struct xfer_desc *descs, size_t n, const struct xfer_op_opts *opts,
			   uint64_t *op);

/*
 * Posted submission, for an event loop that keeps several pairings in flight on one thread:
 * xfer_post_op() writes the request of a readable, writable, read or write (as xfer_readable()
 * ... xfer_write() would send it; @metadata for a read or write only, NULL otherwise) and
 * returns at once with *request, an id of this connection's, without waiting for the reply.
 * The reply arrives later, through the connection's fd, and is delivered like an event (from
 * inside xfer_dispatch(), xfer_dispatch_end() or any call on @c, in the order it arrived with
 * the events) to the reply callback: the operation it made, or the refusal. Events of that
 * operation may be delivered before its reply (keep them until the reply names the op). The
 * reply callback must be set first (else -EINVAL); requests whose reply has not come when the
 * connection is lost or closed get no callback. Returns 0 and *request, or -errno when the
 * request could not be sent (bad arguments: xfer_last_error() says which rule). Take replies
 * and events (xfer_dispatch()) between posts: the daemon cuts a client that stopped reading.
 * The reply's strings are valid during the callback only: copy what you keep.
 */
struct xfer_reply {
	uint64_t request;     /* the id xfer_post_op() returned */
	int error;	      /* 0, or -errno: refused, no operation was made */
	uint64_t op;	      /* error 0: the operation made */
	const char *metadata; /* error 0 and a readable or writable: its metadata, else NULL */
	const char *message;  /* "" or, when refused, the daemon's sentence naming the rule */
};

typedef void (*xfer_reply_cb)(struct xfer_client *c, const struct xfer_reply *reply, void *arg);

/* Sets (or with NULL clears) the callback for posted requests' replies (dropped without one). */
XFER_EXPORT void xfer_set_reply_cb(struct xfer_client *c, xfer_reply_cb cb, void *arg);

XFER_EXPORT int xfer_post_op(struct xfer_client *c, enum xfer_kind kind, const char *metadata,
			     const struct xfer_desc *descs, size_t n,
			     const struct xfer_op_opts *opts, uint64_t *request);

/*
 * Waits until @op has ended (COMPLETE, CANCELLED or ERRORED) or @timeout_ms passed (< 0: no
 * limit but the operation's own deadline). Returns 0 and fills @info (may be NULL) once it has
 * ended, whatever the final state: check info->state. Returns -ETIMEDOUT if it had not ended in
 * time (the operation goes on), or another -errno. Events for other operations that arrive
 * meanwhile are delivered to the event callback.
 */
XFER_EXPORT int xfer_wait(struct xfer_client *c, uint64_t op, int timeout_ms,
			  struct xfer_op_info *info);

/* Fills @info with the current state of @op. Returns 0 or -errno. */
XFER_EXPORT int xfer_status(struct xfer_client *c, uint64_t op, struct xfer_op_info *info);

/*
 * Cancels @op (its peer is told). Returns 0 once it has ended, or -errno; an ended op is left as
 * it was. For a passive op claimed over RDMA that is once the claimer has let go of its keys, so
 * nothing writes into the buffer after this returns (bounded by the daemons' keepalive timeout).
 */
XFER_EXPORT int xfer_cancel(struct xfer_client *c, uint64_t op);

/* Forgets @op, cancelling it first if it has not ended. Returns 0 or -errno. */
XFER_EXPORT int xfer_release(struct xfer_client *c, uint64_t op);

/* Called for every op.changed notification the daemon pushes. @info is valid during the call. */
typedef void (*xfer_event_cb)(struct xfer_client *c, const struct xfer_op_info *info, void *arg);

/*
 * Sets (or with NULL clears) the event callback of @c.
 *
 * When it runs: never in the middle of the library's own work. Notifications that arrive while
 * a call waits for its reply are queued, and the queue is delivered just before that call
 * returns (after its results are stored), or by xfer_dispatch(). So the callback always runs on
 * the thread that made a call on @c, and only from inside xfer_* calls on @c.
 * While no callback is set, notifications are dropped rather than queued.
 *
 * What it may do: any call on @c, including blocking ones and xfer_close(@c) (then @c is freed
 * once the callback returns; the call that delivered the event returns normally). Events that
 * arrive during those nested calls are delivered by the same delivery loop after the callback
 * returns, never re-entrantly. xfer_last_error() seen by the caller after delivery still
 * describes the caller's own call.
 */
XFER_EXPORT void xfer_set_event_cb(struct xfer_client *c, xfer_event_cb cb, void *arg);

/* The longest spin xfer_set_spin() and XFER_SPIN_US accept: 1 ms. */
#define XFER_SPIN_MAX_US 1000

/*
 * How long (microseconds, 0 to XFER_SPIN_MAX_US) a blocking call keeps polling its socket for
 * the daemon's reply before it sleeps in poll(): waking a sleeping process costs tens of
 * microseconds on some machines, about what a short request takes the daemon. Set (here or
 * by the environment variable XFER_SPIN_US, read at xfer_connect(); larger values are capped),
 * it applies to every blocking call; 0 never spins. Unset, only region.register and
 * region.deregister spin, up to 50 us (the daemon answers them at once; other calls may wait
 * milliseconds on a peer). Between tries the thread yields its CPU. Returns 0, or -EINVAL
 * (@c NULL or @spin_us too large).
 */
XFER_EXPORT int xfer_set_spin(struct xfer_client *c, unsigned spin_us);

/*
 * The connection's fd, for poll/epoll/libevent: readable when events may be waiting. Owned by
 * @c; do not read from it or close it.
 */
XFER_EXPORT int xfer_get_fd(const struct xfer_client *c);

/*
 * Reads every packet waiting on the connection without blocking and delivers notifications to
 * the event callback. Returns the number of events delivered, or -errno (-ECONNRESET when the
 * daemon went away).
 */
XFER_EXPORT int xfer_dispatch(struct xfer_client *c);

/*
 * As xfer_dispatch(), but stops at the first operation's end (op.changed with COMPLETE,
 * CANCELLED or ERRORED) and hands it to the caller in *@end instead of the event callback:
 * events received before it are delivered to the callbacks first, packets after it stay in the
 * socket (which stays readable) for the next call. For an event loop that resumes whoever
 * waits for that end at once: no callback trampoline for it, and no further read before it.
 * Returns 1 (*@end holds the end; if a callback closed @c meanwhile, @c is gone), 0 (no end
 * was waiting; everything was delivered), or -errno (-EINVAL: @c or @end NULL). Without an
 * event callback set (ends are then dropped) or called from inside a callback, it does what
 * xfer_dispatch() does and returns 0.
 */
XFER_EXPORT int xfer_dispatch_end(struct xfer_client *c, struct xfer_op_info *end);

/*
 * Sends any method with @params_json (NULL: no params) and waits for its reply. Returns 0 and
 * *result_json (the result object as compact JSON; free() it), or -errno. For tools such as
 * xferctl that show listings; applications use the typed calls above.
 */
XFER_EXPORT int xfer_call(struct xfer_client *c, const char *method, const char *params_json,
			  char **result_json);

/* ------------------------------------------------------------------------------------------ */
/* Windows (PROTOCOL.md §5.1): a range exposed once for many one-sided gets and puts. */

enum xfer_access { XFER_ACCESS_READ = 1, XFER_ACCESS_WRITE = 2, XFER_ACCESS_READWRITE = 3 };

/* xfer_window_create() flags: one opener at a time (default: up to 64). */
#define XFER_WINDOW_ONE_OPENER 0x1u

/*
 * Exposes [@offset, +@length) of @region (@length 0: to its end) to openers, with @access.
 * Returns 0, *window and *metadata (a capability: hand it to the peers that may open the
 * window; free() it), or -errno. Closing the window (xfer_window_close(), or this client's
 * disconnect) revokes every opener's access at once.
 */
XFER_EXPORT int xfer_window_create(struct xfer_client *c, uint64_t region, uint64_t offset,
				   uint64_t length, enum xfer_access access, unsigned flags,
				   uint64_t *window, char **metadata);

/*
 * Opens window @metadata. Returns 0 and *handle (the id to pass to xfer_get()/xfer_put() and
 * xfer_window_close()), and the window's *length and *access (either may be NULL), once the
 * owner accepted; or -errno (-ESTALE: the owner restarted; -EBUSY: a one-opener window is
 * open already; -EACCES: wrong token; -ENOENT or -ECANCELED: closed).
 */
XFER_EXPORT int xfer_window_open(struct xfer_client *c, const char *metadata, uint64_t *handle,
				 uint64_t *length, enum xfer_access *access);

/*
 * Closes a window this client created (revokes it: returns once no get or put is in flight on
 * it any more) or a handle it opened (its gets and puts in flight are cancelled). 0 or -errno.
 */
XFER_EXPORT int xfer_window_close(struct xfer_client *c, uint64_t window);

/*
 * One-sided operations on handle @handle: put the @n descriptors' bytes at @offset of the window,
 * or get the window's bytes at @offset into them. @tag (NULL: none; at most 256 bytes, a
 * NUL-terminated UTF-8 string) is delivered to the window's owner once the bytes are in place
 * (xfer_set_window_cb()). Returns 0 and *op at once (the owner's refusal arrives as the op's end:
 * wait for it or take its events), or -errno when refused here (-EACCES: access mode; -EINVAL:
 * out of the window's range; -ECANCELED: the window was revoked).
 */
XFER_EXPORT int xfer_put(struct xfer_client *c, uint64_t handle, uint64_t offset,
			 const struct xfer_desc *descs, size_t n, const char *tag,
			 const struct xfer_op_opts *opts, uint64_t *op);
XFER_EXPORT int xfer_get(struct xfer_client *c, uint64_t handle, uint64_t offset,
			 const struct xfer_desc *descs, size_t n, const char *tag,
			 const struct xfer_op_opts *opts, uint64_t *op);

/*
 * One entry of a batch: a get or put on a window; a readable or writable (the passive side of
 * a pairing; its metadata comes back in .made_metadata); or a read or write (the active side,
 * on another's metadata, as xfer_read()/xfer_write() with XFER_OP_NOWAIT: a refused claim is
 * the operation's end).
 */
struct xfer_batch_op {
	enum xfer_kind kind;
	uint64_t handle, offset; /* XFER_GET, XFER_PUT */
	const struct xfer_desc *descs;
	size_t n;
	union {
		const char *tag;      /* XFER_GET, XFER_PUT: NULL: none */
		const char *metadata; /* XFER_READ, XFER_WRITE: the passive side's */
		char *made_metadata;  /* XFER_READABLE, XFER_WRITABLE: out, malloc'd: free() it */
	};
	uint64_t op; /* out: the operation's id */
};

/*
 * In xfer_batch()'s @opts: the ends of the batch's operations come as one event, to the batch
 * callback (xfer_set_batch_cb()), instead of one op.changed each.
 */
#define XFER_OP_BATCH_EVENT 0x2u

/*
 * In xfer_batch()'s @opts, with XFER_OP_BATCH_EVENT and get, put, read and write entries only:
 * post the batch without waiting for the daemon's answer (xfer_batch() returns once the
 * request is written; ops[i].op are 0). The batch's event is its only answer: *batch is the id
 * it carries; it lists every entry, in the order they ended; an entry the daemon refused is an
 * end with op 0, ERRORED and its errno, and the entries after it ends with op 0, CANCELLED
 * (xfer_last_error() in the callback names the rule). A batch refused as a whole (e.g. by a
 * daemon older than this flag) comes as an event with no ends. A client that posts one get or
 * put per call this way keeps many in flight without a round trip each; take events
 * (xfer_dispatch()) between posts, or the daemon cuts a client that stopped reading.
 */
#define XFER_OP_POST 0x10u

/*
 * Posts @n entries (at most 1024) in one request; @opts (may be NULL) applies to each
 * (deadline, XFER_OP_RELEASE_ON_END, XFER_OP_BATCH_EVENT, and XFER_OP_END_ONLY to the pairing
 * entries). Returns 0 with every ops[i].op
 * filled and *batch (may be NULL; 0 without XFER_OP_BATCH_EVENT) the id its event will carry,
 * or -errno: then *done (may be NULL) says how many of the first entries were made (their op
 * ids are filled; they go on, and with XFER_OP_BATCH_EVENT end into the event) and
 * xfer_last_error() why the next was refused.
 */
XFER_EXPORT int xfer_batch(struct xfer_client *c, struct xfer_batch_op *ops, size_t n,
			   const struct xfer_op_opts *opts, size_t *done, uint64_t *batch);

/* One operation's end in a batch event. */
struct xfer_batch_end {
	uint64_t op;
	enum xfer_state state;
	uint64_t bytes;
	int error; /* 0, or -errno once CANCELLED or ERRORED (the cause: xfer_status()) */
};

/* Every operation of a batch posted with XFER_OP_BATCH_EVENT ended. */
struct xfer_batch_event {
	uint64_t batch;
	size_t n;
	const struct xfer_batch_end *ends; /* in the order they ended; valid during the call */
};

typedef void (*xfer_batch_cb)(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg);

/* Sets (or with NULL clears) the callback for batch events; delivered like the others. */
XFER_EXPORT void xfer_set_batch_cb(struct xfer_client *c, xfer_batch_cb cb, void *arg);

enum xfer_window_event_type {
	XFER_WINDOW_NOTIFIED, /* (to the owner) a tagged get or put completed */
	XFER_WINDOW_CLOSED,   /* (to an opener) its handle was revoked or lost */
};

/* A window notification. */
struct xfer_window_event {
	enum xfer_window_event_type type;
	uint64_t window;	/* NOTIFIED: the owner's window id; CLOSED: the opener's handle */
	char tag[257];		/* NOTIFIED */
	enum xfer_kind kind;	/* NOTIFIED: XFER_GET or XFER_PUT */
	uint64_t offset, bytes; /* NOTIFIED: where in the window, how many */
	char peer[64];		/* NOTIFIED: the opener's node id, or "local" */
	uint64_t handle;	/* NOTIFIED: the opener's handle id on its node */
	int error;		/* CLOSED: -errno */
	char cause[256];	/* CLOSED */
};

typedef void (*xfer_window_cb)(struct xfer_client *c, const struct xfer_window_event *ev,
			       void *arg);

/*
 * Sets (or with NULL clears) the callback for window notifications; delivered like operation
 * events (xfer_set_event_cb(): from inside calls on @c, in arrival order with them). Without a
 * callback they are dropped.
 */
XFER_EXPORT void xfer_set_window_cb(struct xfer_client *c, xfer_window_cb cb, void *arg);

/* Names for enum values ("COMPLETE", "read"); never NULL. */
XFER_EXPORT const char *xfer_state_name(enum xfer_state s);
XFER_EXPORT const char *xfer_kind_name(enum xfer_kind k);

#ifdef __cplusplus
}
#endif

#endif /* XFERCLIENT_H */
