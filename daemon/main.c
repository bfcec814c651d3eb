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

struct options {
	const char *listen[XD_MAX_LISTEN], *advertise[XD_MAX_LISTEN];
	int nlisten, nadvertise;
	const char *devices[XD_MAX_DEVICES];
	int ndevices;
	const char *transport;
	const char *config;
	const char *socket;
	const char *log_level;
	const char *peer_key;
	bool insecure_peers;
	bool systemd;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xferd [--socket PATH] [--config FILE] [--log-level err|warn|info|debug]\n"
		"             [--listen ADDR:PORT]... [--advertise ADDR:PORT]...\n"
		"             [--transport auto|rdma|tcp] [--rdma-device NAME]...\n"
		"             [--peer-key FILE | --insecure-peers]\n"
		"             [--foreground] [--systemd] [--version]\n"
		"Node-level data transfer daemon. Logs go to stderr; it never forks.\n");
}

/* Returns 0 to run, 1 to exit 0 (help, version), or -1 to exit with a usage error. */
static int parse_args(int argc, char **argv, struct options *o)
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

/*
 * The cluster key authenticates peer daemons (PROTOCOL.md §10.2). Without one, any host that
 * reaches the peer port could pose as a node: listening then takes an explicit
 * --insecure-peers. Returns 0 or -errno (logged).
 */
static int init_peer_key(struct xd_daemon *d, const struct options *o)
{
	const char *path = o->peer_key ? o->peer_key : d->cfg.peer_key_file;
	char err[300];

	d->cfg.insecure_peers |= o->insecure_peers;
	if (path) {
		int rc = xd_key_load(path, d->peer_key, &d->peer_key_len, err, sizeof(err));
		if (rc < 0)
			xd_log(XD_LOG_ERR, "%s", err);
		return rc;
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

static int init_config(struct xd_daemon *d, const struct options *o)
{
	char err[300];

	xd_config_defaults(&d->cfg);
	if (!d->cfg.socket_path)
		return -ENOMEM;
	if (o->config && xd_config_load(&d->cfg, o->config, err, sizeof(err)) < 0) {
		xd_log(XD_LOG_ERR, "config: %s", err);
		return -EINVAL;
	}
	if (o->socket) {
		free(d->cfg.socket_path);
		d->cfg.socket_path = strdup(o->socket);
	}
	/* Addresses on the command line replace those of the config file. */
	if (o->nlisten)
		replace_addrs(d->cfg.listen, &d->cfg.nlisten, o->listen, o->nlisten);
	if (o->nadvertise)
		replace_addrs(d->cfg.advertise, &d->cfg.nadvertise, o->advertise, o->nadvertise);
	if (o->ndevices)
		replace_addrs(d->cfg.rdma_devices, &d->cfg.nrdma_devices, o->devices, o->ndevices);
	if (o->transport && xd_config_set_transport(&d->cfg, o->transport) < 0)
		xd_config_set_transport(&d->cfg, "?");
	if (!xd_transport_valid(d->cfg.transport)) {
		char names[128];
		xd_transport_names(names, sizeof(names));
		xd_log(XD_LOG_ERR, "config: transport must be %s, %s", XD_TRANSPORT_AUTO, names);
		return -EINVAL;
	}
	const char *level = o->log_level ? o->log_level : d->cfg.log_level;
	if (level && xd_log_set_level(level) < 0) {
		xd_log(XD_LOG_ERR, "log level must be err, warn, info or debug, not \"%s\"", level);
		return -EINVAL;
	}
	if (init_node_id(d) < 0) {
		xd_log(XD_LOG_ERR, "config: node_id must be 32 hex digits");
		return -EINVAL;
	}
	int rc = init_peer_key(d, o);
	if (rc < 0)
		return rc;
	return d->cfg.socket_path ? 0 : -ENOMEM;
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
		xd_log(XD_LOG_INFO, "SIGHUP ignored: restart the daemon to apply a new config");
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
	TAILQ_INIT(&d->ops);
	TAILQ_INIT(&d->peers);
	TAILQ_INIT(&d->xfers);
	TAILQ_INIT(&d->deferred);
	xd_usage_init(d);
	d->listen_fd = -1;
	d->start_us = xd_now_us();
	d->transports = xd_transports;
}

static int daemon_init(struct xd_daemon *d, const struct options *o)
{
	struct timespec now;
	int rc;

	xd_daemon_clear(d);
	d->systemd = o->systemd;
	clock_gettime(CLOCK_REALTIME, &now);
	d->epoch = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000;
	if ((rc = init_config(d, o)) < 0)
		return rc;
	d->base = event_base_new();
	if (!d->base)
		return -ENOMEM;
	if ((rc = xd_defer_init(d)) < 0 || (rc = init_signals(d)) < 0 ||
	    (rc = xd_transport_local(d)->start(d)) < 0)
		return rc;
	xd_claims_start(d);
	if ((rc = xd_peers_start(d)) < 0)
		return rc;
	if ((rc = xd_ctl_start(d, xd_dispatch_packet)) < 0) {
		xd_log(XD_LOG_ERR, "control socket %s: %s", d->cfg.socket_path, strerror(-rc));
		return rc;
	}
	return 0;
}

/* The reverse of daemon_init, safe on a partly initialised daemon. */
static void daemon_fini(struct xd_daemon *d)
{
	xd_transport_local(d)->fini(d); /* first: no worker may touch a mapping after this */
	xd_ctl_fini(d);
	xd_peers_stop(d);
	xd_ops_fini(d);
	xd_peers_fini(d); /* last: every registration and queue pair is gone by now */
	xd_defer_fini(d);
	xd_usage_fini(d); /* after every connection, region and op gave its charges back */
	xd_event_free(d->shutdown_ev);
	for (int i = 0; i < 3; i++)
		xd_event_free(d->sig_ev[i]);
	if (d->base)
		event_base_free(d->base);
	xd_config_fini(&d->cfg);
	explicit_bzero(d->peer_key, sizeof(d->peer_key)); /* the cluster key leaves no copy */
}

int main(int argc, char **argv)
{
	struct options o = { 0 };
	struct xd_daemon d = { 0 };
	int rc = parse_args(argc, argv, &o);

	if (rc)
		return rc > 0 ? 0 : 2;
	xd_log_init(o.systemd || getenv("JOURNAL_STREAM"));
	rc = daemon_init(&d, &o);
	if (rc == 0) {
		xd_log(XD_LOG_INFO, "xferd %s listening on %s (node %s)", XFERD_VERSION,
		       d.listen_from_systemd ? "the socket systemd passed" : d.cfg.socket_path,
		       d.node_hex);
		xd_sd_notify(&d, "READY=1");
		event_base_dispatch(d.base);
		xd_log(XD_LOG_INFO, "stopped");
	}
	daemon_fini(&d);
	return rc == 0 ? 0 : 1;
}
