// SPDX-License-Identifier: MIT
/*
 * The event loop's run, with a short busy-poll (config busy_poll_us). After a light loop turn
 * the loop keeps polling its fds without sleeping, up to busy_poll_us after the last turn that
 * did something, before it sleeps in epoll_wait again: small transfers are a chain of wakeups
 * (client -> daemon -> peer daemon -> daemon -> client), and waking a sleeping CPU costs far
 * more than the work of one hop (~50 us on a VM without halt-polling; MACHINE-FACTS). A reply
 * that arrives during the poll is handled at once. Not after a heavy turn, nor while bulk data
 * moves (a transport noted a frame or copy of XD_BUSY_POLL_BULK bytes or more within the last
 * XD_BUSY_POLL_BULK_QUIET_US): then the CPUs are what the copies need, and a poll would take
 * one from them. Nor after a sleep of XD_BUSY_POLL_SPARSE_US or more (sparse events: a timer,
 * a lone request), so an idle daemon never polls; and each poll ends at the latest
 * XD_BUSY_POLL_MAX_US after it began, so a pass misjudged as work cannot keep it spinning.
 */
#include <sched.h>
#include <time.h>
#include "xferd.h"

/* The CPU time the calling thread has used, in ns. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

/*
 * After event_base_loop() returned @rc: whether the loop is over, as event_base_dispatch() would
 * end: an error, no events left (1), or told to exit or break.
 */
static bool loop_ended(struct xd_daemon *d, int rc)
{
	return rc != 0 || event_base_got_exit(d->base) || event_base_got_break(d->base);
}

/*
 * One pass of the loop (@flags: EVLOOP_ONCE or EVLOOP_NONBLOCK), *cpu_ns what it used of the
 * CPU, *idle_us how long it was off the CPU (asleep, mostly). Returns true once it ended.
 */
static bool loop_pass(struct xd_daemon *d, int flags, uint64_t *cpu_ns, uint64_t *idle_us)
{
	uint64_t t0 = thread_cpu_ns(), w0 = xd_now_us();
	int rc = event_base_loop(d->base, flags);
	uint64_t wall_us = xd_now_us() - w0;

	*cpu_ns = thread_cpu_ns() - t0;
	*idle_us = wall_us > *cpu_ns / 1000 ? wall_us - *cpu_ns / 1000 : 0;
	return loop_ended(d, rc);
}

/* Whether a turn that used @cpu_ns is worth polling after: light, and no bulk data lately. */
static bool poll_worth(struct xd_daemon *d, uint64_t cpu_ns, uint64_t now_us)
{
	struct xd_busypoll *bp = &d->busypoll;

	if (cpu_ns >= XD_BUSY_POLL_HEAVY_NS)
		return false;
	if (now_us - bp->bulk_us < XD_BUSY_POLL_BULK_QUIET_US) {
		bp->skipped_bulk++;
		return false;
	}
	return true;
}

/*
 * Polls without sleeping until busy_poll_us passed since the last pass that did work, a heavy
 * pass, or XD_BUSY_POLL_MAX_US in all. Each pass yields first: a process woken on this CPU
 * (the client, the peer daemon) runs instead of waiting behind the poll. Returns true once the
 * loop ended.
 */
static bool busy_poll(struct xd_daemon *d)
{
	struct xd_busypoll *bp = &d->busypoll;
	uint64_t start = xd_now_us(), now = start, until = start + d->cfg.busy_poll_us;
	uint64_t cpu_ns, idle_us;
	bool ended = false;

	bp->polls++;
	while (now < until && now - start < XD_BUSY_POLL_MAX_US) {
		sched_yield();
		ended = loop_pass(d, EVLOOP_NONBLOCK, &cpu_ns, &idle_us);
		now = xd_now_us();
		if (ended || cpu_ns < XD_BUSY_POLL_IDLE_NS)
			continue;
		bp->caught++;
		if (!poll_worth(d, cpu_ns, now))
			break;
		until = now + d->cfg.busy_poll_us;
	}
	bp->polled_us += now - start;
	return ended;
}

void xd_loop_run(struct xd_daemon *d)
{
	uint64_t cpu_ns, idle_us;

	for (;;) {
		/* (busy_poll_us may change on SIGHUP) */
		if (!d->cfg.busy_poll_us) {
			if (loop_ended(d, event_base_loop(d->base, EVLOOP_ONCE)))
				return;
		} else if (loop_pass(d, EVLOOP_ONCE, &cpu_ns, &idle_us)) {
			return;
		} else if (idle_us < XD_BUSY_POLL_SPARSE_US && poll_worth(d, cpu_ns, xd_now_us()) &&
			   busy_poll(d)) {
			return;
		}
	}
}

void xd_busypoll_note_bulk(struct xd_daemon *d, uint64_t bytes)
{
	if (bytes >= XD_BUSY_POLL_BULK)
		d->busypoll.bulk_us = xd_now_us();
}

json_t *xd_busypoll_json(const struct xd_daemon *d)
{
	const struct xd_busypoll *bp = &d->busypoll;

	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "us", (json_int_t)d->cfg.busy_poll_us,
			 "polls", (json_int_t)bp->polls, "caught", (json_int_t)bp->caught,
			 "skipped_bulk", (json_int_t)bp->skipped_bulk, "polled_us",
			 (json_int_t)bp->polled_us);
}
