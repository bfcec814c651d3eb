// SPDX-License-Identifier: MIT
/*
 * The Prometheus endpoint: GET /metrics on cfg.metrics_listen, in the text exposition format
 * (version 0.0.4). The HTTP side runs on a thread of its own (its own event_base and evhttp),
 * so that a scrape does not wait for the event loop's turn when the loop is busy moving bytes.
 * That thread never reads daemon state: the event loop renders the exposition (the counters
 * on d->counters and d->stats, the lists of connections, regions, operations and peer sets)
 * into a snapshot and publishes it under m->lock. A scrape asks the loop for a snapshot
 * rendered after it arrived and waits for it at most XD_METRICS_FRESH_WAIT_MS (not at all
 * while the loop's last answer took longer); if the loop is slower than that, the scrape gets
 * the last snapshot (at most about XD_METRICS_REFRESH_MS old: the loop also renders one that
 * often, and the ask is answered for the next scrape), and says so (X-Xferd-Snapshot: stale,
 * and xferd_metrics_stale_replies_total). Label values come from small fixed sets (kinds, states,
 * transports, limit scopes, RDMA devices) and from peer node ids, which max_peer_sets
 * bounds; no label names an operation, region or client.
 *
 * Anyone who reaches the port may connect, so the listener is bounded as the peer port is:
 * at most XD_METRICS_MAX_CONNS connections (the listener pauses while full), requests of at
 * most XD_METRICS_MAX_HEADERS bytes and no body, XD_METRICS_IO_TIMEOUT_S per read or write,
 * and XD_METRICS_DEADLINE_MS from accept to close whatever the peer does (a slow sender of
 * one header byte a second does not hold a slot). Every reply closes its connection.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include "transport.h"

#define XD_METRICS_MAX_CONNS 16
#define XD_METRICS_MAX_HEADERS 8192
#define XD_METRICS_IO_TIMEOUT_S 2
#define XD_METRICS_DEADLINE_MS 5000
#define XD_METRICS_TICK_MS 100	   /* how often finished connections are reaped */
#define XD_METRICS_FRESH_WAIT_MS 2 /* how long a scrape waits for the loop's fresh snapshot */
#define XD_METRICS_REFRESH_MS 1000 /* the loop renders a snapshot at least this often */

/* One accepted HTTP connection: its bufferevent, on which we hold a reference. */
struct metrics_conn {
	struct bufferevent *bev;
	uint64_t accepted_us;
	bool cut; /**< shut down at its deadline, evhttp not yet done with it */
};

/*
 * Three owners, one per group of fields: the event loop's thread, the HTTP thread, and m->lock
 * (either thread, holding it). The fds and pointers set up before the thread starts are
 * read-only until it has been joined.
 */
struct xd_metrics {
	struct xd_daemon *d;
	int ask_fd;  /**< eventfd: the HTTP thread asks the loop for a snapshot */
	int stop_fd; /**< eventfd: the loop tells the HTTP thread to stop */
	pthread_t thread;
	bool thread_started;

	/* ---- the event loop's ---- */
	struct event *ask_ev, *refresh_ev;
	uint64_t renders, render_us; /**< snapshots rendered and the time that took */

	/* ---- under lock ---- */
	pthread_mutex_t lock;
	pthread_cond_t published; /**< a snapshot was published (CLOCK_MONOTONIC) */
	char *text;		  /**< the last snapshot, len bytes */
	size_t len;
	uint64_t text_at_us;	   /**< when its rendering started */
	uint64_t asked, answered;  /**< asks made; the last ask the snapshot answers */
	uint64_t waiting_since_us; /**< when the oldest ask not answered was made (HTTP thread) */
	uint64_t loop_lag_us;	   /**< how long the loop took to answer the last ask it did */

	/* ---- the HTTP thread's ---- */
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	struct event *tick, *stop_ev;
	struct metrics_conn conns[XD_METRICS_MAX_CONNS];
	int nconns;
	bool paused; /**< the listener is disabled: XD_METRICS_MAX_CONNS are open */
	uint64_t stale, accepted, cut_at_deadline, paused_times;
	struct xd_hist served; /**< accept to the last byte of the reply handed to the kernel */
};

/* ---- connections (HTTP thread): counted, bounded, reaped ---- */

/*
 * evhttp (libevent 2.1) has no connection cap and no absolute deadline, so each connection's
 * bufferevent is made here (evhttp_set_bevcb) with one reference of ours: when evhttp is done
 * with it, it clears the callbacks and drops its reference, and the tick sees that and drops
 * ours, which closes the socket.
 */
static struct bufferevent *metrics_bev_cb(struct event_base *base, void *arg)
{
	struct xd_metrics *m = arg;
	struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

	if (!bev || m->nconns == XD_METRICS_MAX_CONNS)
		return bev; /* (not reached while paused; evhttp's timeouts still end it) */
	bufferevent_incref(bev);
	m->conns[m->nconns++] = (struct metrics_conn){ .bev = bev, .accepted_us = xd_now_us() };
	m->accepted++;
	if (m->nconns == XD_METRICS_MAX_CONNS && !m->paused) {
		/* The rest wait in the kernel's backlog (a few) or are refused by it. */
		evconnlistener_disable(evhttp_bound_socket_get_listener(m->bound));
		m->paused = true;
		m->paused_times++;
	}
	return bev;
}

static bool conn_released(struct bufferevent *bev)
{
	bufferevent_data_cb readcb = NULL;

	bufferevent_getcb(bev, &readcb, NULL, NULL, NULL);
	return readcb == NULL;
}

static void metrics_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_metrics *m = arg;
	uint64_t now = xd_now_us();

	for (int i = 0; i < m->nconns; i++) {
		struct metrics_conn *c = &m->conns[i];
		if (conn_released(c->bev)) {
			bufferevent_decref(c->bev);
			m->conns[i--] = m->conns[--m->nconns];
		} else if (!c->cut && now - c->accepted_us > XD_METRICS_DEADLINE_MS * 1000ull) {
			/* evhttp sees the end of the stream and frees the connection itself. */
			shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
			c->cut = true;
			m->cut_at_deadline++;
		}
	}
	if (m->paused && m->nconns < XD_METRICS_MAX_CONNS) {
		evconnlistener_enable(evhttp_bound_socket_get_listener(m->bound));
		m->paused = false;
	}
}

/* ---- the exposition format ---- */

static void family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Writes @v as a label value: backslash, quote and newline escaped. */
static void label_value(struct evbuffer *out, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			evbuffer_add_printf(out, "\\%c", *v);
		else if (*v == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, v, 1);
	}
}

static const char *transport_label(const struct xd_daemon *d, int t)
{
	return t == 0 ? "none" : d->transports[t - 1]->name;
}

static int ntransports(const struct xd_daemon *d)
{
	int n = 1;

	while (n < XD_METRIC_TRANSPORTS && d->transports[n - 1])
		n++;
	return n;
}

/* "in_progress" for "IN_PROGRESS": label values in the case of the rest. */
static void lower(const char *in, char *out, size_t len)
{
	size_t i = 0;

	for (; in[i] && i + 1 < len; i++)
		out[i] = (char)(in[i] >= 'A' && in[i] <= 'Z' ? in[i] - 'A' + 'a' : in[i]);
	out[i] = '\0';
}

/* The kinds an operation can have (a window's metadata kind is none). */
static bool is_op_kind(int k)
{
	return k != XP_KIND_WINDOW;
}

static const char *const end_names[XD_NEND] = { "complete", "cancelled", "errored" };

static void write_ops(struct xd_daemon *d, struct evbuffer *out)
{
	uint64_t open[XP_KIND_COUNT][XP_ST_COUNT] = { { 0 } };
	struct xd_op *op;

	family(out, "xferd_operations_total", "counter",
	       "Operations that ended, by kind, transport (none: never started) and end state.");
	for (int k = 0; k < XP_KIND_COUNT; k++)
		for (int t = 0; t < ntransports(d) && is_op_kind(k); t++)
			for (int e = 0; e < XD_NEND; e++)
				evbuffer_add_printf(
					out,
					"xferd_operations_total{kind=\"%s\",transport=\"%s\","
					"state=\"%s\"} %" PRIu64 "\n",
					xp_kind_name(k), transport_label(d, t), end_names[e],
					d->counters.ops_ended[k][t][e]);
	TAILQ_FOREACH(op, &d->ops, link)
		open[op->kind][op->state]++;
	family(out, "xferd_operations_listed", "gauge",
	       "Operations listed now (not yet released), by kind and state (lower case).");
	for (int k = 0; k < XP_KIND_COUNT; k++) {
		for (int s = 0; s < XP_ST_COUNT && is_op_kind(k); s++) {
			char state[32];
			lower(xp_state_name(s), state, sizeof(state));
			evbuffer_add_printf(
				out,
				"xferd_operations_listed{kind=\"%s\",state=\"%s\"} %" PRIu64 "\n",
				xp_kind_name(k), state, open[k][s]);
		}
	}
}

/* A histogram's samples; @label NULL: one without labels. */
static void write_hist(struct evbuffer *out, const char *name, const char *label, const char *value,
		       const struct xd_hist *h)
{
	char lbl[96] = "", sep[2] = "";
	uint64_t cum = 0;

	if (label) {
		snprintf(lbl, sizeof(lbl), "%s=\"%s\",", label, value);
		sep[0] = '}';
	}
	for (int i = 0; i < XD_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		evbuffer_add_printf(out, "%s_bucket{%sle=\"%g\"} %" PRIu64 "\n", name, lbl,
				    (double)xd_hist_bounds_us[i] / 1e6, cum);
	}
	evbuffer_add_printf(out, "%s_bucket{%sle=\"+Inf\"} %" PRIu64 "\n", name, lbl, h->count);
	lbl[label ? strlen(lbl) - 1 : 0] = '\0'; /* no trailing comma before the brace */
	evbuffer_add_printf(out, "%s_sum%s%s%s %.6f\n", name, label ? "{" : "", lbl, sep,
			    (double)h->sum_us / 1e6);
	evbuffer_add_printf(out, "%s_count%s%s%s %" PRIu64 "\n", name, label ? "{" : "", lbl, sep,
			    h->count);
}

static void write_latencies(struct xd_daemon *d, struct evbuffer *out)
{
	family(out, "xferd_operation_duration_seconds", "histogram",
	       "Operations from creation to end (a passive one waits for its peer), by kind.");
	for (int k = 0; k < XP_KIND_COUNT; k++)
		if (is_op_kind(k))
			write_hist(out, "xferd_operation_duration_seconds", "kind", xp_kind_name(k),
				   &d->counters.op_duration[k]);
	family(out, "xferd_claim_latency_seconds", "histogram",
	       "Cross-node claims (op.read, op.write) until the owner's answer, by transport.");
	for (int t = 1; t < ntransports(d); t++)
		if (d->transports[t - 1]->network)
			write_hist(out, "xferd_claim_latency_seconds", "transport",
				   transport_label(d, t), &d->counters.claim_latency[t]);
}

static void write_bytes(struct xd_daemon *d, struct evbuffer *out)
{
	struct xd_peer *p;

	family(out, "xferd_transferred_bytes_total", "counter",
	       "Bytes of completed operations (each side of a cross-node pair counts its own; a "
	       "local pair once), by transport.");
	for (int t = 1; t < ntransports(d); t++)
		evbuffer_add_printf(out,
				    "xferd_transferred_bytes_total{transport=\"%s\"} %" PRIu64 "\n",
				    transport_label(d, t), d->counters.bytes_moved[t]);
	family(out, "xferd_peer_sent_bytes_total", "counter",
	       "Bytes sent on each live peer set (at most max_peer_sets), by peer node.");
	TAILQ_FOREACH(p, &d->peers, link)
		evbuffer_add_printf(out,
				    "xferd_peer_sent_bytes_total{peer=\"%s\",transport=\"%s\"} "
				    "%" PRIu64 "\n",
				    p->node_hex, p->transport->name, p->bytes_sent);
	family(out, "xferd_peer_received_bytes_total", "counter",
	       "Bytes received on each live peer set (at most max_peer_sets), by peer node.");
	TAILQ_FOREACH(p, &d->peers, link)
		evbuffer_add_printf(out,
				    "xferd_peer_received_bytes_total{peer=\"%s\",transport=\"%s\"} "
				    "%" PRIu64 "\n",
				    p->node_hex, p->transport->name, p->bytes_received);
}

static void write_peer_counter(struct xd_daemon *d, struct evbuffer *out, const char *name,
			       const char *help, const uint64_t *by_transport)
{
	family(out, name, "counter", help);
	for (int t = 1; t < ntransports(d); t++)
		if (d->transports[t - 1]->network)
			evbuffer_add_printf(out, "%s{transport=\"%s\"} %" PRIu64 "\n", name,
					    transport_label(d, t), by_transport[t]);
}

static void write_peers(struct xd_daemon *d, struct evbuffer *out)
{
	uint64_t n[XD_METRIC_TRANSPORTS][2] = { { 0 } };
	struct xd_peer *p;

	TAILQ_FOREACH(p, &d->peers, link)
		n[xd_metric_transport(d, p->transport->name)][p->state == XD_PEER_UP]++;
	family(out, "xferd_peer_sets", "gauge", "Peer sets now, by transport and state.");
	for (int t = 1; t < ntransports(d); t++) {
		if (!d->transports[t - 1]->network)
			continue;
		for (int up = 0; up < 2; up++)
			evbuffer_add_printf(
				out, "xferd_peer_sets{transport=\"%s\",state=\"%s\"} %" PRIu64 "\n",
				transport_label(d, t), up ? "up" : "connecting", n[t][up]);
	}
	write_peer_counter(d, out, "xferd_peer_sets_opened_total",
			   "Peer sets made (dialled or accepted).", d->counters.peer_sets_opened);
	write_peer_counter(d, out, "xferd_peer_sets_failed_total",
			   "Peer sets that failed (down): every transfer on them ended.",
			   d->counters.peer_sets_failed);
	write_peer_counter(d, out, "xferd_peer_reconnects_total",
			   "Peer sets made to a node whose previous set had failed.",
			   d->counters.peer_reconnects);
}

static void gauge(struct evbuffer *out, const char *name, const char *help, uint64_t v)
{
	family(out, name, "gauge", help);
	evbuffer_add_printf(out, "%s %" PRIu64 "\n", name, v);
}

static void write_memory(struct xd_daemon *d, struct evbuffer *out)
{
	uint64_t regions = 0, registered = 0, pinned = 0, clients = 0;
	struct xd_region *r;
	struct xd_conn *c;

	TAILQ_FOREACH(r, &d->regions, link) {
		regions++;
		registered += r->length;
		pinned += r->nmrs ? r->map_len : 0;
	}
	TAILQ_FOREACH(c, &d->conns, link)
		clients++;
	gauge(out, "xferd_clients", "Control connections open.", clients);
	gauge(out, "xferd_regions", "Regions registered.", regions);
	gauge(out, "xferd_registered_bytes", "Bytes of the registered ranges.", registered);
	gauge(out, "xferd_mapped_bytes",
	      "Bytes the daemon mapped and populated for regions (what the bytes limits charge).",
	      d->usage[XD_RES_BYTES]);
	gauge(out, "xferd_pinned_bytes",
	      "Bytes of mappings registered with RDMA devices (pinned by the kernel).", pinned);
}

static void limit_line(struct evbuffer *out, const char *name, const char *scope, int res,
		       uint64_t v)
{
	evbuffer_add_printf(out, "%s{scope=\"%s\",resource=\"%s\"} %" PRIu64 "\n", name, scope,
			    xd_res_name(res), v);
}

/*
 * Usage against every limit (limits.c): the global use, and for the per-uid and per-connection
 * scopes the largest use of any uid or connection, which is the one that meets its limit first.
 */
static void write_limits(struct xd_daemon *d, struct evbuffer *out)
{
	const struct xd_limits *lims[3] = { &d->cfg.global_limits, &d->cfg.uid_limits,
					    &d->cfg.limits };
	static const char *const scopes[3] = { "global", "per_uid", "per_connection" };
	uint64_t used[3][XD_NRES] = { { 0 } };
	struct xd_uid_usage *u;
	struct xd_conn *c;

	memcpy(used[0], d->usage, sizeof(used[0]));
	TAILQ_FOREACH(u, &d->uid_usage, link)
		for (int i = 0; i < XD_NRES; i++)
			used[1][i] = u->use[i] > used[1][i] ? u->use[i] : used[1][i];
	TAILQ_FOREACH(c, &d->conns, link)
		for (int i = 0; i < XD_NRES; i++)
			used[2][i] = c->use[i] > used[2][i] ? c->use[i] : used[2][i];
	family(out, "xferd_limit", "gauge",
	       "Each configured limit, by scope and resource (bytes in bytes, others counts).");
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < XD_NRES; i++)
			if (lims[s]->max[i] != XD_NO_LIMIT)
				limit_line(out, "xferd_limit", scopes[s], i, lims[s]->max[i]);
	family(out, "xferd_limit_used", "gauge",
	       "Use against each limit: global, and the largest of any uid or connection.");
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < XD_NRES; i++)
			if (lims[s]->max[i] != XD_NO_LIMIT)
				limit_line(out, "xferd_limit_used", scopes[s], i, used[s][i]);
}

static void counter(struct evbuffer *out, const char *name, const char *help, uint64_t v)
{
	family(out, name, "counter", help);
	evbuffer_add_printf(out, "%s %" PRIu64 "\n", name, v);
}

/* The event loop's lateness (looplag.c). */
static void write_loop(struct xd_daemon *d, struct evbuffer *out)
{
	family(out, "xferd_event_loop_lag_seconds", "histogram",
	       "How late a tick due every 100 ms ran on the event loop (anything that blocks the "
	       "loop, or a daemon starved of CPU, shows here).");
	write_hist(out, "xferd_event_loop_lag_seconds", NULL, NULL, &d->loop.lag);
	family(out, "xferd_event_loop_lag_max_seconds", "gauge",
	       "The largest lateness of the event loop's tick since the start.");
	evbuffer_add_printf(out, "xferd_event_loop_lag_max_seconds %.6f\n",
			    (double)d->loop.max_us / 1e6);
	counter(out, "xferd_event_loop_late_ticks_total",
		"Ticks of the event loop 250 ms late or more (each logged with where the time went, "
		"at most one line per 10 s).",
		d->loop.late);
	counter(out, "xferd_busy_polls_total",
		"Polls of the event loop after light turns (config busy_poll_us).",
		d->busypoll.polls);
	family(out, "xferd_busy_poll_seconds_total", "counter",
	       "Time the event loop spent polling instead of sleeping: the CPU busy_poll_us costs.");
	evbuffer_add_printf(out, "xferd_busy_poll_seconds_total %.6f\n",
			    (double)d->busypoll.polled_us / 1e6);
}

static void write_windows(struct xd_daemon *d, struct evbuffer *out)
{
	uint64_t windows, handles;

	xd_windows_count(d, &windows, &handles);
	gauge(out, "xferd_windows", "Windows this daemon's clients own (window.create).", windows);
	gauge(out, "xferd_window_handles", "Windows this daemon's clients opened (window.open).",
	      handles);
	counter(out, "xferd_window_operations_total",
		"op.get and op.put that completed on windows this daemon owns.",
		d->stats.window_ops);
	counter(out, "xferd_window_notifications_total",
		"Notify tags delivered to the owners of windows on this daemon.",
		d->stats.window_notified);
}

/* One counter (or gauge) per RDMA device in use; nothing when there is none. */
static void write_rdma_one(struct xd_daemon *d, struct evbuffer *out, const char *name,
			   const char *type, const char *help, size_t offset)
{
	struct xd_rdma_dev_stats st;

	if (!xd_rdma_device_stats(d, 0, &st))
		return;
	family(out, name, type, help);
	for (int i = 0; xd_rdma_device_stats(d, i, &st); i++) {
		uint64_t v;
		memcpy(&v, (const char *)&st + offset, sizeof(v));
		evbuffer_add_printf(out, "%s{device=\"", name);
		label_value(out, st.name);
		evbuffer_add_printf(out, "\"} %" PRIu64 "\n", v);
	}
}

#define RDMA_FIELD(f) offsetof(struct xd_rdma_dev_stats, f)

static void write_rdma(struct xd_daemon *d, struct evbuffer *out)
{
	static const struct {
		const char *name, *type, *help;
		size_t offset;
	} fields[] = {
		{ "xferd_rdma_reads_total", "counter", "RDMA READ work requests completed.",
		  RDMA_FIELD(reads) },
		{ "xferd_rdma_read_bytes_total", "counter", "Bytes moved by RDMA READ.",
		  RDMA_FIELD(read_bytes) },
		{ "xferd_rdma_writes_total", "counter", "RDMA WRITE work requests completed.",
		  RDMA_FIELD(writes) },
		{ "xferd_rdma_write_bytes_total", "counter", "Bytes moved by RDMA WRITE.",
		  RDMA_FIELD(write_bytes) },
		{ "xferd_rdma_sends_total", "counter", "Control SENDs completed.",
		  RDMA_FIELD(sends) },
		{ "xferd_rdma_recvs_total", "counter", "Control RECVs completed.",
		  RDMA_FIELD(recvs) },
		{ "xferd_rdma_completion_errors_total", "counter", "Work completions in error.",
		  RDMA_FIELD(errors) },
		{ "xferd_rdma_memory_windows_bound_total", "counter",
		  "Memory windows bound for claims.", RDMA_FIELD(windows_bound) },
		{ "xferd_rdma_memory_windows", "gauge", "Memory windows bound and not yet freed.",
		  RDMA_FIELD(windows_open) },
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		write_rdma_one(d, out, fields[i].name, fields[i].type, fields[i].help,
			       fields[i].offset);
}

static void write_daemon_self(struct xd_daemon *d, struct xd_metrics *m, struct evbuffer *out)
{
	family(out, "xferd_build_info", "gauge", "The daemon's version, always 1.");
	evbuffer_add_printf(out, "xferd_build_info{version=\"%s\"} 1\n", XFERD_VERSION);
	family(out, "xferd_start_time_seconds", "gauge", "When the daemon started (Unix time).");
	evbuffer_add_printf(out, "xferd_start_time_seconds %.6f\n", (double)d->epoch / 1e6);
	family(out, "xferd_metrics_render_seconds", "summary",
	       "Time the event loop spent rendering /metrics snapshots (before this one).");
	evbuffer_add_printf(out, "xferd_metrics_render_seconds_sum %.6f\n",
			    (double)m->render_us / 1e6);
	evbuffer_add_printf(out, "xferd_metrics_render_seconds_count %" PRIu64 "\n", m->renders);
}

/* The daemon's part of the exposition into @out (event loop). */
static void metrics_render(struct xd_metrics *m, struct evbuffer *out)
{
	struct xd_daemon *d = m->d;

	write_daemon_self(d, m, out);
	write_ops(d, out);
	write_latencies(d, out);
	write_bytes(d, out);
	write_peers(d, out);
	write_memory(d, out);
	write_limits(d, out);
	write_windows(d, out);
	write_loop(d, out);
	counter(out, "xferd_log_lines_suppressed_total",
		"Log lines not written: a function that logged 100 lines in 10 s is silent for the "
		"rest of that window (its next line says how many it dropped).",
		xd_log_suppressed());
	write_rdma(d, out);
}

/* ---- snapshots (event loop): rendered here, published for the HTTP thread ---- */

/* Renders @out into a malloc'ed string. Returns it (NULL on ENOMEM), its length in *@len. */
static char *render_text(struct xd_metrics *m, size_t *len)
{
	struct evbuffer *out = evbuffer_new();
	char *text = NULL;

	if (out) {
		metrics_render(m, out);
		*len = evbuffer_get_length(out);
		text = malloc(*len + 1);
		if (text)
			evbuffer_remove(out, text, *len);
		evbuffer_free(out);
	}
	return text;
}

/*
 * Renders a snapshot and publishes it. It answers every ask made before it started (@asked is
 * read first): what those scrapes get reflects everything the loop did before they came. On
 * ENOMEM the last snapshot stays (the scrapes waiting get it as stale).
 */
static void metrics_refresh(struct xd_metrics *m)
{
	uint64_t t0 = xd_now_us(), asked;
	size_t len = 0;

	pthread_mutex_lock(&m->lock);
	asked = m->asked;
	pthread_mutex_unlock(&m->lock);
	char *text = render_text(m, &len);
	m->renders++;
	m->render_us += xd_now_us() - t0;
	if (!text)
		return;
	pthread_mutex_lock(&m->lock);
	char *old = m->text;
	if (m->answered < asked)
		m->loop_lag_us = xd_now_us() - m->waiting_since_us;
	m->text = text;
	m->len = len;
	m->text_at_us = t0;
	m->answered = asked;
	pthread_cond_broadcast(&m->published);
	pthread_mutex_unlock(&m->lock);
	free(old);
}

static void metrics_ask_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_metrics *m = arg;
	uint64_t n;

	/* Asks made while we were busy coalesce in the eventfd's count: one render for all. */
	if (read(fd, &n, sizeof(n)) == sizeof(n))
		metrics_refresh(m);
}

/* Keeps a stale reply at most about XD_METRICS_REFRESH_MS old, however rarely scraped. */
static void metrics_refresh_cb(evutil_socket_t fd, short what, void *arg)
{
	metrics_refresh(arg);
}

/* ---- serving (HTTP thread) ---- */

static struct timespec monotonic_at(uint64_t us)
{
	return (struct timespec){ .tv_sec = (time_t)(us / 1000000),
				  .tv_nsec = (long)(us % 1000000) * 1000 };
}

static void ask_loop(struct xd_metrics *m)
{
	uint64_t one = 1;

	if (write(m->ask_fd, &one, sizeof(one)) < 0) {
		/* Cannot fail for an eventfd short of 2^64-1 unread asks. */
	}
}

/*
 * Asks the loop for a snapshot rendered after now and waits for it, at most
 * XD_METRICS_FRESH_WAIT_MS from the oldest ask the loop has not answered yet (while the loop
 * is slow, one scrape waits and the ones after it do not wait again), and not at all when the
 * loop took longer than that to answer the last ask it answered: a busy loop would make every
 * scrape wait the whole time for nothing. Appends the newest snapshot to @out. Returns whether
 * it is fresh (rendered after this ask); *@age_us is its age.
 */
static bool copy_snapshot(struct xd_metrics *m, struct evbuffer *out, uint64_t *age_us)
{
	uint64_t mine, until_us;

	pthread_mutex_lock(&m->lock);
	if (m->answered == m->asked)
		m->waiting_since_us = xd_now_us();
	mine = ++m->asked;
	until_us = m->waiting_since_us + XD_METRICS_FRESH_WAIT_MS * 1000ull;
	if (m->loop_lag_us > XD_METRICS_FRESH_WAIT_MS * 1000ull)
		until_us = 0; /* busy: the last snapshot now, and a fresh one for the next scrape */
	pthread_mutex_unlock(&m->lock);
	ask_loop(m);
	struct timespec until = monotonic_at(until_us);
	pthread_mutex_lock(&m->lock);
	while (m->answered < mine &&
	       pthread_cond_timedwait(&m->published, &m->lock, &until) != ETIMEDOUT)
		;
	bool fresh = m->answered >= mine;
	evbuffer_add(out, m->text, m->len);
	*age_us = xd_now_us() - m->text_at_us;
	pthread_mutex_unlock(&m->lock);
	return fresh;
}

/* The endpoint's own part of the exposition (HTTP thread: these are its fields). */
static void write_endpoint(struct xd_metrics *m, struct evbuffer *out, uint64_t age_us)
{
	family(out, "xferd_metrics_snapshot_age_seconds", "gauge",
	       "Age of the snapshot of the daemon's metrics in this reply (rendered by the event "
	       "loop; stale when the loop was busy).");
	evbuffer_add_printf(out, "xferd_metrics_snapshot_age_seconds %.6f\n", (double)age_us / 1e6);
	counter(out, "xferd_metrics_stale_replies_total",
		"Replies (this one included) that got the last snapshot because the event loop was "
		"busy (it did not render a fresh one within 2 ms, or its last answer took longer).",
		m->stale);
	family(out, "xferd_metrics_scrape_seconds", "histogram",
	       "Scrapes of /metrics from accept to the reply written (before this one).");
	write_hist(out, "xferd_metrics_scrape_seconds", "path", "/metrics", &m->served);
	gauge(out, "xferd_metrics_http_connections",
	      "HTTP connections open on metrics_listen (at most 16).", (uint64_t)m->nconns);
	counter(out, "xferd_metrics_http_connections_total",
		"HTTP connections accepted on metrics_listen.", m->accepted);
	counter(out, "xferd_metrics_http_deadline_cuts_total",
		"HTTP connections shut down for outliving the deadline (5 s).", m->cut_at_deadline);
	counter(out, "xferd_metrics_http_listener_pauses_total",
		"Times the listener paused because every connection slot was taken.",
		m->paused_times);
}

/* When @req's connection was accepted (0 if it is not one of ours). */
static uint64_t accepted_at(struct xd_metrics *m, struct evhttp_request *req)
{
	struct bufferevent *bev =
		evhttp_connection_get_bufferevent(evhttp_request_get_connection(req));

	for (int i = 0; i < m->nconns; i++)
		if (m->conns[i].bev == bev)
			return m->conns[i].accepted_us;
	return 0;
}

/*
 * The reply is written: how long the scrape took on the daemon's side. What the scraper sees
 * adds the connect before the accept and its own wakeups (bench-metrics.sh prints both).
 */
static void metrics_served_cb(struct evhttp_request *req, void *arg)
{
	struct xd_metrics *m = arg;
	uint64_t t0 = accepted_at(m, req);

	if (t0)
		xd_hist_observe(&m->served, xd_now_us() - t0);
}

static void serve_metrics(struct xd_metrics *m, struct evhttp_request *req, struct evbuffer *out)
{
	struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
	uint64_t age_us;
	bool fresh = copy_snapshot(m, out, &age_us);

	m->stale += !fresh;
	write_endpoint(m, out, age_us);
	evhttp_add_header(headers, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	/* For tests that compare counters: a stale reply may predate what they just did. */
	evhttp_add_header(headers, "X-Xferd-Snapshot", fresh ? "fresh" : "stale");
	evhttp_request_set_on_complete_cb(req, metrics_served_cb, m);
	evhttp_send_reply(req, HTTP_OK, "OK", out);
}

static void metrics_request_cb(struct evhttp_request *req, void *arg)
{
	struct xd_metrics *m = arg;
	struct evkeyvalq *headers = evhttp_request_get_output_headers(req);
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	struct evbuffer *out = evbuffer_new();

	evhttp_add_header(headers, "Connection", "close");
	if (!out) {
		evhttp_send_error(req, HTTP_SERVUNAVAIL, "out of memory");
		return;
	}
	if (!path || strcmp(path, "/metrics") != 0) {
		evhttp_add_header(headers, "Content-Type", "text/plain; charset=utf-8");
		evbuffer_add_printf(out, "xferd serves only /metrics\n");
		evhttp_send_reply(req, HTTP_NOTFOUND, "Not Found", out);
	} else {
		serve_metrics(m, req, out);
	}
	evbuffer_free(out);
}

static void metrics_stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_metrics *m = arg;

	event_base_loopbreak(m->base);
}

static void *metrics_thread_main(void *arg)
{
	struct xd_metrics *m = arg;

	event_base_dispatch(m->base);
	return NULL;
}

/* ---- start and stop (event loop) ---- */

int xd_metrics_parse_listen(const char *s, struct sockaddr_storage *ss, int *len)
{
	*len = (int)sizeof(*ss);
	memset(ss, 0, sizeof(*ss));
	/* Numeric only: a name would be resolved by a blocking call, and could change later. */
	if (evutil_parse_sockaddr_port(s, (struct sockaddr *)ss, len) < 0 ||
	    (ss->ss_family != AF_INET && ss->ss_family != AF_INET6))
		return -EINVAL;
	uint16_t port = ss->ss_family == AF_INET ? ((struct sockaddr_in *)ss)->sin_port :
						   ((struct sockaddr_in6 *)ss)->sin6_port;
	return port ? 0 : -EINVAL;
}

/* A listening TCP socket on @s. Returns the fd or -errno (logged). */
static int metrics_listen_socket(const char *s)
{
	struct sockaddr_storage ss;
	int len, one = 1;

	if (xd_metrics_parse_listen(s, &ss, &len) < 0) {
		xd_log(XD_LOG_ERR,
		       "metrics_listen \"%s\": must be a numeric ADDR:PORT ([ADDR]:PORT for "
		       "IPv6), port 1-65535",
		       s);
		return -EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, (socklen_t)len) < 0 || listen(fd, 8) < 0) {
		int err = errno;
		xd_log(XD_LOG_ERR, "metrics_listen %s: %s", s, strerror(err));
		if (fd >= 0)
			close(fd);
		return -err;
	}
	return fd;
}

/* The HTTP side on m->base, for the thread. Consumes @fd. Returns 0 or -errno. */
static int http_setup(struct xd_metrics *m, int fd)
{
	struct timeval io = { XD_METRICS_IO_TIMEOUT_S, 0 }, tick = { 0, XD_METRICS_TICK_MS * 1000 };

	m->http = evhttp_new(m->base);
	if (!m->http) {
		close(fd);
		return -ENOMEM;
	}
	evhttp_set_timeout_tv(m->http, &io);
	evhttp_set_max_headers_size(m->http, XD_METRICS_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, 0);
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_gencb(m->http, metrics_request_cb, m);
	evhttp_set_bevcb(m->http, metrics_bev_cb, m);
	m->bound = evhttp_accept_socket_with_handle(m->http, fd);
	if (!m->bound) {
		close(fd);
		return -ENOMEM;
	}
	m->tick = event_new(m->base, -1, EV_PERSIST, metrics_tick_cb, m);
	m->stop_ev = event_new(m->base, m->stop_fd, EV_READ, metrics_stop_cb, m);
	if (!m->tick || !m->stop_ev || event_add(m->tick, &tick) < 0 ||
	    event_add(m->stop_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

/* The loop's side: asks from the thread, the periodic refresh, the first snapshot. */
static int loop_setup(struct xd_metrics *m)
{
	struct timeval every = { XD_METRICS_REFRESH_MS / 1000,
				 (XD_METRICS_REFRESH_MS % 1000) * 1000 };

	m->ask_ev = event_new(m->d->base, m->ask_fd, EV_READ | EV_PERSIST, metrics_ask_cb, m);
	m->refresh_ev = event_new(m->d->base, -1, EV_PERSIST, metrics_refresh_cb, m);
	if (!m->ask_ev || !m->refresh_ev || event_add(m->ask_ev, NULL) < 0 ||
	    event_add(m->refresh_ev, &every) < 0)
		return -ENOMEM;
	metrics_refresh(m);
	return m->text ? 0 : -ENOMEM;
}

/* Starts the HTTP thread with every signal blocked (the loop's thread takes them). */
static int thread_start(struct xd_metrics *m)
{
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(&m->thread, NULL, metrics_thread_main, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	m->thread_started = rc == 0;
	return -rc;
}

/* An xd_metrics with nothing started: fds -1, the lock and condition ready. NULL on ENOMEM. */
static struct xd_metrics *metrics_new(struct xd_daemon *d)
{
	struct xd_metrics *m = calloc(1, sizeof(*m));
	pthread_condattr_t ca;

	if (!m)
		return NULL;
	m->d = d;
	m->ask_fd = m->stop_fd = -1;
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_init(&ca);
	/* Deadlines are xd_now_us() values: the condition must wait on the same clock. */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->published, &ca);
	pthread_condattr_destroy(&ca);
	return m;
}

static int metrics_setup(struct xd_metrics *m, int fd)
{
	m->ask_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	m->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->ask_fd < 0 || m->stop_fd < 0) {
		int err = errno;
		close(fd);
		return -err;
	}
	m->base = event_base_new();
	if (!m->base) {
		close(fd);
		return -ENOMEM;
	}
	int rc = http_setup(m, fd);
	if (rc == 0)
		rc = loop_setup(m);
	return rc < 0 ? rc : thread_start(m);
}

int xd_metrics_start(struct xd_daemon *d)
{
	if (!d->cfg.metrics_listen)
		return 0;
	int fd = metrics_listen_socket(d->cfg.metrics_listen);
	if (fd < 0)
		return fd;
	d->metrics = metrics_new(d);
	if (!d->metrics) {
		close(fd);
		return -ENOMEM;
	}
	int rc = metrics_setup(d->metrics, fd);
	if (rc < 0) {
		xd_log(XD_LOG_ERR, "metrics_listen %s: %s", d->cfg.metrics_listen, strerror(-rc));
		xd_metrics_stop(d);
		return rc;
	}
	xd_log(XD_LOG_INFO, "metrics on http://%s/metrics", d->cfg.metrics_listen);
	return 0;
}

/* Stops and joins the HTTP thread; then its fields are the loop's to free. */
static void thread_stop(struct xd_metrics *m)
{
	uint64_t one = 1;

	if (!m->thread_started)
		return;
	/* A scrape waiting for a snapshot gives up within XD_METRICS_FRESH_WAIT_MS. */
	if (write(m->stop_fd, &one, sizeof(one)) < 0) {
		/* Cannot fail for a fresh eventfd. */
	}
	pthread_join(m->thread, NULL);
	m->thread_started = false;
}

/* The HTTP side's objects, in the reverse order of http_setup (thread stopped). */
static void http_free(struct xd_metrics *m)
{
	xd_event_free(m->tick);
	xd_event_free(m->stop_ev);
	/* evhttp_free() lets go of every connection; ours are the last references. */
	if (m->http)
		evhttp_free(m->http);
	for (int i = 0; i < m->nconns; i++)
		bufferevent_decref(m->conns[i].bev);
	/* (frees what the decrefs left to finalize, closing those sockets) */
	if (m->base)
		event_base_free(m->base);
}

void xd_metrics_stop(struct xd_daemon *d)
{
	struct xd_metrics *m = d->metrics;

	if (!m)
		return;
	thread_stop(m);
	http_free(m);
	xd_event_free(m->ask_ev);
	xd_event_free(m->refresh_ev);
	if (m->ask_fd >= 0)
		close(m->ask_fd);
	if (m->stop_fd >= 0)
		close(m->stop_fd);
	pthread_cond_destroy(&m->published);
	pthread_mutex_destroy(&m->lock);
	free(m->text);
	free(m);
	d->metrics = NULL;
}
