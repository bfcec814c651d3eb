// SPDX-License-Identifier: MIT
/*
 * xferctl: the command line of xferd, built on libxferclient alone (jansson renders listings,
 * proto's metadata decoder sizes `read` buffers). Listings print aligned tables or, with
 * --json, the daemon's result on one line; the file commands move one file through a sealed
 * buffer and one xferd operation. Helpers print their own message and return an exit status.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <libgen.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>

#include "xferclient.h"
#include "xp_meta.h"

#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 32)
#define CTL_HAVE_ERRNAME 1
#endif
#endif

#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2

#define CTL_CLIENT_NAME "xferctl"
#define CTL_MAX_TIMEOUT_MS 86400000 /* the protocol's limit on an operation's deadline */
#define CTL_WAIT_GRACE_MS 5000	    /* the daemon's deadline should fire first; see file_op_wait */
#define CTL_IO_CHUNK (1u << 30)	    /* read(2)/write(2) move at most ~2 GiB per call anyway */
#define CTL_MAX_READERS 1024	    /* readable --readers: operations over one file */
#define CELL_MAX 256
#define MAX_COLS 16

struct ctl {
	const char *socket; /* NULL: the library's default */
	bool json;
	int timeout_ms; /* -1: the daemon's default deadline */
	const char *cmd;
	const char *meta_file; /* readable, writable: the metadata goes here, not to stdout */
	long count;	       /* top: frames, watch: events, then exit; 0: until q or Ctrl-C */
	int readers;	       /* readable: operations over the one file (--readers) */
	bool sync;	       /* read, writable: OUTFILE fdatasynced before COMPLETE (--sync) */
	bool direct; /* file commands: the file's aligned body opened O_DIRECT (--direct) */
	bool tcp;    /* peers: one row per TCP connection, what its kernel says (--tcp) */
	struct xfer_client *c;
};

/* ------------------------------------------------------------------------------------------ */
/* Messages */

static const char *errname(int err)
{
	const char *s = NULL;

	if (err < 0)
		err = -err;
#ifdef CTL_HAVE_ERRNAME
	s = strerrorname_np(err);
#endif
	return s ? s : "E?";
}

/* Prints "xferctl: CMD: MESSAGE (ENAME)" on stderr and returns EXIT_FAILED. */
__attribute__((format(printf, 3, 4))) static int ctl_fail(const struct ctl *ctl, int err,
							  const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "xferctl: %s: ", ctl->cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (err)
		fprintf(stderr, " (%s)", errname(err));
	fputc('\n', stderr);
	return EXIT_FAILED;
}

/*
 * Copies @s into @out with every control byte (below 0x20, 0x7f, and the C1 controls U+0080 to
 * U+009F as UTF-8) written as \xNN, cut to @len. Every string the daemon sends goes through
 * here before a terminal sees it: region names, causes and peer endpoints can come from other
 * users or other hosts, and an escape sequence in them could retitle or rewrite root's terminal.
 */
static const char *esc(const char *s, char *out, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = 0;
	bool c1;

	for (; *p && n + 1 < len; p++) {
		c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
		if (*p >= 0x20 && *p != 0x7f && !c1) {
			out[n++] = (char)*p;
			continue;
		}
		if (n + 4 + (c1 ? 4 : 0) >= len)
			break;
		n += (size_t)snprintf(out + n, len - n, "\\x%02x", *p);
		if (c1)
			n += (size_t)snprintf(out + n, len - n, "\\x%02x", *++p);
	}
	out[n] = '\0';
	return out;
}

/*
 * Prints @v as one line of ASCII JSON. jansson escapes the bytes below 0x20 and, with
 * JSON_ENSURE_ASCII, everything above 0x7f, but leaves DEL as it is: DEL can only be inside a
 * string here, where \u007f means the same. Returns 0 or -ENOMEM.
 */
static int json_print(const json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII);

	if (!text)
		return -ENOMEM;
	for (const char *p = text; *p; p++)
		if (*p == 0x7f)
			fputs("\\u007f", stdout);
		else
			putchar(*p);
	putchar('\n');
	free(text);
	return 0;
}

/* Reports a failed library call: the daemon's sentence when it gave one, else errno's text. */
static int ctl_refused(const struct ctl *ctl, int rc)
{
	const char *msg = xfer_last_error(ctl->c);
	char safe[1024];

	return ctl_fail(ctl, rc, "%s", esc(*msg ? msg : xfer_strerror(rc), safe, sizeof(safe)));
}

static const char *ctl_socket_path(const struct ctl *ctl)
{
	const char *env = getenv(XP_SOCKET_ENV);

	if (ctl->socket)
		return ctl->socket;
	return env && *env ? env : XP_DEFAULT_SOCKET;
}

static int ctl_connect(struct ctl *ctl)
{
	if (ctl->c)
		return EXIT_OK;
	int rc = xfer_connect(ctl->socket, CTL_CLIENT_NAME, &ctl->c);

	if (rc < 0)
		return ctl_fail(ctl, rc, "cannot talk to xferd at %s: %s", ctl_socket_path(ctl),
				xfer_strerror(rc));
	return EXIT_OK;
}

/* Connects and calls @method without params. Returns an exit status and *text (free() it). */
static int ctl_call(struct ctl *ctl, const char *method, char **text)
{
	int rc = ctl_connect(ctl);

	if (rc)
		return rc;
	rc = xfer_call(ctl->c, method, NULL, text);
	return rc < 0 ? ctl_refused(ctl, rc) : EXIT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Cell formatting */

static uint64_t obj_u64(const json_t *obj, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(obj, key));

	return v > 0 ? (uint64_t)v : 0;
}

static const char *obj_str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "";
}

static void human_size(uint64_t v, char *out, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int u = -1;

	if (v < 1024) {
		snprintf(out, len, "%lluB", (unsigned long long)v);
		return;
	}
	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	/* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): v >= 1024 divides once: u >= 0 */
	snprintf(out, len, "%.1f%s", d, units[u]);
}

static void human_duration(uint64_t ms, char *out, size_t len)
{
	unsigned long long s = ms / 1000;

	if (ms < 1000)
		snprintf(out, len, "%llums", (unsigned long long)ms);
	else if (s < 60)
		snprintf(out, len, "%.1fs", (double)ms / 1000);
	else if (s < 3600)
		snprintf(out, len, "%llum%02llus", s / 60, s % 60);
	else if (s < 86400)
		snprintf(out, len, "%lluh%02llum", s / 3600, s / 60 % 60);
	else
		snprintf(out, len, "%llud%02lluh", s / 86400, s / 3600 % 24);
}

/* Any JSON value as a cell: strings as they are, "" and null as "-", the rest compact. */
static void fmt_value(const json_t *v, char *out, size_t len)
{
	char *dump;

	if (!v || json_is_null(v) || (json_is_string(v) && !*json_string_value(v))) {
		snprintf(out, len, "-");
	} else if (json_is_string(v)) {
		esc(json_string_value(v), out, len);
	} else if (json_is_integer(v)) {
		snprintf(out, len, "%lld", (long long)json_integer_value(v));
	} else {
		dump = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
		esc(dump ? dump : "?", out, len);
		free(dump);
	}
}

/* Column formatters: render member @key of table row @row into @out. */
static void fmt_text(const json_t *row, const char *key, char *out, size_t len)
{
	fmt_value(json_object_get(row, key), out, len);
}

static void fmt_size(const json_t *row, const char *key, char *out, size_t len)
{
	human_size(obj_u64(row, key), out, len);
}

static void fmt_age(const json_t *row, const char *key, char *out, size_t len)
{
	human_duration(obj_u64(row, key), out, len);
}

/* "bytes/length" of an operation. */
static void fmt_progress(const json_t *row, const char *key, char *out, size_t len)
{
	char done[32], total[32];

	human_size(obj_u64(row, "bytes"), done, sizeof(done));
	human_size(obj_u64(row, "length"), total, sizeof(total));
	snprintf(out, len, "%s/%s", done, total);
}

/* "ERRNO: cause" of an ended operation, "-" while it runs. */
static void fmt_cause(const json_t *row, const char *key, char *out, size_t len)
{
	const char *err = obj_str(row, "errno"), *cause = obj_str(row, "cause");
	char text[CELL_MAX];

	if (*err && *cause)
		snprintf(text, sizeof(text), "%s: %s", err, cause);
	else
		snprintf(text, sizeof(text), "%s", *err ? err : *cause ? cause : "-");
	esc(text, out, len);
}

/* ------------------------------------------------------------------------------------------ */
/* Tables */

struct col {
	const char *title;
	const char *key;
	void (*fmt)(const json_t *row, const char *key, char *out, size_t len);
	bool right; /* numbers line up on the right */
};

static const struct col region_cols[] = {
	{ "REGION", "region", fmt_text, true },
	{ "NAME", "name", fmt_text, false },
	{ "CLIENT", "client", fmt_text, true },
	{ "PID", "pid", fmt_text, true },
	{ "UID", "uid", fmt_text, true },
	{ "LENGTH", "length", fmt_size, true },
	{ "OPS", "ops", fmt_text, true },
	{ "REG_US", "register_us", fmt_text, true },
	{ NULL, NULL, NULL, false },
};

static const struct col op_cols[] = {
	{ "OP", "op", fmt_text, true },		{ "KIND", "kind", fmt_text, false },
	{ "STATE", "state", fmt_text, false },	{ "TRANSPORT", "transport", fmt_text, false },
	{ "PEER", "peer", fmt_text, false },	{ "BYTES/LENGTH", "length", fmt_progress, true },
	{ "AGE", "age_ms", fmt_age, true },	{ "CLIENT", "client", fmt_text, true },
	{ "CAUSE", "cause", fmt_cause, false }, { NULL, NULL, NULL, false },
};

static const struct col client_cols[] = {
	{ "CLIENT", "client", fmt_text, true }, { "NAME", "name", fmt_text, false },
	{ "PID", "pid", fmt_text, true },	{ "UID", "uid", fmt_text, true },
	{ "GID", "gid", fmt_text, true },	{ "REGIONS", "regions", fmt_text, true },
	{ "BYTES", "bytes", fmt_size, true },	{ "OPS", "ops", fmt_text, true },
	{ "AGE", "age_ms", fmt_age, true },	{ NULL, NULL, NULL, false },
};

/*
 * What a window row exposes: the owner's "region R [OFF, +LEN)", or an opener's "node N.. window W
 * (+LEN)".
 */
static void fmt_wrange(const json_t *row, const char *key, char *out, size_t len)
{
	char size[32], node[16];

	human_size(obj_u64(row, "length"), size, sizeof(size));
	if (strcmp(obj_str(row, "role"), "owner") == 0) {
		snprintf(out, len, "region %llu [%llu, +%s)",
			 (unsigned long long)obj_u64(row, "region"),
			 (unsigned long long)obj_u64(row, "offset"), size);
		return;
	}
	esc(obj_str(row, "owner_node"), node, 9);
	snprintf(out, len, "%s.. window %llu (%s)", node,
		 (unsigned long long)obj_u64(row, "owner_window"), size);
}

/* The owner's openers (count: each one's node and gets/puts in flight under --json). */
static void fmt_wopeners(const json_t *row, const char *key, char *out, size_t len)
{
	const json_t *o = json_object_get(row, key);

	if (json_is_array(o))
		snprintf(out, len, "%zu (%s)", json_array_size(o), obj_str(row, "openers_mode"));
	else
		snprintf(out, len, "-");
}

static const struct col window_cols[] = {
	{ "WINDOW", "window", fmt_text, true },
	{ "ROLE", "role", fmt_text, false },
	{ "CLIENT", "client", fmt_text, true },
	{ "RANGE", "length", fmt_wrange, false },
	{ "ACCESS", "access", fmt_text, false },
	{ "OPENERS", "openers", fmt_wopeners, false },
	{ "STATE", "state", fmt_text, false },
	{ "TRANSPORT", "transport", fmt_text, false },
	{ "INFLIGHT", "inflight", fmt_text, true },
	{ "GETS", "gets", fmt_text, true },
	{ "PUTS", "puts", fmt_text, true },
	{ "NOTIFIED", "notified", fmt_text, true },
	{ "AGE", "age_ms", fmt_age, true },
	{ "CAUSE", "cause", fmt_cause, false },
	{ NULL, NULL, NULL, false },
};

/* A node id's first 8 digits and "..": enough to tell a cluster's nodes apart in a table. */
static void fmt_node(const json_t *row, const char *key, char *out, size_t len)
{
	char node[16];

	esc(obj_str(row, key), node, 9);
	snprintf(out, len, "%s..", node);
}

/* A set's endpoint, "from ADDR" for "accepted from ADDR": the table stays within 100 columns. */
static void fmt_endpoint(const json_t *row, const char *key, char *out, size_t len)
{
	const char *ep = obj_str(row, key), *from = "accepted from ";
	char text[CELL_MAX];

	if (!strncmp(ep, from, strlen(from)))
		snprintf(text, sizeof(text), "from %s", ep + strlen(from));
	else
		snprintf(text, sizeof(text), "%s", *ep ? ep : "-");
	esc(text, out, len);
}

/*
 * The default peer table: the sets' counts, within 100 columns; the transfers running on each
 * and the read counts are in --json, the connections' TCP under --tcp.
 */
static const struct col peer_cols[] = {
	{ "NODE", "node", fmt_node, false },
	{ "TRANSPORT", "transport", fmt_text, false },
	{ "ENDPOINT", "endpoint", fmt_endpoint, false },
	{ "STATE", "state", fmt_text, false },
	{ "CONNS", "connections", fmt_text, true },
	{ "SENT", "bytes_sent", fmt_size, true },
	{ "RECEIVED", "bytes_received", fmt_size, true },
	{ "AGE", "age_ms", fmt_age, true },
	{ "IDLE", "idle_ms", fmt_age, true },
	{ NULL, NULL, NULL, false },
};

/* A byte count of a connection's "tcp", "-" where its kernel does not report it. */
static void fmt_tcp_size(const json_t *row, const char *key, char *out, size_t len)
{
	if (json_is_integer(json_object_get(row, key)))
		human_size(obj_u64(row, key), out, len);
	else
		snprintf(out, len, "-");
}

/* A connection's TCP state, "estab" for "established" as in ss(8): the usual one, kept short. */
static void fmt_tcp_state(const json_t *row, const char *key, char *out, size_t len)
{
	if (!strcmp(obj_str(row, key), "established"))
		snprintf(out, len, "estab");
	else
		fmt_text(row, key, out, len);
}

/* "RTT/RTTVAR" in ms, as ss(8) shows them. */
static void fmt_rtt(const json_t *row, const char *key, char *out, size_t len)
{
	if (!json_is_integer(json_object_get(row, "rtt_us")))
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.2f/%.2f", (double)obj_u64(row, "rtt_us") / 1000,
			 (double)obj_u64(row, "rttvar_us") / 1000);
}

/* The delivery rate (bytes/s), or what went wrong reading the connection's TCP. */
static void fmt_rate(const json_t *row, const char *key, char *out, size_t len)
{
	char size[32];

	if (*obj_str(row, "tcp_error")) {
		esc(obj_str(row, "tcp_error"), out, len);
	} else if (!json_is_integer(json_object_get(row, key))) {
		snprintf(out, len, "-");
	} else {
		human_size(obj_u64(row, key), size, sizeof(size));
		snprintf(out, len, "%s/s", size);
	}
}

/* xferctl peers --tcp: a row per connection (conn_rows()); the rest is in --json. */
static const struct col conn_cols[] = {
	{ "NODE", "node", fmt_node, false },
	{ "CONN", "id", fmt_text, true },
	{ "ROLE", "role", fmt_text, false },
	{ "CC", "cc", fmt_text, false },
	{ "STATE", "state", fmt_tcp_state, false },
	{ "RTT/VAR_MS", "rtt_us", fmt_rtt, true },
	{ "CWND", "snd_cwnd", fmt_text, true },
	{ "RETRANS", "total_retrans", fmt_text, true },
	{ "NOTSENT", "notsent_bytes", fmt_tcp_size, true },
	{ "ACKED", "bytes_acked", fmt_tcp_size, true },
	{ "RATE", "delivery_rate", fmt_rate, false },
	{ NULL, NULL, NULL, false },
};

/* Prints one line: the titles when @row is NULL, else @row's cells, padded to @width. */
static void table_line(const struct col *cols, const size_t *width, const json_t *row)
{
	char cell[CELL_MAX];
	int w;

	for (size_t i = 0; cols[i].title; i++) {
		if (row)
			cols[i].fmt(row, cols[i].key, cell, sizeof(cell));
		else
			snprintf(cell, sizeof(cell), "%s", cols[i].title);
		w = (int)width[i];
		if (!cols[i + 1].title && !cols[i].right)
			w = 0; /* no trailing blanks after the last column */
		printf("%s%*s", i ? "  " : "", cols[i].right ? w : -w, cell);
	}
	putchar('\n');
}

static void table_print(const struct col *cols, const json_t *rows)
{
	size_t width[MAX_COLS], i, r;
	char cell[CELL_MAX];
	json_t *row;

	for (i = 0; cols[i].title; i++)
		width[i] = strlen(cols[i].title);
	json_array_foreach(rows, r, row) {
		for (i = 0; cols[i].title; i++) {
			cols[i].fmt(row, cols[i].key, cell, sizeof(cell));
			if (strlen(cell) > width[i])
				width[i] = strlen(cell);
		}
	}
	table_line(cols, width, NULL);
	json_array_foreach(rows, r, row)
		table_line(cols, width, row);
}

/* Columns for rows whose shape xferctl does not know: every key of the first row, upper-cased. */
struct generic_cols {
	struct col cols[MAX_COLS + 1];
	char titles[MAX_COLS][32];
};

static void generic_cols_init(struct generic_cols *g, const json_t *first)
{
	const char *key;
	json_t *v;
	size_t n = 0;

	memset(g, 0, sizeof(*g));
	json_object_foreach((json_t *)first, key, v) {
		if (n == MAX_COLS)
			break;
		for (size_t i = 0; i + 1 < sizeof(g->titles[n]) && key[i]; i++)
			g->titles[n][i] = isprint((unsigned char)key[i]) ?
						  (char)toupper((unsigned char)key[i]) :
						  '?'; /* a title is a key the daemon chose */
		g->cols[n] = (struct col){ g->titles[n], key, fmt_text, json_is_integer(v) };
		n++;
	}
}

/* Tabulates result member @key with @cols (NULL: generic), or says there are none. */
static void render_rows(const json_t *result, const char *key, const struct col *cols)
{
	const json_t *rows = json_object_get(result, key);
	struct generic_cols g;

	if (!json_array_size(rows)) {
		printf("no %s\n", key);
		return;
	}
	if (!cols) {
		generic_cols_init(&g, json_array_get(rows, 0));
		cols = g.cols;
	}
	table_print(cols, rows);
}

/* ------------------------------------------------------------------------------------------ */
/* Listing commands */

struct ctl_cmd {
	const char *name;
	const char *args;
	const char *help;
	int nargs;
	int (*run)(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv);
	const char *method;	/* listings: the method to call */
	const char *key;	/* listings: the result's array */
	bool paged;		/* listings: the method answers by pages (PROTOCOL.md §7) */
	bool meta_out;		/* readable, writable: takes --meta-file */
	bool live;		/* top, watch: take --count and --once */
	const struct col *cols; /* listings: its columns (NULL: generic) */
	const char *brief;	/* listings: params that leave out what a table does not show */
	void (*render)(const struct ctl *ctl, const struct ctl_cmd *cmd, const json_t *result);
};

static void render_table(const struct ctl *ctl, const struct ctl_cmd *cmd, const json_t *result)
{
	render_rows(result, cmd->key, cmd->cols);
}

/*
 * A row per connection of every peer that lists them (TCP): its node, id and role beside the
 * members of its "tcp" (or its "tcp_error"). NULL when out of memory.
 */
static json_t *conn_rows(const json_t *peers)
{
	json_t *rows = json_array(), *peer, *conn, *row;
	size_t i, j;

	json_array_foreach(peers, i, peer) {
		json_array_foreach(json_object_get(peer, "conns"), j, conn) {
			row = json_deep_copy(json_object_get(conn, "tcp"));
			if (!row)
				row = json_object();
			if (!rows || !row || json_object_update_missing(row, conn) ||
			    json_object_set(row, "node", json_object_get(peer, "node"))) {
				json_decref(row);
				json_decref(rows);
				return NULL;
			}
			if (json_array_append_new(rows, row)) { /* (it took row, even failing) */
				json_decref(rows);
				return NULL;
			}
		}
	}
	return rows;
}

/* xferctl peers: the sets, or with --tcp their connections (PROTOCOL.md §7). */
static void render_peers(const struct ctl *ctl, const struct ctl_cmd *cmd, const json_t *result)
{
	json_t *rows;

	if (!ctl->tcp) {
		render_rows(result, cmd->key, cmd->cols);
		return;
	}
	rows = conn_rows(json_object_get(result, cmd->key));
	if (!rows)
		printf("out of memory\n");
	else if (!json_array_size(rows))
		printf("no TCP connections\n");
	else
		table_print(conn_cols, rows);
	json_decref(rows);
}

static void render_devices(const struct ctl *ctl, const struct ctl_cmd *cmd, const json_t *result)
{
	const char *rdma = obj_str(result, "rdma");
	char safe[CELL_MAX];

	if (*rdma)
		printf("rdma: %s\n", esc(rdma, safe, sizeof(safe)));
	render_rows(result, cmd->key, cmd->cols);
}

/* One counter of stats as text: durations and byte counts made readable. */
static void stat_value(const char *key, const json_t *v, char *out, size_t len)
{
	size_t klen = strlen(key);
	char human[32];

	if (json_is_integer(v) && klen > 3 && !strcmp(key + klen - 3, "_ms")) {
		human_duration((uint64_t)json_integer_value(v), out, len);
	} else if (json_is_integer(v) && strstr(key, "bytes") && json_integer_value(v) >= 1024) {
		human_size((uint64_t)json_integer_value(v), human, sizeof(human));
		snprintf(out, len, "%s (%lld)", human, (long long)json_integer_value(v));
	} else {
		fmt_value(v, out, len);
	}
}

static void render_stats(const struct ctl *ctl, const struct ctl_cmd *cmd, const json_t *result)
{
	char cell[CELL_MAX], safe[CELL_MAX];
	const char *key;
	size_t width = 0;
	json_t *v;

	json_object_foreach((json_t *)result, key, v)
		if (strlen(key) > width)
			width = strlen(key);
	json_object_foreach((json_t *)result, key, v) {
		stat_value(key, v, cell, sizeof(cell));
		printf("%-*s  %s\n", (int)width, esc(key, safe, sizeof(safe)), cell);
	}
}

/* Calls @method with @params (NULL: none) and parses its result. Returns a status and *out. */
static int ctl_call_json(struct ctl *ctl, const char *method, const char *params, json_t **out)
{
	char *text;
	int rc;

	rc = xfer_call(ctl->c, method, params, &text);
	if (rc < 0)
		return ctl_refused(ctl, rc);
	*out = json_loads(text, 0, NULL);
	free(text);
	if (!json_is_object(*out)) {
		json_decref(*out);
		return ctl_fail(ctl, EPROTO, "xferd's %s result is not a JSON object", method);
	}
	return EXIT_OK;
}

/* Into @buf: the params of a page's call, @more and the cursor @after (-1: none); NULL if neither. */
static const char *page_params(char *buf, size_t len, const char *more, json_int_t after)
{
	if (after < 0)
		snprintf(buf, len, "{%s}", more ? more : "");
	else
		snprintf(buf, len, "{%s%s\"after\": %lld}", more ? more : "", more ? ", " : "",
			 (long long)after);
	return more || after >= 0 ? buf : NULL;
}

/*
 * The whole listing: a paged method is called again from each page's "next" until a page has
 * none, and the pages' arrays are joined into the first page's object (without "next"). With
 * @brief, cmd->brief's params go with each call (for a table: cmd_list(), top).
 */
static int list_fetch(struct ctl *ctl, const struct ctl_cmd *cmd, bool brief, json_t **out)
{
	json_t *all = NULL, *page = NULL, *next;
	const char *more = brief ? cmd->brief : NULL;
	json_int_t after = -1;
	char params[128];
	int rc;

	for (;;) {
		rc = ctl_call_json(ctl, cmd->method,
				   page_params(params, sizeof(params), more, after), &page);
		if (rc)
			break;
		if (!cmd->paged) {
			*out = page;
			return EXIT_OK;
		}
		next = json_object_get(page, "next");
		if (!json_is_array(json_object_get(page, cmd->key)) ||
		    (next && (!json_is_integer(next) || json_integer_value(next) <= after))) {
			/* a cursor that does not advance would make this loop forever */
			json_decref(page);
			rc = ctl_fail(ctl, EPROTO, "xferd's %s page is malformed", cmd->method);
			break;
		}
		after = next ? json_integer_value(next) : -1;
		if (!all)
			all = json_incref(page);
		else if (json_array_extend(json_object_get(all, cmd->key),
					   json_object_get(page, cmd->key)))
			rc = ctl_fail(ctl, ENOMEM, "out of memory");
		json_decref(page);
		if (rc || after < 0)
			break;
	}
	if (rc) {
		json_decref(all);
		return rc;
	}
	json_object_del(all, "next");
	*out = all;
	return EXIT_OK;
}

static int cmd_list(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	json_t *result;
	int rc;

	rc = ctl_connect(ctl);
	if (!rc)
		rc = list_fetch(ctl, cmd, !ctl->json && !ctl->tcp, &result);
	if (rc)
		return rc;
	if (!ctl->json) {
		cmd->render(ctl, cmd, result);
		json_decref(result);
		return EXIT_OK;
	}
	rc = json_print(result);
	json_decref(result);
	return rc ? ctl_fail(ctl, ENOMEM, "out of memory") : EXIT_OK;
}

/* "USED of LIMIT" of stats.limits.@scope.@res into @out, "-" where the scope has no limit. */
static void limit_cell(const json_t *limits, const char *scope, const char *res, char *out,
		       size_t len)
{
	const json_t *e = json_object_get(json_object_get(limits, scope), res);
	char used[32], limit[32];

	if (!e) {
		snprintf(out, len, "-");
		return;
	}
	if (strcmp(res, "bytes") == 0 || strcmp(res, "queued_bytes") == 0) {
		human_size(obj_u64(e, "used"), used, sizeof(used));
		human_size(obj_u64(e, "limit"), limit, sizeof(limit));
	} else {
		snprintf(used, sizeof(used), "%llu", (unsigned long long)obj_u64(e, "used"));
		snprintf(limit, sizeof(limit), "%llu", (unsigned long long)obj_u64(e, "limit"));
	}
	snprintf(out, len, "%s of %s", used, limit);
}

/* Usage against each limit: global, and per uid for the caller's uid. */
static void status_print_limits(const json_t *s)
{
	static const char *const res[] = { "bytes", "regions", "ops",	       "clients",
					   "waits", "windows", "queued_bytes", "fds" };
	const json_t *limits = json_object_get(s, "limits");
	char uid[32], g[80], u[80];

	if (!json_is_object(limits))
		return; /* an older daemon */
	snprintf(uid, sizeof(uid), "uid %llu", (unsigned long long)obj_u64(limits, "uid"));
	printf("limits:   %-14s%-26s%s\n", "", "global", uid);
	for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
		limit_cell(limits, "global", res[i], g, sizeof(g));
		limit_cell(limits, "per_uid", res[i], u, sizeof(u));
		printf("          %-14s%-26s%s\n", res[i], g, u);
	}
}

/*
 * How peers authenticate: each cluster key's id, the one this daemon proves with first, and how
 * many peer sets proved it (while a key is rolled out, sets still on the old one).
 */
static void status_print_keys(const json_t *s)
{
	const json_t *keys = json_object_get(s, "cluster_keys"), *k;
	char id[CELL_MAX];
	size_t i;

	if (!json_is_array(keys))
		return; /* an older daemon */
	if (json_array_size(keys) == 0) {
		printf("peers:    not authenticated (no cluster key)\n");
		return;
	}
	printf("peers:    authenticated by cluster key");
	json_array_foreach(keys, i, k) {
		unsigned long long sets = obj_u64(k, "sets");
		printf("%s %s (%s, %llu set%s)", i ? "," : "",
		       esc(obj_str(k, "id"), id, sizeof(id)), i ? "accepted" : "proving", sets,
		       sets == 1 ? "" : "s");
	}
	printf("\n");
}

static void status_print(const struct ctl *ctl, const json_t *s)
{
	char up[32], reg[32], moved[32], daemon[CELL_MAX], node[CELL_MAX];

	human_duration(obj_u64(s, "uptime_ms"), up, sizeof(up));
	human_size(obj_u64(s, "registered_bytes"), reg, sizeof(reg));
	human_size(obj_u64(s, "bytes_moved"), moved, sizeof(moved));
	printf("daemon:   %s, up %s\n", esc(obj_str(s, "daemon"), daemon, sizeof(daemon)), up);
	printf("node:     %s (epoch %llu)\n", esc(obj_str(s, "node"), node, sizeof(node)),
	       (unsigned long long)obj_u64(s, "epoch"));
	printf("socket:   %s (this is client %llu)\n", ctl_socket_path(ctl),
	       (unsigned long long)xfer_client_id(ctl->c));
	printf("clients:  %llu\n", (unsigned long long)obj_u64(s, "clients"));
	printf("regions:  %llu, %s registered\n", (unsigned long long)obj_u64(s, "regions"), reg);
	printf("ops:      %llu (%llu active, %llu completed, %llu failed, %llu cancelled)\n",
	       (unsigned long long)obj_u64(s, "ops"), (unsigned long long)obj_u64(s, "ops_active"),
	       (unsigned long long)obj_u64(s, "ops_completed"),
	       (unsigned long long)obj_u64(s, "ops_failed"),
	       (unsigned long long)obj_u64(s, "ops_cancelled"));
	printf("moved:    %s\n", moved);
	status_print_keys(s);
	status_print_limits(s);
}

/* status --json: {"socket": PATH, "client": ID, "stats": <the stats result>}. */
static int status_print_json(const struct ctl *ctl, json_t *stats)
{
	json_t *out;
	int rc;

	out = json_pack("{s:s, s:I, s:O}", "socket", ctl_socket_path(ctl), "client",
			(json_int_t)xfer_client_id(ctl->c), "stats", stats);
	rc = out ? json_print(out) : -ENOMEM;
	json_decref(out);
	return rc ? ctl_fail(ctl, ENOMEM, "out of memory") : EXIT_OK;
}

static int cmd_status(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	json_t *stats;
	char *text;
	int rc;

	rc = ctl_call(ctl, "stats", &text);
	if (rc)
		return rc;
	stats = json_loads(text, 0, NULL);
	free(text);
	if (!json_is_object(stats)) {
		json_decref(stats);
		return ctl_fail(ctl, EPROTO, "xferd's stats result is not a JSON object");
	}
	if (ctl->json)
		rc = status_print_json(ctl, stats);
	else
		status_print(ctl, stats);
	json_decref(stats);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Files */

/* What a file that is not a regular one is, for an error. */
static const char *file_kind(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return "a directory";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFIFO:
		return "a FIFO";
	case S_IFSOCK:
		return "a socket";
	}
	return "of an unknown kind";
}

/*
 * Opens @path for reading; it must be a regular file of at least one byte. Opened O_NONBLOCK,
 * which a FIFO needs to be refused rather than wait for a writer, and cleared again.
 */
static int file_open_in(const struct ctl *ctl, const char *path, int *fd, size_t *size)
{
	struct stat st;
	int rc;

	*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0)
		return ctl_fail(ctl, errno, "cannot open %s: %s", path, strerror(errno));
	if (fstat(*fd, &st) < 0)
		rc = ctl_fail(ctl, errno, "cannot stat %s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = ctl_fail(ctl, EINVAL, "%s is %s, not a regular file (- reads stdin)", path,
			      file_kind(st.st_mode));
	else if (st.st_size == 0)
		rc = ctl_fail(ctl, EINVAL,
			      "%s is empty; a region must be at least 1 byte (a /proc or /sys file "
			      "shows size 0: give it on stdin, -)",
			      path);
	else if (fcntl(*fd, F_SETFL, 0) < 0)
		rc = ctl_fail(ctl, errno, "cannot clear O_NONBLOCK on %s: %s", path,
			      strerror(errno));
	else
		rc = EXIT_OK;
	if (rc) {
		close(*fd);
		*fd = -1;
		return rc;
	}
	*size = (size_t)st.st_size;
	return EXIT_OK;
}

static int write_all(int fd, const char *p, size_t len)
{
	size_t done = 0, want;
	ssize_t n;

	while (done < len) {
		want = len - done < CTL_IO_CHUNK ? len - done : CTL_IO_CHUNK;
		n = write(fd, p + done, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

/* Writes @buf to @path ("-": stdout). A partly written file is removed, not left behind. */
static int file_save(const struct ctl *ctl, const char *path, const struct xfer_buf *buf)
{
	bool is_stdout = !strcmp(path, "-");
	int fd, rc;

	fflush(stdout);
	fd = is_stdout ? STDOUT_FILENO : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return ctl_fail(ctl, errno, "cannot create %s: %s", path, strerror(errno));
	rc = write_all(fd, buf->addr, buf->length);
	if (!is_stdout && close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc)
		return EXIT_OK;
	if (!is_stdout)
		unlink(path);
	return ctl_fail(ctl, rc, "writing %s: %s", path, strerror(-rc));
}

/*
 * Reads one line of @fd (@what names it in messages): up to a newline or the end, without
 * that newline (or CR LF), at most XP_METADATA_MAX bytes. Byte by byte, so that nothing after
 * the line is consumed and `xferctl readable F | xferctl read - G` does not wait for readable
 * to exit. Returns a status and *out (free() it).
 */
static int meta_read_fd(const struct ctl *ctl, int fd, const char *what, char **out)
{
	size_t cap = XP_METADATA_MAX + 2, len = 0; /* the string, CR, and one byte too many */
	char *buf = malloc(cap + 1);
	bool newline = false;
	ssize_t n;

	if (!buf)
		return ctl_fail(ctl, ENOMEM, "out of memory");
	while (len < cap && (n = read(fd, buf + len, 1)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return ctl_fail(ctl, errno, "reading metadata from %s: %s", what,
					strerror(errno));
		}
		if (buf[len] == '\n') {
			newline = true;
			break;
		}
		len++;
	}
	if (newline && len && buf[len - 1] == '\r')
		len--;
	if (len == 0 || len > XP_METADATA_MAX || memchr(buf, '\0', len)) {
		free(buf);
		return ctl_fail(ctl, len ? EMSGSIZE : EINVAL,
				len == 0	      ? "no metadata in %s" :
				len > XP_METADATA_MAX ? "metadata in %s is larger than %d bytes" :
							"metadata in %s holds a NUL byte",
				what, XP_METADATA_MAX);
	}
	buf[len] = '\0';
	*out = buf;
	return EXIT_OK;
}

/*
 * The metadata of `read` and `write`: "@FILE" reads FILE, "-" stdin, anything else is the
 * metadata itself. Metadata is a capability (whoever holds it can take the bytes), and a
 * command line is readable by every local user in /proc/PID/cmdline, hence the warning.
 * Returns a status and *out (free() it).
 */
static int meta_get(const struct ctl *ctl, const char *arg, char **out)
{
	int fd, rc;

	if (!strcmp(arg, "-"))
		return meta_read_fd(ctl, STDIN_FILENO, "stdin", out);
	if (arg[0] == '@') {
		fd = open(arg + 1, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return ctl_fail(ctl, errno, "cannot open %s: %s", arg + 1, strerror(errno));
		rc = meta_read_fd(ctl, fd, arg + 1, out);
		close(fd);
		return rc;
	}
	fprintf(stderr,
		"xferctl: %s: warning: metadata on the command line is visible to every local "
		"user (/proc/PID/cmdline); pass @FILE or - (stdin)\n",
		ctl->cmd);
	if (strlen(arg) > XP_METADATA_MAX)
		return ctl_fail(ctl, EMSGSIZE, "metadata is larger than %d bytes", XP_METADATA_MAX);
	*out = strdup(arg);
	return *out ? EXIT_OK : ctl_fail(ctl, ENOMEM, "out of memory");
}

/*
 * Creates the --meta-file: a new file (an existing one is never overwritten: it could be a
 * link planted by someone else) that only its owner can read, whatever the umask: the
 * metadata in it is a capability. Returns a status and *fd.
 */
static int meta_file_create(const struct ctl *ctl, int *fd)
{
	*fd = -1;
	if (!ctl->meta_file)
		return EXIT_OK;
	*fd = open(ctl->meta_file, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (*fd < 0)
		return ctl_fail(ctl, errno, "cannot create %s: %s", ctl->meta_file,
				strerror(errno));
	if (fchmod(*fd, 0600) < 0) {
		int err = errno;

		close(*fd);
		*fd = -1;
		unlink(ctl->meta_file);
		return ctl_fail(ctl, err, "cannot chmod %s: %s", ctl->meta_file, strerror(err));
	}
	return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* File commands */

/* One file command: the file (or a buffer of @size bytes, for "-") and one operation on it. */
struct file_op {
	enum xfer_kind kind;
	size_t size;
	char *meta; /* read, write: the peer's metadata */
	const char *in_path;
	const char *out_path; /* the buffer is saved here on COMPLETE, or NULL */
	int meta_fd;	      /* readable, writable: --meta-file, or -1 for stdout */
	struct xfer_buf buf;
	uint64_t region;
	uint64_t op;
	/* File mode: the file itself is the region, no buffer between it and the daemon. */
	int file_fd;  /* the file registered, or -1 (a buffer, for "-") */
	char *in_mem; /* readable -, write -: stdin, read whole, copied into the buffer */
	/* read, writable into a file: file_fd is the landing file, named out_path on COMPLETE */
	bool landing;
	char *tmp_path; /* the landing file's name before the rename, or NULL while it has none */
	/* --direct: the body (a multiple of the direct I/O alignment) O_DIRECT, the tail not */
	int direct_fd;
	struct xfer_desc desc[2];
	unsigned ndesc; /* 0: one descriptor, all of region */
};

/* Starts the operation; a passive one prints its metadata on one line right away. */
static int file_op_start(struct ctl *ctl, struct file_op *fo)
{
	struct xfer_desc one = { .region = fo->region, .offset = 0, .length = fo->size };
	struct xfer_op_opts opts = { .timeout_ms = ctl->timeout_ms > 0 ? ctl->timeout_ms : 0 };
	const struct xfer_desc *d = fo->ndesc ? fo->desc : &one;
	unsigned nd = fo->ndesc ? fo->ndesc : 1;
	char *meta = NULL;
	int rc;

	if (fo->kind == XFER_READABLE)
		rc = xfer_readable(ctl->c, d, nd, &opts, &fo->op, &meta);
	else if (fo->kind == XFER_WRITABLE)
		rc = xfer_writable(ctl->c, d, nd, &opts, &fo->op, &meta);
	else if (fo->kind == XFER_READ)
		rc = xfer_read(ctl->c, fo->meta, d, nd, &opts, &fo->op);
	else
		rc = xfer_write(ctl->c, fo->meta, d, nd, &opts, &fo->op);
	if (rc < 0)
		return ctl_refused(ctl, rc);
	if (!meta)
		return EXIT_OK;
	if (fo->meta_fd >= 0) {
		rc = write_all(fo->meta_fd, meta, strlen(meta));
		if (!rc)
			rc = write_all(fo->meta_fd, "\n", 1);
		free(meta);
		return rc ? ctl_fail(ctl, rc, "writing %s: %s", ctl->meta_file, strerror(-rc)) :
			    EXIT_OK;
	}
	printf("%s\n", meta);
	free(meta);
	if (fflush(stdout) == EOF)
		return ctl_fail(ctl, errno, "cannot print the metadata: %s", strerror(errno));
	return EXIT_OK;
}

/* Every metadata line is out: closes the --meta-file (which passive_run() keeps otherwise). */
static int meta_finish(const struct ctl *ctl, struct file_op *fo)
{
	int rc = 0;

	if (fo->meta_fd < 0)
		return EXIT_OK;
	if (close(fo->meta_fd) < 0)
		rc = errno;
	fo->meta_fd = -1;
	return rc ? ctl_fail(ctl, rc, "writing %s: %s", ctl->meta_file, strerror(rc)) : EXIT_OK;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One progress line on stderr: bytes, rate, ETA, written over itself. */
static void progress_print(const struct xfer_op_info *st, uint64_t elapsed_ms)
{
	char done[32], total[32], rate[32];
	double secs = elapsed_ms / 1000.0;
	double bps = secs > 0 ? st->bytes / secs : 0;

	human_size(st->bytes, done, sizeof(done));
	human_size(st->length, total, sizeof(total));
	human_size((uint64_t)bps, rate, sizeof(rate));
	if (bps > 0 && st->bytes < st->length)
		fprintf(stderr, "\r\033[K%s of %s  %s/s  ETA %.0f s", done, total, rate,
			(st->length - st->bytes) / bps);
	else
		fprintf(stderr, "\r\033[K%s of %s  %s/s", done, total, rate);
}

/*
 * xfer_wait() that, on a terminal, shows a progress line once the operation has run a second
 * (waits of a second at a time, op.status between them). Same returns as xfer_wait().
 */
static int wait_progress(struct ctl *ctl, uint64_t op, int wait_ms, struct xfer_op_info *info)
{
	uint64_t t0 = now_ms();
	bool shown = false;
	int rc;

	if (!isatty(STDERR_FILENO))
		return xfer_wait(ctl->c, op, wait_ms, info);
	for (;;) {
		uint64_t elapsed = now_ms() - t0;
		int step = 1000;
		if (wait_ms >= 0 && elapsed >= (uint64_t)wait_ms) {
			rc = -ETIMEDOUT;
			break;
		}
		if (wait_ms >= 0 && (uint64_t)wait_ms - elapsed < (uint64_t)step)
			step = (int)((uint64_t)wait_ms - elapsed);
		rc = xfer_wait(ctl->c, op, step, info);
		if (rc != -ETIMEDOUT)
			break;
		struct xfer_op_info st;
		if (xfer_status(ctl->c, op, &st) == 0) {
			progress_print(&st, now_ms() - t0);
			shown = true;
		}
	}
	if (shown)
		fputs("\r\033[K", stderr);
	return rc;
}

/*
 * Waits for the operation to end. With --timeout the operation's own deadline ends it, so the
 * daemon's cause explains the failure; the wait's longer limit only guards against a daemon
 * that never answers.
 */
static int file_op_wait(struct ctl *ctl, const struct file_op *fo)
{
	int wait_ms = ctl->timeout_ms > 0 ? ctl->timeout_ms + CTL_WAIT_GRACE_MS : -1;
	unsigned long long op = fo->op;
	struct xfer_op_info info;
	char cause[sizeof(info.cause) * 4];
	int rc;

	rc = wait_progress(ctl, fo->op, wait_ms, &info);
	if (rc == -ETIMEDOUT)
		return ctl_fail(ctl, rc, "operation %llu did not end within %d ms", op, wait_ms);
	if (rc < 0)
		return ctl_refused(ctl, rc);
	if (info.state == XFER_COMPLETE)
		return EXIT_OK;
	return ctl_fail(ctl, info.error, "operation %llu %s: %s", op, xfer_state_name(info.state),
			esc(info.cause[0] ? info.cause : xfer_strerror(info.error), cause,
			    sizeof(cause)));
}

static int file_op_run(struct ctl *ctl, struct file_op *fo)
{
	int rc;

	if (ctl->direct)
		return ctl_fail(ctl, EINVAL,
				"--direct is for files registered themselves; - (stdin, stdout) "
				"goes through a memory buffer");
	rc = ctl_connect(ctl);
	if (rc)
		return rc;
	rc = xfer_buf_alloc(fo->size, &fo->buf);
	if (rc < 0)
		return ctl_fail(ctl, rc, "cannot allocate a %zu-byte buffer: %s", fo->size,
				xfer_strerror(rc));
	if (fo->in_mem)
		memcpy(fo->buf.addr, fo->in_mem, fo->size);
	rc = xfer_region_register(ctl->c, fo->buf.fd, 0, 0, CTL_CLIENT_NAME, &fo->region);
	if (rc < 0) {
		rc = ctl_refused(ctl, rc);
		goto out_free;
	}
	rc = file_op_start(ctl, fo);
	if (!rc)
		rc = meta_finish(ctl, fo);
	if (!rc)
		rc = file_op_wait(ctl, fo);
	if (!rc && fo->out_path)
		rc = file_save(ctl, fo->out_path, &fo->buf);
out_free:
	xfer_buf_free(&fo->buf);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* File mode: the file is the region (xfer_region_register_file), no buffer in between */

#define CTL_TMPFS_MAGIC 0x01021994 /* linux/magic.h TMPFS_MAGIC */

/*
 * Sizes a new landing file to @size bytes. Allocated at once with fallocate where blocks are
 * cheap to reserve (measured on ext4: 1 GiB in ~3 ms, and the daemon's writes into allocated
 * blocks then take 0.15 s instead of 0.25 s, since no delayed allocation is reserved page by
 * page; a full filesystem also shows now, before any byte moves). tmpfs is only truncated: its
 * fallocate zeroes every page (~0.25 s per GiB) that the transfer then writes again. Returns 0
 * or -errno.
 */
static int target_size(int fd, size_t size)
{
	struct statfs sfs;
	bool tmpfs = fstatfs(fd, &sfs) == 0 && sfs.f_type == CTL_TMPFS_MAGIC;

	if (!tmpfs) {
		if (fallocate(fd, 0, 0, (off_t)size) == 0)
			return 0;
		if (errno == ENOSPC || errno == EFBIG || errno == EDQUOT)
			return -errno;
		/* EOPNOTSUPP and the like: a file system without it is sized as before */
	}
	return ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
}

/* Writes into @buf the name by which this process reaches @fd, /proc/self/fd/FD. */
static void fd_proc_path(int fd, char buf[static 32])
{
	snprintf(buf, 32, "/proc/self/fd/%d", fd);
}

/* open()s the directory that holds @path with @flags and @mode. Returns the fd or -errno. */
static int open_dir_of(const char *path, int flags, mode_t mode)
{
	char *copy = strdup(path);

	if (!copy)
		return -ENOMEM;
	int fd = open(dirname(copy), flags, mode);
	int err = errno;
	free(copy);
	return fd < 0 ? -err : fd;
}

/*
 * A new file of mode 0600 with no name (O_TMPFILE) in the directory of @out_path. Returns the
 * fd, -EOPNOTSUPP where that cannot be done (file system, kernel, or no /proc to link it
 * through at the end), or another -errno.
 */
static int landing_open_unnamed(const char *out_path)
{
	char proc[32];
	int fd = open_dir_of(out_path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0)
		return fd == -EISDIR ? -EOPNOTSUPP : fd; /* EISDIR: a kernel without O_TMPFILE */
	fd_proc_path(fd, proc);
	if (access(proc, F_OK) < 0) {
		close(fd);
		return -EOPNOTSUPP;
	}
	return fd;
}

/* The named landing file, for a file system without O_TMPFILE. Returns the fd or -errno. */
static int landing_open_named(struct file_op *fo)
{
	if (asprintf(&fo->tmp_path, "%s.xferctl-XXXXXX", fo->out_path) < 0) {
		fo->tmp_path = NULL;
		return -ENOMEM;
	}
	int fd = mkostemp(fo->tmp_path, O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		free(fo->tmp_path);
		fo->tmp_path = NULL;
		return -err;
	}
	return fd;
}

/*
 * The landing file replaces OUTFILE at the end, as mv would: an existing OUTFILE that is not
 * a regular file (or a symlink, which is replaced itself) is refused before any byte moves,
 * not after the transfer (a directory), nor replaced (a device: xferctl read @M /dev/null as
 * root). Returns a status.
 */
static int target_check(const struct ctl *ctl, const char *out_path)
{
	struct stat st;

	if (lstat(out_path, &st) < 0)
		return errno == ENOENT ? EXIT_OK :
					 ctl_fail(ctl, errno, "cannot look at %s: %s", out_path,
						  strerror(errno));
	if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))
		return EXIT_OK;
	return ctl_fail(ctl, S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
			"%s is %s: OUTFILE must be a regular file, which the bytes replace once "
			"they are all in (- writes to stdout)",
			out_path, file_kind(st.st_mode));
}

/*
 * A target's landing file, @fo->size bytes of mode 0600 in out_path's directory, which becomes
 * out_path only once the operation is COMPLETE (target_commit). Where the file system has
 * O_TMPFILE it has no name until then, so an xferctl killed mid-transfer leaves nothing behind
 * (the inode goes with the last fd, ours or the daemon's); elsewhere it is a named
 * OUTFILE.xferctl-XXXXXX, removed on failure but left behind by a SIGKILL.
 */
static int target_create(const struct ctl *ctl, struct file_op *fo)
{
	int rc = target_check(ctl, fo->out_path);

	if (rc)
		return rc;
	fo->landing = true;
	fo->file_fd = landing_open_unnamed(fo->out_path);
	if (fo->file_fd == -EOPNOTSUPP)
		fo->file_fd = landing_open_named(fo);
	if (fo->file_fd < 0) {
		int err = -fo->file_fd;
		fo->file_fd = -1;
		return ctl_fail(ctl, err, "cannot create a file beside %s: %s", fo->out_path,
				strerror(err));
	}
	rc = target_size(fo->file_fd, fo->size);
	if (rc < 0)
		return ctl_fail(ctl, -rc, "cannot size the file for %s to %zu bytes: %s",
				fo->out_path, fo->size, strerror(-rc));
	return EXIT_OK;
}

/*
 * Gives the unnamed landing file a fresh name beside out_path, OUTFILE.xferctl-XXXXXX, so that
 * rename() then replaces out_path in one step. The link goes through /proc/self/fd:
 * linkat(AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH. Returns a status.
 */
static int landing_link(const struct ctl *ctl, struct file_op *fo)
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz"
				       "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	char proc[32], suffix[7];
	uint8_t rnd[6];

	fd_proc_path(fo->file_fd, proc);
	for (int attempt = 0; attempt < 100; attempt++) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return ctl_fail(ctl, errno, "getrandom: %s", strerror(errno));
		for (size_t i = 0; i < sizeof(rnd); i++)
			suffix[i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
		suffix[6] = '\0';
		if (asprintf(&fo->tmp_path, "%s.xferctl-%s", fo->out_path, suffix) < 0) {
			fo->tmp_path = NULL;
			return ctl_fail(ctl, ENOMEM, "out of memory");
		}
		if (linkat(AT_FDCWD, proc, AT_FDCWD, fo->tmp_path, AT_SYMLINK_FOLLOW) == 0)
			return EXIT_OK;
		int err = errno;
		free(fo->tmp_path);
		fo->tmp_path = NULL;
		if (err != EEXIST)
			return ctl_fail(ctl, err, "cannot give the file for %s a name: %s",
					fo->out_path, strerror(err));
	}
	return ctl_fail(ctl, EEXIST, "cannot give the file for %s a name: 100 names taken",
			fo->out_path);
}

/* fsync()s the directory that holds @path. Returns 0 or -errno. */
static int dir_sync(const char *path)
{
	int fd = open_dir_of(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);

	if (fd < 0)
		return fd;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

/*
 * The operation is COMPLETE: the landing file becomes out_path (named first if it has no
 * name). Returns a status.
 */
static int target_commit(const struct ctl *ctl, struct file_op *fo)
{
	if (fo->direct_fd >= 0 && close(fo->direct_fd) < 0) {
		fo->direct_fd = -1;
		return ctl_fail(ctl, errno, "writing %s: %s", fo->out_path, strerror(errno));
	}
	fo->direct_fd = -1;
	if (!fo->tmp_path) {
		int rc = landing_link(ctl, fo);
		if (rc)
			return rc;
	}
	if (close(fo->file_fd) < 0) {
		fo->file_fd = -1;
		return ctl_fail(ctl, errno, "writing %s: %s", fo->out_path, strerror(errno));
	}
	fo->file_fd = -1;
	if (rename(fo->tmp_path, fo->out_path) < 0)
		return ctl_fail(ctl, errno, "cannot rename %s to %s: %s", fo->tmp_path,
				fo->out_path, strerror(errno));
	free(fo->tmp_path);
	fo->tmp_path = NULL;
	/* --sync: the daemon synced the bytes; the new name lives in the directory */
	int rc = ctl->sync ? dir_sync(fo->out_path) : 0;
	if (rc < 0)
		return ctl_fail(ctl, -rc, "cannot sync the directory of %s: %s", fo->out_path,
				strerror(-rc));
	return EXIT_OK;
}

/* Closes the file; a landing file that was not committed is removed. */
static void file_mode_cleanup(struct file_op *fo)
{
	if (fo->file_fd >= 0)
		close(fo->file_fd);
	fo->file_fd = -1;
	if (fo->direct_fd >= 0)
		close(fo->direct_fd);
	fo->direct_fd = -1;
	if (fo->tmp_path)
		unlink(fo->tmp_path);
	free(fo->tmp_path);
	fo->tmp_path = NULL;
}

/* readable --readers N: N operations over the one region, each metadata on its line. */
static int fanout_run(struct ctl *ctl, struct file_op *fo)
{
	uint64_t *ops = calloc((size_t)ctl->readers, sizeof(*ops));
	int rc = ops ? EXIT_OK : ctl_fail(ctl, ENOMEM, "out of memory");
	int started = 0;

	for (; !rc && started < ctl->readers; started++) {
		rc = file_op_start(ctl, fo);
		/* (the analyzer does not follow ctl_fail(), variadic, which returns EXIT_FAILED) */
		/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): no ops: rc is set */
		ops[started] = fo->op;
	}
	if (!rc)
		rc = meta_finish(ctl, fo);
	for (int i = 0; !rc && i < started; i++) {
		fo->op = ops[i];
		rc = file_op_wait(ctl, fo);
	}
	free(ops);
	return rc;
}

/*
 * --direct: the file again, opened O_DIRECT (read-only for a source, read-write for a landing
 * file: the daemon reads back the edge blocks of unaligned pieces). Returns a status.
 */
static int direct_open(const struct ctl *ctl, struct file_op *fo, uint32_t *align)
{
	const char *path = fo->landing ? fo->out_path : fo->in_path;
	char proc[32];
	struct statx stx;

	/* the landing file may have no name yet: opened again through this process's fd */
	fd_proc_path(fo->file_fd, proc);
	fo->direct_fd = open(fo->landing ? proc : path,
			     (fo->landing ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
	if (fo->direct_fd < 0)
		return ctl_fail(ctl, errno, "--direct: cannot open %s with O_DIRECT: %s", path,
				strerror(errno));
	if (statx(fo->direct_fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) < 0 ||
	    !(stx.stx_mask & STATX_DIOALIGN) || stx.stx_dio_offset_align == 0)
		return ctl_fail(ctl, EINVAL,
				"--direct: the file system of %s reports no direct I/O alignment "
				"(statx STATX_DIOALIGN)",
				path);
	*align = stx.stx_dio_offset_align;
	return EXIT_OK;
}

/*
 * --direct: O_DIRECT needs offsets and lengths in multiples of the file system's alignment,
 * so the file's largest such body is one region on an O_DIRECT fd and the tail (under one
 * block) a second region on the plain fd; the operation takes both as two descriptors.
 * Returns 0, -errno from the daemon, or a status (> 0).
 */
static int direct_regions(struct ctl *ctl, struct file_op *fo)
{
	unsigned flags = fo->landing && ctl->sync ? XFER_FILE_SYNC : 0;
	uint32_t align;
	int rc = direct_open(ctl, fo, &align);

	if (rc)
		return rc;
	/* (direct_open() sets align when it returns 0: its failures are ctl_fail()'s 1) */
	/* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
	size_t body = fo->size / align * align;
	if (body) {
		rc = xfer_region_register_file(ctl->c, fo->direct_fd, 0, body, flags,
					       CTL_CLIENT_NAME, &fo->region);
		if (rc < 0)
			return rc;
		fo->desc[fo->ndesc++] = (struct xfer_desc){ .region = fo->region, .length = body };
	}
	if (body < fo->size) {
		uint64_t tail;
		rc = xfer_region_register_file(ctl->c, fo->file_fd, body, fo->size - body, flags,
					       CTL_CLIENT_NAME, &tail);
		if (rc < 0)
			return rc;
		fo->desc[fo->ndesc++] =
			(struct xfer_desc){ .region = tail, .length = fo->size - body };
	}
	return 0;
}

/* Runs @fo with fo->file_fd as its region: one operation, or --readers of them. */
static int file_mode_run(struct ctl *ctl, struct file_op *fo)
{
	int rc = ctl_connect(ctl);

	if (rc)
		return rc;
	rc = ctl->direct ? direct_regions(ctl, fo) :
			   xfer_region_register_file(ctl->c, fo->file_fd, 0, fo->size,
						     fo->landing && ctl->sync ? XFER_FILE_SYNC : 0,
						     CTL_CLIENT_NAME, &fo->region);
	if (rc < 0)
		return ctl_refused(ctl, rc);
	if (rc > 0)
		return rc;
	if (fo->kind == XFER_READABLE && ctl->readers > 1)
		return fanout_run(ctl, fo);
	rc = file_op_start(ctl, fo);
	if (!rc)
		rc = meta_finish(ctl, fo);
	if (!rc)
		rc = file_op_wait(ctl, fo);
	if (!rc && fo->landing)
		rc = target_commit(ctl, fo);
	return rc;
}

/* A target in file mode: its landing file, the operation, the rename or the removal. */
static int target_run(struct ctl *ctl, struct file_op *fo)
{
	int rc = target_create(ctl, fo);

	if (!rc)
		rc = file_mode_run(ctl, fo);
	file_mode_cleanup(fo);
	return rc;
}

/* Parses SIZE: a positive byte count with an optional K, M or G (KiB, MiB, GiB) suffix. */
static int parse_size(const char *s, size_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -errno;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	}
	end += shift ? 1 : 0;
	if (*end || v == 0)
		return -EINVAL;
	if (v > (SIZE_MAX >> shift))
		return -ERANGE;
	*out = (size_t)(v << shift);
	return 0;
}

/* Runs a passive @fo with its --meta-file; a file that never got its metadata is removed. */
static int passive_run(struct ctl *ctl, struct file_op *fo)
{
	int rc = meta_file_create(ctl, &fo->meta_fd);

	if (rc)
		return rc;
	if (fo->file_fd >= 0)
		rc = file_mode_run(ctl, fo);
	else if (fo->out_path && strcmp(fo->out_path, "-") != 0)
		rc = target_run(ctl, fo);
	else
		rc = file_op_run(ctl, fo);
	if (fo->meta_fd >= 0) {
		close(fo->meta_fd);
		unlink(ctl->meta_file);
	}
	return rc;
}

/* INFILE "-": stdin read to its end (a pipe has no size to register), for a buffer. */
static int stdin_load(const struct ctl *ctl, struct file_op *fo)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	while (buf) {
		if (len == cap) {
			char *bigger = realloc(buf, cap * 2);
			if (!bigger)
				break;
			buf = bigger;
			cap *= 2;
		}
		n = read(STDIN_FILENO, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return ctl_fail(ctl, errno, "reading stdin: %s", strerror(errno));
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (!buf || len == cap) {
		free(buf);
		return ctl_fail(ctl, ENOMEM, "out of memory reading stdin");
	}
	if (len == 0) {
		free(buf);
		return ctl_fail(ctl, EINVAL, "stdin is empty; a region must be at least 1 byte");
	}
	fo->in_mem = buf;
	fo->size = len;
	return EXIT_OK;
}

/* The file itself is registered: the metadata is out at once, no copy into a buffer. */
static int cmd_readable(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	struct file_op fo = {
		.kind = XFER_READABLE,
		.in_path = argv[0],
		.file_fd = -1,
		.direct_fd = -1,
	};
	int rc;

	if (strcmp(fo.in_path, "-") == 0)
		rc = stdin_load(ctl, &fo);
	else
		rc = file_open_in(ctl, fo.in_path, &fo.file_fd, &fo.size);
	if (rc)
		return rc;
	rc = passive_run(ctl, &fo);
	if (fo.file_fd >= 0)
		close(fo.file_fd);
	if (fo.direct_fd >= 0)
		close(fo.direct_fd);
	free(fo.in_mem);
	return rc;
}

static int cmd_writable(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	struct file_op fo = {
		.kind = XFER_WRITABLE,
		.out_path = argv[1],
		.file_fd = -1,
		.direct_fd = -1,
	};

	if (parse_size(argv[0], &fo.size) < 0) {
		fprintf(stderr,
			"xferctl: writable: bad SIZE '%s' (a positive number of bytes, "
			"optionally with K, M or G)\n",
			argv[0]);
		return EXIT_USAGE;
	}
	return passive_run(ctl, &fo);
}

/* The total length of readable or writable metadata, which sizes the buffer of `read`. */
static int meta_total(const struct ctl *ctl, const char *meta, size_t *total)
{
	struct xp_meta m;
	char err[256];
	int rc;

	rc = xp_meta_decode(meta, &m, err, sizeof(err));
	if (rc < 0)
		return ctl_fail(ctl, rc, "%s", rc == -ENOMEM ? "out of memory" : err);
	rc = m.total > SIZE_MAX ? -EFBIG : 0;
	*total = (size_t)m.total;
	xp_meta_fini(&m);
	if (rc < 0)
		return ctl_fail(ctl, rc, "metadata names more bytes than this machine can map");
	return EXIT_OK;
}

static int cmd_read(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	struct file_op fo = {
		.kind = XFER_READ,
		.out_path = argv[1],
		.meta_fd = -1,
		.file_fd = -1,
		.direct_fd = -1,
	};
	int rc;

	rc = meta_get(ctl, argv[0], &fo.meta);
	if (rc)
		return rc;
	rc = meta_total(ctl, fo.meta, &fo.size);
	if (!rc && strcmp(fo.out_path, "-") != 0)
		rc = target_run(ctl, &fo);
	else if (!rc)
		rc = file_op_run(ctl, &fo); /* stdout: through a buffer */
	free(fo.meta);
	return rc;
}

/* The buffer has INFILE's size; the daemon refuses it (EMSGSIZE) when the peer's differs. */
static int cmd_write(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	struct file_op fo = {
		.kind = XFER_WRITE, .in_path = argv[1], .meta_fd = -1, .direct_fd = -1
	};
	int rc;

	rc = meta_get(ctl, argv[0], &fo.meta);
	if (rc)
		return rc;
	fo.file_fd = -1;
	if (strcmp(fo.in_path, "-") == 0 && !strcmp(argv[0], "-"))
		rc = ctl_fail(ctl, EINVAL, "metadata and INFILE cannot both come from stdin");
	else if (strcmp(fo.in_path, "-") == 0)
		rc = stdin_load(ctl, &fo);
	else
		rc = file_open_in(ctl, fo.in_path, &fo.file_fd, &fo.size);
	if (!rc && fo.file_fd >= 0)
		rc = file_mode_run(ctl, &fo);
	else if (!rc)
		rc = file_op_run(ctl, &fo);
	if (fo.file_fd >= 0)
		close(fo.file_fd);
	if (fo.direct_fd >= 0)
		close(fo.direct_fd);
	free(fo.in_mem);
	free(fo.meta);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Command table and main */

/* ------------------------------------------------------------------------------------------ */
/* Live views: top (a screen refreshed once a second) and watch (one line per event) */

#define TOP_PERIOD_MS 1000
#define TOP_MAX_CLIENTS 10
#define WATCH_POLL_MS 1000

static const struct ctl_cmd *cmd_find(const char *name);

/* Set by SIGINT/SIGTERM: the live views end their loop and restore the terminal. */
static volatile sig_atomic_t live_stop;

static void live_signal(int sig)
{
	live_stop = 1;
}

/* SIGINT and SIGTERM end the loop; without SA_RESTART, so that poll() returns at once. */
static void live_signals(void)
{
	struct sigaction sa = { .sa_handler = live_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

static uint64_t live_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* "HH:MM:SS.mmm" of the wall clock. */
static void live_clock(char *out, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	snprintf(out, len, "%02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min, tm.tm_sec,
		 ts.tv_nsec / 1000000);
}

/* One sample of the daemon for top: its counters and listings, parsed. */
struct top_sample {
	json_t *stats, *peers, *ops, *clients;
	uint64_t at_ms;
};

static void top_sample_clear(struct top_sample *s)
{
	json_decref(s->stats);
	json_decref(s->peers);
	json_decref(s->ops);
	json_decref(s->clients);
	memset(s, 0, sizeof(*s));
}

/* Fetches one sample. Returns an exit status (the message printed). */
static int top_sample_take(struct ctl *ctl, struct top_sample *s)
{
	int rc;

	memset(s, 0, sizeof(*s));
	rc = ctl_call_json(ctl, "stats", NULL, &s->stats);
	if (!rc)
		rc = list_fetch(ctl, cmd_find("peers"), true, &s->peers);
	if (!rc)
		rc = list_fetch(ctl, cmd_find("ops"), true, &s->ops);
	if (!rc)
		rc = list_fetch(ctl, cmd_find("clients"), true, &s->clients);
	s->at_ms = live_now_ms();
	if (rc)
		top_sample_clear(s);
	return rc;
}

/* Bytes per second of the change from @before to @after over @ms; 0 when it went down. */
static uint64_t top_rate(uint64_t before, uint64_t after, uint64_t ms)
{
	return after > before && ms ? (after - before) * 1000 / ms : 0;
}

/* The entry of @rows whose @key equals @v (a string), or NULL. */
static const json_t *top_find_peer(const json_t *rows, const json_t *like)
{
	size_t i;
	json_t *r;

	json_array_foreach(rows, i, r)
		if (!strcmp(obj_str(r, "node"), obj_str(like, "node")) &&
		    !strcmp(obj_str(r, "transport"), obj_str(like, "transport")) &&
		    !strcmp(obj_str(r, "endpoint"), obj_str(like, "endpoint")))
			return r;
	return NULL;
}

/* The entry of @rows whose integer @key is @id, or NULL. */
static const json_t *top_find_id(const json_t *rows, const char *key, uint64_t id)
{
	size_t i;
	json_t *r;

	json_array_foreach(rows, i, r)
		if (obj_u64(r, key) == id)
			return r;
	return NULL;
}

static void top_header(const struct top_sample *s)
{
	const json_t *st = s->stats;
	char node[16], up[32], safe[CELL_MAX], clock[64];

	snprintf(node, sizeof(node), "%.8s", obj_str(st, "node"));
	human_duration(obj_u64(st, "uptime_ms"), up, sizeof(up));
	live_clock(clock, sizeof(clock));
	printf("%s  node %s  up %s  clients %llu  regions %llu  ops %llu (%llu active)  %.8s\n",
	       esc(obj_str(st, "daemon"), safe, sizeof(safe)), node, up,
	       (unsigned long long)obj_u64(st, "clients"),
	       (unsigned long long)obj_u64(st, "regions"), (unsigned long long)obj_u64(st, "ops"),
	       (unsigned long long)obj_u64(st, "ops_active"), clock);
}

/* Throughput per peer set and transport, and of same-node copies (from the operations). */
static void top_throughput(const struct top_sample *a, const struct top_sample *b)
{
	const json_t *peers = json_object_get(b->peers, "peers"), *old, *op, *was;
	uint64_t ms = b->at_ms - a->at_ms, local = 0;
	char peer[24], ep[64], out[32], in[32], safe[CELL_MAX];
	size_t i;
	json_t *p;

	printf("\nTHROUGHPUT\n  %-16s %-9s %-30s %12s %12s\n", "PEER", "TRANSPORT", "ENDPOINT",
	       "SENT/s", "RECEIVED/s");
	json_array_foreach(peers, i, p) {
		old = top_find_peer(json_object_get(a->peers, "peers"), p);
		human_size(top_rate(old ? obj_u64(old, "bytes_sent") : 0, obj_u64(p, "bytes_sent"),
				    ms),
			   out, sizeof(out));
		human_size(top_rate(old ? obj_u64(old, "bytes_received") : 0,
				    obj_u64(p, "bytes_received"), ms),
			   in, sizeof(in));
		snprintf(peer, sizeof(peer), "%.16s", esc(obj_str(p, "node"), safe, sizeof(safe)));
		snprintf(ep, sizeof(ep), "%.30s", esc(obj_str(p, "endpoint"), safe, sizeof(safe)));
		printf("  %-16s %-9s %-30s %10s/s %10s/s\n", peer,
		       esc(obj_str(p, "transport"), safe, sizeof(safe)), ep, out, in);
	}
	json_array_foreach(json_object_get(b->ops, "ops"), i, op) {
		if (strcmp(obj_str(op, "transport"), "local"))
			continue;
		was = top_find_id(json_object_get(a->ops, "ops"), "op", obj_u64(op, "op"));
		local += obj_u64(op, "bytes") - (was ? obj_u64(was, "bytes") : 0);
	}
	human_size(local * 1000 / (ms ? ms : 1), out, sizeof(out));
	printf("  %-16s %-9s %-30s %10s/s\n", "(this node)", "local", "-", out);
	human_size(top_rate(obj_u64(a->stats, "bytes_moved"), obj_u64(b->stats, "bytes_moved"), ms),
		   out, sizeof(out));
	printf("  %-16s %-9s %-30s %10s/s  (ended operations, every transport)\n", "all", "", "",
	       out);
}

/* How many listed operations are in each state, and the daemon's counters of ends. */
static void top_states(const struct top_sample *b)
{
	static const char *const states[] = { "INITIALIZED", "IN_PROGRESS", "COMPLETE", "CANCELLED",
					      "ERRORED" };
	unsigned long long n[5] = { 0 };
	size_t i;
	json_t *op;

	json_array_foreach(json_object_get(b->ops, "ops"), i, op)
		for (int s = 0; s < 5; s++)
			if (!strcmp(obj_str(op, "state"), states[s]))
				n[s]++;
	printf("\nOPERATIONS\n ");
	for (int s = 0; s < 5; s++)
		printf(" %s %llu", states[s], n[s]);
	printf("\n  since start: %llu completed, %llu failed, %llu cancelled\n",
	       (unsigned long long)obj_u64(b->stats, "ops_completed"),
	       (unsigned long long)obj_u64(b->stats, "ops_failed"),
	       (unsigned long long)obj_u64(b->stats, "ops_cancelled"));
}

struct top_client {
	uint64_t id, moved;
	const json_t *row; /* list.clients entry, or NULL */
};

static int top_client_cmp(const void *x, const void *y)
{
	const struct top_client *a = x, *b = y;

	return a->moved != b->moved ? (a->moved < b->moved ? 1 : -1) :
				      (a->id > b->id) - (a->id < b->id);
}

/* The clients with the most bytes moved by their listed operations, then registered bytes. */
static void top_clients(const struct top_sample *b)
{
	const json_t *rows = json_object_get(b->clients, "clients"), *ops;
	size_t n = json_array_size(rows), i, k;
	struct top_client *tc = calloc(n + 1, sizeof(*tc));
	char moved[32], reg[32], name[CELL_MAX];
	json_t *r, *op;

	if (!tc)
		return;
	json_array_foreach(rows, i, r)
		tc[i] = (struct top_client){ obj_u64(r, "client"), 0, r };
	ops = json_object_get(b->ops, "ops");
	json_array_foreach(ops, i, op)
		for (k = 0; k < n; k++)
			if (tc[k].id == obj_u64(op, "client"))
				tc[k].moved += obj_u64(op, "bytes");
	qsort(tc, n, sizeof(*tc), top_client_cmp);
	printf("\nTOP CLIENTS (by bytes moved in their listed operations)\n  %6s %-20s %8s %6s %5s %10s %10s\n",
	       "CLIENT", "NAME", "PID", "UID", "OPS", "MOVED", "REGISTERED");
	for (k = 0; k < n && k < TOP_MAX_CLIENTS; k++) {
		human_size(tc[k].moved, moved, sizeof(moved));
		human_size(obj_u64(tc[k].row, "bytes"), reg, sizeof(reg));
		esc(obj_str(tc[k].row, "name"), name, sizeof(name));
		printf("  %6llu %-20.20s %8llu %6llu %5llu %10s %10s\n",
		       (unsigned long long)tc[k].id, name,
		       (unsigned long long)obj_u64(tc[k].row, "pid"),
		       (unsigned long long)obj_u64(tc[k].row, "uid"),
		       (unsigned long long)obj_u64(tc[k].row, "ops"), moved, reg);
	}
	if (n > TOP_MAX_CLIENTS)
		printf("  (%zu more)\n", n - TOP_MAX_CLIENTS);
	free(tc);
}

/* One frame: what changed from sample @a to sample @b. */
static void top_frame(const struct top_sample *a, const struct top_sample *b, bool clear)
{
	if (clear)
		fputs("\033[H\033[2J", stdout); /* home, clear screen */
	top_header(b);
	top_throughput(a, b);
	top_states(b);
	top_clients(b);
	if (clear)
		printf("\n(q or Ctrl-C quits)");
	else
		putchar('\n');
	fflush(stdout);
}

/* The terminal as it was, restored on the way out; in.fd -1: stdin is not a terminal. */
struct top_tty {
	int fd;
	struct termios saved;
};

/* Turns off line buffering and echo on a terminal stdin, so that a lone q is read at once. */
static void top_tty_raw(struct top_tty *t)
{
	struct termios raw;

	t->fd = -1;
	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &t->saved) < 0)
		return;
	raw = t->saved;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* ISIG stays: Ctrl-C is SIGINT */
	raw.c_cc[VMIN] = 0;
	raw.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
		t->fd = STDIN_FILENO;
}

static void top_tty_restore(const struct top_tty *t)
{
	if (t->fd >= 0)
		tcsetattr(t->fd, TCSANOW, &t->saved);
}

/* Waits until @deadline_ms. Returns true to go on, false on q, end of input or a signal. */
static bool top_wait(const struct top_tty *t, uint64_t deadline_ms)
{
	struct pollfd pfd = { .fd = t->fd, .events = POLLIN };
	uint64_t now;
	char ch;

	while (!live_stop && (now = live_now_ms()) < deadline_ms) {
		if (poll(&pfd, t->fd >= 0 ? 1 : 0, (int)(deadline_ms - now)) <= 0)
			continue;
		if (read(t->fd, &ch, 1) != 1 || ch == 'q' || ch == 'Q')
			return false;
	}
	return !live_stop;
}

static int cmd_top(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	struct top_sample a, b;
	struct top_tty tty = { .fd = -1 };
	bool clear = isatty(STDOUT_FILENO) && ctl->count == 0;
	long frames = 0;
	int rc;

	rc = ctl_connect(ctl);
	if (!rc)
		rc = top_sample_take(ctl, &a);
	if (rc)
		return rc;
	live_signals();
	if (ctl->count == 0)
		top_tty_raw(&tty);
	while (top_wait(&tty, a.at_ms + TOP_PERIOD_MS)) {
		rc = top_sample_take(ctl, &b);
		if (rc)
			break;
		top_frame(&a, &b, clear);
		top_sample_clear(&a);
		a = b;
		if (ctl->count && ++frames >= ctl->count)
			break;
	}
	top_sample_clear(&a);
	top_tty_restore(&tty);
	if (clear)
		putchar('\n');
	return rc;
}

struct watch {
	struct ctl *ctl;
	long seen;
	int status; /* EXIT_FAILED once printing failed */
};

/* One event as one line of text, or of JSON with --json. */
static void watch_event_cb(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct watch *w = arg;
	char clock[64], cause[CELL_MAX], peer[CELL_MAX], size[32];

	if (w->ctl->count && w->seen >= w->ctl->count)
		return; /* -n N: exactly N lines, even when more came in one read */
	w->seen++;
	live_clock(clock, sizeof(clock));
	if (w->ctl->json) {
		json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:I}", "time",
				      clock, "op", (json_int_t)info->op, "kind",
				      xfer_kind_name(info->kind), "state",
				      xfer_state_name(info->state), "bytes",
				      (json_int_t)info->bytes, "length", (json_int_t)info->length,
				      "transport", info->transport, "peer", info->peer, "client",
				      (json_int_t)info->client, "age_ms", (json_int_t)info->age_ms);
		if (o && info->error)
			json_object_set_new(o, "errno", json_string(errname(info->error)));
		if (o && info->error)
			json_object_set_new(o, "cause", json_string(info->cause));
		if (!o || json_print(o) < 0)
			w->status = EXIT_FAILED;
		json_decref(o);
	} else {
		human_size(info->length, size, sizeof(size));
		printf("%s op %llu %s %s client %llu %llu/%llu bytes (%s) transport %s peer %s age "
		       "%llums",
		       clock, (unsigned long long)info->op, xfer_kind_name(info->kind),
		       xfer_state_name(info->state), (unsigned long long)info->client,
		       (unsigned long long)info->bytes, (unsigned long long)info->length, size,
		       *info->transport ? esc(info->transport, cause, sizeof(cause)) : "-",
		       *info->peer ? esc(info->peer, peer, sizeof(peer)) : "-",
		       (unsigned long long)info->age_ms);
		if (info->error)
			printf(": %s (%s)", esc(info->cause, cause, sizeof(cause)),
			       errname(info->error));
		putchar('\n');
	}
	fflush(stdout);
}

/* (Re)subscribes. Returns an exit status and *dropped, the events the daemon dropped so far. */
static int watch_subscribe(struct ctl *ctl, uint64_t *dropped, char *scope, size_t len)
{
	json_t *r;
	int rc = ctl_call_json(ctl, "events.subscribe", NULL, &r);

	if (rc)
		return rc;
	/* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): r is set when rc is 0 */
	*dropped = obj_u64(r, "dropped");
	snprintf(scope, len, "%s", obj_str(r, "scope"));
	json_decref(r);
	return EXIT_OK;
}

static int cmd_watch(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	struct watch w = { .ctl = ctl };
	uint64_t dropped = 0, seen_dropped = 0, next = 0;
	char scope[16];
	int rc;

	rc = ctl_connect(ctl);
	if (rc)
		return rc;
	xfer_set_event_cb(ctl->c, watch_event_cb, &w);
	rc = watch_subscribe(ctl, &dropped, scope, sizeof(scope));
	if (rc)
		return rc;
	fprintf(stderr, "xferctl: watch: %s (Ctrl-C ends)\n",
		strcmp(scope, "all") ? "operations of your uid" : "every operation");
	live_signals();
	struct pollfd pfd = { .fd = xfer_get_fd(ctl->c), .events = POLLIN };
	while (!live_stop && w.status == EXIT_OK && (!ctl->count || w.seen < ctl->count)) {
		if (poll(&pfd, 1, WATCH_POLL_MS) > 0 && (rc = xfer_dispatch(ctl->c)) < 0)
			return ctl_fail(ctl, rc, "the daemon closed the connection");
		if (live_now_ms() < next)
			continue;
		/* Once a second: how many events the daemon dropped because we fell behind. */
		next = live_now_ms() + WATCH_POLL_MS;
		rc = watch_subscribe(ctl, &dropped, scope, sizeof(scope));
		if (rc)
			return rc;
		if (dropped > seen_dropped)
			printf("# %llu events dropped by xferd: this watcher fell behind\n",
			       (unsigned long long)(dropped - seen_dropped));
		seen_dropped = dropped;
	}
	return w.status;
}

static int cmd_help(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv);

#define LISTING(m, k, c, r) .run = cmd_list, .method = (m), .key = (k), .cols = (c), .render = (r)
#define PAGED(m, k, c) LISTING(m, k, c, render_table), .paged = true

static const struct ctl_cmd commands[] = {
	{ .name = "status", .help = "daemon version, node, uptime and counters", .run = cmd_status },
	{ .name = "regions",
	  .help = "registered regions",
	  PAGED("list.regions", "regions", region_cols) },
	{ .name = "ops", .help = "operations", PAGED("list.ops", "ops", op_cols) },
	{ .name = "clients",
	  .help = "connected clients",
	  PAGED("list.clients", "clients", client_cols) },
	{ .name = "windows",
	  .help = "windows owned (range, access, openers) and opened (owner, state)",
	  PAGED("list.windows", "windows", window_cols) },
	{ .name = "peers",
	  .help = "peer daemons; with --tcp their TCP connections",
	  LISTING("list.peers", "peers", peer_cols, render_peers),
	  .brief = "\"conns\": false", /* (their TCP costs the daemon ~24 us per connection) */
	  .paged = true },
	{ .name = "devices",
	  .help = "RDMA devices",
	  LISTING("list.devices", "devices", NULL, render_devices) },
	{ .name = "stats",
	  .help = "every counter of the daemon",
	  LISTING("stats", NULL, NULL, render_stats) },
	{ .name = "top",
	  .run = cmd_top,
	  .help = "live view: throughput per peer, ops by state, top clients",
	  .live = true },
	{ .name = "watch",
	  .run = cmd_watch,
	  .help = "one line per operation event (yours; root: everyone's)",
	  .live = true },
	{ .name = "readable",
	  .args = "FILE",
	  .nargs = 1,
	  .run = cmd_readable,
	  .help = "offer FILE (itself, no copy) to one reader, or N with --readers N",
	  .meta_out = true },
	{ .name = "read",
	  .args = "@METAFILE OUTFILE",
	  .nargs = 2,
	  .run = cmd_read,
	  .help = "fetch the readable's bytes into OUTFILE" },
	{ .name = "writable",
	  .args = "SIZE OUTFILE",
	  .nargs = 2,
	  .run = cmd_writable,
	  .help = "accept SIZE bytes from one writer into OUTFILE",
	  .meta_out = true },
	{ .name = "write",
	  .args = "@METAFILE INFILE",
	  .nargs = 2,
	  .run = cmd_write,
	  .help = "send INFILE into the writable's buffer" },
	{ .name = "help", .help = "this text", .run = cmd_help },
	{ .name = NULL },
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xferctl [--socket PATH] [--json] [--timeout MS] [--meta-file FILE] COMMAND "
		"[ARGS]\n\n"
		"commands:\n");
	for (const struct ctl_cmd *c = commands; c->name; c++)
		fprintf(f, "  %-8s %-17s %s\n", c->name, c->args ? c->args : "", c->help);
	fprintf(f,
		"\noptions:\n"
		"  -s, --socket PATH  xferd's socket (default: $XFERD_SOCKET, else %s)\n"
		"  -j, --json         print the daemon's result as one line of JSON\n"
		"  -t, --timeout MS   deadline of a file command's operation (default: xferd's)\n"
		"  -m, --meta-file FILE  readable, writable: write the metadata to FILE, a new\n"
		"                     file of mode 0600 (never overwritten), not to stdout\n"
		"  -n, --count N      top: N frames, watch: N events, then exit\n"
		"      --once         top: one frame (after one second), then exit\n"
		"  -r, --readers N    readable: N operations over the one file, N metadata lines\n"
		"  -y, --sync         read, writable: OUTFILE is fdatasynced before COMPLETE\n"
		"      --tcp          peers: a row per TCP connection: congestion control, state,\n"
		"                     round trip, window, retransmits, bytes acked, delivery rate\n"
		"  -d, --direct       readable, read, writable, write: the file is read or written\n"
		"                     with O_DIRECT (its tail past the last whole direct I/O\n"
		"                     block, if any, through the page cache)\n"
		"  -h, --help         this text\n\n"
		"Metadata is a capability: whoever holds it can take or overwrite the bytes.\n"
		"read and write take it as @FILE (from FILE) or - (from stdin); a literal\n"
		"METADATA argument still works but every local user can see it in\n"
		"/proc/PID/cmdline, so xferctl warns. OUTFILE '-' writes to stdout, FILE or\n"
		"INFILE '-' reads stdin (both through a buffer).\n"
		"Files are registered themselves (the daemon moves them with file I/O); an\n"
		"OUTFILE lands in a new file of mode 0600 with no name (O_TMPFILE), named\n"
		"OUTFILE once complete: a failed or killed xferctl leaves nothing behind.\n"
		"On a terminal a progress line shows after 1 s.\n"
		"SIZE takes a K, M or G suffix (KiB, MiB, GiB).\n"
		"top quits on q or Ctrl-C; watch --json prints each event as JSON.\n"
		"exit status: 0 done, 1 failed, 2 usage error\n",
		XP_DEFAULT_SOCKET);
}

static int cmd_help(struct ctl *ctl, const struct ctl_cmd *cmd, char **argv)
{
	usage(stdout);
	return EXIT_OK;
}

static const struct ctl_cmd *cmd_find(const char *name)
{
	for (const struct ctl_cmd *c = commands; c->name; c++)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

static int parse_timeout(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > CTL_MAX_TIMEOUT_MS)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* --readers N (1 to CTL_MAX_READERS). Returns 0 or -EINVAL. */
static int parse_readers(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > CTL_MAX_READERS)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* --count N (1 to 1000000). Returns 0, or -EINVAL after saying why. */
static int parse_count(const char *s, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 1000000) {
		fprintf(stderr, "xferctl: bad --count '%s' (1 to 1000000)\n", s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* Parses the global options. Returns -1 to go on, or an exit status. */
static int parse_options(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "meta-file", required_argument, NULL, 'm' },
		{ "count", required_argument, NULL, 'n' },
		{ "once", no_argument, NULL, 'O' },
		{ "readers", required_argument, NULL, 'r' },
		{ "sync", no_argument, NULL, 'y' },
		{ "direct", no_argument, NULL, 'd' },
		{ "tcp", no_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "s:jt:m:n:r:ydh", opts, NULL)) != -1) {
		if (o == 'r' && parse_readers(optarg, &ctl->readers) < 0) {
			fprintf(stderr, "xferctl: bad --readers '%s' (1 to %d)\n", optarg,
				CTL_MAX_READERS);
			return EXIT_USAGE;
		} else if (o == 'r') {
			continue;
		} else if (o == 'n' || o == 'O') {
			if (parse_count(o == 'O' ? "1" : optarg, &ctl->count) < 0)
				return EXIT_USAGE;
		} else if (o == 'y') {
			ctl->sync = true;
		} else if (o == 'd') {
			ctl->direct = true;
		} else if (o == 'T') {
			ctl->tcp = true;
		} else if (o == 'm') {
			ctl->meta_file = optarg;
		} else if (o == 's') {
			ctl->socket = optarg;
		} else if (o == 'j') {
			ctl->json = true;
		} else if (o == 't' && parse_timeout(optarg, &ctl->timeout_ms) < 0) {
			fprintf(stderr, "xferctl: bad --timeout '%s' (1 to %d ms)\n", optarg,
				CTL_MAX_TIMEOUT_MS);
			return EXIT_USAGE;
		} else if (o == 'h') {
			usage(stdout);
			return EXIT_OK;
		} else if (o != 't') {
			fprintf(stderr, "Try 'xferctl --help'.\n");
			return EXIT_USAGE;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct ctl ctl = { .timeout_ms = -1, .cmd = "xferctl" };
	const struct ctl_cmd *cmd;
	int rc;

	rc = parse_options(&ctl, argc, argv);
	if (rc >= 0)
		return rc;
	argc -= optind;
	argv += optind;
	if (argc == 0) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = cmd_find(argv[0]);
	if (!cmd) {
		fprintf(stderr, "xferctl: unknown command '%s'; try 'xferctl --help'\n", argv[0]);
		return EXIT_USAGE;
	}
	if (ctl.readers > 1 && cmd->run != cmd_readable) {
		fprintf(stderr, "xferctl: --readers is for readable only\n");
		return EXIT_USAGE;
	}
	if (ctl.meta_file && !cmd->meta_out) {
		fprintf(stderr, "xferctl: --meta-file is for readable and writable only\n");
		return EXIT_USAGE;
	}
	if (ctl.tcp && cmd->render != render_peers) {
		fprintf(stderr, "xferctl: --tcp is for peers only\n");
		return EXIT_USAGE;
	}
	if (ctl.count && !cmd->live) {
		fprintf(stderr, "xferctl: --count and --once are for top and watch only\n");
		return EXIT_USAGE;
	}
	if (argc - 1 != cmd->nargs) {
		fprintf(stderr, "usage: xferctl %s %s\n", cmd->name, cmd->args ? cmd->args : "");
		return EXIT_USAGE;
	}
	ctl.cmd = cmd->name;
	rc = cmd->run(&ctl, cmd, argv + 1);
	xfer_close(ctl.c);
	return rc;
}
