// SPDX-License-Identifier: MIT
/*
 * The daemon's configuration: defaults, then a JSON file (--config), then the command line.
 * Unknown keys are refused so that a typo never silently means "default".
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "xferd.h"

/*
 * The key of the spec that jansson's error @jerr points at, from @fmt (a "{s?X, ...}" object
 * whose values X are s, I, b or o: one pointer each) and the key/pointer pairs in @ap; NULL
 * when the error is not at a value's spec (an unknown key: jansson names that one itself).
 */
static const char *failing_key(const char *fmt, const json_error_t *jerr, va_list ap)
{
	size_t at = jerr->position > 0 ? (size_t)jerr->position - 1 : 0;
	const char *key = NULL;

	if (strcmp(jerr->source, "<validation>") != 0 || at == 0 || at >= strlen(fmt) ||
	    !strchr("sIbo", fmt[at]) || fmt[at - 1] != '?')
		return NULL;
	for (size_t i = 1; i <= at; i++) {
		if (fmt[i - 1] != '?')
			continue; /* a value's spec follows each "s?" */
		key = va_arg(ap, const char *);
		switch (fmt[i]) {
		case 's':
			(void)va_arg(ap, const char **);
			break;
		case 'I':
			(void)va_arg(ap, json_int_t *);
			break;
		case 'b':
			(void)va_arg(ap, int *);
			break;
		default:
			(void)va_arg(ap, json_t **);
		}
	}
	return key;
}

/*
 * json_unpack_ex(@root, @flags, @fmt, ...) for the config's "{s?X, ...}" formats, with an error
 * that names the key: jansson's own says only "Expected integer, got string". Returns 0, or
 * -EINVAL with @err ("busy_poll_us: expected integer, got string").
 */
static int unpack_keys(json_t *root, size_t flags, char *err, size_t errlen, const char *fmt, ...)
{
	json_error_t jerr;
	va_list ap, again;

	va_start(ap, fmt);
	va_copy(again, ap);
	int rc = json_vunpack_ex(root, &jerr, flags, fmt, ap);
	va_end(ap);
	if (rc == 0) {
		va_end(again);
		return 0;
	}
	const char *key = failing_key(fmt, &jerr, again);
	va_end(again);
	if (key)
		snprintf(err, errlen, "%s: %c%s", key, tolower((unsigned char)jerr.text[0]),
			 jerr.text + 1);
	else
		snprintf(err, errlen, "%s", jerr.text);
	return -EINVAL;
}

void xd_config_defaults(struct xd_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->socket_path = strdup(XP_DEFAULT_SOCKET);
	/* Local users outside the socket's group reach the daemon only if the operator says so. */
	cfg->socket_mode = 0660;
	cfg->default_timeout_ms = 60000;
	xd_limits_defaults(cfg);
	cfg->copy_threads = 2;
	cfg->busy_poll_us = XD_BUSY_POLL_DEFAULT_US;
	cfg->peer_connections = 2;
	strcpy(cfg->tcp_congestion, XD_TCP_CONGESTION_DEFAULT);
	cfg->tcp_notsent_lowat = XD_TCP_NOTSENT_LOWAT_DEFAULT;
	cfg->keepalive_ms = 1000;
	cfg->keepalive_timeout_ms = 5000;
	cfg->connect_timeout_ms = 10000;
	cfg->handshake_timeout_ms = 5000;
	cfg->max_pending_peer_conns = 64;
	cfg->max_peer_sets = 256;
	cfg->rdma_ack_timeout = 16; /* about 270 ms */
	cfg->rdma_request_size = XD_RDMA_REQUEST_DEFAULT;
	cfg->rdma_staging_buffers = XD_STAGE_BUFFERS_DEFAULT;
	cfg->rdma_staging_size = XD_STAGE_SIZE_DEFAULT;
	cfg->rdma_post_thread = XD_POST_THREAD_AUTO;
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

static const char *const post_thread_names[] = {
	[XD_POST_THREAD_AUTO] = "auto",
	[XD_POST_THREAD_ALWAYS] = "always",
	[XD_POST_THREAD_NEVER] = "never",
};

const char *xd_config_post_thread_name(enum xd_post_thread v)
{
	return (unsigned)v < sizeof(post_thread_names) / sizeof(post_thread_names[0]) ?
		       post_thread_names[v] :
		       "?";
}

/* rdma_post_thread: one of post_thread_names (@v NULL: unchanged). */
static int load_post_thread(struct xd_config *cfg, const json_t *v, char *err, size_t errlen)
{
	const char *name = json_string_value(v);

	if (!v)
		return 0;
	for (size_t i = 0; name && i < sizeof(post_thread_names) / sizeof(post_thread_names[0]);
	     i++) {
		if (strcmp(name, post_thread_names[i]) == 0) {
			cfg->rdma_post_thread = (enum xd_post_thread)i;
			return 0;
		}
	}
	snprintf(err, errlen,
		 "rdma_post_thread must be auto (a poster thread for devices made in software "
		 "only), always or never, not %s%.40s%s",
		 name ? "\"" : "", name ? name : "a string", name ? "\"" : "");
	return -EINVAL;
}

static int load_rdma(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	const char *transport = NULL;
	json_t *devices = NULL, *post_thread = NULL;
	int require = cfg->require_rdma;
	json_int_t ack = cfg->rdma_ack_timeout, request = cfg->rdma_request_size;
	json_int_t sbufs = cfg->rdma_staging_buffers, ssize = cfg->rdma_staging_size;

	if (unpack_keys(root, 0, err, errlen, "{s?s, s?o, s?b, s?I, s?I, s?I, s?I, s?o}",
			"transport", &transport, "rdma_devices", &devices, "require_rdma", &require,
			"rdma_ack_timeout", &ack, "rdma_request_size", &request,
			"rdma_staging_buffers", &sbufs, "rdma_staging_size", &ssize,
			"rdma_post_thread", &post_thread))
		return -EINVAL;
	if (load_post_thread(cfg, post_thread, err, errlen) < 0)
		return -EINVAL;
	if (sbufs < 1 || sbufs > XD_STAGE_BUFFERS_MAX) {
		snprintf(err, errlen, "rdma_staging_buffers must be 1 to %d", XD_STAGE_BUFFERS_MAX);
		return -EINVAL;
	}
	if (ssize < XD_STAGE_SIZE_MIN || ssize > XD_STAGE_SIZE_MAX || ssize % XD_STAGE_ALIGN) {
		snprintf(err, errlen, "rdma_staging_size must be %u to %u bytes, a multiple of %u",
			 XD_STAGE_SIZE_MIN, XD_STAGE_SIZE_MAX, XD_STAGE_ALIGN);
		return -EINVAL;
	}
	cfg->rdma_staging_buffers = (uint32_t)sbufs;
	cfg->rdma_staging_size = (uint32_t)ssize;
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

/* Whether @name can be a kernel congestion control's name (TCP_CA_NAME_MAX), or is "". */
static bool congestion_name_ok(const char *name)
{
	size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");

	return n == strlen(name) && n < sizeof(((struct xd_config *)0)->tcp_congestion);
}

static int load_peer(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	json_int_t conns = cfg->peer_connections, ka = (json_int_t)cfg->keepalive_ms;
	json_int_t ka_timeout = (json_int_t)cfg->keepalive_timeout_ms;
	json_int_t connect = (json_int_t)cfg->connect_timeout_ms;
	json_int_t notsent = cfg->tcp_notsent_lowat;
	json_t *listen = NULL, *advertise = NULL;
	json_t *cc = NULL;

	if (unpack_keys(root, 0, err, errlen, "{s?o, s?o, s?I, s?I, s?I, s?I, s?o, s?I}", "listen",
			&listen, "advertise", &advertise, "peer_connections", &conns,
			"keepalive_ms", &ka, "keepalive_timeout_ms", &ka_timeout,
			"connect_timeout_ms", &connect, "tcp_congestion", &cc, "tcp_notsent_lowat",
			&notsent))
		return -EINVAL;
	if (cc && (!json_is_string(cc) || !congestion_name_ok(json_string_value(cc)))) {
		snprintf(err, errlen,
			 "tcp_congestion must be a congestion control's name (1 to 15 lowercase "
			 "letters, digits or '_'), or \"\" for the host's default");
		return -EINVAL;
	}
	if (cc)
		strcpy(cfg->tcp_congestion, json_string_value(cc));
	if (conns < 1 || conns > 16 || ka < 10 || ka_timeout <= ka || connect < 10 ||
	    (notsent != 0 &&
	     (notsent < XD_TCP_NOTSENT_LOWAT_MIN || notsent > XD_TCP_NOTSENT_LOWAT_MAX))) {
		snprintf(err, errlen,
			 "out of range: peer_connections 1..16, keepalive_ms >= 10, "
			 "keepalive_timeout_ms > keepalive_ms, connect_timeout_ms >= 10, "
			 "tcp_notsent_lowat 0 or %u..%u",
			 XD_TCP_NOTSENT_LOWAT_MIN, XD_TCP_NOTSENT_LOWAT_MAX);
		return -EINVAL;
	}
	cfg->tcp_notsent_lowat = (int)notsent;
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

	if (unpack_keys(root, 0, err, errlen, "{s?I, s?I, s?I}", "handshake_timeout_ms", &handshake,
			"max_pending_peer_conns", &pending, "max_peer_sets", &sets))
		return -EINVAL;
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

	if (unpack_keys(root, 0, err, errlen, "{s?s, s?b}", "peer_key_file", &key_file,
			"insecure_peers", &insecure))
		return -EINVAL;
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

/* The resources each limits object may name (1 << XD_RES_*). */
#define COMMON_RES                                                                             \
	(1u << XD_RES_BYTES | 1u << XD_RES_REGIONS | 1u << XD_RES_OPS | 1u << XD_RES_WINDOWS | \
	 1u << XD_RES_QUEUED | 1u << XD_RES_FDS)
#define CONN_RES (COMMON_RES | 1u << XD_RES_WAITS)
#define UID_RES (COMMON_RES | 1u << XD_RES_CLIENTS)
#define GLOBAL_RES (COMMON_RES | 1u << XD_RES_CLIENTS | 1u << XD_RES_WAITS)

/* limits (per connection), uid_limits and global_limits: limits.c reads each object. */
static int load_limits(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	int rc = xd_limits_load(&cfg->limits, json_object_get(root, "limits"), CONN_RES, "limits",
				err, errlen);

	if (rc == 0)
		rc = xd_limits_load(&cfg->uid_limits, json_object_get(root, "uid_limits"), UID_RES,
				    "uid_limits", err, errlen);
	if (rc == 0)
		rc = xd_limits_load(&cfg->global_limits, json_object_get(root, "global_limits"),
				    GLOBAL_RES, "global_limits", err, errlen);
	return rc;
}

static int apply(struct xd_config *cfg, json_t *root, char *err, size_t errlen)
{
	const char *socket = NULL, *log_level = NULL, *node_id = NULL, *metrics = NULL;
	json_int_t mode = cfg->socket_mode, timeout = (json_int_t)cfg->default_timeout_ms;
	json_int_t threads = cfg->copy_threads, busy_poll = cfg->busy_poll_us;
	json_t *ignored[25];

	/* One strict unpack names every key, so a typo is refused; load_peer() reads the rest. */
	if (unpack_keys(
		    root, JSON_STRICT, err, errlen,
		    "{s?s, s?I, s?s, s?s, s?I, s?o, s?o, s?o, s?I, s?o, s?o, s?o, s?o, s?o, "
		    "s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?o, s?s, s?I, "
		    "s?o, s?o, s?o}",
		    "socket", &socket, "socket_mode", &mode, "log_level", &log_level, "node_id",
		    &node_id, "default_timeout_ms", &timeout, "limits", &ignored[16], "uid_limits",
		    &ignored[17], "global_limits", &ignored[18], "copy_threads", &threads, "listen",
		    &ignored[0], "advertise", &ignored[1], "peer_connections", &ignored[2],
		    "keepalive_ms", &ignored[3], "keepalive_timeout_ms", &ignored[4],
		    "connect_timeout_ms", &ignored[5], "transport", &ignored[6], "rdma_devices",
		    &ignored[7], "require_rdma", &ignored[8], "rdma_ack_timeout", &ignored[9],
		    "rdma_request_size", &ignored[10], "peer_key_file", &ignored[11],
		    "insecure_peers", &ignored[12], "handshake_timeout_ms", &ignored[13],
		    "max_pending_peer_conns", &ignored[14], "max_peer_sets", &ignored[15],
		    "peer_allow", &ignored[19], "rdma_staging_buffers", &ignored[20],
		    "rdma_staging_size", &ignored[21], "metrics_listen", &metrics, "busy_poll_us",
		    &busy_poll, "rdma_post_thread", &ignored[22], "tcp_congestion", &ignored[23],
		    "tcp_notsent_lowat", &ignored[24]))
		return -EINVAL;
	if (mode < 0 || mode > 0777 || timeout <= 0 || timeout > 86400000 || threads < 1 ||
	    threads > 64 || busy_poll < 0 || busy_poll > XD_BUSY_POLL_MAX_CFG_US) {
		snprintf(err, errlen,
			 "out of range: socket_mode 0..0777, default_timeout_ms 1..86400000, "
			 "copy_threads 1..64, busy_poll_us 0..%d",
			 XD_BUSY_POLL_MAX_CFG_US);
		return -EINVAL;
	}
	cfg->socket_mode = (unsigned)mode;
	cfg->default_timeout_ms = (uint64_t)timeout;
	cfg->copy_threads = (int)threads;
	cfg->busy_poll_us = (unsigned)busy_poll;
	if ((socket && replace(&cfg->socket_path, socket)) ||
	    (log_level && replace(&cfg->log_level, log_level)) ||
	    (node_id && replace(&cfg->node_id, node_id)) ||
	    (metrics && replace(&cfg->metrics_listen, metrics)))
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

/*
 * Reads @path (at most XD_CONFIG_MAX bytes) into a NUL-terminated buffer with its comment lines
 * (first non-blank character '#') blanked, so that jansson's line numbers stay the file's.
 * Returns the buffer (the caller frees it) or NULL with @err.
 */
static char *read_config_text(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	char *buf = f ? malloc(XD_CONFIG_MAX + 1) : NULL;

	if (!buf) {
		snprintf(err, errlen, "%s: %s", path, strerror(f ? ENOMEM : errno));
		if (f)
			fclose(f);
		return NULL;
	}
	*len = fread(buf, 1, XD_CONFIG_MAX + 1, f);
	bool failed = ferror(f);
	fclose(f);
	if (failed || *len > XD_CONFIG_MAX) {
		snprintf(err, errlen, "%s: %s", path,
			 failed ? "read error" : "larger than 1 MiB, which no config needs");
		free(buf);
		return NULL;
	}
	buf[*len] = '\0';
	for (char *line = buf; line && *line;
	     line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		char *p = line + strspn(line, " \t");
		if (*p == '#')
			memset(p, ' ', strcspn(p, "\n"));
	}
	return buf;
}

int xd_config_load(struct xd_config *cfg, const char *path, char *err, size_t errlen)
{
	json_error_t jerr;
	size_t len;
	char *text = read_config_text(path, &len, err, errlen);

	if (!text)
		return -EINVAL;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
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
	free(cfg->metrics_listen);
	for (int i = 0; i < cfg->nlisten; i++)
		free(cfg->listen[i]);
	for (int i = 0; i < cfg->nadvertise; i++)
		free(cfg->advertise[i]);
	for (int i = 0; i < cfg->nrdma_devices; i++)
		free(cfg->rdma_devices[i]);
	memset(cfg, 0, sizeof(*cfg));
}

static json_t *addrs_json(char *const *list, int n)
{
	json_t *arr = json_array();

	for (int i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_string(list[i]));
	return arr;
}

/* {"bytes": N, ...} of the resources in @allowed that @lim limits. */
static json_t *limits_json(const struct xd_limits *lim, unsigned allowed)
{
	json_t *o = json_object();

	for (int i = 0; o && i < XD_NRES; i++)
		if ((allowed & (1u << i)) && lim->max[i] != XD_NO_LIMIT)
			json_object_set_new(o, xd_res_name(i),
					    json_integer((json_int_t)lim->max[i]));
	return o;
}

static json_t *peer_allow_json(const struct xd_config *cfg)
{
	json_t *arr = json_array();
	char buf[64];

	for (int i = 0; arr && i < cfg->npeer_allow; i++) {
		xd_netaddr_format_cidr(&cfg->peer_allow[i], buf, sizeof(buf));
		json_array_append_new(arr, json_string(buf));
	}
	return arr;
}

/* Sets @key to the string @v when it is not NULL. */
static void set_string(json_t *o, const char *key, const char *v)
{
	if (o && v)
		json_object_set_new(o, key, json_string(v));
}

json_t *xd_config_to_json(const struct xd_config *c)
{
	json_t *o = json_pack(
		"{s:s, s:I, s:I, s:o, s:o, s:o, s:i, s:o, s:o, s:i, s:I, s:I, s:I, s:s, s:o, s:b, "
		"s:i, s:I, s:I, s:I, s:s, s:b, s:I, s:i, s:i, s:o, s:I, s:s, s:i}",
		"socket", c->socket_path, "socket_mode", (json_int_t)c->socket_mode,
		"default_timeout_ms", (json_int_t)c->default_timeout_ms, "limits",
		limits_json(&c->limits, CONN_RES), "uid_limits",
		limits_json(&c->uid_limits, UID_RES), "global_limits",
		limits_json(&c->global_limits, GLOBAL_RES), "copy_threads", c->copy_threads,
		"listen", addrs_json(c->listen, c->nlisten), "advertise",
		addrs_json(c->advertise, c->nadvertise), "peer_connections", c->peer_connections,
		"keepalive_ms", (json_int_t)c->keepalive_ms, "keepalive_timeout_ms",
		(json_int_t)c->keepalive_timeout_ms, "connect_timeout_ms",
		(json_int_t)c->connect_timeout_ms, "transport", c->transport, "rdma_devices",
		addrs_json(c->rdma_devices, c->nrdma_devices), "require_rdma", c->require_rdma,
		"rdma_ack_timeout", c->rdma_ack_timeout, "rdma_request_size",
		(json_int_t)c->rdma_request_size, "rdma_staging_buffers",
		(json_int_t)c->rdma_staging_buffers, "rdma_staging_size",
		(json_int_t)c->rdma_staging_size, "rdma_post_thread",
		xd_config_post_thread_name(c->rdma_post_thread), "insecure_peers",
		c->insecure_peers, "handshake_timeout_ms", (json_int_t)c->handshake_timeout_ms,
		"max_pending_peer_conns", c->max_pending_peer_conns, "max_peer_sets",
		c->max_peer_sets, "peer_allow", peer_allow_json(c), "busy_poll_us",
		(json_int_t)c->busy_poll_us, "tcp_congestion", c->tcp_congestion,
		"tcp_notsent_lowat", c->tcp_notsent_lowat);

	set_string(o, "log_level", c->log_level);
	set_string(o, "node_id", c->node_id);
	set_string(o, "peer_key_file", c->peer_key_file);
	set_string(o, "metrics_listen", c->metrics_listen);
	return o;
}

/* Keys SIGHUP applies to the running daemon; every other change needs a restart. */
static const char *const reloadable[] = {
	"log_level",	 "default_timeout_ms", "limits",	 "uid_limits",
	"global_limits", "peer_allow",	       "metrics_listen", "busy_poll_us",
};

static bool is_reloadable(const char *key)
{
	for (size_t i = 0; i < sizeof(reloadable) / sizeof(reloadable[0]); i++)
		if (strcmp(reloadable[i], key) == 0)
			return true;
	return false;
}

/* Appends ", @key" (or "@key") to @buf. */
static void append_key(char *buf, size_t len, const char *key)
{
	size_t used = strlen(buf);

	snprintf(buf + used, len - used, "%s%s", used ? ", " : "", key);
}

/* Takes the reloadable values of @fresh into @cur (strings are moved; @fresh keeps copies). */
static void take_reloadable(struct xd_config *cur, struct xd_config *fresh)
{
	char *tmp;

	tmp = cur->log_level, cur->log_level = fresh->log_level, fresh->log_level = tmp;
	tmp = cur->metrics_listen, cur->metrics_listen = fresh->metrics_listen,
	fresh->metrics_listen = tmp;
	cur->default_timeout_ms = fresh->default_timeout_ms;
	cur->busy_poll_us = fresh->busy_poll_us;
	cur->limits = fresh->limits;
	cur->uid_limits = fresh->uid_limits;
	cur->global_limits = fresh->global_limits;
	memcpy(cur->peer_allow, fresh->peer_allow, sizeof(cur->peer_allow));
	cur->npeer_allow = fresh->npeer_allow;
}

int xd_config_reload(struct xd_config *cur, struct xd_config *fresh, char *changed,
		     size_t changed_len, char *refused, size_t refused_len)
{
	json_t *a = xd_config_to_json(cur), *b = xd_config_to_json(fresh);
	const char *key;
	json_t *v;

	changed[0] = refused[0] = '\0';
	if (!a || !b) {
		json_decref(a);
		json_decref(b);
		return -ENOMEM;
	}
	/* Keys present in only one of them (metrics_listen, peer_key_file, ...) differ too. */
	json_object_foreach(b, key, v) {
		if (!json_equal(v, json_object_get(a, key)))
			append_key(is_reloadable(key) ? changed : refused,
				   is_reloadable(key) ? changed_len : refused_len, key);
	}
	json_object_foreach(a, key, v) {
		if (!json_object_get(b, key))
			append_key(is_reloadable(key) ? changed : refused,
				   is_reloadable(key) ? changed_len : refused_len, key);
	}
	json_decref(a);
	json_decref(b);
	take_reloadable(cur, fresh);
	return 0;
}
