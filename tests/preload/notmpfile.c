// SPDX-License-Identifier: MIT
/*
 * LD_PRELOAD shim for tests/test_xferctl.sh: a file system without O_TMPFILE, as some are
 * (open(DIR, O_TMPFILE) fails with EOPNOTSUPP there), so that xferctl's fallback, a named
 * landing file, is tested on machines whose file systems all have it. Every other open() goes
 * through. Built by the test itself (cc -shared), never linked into anything else.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

typedef int (*open_fn)(const char *, int, ...);

static int open_without_tmpfile(const char *name, const char *path, int flags, mode_t mode)
{
	if ((flags & O_TMPFILE) == O_TMPFILE) {
		errno = EOPNOTSUPP;
		return -1;
	}
	open_fn real = (open_fn)dlsym(RTLD_NEXT, name);
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(path, flags, mode);
}

/* open()'s mode is there only with O_CREAT or O_TMPFILE (open(2)) */
#define OPEN_MODE(flags, mode)                         \
	do {                                           \
		if ((flags) & (O_CREAT | O_TMPFILE)) { \
			va_list ap;                    \
			va_start(ap, flags);           \
			mode = va_arg(ap, mode_t);     \
			va_end(ap);                    \
		}                                      \
	} while (0)

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	OPEN_MODE(flags, mode);
	return open_without_tmpfile("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;

	OPEN_MODE(flags, mode);
	return open_without_tmpfile("open64", path, flags, mode);
}
