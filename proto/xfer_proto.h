/* SPDX-License-Identifier: MIT */
/*
 * The control protocol's contract, shared by xferd and libxferclient: version, limits, the
 * method table, the error codes and the operation states. proto/PROTOCOL.md is the prose spec;
 * tests/test_proto.c checks that the two agree.
 */
#ifndef XFER_PROTO_H
#define XFER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bump whenever the shape of any message changes. 1: first version. */
#define XP_PROTO_VERSION 1

#define XP_MAX_MSG (64 * 1024) /* bytes in one control packet, either direction */
#define XP_MAX_FDS 1	       /* fds one request may carry (region.register) */
/*
 * The kernel accepts at most SCM_MAX_FD (253) fds in one message. The receive buffer has room
 * for all of them, so a client that sends too many gets a clear error naming the count instead
 * of a silently truncated message.
 */
#define XP_RECV_FDS 253
#define XP_MAX_DESCS 1024     /* descriptors in one operation */
#define XP_MAX_NAME 64	      /* bytes in a client or region name */
#define XP_METADATA_MAX 16384 /* bytes in a metadata string */
#define XP_DEFAULT_SOCKET "/run/xferd/xferd.sock"
#define XP_SOCKET_ENV "XFERD_SOCKET"

/*
 * The methods: X(enum suffix, wire name, fds the request carries, needs hello first).
 * The daemon's dispatch table, the client library and the spec check are all generated from
 * this list, so adding a method is one line here plus its handler.
 */
#define XP_METHODS(X)                                      \
	X(HELLO, "hello", 0, false)                        \
	X(REGION_REGISTER, "region.register", 1, true)     \
	X(REGION_DEREGISTER, "region.deregister", 0, true) \
	X(OP_READABLE, "op.readable", 0, true)             \
	X(OP_WRITABLE, "op.writable", 0, true)             \
	X(OP_READ, "op.read", 0, true)                     \
	X(OP_WRITE, "op.write", 0, true)                   \
	X(OP_STATUS, "op.status", 0, true)                 \
	X(OP_WAIT, "op.wait", 0, true)                     \
	X(OP_CANCEL, "op.cancel", 0, true)                 \
	X(OP_RELEASE, "op.release", 0, true)               \
	X(LIST_REGIONS, "list.regions", 0, true)           \
	X(LIST_OPS, "list.ops", 0, true)                   \
	X(LIST_CLIENTS, "list.clients", 0, true)           \
	X(LIST_PEERS, "list.peers", 0, true)               \
	X(LIST_DEVICES, "list.devices", 0, true)           \
	X(STATS, "stats", 0, true)                         \
	X(WINDOW_CREATE, "window.create", 0, true)         \
	X(WINDOW_OPEN, "window.open", 0, true)             \
	X(WINDOW_CLOSE, "window.close", 0, true)           \
	X(OP_GET, "op.get", 0, true)                       \
	X(OP_PUT, "op.put", 0, true)                       \
	X(OP_BATCH, "op.batch", 0, true)                   \
	X(LIST_WINDOWS, "list.windows", 0, true)           \
	X(EVENTS_SUBSCRIBE, "events.subscribe", 0, true)

/* (clang-format would take the X-macro line for a statement that goes on) */
/* clang-format off */
enum xp_method {
#define XP_METHOD_ENUM(sym, name, fds, hello) XP_M_##sym,
	XP_METHODS(XP_METHOD_ENUM)
#undef XP_METHOD_ENUM
	XP_M_COUNT
};
/* clang-format on */

/*
 * The notifications the daemon pushes: an operation changed state (to its owner, and to the
 * connections that called events.subscribe and may see it); a window's notify tag arrived (to
 * the window's owner); a window handle was revoked or lost (to its opener).
 */
#define XP_NOTIFY_OP_CHANGED "op.changed"
#define XP_NOTIFY_WINDOW_NOTIFIED "window.notified"
#define XP_NOTIFY_WINDOW_CLOSED "window.closed"
#define XP_NOTIFY_BATCH_DONE "op.batch_done" /* every op of an op.batch with "event": "batch" */

#define XP_MAX_TAG 256	  /* bytes of a notify tag of op.get / op.put */
#define XP_MAX_BATCH 1024 /* entries of one op.batch */

/*
 * JSON-RPC error codes. The standard ones for the envelope; XP_E_FAILED for a well-formed
 * request the daemon refused (the errno name in error.data.errno says why).
 */
#define XP_E_PARSE (-32700)	  /* not JSON: protocol violation, connection closed */
#define XP_E_INVALID_REQ (-32600) /* bad envelope, packet or fds: violation, closed */
#define XP_E_NO_METHOD (-32601)	  /* unknown method */
#define XP_E_PARAMS (-32602)	  /* params missing, of the wrong type, or unknown */
#define XP_E_INTERNAL (-32603)	  /* the daemon failed (ENOMEM, ...) */
#define XP_E_FAILED (-32000)	  /* request refused: see data.errno */

/* Operation states; the wire names are these words. */
#define XP_STATES(X)                                                                 \
	X(UNINITIALIZED) /**< never reported by the daemon; a client-side default */ \
	X(INITIALIZED)	 /**< passive side created, waiting for its peer's claim */  \
	X(IN_PROGRESS)	 /**< claimed (passive) or started (active); bytes moving */ \
	X(COMPLETE)	 /**< every byte arrived; terminal */                        \
	X(CANCELLED)	 /**< cancelled by either side or by shutdown; terminal */   \
	X(ERRORED)	 /**< failed; the cause says why; terminal */

/* (clang-format would take the X-macro line for a statement that goes on) */
/* clang-format off */
enum xp_state {
#define XP_STATE_ENUM(name) XP_ST_##name,
	XP_STATES(XP_STATE_ENUM)
#undef XP_STATE_ENUM
	XP_ST_COUNT
};
/* clang-format on */

enum xp_kind {
	XP_KIND_READABLE, /**< passive: my buffer may be read once */
	XP_KIND_WRITABLE, /**< passive: my buffer may be written once */
	XP_KIND_READ,	  /**< active: pull readable metadata's bytes into my buffer */
	XP_KIND_WRITE,	  /**< active: push my buffer into writable metadata's buffer */
	XP_KIND_GET,	  /**< one-sided: pull a range of an open window into my buffer */
	XP_KIND_PUT,	  /**< one-sided: push my buffer into a range of an open window */
	XP_KIND_WINDOW,	  /**< metadata of a window (window.create), never an operation */
	XP_KIND_COUNT
};

/* Returns the wire name, or NULL when out of range. */
const char *xp_method_name(enum xp_method m);
/* Returns the method for @name, or -EINVAL when there is none. */
int xp_method_from_name(const char *name);
/* Fds a request of method @m must carry. */
int xp_method_fds(enum xp_method m);
/* Whether method @m may be sent only after hello. */
bool xp_method_needs_hello(enum xp_method m);

const char *xp_state_name(enum xp_state s);
/* Returns the state for @name, or -EINVAL when there is none. */
int xp_state_from_name(const char *name);
static inline bool xp_state_terminal(enum xp_state s)
{
	return s == XP_ST_COMPLETE || s == XP_ST_CANCELLED || s == XP_ST_ERRORED;
}

const char *xp_kind_name(enum xp_kind k);
/* Returns the kind for @name, or -EINVAL when there is none. */
int xp_kind_from_name(const char *name);
/* Whether @k is a passive kind (readable or writable). */
static inline bool xp_kind_passive(enum xp_kind k)
{
	return k == XP_KIND_READABLE || k == XP_KIND_WRITABLE;
}

/* Window access modes (window.create "access"). */
enum xp_access {
	XP_ACCESS_READ = 1,	 /**< openers may op.get */
	XP_ACCESS_WRITE = 2,	 /**< openers may op.put */
	XP_ACCESS_READWRITE = 3, /**< both */
};
/* "read", "write", "readwrite"; "unknown" out of range. */
const char *xp_access_name(int access);
/* The mode for @name, or -EINVAL. */
int xp_access_from_name(const char *name);

/* Symbolic errno name ("EINVAL") for a positive errno value; "EIO" for unknown ones. */
const char *xp_errno_name(int err);
/* Positive errno value for a symbolic name, or 0 when unknown. */
int xp_errno_from_name(const char *name);

#endif /* XFER_PROTO_H */
