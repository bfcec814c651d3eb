// SPDX-License-Identifier: MIT
/*
 * One SOCK_SEQPACKET packet with its SCM_RIGHTS fds. The receive side collects every fd of
 * every SCM_RIGHTS header before it looks at the flags, so that nothing the kernel handed over
 * is lost on an error path (Wayland's decode_cmsg habit).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "xp_fdmsg.h"

static int (*fd_closer)(int fd) = close;

void xp_fdset_set_closer(int (*close_fd)(int fd))
{
	fd_closer = close_fd ? close_fd : close;
}

int xp_fdset_take(struct xp_fdset *set, int i)
{
	if (i < 0 || i >= set->count || set->fds[i] < 0)
		return -EBADF;
	int fd = set->fds[i];
	set->fds[i] = -1;
	return fd;
}

void xp_fdset_close(struct xp_fdset *set)
{
	for (int i = 0; i < set->count; i++)
		if (set->fds[i] >= 0)
			fd_closer(set->fds[i]);
	set->count = 0;
}

void xp_msg_put_fds(struct msghdr *msg, void *cbuf, const int *fds, int nfds)
{
	size_t bytes = (size_t)nfds * sizeof(int);
	struct cmsghdr *h;

	memset(cbuf, 0, CMSG_SPACE(bytes));
	msg->msg_control = cbuf;
	msg->msg_controllen = CMSG_SPACE(bytes);
	h = CMSG_FIRSTHDR(msg);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(bytes);
	memcpy(CMSG_DATA(h), fds, bytes);
}

int xp_packet_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(XP_RECV_FDS * sizeof(int))];
	} cmsg;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (len == 0 || len > XP_MAX_MSG || nfds < 0 || nfds > XP_RECV_FDS)
		return -EINVAL;
	if (nfds > 0)
		xp_msg_put_fds(&msg, cmsg.buf, fds, nfds);
	ssize_t n;
	do {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EMSGSIZE;
}

/* Moves every fd of every SCM_RIGHTS header of @msg into @fds; closes what does not fit. */
static void collect_fds(struct msghdr *msg, struct xp_fdset *fds)
{
	for (struct cmsghdr *h = CMSG_FIRSTHDR(msg); h; h = CMSG_NXTHDR(msg, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const unsigned char *p = CMSG_DATA(h);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, p + i * sizeof(int), sizeof(int));
			if (fds->count < XP_RECV_FDS)
				fds->fds[fds->count++] = fd;
			else
				fd_closer(fd);
		}
	}
}

int xp_packet_recv(int sock, void *buf, size_t cap, struct xp_fdset *fds, int dontwait)
{
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(XP_RECV_FDS * sizeof(int))];
	} cmsg;
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cmsg.buf,
		.msg_controllen = sizeof(cmsg.buf),
	};
	int flags = MSG_CMSG_CLOEXEC | (dontwait ? MSG_DONTWAIT : 0);

	xp_fdset_init(fds);
	ssize_t n;
	do {
		n = recvmsg(sock, &msg, flags);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	collect_fds(&msg, fds);
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		xp_fdset_close(fds);
		return (msg.msg_flags & MSG_TRUNC) ? -EMSGSIZE : -ENOBUFS;
	}
	if (n == 0) {
		/* A zero-length packet cannot be told from EOF on SEQPACKET; neither is valid. */
		xp_fdset_close(fds);
		return -ECONNRESET;
	}
	return (int)n;
}
