// SPDX-License-Identifier: MIT
/*
 * LD_PRELOAD shim for tests/test_looplag.sh: a file whose I/O blocks for as long as the test
 * wants, as a disk that does not answer would. While the file named by XFERD_TEST_FILE_GATE
 * exists, every sendfile() from a regular file and every splice() into one waits (and the first
 * wait creates GATE.entered, so the test knows the daemon is inside); removing the gate lets
 * them through. Built by the test itself (cc -shared), never linked into anything else.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_regular(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static void gate_wait(void)
{
	const char *gate = getenv("XFERD_TEST_FILE_GATE");
	char entered[4096];

	if (!gate || access(gate, F_OK) != 0)
		return;
	snprintf(entered, sizeof(entered), "%s.entered", gate);
	int fd = open(entered, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	while (access(gate, F_OK) == 0)
		usleep(10000);
}

ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	ssize_t (*real)(int, int, off_t *, size_t) = dlsym(RTLD_NEXT, "sendfile");

	if (is_regular(in_fd))
		gate_wait();
	return real(out_fd, in_fd, offset, count);
}

ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count)
{
	return sendfile(out_fd, in_fd, offset, count);
}

ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
	       unsigned int flags)
{
	ssize_t (*real)(int, loff_t *, int, loff_t *, size_t, unsigned int) =
		dlsym(RTLD_NEXT, "splice");

	if (is_regular(fd_out))
		gate_wait();
	return real(fd_in, off_in, fd_out, off_out, len, flags);
}
