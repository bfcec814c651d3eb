/* SPDX-License-Identifier: MIT */
/*
 * One SOCK_SEQPACKET packet plus its SCM_RIGHTS fds, sent or received. The receiver owns the
 * fds in a struct xp_fdset until a handler takes them; xp_fdset_close() closes the rest.
 */
#ifndef XP_FDMSG_H
#define XP_FDMSG_H

#include <stddef.h>
#include <sys/socket.h>
#include "xfer_proto.h"

/* The fds that arrived with one packet. A taken slot holds -1. */
struct xp_fdset {
	int fds[XP_RECV_FDS];
	int count;
};

static inline void xp_fdset_init(struct xp_fdset *set)
{
	set->count = 0;
}

/* Takes fd @i out of @set: the caller now owns it. Returns the fd, or -EBADF if none is there. */
int xp_fdset_take(struct xp_fdset *set, int i);

/* Closes every fd still owned by @set (with the closer, below) and empties it. */
void xp_fdset_close(struct xp_fdset *set);
/*
 * What closes fds that arrived and were not taken (xp_fdset_close(), and xp_packet_recv()'s
 * error paths): close(2) unless set. The daemon sets one that never waits on its loop (a
 * client's fd may be a FUSE file's, whose every close waits for the file system's FLUSH).
 */
void xp_fdset_set_closer(int (*close_fd)(int fd));

/*
 * Sends @len bytes (1..XP_MAX_MSG) as one packet with @nfds fds (borrowed: the kernel duplicates
 * them). Non-blocking when @sock is. Returns 0, or -errno (-EAGAIN when the socket is full).
 */
int xp_packet_send(int sock, const void *buf, size_t len, const int *fds, int nfds);
/*
 * Puts @nfds fds (> 0) into @msg as one SCM_RIGHTS header, in @cbuf (zeroed here), which must
 * hold CMSG_SPACE(@nfds * sizeof(int)) bytes and be aligned for struct cmsghdr.
 */
void xp_msg_put_fds(struct msghdr *msg, void *cbuf, const int *fds, int nfds);

/*
 * Receives one packet into @buf (@cap bytes) and its fds into @fds (received CLOEXEC), without
 * blocking if @dontwait. Returns the packet length (> 0), or:
 *   -EAGAIN      nothing waiting (only with @dontwait);
 *   -ECONNRESET  the peer closed the connection;
 *   -EMSGSIZE    the packet was larger than @cap (truncated: a protocol violation);
 *   -ENOBUFS     control data was truncated (more fds than XP_RECV_FDS);
 *   -errno       any other failure.
 * On every error @fds holds nothing (what arrived was closed).
 */
int xp_packet_recv(int sock, void *buf, size_t cap, struct xp_fdset *fds, int dontwait);

#endif /* XP_FDMSG_H */
