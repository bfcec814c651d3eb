// SPDX-License-Identifier: MIT
/*
 * systemd glue: socket activation and sd_notify. Built as no-ops without libsystemd
 * (-DXD_NO_SYSTEMD), so the daemon also runs where systemd is absent.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include "xferd.h"

#ifndef XD_NO_SYSTEMD
#include <systemd/sd-daemon.h>

int xd_sd_listen_fd(void)
{
	int n = sd_listen_fds(1);

	if (n < 0)
		return n;
	if (n == 0)
		return -ENOENT;
	if (n > 1) {
		xd_log(XD_LOG_ERR, "systemd passed %d sockets; xferd takes exactly one", n);
		return -EINVAL;
	}
	if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
		xd_log(XD_LOG_ERR, "the socket systemd passed is not a listening "
				   "AF_UNIX SOCK_SEQPACKET socket (ListenSequentialPacket=)");
		return -EINVAL;
	}
	return SD_LISTEN_FDS_START;
}

void xd_sd_notify(struct xd_daemon *d, const char *state)
{
	if (d->systemd)
		sd_notify(0, state);
}
#else
int xd_sd_listen_fd(void)
{
	return -ENOENT;
}

void xd_sd_notify(struct xd_daemon *d, const char *state)
{
}
#endif
