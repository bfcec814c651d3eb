// SPDX-License-Identifier: MIT
/*
 * Name tables generated from the X-macros in xfer_proto.h: methods, states, kinds, and the
 * errno names that travel in error replies (errno numbers are not a stable wire format).
 */
#include <errno.h>
#include <string.h>
#include "xfer_proto.h"

struct method_row {
	const char *name;
	int fds;
	bool needs_hello;
};

static const struct method_row methods[XP_M_COUNT] = {
#define XP_METHOD_ROW(sym, wire, nfds, hello) [XP_M_##sym] = { wire, nfds, hello },
	XP_METHODS(XP_METHOD_ROW)
#undef XP_METHOD_ROW
};

static const char *const states[XP_ST_COUNT] = {
#define XP_STATE_ROW(sym) [XP_ST_##sym] = #sym,
	XP_STATES(XP_STATE_ROW)
#undef XP_STATE_ROW
};

static const char *const kinds[XP_KIND_COUNT] = {
	[XP_KIND_READABLE] = "readable", [XP_KIND_WRITABLE] = "writable", [XP_KIND_READ] = "read",
	[XP_KIND_WRITE] = "write",	 [XP_KIND_GET] = "get",		  [XP_KIND_PUT] = "put",
	[XP_KIND_WINDOW] = "window",
};

static const char *const access_names[] = {
	[XP_ACCESS_READ] = "read",
	[XP_ACCESS_WRITE] = "write",
	[XP_ACCESS_READWRITE] = "readwrite",
};

const char *xp_access_name(int access)
{
	return access >= XP_ACCESS_READ && access <= XP_ACCESS_READWRITE ? access_names[access] :
									   "unknown";
}

int xp_access_from_name(const char *name)
{
	for (int i = XP_ACCESS_READ; i <= XP_ACCESS_READWRITE; i++)
		if (strcmp(access_names[i], name) == 0)
			return i;
	return -EINVAL;
}

const char *xp_method_name(enum xp_method m)
{
	return (unsigned)m < XP_M_COUNT ? methods[m].name : NULL;
}

int xp_method_from_name(const char *name)
{
	for (int i = 0; i < XP_M_COUNT; i++)
		if (strcmp(methods[i].name, name) == 0)
			return i;
	return -EINVAL;
}

int xp_method_fds(enum xp_method m)
{
	return methods[m].fds;
}

bool xp_method_needs_hello(enum xp_method m)
{
	return methods[m].needs_hello;
}

const char *xp_state_name(enum xp_state s)
{
	return (unsigned)s < XP_ST_COUNT ? states[s] : "UNKNOWN";
}

int xp_state_from_name(const char *name)
{
	for (int i = 0; i < XP_ST_COUNT; i++)
		if (strcmp(states[i], name) == 0)
			return i;
	return -EINVAL;
}

const char *xp_kind_name(enum xp_kind k)
{
	return (unsigned)k < XP_KIND_COUNT ? kinds[k] : "unknown";
}

int xp_kind_from_name(const char *name)
{
	for (int i = 0; i < XP_KIND_COUNT; i++)
		if (strcmp(kinds[i], name) == 0)
			return i;
	return -EINVAL;
}

/* clang-format off */
#define XP_ERRNOS(X)                                                                       \
	X(EPERM) X(ENOENT) X(EINTR) X(EIO) X(EBADF) X(EAGAIN) X(ENOMEM) X(EACCES) X(EFAULT) \
	X(EBUSY) X(EEXIST) X(ENODEV) X(EINVAL) X(EMFILE) X(ENOSPC) X(EPIPE) X(ERANGE)       \
	X(ENOSYS) X(EPROTO) X(EBADMSG) X(EOVERFLOW) X(EMSGSIZE) X(EPROTONOSUPPORT)          \
	X(EOPNOTSUPP) X(ECONNRESET) X(ECONNREFUSED) X(ENOBUFS) X(ESHUTDOWN) X(ETIMEDOUT)    \
	X(EHOSTUNREACH) X(EALREADY) X(ESTALE) X(EDQUOT) X(ECANCELED) X(ENOTCONN)           \
	X(ENOTSOCK) X(EISDIR) X(ENXIO) X(ESPIPE)
/* clang-format on */

struct errno_row {
	int err;
	const char *name;
};

static const struct errno_row errnos[] = {
#define XP_ERRNO_ROW(e) { e, #e },
	XP_ERRNOS(XP_ERRNO_ROW)
#undef XP_ERRNO_ROW
};

const char *xp_errno_name(int err)
{
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (errnos[i].err == err)
			return errnos[i].name;
	return "EIO";
}

int xp_errno_from_name(const char *name)
{
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (strcmp(errnos[i].name, name) == 0)
			return errnos[i].err;
	return 0;
}
