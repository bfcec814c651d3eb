/* SPDX-License-Identifier: MIT */
/*
 * rdma_reg: registrations large enough that pinning them for the RDMA devices would stall the
 * daemon's event loop are made on a worker (DESIGN §7), through the public libxferclient API:
 *
 *   - a 4 KiB region registers on the loop, a resident 12 MiB one and a fresh 64 MiB one on a
 *     worker (list.regions "rdma_register_on_worker"), each with its device keys listed;
 *   - the 64 MiB regions move bytes at once: a readable over one on OWNER's daemon, read into
 *     one on the ACTIVE daemon, byte-exact, over the expected transport;
 *   - deregistered right after registering, and registered again, 3 times (the MRs go on a
 *     worker too);
 *   - clients that die with their registration under way (the request sent, then _exit: the
 *     reply has nobody to go to) leave nothing behind: OWNER's regions and registered bytes
 *     (global usage) come back to what they were.
 *
 *   rdma_reg OWNER_SOCKET ACTIVE_SOCKET [TRANSPORT]      (TRANSPORT default "rdma")
 *
 * Prints "ok - NAME" or "FAIL - NAME (why)" per case; exit 0 when every case passed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma_fill.h"
#include "xferclient.h"

#define WAIT_MS 180000
#define MIB (1024ULL * 1024ULL)
#define BIG (64 * MIB)
#define RESIDENT (12 * MIB)
#define DYING 6 /* clients that die mid-registration */

static const char *want_transport = "rdma";
static int failures;

static void ok(const char *name)
{
	printf("ok - %s\n", name);
}

static void fail(const char *name, const char *why)
{
	printf("FAIL - %s (%s)\n", name, why);
	failures++;
}

/* The object text of region @id in @c's list.regions, or NULL (free() it). */
static char *region_entry(struct xfer_client *c, uint64_t id)
{
	char *res = NULL, key[48], *at, *end;

	if (xfer_call(c, "list.regions", NULL, &res) < 0)
		return NULL;
	snprintf(key, sizeof(key), "{\"region\":%" PRIu64 ",", id);
	at = strstr(res, key);
	end = at ? strstr(at, "]}") : NULL; /* an entry ends with its "devices" list */
	char *out = end ? strndup(at, (size_t)(end + 2 - at)) : NULL;
	free(res);
	return out;
}

/* Registers a @len memfd (touched first when @touch) and checks where its MRs were made. */
static int register_checked(struct xfer_client *c, struct xfer_buf *b, size_t len, int touch,
			    int want_worker, uint64_t *region)
{
	char name[160], why[600];
	int rc = xfer_buf_alloc(len, b);

	snprintf(name, sizeof(name), "%zu-byte %s region registers %s, device keys listed", len,
		 touch ? "resident" : "fresh", want_worker ? "on a worker" : "on the loop");
	if (rc == 0 && touch)
		rdma_fill(b->addr, len, (uint32_t)len);
	if (rc == 0)
		rc = xfer_region_register(c, b->fd, 0, 0, "rdma_reg", region);
	if (rc < 0) {
		snprintf(why, sizeof(why), "%s: %s", xfer_strerror(rc), xfer_last_error(c));
		fail(name, why);
		return -1;
	}
	char *e = region_entry(c, *region);
	const char *flag = want_worker ? "\"rdma_register_on_worker\":true" :
					 "\"rdma_register_on_worker\":false";
	int good = e && strstr(e, flag) &&
		   (strcmp(want_transport, "rdma") != 0 || strstr(e, "\"lkey\":"));
	if (strcmp(want_transport, "rdma") != 0) /* no devices: nothing is worth a worker */
		good = e && strstr(e, "\"rdma_register_on_worker\":false");
	snprintf(why, sizeof(why), "listing: %s", e ? e : "(region not listed)");
	const char *us = e ? strstr(e, "\"rdma_register_us\":") : NULL;
	if (us) /* what the loop no longer waits for, on this VM */
		printf("# %zu bytes: ibv_reg_mr took %lld us\n", len, atoll(us + 19));
	if (good)
		ok(name);
	else
		fail(name, why);
	free(e);
	return good ? 0 : -1;
}

/* A readable over @src (filled) on @o, read into @dst on @a; byte-exact and on the transport. */
static void move_bytes(struct xfer_client *o, uint64_t src, struct xfer_buf *sb,
		       struct xfer_client *a, uint64_t dst, struct xfer_buf *db)
{
	const char *name = "64 MiB moved at once between two worker-registered regions, byte-exact";
	struct xfer_op_opts opts = { .timeout_ms = WAIT_MS };
	struct xfer_desc sd = { src, 0, BIG }, dd = { dst, 0, BIG };
	struct xfer_op_info pi, ai;
	uint64_t pop, aop;
	char *meta = NULL, why[400];
	int rc;

	rdma_fill(sb->addr, BIG, 77);
	memset(db->addr, 0, BIG);
	rc = xfer_readable(o, &sd, 1, &opts, &pop, &meta);
	if (rc < 0) {
		snprintf(why, sizeof(why), "readable: %s (%s)", xfer_strerror(rc),
			 xfer_last_error(o));
		fail(name, why);
		return;
	}
	rc = xfer_read(a, meta, &dd, 1, &opts, &aop);
	free(meta);
	if (rc < 0 || (rc = xfer_wait(o, pop, WAIT_MS, &pi)) < 0 ||
	    (rc = xfer_wait(a, aop, WAIT_MS, &ai)) < 0) {
		snprintf(why, sizeof(why), "read/wait: %s (%s)", xfer_strerror(rc),
			 xfer_last_error(a));
		fail(name, why);
		return;
	}
	if (pi.state != XFER_COMPLETE || ai.state != XFER_COMPLETE)
		snprintf(why, sizeof(why), "ended %s / %s: %s", xfer_state_name(pi.state),
			 xfer_state_name(ai.state), ai.cause[0] ? ai.cause : pi.cause);
	else if (strcmp(ai.transport, want_transport) != 0)
		snprintf(why, sizeof(why), "transport '%s', expected '%s'", ai.transport,
			 want_transport);
	else if (memcmp(sb->addr, db->addr, BIG) != 0)
		snprintf(why, sizeof(why), "the bytes that arrived differ from the source");
	else
		why[0] = 0;
	xfer_release(a, aop);
	xfer_release(o, pop);
	if (why[0])
		fail(name, why);
	else
		ok(name);
}

/* Registers and at once deregisters a fresh BIG memfd, 3 times. */
static void register_deregister(struct xfer_client *c)
{
	const char *name = "a 64 MiB region deregistered right after registering, 3 times";
	char why[300];

	for (int i = 0; i < 3; i++) {
		struct xfer_buf b;
		uint64_t r;
		int rc = xfer_buf_alloc(BIG, &b);
		if (rc == 0)
			rc = xfer_region_register(c, b.fd, 0, 0, "rdma_reg-again", &r);
		if (rc == 0)
			rc = xfer_region_deregister(c, r, 0);
		xfer_buf_free(&b);
		if (rc < 0) {
			snprintf(why, sizeof(why), "round %d: %s (%s)", i, xfer_strerror(rc),
				 xfer_last_error(c));
			fail(name, why);
			return;
		}
	}
	ok(name);
}

/*
 * A client that sends region.register for a memfd of @len (touched when @touch: the fast path
 * straight to the devices' worker) and exits before any reply can come.
 */
static void dying_client(const char *sock, size_t len, int touch)
{
	struct xfer_client *c;
	struct xfer_buf b;
	char body[] =
		"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"region.register\",\"params\":{}}";
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { body, sizeof(body) - 1 };
	struct msghdr m = { .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf) };

	if (xfer_connect(sock, "rdma_reg-dying", &c) < 0 || xfer_buf_alloc(len, &b) < 0)
		_exit(2);
	if (touch)
		memset(b.addr, 1, len);
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &b.fd, sizeof(int));
	_exit(sendmsg(xfer_get_fd(c), &m, MSG_NOSIGNAL) < 0 ? 3 : 0);
}

/* "regions=N bytes=N" of @c's daemon: its regions and its global registered bytes in use. */
static void usage_of(struct xfer_client *c, char *out, size_t len)
{
	char *res = NULL, *p, *q;

	if (xfer_call(c, "stats", NULL, &res) < 0) {
		snprintf(out, len, "(stats failed)");
		return;
	}
	p = strstr(res, "\"regions\":");
	q = strstr(res, "\"global\":");
	q = q ? strstr(q, "\"bytes\":{\"used\":") : NULL;
	snprintf(out, len, "regions=%lld bytes=%lld", p ? atoll(p + 10) : -1LL,
		 q ? atoll(q + 16) : -1LL);
	free(res);
}

static void dying_clients(const char *sock, struct xfer_client *c)
{
	const char *name = "clients that die mid-registration leave no region, charge or MR";
	char before[80], now[80], why[300];
	int bad = 0;

	usage_of(c, before, sizeof(before));
	for (int i = 0; i < DYING; i++) {
		pid_t pid = fork();
		if (pid == 0)
			dying_client(sock, i % 2 ? BIG : RESIDENT, i % 2 == 0);
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			bad++;
	}
	/* The daemon finishes each registration (or its undo) on its own time: bounded wait. */
	for (int i = 0; i < 1200; i++) {
		usage_of(c, now, sizeof(now));
		if (strcmp(now, before) == 0)
			break;
		nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
	}
	snprintf(why, sizeof(why), "%d client(s) failed to send; before %s, after %s", bad, before,
		 now);
	if (bad || strcmp(now, before) != 0)
		fail(name, why);
	else
		ok(name);
}

int main(int argc, char **argv)
{
	struct xfer_client *o = NULL, *a = NULL;
	struct xfer_buf small = { 0 }, res = { 0 }, big = { 0 }, abig = { 0 };
	uint64_t r0, r1, r2, r3;

	if (argc < 3) {
		fprintf(stderr, "usage: rdma_reg OWNER_SOCKET ACTIVE_SOCKET [TRANSPORT]\n");
		return 2;
	}
	if (argc > 3)
		want_transport = argv[3];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (xfer_connect(argv[1], "rdma_reg", &o) < 0 ||
	    xfer_connect(argv[2], "rdma_reg", &a) < 0) {
		fail("rdma_reg connects", "cannot reach a daemon");
		return 1;
	}
	int rdma = strcmp(want_transport, "rdma") == 0;
	register_checked(o, &small, 4096, 1, 0, &r0);
	register_checked(o, &res, RESIDENT, 1, rdma, &r1);
	int have = register_checked(o, &big, BIG, 0, rdma, &r2) == 0;
	have &= register_checked(a, &abig, BIG, 0, rdma, &r3) == 0;
	if (have)
		move_bytes(o, r2, &big, a, r3, &abig);
	register_deregister(o);
	dying_clients(argv[1], o);
	xfer_close(o);
	xfer_close(a);
	xfer_buf_free(&small);
	xfer_buf_free(&res);
	xfer_buf_free(&big);
	xfer_buf_free(&abig);
	return failures ? 1 : 0;
}
