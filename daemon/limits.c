// SPDX-License-Identifier: MIT
/*
 * Limits at three scopes (per connection, per uid, global): the defaults derived from the
 * machine's memory, the config objects, and the counters every charge and refund goes through,
 * so that registered bytes, regions, operations, connections and pending waits stay bounded
 * however many connections a local user opens.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "xferd.h"

static const char *const res_names[XD_NRES] = {
	[XD_RES_BYTES] = "bytes",
	[XD_RES_REGIONS] = "regions",
	[XD_RES_OPS] = "ops",
	[XD_RES_CLIENTS] = "clients",
	[XD_RES_WAITS] = "waits",
	[XD_RES_WINDOWS] = "windows",
	[XD_RES_QUEUED] = "queued_bytes",
	[XD_RES_FDS] = "fds",
};

/* What a limit counts, for messages ("12 GiB registered bytes", "4 regions"). */
static const char *const res_nouns[XD_NRES] = {
	[XD_RES_BYTES] = "registered bytes",
	[XD_RES_REGIONS] = "regions",
	[XD_RES_OPS] = "operations",
	[XD_RES_CLIENTS] = "connections",
	[XD_RES_WAITS] = "pending waits",
	[XD_RES_WINDOWS] = "windows",
	[XD_RES_QUEUED] = "of replies queued", /* (after an amount: "16 MiB of replies queued") */
	[XD_RES_FDS] = "file descriptors kept for file regions",
};

const char *xd_res_name(enum xd_res res)
{
	return res_names[res];
}

/* MemTotal of /proc/meminfo in bytes, or 0 when it cannot be read. */
static uint64_t mem_total(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	unsigned long long kib = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (uint64_t)kib << 10;
}

/*
 * A file region keeps its fd open (the daemon moves its bytes with file I/O): half the daemon's
 * fd limit for them in all, an eighth per uid, so that one local user's file regions (16384 of
 * them by the regions limit) cannot take the fds other clients' connections and registrations
 * and the peer connections need. Without a finite limit, none.
 */
static void fds_defaults(struct xd_limits *conn, struct xd_limits *uid, struct xd_limits *all)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
		conn->max[XD_RES_FDS] = uid->max[XD_RES_FDS] = all->max[XD_RES_FDS] = XD_NO_LIMIT;
		return;
	}
	all->max[XD_RES_FDS] = (uint64_t)rl.rlim_cur / 2;
	uid->max[XD_RES_FDS] = (uint64_t)rl.rlim_cur / 8;
	conn->max[XD_RES_FDS] = uid->max[XD_RES_FDS];
}

void xd_limits_defaults(struct xd_config *cfg)
{
	/* Without /proc (a container that hides it), assume a small machine rather than none. */
	uint64_t mem = mem_total() ?: 4ull << 30;
	struct xd_limits *conn = &cfg->limits, *uid = &cfg->uid_limits, *all = &cfg->global_limits;

	/*
	 * Registered memory is populated by the daemon and charged to it, not to the client:
	 * half the machine in all, a quarter per uid, so that one local user cannot take the
	 * whole node and the daemon is never the OOM killer's first choice because of clients.
	 */
	all->max[XD_RES_BYTES] = mem / 2;
	uid->max[XD_RES_BYTES] = mem / 4;
	conn->max[XD_RES_BYTES] = uid->max[XD_RES_BYTES] < (64ull << 30) ? uid->max[XD_RES_BYTES] :
									   64ull << 30;
	conn->max[XD_RES_REGIONS] = 4096;
	uid->max[XD_RES_REGIONS] = 16384;
	all->max[XD_RES_REGIONS] = 65536;
	conn->max[XD_RES_OPS] = 4096;
	uid->max[XD_RES_OPS] = 16384;
	all->max[XD_RES_OPS] = 65536;
	/* A connection is an fd and a few KiB; the daemon's fd limit is the real bound. */
	conn->max[XD_RES_CLIENTS] = XD_NO_LIMIT;
	uid->max[XD_RES_CLIENTS] = 256;
	all->max[XD_RES_CLIENTS] = 1024;
	conn->max[XD_RES_WAITS] = 1024;
	uid->max[XD_RES_WAITS] = XD_NO_LIMIT;
	all->max[XD_RES_WAITS] = 16384;
	conn->max[XD_RES_WINDOWS] = 1024;
	uid->max[XD_RES_WINDOWS] = 4096;
	all->max[XD_RES_WINDOWS] = 16384;
	/*
	 * Replies and events wait in the daemon's memory while a client does not read them: 16 MiB
	 * per connection, but one local user with 256 connections would hold 4 GiB of it, so the
	 * uid and the daemon have budgets of their own. A connection that would pass one is
	 * dropped (it is the one not reading).
	 */
	conn->max[XD_RES_QUEUED] = 16ull << 20;
	uid->max[XD_RES_QUEUED] = 128ull << 20;
	all->max[XD_RES_QUEUED] = 512ull << 20;
	fds_defaults(conn, uid, all);
}

int xd_limits_load(struct xd_limits *lim, const json_t *obj, unsigned allowed, const char *key,
		   char *err, size_t errlen)
{
	const char *name;
	json_t *v;

	if (!obj)
		return 0;
	if (!json_is_object(obj)) {
		snprintf(err, errlen, "%s must be an object", key);
		return -EINVAL;
	}
	json_object_foreach((json_t *)obj, name, v) {
		int res = 0;
		while (res < XD_NRES && (strcmp(name, res_names[res]) || !(allowed & (1u << res))))
			res++;
		if (res == XD_NRES) {
			snprintf(err, errlen, "%s: unknown key \"%.32s\"", key, name);
			return -EINVAL;
		}
		if (!json_is_integer(v) || json_integer_value(v) <= 0) {
			snprintf(err, errlen, "%s: limits must be positive integers", key);
			return -EINVAL;
		}
		lim->max[res] = (uint64_t)json_integer_value(v);
	}
	return 0;
}

void xd_usage_init(struct xd_daemon *d)
{
	memset(d->usage, 0, sizeof(d->usage));
	TAILQ_INIT(&d->uid_usage);
}

static struct xd_uid_usage *uid_find(const struct xd_daemon *d, uid_t uid)
{
	struct xd_uid_usage *u;

	TAILQ_FOREACH(u, &d->uid_usage, link)
		if (u->uid == uid)
			return u;
	return NULL;
}

void xd_uid_usage_get(const struct xd_daemon *d, uid_t uid, uint64_t use[XD_NRES])
{
	const struct xd_uid_usage *u = uid_find(d, uid);

	for (int i = 0; i < XD_NRES; i++)
		use[i] = u ? u->use[i] : 0;
}

/* "12 GiB", "11.5 GiB", "4096" (not bytes). */
static void fmt_amount(enum xd_res res, uint64_t v, char *out, size_t len)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double x = (double)v;
	int u = 0;

	if (res != XD_RES_BYTES && res != XD_RES_QUEUED) {
		snprintf(out, len, "%" PRIu64, v);
		return;
	}
	while (x >= 1024 && u < 5) {
		x /= 1024;
		u++;
	}
	snprintf(out, len, "%.4g %s", x, units[u]);
}

/* Whether @used + @n passes @max. */
static bool passes(uint64_t used, uint64_t n, uint64_t max)
{
	uint64_t sum;

	return __builtin_add_overflow(used, n, &sum) || sum > max;
}

/* Fills @msg: @scope's limit @max of @res is reached, @used in use. */
static void over_msg(const char *scope, enum xd_res res, uint64_t used, uint64_t max, char *msg,
		     size_t len)
{
	char lim[32], cur[32];

	fmt_amount(res, max, lim, sizeof(lim));
	fmt_amount(res, used, cur, sizeof(cur));
	if (res == XD_RES_BYTES)
		snprintf(msg, len, "%s limit of %s %s would be exceeded (registered %s)", scope,
			 lim, res_nouns[res], cur);
	else
		snprintf(msg, len, "%s limit of %s %s reached (%s in use)", scope, lim,
			 res_nouns[res], cur);
}

/*
 * Nothing is formatted unless a limit is passed: every op is checked twice (when made and when
 * listed), and for 4 KiB gets and puts vfprintf() and its helpers were ~8% of the opener
 * daemon's samples (perf), the uid's scope two of the five calls per op.
 */
int xd_charge_check(const struct xd_daemon *d, const uint64_t *conn_use, uid_t uid, enum xd_res res,
		    uint64_t n, char *msg, size_t len)
{
	const struct xd_config *cfg = &d->cfg;
	const struct xd_uid_usage *u = uid_find(d, uid);
	uint64_t uid_used = u ? u->use[res] : 0;
	char scope[48];

	/* The narrowest scope first: its message tells the client what it can change itself. */
	if (conn_use && passes(conn_use[res], n, cfg->limits.max[res])) {
		over_msg("per-connection", res, conn_use[res], cfg->limits.max[res], msg, len);
	} else if (passes(uid_used, n, cfg->uid_limits.max[res])) {
		snprintf(scope, sizeof(scope), "per-uid (uid %u)", (unsigned)uid);
		over_msg(scope, res, uid_used, cfg->uid_limits.max[res], msg, len);
	} else if (passes(d->usage[res], n, cfg->global_limits.max[res])) {
		over_msg("global", res, d->usage[res], cfg->global_limits.max[res], msg, len);
	} else {
		return 0;
	}
	return -EDQUOT;
}

int xd_charge(struct xd_daemon *d, uint64_t *conn_use, uid_t uid, enum xd_res res, uint64_t n,
	      char *msg, size_t len)
{
	struct xd_uid_usage *u = uid_find(d, uid);
	int rc = xd_charge_check(d, conn_use, uid, res, n, msg, len);

	if (rc)
		return rc;
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u) {
			snprintf(msg, len, "out of memory");
			return -ENOMEM;
		}
		u->uid = uid;
		TAILQ_INSERT_TAIL(&d->uid_usage, u, link);
	}
	if (conn_use)
		conn_use[res] += n;
	u->use[res] += n;
	d->usage[res] += n;
	return 0;
}

void xd_uncharge(struct xd_daemon *d, uint64_t *conn_use, uid_t uid, enum xd_res res, uint64_t n)
{
	struct xd_uid_usage *u = uid_find(d, uid);

	if (conn_use)
		conn_use[res] -= n;
	d->usage[res] -= n;
	if (!u) {
		xd_log(XD_LOG_ERR, "refund of %s for uid %u, which has no charges", res_names[res],
		       (unsigned)uid);
		return;
	}
	u->use[res] -= n;
	for (int i = 0; i < XD_NRES; i++)
		if (u->use[i])
			return;
	/* Nothing left: the table holds only uids that hold something. */
	TAILQ_REMOVE(&d->uid_usage, u, link);
	free(u);
}

void xd_usage_fini(struct xd_daemon *d)
{
	struct xd_uid_usage *u;

	while ((u = TAILQ_FIRST(&d->uid_usage))) {
		TAILQ_REMOVE(&d->uid_usage, u, link);
		free(u);
	}
}

/* {"bytes": {"used", "limit"}, ...} of one scope; resources it does not limit are left out. */
static json_t *scope_json(const uint64_t use[XD_NRES], const struct xd_limits *lim)
{
	json_t *o = json_object();

	for (int i = 0; o && i < XD_NRES; i++) {
		if (lim->max[i] == XD_NO_LIMIT)
			continue;
		json_t *e = json_pack("{s:I, s:I}", "used", (json_int_t)use[i], "limit",
				      (json_int_t)lim->max[i]);
		if (!e || json_object_set_new(o, res_names[i], e) < 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

json_t *xd_limits_json(const struct xd_daemon *d, const uint64_t conn_use[XD_NRES], uid_t uid)
{
	uint64_t mine[XD_NRES];

	xd_uid_usage_get(d, uid, mine);
	return json_pack("{s:I, s:o, s:o, s:o}", "uid", (json_int_t)uid, "global",
			 scope_json(d->usage, &d->cfg.global_limits), "per_uid",
			 scope_json(mine, &d->cfg.uid_limits), "per_connection",
			 scope_json(conn_use, &d->cfg.limits));
}
