// SPDX-License-Identifier: MIT
/*
 * What one request costs the event loop must not grow with the objects of other clients: a
 * request names regions, operations and windows by id, up to 1024 times a packet (the
 * descriptors of an op.readable, the entries of an op.batch). Each check times the same
 * requests naming an object made before thousands of others and one made after them (the end
 * of every list the daemon keeps), or made alone and beside thousands of others, and wants the
 * two about equal: with a walk of those lists per name they differed 50 to 100 times (16384
 * regions: ~50 ms a request, and 16 requests a wakeup held every other client ~1 s). A ratio,
 * not a time: sanitizers and valgrind slow both sides alike.
 */
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon_util.h"
#include "harness.h"
#include "xp_fdmsg.h"
#include "xp_json.h"

#define MANY 16384    /* regions or operations of the others: the default per-uid limits */
#define PER_CONN 4096 /* the default per-connection limits */
#define DESCS 1024    /* XP_MAX_DESCS */
#define ROUNDS 5      /* the fastest of these counts, for each side */
#define BURST 8	      /* requests sent before the replies are read */

static long long next_id = 100;

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000ll + ts.tv_nsec / 1000;
}

/* Sends @text (with @fd if >= 0) without reading the reply, waiting while the socket is full. */
static void send_text(int sock, const char *text, int fd)
{
	int rc;

	while ((rc = xp_packet_send(sock, text, strlen(text), &fd, fd >= 0 ? 1 : 0)) == -EAGAIN)
		CHECK(poll(&(struct pollfd){ .fd = sock, .events = POLLOUT }, 1, 10000) == 1);
	CHECK_OK(rc);
}

/* Reads one reply; returns its "result" member @key as an integer (-1 when an error). */
static long long recv_result(int sock, const char *key)
{
	struct xp_reply rep;
	long long v = -1;

	CHECK_OK(td_raw_recv(sock, &rep));
	if (rep.result)
		v = json_integer_value(json_object_get(rep.result, key));
	xp_reply_fini(&rep);
	return v;
}

/*
 * Sends request @text (with @fd, or -1) @n times on @sock, 256 at a time, each answered with a
 * positive @key. Returns the last answer's.
 */
static long long send_pipelined(int sock, const char *text, int fd, int n, const char *key)
{
	long long last = -1;

	for (int done = 0; done < n;) {
		int burst = n - done < 256 ? n - done : 256;
		for (int i = 0; i < burst; i++)
			send_text(sock, text, fd);
		for (int i = 0; i < burst; i++) {
			last = recv_result(sock, key);
			CHECK(last > 0);
		}
		done += burst;
	}
	return last;
}

/* @n regions of one page each on @sock, pipelined; returns the last one's id. */
static long long register_many(int sock, int n)
{
	char text[200];
	int fd = td_memfd(4096, true);

	CHECK_OK(fd);
	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"region.register\",\"params\":{}}");
	long long last = send_pipelined(sock, text, fd, n, "region");
	close(fd);
	return last;
}

/* A connection said hello to @d, or fails the test. */
static int connect_hello(struct td *d)
{
	int sock = td_raw_connect(d);

	CHECK_OK(sock);
	CHECK_OK(td_raw_hello(sock));
	return sock;
}

/*
 * op.readable of DESCS descriptors of @region whose last passes its end: every descriptor is
 * looked up, then the request is refused (EINVAL), so nothing is made and it can be repeated.
 */
static char *refused_readable(long long region)
{
	size_t cap = DESCS * 64 + 256, len = 0;
	char *text = malloc(cap);

	CHECK(text != NULL);
	len += (size_t)snprintf(text + len, cap - len,
				"{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"op.readable\","
				"\"params\":{\"descs\":[",
				next_id++);
	for (int i = 0; i < DESCS; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"%s{\"region\":%lld,\"offset\":0,\"length\":%d}",
					i ? "," : "", region, i == DESCS - 1 ? 1 << 20 : 1);
	snprintf(text + len, cap - len, "]}}");
	return text;
}

/* Microseconds for BURST copies of @text on @sock, each answered with an error (the fastest of
 * ROUNDS). */
static long long time_refused(int sock, const char *text)
{
	long long best = -1;

	for (int r = 0; r < ROUNDS; r++) {
		long long t0 = now_us();
		for (int i = 0; i < BURST; i++)
			send_text(sock, text, -1);
		for (int i = 0; i < BURST; i++)
			CHECK(recv_result(sock, "op") == -1);
		long long t = now_us() - t0;
		if (best < 0 || t < best)
			best = t;
	}
	return best;
}

/*
 * @slow must not be more than 8 times @fast (plus 2 ms for noise): about equal, not 50 to 100
 * times. (Under ASan the gets on the newer window take 2-3 times as long, with or without
 * others' windows: not the lookups, which the plain build shows equal.)
 */
static void check_ratio(const char *what, long long fast, long long slow)
{
	harness_note("%s: %lld us, then %lld us", what, fast, slow);
	CHECK(slow <= 8 * fast + 2000);
}

TEST_TIMEOUT(descriptor_lookup_independent_of_other_regions, 180)
{
	struct td d;
	int socks[MANY / PER_CONN];

	CHECK_OK(td_start(&d, NULL));
	int me = connect_hello(&d);
	long long first = register_many(me, 1);
	for (int i = 0; i < MANY / PER_CONN; i++) {
		socks[i] = connect_hello(&d);
		register_many(socks[i], i == MANY / PER_CONN - 1 ? PER_CONN - 2 : PER_CONN);
	}
	long long last = register_many(me, 1);
	char *near = refused_readable(first), *far = refused_readable(last);
	long long fast = time_refused(me, near), slow = time_refused(me, far);
	check_ratio("1024 descriptors among 16384 regions", fast, slow);
	free(near);
	free(far);
	for (int i = 0; i < MANY / PER_CONN; i++)
		close(socks[i]);
	close(me);
	td_check_alive(&d, "after the lookups");
	CHECK_OK(td_stop(&d));
}

#define WINDOWS 16000 /* of another client, between the two windows opened */
#define GETS 1024     /* XP_MAX_BATCH: each one names its handle, its window and a region */

/* The result of request @text (with @fd if >= 0) on @sock: member @key, and its metadata. */
static long long call_result(int sock, const char *text, int fd, const char *key, char **meta)
{
	struct xp_reply rep;
	long long v;

	CHECK_OK(td_raw_call(sock, text, &fd, fd >= 0 ? 1 : 0, &rep));
	CHECK(rep.result != NULL);
	v = json_integer_value(json_object_get(rep.result, key));
	if (meta)
		*meta = strdup(json_string_value(json_object_get(rep.result, "metadata")));
	xp_reply_fini(&rep);
	return v;
}

/* A window on all of @region of @sock, opened by @sock: returns the handle's id. */
static long long window_opened(int sock, long long region)
{
	char text[1024], *meta = NULL;

	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"window.create\",\"params\":"
		 "{\"region\":%lld,\"access\":\"readwrite\"}}",
		 region);
	call_result(sock, text, -1, "window", &meta);
	CHECK(meta != NULL && strlen(meta) < 700);
	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"window.open\",\"params\":"
		 "{\"metadata\":\"%s\"}}",
		 meta);
	free(meta);
	return call_result(sock, text, -1, "window", NULL);
}

/* @n windows on @region of @sock, pipelined. */
static void create_windows(int sock, long long region, int n)
{
	char text[200];

	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"window.create\",\"params\":"
		 "{\"region\":%lld,\"access\":\"read\"}}",
		 region);
	send_pipelined(sock, text, -1, n, "window");
}

/* op.batch of GETS one-byte gets on @handle into @region, released as they end. */
static char *gets_batch(long long handle, long long region)
{
	size_t cap = GETS * 48 + 256, len = 0;
	char *text = malloc(cap);

	CHECK(text != NULL);
	len += (size_t)snprintf(text + len, cap - len,
				"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"op.batch\",\"params\":"
				"{\"ops\":[");
	for (int i = 0; i < GETS; i++)
		len += (size_t)snprintf(text + len, cap - len, "%s[\"get\",%lld,%d,[[%lld,%d,1]]]",
					i ? "," : "", handle, i, region, i);
	snprintf(text + len, cap - len, "],\"release_on_end\":true}}");
	return text;
}

/*
 * Microseconds for batch @text of @n gets on @sock, all made, once the daemon is back to @ops
 * operations (the batch's all ended and released).
 */
static long long time_batch(struct td *d, int sock, const char *text, size_t n, long long ops)
{
	struct xp_reply rep;
	long long t0 = now_us();

	CHECK_OK(td_raw_call(sock, text, NULL, 0, &rep));
	long long t = now_us() - t0;
	CHECK(rep.result != NULL);
	if (json_object_get(rep.result, "failed"))
		harness_fail(__FILE__, __LINE__, "batch refused: %s",
			     json_string_value(json_object_get(rep.result, "message")));
	CHECK(json_array_size(json_object_get(rep.result, "results")) == n);
	xp_reply_fini(&rep);
	CHECK_OK(td_wait_stat(d, "ops", ops, 10000, NULL));
	return t;
}

/*
 * The fastest of ROUNDS of batch @a and of @b, taking turns: what the daemon's allocator keeps
 * of the rounds before (ASan's quarantine grows with every free) weighs on both alike.
 */
static void time_batches(struct td *d, int sock, const char *a, const char *b, size_t n,
			 long long *ta, long long *tb)
{
	*ta = *tb = -1;
	for (int r = 0; r < ROUNDS; r++) {
		long long t = time_batch(d, sock, a, n, 0);
		*ta = *ta < 0 || t < *ta ? t : *ta;
		t = time_batch(d, sock, b, n, 0);
		*tb = *tb < 0 || t < *tb ? t : *tb;
	}
}

/* The fastest of ROUNDS of batch @text with the daemon at @ops operations before each. */
static long long time_batch_best(struct td *d, int sock, const char *text, size_t n, long long ops)
{
	long long best = -1;

	for (int r = 0; r < ROUNDS; r++) {
		long long t = time_batch(d, sock, text, n, ops);
		best = best < 0 || t < best ? t : best;
	}
	return best;
}

TEST_TIMEOUT(window_lookup_independent_of_other_windows, 180)
{
	struct td d;

	CHECK_OK(td_start(&d, "{\"limits\": {\"windows\": 20000}, \"uid_limits\": {\"windows\": "
			      "20000}, \"global_limits\": {\"windows\": 20000}}"));
	int me = connect_hello(&d), other = connect_hello(&d);
	long long mine = register_many(me, 1);
	long long first = window_opened(me, mine);
	create_windows(other, register_many(other, 1), WINDOWS);
	long long last = window_opened(me, mine);
	char *near = gets_batch(first, mine), *far = gets_batch(last, mine);
	long long fast, slow;
	time_batches(&d, me, near, far, GETS, &fast, &slow);
	check_ratio("1024 gets among 16000 windows", fast, slow);
	free(near);
	free(far);
	close(other);
	close(me);
	td_check_alive(&d, "after the gets");
	CHECK_OK(td_stop(&d));
}

#define OPS 16000     /* of another client */
#define LONG_GETS 512 /* long entries: about as many as fit a packet */

/*
 * op.batch of LONG_GETS one-byte gets on @handle into @region, each {"method", "params"}: a long
 * entry's op is found again by its id to join the batch's one event.
 */
static char *long_gets_batch(long long handle, long long region)
{
	size_t cap = LONG_GETS * 128 + 256, len = 0;
	char *text = malloc(cap);

	CHECK(text != NULL);
	len += (size_t)snprintf(text + len, cap - len,
				"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"op.batch\",\"params\":"
				"{\"ops\":[");
	for (int i = 0; i < LONG_GETS; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"%s{\"method\":\"op.get\",\"params\":{\"window\":%lld,"
					"\"offset\":%d,\"descs\":[{\"region\":%lld,"
					"\"offset\":%d,\"length\":1}]}}",
					i ? "," : "", handle, i, region, i);
	snprintf(text + len, cap - len, "],\"event\":\"batch\",\"release_on_end\":true}}");
	CHECK(strlen(text) < 65536);
	return text;
}

/* @n readables of one byte on @region of @sock, pipelined. */
static void make_readables(int sock, long long region, int n)
{
	char text[200];

	snprintf(text, sizeof(text),
		 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"op.readable\",\"params\":"
		 "{\"descs\":[{\"region\":%lld,\"offset\":0,\"length\":1}]}}",
		 region);
	send_pipelined(sock, text, -1, n, "op");
}

TEST_TIMEOUT(op_lookup_independent_of_other_ops, 180)
{
	struct td d;

	CHECK_OK(td_start(&d, "{\"limits\": {\"ops\": 20000}, \"uid_limits\": {\"ops\": 40000}, "
			      "\"global_limits\": {\"ops\": 40000}}"));
	int me = connect_hello(&d), other = connect_hello(&d);
	long long mine = register_many(me, 1);
	char *text = long_gets_batch(window_opened(me, mine), mine);
	long long fast = time_batch_best(&d, me, text, LONG_GETS, 0);
	make_readables(other, register_many(other, 1), OPS);
	long long slow = time_batch_best(&d, me, text, LONG_GETS, OPS);
	check_ratio("512 gets without and beside 16000 ops", fast, slow);
	free(text);
	close(other);
	close(me);
	td_check_alive(&d, "after the batches");
	CHECK_OK(td_stop(&d));
}
