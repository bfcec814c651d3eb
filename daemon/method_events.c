// SPDX-License-Identifier: MIT
/*
 * events.subscribe: a read-only view of other clients' operations as they change (xferctl
 * watch). A subscriber gets the op.changed of every operation it may see (root: all; others:
 * those of connections of its own uid). What it has not read is bounded: past
 * XD_EVENTS_MAX_QUEUED packets, events are counted as dropped instead of queued.
 */
#include <errno.h>
#include <jansson.h>
#include "xferd.h"

/* Whether subscriber @s may see the operations of connection @owner. */
static bool may_watch(const struct xd_conn *s, const struct xd_conn *owner)
{
	return s->uid == 0 || s->uid == owner->uid;
}

void xd_events_publish(struct xd_daemon *d, const struct xd_conn *owner, const json_t *msg)
{
	struct xd_conn *c;

	TAILQ_FOREACH(c, &d->conns, link) {
		if (!c->subscribed || c == owner || c->closing || !may_watch(c, owner))
			continue;
		/* A subscriber that stops reading loses events, never the daemon's memory. */
		if (c->queued >= XD_EVENTS_MAX_QUEUED)
			c->events_dropped++;
		else
			xd_client_send(c, msg);
	}
}

/* Subscribed connections of users other than root. */
static unsigned unprivileged_subscribers(struct xd_daemon *d)
{
	struct xd_conn *c;
	unsigned n = 0;

	TAILQ_FOREACH(c, &d->conns, link)
		n += c->subscribed && c->uid != 0;
	return n;
}

int xd_handle_events_subscribe(struct xd_call *call)
{
	struct xd_conn *c = call->conn;
	struct xd_daemon *d = c->d;

	if (call->params && json_object_size(call->params) > 0)
		return xd_fail(call, XP_E_PARAMS, EINVAL, "events.subscribe takes no params");
	if (!c->subscribed) {
		/* Root is never locked out of watching by other users' subscriptions. */
		if (c->uid != 0 && unprivileged_subscribers(d) >= XD_MAX_SUBSCRIBERS)
			return xd_fail(call, XP_E_FAILED, EDQUOT,
				       "at most %d connections of users other than root may "
				       "subscribe to events",
				       XD_MAX_SUBSCRIBERS);
		c->subscribed = true;
		d->event_subscribers++;
	}
	/* Calling again is allowed: it answers how many events were dropped so far. */
	call->result = json_pack("{s:s, s:I, s:I, s:I}", "scope", c->uid == 0 ? "all" : "uid",
				 "uid", (json_int_t)c->uid, "dropped",
				 (json_int_t)c->events_dropped, "max_queued",
				 (json_int_t)XD_EVENTS_MAX_QUEUED);
	return call->result ? 0 : -ENOMEM;
}
