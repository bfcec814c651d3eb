// SPDX-License-Identifier: MIT
/*
 * One request from packet to reply: envelope parse, the session and fd rules, the method table,
 * and the small handlers (hello, list.clients, stats). Request errors get an error
 * reply and the connection stays; protocol violations get one error and the connection closes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "transport.h"

typedef int (*xd_handler)(struct xd_call *call);

static int handle_hello(struct xd_call *call);
static int handle_list_clients(struct xd_call *call);
static int handle_stats(struct xd_call *call);
static int handle_list_peers(struct xd_call *call);
static int handle_list_devices(struct xd_call *call);

/*
 * The handler of each row of XP_METHODS is the macro method_<SYM>: the table below is generated
 * from the list, so a method added there without a line here does not build.
 */
#define method_HELLO handle_hello
#define method_REGION_REGISTER xd_handle_region_register
#define method_REGION_DEREGISTER xd_handle_region_deregister
#define method_OP_READABLE xd_handle_op_passive
#define method_OP_WRITABLE xd_handle_op_passive
#define method_OP_READ xd_handle_op_active
#define method_OP_WRITE xd_handle_op_active
#define method_OP_STATUS xd_handle_op_status
#define method_OP_WAIT xd_handle_op_wait
#define method_OP_CANCEL xd_handle_op_cancel
#define method_OP_RELEASE xd_handle_op_release
#define method_LIST_REGIONS xd_handle_list_regions
#define method_LIST_OPS xd_handle_list_ops
#define method_LIST_CLIENTS handle_list_clients
#define method_LIST_PEERS handle_list_peers
#define method_LIST_DEVICES handle_list_devices
#define method_STATS handle_stats
#define method_WINDOW_CREATE xd_handle_window_create
#define method_WINDOW_OPEN xd_handle_window_open
#define method_WINDOW_CLOSE xd_handle_window_close
#define method_OP_GET xd_handle_op_window
#define method_OP_PUT xd_handle_op_window
#define method_OP_BATCH xd_handle_op_batch
#define method_LIST_WINDOWS xd_handle_list_windows
#define method_EVENTS_SUBSCRIBE xd_handle_events_subscribe

/* clang-format off */
static const xd_handler handlers[XP_M_COUNT] = {
#define XD_HANDLER_ROW(sym, name, fds, hello) [XP_M_##sym] = method_##sym,
	XP_METHODS(XD_HANDLER_ROW)
#undef XD_HANDLER_ROW
};
/* clang-format on */

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

static int handle_hello(struct xd_call *call)
{
	struct xd_conn *c = call->conn;
	struct xd_daemon *d = c->d;
	json_int_t version;
	const char *name;

	if (c->hello)
		return xd_fail(call, XP_E_FAILED, EPROTO,
			       "hello was already sent on this connection");
	if (xd_unpack_params(call, "{s:I, s:s}", "version", &version, "client", &name))
		return -EINVAL;
	if (version != XP_PROTO_VERSION)
		return xd_fail(call, XP_E_FAILED, EPROTONOSUPPORT,
			       "protocol version %lld is not supported; this daemon speaks %d",
			       (long long)version, XP_PROTO_VERSION);
	if (strlen(name) > XP_MAX_NAME || !printable(name))
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "client name must be at most 64 printable ASCII bytes");
	strcpy(c->name, name);
	c->hello = true;
	call->result = json_pack("{s:i, s:s, s:s, s:I, s:I, s:I, s:i}", "version", XP_PROTO_VERSION,
				 "daemon", "xferd " XFERD_VERSION, "node", d->node_hex, "epoch",
				 (json_int_t)d->epoch, "client", (json_int_t)c->id, "uid",
				 (json_int_t)c->uid, "max_packet", XP_MAX_MSG);
	return 0;
}

static json_t *client_to_json(const struct xd_conn *c, uint64_t now)
{
	return json_pack("{s:I, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "client",
			 (json_int_t)c->id, "name", c->name, "pid", (int)c->pid, "uid",
			 (json_int_t)c->uid, "gid", (json_int_t)c->gid, "regions",
			 (json_int_t)c->use[XD_RES_REGIONS], "bytes",
			 (json_int_t)c->use[XD_RES_BYTES], "ops", (json_int_t)c->use[XD_RES_OPS],
			 "age_ms", (json_int_t)((now - c->created_us) / 1000), "queued",
			 (json_int_t)c->queued, "queued_max", (json_int_t)c->queued_max);
}

static json_t *client_entry(const void *c, void *now)
{
	return client_to_json(c, *(const uint64_t *)now);
}

/* Pages by client id (PROTOCOL.md §7). */
static int handle_list_clients(struct xd_call *call)
{
	struct xd_daemon *d = call->conn->d;
	uint64_t now = xd_now_us();
	struct xd_page_item *items;
	struct xd_page pg;
	struct xd_conn *c;
	size_t n = 0;
	int rc = xd_page_begin(call, &pg);

	if (rc)
		return rc;
	TAILQ_FOREACH(c, &d->conns, link)
		n++;
	items = calloc(n + 1, sizeof(*items));
	if (!items)
		return xd_page_finish(call, &pg, "clients", -ENOMEM);
	n = 0;
	TAILQ_FOREACH(c, &d->conns, link)
		if (xd_conn_may_access(call->conn, c) && (json_int_t)c->id > pg.after)
			items[n++] = (struct xd_page_item){ c->id, c };
	rc = xd_page_fill(&pg, items, n, client_entry, &now);
	free(items);
	return xd_page_finish(call, &pg, "clients", rc);
}

static int count_open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;

	if (!dir)
		return -1;
	while (readdir(dir))
		n++;
	closedir(dir);
	return n - 3; /* ".", ".." and the directory's own fd */
}

/* The daemon's counters, and its limits with their usage as @c (its uid) sees them. */
/* How many peer sets have a connection that proved the cluster key @id. */
static unsigned sets_proving(const struct xd_daemon *d, uint32_t id)
{
	const struct xd_peer *p;
	unsigned n = 0;

	TAILQ_FOREACH(p, &d->peers, link)
		for (int i = 0; i < p->nkey_ids; i++)
			n += p->key_ids[i] == id;
	return n;
}

/*
 * The cluster keys, the one this daemon proves with first, each with how many peer sets proved
 * it (while a key is rolled out: the sets still on the old one); [] when it has none.
 */
static json_t *cluster_keys_json(const struct xd_daemon *d)
{
	json_t *keys = json_array();
	char id[9];

	for (int i = 0; keys && i < d->keys.n; i++) {
		uint32_t key = d->keys.keys[i].id;
		snprintf(id, sizeof(id), "%08x", (unsigned)key);
		json_t *entry =
			json_pack("{s:s, s:I}", "id", id, "sets", (json_int_t)sets_proving(d, key));
		if (json_array_append_new(keys, entry)) {
			json_decref(keys);
			return NULL;
		}
	}
	return keys;
}

static json_t *stats_to_json(struct xd_daemon *d, const struct xd_conn *c)
{
	uint64_t regions = 0, bytes = 0, ops = 0, active = 0;
	struct xd_region *r;
	struct xd_op *op;

	TAILQ_FOREACH(r, &d->regions, link) {
		regions++;
		bytes += r->length;
	}
	TAILQ_FOREACH(op, &d->ops, link) {
		ops++;
		active += !xp_state_terminal(op->state);
	}
	unsigned nclients = 0;
	struct xd_conn *other;
	TAILQ_FOREACH(other, &d->conns, link)
		nclients++;
	return json_pack("{s:s, s:s, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, "
			 "s:o, s:o, s:o}",
			 "daemon", "xferd " XFERD_VERSION, "node", d->node_hex, "epoch",
			 (json_int_t)d->epoch, "uptime_ms",
			 (json_int_t)((xd_now_us() - d->start_us) / 1000), "clients", nclients,
			 "regions", (json_int_t)regions, "registered_bytes", (json_int_t)bytes,
			 "ops", (json_int_t)ops, "ops_active", (json_int_t)active, "ops_completed",
			 (json_int_t)d->stats.ops_completed, "ops_failed",
			 (json_int_t)d->stats.ops_failed, "ops_cancelled",
			 (json_int_t)d->stats.ops_cancelled, "bytes_moved",
			 (json_int_t)d->stats.bytes_moved, "fds", count_open_fds(), "limits",
			 xd_limits_json(d, c->use, c->uid), "busy_poll", xd_busypoll_json(d),
			 "cluster_keys", cluster_keys_json(d));
}

static int handle_stats(struct xd_call *call)
{
	if (xd_unpack_params(call, "{}"))
		return -EINVAL;
	call->result = stats_to_json(call->conn->d, call->conn);
	return 0;
}

/*
 * Peers have no id: the cursor is a peer's position (0-based) in the daemon's list, which is in
 * the order the sets were made. A set that goes away between two pages shifts the later ones
 * by one, so a paged listing can miss or repeat a peer then (PROTOCOL.md §7). "conns": false
 * leaves out each set's connections, whose TCP state costs ~24 us of this loop per connection
 * (what xferctl top, asking every second, does not show).
 */
static int handle_list_peers(struct xd_call *call)
{
	json_int_t after = -1, limit = XD_PAGE_LIMIT;
	int conns = 1;
	struct xd_page pg;

	if (xd_unpack_params(call, "{s?I, s?I, s?b}", "after", &after, "limit", &limit, "conns",
			     &conns))
		return -EINVAL;
	int rc = xd_page_start(call, &pg, after, limit);
	if (rc)
		return rc;
	return xd_page_finish(call, &pg, "peers", xd_peers_page(call->conn->d, &pg, conns));
}

/* Every transport's devices, each under its own keys ({"rdma": ..., "devices": [...]}). */
static int handle_list_devices(struct xd_call *call)
{
	if (xd_unpack_params(call, "{}"))
		return -EINVAL;
	json_t *result = json_object();
	const struct xd_transport_ops *const *tt = call->conn->d->transports;

	for (int i = 0; result && tt[i]; i++) {
		const struct xd_transport_ops *t = tt[i];
		if (t->devices_json &&
		    json_object_update_new(result, t->devices_json(call->conn->d))) {
			json_decref(result);
			result = NULL;
		}
	}
	if (!result)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	call->result = result;
	return 0;
}

/* The session and fd rules that hold before any handler runs. */
static int check_preconditions(struct xd_call *call, enum xp_method m)
{
	if (xp_method_needs_hello(m) && !call->conn->hello)
		return xd_fail(call, XP_E_FAILED, EPROTO,
			       "hello must be the first request on a connection");
	if (call->fds->count != xp_method_fds(m))
		return xd_fail(call, XP_E_FAILED, EBADF, "%s takes exactly %d fd(s), got %d",
			       xp_method_name(m), xp_method_fds(m), call->fds->count);
	return 0;
}

/* Answers @call, whose handler returned @rc, unless it answered itself or will later. */
static void finish_call(struct xd_call *call, int rc)
{
	if (rc == 0 && !call->result && !call->deferred && !call->answered)
		rc = xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory building the reply");
	if (rc < 0) {
		json_decref(call->result);
		xd_reply_error(call->conn, call->id, call->code, call->cause_errno, call->message);
	} else if (call->no_reply) {
		json_decref(call->result); /* (a posted op.batch: its event is the answer) */
	} else if (!call->deferred && !call->answered) {
		xd_reply_result(call->conn, call->id, call->result);
	}
}

static void run_handler(struct xd_call *call, enum xp_method m)
{
	int rc = check_preconditions(call, m);

	if (rc == 0)
		rc = handlers[m](call);
	finish_call(call, rc);
}

/*
 * op.batch of gets and puts in the library's own text, run without a jansson tree (perf put
 * parsing it, reading the tree and dumping the reply at ~15% of the opener daemon's CPU at 4
 * KiB gets). Returns false, having done nothing, when @buf is not exactly that form: the packet
 * then goes jansson's way, which alone judges anything else.
 */
static bool dispatch_batch_text(struct xd_conn *c, const char *buf, size_t len,
				struct xp_fdset *fds)
{
	struct xp_batch_req rq;

	if (fds->count > 0 || xp_batch_req_read(buf, len, &rq) != 0)
		return false;
	struct xd_call call = { .conn = c, .id = rq.id, .method = XP_M_OP_BATCH, .fds = fds };
	int rc = check_preconditions(&call, XP_M_OP_BATCH);
	if (rc == 0)
		rc = xd_handle_op_batch_text(&call, &rq);
	finish_call(&call, rc);
	return true;
}

void xd_dispatch_packet(struct xd_conn *c, const char *buf, size_t len, struct xp_fdset *fds)
{
	struct xp_request req;
	char err[256];

	if (dispatch_batch_text(c, buf, len, fds)) {
		xp_fdset_close(fds);
		return;
	}
	int code = xp_request_parse(buf, len, &req, err, sizeof(err));

	if (code == 0 && fds->count > 0 && xp_method_fds(req.method) == 0) {
		snprintf(err, sizeof(err), "%s takes no fds, got %d", xp_method_name(req.method),
			 fds->count);
		code = XP_E_INVALID_REQ;
	}
	if (code == XP_E_PARSE || code == XP_E_INVALID_REQ) {
		xd_reply_error(c, req.id, code, code == XP_E_PARSE ? EBADMSG : EPROTO, err);
		xd_conn_close(c, err);
	} else if (code) {
		xd_reply_error(c, req.id, code, code == XP_E_NO_METHOD ? ENOSYS : ENOMEM, err);
	} else {
		struct xd_call call = { .conn = c,
					.id = req.id,
					.method = req.method,
					.params = req.params,
					.fds = fds };
		run_handler(&call, req.method);
	}
	xp_fdset_close(fds);
	xp_request_fini(&req);
}
