// SPDX-License-Identifier: MIT
/*
 * The one deferred-free mechanism: an object that must not be freed inside the callback that
 * ended it (a connection, a peer set, an RDMA connection, an operation whose id was never given
 * out) queues itself here, and its function runs at the next turn of the event loop, when no
 * caller up the stack can still hold it (Redis freeClientAsync, Wayland's destroy_list).
 */
#include <errno.h>
#include "xferd.h"

static void defer_run_cb(evutil_socket_t fd, short what, void *arg)
{
	xd_defer_flush(arg);
}

int xd_defer_init(struct xd_daemon *d)
{
	d->defer_ev = event_new(d->base, -1, 0, defer_run_cb, d);
	return d->defer_ev ? 0 : -ENOMEM;
}

void xd_defer(struct xd_daemon *d, struct xd_deferred *df, void (*fn)(void *), void *arg)
{
	if (df->queued)
		return;
	df->fn = fn;
	df->arg = arg;
	df->queued = true;
	TAILQ_INSERT_TAIL(&d->deferred, df, link);
	/* Without the event (a daemon still starting, or the fuzz target) it runs at the next
	 * flush: xd_daemon_fini() flushes before anything it could touch is gone. */
	if (d->defer_ev)
		event_active(d->defer_ev, EV_TIMEOUT, 0);
}

void xd_defer_cancel(struct xd_daemon *d, struct xd_deferred *df)
{
	if (!df->queued)
		return;
	TAILQ_REMOVE(&d->deferred, df, link);
	df->queued = false;
}

void xd_defer_flush(struct xd_daemon *d)
{
	struct xd_deferred *df;

	/* A function may queue more (a peer set freeing its connections): run until empty. */
	while ((df = TAILQ_FIRST(&d->deferred))) {
		TAILQ_REMOVE(&d->deferred, df, link);
		df->queued = false;
		df->fn(df->arg);
	}
}

void xd_defer_fini(struct xd_daemon *d)
{
	xd_defer_flush(d);
	xd_event_free(d->defer_ev);
	d->defer_ev = NULL;
}
