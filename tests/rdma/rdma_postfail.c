/* SPDX-License-Identifier: MIT */
/*
 * rdma_postfail: window puts and gets whose RDMA WRITE or READ post fails on the opener's daemon
 * (tests/preload/postfail.c preloaded into it, XFERD_TEST_POSTFAIL=PREFIX), then the same again
 * with nothing armed, bytes checked.
 *
 *   rdma_postfail OWNER_SOCKET OPENER_SOCKET PREFIX SIZE WRITES_FROM
 *
 * The owner's daemon exposes a SIZE-byte window; the opener's opens it. Per direction (put: the
 * opener's daemon posts RDMA WRITEs, PREFIX.write; get: RDMA READs, PREFIX.read), the trigger is
 * armed to let PASS work requests through first (so the failure comes mid-transfer, with
 * requests in flight), then one SIZE-byte put or get is made on a new handle, which must end
 * ERRORED (-ENOMEM) within WAIT_MS with a cause naming the failed post and where it was made,
 * the place the injector recorded (PREFIX.KIND.fired): WRITES_FROM ("poster thread" or "event
 * loop") for the WRITEs, "event loop" for the READs (rdma_conn.c posts them there under every
 * rdma_post_thread). Each failure fails the connection set; the window is then opened again (a
 * new set) and a put and a get of SIZE bytes must complete, every byte compared.
 * Prints "ok - NAME" or "FAIL - NAME (why)" per check; exit 0 when every check passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdma_fill.h"
#include "xferclient.h"

#define WAIT_MS 60000 /* a failed post ends the op at once; a lost signal would hang it */
#define PASS 96	      /* RDMA WRITEs or READs let through before the failing post */

struct ctx {
	struct xfer_client *owner, *opener;
	struct xfer_buf obuf, lbuf;
	uint64_t oregion, lregion, window;
	char *meta;
	size_t size;
	const char *prefix;
	int failures;
};

static void ok(const char *name)
{
	printf("ok - %s\n", name);
}

static void fail(struct ctx *t, const char *name, const char *why)
{
	printf("FAIL - %s (%s)\n", name, why);
	t->failures++;
}

static int side_open(const char *sock, const char *name, size_t size, struct xfer_client **c,
		     struct xfer_buf *buf, uint64_t *region)
{
	int rc = xfer_connect(sock, name, c);

	if (rc == 0)
		rc = xfer_buf_alloc(size, buf);
	if (rc == 0)
		rc = xfer_region_register(*c, buf->fd, 0, 0, name, region);
	if (rc < 0)
		fprintf(stderr, "rdma_postfail: %s on %s: %s (%s)\n", name, sock, xfer_strerror(rc),
			*c ? xfer_last_error(*c) : "");
	return rc;
}

/* Arms PREFIX.@kind: @pass posts go through, the next fails. */
static int arm(const struct ctx *t, const char *kind, int pass)
{
	char path[4096], fired[4200];

	snprintf(path, sizeof(path), "%s.%s", t->prefix, kind);
	snprintf(fired, sizeof(fired), "%s.fired", path);
	unlink(fired);
	FILE *f = fopen(path, "we");
	if (!f)
		return -errno;
	fprintf(f, "%d\n", pass);
	return fclose(f) ? -errno : 0;
}

/* What PREFIX.@kind.fired says (the thread that made the failed post), "" if it is missing. */
static void fired_by(const struct ctx *t, const char *kind, char *out, size_t len)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s.%s.fired", t->prefix, kind);
	out[0] = '\0';
	FILE *f = fopen(path, "re");
	if (f) {
		if (!fgets(out, (int)len, f))
			out[0] = '\0';
		fclose(f);
	}
	out[strcspn(out, "\n")] = '\0';
	unlink(path);
}

/* One put (@put) or get of the whole window at offset 0; 0 and @info once it ended. */
static int one_op(struct ctx *t, uint64_t handle, bool put, struct xfer_op_info *info)
{
	struct xfer_desc d = { t->lregion, 0, t->size };
	uint64_t op;
	int rc = put ? xfer_put(t->opener, handle, 0, &d, 1, NULL, NULL, &op) :
		       xfer_get(t->opener, handle, 0, &d, 1, NULL, NULL, &op);

	if (rc == 0)
		rc = xfer_wait(t->opener, op, WAIT_MS, info);
	if (rc == 0)
		xfer_release(t->opener, op);
	return rc;
}

/* The cause a failed post of @what made by @where must name. */
static bool cause_names(const char *cause, const char *what, const char *where)
{
	char want[128];

	snprintf(want, sizeof(want), "ibv_post_send of %s failed (on the %s)", what,
		 strcmp(where, "poster thread") == 0 ? "device's poster thread" : "event loop");
	return strstr(cause, want) != NULL;
}

/* The failing op of one direction: ERRORED -ENOMEM, the cause naming the post and its place. */
static void failing_op(struct ctx *t, bool put, const char *where)
{
	const char *kind = put ? "write" : "read", *what = put ? "RDMA WRITEs" : "RDMA READs";
	char name[256], why[640], fired[64];
	struct xfer_op_info info;
	uint64_t handle;
	int rc = xfer_window_open(t->opener, t->meta, &handle, NULL, NULL);

	snprintf(name, sizeof(name), "%s of %zu bytes, its %s post failing mid-way (%s): ERRORED",
		 put ? "put" : "get", t->size, what, where);
	if (rc == 0)
		rc = arm(t, kind, PASS);
	if (rc == 0)
		rc = one_op(t, handle, put, &info);
	fired_by(t, kind, fired, sizeof(fired));
	if (rc < 0) {
		snprintf(why, sizeof(why), "open, arm or wait: %s (%s)", xfer_strerror(rc),
			 xfer_last_error(t->opener));
		fail(t, name, why);
	} else if (!fired[0]) {
		snprintf(why, sizeof(why), "the injector never failed a post (op ended %s: %s)",
			 xfer_state_name(info.state), info.cause);
		fail(t, name, why);
	} else if (strcmp(fired, where) != 0) {
		snprintf(why, sizeof(why), "the failed post was made by the %s, expected the %s",
			 fired, where);
		fail(t, name, why);
	} else if (info.state != XFER_ERRORED || info.error != -ENOMEM ||
		   !cause_names(info.cause, what, where)) {
		snprintf(why, sizeof(why), "ended %s %s after %" PRIu64 " bytes: %s",
			 xfer_state_name(info.state), xfer_strerror(info.error), info.bytes,
			 info.cause);
		fail(t, name, why);
	} else {
		snprintf(why, sizeof(why), "%s (%s) after %" PRIu64 " of %zu bytes: %s", name,
			 xfer_strerror(info.error), info.bytes, t->size, info.cause);
		ok(why);
	}
	xfer_window_close(t->opener, handle); /* (lost with its set already: either answer) */
}

/* A new handle (and set): a put and a get of the whole window, every byte compared. */
static void recovers(struct ctx *t, uint32_t seed)
{
	char name[128], why[1024];
	struct xfer_op_info pi = { 0 }, gi = { 0 };
	uint64_t handle;
	int rc = xfer_window_open(t->opener, t->meta, &handle, NULL, NULL);

	snprintf(name, sizeof(name), "then a new handle: a put and a get of %zu bytes, identical",
		 t->size);
	rdma_fill(t->lbuf.addr, t->size, seed);
	if (rc == 0)
		rc = one_op(t, handle, true, &pi);
	bool put_ok = rc == 0 && pi.state == XFER_COMPLETE &&
		      memcmp(t->obuf.addr, t->lbuf.addr, t->size) == 0;
	memset(t->lbuf.addr, 0, t->size);
	rdma_fill(t->obuf.addr, t->size, seed + 1);
	if (rc == 0)
		rc = one_op(t, handle, false, &gi);
	bool get_ok = rc == 0 && gi.state == XFER_COMPLETE &&
		      memcmp(t->obuf.addr, t->lbuf.addr, t->size) == 0;
	if (rc == 0)
		rc = xfer_window_close(t->opener, handle);
	if (rc < 0) {
		snprintf(why, sizeof(why), "%s (%s)", xfer_strerror(rc),
			 xfer_last_error(t->opener));
		fail(t, name, why);
	} else if (!put_ok || !get_ok) {
		snprintf(why, sizeof(why), "put %s%s (%s), get %s%s (%s)",
			 xfer_state_name(pi.state), put_ok ? "" : ", bytes differ", pi.cause,
			 xfer_state_name(gi.state), get_ok ? "" : ", bytes differ", gi.cause);
		fail(t, name, why);
	} else {
		ok(name);
	}
}

int main(int argc, char **argv)
{
	struct ctx t = { 0 };

	if (argc != 6) {
		fprintf(stderr, "usage: rdma_postfail OWNER_SOCKET OPENER_SOCKET PREFIX SIZE "
				"WRITES_FROM\n");
		return 2;
	}
	t.prefix = argv[3];
	t.size = strtoull(argv[4], NULL, 0);
	if (side_open(argv[1], "postfail-owner", t.size, &t.owner, &t.obuf, &t.oregion) < 0 ||
	    side_open(argv[2], "postfail-opener", t.size, &t.opener, &t.lbuf, &t.lregion) < 0 ||
	    xfer_window_create(t.owner, t.oregion, 0, 0, XFER_ACCESS_READWRITE, 0, &t.window,
			       &t.meta) < 0) {
		printf("FAIL - rdma_postfail setup (see above)\n");
		return 1;
	}
	rdma_fill(t.lbuf.addr, t.size, 7);
	failing_op(&t, true, argv[5]);
	failing_op(&t, false, "event loop");
	recovers(&t, 11);
	xfer_window_close(t.owner, t.window);
	free(t.meta);
	xfer_close(t.opener);
	xfer_close(t.owner);
	xfer_buf_free(&t.obuf);
	xfer_buf_free(&t.lbuf);
	return t.failures ? 1 : 0;
}
