// SPDX-License-Identifier: MIT
/*
 * xferd: argument and config handling, startup order, signals, and the shutdown sequence.
 * Only this file decides the exit code: 0 for a clean stop, 1 for a startup failure.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transport.h"

struct xd_main_options {
	const char *listen[XD_MAX_LISTEN], *advertise[XD_MAX_LISTEN];
	int nlisten, nadvertise;
	const char *devices[XD_MAX_DEVICES];
	int ndevices;
	const char *transport;
	const char *config;
	const char *socket;
	const char *log_level;
	const char *peer_key;
	const char *metrics_listen;
	bool insecure_peers;
	bool systemd;
	bool check_config;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xferd [--socket PATH] [--config FILE] [--log-level err|warn|info|debug]\n"
		"             [--listen ADDR:PORT]... [--advertise ADDR:PORT]...\n"
		"             [--transport auto|rdma|tcp] [--rdma-device NAME]...\n"
		"             [--peer-key FILE | --insecure-peers] [--metrics-listen ADDR:PORT]\n"
		"             [--foreground] [--systemd] [--version]\n"
		"       xferd --check-config [--config FILE] [options]\n"
		"Node-level data transfer daemon. Logs go to stderr; it never forks.\n"
		"--check-config validates the configuration (file and options) and prints the\n"
		"effective one as JSON; exit status 0 when valid, 1 when not.\n"
		"SIGHUP reads the config file again and applies log_level, default_timeout_ms,\n"
		"limits, uid_limits, global_limits, peer_allow, metrics_listen and busy_poll_us.\n");
}

/* Returns 0 to run, 1 to exit 0 (help, version), or -1 to exit with a usage error. */
static int parse_args(int argc, char **argv, struct xd_main_options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "config", required_argument, NULL, 'c' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "systemd", no_argument, NULL, 'S' },
		{ "listen", required_argument, NULL, 'L' },
		{ "advertise", required_argument, NULL, 'A' },
		{ "transport", required_argument, NULL, 'T' },
		{ "rdma-device", required_argument, NULL, 'D' },
		{ "peer-key", required_argument, NULL, 'K' },
		{ "insecure-peers", no_argument, NULL, 'I' },
		{ "metrics-listen", required_argument, NULL, 'M' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "s:c:l:fh", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			o->socket = optarg;
			break;
		case 'c':
			o->config = optarg;
			break;
		case 'l':
			o->log_level = optarg;
			break;
		case 'f':
			break; /* always in the foreground: systemd and tests supervise it */
		case 'S':
			o->systemd = true;
			break;
		case 'T':
			o->transport = optarg;
			break;
		case 'K':
			o->peer_key = optarg;
			break;
		case 'I':
			o->insecure_peers = true;
			break;
		case 'M':
			o->metrics_listen = optarg;
			break;
		case 'C':
			o->check_config = true;
			break;
		case 'D':
			if (o->ndevices == XD_MAX_DEVICES) {
				fprintf(stderr, "xferd: at most %d --rdma-device\n",
					XD_MAX_DEVICES);
				return -1;
			}
			o->devices[o->ndevices++] = optarg;
			break;
		case 'L':
		case 'A': {
			const char **list = ch == 'L' ? o->listen : o->advertise;
			int *n = ch == 'L' ? &o->nlisten : &o->nadvertise;
			if (*n == XD_MAX_LISTEN) {
				fprintf(stderr, "xferd: at most %d --listen/--advertise each\n",
					XD_MAX_LISTEN);
				return -1;
			}
			list[(*n)++] = optarg;
			break;
		}
		case 'V':
			printf("xferd %s\n", XFERD_VERSION);
			return 1;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return -1;
	}
	return 0;
}

/* FNV-1a, for a stable node id from machine-id and socket path; not a security boundary. */
static uint64_t fnv1a(const char *s, uint64_t h)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static int init_node_id(struct xd_daemon *d)
{
	if (d->cfg.node_id) {
		if (xp_hex_decode(d->cfg.node_id, d->node, XP_ID_BYTES) < 0)
			return -EINVAL;
	} else {
		char machine[64] = "unknown";
		FILE *f = fopen("/etc/machine-id", "re");
		if (f) {
			if (!fgets(machine, sizeof(machine), f))
				strcpy(machine, "unknown");
			fclose(f);
		}
		uint64_t h1 = fnv1a(d->cfg.socket_path, fnv1a(machine, 0xcbf29ce484222325ull));
		uint64_t h2 = fnv1a(machine, fnv1a(d->cfg.socket_path, 0x84222325cbf29ce4ull));
		memcpy(d->node, &h1, 8);
		memcpy(d->node + 8, &h2, 8);
	}
	xp_hex_encode(d->node, XP_ID_BYTES, d->node_hex);
	return 0;
}

static void replace_addrs(char **list, int *n, const char *const *with, int nwith)
{
	for (int i = 0; i < *n; i++)
		free(list[i]);
	*n = 0;
	for (int i = 0; i < nwith; i++)
		xd_config_add_addr(list, n, with[i]);
}

/* "a1b2c3d4, e5f6a7b8" of @kr's key ids, into @out. */
static void key_ids_text(const struct xd_keyring *kr, char *out, size_t len)
{
	size_t at = 0;

	out[0] = '\0';
	for (int i = 0; i < kr->n && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s%08x", i ? ", " : "",
				       (unsigned)kr->keys[i].id);
}

/*
 * The cluster key authenticates peer daemons (PROTOCOL.md §10.2). Without one, any host that
 * reaches the peer port could pose as a node: listening then takes an explicit
 * --insecure-peers. Returns 0 or -errno (logged).
 */
static int init_peer_key(struct xd_daemon *d)
{
	char err[300];

	if (d->cfg.peer_key_file) {
		char ids[XD_KEYS_MAX * 10 + 8];
		int rc = xd_keyring_load(d->cfg.peer_key_file, &d->keys, err, sizeof(err));
		if (rc < 0) {
			xd_log(XD_LOG_ERR, "%s", err);
			return rc;
		}
		key_ids_text(&d->keys, ids, sizeof(ids));
		xd_log(XD_LOG_INFO, "cluster keys %s (this daemon proves with the first)", ids);
		return 0;
	}
	if (d->cfg.nlisten && !d->cfg.insecure_peers) {
		xd_log(XD_LOG_ERR,
		       "listening for peer daemons (--listen) needs the cluster key "
		       "(--peer-key FILE, config peer_key_file), or --insecure-peers to let "
		       "any host that reaches the port act as a peer");
		return -EPERM;
	}
	if (d->cfg.insecure_peers)
		xd_log(XD_LOG_WARN, "peers are not authenticated (--insecure-peers): any host that "
				    "reaches the peer port can pose as a node");
	return 0;
}

/* Replaces the string @slot with a copy of @v (NULL: keeps it). Returns 0 or -ENOMEM. */
static int override(char **slot, const char *v)
{
	char *copy;

	if (!v)
		return 0;
	if (!(copy = strdup(v)))
		return -ENOMEM;
	free(*slot);
	*slot = copy;
	return 0;
}

/* The command line over the config file: options given replace the file's values. */
static int apply_options(struct xd_config *cfg, const struct xd_main_options *o)
{
	/* Addresses on the command line replace those of the config file. */
	if (o->nlisten)
		replace_addrs(cfg->listen, &cfg->nlisten, o->listen, o->nlisten);
	if (o->nadvertise)
		replace_addrs(cfg->advertise, &cfg->nadvertise, o->advertise, o->nadvertise);
	if (o->ndevices)
		replace_addrs(cfg->rdma_devices, &cfg->nrdma_devices, o->devices, o->ndevices);
	if (o->transport && xd_config_set_transport(cfg, o->transport) < 0)
		xd_config_set_transport(cfg, "?");
	cfg->insecure_peers |= o->insecure_peers;
	if (override(&cfg->socket_path, o->socket) < 0 ||
	    override(&cfg->log_level, o->log_level ?: (cfg->log_level ? NULL : "info")) < 0 ||
	    override(&cfg->peer_key_file, o->peer_key) < 0 ||
	    override(&cfg->metrics_listen, o->metrics_listen) < 0)
		return -ENOMEM;
	return 0;
}

/* The rules that need more than the file's syntax. Returns 0 or -EINVAL (logged). */
static int check_config(const struct xd_config *cfg)
{
	struct sockaddr_storage ss;
	uint8_t node[XP_ID_BYTES];
	int len;

	if (!xd_transport_valid(cfg->transport)) {
		char names[128];
		xd_transport_names(names, sizeof(names));
		xd_log(XD_LOG_ERR, "config: transport must be %s, %s", XD_TRANSPORT_AUTO, names);
		return -EINVAL;
	}
	if (xd_log_parse_level(cfg->log_level) < 0) {
		xd_log(XD_LOG_ERR, "log level must be err, warn, info or debug, not \"%s\"",
		       cfg->log_level);
		return -EINVAL;
	}
	if (cfg->node_id && xp_hex_decode(cfg->node_id, node, XP_ID_BYTES) < 0) {
		xd_log(XD_LOG_ERR, "config: node_id must be 32 hex digits");
		return -EINVAL;
	}
	if (cfg->metrics_listen && xd_metrics_parse_listen(cfg->metrics_listen, &ss, &len) < 0) {
		xd_log(XD_LOG_ERR,
		       "config: metrics_listen must be a numeric ADDR:PORT ([ADDR]:PORT for IPv6, "
		       "port 1-65535), not \"%s\"",
		       cfg->metrics_listen);
		return -EINVAL;
	}
	return 0;
}

/*
 * The effective configuration: defaults, the config file, the command line, checked. At start,
 * for --check-config and on SIGHUP. Returns 0 or -errno (logged); @cfg needs xd_config_fini().
 */
static int load_config(struct xd_config *cfg, const struct xd_main_options *o)
{
	char err[300];

	xd_config_defaults(cfg);
	if (!cfg->socket_path)
		return -ENOMEM;
	if (o->config && xd_config_load(cfg, o->config, err, sizeof(err)) < 0) {
		xd_log(XD_LOG_ERR, "config: %s", err);
		return -EINVAL;
	}
	if (apply_options(cfg, o) < 0)
		return -ENOMEM;
	return check_config(cfg);
}

static int init_config(struct xd_daemon *d, const struct xd_main_options *o)
{
	int rc = load_config(&d->cfg, o);

	if (rc < 0)
		return rc;
	d->options = o;
	xd_log_set_level(d->cfg.log_level);
	if (init_node_id(d) < 0) {
		xd_log(XD_LOG_ERR, "config: node_id must be 32 hex digits");
		return -EINVAL;
	}
	return init_peer_key(d);
}

/* --check-config: exit status 0 and the effective configuration on stdout, or 1. */
static int check_config_main(const struct xd_main_options *o)
{
	struct xd_daemon d = { 0 };
	int rc = init_config(&d, o);

	if (rc == 0) {
		json_t *j = xd_config_to_json(&d.cfg);
		if (j && !json_object_get(j, "node_id"))
			json_object_set_new(j, "node_id", json_string(d.node_hex));
		rc = j && json_dumpf(j, stdout, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 ? 0 : -ENOMEM;
		printf("\n");
		json_decref(j);
	}
	xd_config_fini(&d.cfg);
	xd_keyring_clear(&d.keys);
	if (rc == 0)
		fprintf(stderr, "xferd: configuration %s is valid\n",
			o->config ? o->config : "(defaults)");
	return rc == 0 ? 0 : 1;
}

/* metrics_listen changed on SIGHUP: the old listener goes, the new one (if any) comes. */
static void restart_metrics(struct xd_daemon *d, const char *old)
{
	xd_metrics_stop(d);
	if (xd_metrics_start(d) < 0)
		xd_log(XD_LOG_ERR, "SIGHUP: metrics are off until metrics_listen can be used");
	else if (!d->cfg.metrics_listen)
		xd_log(XD_LOG_INFO, "SIGHUP: metrics off (were on %s)", old ? old : "nothing");
}

/*
 * SIGHUP: reads the config file again and applies what can change at run time; a change that
 * needs a restart is logged and not applied. A file that does not load changes nothing.
 */
static void reload_config(struct xd_daemon *d)
{
	struct xd_config fresh;
	char changed[512], refused[512];

	if (!d->options->config) {
		xd_log(XD_LOG_INFO, "SIGHUP: no --config file to read again; nothing changed");
		return;
	}
	if (load_config(&fresh, d->options) < 0) {
		xd_log(XD_LOG_ERR, "SIGHUP: %s not applied (the running configuration stays)",
		       d->options->config);
		xd_config_fini(&fresh);
		return;
	}
	char *old_metrics = d->cfg.metrics_listen ? strdup(d->cfg.metrics_listen) : NULL;
	if (xd_config_reload(&d->cfg, &fresh, changed, sizeof(changed), refused, sizeof(refused)) <
	    0)
		xd_log(XD_LOG_ERR, "SIGHUP: out of memory; nothing changed");
	xd_config_fini(&fresh);
	xd_log_set_level(d->cfg.log_level);
	if (strstr(changed, "metrics_listen"))
		restart_metrics(d, old_metrics);
	free(old_metrics);
	if (refused[0])
		xd_log(XD_LOG_WARN, "SIGHUP: not applied, these need a restart: %s", refused);
	xd_log(XD_LOG_INFO, "SIGHUP: %s%s", changed[0] ? "applied " : "configuration unchanged",
	       changed);
}

/*
 * SIGHUP: reads the cluster key file again (a keyed daemon's: one started without a key stays
 * without, and the reverse). The first key proves this daemon from now on; a peer may prove any;
 * every set with a connection that proved a key no longer in the file fails at once. A file
 * that does not load changes nothing.
 */
static void reload_keys(struct xd_daemon *d)
{
	struct xd_keyring fresh;
	char err[300], ids[XD_KEYS_MAX * 10 + 8];

	if (!d->keys.n)
		return;
	if (xd_keyring_load(d->cfg.peer_key_file, &fresh, err, sizeof(err)) < 0) {
		xd_log(XD_LOG_ERR, "SIGHUP: %s; the cluster keys stay as they were", err);
		return;
	}
	xd_keyring_clear(&d->keys);
	d->keys = fresh; /* (the keyed MAC states move with it: fresh is not cleared) */
	explicit_bzero(&fresh, sizeof(fresh));
	key_ids_text(&d->keys, ids, sizeof(ids));
	int dropped = xd_peers_key_check(d);
	xd_log(XD_LOG_INFO,
	       "SIGHUP: cluster keys %s (this daemon proves with the first); %d peer sets that "
	       "proved a key no longer there closed",
	       ids, dropped);
}

static void shutdown_check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_daemon *d = arg;
	bool drained = !xd_copier_busy(d->copier) && !xd_ctl_pending_output(d) &&
		       !xd_peers_pending_output(d);

	if (drained || ++d->shutdown_ticks * 10 >= XD_SHUTDOWN_FLUSH_MS)
		event_base_loopexit(d->base, NULL);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct xd_daemon *d = arg;
	struct timeval tick = { 0, 10000 };

	if (sig == SIGHUP) {
		reload_config(d);
		reload_keys(d);
		return;
	}
	if (d->stopping)
		return;
	xd_log(XD_LOG_INFO, "%s: stopping", strsignal((int)sig));
	d->stopping = true;
	xd_sd_notify(d, "STOPPING=1");
	xd_ctl_stop_listening(d);
	xd_ops_shutdown(d);
	d->shutdown_ev = event_new(d->base, -1, EV_PERSIST, shutdown_check_cb, d);
	if (!d->shutdown_ev || event_add(d->shutdown_ev, &tick) < 0)
		event_base_loopexit(d->base, NULL);
}

static int init_signals(struct xd_daemon *d)
{
	static const int sigs[3] = { SIGTERM, SIGINT, SIGHUP };

	signal(SIGPIPE, SIG_IGN); /* MSG_NOSIGNAL covers sockets; this covers the rest */
	for (int i = 0; i < 3; i++) {
		d->sig_ev[i] = evsignal_new(d->base, sigs[i], signal_cb, d);
		if (!d->sig_ev[i] || event_add(d->sig_ev[i], NULL) < 0)
			return -ENOMEM;
	}
	return 0;
}

void xd_daemon_clear(struct xd_daemon *d)
{
	TAILQ_INIT(&d->conns);
	TAILQ_INIT(&d->regions);
	TAILQ_INIT(&d->file_probes);
	TAILQ_INIT(&d->ops);
	xd_idmap_init(&d->region_ids);
	xd_idmap_init(&d->op_ids);
	xd_idmap_init(&d->window_ids);
	xd_idmap_init(&d->handle_ids);
	TAILQ_INIT(&d->peers);
	TAILQ_INIT(&d->windows);
	TAILQ_INIT(&d->whandles);
	TAILQ_INIT(&d->deferred);
	xd_usage_init(d);
	d->listen_fd = -1;
	d->start_us = xd_now_us();
	d->transports = xd_transports;
}

/*
 * The event loop. libevent reads CLOCK_MONOTONIC_COARSE unless told otherwise, which lags by up
 * to a tick (4 ms at HZ=250): an operation's deadline fired up to that much early (test_ops saw
 * 194 ms for 200). The precise clock costs a vDSO call per loop turn.
 */
static struct event_base *loop_new(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base = NULL;

	if (cfg) {
		if (event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) == 0)
			base = event_base_new_with_config(cfg);
		event_config_free(cfg);
	}
	return base;
}

static int daemon_init(struct xd_daemon *d, const struct xd_main_options *o)
{
	struct timespec now;
	int rc;

	xd_daemon_clear(d);
	d->systemd = o->systemd;
	clock_gettime(CLOCK_REALTIME, &now);
	d->epoch = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000;
	if ((rc = init_config(d, o)) < 0)
		return rc;
	d->base = loop_new();
	if (!d->base)
		return -ENOMEM;
	if ((rc = xd_defer_init(d)) < 0 || (rc = init_signals(d)) < 0 ||
	    (rc = xd_looplag_start(d)) < 0 || (rc = xd_transport_local(d)->start(d)) < 0)
		return rc;
	xd_claims_start(d);
	if ((rc = xd_peers_start(d)) < 0 || (rc = xd_metrics_start(d)) < 0)
		return rc;
	if ((rc = xd_ctl_start(d, xd_dispatch_packet)) < 0) {
		xd_log(XD_LOG_ERR, "control socket %s: %s", d->cfg.socket_path, strerror(-rc));
		return rc;
	}
	return xd_sd_watchdog_start(d);
}

/* The reverse of daemon_init, safe on a partly initialised daemon. */
static void daemon_fini(struct xd_daemon *d)
{
	xd_transport_local(d)->fini(d); /* first: no worker may touch a mapping after this */
	xd_sd_watchdog_stop(d);
	xd_metrics_stop(d);
	xd_ctl_fini(d);
	xd_region_probes_fini(d);
	xd_windows_fini(d);
	xd_peers_stop(d);
	xd_ops_fini(d);
	xd_peers_fini(d); /* last: every registration and queue pair is gone by now */
	xd_defer_fini(d);
	xd_looplag_stop(d);
	xd_usage_fini(d); /* after every connection, region and op gave its charges back */
	xd_event_free(d->shutdown_ev);
	for (int i = 0; i < 3; i++)
		xd_event_free(d->sig_ev[i]);
	if (d->base)
		event_base_free(d->base);
	xd_config_fini(&d->cfg);
	xd_keyring_clear(&d->keys);				/* the cluster keys leave no copy */
	explicit_bzero(d->random_pool, sizeof(d->random_pool)); /* (unused tokens, too) */
}

int main(int argc, char **argv)
{
	struct xd_main_options o = { 0 };
	struct xd_daemon d = { 0 };
	/*
	 * Before any jansson value exists: the loop's JSON through a cache of freed blocks
	 * (xp_jalloc.c). Not under AddressSanitizer, which would no longer see a use after free.
	 */
#ifndef __SANITIZE_ADDRESS__
	struct xp_jalloc *ja = xp_jalloc_install();
#else
	struct xp_jalloc *ja = NULL;
#endif
	int rc = parse_args(argc, argv, &o);

	if (rc) {
		xp_jalloc_drop(ja);
		return rc > 0 ? 0 : 2;
	}
	xd_log_init(o.systemd || getenv("JOURNAL_STREAM"));
	if (o.check_config) {
		rc = check_config_main(&o);
		xp_jalloc_drop(ja);
		return rc;
	}
	rc = daemon_init(&d, &o);
	if (rc == 0) {
		xd_log(XD_LOG_INFO, "xferd %s listening on %s (node %s)", XFERD_VERSION,
		       d.listen_from_systemd ? "the socket systemd passed" : d.cfg.socket_path,
		       d.node_hex);
		xd_sd_notify(&d, "READY=1");
		xd_loop_run(&d);
		xd_log(XD_LOG_INFO, "stopped");
	}
	daemon_fini(&d);
	xd_log_fini();
	xp_jalloc_drop(ja);
	return rc == 0 ? 0 : 1;
}
