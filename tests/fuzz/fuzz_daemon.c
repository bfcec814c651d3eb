// SPDX-License-Identifier: MIT
/*
 * The in-process daemon the daemon-driving fuzz targets share (fuzz_daemon.h): start, stop, and
 * the helpers every input's checks use.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_daemon.h"

/* The running target's name and directory, for fuzz_die(). */
static const char *die_name = "fuzz";
static struct fuzz_daemon *die_daemon;

static void remove_dir(struct fuzz_daemon *f)
{
	char path[128];

	if (!f || !f->dir[0])
		return;
	snprintf(path, sizeof(path), "%s/ctl.sock", f->dir);
	unlink(path);
	rmdir(f->dir);
	f->dir[0] = '\0';
}

void fuzz_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", die_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	remove_dir(die_daemon);
	abort();
}

int fuzz_count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;

	if (!dir)
		fuzz_die("opendir /proc/self/fd: %s", strerror(errno));
	while (readdir(dir))
		n++;
	closedir(dir);
	return n - 3; /* ".", ".." and the directory's own fd */
}

void fuzz_daemon_start(struct fuzz_daemon *f, const char *name, const char *node_hex,
		       uint64_t epoch, void (*configure)(struct xd_config *cfg))
{
	const char *tmp = getenv("TMPDIR");
	const char *level = getenv("XFER_FUZZ_LOG");
	struct xd_daemon *d = &f->d;
	int rc;

	die_name = name;
	die_daemon = f;
	snprintf(f->dir, sizeof(f->dir), "%s/%s.XXXXXX", tmp ? tmp : "/tmp", name);
	if (!mkdtemp(f->dir))
		fuzz_die("mkdtemp %s: %s", f->dir, strerror(errno));
	signal(SIGPIPE, SIG_IGN); /* as xferd's main() */
	xd_log_init(false);
	/* Every input ends a connection or a peer set, which logs: only errors, unless asked. */
	if (!level || xd_log_set_level(level) < 0)
		xd_log_level = XD_LOG_ERR;
	xd_daemon_clear(d);
	d->epoch = epoch;
	xd_config_defaults(&d->cfg);
	free(d->cfg.socket_path);
	if (asprintf(&d->cfg.socket_path, "%s/ctl.sock", f->dir) < 0)
		fuzz_die("out of memory");
	if (configure)
		configure(&d->cfg);
	if (xp_hex_decode(node_hex, d->node, XP_ID_BYTES) < 0)
		fuzz_die("bad node id %s", node_hex);
	xp_hex_encode(d->node, XP_ID_BYTES, d->node_hex);
	d->base = event_base_new();
	if (!d->base)
		fuzz_die("event_base_new failed");
	xd_claims_start(d);
	if ((rc = xd_defer_init(d)) < 0 || (rc = xd_transport_local(d)->start(d)) < 0 ||
	    (rc = xd_peers_start(d)) < 0 || (rc = xd_ctl_start(d, xd_dispatch_packet)) < 0)
		fuzz_die("daemon start: %s", strerror(-rc));
	f->started = true;
}

void fuzz_daemon_stop(struct fuzz_daemon *f)
{
	struct xd_daemon *d = &f->d;

	if (!f->started)
		return;
	xd_transport_local(d)->fini(d);
	xd_ctl_fini(d);
	xd_peers_stop(d);
	xd_ops_fini(d);
	xd_peers_fini(d);
	xd_defer_fini(d);
	event_base_free(d->base);
	xd_config_fini(&d->cfg);
	remove_dir(f);
	f->started = false;
}

int fuzz_connect(int sock, const struct sockaddr *sa, socklen_t len)
{
	struct pollfd pfd = { .fd = sock, .events = POLLOUT };
	int err = 0;
	socklen_t elen = sizeof(err);

	while (connect(sock, sa, len) < 0) {
		if (errno != EINTR)
			return -1;
		if (sa->sa_family == AF_UNIX)
			continue;
		while (poll(&pfd, 1, -1) < 0)
			if (errno != EINTR)
				return -1;
		if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
			return -1;
		errno = err;
		return err ? -1 : 0;
	}
	return 0;
}
