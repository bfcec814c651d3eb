// SPDX-License-Identifier: MIT
/*
 * The daemon's configuration: defaults, then a JSON file (--config), then the command line.
 * Unknown keys are refused so that a typo never silently means "default".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "xferd.h"

void xd_config_defaults(struct xd_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->socket_path = strdup(XP_DEFAULT_SOCKET);
	/* Local users outside the socket's group reach the daemon only if the operator says so. */
	cfg->socket_mode = 0660;
	cfg->default_timeout_ms = 60000;
	xd_limits_defaults(cfg);
	cfg->copy_threads = 2;
	cfg->peer_connections = 2;
	cfg->keepalive_ms = 1000;
	cfg->keepalive_timeout_ms = 5000;
	cfg->connect_timeout_ms = 10000;
	cfg->handshake_timeout_ms = 5000;
	cfg->max_pending_peer_conns = 64;
	cfg->max_peer_sets = 256;
	cfg->rdma_ack_timeout = 16; /* about 270 ms */
	cfg->rdma_request_size = XD_RDMA_REQUEST_DEFAULT;
	strcpy(cfg->transport, XD_TRANSPORT_AUTO);
}

int xd_config_add_addr(char **list, int *n, const char *addr)
{
	if (*n >= XD_MAX_LISTEN)
		return -E2BIG;
	list[*n] = strdup(addr);
	if (!list[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

static int load_addrs(json_t *arr, char **list, int *n, const char *key, char *err, size_t errlen)
{
	size_t i;
	json_t *v;

	if (!arr)
		return 0;
	if (!json_is_array(arr)) {
		snprintf(err, errlen, "%s must be an array of \"addr:port\" strings", key);
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v)) {
			snprintf(err, errlen, "%s must be an array of \"addr:port\" strings", key);
			return -EINVAL;
		}
		int rc = xd_config_add_addr(list, n, json_string_value(v));
		if (rc) {
			snprintf(err, errlen, "%s: at most %d addresses", key, XD_MAX_LISTEN);
			return rc;
		}
	}
	return 0;
}

int xd_config_set_transport(struct xd_config *cfg, const char *name)
{
	if (strlen(name) >= sizeof(cfg->transport))
		return -EINVAL;
	strcpy(cfg->transport, name);
	return 0;
}

static int load_rdma(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	const char *transport = NULL;
	json_t *devices = NULL;
	int require = cfg->require_rdma;
	json_int_t ack = cfg->rdma_ack_timeout, request = cfg->rdma_request_size;
	json_error_t jerr;

	if (json_unpack_ex(root, &jerr, 0, "{s?s, s?o, s?b, s?I, s?I}", "transport", &transport,
			   "rdma_devices", &devices, "require_rdma", &require, "rdma_ack_timeout",
			   &ack, "rdma_request_size", &request)) {
		snprintf(err, errlen, "%s", jerr.text);
		return -EINVAL;
	}
	if (ack < 1 || ack > 31) {
		snprintf(err, errlen, "rdma_ack_timeout must be 1 to 31 (4.096 us * 2^N)");
		return -EINVAL;
	}
	if (request < XD_RDMA_REQUEST_MIN || request > XD_RDMA_REQUEST_MAX) {
		snprintf(err, errlen, "rdma_request_size must be %u to %u bytes",
			 XD_RDMA_REQUEST_MIN, XD_RDMA_REQUEST_MAX);
		return -EINVAL;
	}
	cfg->rdma_ack_timeout = (int)ack;
	cfg->rdma_request_size = (uint32_t)request;
	/* Too long a name is stored as one no transport has: main.c refuses it by name. */
	if (transport && xd_config_set_transport(cfg, transport) < 0)
		xd_config_set_transport(cfg, "?");
	cfg->require_rdma = require;
	return load_addrs(devices, cfg->rdma_devices, &cfg->nrdma_devices, "rdma_devices", err,
			  errlen);
}

static int load_peer(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	json_int_t conns = cfg->peer_connections, ka = (json_int_t)cfg->keepalive_ms;
	json_int_t ka_timeout = (json_int_t)cfg->keepalive_timeout_ms;
	json_int_t connect = (json_int_t)cfg->connect_timeout_ms;
	json_t *listen = NULL, *advertise = NULL;
	json_error_t jerr;

	if (json_unpack_ex(root, &jerr, 0, "{s?o, s?o, s?I, s?I, s?I, s?I}", "listen", &listen,
			   "advertise", &advertise, "peer_connections", &conns, "keepalive_ms", &ka,
			   "keepalive_timeout_ms", &ka_timeout, "connect_timeout_ms", &connect)) {
		snprintf(err, errlen, "%s", jerr.text);
		return -EINVAL;
	}
	if (conns < 1 || conns > 16 || ka < 10 || ka_timeout <= ka || connect < 10) {
		snprintf(err, errlen,
			 "out of range: peer_connections 1..16, keepalive_ms >= 10, "
			 "keepalive_timeout_ms > keepalive_ms, connect_timeout_ms >= 10");
		return -EINVAL;
	}
	cfg->peer_connections = (int)conns;
	cfg->keepalive_ms = (uint64_t)ka;
	cfg->keepalive_timeout_ms = (uint64_t)ka_timeout;
	cfg->connect_timeout_ms = (uint64_t)connect;
	int rc = load_addrs(listen, cfg->listen, &cfg->nlisten, "listen", err, errlen);
	return rc ? rc :
		    load_addrs(advertise, cfg->advertise, &cfg->nadvertise, "advertise", err,
			       errlen);
}

/* The bounds on what unauthenticated hosts can make this daemon hold (issue 12). */
static int load_peer_bounds(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	json_int_t handshake = (json_int_t)cfg->handshake_timeout_ms;
	json_int_t pending = cfg->max_pending_peer_conns, sets = cfg->max_peer_sets;
	json_error_t jerr;

	if (json_unpack_ex(root, &jerr, 0, "{s?I, s?I, s?I}", "handshake_timeout_ms", &handshake,
			   "max_pending_peer_conns", &pending, "max_peer_sets", &sets)) {
		snprintf(err, errlen, "%s", jerr.text);
		return -EINVAL;
	}
	if (handshake < 100 || handshake > 60000 || pending < 1 || pending > 65536 || sets < 1 ||
	    sets > 65536) {
		snprintf(err, errlen,
			 "out of range: handshake_timeout_ms 100..60000, "
			 "max_pending_peer_conns 1..65536, max_peer_sets 1..65536");
		return -EINVAL;
	}
	cfg->handshake_timeout_ms = (uint64_t)handshake;
	cfg->max_pending_peer_conns = (int)pending;
	cfg->max_peer_sets = (int)sets;
	return 0;
}

static int replace(char **slot, const char *value)
{
	char *copy = strdup(value);

	if (!copy)
		return -ENOMEM;
	free(*slot);
	*slot = copy;
	return 0;
}

/* peer_key_file and insecure_peers (main.c loads the key: it may refuse to start). */
static int load_peer_auth(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	const char *key_file = NULL;
	int insecure = cfg->insecure_peers;
	json_error_t jerr;

	if (json_unpack_ex(root, &jerr, 0, "{s?s, s?b}", "peer_key_file", &key_file,
			   "insecure_peers", &insecure)) {
		snprintf(err, errlen, "%s", jerr.text);
		return -EINVAL;
	}
	cfg->insecure_peers = insecure;
	return key_file && replace(&cfg->peer_key_file, key_file) ? -ENOMEM : 0;
}

/* peer_allow: ["10.0.0.0/8", "fd00::/8", ...] (netaddr.c); empty or absent allows all. */
static int load_peer_allow(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	json_t *arr = json_object_get(root, "peer_allow"), *v;
	size_t i;

	if (!arr)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > XD_MAX_PEER_ALLOW) {
		snprintf(err, errlen, "peer_allow must be an array of at most %d \"ADDR/BITS\"",
			 XD_MAX_PEER_ALLOW);
		return -EINVAL;
	}
	cfg->npeer_allow = 0;
	json_array_foreach(arr, i, v) {
		const char *s = json_string_value(v);
		if (!s || xd_netaddr_parse_cidr(s, &cfg->peer_allow[cfg->npeer_allow]) < 0) {
			snprintf(err, errlen, "peer_allow: \"%s\" is not a numeric ADDR/BITS",
				 s ? s : "(not a string)");
			return -EINVAL;
		}
		cfg->npeer_allow++;
	}
	return 0;
}

/* limits (per connection), uid_limits and global_limits: limits.c reads each object. */
static int load_limits(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	const unsigned common = 1u << XD_RES_BYTES | 1u << XD_RES_REGIONS | 1u << XD_RES_OPS;
	int rc = xd_limits_load(&cfg->limits, json_object_get(root, "limits"),
				common | 1u << XD_RES_WAITS, "limits", err, errlen);

	if (rc == 0)
		rc = xd_limits_load(&cfg->uid_limits, json_object_get(root, "uid_limits"),
				    common | 1u << XD_RES_CLIENTS, "uid_limits", err, errlen);
	if (rc == 0)
		rc = xd_limits_load(&cfg->global_limits, json_object_get(root, "global_limits"),
				    common | 1u << XD_RES_CLIENTS | 1u << XD_RES_WAITS,
				    "global_limits", err, errlen);
	return rc;
}

static int apply(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	const char *socket = NULL, *log_level = NULL, *node_id = NULL;
	json_int_t mode = cfg->socket_mode, timeout = (json_int_t)cfg->default_timeout_ms;
	json_int_t threads = cfg->copy_threads;
	json_t *ignored[20];
	json_error_t jerr;

	/* One strict unpack names every key, so a typo is refused; load_peer() reads the rest. */
	if (json_unpack_ex(root, &jerr, JSON_STRICT,
			   "{s?s, s?I, s?s, s?s, s?I, s?o, s?o, s?o, s?I, s?o, s?o, s?o, s?o, s?o, "
			   "s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o}",
			   "socket", &socket, "socket_mode", &mode, "log_level", &log_level,
			   "node_id", &node_id, "default_timeout_ms", &timeout, "limits",
			   &ignored[16], "uid_limits", &ignored[17], "global_limits", &ignored[18],
			   "copy_threads", &threads, "listen", &ignored[0], "advertise",
			   &ignored[1], "peer_connections", &ignored[2], "keepalive_ms",
			   &ignored[3], "keepalive_timeout_ms", &ignored[4], "connect_timeout_ms",
			   &ignored[5], "transport", &ignored[6], "rdma_devices", &ignored[7],
			   "require_rdma", &ignored[8], "rdma_ack_timeout", &ignored[9],
			   "rdma_request_size", &ignored[10], "peer_key_file", &ignored[11],
			   "insecure_peers", &ignored[12], "handshake_timeout_ms", &ignored[13],
			   "max_pending_peer_conns", &ignored[14], "max_peer_sets", &ignored[15],
			   "peer_allow", &ignored[19])) {
		snprintf(err, errlen, "%s", jerr.text);
		return -EINVAL;
	}
	if (mode < 0 || mode > 0777 || timeout <= 0 || timeout > 86400000 || threads < 1 ||
	    threads > 64) {
		snprintf(err, errlen,
			 "out of range: socket_mode 0..0777, default_timeout_ms 1..86400000, "
			 "copy_threads 1..64");
		return -EINVAL;
	}
	cfg->socket_mode = (unsigned)mode;
	cfg->default_timeout_ms = (uint64_t)timeout;
	cfg->copy_threads = (int)threads;
	if ((socket && replace(&cfg->socket_path, socket)) ||
	    (log_level && replace(&cfg->log_level, log_level)) ||
	    (node_id && replace(&cfg->node_id, node_id)))
		return -ENOMEM;
	int rc = load_limits(cfg, root, err, errlen);
	if (rc == 0)
		rc = load_peer(cfg, root, err, errlen);
	if (rc == 0)
		rc = load_peer_auth(cfg, root, err, errlen);
	if (rc == 0)
		rc = load_peer_bounds(cfg, root, err, errlen);
	if (rc == 0)
		rc = load_peer_allow(cfg, root, err, errlen);
	return rc ? rc : load_rdma(cfg, root, err, errlen);
}

int xd_config_load(struct xd_config *cfg, const char *path, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);

	if (!root) {
		snprintf(err, errlen, "%s:%d: %s", path, jerr.line, jerr.text);
		return -EINVAL;
	}
	char inner[200] = "";
	int rc = apply(cfg, root, inner, sizeof(inner));
	json_decref(root);
	if (rc)
		snprintf(err, errlen, "%s: %s", path, inner);
	return rc;
}

void xd_config_fini(struct xd_config *cfg)
{
	free(cfg->socket_path);
	free(cfg->log_level);
	free(cfg->node_id);
	free(cfg->peer_key_file);
	for (int i = 0; i < cfg->nlisten; i++)
		free(cfg->listen[i]);
	for (int i = 0; i < cfg->nadvertise; i++)
		free(cfg->advertise[i]);
	for (int i = 0; i < cfg->nrdma_devices; i++)
		free(cfg->rdma_devices[i]);
	memset(cfg, 0, sizeof(*cfg));
}
