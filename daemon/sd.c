// SPDX-License-Identifier: MIT
/*
 * systemd glue: socket activation, sd_notify and the watchdog. Built as no-ops without
 * libsystemd (-DXD_NO_SYSTEMD), so the daemon also runs where systemd is absent.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <event2/event.h>
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

/* A timer of the event loop, not a thread: what the watchdog must see stop is the loop. */
static void watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	sd_notify(0, "WATCHDOG=1");
}

int xd_sd_watchdog_start(struct xd_daemon *d)
{
	uint64_t usec = 0;
	struct timeval half;
	int rc;

	if (!d->systemd)
		return 0;
	rc = sd_watchdog_enabled(0, &usec);
	if (rc < 0) /* a WATCHDOG_USEC systemd did not write: say so, run on without */
		xd_log(XD_LOG_WARN, "systemd watchdog: %s; not pinging", strerror(-rc));
	if (rc <= 0)
		return 0;
	half.tv_sec = (time_t)(usec / 2 / 1000000);
	half.tv_usec = (suseconds_t)(usec / 2 % 1000000);
	d->watchdog_ev = event_new(d->base, -1, EV_PERSIST, watchdog_cb, d);
	if (!d->watchdog_ev || event_add(d->watchdog_ev, &half) < 0)
		return -ENOMEM;
	sd_notify(0, "WATCHDOG=1");
	xd_log(XD_LOG_INFO, "systemd watchdog: WATCHDOG=1 every %llu ms (WatchdogSec=%llu ms)",
	       (unsigned long long)(usec / 2000), (unsigned long long)(usec / 1000));
	return 0;
}

void xd_sd_watchdog_stop(struct xd_daemon *d)
{
	xd_event_free(d->watchdog_ev);
	d->watchdog_ev = NULL;
}
#else
int xd_sd_listen_fd(void)
{
	return -ENOENT;
}

void xd_sd_notify(struct xd_daemon *d, const char *state)
{
}

int xd_sd_watchdog_start(struct xd_daemon *d)
{
	return 0;
}

void xd_sd_watchdog_stop(struct xd_daemon *d)
{
}
#endif
