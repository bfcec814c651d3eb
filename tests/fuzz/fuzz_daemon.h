/* SPDX-License-Identifier: MIT */
/*
 * The in-process daemon that fuzz_ctl.c and fuzz_peer.c drive: made of the real daemon objects,
 * started as main.c's daemon_init() does (no signals, no systemd), in a private directory, with
 * a fixed node and epoch so that an input means the same thing in every run.
 */
#ifndef XFER_FUZZ_DAEMON_H
#define XFER_FUZZ_DAEMON_H

#include <sys/socket.h>

#include "../../daemon/transport.h"

struct fuzz_daemon {
	struct xd_daemon d;
	bool started;
	char dir[64]; /**< mkdtemp'd; holds the control socket */
};

/* Prints "NAME: " and the message on stderr, removes the directory, aborts (for libFuzzer). */
__attribute__((noreturn, format(printf, 1, 2))) void fuzz_die(const char *fmt, ...);

/* Open fds of this process. */
int fuzz_count_fds(void);

/*
 * connect() that libFuzzer's SIGALRM (the -timeout watchdog, every second) cannot break: a TCP
 * connect it interrupts goes on in the background and is waited for; a Unix one is retried.
 * Returns 0 or -1 with errno, as connect().
 */
int fuzz_connect(int sock, const struct sockaddr *sa, socklen_t len);

/*
 * Makes @f's directory and starts its daemon as node @node_hex, epoch @epoch; @configure (may
 * be NULL) adjusts the defaults first. The log shows errors only unless XFER_FUZZ_LOG names a
 * level. @name prefixes fuzz_die()'s lines. Dies on failure.
 */
void fuzz_daemon_start(struct fuzz_daemon *f, const char *name, const char *node_hex,
		       uint64_t epoch, void (*configure)(struct xd_config *cfg));

/* main.c's daemon_fini(), in its order, then the directory; nothing if not started. */
void fuzz_daemon_stop(struct fuzz_daemon *f);

#endif /* XFER_FUZZ_DAEMON_H */
