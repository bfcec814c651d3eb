// SPDX-License-Identifier: MIT
/*
 * libxferclient writes a batch of gets, puts and pairings as text, without jansson (xferclient.c,
 * batch_text()). Against a fake daemon that answers hello and hands each later request back to
 * the test, every such request must be the very bytes jansson's compact dump of the long way's
 * object gives: one descriptor or several, tags, every option, values up to 2^63 - 1, posted and
 * waited for, pairing entries (readable, writable, read and write with metadata) too. Batches
 * the text cannot carry (a tag or metadata to escape, a text past its bound) go the long way.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xfer_proto.h"
#include "xferclient.h"
#include "xp_fdmsg.h"
#include "xp_json.h"

/*
 * json_pack() as libxferclient sees it: this program's own, which counts its calls (the
 * library's reference binds to the executable's definition first) and packs with jansson's
 * json_vpack_ex(). A batch written as text calls it never.
 */
static int pack_calls;

json_t *json_pack(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_t *v = json_vpack_ex(NULL, 0, fmt, ap);
	va_end(ap);
	pack_calls++;
	return v;
}

/* A fake daemon in a child process: the test's client talks to it over a SEQPACKET socket. */
struct fake {
	char path[108];
	pid_t pid;
	int seen; /* the test's end of a SEQPACKET pair: each request after hello comes back on it */
	struct xfer_client *c;
};

/* Answers request @id with an empty result, or with one op per entry for an op.batch. */
static void fake_reply(int sock, json_t *req)
{
	json_t *id = json_object_get(req, "id");
	json_t *ops = json_object_get(json_object_get(req, "params"), "ops");
	json_t *result = json_object();

	if (!json_is_integer(id) || (json_integer_value(id) & ((json_int_t)1 << 52)))
		return; /* posted: no reply */
	if (strcmp(json_string_value(json_object_get(req, "method")), "hello") == 0) {
		json_object_set_new(result, "client", json_integer(1));
		json_object_set_new(result, "version", json_integer(XP_PROTO_VERSION));
	} else if (ops) {
		json_t *results = json_array();
		for (size_t i = 0; i < json_array_size(ops); i++)
			json_array_append_new(results,
					      json_pack("{s:I, s:s}", "op", (json_int_t)i + 1,
							"metadata", "xfer1.e30"));
		json_object_set_new(result, "results", results);
		json_object_set_new(result, "batch", json_integer(7));
	}
	td_raw_send_json(sock, xp_build_result(json_integer_value(id), result));
}

/* The child: one client, every packet after hello copied to @seen, each answered. */
static void fake_serve(int lfd, int seen)
{
	static char buf[XP_MAX_MSG];
	int sock = accept(lfd, NULL, NULL);
	bool hello = true;

	while (sock >= 0) {
		ssize_t n = recv(sock, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		json_t *req = json_loadb(buf, (size_t)n, 0, NULL);
		if (!hello && send(seen, buf, (size_t)n, 0) != n)
			break;
		hello = false;
		if (req)
			fake_reply(sock, req);
		json_decref(req);
	}
	_exit(0);
}

/*
 * The child of batch_done_parts_come_as_one_event: answers hello, then pushes batch 9's
 * op.batch_done in parts as the daemon writes them (xp_batch_done_part(): 1024 of the longest
 * ends take two packets), then batch 10's in one, and waits for the client to go.
 */
static void parts_serve(int lfd)
{
	static struct xp_batch_end ends[XP_MAX_BATCH];
	static char buf[XP_MAX_MSG];
	int sock = accept(lfd, NULL, NULL);
	size_t from = 0, taken;
	ssize_t n = sock >= 0 ? recv(sock, buf, sizeof(buf), 0) : -1;
	json_t *hello = n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;

	if (!hello)
		_exit(1);
	fake_reply(sock, hello);
	json_decref(hello);
	for (size_t i = 0; i < XP_MAX_BATCH; i++)
		ends[i] = (struct xp_batch_end){ (uint64_t)INT64_MAX - i, (uint64_t)INT64_MAX,
						 XP_ST_CANCELLED, EHOSTUNREACH };
	while (from < XP_MAX_BATCH) {
		int len = xp_batch_done_part(buf, sizeof(buf), 9, ends + from, XP_MAX_BATCH - from,
					     false, &taken);
		if (len < 0 || send(sock, buf, (size_t)len, 0) != len)
			_exit(1);
		from += taken;
	}
	int len = xp_batch_done_part(buf, sizeof(buf), 10, ends, 2, false, &taken);
	if (len < 0 || send(sock, buf, (size_t)len, 0) != len)
		_exit(1);
	while (recv(sock, buf, sizeof(buf), 0) > 0)
		;
	_exit(0);
}

static void fake_start(struct fake *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int pair[2];
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(f->path, sizeof(f->path), "/tmp/xferd-batchtext.%d.sock", (int)getpid());
	strcpy(sa.sun_path, f->path);
	unlink(f->path);
	CHECK(lfd >= 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
	f->pid = fork();
	CHECK(f->pid >= 0);
	if (f->pid == 0) {
		close(pair[0]);
		fake_serve(lfd, pair[1]);
	}
	close(lfd);
	close(pair[1]);
	f->seen = pair[0];
	CHECK_OK(xfer_connect(f->path, "batch-text", &f->c));
}

static void fake_stop(struct fake *f)
{
	xfer_close(f->c);
	close(f->seen);
	kill(f->pid, SIGTERM);
	waitpid(f->pid, NULL, 0);
	unlink(f->path);
}

/* The next request the fake daemon got, as its bytes (NUL-terminated; free() it). */
static char *fake_next(struct fake *f)
{
	char *buf = malloc(XP_MAX_MSG + 1);
	struct pollfd p = { f->seen, POLLIN, 0 };

	CHECK(buf && poll(&p, 1, 10000) == 1);
	ssize_t n = recv(f->seen, buf, XP_MAX_MSG, 0);
	CHECK(n > 0);
	buf[n] = '\0';
	return buf;
}

/* What the long way sends for @ops (batch_params() and xp_build_request()), dumped by jansson. */
static char *long_way(int64_t id, const struct xfer_batch_op *ops, size_t n,
		      const struct xfer_op_opts *o)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *descs = json_array();
		for (size_t k = 0; k < ops[i].n; k++)
			json_array_append_new(descs, json_pack("[I, I, I]",
							       (json_int_t)ops[i].descs[k].region,
							       (json_int_t)ops[i].descs[k].offset,
							       (json_int_t)ops[i].descs[k].length));
		json_t *e;
		switch (ops[i].kind) {
		case XFER_READABLE:
		case XFER_WRITABLE:
			e = json_pack("[s, o]",
				      ops[i].kind == XFER_READABLE ? "readable" : "writable",
				      descs);
			break;
		case XFER_READ:
		case XFER_WRITE:
			e = json_pack("[s, s, o]", ops[i].kind == XFER_READ ? "read" : "write",
				      ops[i].metadata, descs);
			break;
		default:
			e = json_pack("[s, I, I, o]", ops[i].kind == XFER_GET ? "get" : "put",
				      (json_int_t)ops[i].handle, (json_int_t)ops[i].offset, descs);
			if (ops[i].tag)
				json_array_append_new(e, json_string(ops[i].tag));
		}
		json_array_append_new(arr, e);
	}
	json_t *params = json_pack("{s:o, s:b, s:s}", "ops", arr, "release_on_end",
				   (o->flags & XFER_OP_RELEASE_ON_END) != 0, "event",
				   (o->flags & XFER_OP_BATCH_EVENT) ? "batch" : "each");
	if (o->timeout_ms)
		json_object_set_new(params, "timeout_ms", json_integer(o->timeout_ms));
	if (o->flags & XFER_OP_END_ONLY)
		json_object_set_new(params, "end_only", json_true());
	if (o->flags & XFER_OP_POST)
		json_object_set_new(params, "reply", json_false());
	json_t *req = xp_build_request(id, "op.batch", params);
	char *text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	return text;
}

/*
 * Sends @ops with @opts through xfer_batch() and checks the bytes the fake daemon got, and that
 * they were written as text (@text) or built with jansson.
 */
static void check_batch_way(struct fake *f, struct xfer_batch_op *ops, size_t n,
			    const struct xfer_op_opts *opts, bool text)
{
	uint64_t batch = 0;

	pack_calls = 0;
	CHECK_OK(xfer_batch(f->c, ops, n, opts, NULL, &batch));
	CHECK(text ? pack_calls == 0 : pack_calls > 0);
	char *got = fake_next(f);
	json_t *req = json_loads(got, 0, NULL);
	CHECK(req != NULL);
	int64_t id = json_integer_value(json_object_get(req, "id"));
	json_decref(req);
	char *want = long_way(id, ops, n, opts);
	CHECK_STR_EQ(got, want);
	if (opts->flags & XFER_OP_POST)
		CHECK(batch == (uint64_t)id);
	else
		CHECK(batch == 7 && ops[n - 1].op == n);
	for (size_t i = 0; i < n; i++) {
		bool passive = ops[i].kind == XFER_READABLE || ops[i].kind == XFER_WRITABLE;
		CHECK(!passive ||
		      (ops[i].made_metadata && strcmp(ops[i].made_metadata, "xfer1.e30") == 0));
		if (passive)
			free(ops[i].made_metadata);
	}
	free(got);
	free(want);
}

/* check_batch_way() for a batch the text carries. */
static void check_batch(struct fake *f, struct xfer_batch_op *ops, size_t n,
			const struct xfer_op_opts *opts)
{
	check_batch_way(f, ops, n, opts, true);
}

TEST(batch_text_is_what_jansson_writes)
{
	struct fake f;
	struct xfer_desc one = { 3, 4096, 4096 };
	struct xfer_desc many[3] = { { 1, 0, 1 },
				     { INT64_MAX, INT64_MAX, INT64_MAX },
				     { 9, 0, 0 } };
	struct xfer_batch_op ops[4] = {
		{ .kind = XFER_GET, .handle = 5, .offset = 0, .descs = &one, .n = 1 },
		{ .kind = XFER_PUT, .handle = INT64_MAX, .offset = 123, .descs = many, .n = 3 },
		{ .kind = XFER_PUT, .handle = 1, .offset = 1, .descs = &one, .n = 1, .tag = "" },
		{ .kind = XFER_PUT,
		  .handle = 2,
		  .offset = 0,
		  .descs = &one,
		  .n = 1,
		  .tag = "layer 7/k-v {blocks: [1, 2]} ~!@#$%^&*()_+" },
	};
	const uint32_t flag_sets[] = {
		0,
		XFER_OP_RELEASE_ON_END,
		XFER_OP_BATCH_EVENT,
		XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT | XFER_OP_END_ONLY,
		XFER_OP_BATCH_EVENT | XFER_OP_POST,
		XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT | XFER_OP_END_ONLY | XFER_OP_POST,
	};

	fake_start(&f);
	for (size_t s = 0; s < sizeof(flag_sets) / sizeof(flag_sets[0]); s++) {
		for (int t = 0; t < 2; t++) {
			struct xfer_op_opts o = { .timeout_ms = t ? 4000000000u : 0,
						  .flags = flag_sets[s] };
			for (size_t n = 1; n <= 4; n++)
				check_batch(&f, ops, n, &o);
			check_batch(&f, ops + 3, 1, &o);
		}
	}
	fake_stop(&f);
}

/*
 * Pairing entries (compact: ["readable", descs], ["read", metadata, descs]) as text too: a
 * client that pipelines pairings sends two such batches per group (the passive one, then the
 * active one with the metadata it returned), each of up to ~3 KiB of metadata.
 */
TEST(batch_text_pairings_are_what_jansson_writes)
{
	struct fake f;
	struct xfer_desc one = { 3, 65536, 65536 };
	struct xfer_desc many[3] = { { 1, 0, 1 },
				     { INT64_MAX, INT64_MAX, INT64_MAX },
				     { 9, 7, 100 } };
	/* real metadata's size and alphabet (base64url), and one of the shortest */
	char md[400] = "xfer1.";
	for (size_t k = strlen(md); k < 340; k++)
		md[k] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[k % 64];
	struct xfer_batch_op passive[2] = {
		{ .kind = XFER_READABLE, .descs = &one, .n = 1 },
		{ .kind = XFER_WRITABLE, .descs = many, .n = 3 },
	};
	struct xfer_batch_op active[8];
	for (int i = 0; i < 8; i++)
		active[i] = (struct xfer_batch_op){ .kind = i % 2 ? XFER_WRITE : XFER_READ,
						    .descs = i == 5 ? many : &one,
						    .n = i == 5 ? 3 : 1,
						    .metadata = i == 3 ? "xfer1.e30" : md };
	const uint32_t flag_sets[] = {
		0,
		XFER_OP_RELEASE_ON_END | XFER_OP_END_ONLY,
		XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT | XFER_OP_END_ONLY,
	};

	fake_start(&f);
	for (size_t s = 0; s < sizeof(flag_sets) / sizeof(flag_sets[0]); s++) {
		struct xfer_op_opts o = { .timeout_ms = s == 1 ? 30000 : 0, .flags = flag_sets[s] };
		struct xfer_op_opts post = o;
		post.flags |= XFER_OP_BATCH_EVENT | XFER_OP_POST;
		for (size_t n = 1; n <= 2; n++)
			check_batch(&f, passive, n, &o);
		for (size_t n = 1; n <= 8; n++) {
			check_batch(&f, active, n, &o);
			check_batch(&f, active, n, &post);
		}
	}
	/* metadata jansson escapes, and a batch past the text's bound: the long way, same bytes */
	struct xfer_op_opts o = { .flags = XFER_OP_BATCH_EVENT };
	struct xfer_batch_op odd = { .kind = XFER_READ, .descs = &one, .n = 1, .metadata = "a\"b" };
	check_batch_way(&f, &odd, 1, &o, false);
	struct xfer_batch_op *lots = calloc(40, sizeof(*lots));
	CHECK(lots != NULL);
	for (int i = 0; i < 40; i++)
		lots[i] = active[0];
	check_batch_way(&f, lots, 40, &o, false);
	free(lots);
	fake_stop(&f);
}

/* A tag with a quote, a backslash or bytes beyond ASCII is escaped by jansson: the long way. */
TEST(batch_tags_to_escape_go_the_long_way)
{
	struct fake f;
	struct xfer_desc one = { 3, 0, 64 };
	const char *tags[] = { "a\"b", "c\\d", "tab\there", "caf\xc3\xa9", "\x7f" };
	struct xfer_op_opts o = { .flags = XFER_OP_BATCH_EVENT | XFER_OP_POST };

	fake_start(&f);
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
		struct xfer_batch_op op = { .kind = XFER_PUT,
					    .handle = 4,
					    .offset = 8,
					    .descs = &one,
					    .n = 1,
					    .tag = tags[i] };
		check_batch_way(&f, &op, 1, &o, false);
	}
	fake_stop(&f);
}

/* What the long way refuses is refused the same: no request leaves. */
TEST(batch_text_refuses_what_the_long_way_refuses)
{
	struct fake f;
	struct xfer_desc big = { (uint64_t)INT64_MAX + 1, 0, 1 };
	struct xfer_batch_op op = { .kind = XFER_GET, .handle = 1, .descs = &big, .n = 1 };
	struct xfer_op_opts post = { .flags = XFER_OP_BATCH_EVENT | XFER_OP_POST };
	struct xfer_op_opts odd = { .flags = 0x80000000u };
	struct pollfd p;

	fake_start(&f);
	CHECK_ERR(xfer_batch(f.c, &op, 1, &post, NULL, NULL), -EINVAL);
	CHECK(strstr(xfer_last_error(f.c), "below 2^63") != NULL);
	big.region = 1;
	op.n = 0;
	CHECK_ERR(xfer_batch(f.c, &op, 1, &post, NULL, NULL), -EINVAL);
	CHECK(strstr(xfer_last_error(f.c), "1 to 1024 descriptors") != NULL);
	op.n = 1;
	CHECK_ERR(xfer_batch(f.c, &op, 1, &odd, NULL, NULL), -EINVAL);
	CHECK(strstr(xfer_last_error(f.c), "unknown batch flags") != NULL);
	struct xfer_batch_op bare = { .kind = XFER_READ, .descs = &big, .n = 1 };
	CHECK_ERR(xfer_batch(f.c, &bare, 1, &post, NULL, NULL), -EINVAL);
	CHECK(strstr(xfer_last_error(f.c), "needs metadata") != NULL);
	p = (struct pollfd){ f.seen, POLLIN, 0 };
	CHECK(poll(&p, 1, 200) == 0); /* (nothing was sent) */
	fake_stop(&f);
}

/* The batch events the client delivered: how many, and the ends of each (up to 2). */
struct parts_seen {
	int events;
	uint64_t batch[2];
	size_t n[2];
	bool in_order[2]; /* each end's op is the one the fake wrote at its place */
};

static void parts_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct parts_seen *s = arg;
	int k = s->events++;

	if (k >= 2)
		return;
	s->batch[k] = ev->batch;
	s->n[k] = ev->n;
	s->in_order[k] = true;
	for (size_t i = 0; i < ev->n; i++)
		s->in_order[k] &= ev->ends[i].op == (uint64_t)INT64_MAX - i &&
				  ev->ends[i].state == XFER_CANCELLED &&
				  ev->ends[i].error == -EHOSTUNREACH;
}

/*
 * An op.batch_done too long for one packet comes in parts (PROTOCOL.md §5.2: "more": true on
 * all but the last); the library gathers them and calls the batch callback once, with every end
 * in order, then takes the next batch's event as before. (A daemon once sent such an event as
 * one packet, which could not be sent: its client waited for ever.)
 */
TEST(batch_done_parts_come_as_one_event)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct parts_seen seen = { 0 };
	struct xfer_client *c = NULL;
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	long long until = td_now_ms() + 10000;
	char path[108];
	pid_t pid;

	snprintf(path, sizeof(path), "/tmp/xferd-batchparts.%d.sock", (int)getpid());
	strcpy(sa.sun_path, path);
	unlink(path);
	CHECK(lfd >= 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		parts_serve(lfd);
	close(lfd);
	CHECK_OK(xfer_connect(path, "batch-parts", &c));
	xfer_set_batch_cb(c, parts_cb, &seen);
	while (seen.events < 2 && td_now_ms() < until) {
		struct pollfd p = { xfer_get_fd(c), POLLIN, 0 };
		poll(&p, 1, 100);
		CHECK(xfer_dispatch(c) >= 0);
	}
	CHECK_EQ_INT(seen.events, 2);
	CHECK_EQ_INT(seen.batch[0], 9);
	CHECK_EQ_INT(seen.n[0], XP_MAX_BATCH);
	CHECK(seen.in_order[0]);
	CHECK_EQ_INT(seen.batch[1], 10);
	CHECK_EQ_INT(seen.n[1], 2);
	CHECK(seen.in_order[1]);
	xfer_close(c);
	waitpid(pid, NULL, 0);
	unlink(path);
}
