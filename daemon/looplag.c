// SPDX-License-Identifier: MIT
/*
 * How late the event loop runs. DESIGN §7 says nothing blocks the loop; this is what shows
 * whether that holds under load. A tick due every XD_LOOP_TICK_MS measures how late it runs
 * (xferd_event_loop_lag_seconds), and a tick XD_LOOP_WARN_MS late or more is logged with where
 * the time went:
 *   - the longest callback since the previous tick, among those that note their length
 *     (xd_loop_note(): the peer connections' reads and writes, the copy workers' reports, the
 *     control connections): a callback that blocks names itself;
 *   - the loop thread's own scheduler times over the same stretch (/proc/thread-self/schedstat:
 *     on a CPU, waiting in the run queue), so that a daemon starved of CPU by the machine's
 *     load is told apart from one blocked in a system call or stopped.
 * Lateness is the loop's alone: a peer's keepalive fires on the same loop, so a stall of this
 * length looks to the peers like silence.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "xferd.h"

#define XD_LOOP_WARN_EVERY_US (10ull * 1000 * 1000) /* late ticks logged at most this often */

/* The loop thread's on-CPU and run-queue nanoseconds. Returns 0, or -1 if unknown. */
static int schedstat_read(int fd, uint64_t *run_ns, uint64_t *wait_ns)
{
	char buf[96];
	ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return sscanf(buf, "%" SCNu64 " %" SCNu64, run_ns, wait_ns) == 2 ? 0 : -1;
}

static void arm(struct xd_daemon *d)
{
	struct timeval tv = { 0, XD_LOOP_TICK_MS * 1000 };

	/* libevent counts a timeout from the time cached at the turn's start: refresh it first. */
	event_base_update_cache_time(d->base);
	d->loop.due_us = xd_now_us() + XD_LOOP_TICK_MS * 1000;
	event_add(d->loop.tick, &tv);
}

/* What the longest noted callback was, for the log line. */
static void longest_callback(const struct xd_looplag *l, char *out, size_t len)
{
	if (!l->cb_what)
		snprintf(out, len, "no noted callback ran");
	else
		snprintf(out, len, "the longest callback was %s%s%s (%.3f s)", l->cb_what,
			 l->cb_who[0] ? " " : "", l->cb_who, (double)l->cb_us / 1e6);
}

/* A tick @lag_us late, @since_us after the previous one: logged with where the time went. */
static void warn_late(struct xd_daemon *d, uint64_t lag_us, uint64_t since_us, uint64_t now)
{
	struct xd_looplag *l = &d->loop;
	uint64_t run = l->run_ns, wait = l->wait_ns;
	char cb[160], sched[200] = "";

	if (l->warned_us && now - l->warned_us < XD_LOOP_WARN_EVERY_US) {
		l->unwarned++;
		return;
	}
	longest_callback(l, cb, sizeof(cb));
	if (schedstat_read(l->schedstat_fd, &run, &wait) == 0) {
		uint64_t on = (run - l->run_ns) / 1000, queued = (wait - l->wait_ns) / 1000;
		uint64_t off = since_us > on + queued ? since_us - on - queued : 0;
		snprintf(
			sched, sizeof(sched),
			"; over the last %.3f s the loop thread ran %.3f s on a CPU, waited %.3f s "
			"for one (the machine's load) and was off-CPU %.3f s (blocked in a system "
			"call, or stopped)",
			(double)since_us / 1e6, (double)on / 1e6, (double)queued / 1e6,
			(double)off / 1e6);
	}
	xd_log(XD_LOG_WARN, "the event loop ran %.3f s late (a tick due every %d ms)%s; %s%s",
	       (double)lag_us / 1e6, XD_LOOP_TICK_MS, sched, cb,
	       l->unwarned ? " (more late ticks since the last such line, not logged)" : "");
	l->warned_us = now;
	l->unwarned = 0;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_daemon *d = arg;
	struct xd_looplag *l = &d->loop;
	uint64_t now = xd_now_us();
	uint64_t lag = now > l->due_us ? now - l->due_us : 0;
	uint64_t since = now - (l->due_us - XD_LOOP_TICK_MS * 1000);

	xd_hist_observe(&l->lag, lag);
	if (lag > l->max_us)
		l->max_us = lag;
	if (lag >= XD_LOOP_WARN_MS * 1000) {
		l->late++;
		warn_late(d, lag, since, now);
	}
	schedstat_read(l->schedstat_fd, &l->run_ns, &l->wait_ns);
	l->cb_us = 0;
	l->cb_what = NULL;
	arm(d);
}

int xd_looplag_start(struct xd_daemon *d)
{
	struct xd_looplag *l = &d->loop;

	/* Opened here, on the loop thread: thread-self is resolved at open. */
	l->schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	schedstat_read(l->schedstat_fd, &l->run_ns, &l->wait_ns);
	l->tick = evtimer_new(d->base, tick_cb, d);
	if (!l->tick) {
		if (l->schedstat_fd >= 0)
			close(l->schedstat_fd);
		return -ENOMEM;
	}
	arm(d);
	return 0;
}

void xd_looplag_stop(struct xd_daemon *d)
{
	struct xd_looplag *l = &d->loop;

	if (!l->tick)
		return; /* never started (schedstat_fd is not set either) */
	xd_event_free(l->tick);
	l->tick = NULL;
	if (l->schedstat_fd >= 0)
		close(l->schedstat_fd);
	l->schedstat_fd = -1;
}

void xd_loop_note(struct xd_daemon *d, uint64_t start_us, const char *what, const char *who)
{
	uint64_t us = xd_now_us() - start_us;

	if (us <= d->loop.cb_us)
		return;
	d->loop.cb_us = us;
	d->loop.cb_what = what;
	snprintf(d->loop.cb_who, sizeof(d->loop.cb_who), "%s", who ? who : "");
}
