// SPDX-License-Identifier: MIT
/*
 * libFuzzer target over op.batch_done read back without jansson (proto/xp_json.c,
 * xp_batch_done_read()), which libxferclient runs on every packet from the daemon before it
 * parses it with jansson. Any input must be read back or left to jansson without a crash or an
 * over-read; one that is read back must be what jansson's way makes of the same bytes
 * (xferclient.c's batch_event_parse()): the same batch, ends, states and errnos. Read back, it
 * must also be written again byte for byte by xp_batch_done_text(). The same input as the reply
 * to op.batch request 5 of 1 to 8 ops (xp_batch_reply_read()) must be read back only as the
 * client's jansson way reads it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xfer_proto.h"
#include "xp_json.h"
#include "fuzz_target.h"

const char fuzz_target_corpus[] = "corpus-reply";

#define ENDS 64

__attribute__((noreturn)) static void die(const char *what, const uint8_t *data, size_t size)
{
	fprintf(stderr, "fuzz_reply: %s\nfuzz_reply: packet %.*s\n", what,
		(int)(size > 300 ? 300 : size), (const char *)data);
	abort();
}

/* Whether jansson's way reads @root as @batch and @ends[0..@n), as the client would. */
static bool jansson_agrees(json_t *root, uint64_t batch, const struct xp_batch_end *ends, size_t n)
{
	json_t *params = json_object_get(root, "params"), *ops = json_object_get(params, "ops"), *o;
	const char *method = json_string_value(json_object_get(root, "method"));
	uint64_t v;
	size_t i;

	if (!method || strcmp(method, XP_NOTIFY_BATCH_DONE) != 0 || json_object_get(root, "id") ||
	    xp_get_u64(params, "batch", &v) < 0 || v != batch || json_array_size(ops) != n)
		return false;
	json_array_foreach(ops, i, o) {
		const char *st = json_string_value(json_object_get(o, "state"));
		const char *en = json_string_value(json_object_get(o, "errno"));
		uint64_t bytes = 0;
		xp_get_u64(o, "bytes", &bytes);
		if (xp_get_u64(o, "op", &v) < 0 || v != ends[i].op || bytes != ends[i].bytes ||
		    !st || xp_state_from_name(st) != ends[i].state ||
		    (en ? xp_errno_from_name(en) : 0) != ends[i].err)
			return false;
	}
	return true;
}

/* Whether a reply read back as request 5's of @n ops (@ops, @batch) is jansson's reading too. */
static bool reply_agrees(const uint8_t *data, size_t size, const uint64_t *ops, size_t n,
			 uint64_t batch)
{
	struct xp_reply rep;
	json_t *arr;
	uint64_t v, b = 0;
	bool ok;

	ok = xp_reply_parse(data, size, &rep) == 0 && !rep.notification && rep.id == 5 &&
	     rep.result && !json_object_get(rep.result, "failed") &&
	     json_array_size(arr = json_object_get(rep.result, "results")) == n;
	for (size_t i = 0; ok && i < n; i++)
		ok = xp_get_u64(json_array_get(arr, i), "op", &v) == 0 && v == ops[i];
	if (ok)
		xp_get_u64(rep.result, "batch", &b);
	xp_reply_fini(&rep);
	return ok && b == batch;
}

/* As a reply to request 5 of 1 to 8 ops: read back only as jansson's way reads it. */
static void check_reply(const uint8_t *data, size_t size)
{
	uint64_t ops[8], batch;

	for (size_t n = 1; n <= 8; n++)
		if (xp_batch_reply_read((const char *)data, size, 5, ops, n, &batch) == 0 &&
		    !reply_agrees(data, size, ops, n, batch))
			die("a reply read back, but not as jansson's way reads it", data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct xp_batch_end ends[ENDS];
	static char again[XP_MAX_MSG];
	uint64_t batch;
	size_t n;

	check_reply(data, size);
	if (xp_batch_done_read((const char *)data, size, &batch, ends, ENDS, &n) != 0)
		return 0;
	json_t *root = json_loadb((const char *)data, size, 0, NULL);
	if (!root || !jansson_agrees(root, batch, ends, n))
		die("read back, but not as jansson's way reads it", data, size);
	json_decref(root);
	int len = xp_batch_done_text(again, sizeof(again), batch, ends, n);
	if (len < 0 || (size_t)len != size || memcmp(again, data, size) != 0)
		die("read back, but not written again as it was", data, size);
	return 0;
}

void fuzz_target_fini(void)
{
}
