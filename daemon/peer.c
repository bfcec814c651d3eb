// SPDX-License-Identifier: MIT
/*
 * The transfer engine's peer sets (PROTOCOL.md §10): one set of connections per other daemon
 * and transport, shared by every local client; choosing the transport for a claim, connecting
 * on demand, the connect deadline and the keepalive tick, and each set's round-robin queue of
 * transfers with bytes to move. The connections themselves are the transport's (transport.h);
 * it reports HELLO and failures here through d->link_events.
 *
 * A failure of any connection of a set fails the whole set: every transfer on it ends, and the
 * next claim makes a new set. Sets are freed at the next loop turn (defer.c), never inside
 * their own callbacks.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transport.h"
#include "xp_peer.h"

/*
 * The metrics' peer-set counters (xferd.h): a set made to a node whose last set failed is a
 * reconnect; the ring of failed nodes is bounded, so a reconnect after many other failures
 * counts as a plain new set.
 */
static void count_opened(struct xd_peer *p)
{
	struct xd_counters *c = &p->d->counters;
	int t = xd_metric_transport(p->d, p->transport->name);
	unsigned n = c->nrecent_failed < XD_RECENT_FAILED ? c->nrecent_failed : XD_RECENT_FAILED;

	c->peer_sets_opened[t]++;
	for (unsigned i = 0; i < n; i++) {
		if (memcmp(c->recent_failed[i], p->node, XP_ID_BYTES) == 0) {
			c->peer_reconnects[t]++;
			return;
		}
	}
}

static void count_failed(struct xd_peer *p)
{
	struct xd_counters *c = &p->d->counters;

	c->peer_sets_failed[xd_metric_transport(p->d, p->transport->name)]++;
	memcpy(c->recent_failed[c->nrecent_failed++ % XD_RECENT_FAILED], p->node, XP_ID_BYTES);
}

static void peer_free(void *arg)
{
	struct xd_peer *p = arg;

	assert(p->file_receivers == 0); /* (every transfer of the set was closed first) */
	assert(p->xfer_ids[0].count == 0 && p->xfer_ids[1].count == 0 && TAILQ_EMPTY(&p->xfers));
	xd_idmap_fini(&p->xfer_ids[0]);
	xd_idmap_fini(&p->xfer_ids[1]);
	xd_event_free(p->keepalive);
	xd_event_free(p->connect_timer);
	free(p);
}

/*
 * What a claim is told when the owner at @endpoint could not be reached, whatever the reason:
 * one text for a closed port, a silent or filtered address, a service that hung up (the reason
 * goes to the log). Without a key, a keyed owner hangs up at the handshake: hint at it.
 */
static void unreachable_cause(struct xd_daemon *d, const char *endpoint, char *buf, size_t len)
{
	snprintf(buf, len, "cannot reach the owner at %s%s", endpoint,
		 d->keys.n ? "" : " (does it want a cluster key?)");
}

void xd_peer_fail(struct xd_peer *p, int err, const char *fmt, ...)
{
	char cause[XD_CAUSE_MAX];
	va_list ap;

	if (p->state == XD_PEER_DEAD)
		return;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	xd_log(XD_LOG_WARN, "peer %s (%s): %s", p->node_hex, p->endpoint, cause);
	bool unreached = p->state == XD_PEER_CONNECTING && p->nendpoints > 0 && err != EACCES;
	p->state = XD_PEER_DEAD;
	count_failed(p);
	TAILQ_REMOVE(&p->d->peers, p, link);
	p->transport->close(p);
	event_del(p->keepalive);
	event_del(p->connect_timer);
	/*
	 * A set this daemon dialled that failed before the owner proved itself (EACCES: it answered
	 * the handshake and failed the key) tells the claims only that the owner was not reached:
	 * "refused", "timed out" or "closed", in the text or the errno, would let forged metadata
	 * probe which ports are open.
	 * The precise cause is in the log line above.
	 */
	if (unreached) {
		unreachable_cause(p->d, p->endpoint, cause, sizeof(cause));
		err = EHOSTUNREACH; /* (not ETIMEDOUT or ECONNRESET either) */
	}
	p->d->xfer_events->peer_lost(p, err, cause);
	xd_defer(p->d, &p->free_later, peer_free, p);
}

static void link_failed(struct xd_peer *p, int err, const char *cause)
{
	xd_peer_fail(p, err, "%s", cause);
}

static void keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_peer *p = arg;

	p->transport->keepalive(p);
	if (p->state != XD_PEER_DEAD)
		p->d->xfer_events->peer_tick(p); /* (may fail @p: its own call, last) */
}

static void connect_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_peer *p = arg;

	xd_peer_fail(p, ETIMEDOUT, "no HELLO from %s within %llu ms", p->endpoint,
		     (unsigned long long)p->d->cfg.connect_timeout_ms);
}

static struct xd_peer *peer_new(struct xd_daemon *d, const uint8_t node[XP_ID_BYTES],
				const struct xd_transport_ops *t)
{
	struct timeval tv = { d->cfg.keepalive_ms / 1000, (d->cfg.keepalive_ms % 1000) * 1000 };
	struct xd_peer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->d = d;
	p->transport = t;
	memcpy(p->node, node, XP_ID_BYTES);
	xp_hex_encode(node, XP_ID_BYTES, p->node_hex);
	TAILQ_INIT(&p->sendq);
	TAILQ_INIT(&p->xfers);
	xd_idmap_init(&p->xfer_ids[0]);
	xd_idmap_init(&p->xfer_ids[1]);
	p->created_us = xd_now_us();
	p->keepalive = event_new(d->base, -1, EV_PERSIST, keepalive_cb, p);
	p->connect_timer = evtimer_new(d->base, connect_timeout_cb, p);
	if (!p->keepalive || !p->connect_timer || event_add(p->keepalive, &tv) < 0) {
		xd_event_free(p->keepalive);
		xd_event_free(p->connect_timer);
		free(p);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&d->peers, p, link);
	count_opened(p);
	return p;
}

static struct xd_peer *peer_find(struct xd_daemon *d, const uint8_t node[XP_ID_BYTES],
				 const struct xd_transport_ops *t)
{
	struct xd_peer *p;

	TAILQ_FOREACH(p, &d->peers, link)
		if (memcmp(p->node, node, XP_ID_BYTES) == 0 && p->transport == t)
			return p;
	return NULL;
}

static int peer_count(struct xd_daemon *d)
{
	struct xd_peer *p;
	int n = 0;

	TAILQ_FOREACH(p, &d->peers, link)
		n++;
	return n;
}

/* ---- what transports report (d->link_events) ---- */

static struct xd_peer *link_attach(struct xd_daemon *d, const struct xd_transport_ops *t,
				   const uint8_t node[XP_ID_BYTES], uint64_t epoch,
				   const char *from)
{
	struct xd_peer *p = peer_find(d, node, t);

	if (p && p->state == XD_PEER_UP && p->epoch != epoch) {
		xd_peer_fail(p, ECONNRESET, "peer daemon restarted (epoch %llu, now %llu)",
			     (unsigned long long)p->epoch, (unsigned long long)epoch);
		p = NULL;
	}
	if (!p && peer_count(d) >= d->cfg.max_peer_sets) {
		/* Any host that reaches the port can name a new node id per HELLO. */
		xd_log(XD_LOG_WARN, "peer connection from %s refused: %d peer sets (max_peer_sets)",
		       from, d->cfg.max_peer_sets);
		return NULL;
	}
	if (!p && !(p = peer_new(d, node, t)))
		return NULL;
	if (!p->endpoint[0])
		snprintf(p->endpoint, sizeof(p->endpoint), "accepted from %s", from);
	return p;
}

static void link_up(struct xd_peer *p, uint64_t epoch)
{
	if (p->state == XD_PEER_UP)
		return;
	p->state = XD_PEER_UP;
	p->epoch = epoch;
	event_del(p->connect_timer); /* (the other side may have reached us first) */
	p->d->xfer_events->peer_up(p);
}

static const struct xd_link_events peer_link_events = {
	.attach = link_attach,
	.up = link_up,
	.failed = link_failed,
};

/* ---- sending and scheduling ---- */

int xd_peer_send_ctrl(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
		      const json_t *json)
{
	return p->transport->send_ctrl(p, via, type, flags, xfer, json);
}

int xd_peer_send_bin(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
		     const uint8_t *buf, uint32_t len)
{
	if (!xd_peer_binary_pairing(p))
		return -EOPNOTSUPP;
	return p->transport->send_bin(p, via, type, flags | XP_PEER_BINARY, xfer, buf, len);
}

bool xd_peer_binary_pairing(const struct xd_peer *p)
{
	return p->binary_pairing && p->transport->send_bin;
}

int xd_peer_send_wframe(struct xd_peer *p, uint32_t *lane, uint64_t key, const uint8_t *hdr,
			uint32_t hdrlen, struct xd_xfer *x, uint64_t off, uint32_t len)
{
	if (!p->transport->send_wframe)
		return -EOPNOTSUPP;
	return p->transport->send_wframe(p, lane, key, hdr, hdrlen, x, off, len);
}

void xd_peer_stream_add(struct xd_peer *p, struct xd_xfer *x)
{
	xd_xfer_sendq_insert(&p->sendq, x);
	p->transport->kick(p);
}

void xd_peer_stream_remove(struct xd_peer *p, struct xd_xfer *x)
{
	xd_xfer_sendq_remove(&p->sendq, x);
}

/* ---- choosing a transport, connecting ---- */

static const struct xp_endpoint *find_endpoint(const struct xp_meta *m, const char *transport)
{
	for (int i = 0; i < m->nendpoints; i++)
		if (strcmp(m->endpoints[i].transport, transport) == 0)
			return &m->endpoints[i];
	return NULL;
}

/*
 * Why transport @t cannot reach the owner @m names (NULL: it can). @buf holds a message made
 * here.
 */
static const char *unreachable(struct xd_daemon *d, const struct xd_transport_ops *t,
			       const struct xp_meta *m, char *buf, size_t len)
{
	const char *why = NULL;

	if (!t->usable(d, &why))
		return why;
	if (!find_endpoint(m, t->name)) {
		snprintf(buf, len, "the owner advertises no %s endpoint", t->name);
		return buf;
	}
	return NULL;
}

/*
 * The transport for a claim: the one config names, or with auto the first that both daemons
 * have, preferred ones (rdma) before the rest. A fallback from a preferred transport is a
 * refusal under require_rdma. Returns the endpoint and sets *tp, or fails the call.
 */
static const struct xp_endpoint *choose_endpoint(struct xd_call *call, const struct xp_meta *m,
						 const struct xd_transport_ops **tp)
{
	struct xd_daemon *d = call->conn->d;
	bool forced = strcmp(d->cfg.transport, XD_TRANSPORT_AUTO) != 0;
	const char *missed = NULL; /* the first transport wanted that could not be used */
	char why[XD_CAUSE_MAX] = "", buf[XD_CAUSE_MAX];

	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; d->transports[i]; i++) {
			const struct xd_transport_ops *t = d->transports[i];
			if (!t->network || t->preferred != (pass == 0) ||
			    (forced && strcmp(d->cfg.transport, t->name) != 0))
				continue;
			const char *no = unreachable(d, t, m, buf, sizeof(buf));
			if (!no) {
				*tp = t;
				return find_endpoint(m, t->name);
			}
			if (!missed) {
				missed = t->name;
				snprintf(why, sizeof(why), "%s", no);
			}
			if (forced || (t->preferred && d->cfg.require_rdma))
				goto refuse;
		}
	}
refuse:
	if (missed && (forced || d->cfg.require_rdma))
		xd_fail(call, XP_E_FAILED, EHOSTUNREACH, "transport %s is required but %s", missed,
			why);
	else
		xd_fail(call, XP_E_FAILED, EHOSTUNREACH,
			"metadata names another node and no endpoint this daemon can reach it by "
			"(the owner daemon has no --listen address)");
	return NULL;
}

/*
 * peer_allow (netaddr.c) for the endpoint metadata names, before any connect: forged metadata
 * could otherwise make this daemon dial any address. Fails the call if it may not be dialled.
 */
static bool endpoint_allowed(struct xd_call *call, const struct xp_endpoint *ep)
{
	struct xd_config *cfg = &call->conn->d->cfg;
	int rc = xd_netaddr_allowed(cfg->peer_allow, cfg->npeer_allow, ep->addr);

	if (rc == -EACCES)
		xd_fail(call, XP_E_FAILED, EACCES, "the owner's address %s is outside peer_allow",
			ep->addr);
	else if (rc < 0)
		xd_fail(call, XP_E_FAILED, EACCES,
			"the owner's address %s is not a numeric IP address, which peer_allow "
			"requires (names are not resolved)",
			ep->addr);
	return rc == 0;
}

struct xd_peer *xd_peer_for_meta(struct xd_call *call, const struct xp_meta *m)
{
	struct xd_daemon *d = call->conn->d;
	const struct xd_transport_ops *t;
	const struct xp_endpoint *ep = choose_endpoint(call, m, &t);
	char cause[XD_CAUSE_MAX];

	if (!ep || !endpoint_allowed(call, ep))
		return NULL;
	struct xd_peer *p = peer_find(d, m->node, t);
	if (p)
		return p;
	p = peer_new(d, m->node, t);
	if (!p) {
		xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		return NULL;
	}
	p->endpoints[0] = *ep;
	p->nendpoints = 1;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s:%u", ep->addr, ep->port);
	struct timeval tv = { d->cfg.connect_timeout_ms / 1000,
			      (d->cfg.connect_timeout_ms % 1000) * 1000 };
	int err = t->connect(p, ep);
	if (err) {
		unreachable_cause(d, p->endpoint, cause, sizeof(cause));
		xd_fail(call, XP_E_FAILED, EHOSTUNREACH, "%s", cause);
		xd_peer_fail(p, EHOSTUNREACH, "connect failed: %s", strerror(-err));
		return NULL;
	}
	evtimer_add(p->connect_timer, &tv);
	return p;
}

/* ---- start and stop ---- */

int xd_peers_start(struct xd_daemon *d)
{
	d->link_events = &peer_link_events;
	/* Metadata endpoints: this daemon itself first, then each network transport's. */
	snprintf(d->endpoints[0].transport, sizeof(d->endpoints[0].transport), "%s",
		 xd_transport_local(d)->name);
	d->nendpoints = 1;
	for (int i = 0; d->transports[i]; i++) {
		if (!d->transports[i]->network)
			continue;
		int rc = d->transports[i]->start(d);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void xd_peers_stop(struct xd_daemon *d)
{
	struct xd_peer *p;

	while ((p = TAILQ_FIRST(&d->peers)))
		xd_peer_fail(p, ESHUTDOWN, "the daemon is shutting down");
	xd_defer_flush(d);
}

/* The first key @p's connections proved that is no longer this daemon's, or NULL. */
static const uint32_t *key_removed(const struct xd_peer *p)
{
	for (int i = 0; i < p->nkey_ids; i++)
		if (!xd_keyring_find(&p->d->keys, p->key_ids[i]))
			return &p->key_ids[i];
	return NULL;
}

int xd_peers_key_check(struct xd_daemon *d)
{
	struct xd_peer *p, *next;
	const uint32_t *gone;
	int failed = 0;

	for (p = TAILQ_FIRST(&d->peers); p; p = next) {
		next = TAILQ_NEXT(p, link);
		if (!(gone = key_removed(p)))
			continue;
		xd_peer_fail(p, EACCES,
			     "the peer proved cluster key %08x, which is no longer in the key file",
			     (unsigned)*gone);
		failed++;
	}
	return failed;
}

void xd_peers_fini(struct xd_daemon *d)
{
	int n = 0;

	while (d->transports[n])
		n++;
	while (n-- > 0) /* the reverse of the start order */
		if (d->transports[n]->network)
			d->transports[n]->fini(d);
	xd_defer_flush(d);
}

void xd_peers_flush_ctrl(struct xd_daemon *d)
{
	struct xd_peer *p;

	TAILQ_FOREACH(p, &d->peers, link)
		if (p->transport->flush_ctrl)
			p->transport->flush_ctrl(p);
}

bool xd_peers_pending_output(struct xd_daemon *d)
{
	struct xd_peer *p;

	TAILQ_FOREACH(p, &d->peers, link)
		if (p->transport->pending_output(p))
			return true;
	return false;
}

/* ---- listing ---- */

/* Adds @p's read counts to its entry @o (tcp.c's read-ahead, for operators). 0 or -1. */
static int peer_reads_json(const struct xd_peer *p, json_t *o)
{
	return json_object_set_new(o, "socket_reads", json_integer((json_int_t)p->socket_reads)) ||
	       json_object_set_new(o, "read_ahead_fills",
				   json_integer((json_int_t)p->read_ahead_fills)) ||
	       json_object_set_new(o, "file_receivers", json_integer(p->file_receivers));
}

/* Adds the cluster keys @p's connections proved to its entry @o ([] unkeyed). 0 or -1. */
static int peer_keys_json(const struct xd_peer *p, json_t *o)
{
	json_t *ids = xd_key_ids_json(p->key_ids, p->nkey_ids);

	return ids ? json_object_set_new(o, "keys", ids) : -1;
}

static json_t *peer_to_json(const struct xd_peer *p, uint64_t now)
{
	static const char *const states[] = { "connecting", "connected", "failed" };
	uint64_t last_rx = p->transport->last_rx_us(p);
	bool authenticated = p->d->keys.n && p->transport->authenticates;

	if (last_rx < p->created_us)
		last_rx = p->created_us;
	return json_pack("{s:s, s:I, s:s, s:s, s:i, s:s, s:b, s:I, s:I, s:I, s:I, s:I}", "node",
			 p->node_hex, "epoch", (json_int_t)p->epoch, "transport",
			 p->transport->name, "endpoint", p->endpoint, "connections",
			 p->transport->nconns(p), "state", states[p->state], "authenticated",
			 authenticated, "bytes_sent", (json_int_t)p->bytes_sent, "bytes_received",
			 (json_int_t)p->bytes_received, "transfers", (json_int_t)p->transfers,
			 "age_ms", (json_int_t)((now - p->created_us) / 1000), "idle_ms",
			 (json_int_t)((now - last_rx) / 1000));
}

/*
 * @p's entry: the set, its read counts and, with @conns and where the transport has them, its
 * connections (conns_json: what the kernel says of each socket, read now).
 */
static json_t *peer_entry(const struct xd_peer *p, uint64_t now, bool conns)
{
	json_t *o = peer_to_json(p, now);

	if (o && (peer_reads_json(p, o) || peer_keys_json(p, o) ||
		  (conns && p->transport->conns_json &&
		   json_object_set_new(o, "conns", p->transport->conns_json(p))))) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

int xd_peers_page(struct xd_daemon *d, struct xd_page *pg, bool conns)
{
	uint64_t now = xd_now_us(), i = 0;
	struct xd_peer *p;
	int rc = 1;

	TAILQ_FOREACH(p, &d->peers, link) {
		if ((json_int_t)i > pg->after &&
		    (rc = xd_page_add(pg, i, peer_entry(p, now, conns))) <= 0)
			break;
		i++;
	}
	return rc < 0 ? rc : 0;
}

bool xd_peer_window_frames(const struct xd_peer *p)
{
	return p->transport->send_wframe != NULL;
}
