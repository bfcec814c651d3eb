// SPDX-License-Identifier: MIT
/*
 * Limits per connection, per uid and global (issue 12): a local user opening many connections
 * that register sparse memfds (which the daemon populates) against a small global limit, uids
 * sharing or not a budget, the connection and pending-wait caps, and the accounting returning
 * to zero once clients leave.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"
#include "xp_fdmsg.h"
#include "xp_json.h"

#define MIB (1ull << 20)
#define NOBODY 65534

static struct xfer_client *connect_client(struct td *d)
{
	struct xfer_client *c = NULL;

	CHECK_OK(xfer_connect(d->sock, "test-limits", &c));
	return c;
}

/* Registers a sparse sealed memfd of @size on @c. Returns 0 or -errno; *region set. */
static int register_sparse(struct xfer_client *c, size_t size, uint64_t *region)
{
	int fd = td_memfd(size, true);
	int rc;

	CHECK_OK(fd);
	rc = xfer_region_register(c, fd, 0, 0, "sparse", region);
	close(fd);
	return rc;
}

/* stats.limits.@scope.@res.used (and .limit) as @c sees them; -1 when absent. */
static long long limit_value(struct xfer_client *c, const char *scope, const char *res,
			     const char *field)
{
	char *text = NULL;
	json_t *root, *v;
	long long out = -1;

	CHECK_OK(xfer_call(c, "stats", NULL, &text));
	root = json_loads(text, 0, NULL);
	free(text);
	CHECK(root != NULL);
	v = json_object_get(json_object_get(json_object_get(json_object_get(root, "limits"), scope),
					    res),
			    field);
	if (json_is_integer(v))
		out = json_integer_value(v);
	json_decref(root);
	return out;
}

static long long used(struct xfer_client *c, const char *scope, const char *res)
{
	return limit_value(c, scope, res, "used");
}

/* VmRSS of @pid in bytes. */
static long long rss_bytes(pid_t pid)
{
	long long kib = td_status_kib(pid, "VmRSS");

	CHECK(kib >= 0);
	return kib * 1024;
}

#define NCONNS 16
#define SPARSE_SIZE (16 * MIB)
#define GLOBAL_BYTES (64 * MIB)

/*
 * The attack of issue 12 item 3: many connections, each registering sparse memfds that cost
 * the client nothing and that the daemon populates. The global limit must refuse once the sum
 * passes it, naming it, and the daemon's RSS must stay below the limit plus slack (without the
 * limit it would grow by NCONNS * SPARSE_SIZE = 256 MiB).
 */
TEST(limit_global_bytes_sparse_memfds)
{
	struct xfer_client *c[NCONNS];
	struct td d;
	uint64_t region;
	int ok = 0, refused = 0;
	char want[128];

	CHECK_OK(td_start(&d, "{\"global_limits\": {\"bytes\": 67108864}, "
			      "\"uid_limits\": {\"bytes\": 1073741824}, "
			      "\"limits\": {\"bytes\": 1073741824}}"));
	long long base = rss_bytes(d.pid);
	for (int i = 0; i < NCONNS; i++)
		c[i] = connect_client(&d);
	snprintf(want, sizeof(want),
		 "global limit of 64 MiB registered bytes would be exceeded (registered 64 MiB)");
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < NCONNS; i++) {
			int rc = register_sparse(c[i], SPARSE_SIZE, &region);
			if (rc == 0) {
				ok++;
				continue;
			}
			CHECK_ERR(rc, -EDQUOT);
			if (!strstr(xfer_last_error(c[i]), want))
				harness_fail(__FILE__, __LINE__, "refusal \"%s\" lacks \"%s\"",
					     xfer_last_error(c[i]), want);
			refused++;
		}
	}
	CHECK_EQ_INT(ok, GLOBAL_BYTES / SPARSE_SIZE);
	CHECK_EQ_INT(refused, 2 * NCONNS - ok);
	CHECK_EQ_INT(used(c[0], "global", "bytes"), GLOBAL_BYTES);
	CHECK_EQ_INT(limit_value(c[0], "global", "bytes", "limit"), GLOBAL_BYTES);
	long long rss = rss_bytes(d.pid);
	harness_note("daemon RSS %lld MiB before, %lld MiB after", base >> 20, rss >> 20);
	CHECK(rss < base + (long long)GLOBAL_BYTES + (long long)(32 * MIB));
	/* Still serving: a small registration after one connection let go fits again. */
	xfer_close(c[0]);
	CHECK_EQ_INT(td_wait_stat(&d, "registered_bytes", (long long)(GLOBAL_BYTES - SPARSE_SIZE),
				  5000, NULL),
		     0);
	CHECK_OK(register_sparse(c[1], SPARSE_SIZE, &region));
	for (int i = 1; i < NCONNS; i++)
		xfer_close(c[i]);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* Registration charges the page-aligned mapping, not the byte range it was asked for. */
TEST(limit_charges_whole_pages)
{
	struct td d;
	uint64_t region;
	long page = sysconf(_SC_PAGESIZE);

	CHECK_OK(td_start(&d, "{\"limits\": {\"bytes\": 8192}}"));
	struct xfer_client *c = connect_client(&d);
	int fd = td_memfd(4 * (size_t)page, true);
	CHECK_OK(fd);
	/* 2 bytes across a page boundary: the daemon maps and populates two pages */
	CHECK_OK(xfer_region_register(c, fd, (uint64_t)page - 1, 2, "straddle", &region));
	CHECK_EQ_INT(used(c, "per_connection", "bytes"), 2 * page);
	CHECK_EQ_INT(used(c, "global", "bytes"), 2 * page);
	CHECK_ERR(xfer_region_register(c, fd, 0, 1, "one", &region), -EDQUOT);
	CHECK(strstr(xfer_last_error(c), "per-connection limit of 8 KiB") != NULL);
	close(fd);
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* The socket's mode (438 = 0666 in the configs) and its directory must let nobody in. */
static pid_t spawn_nobody(struct td *d, void (*fn)(void *))
{
	CHECK_OK(chmod(d->dir, 0755) < 0 ? -errno : 0);
	pid_t pid = td_spawn(fn, d);
	CHECK_OK(pid);
	return pid;
}

static void become_nobody(void)
{
	CHECK_OK(setgroups(0, NULL) < 0 ? -errno : 0);
	CHECK_OK(setgid(NOBODY) < 0 ? -errno : 0);
	CHECK_OK(setuid(NOBODY) < 0 ? -errno : 0);
}

static void nobody_registers(void *arg)
{
	struct td *d = arg;
	uint64_t region;

	become_nobody();
	struct xfer_client *c = connect_client(d);
	/* its own budget: root's 32 MiB do not count against it */
	CHECK_OK(register_sparse(c, 16 * MIB, &region));
	CHECK_OK(register_sparse(c, 16 * MIB, &region));
	CHECK_EQ_INT(used(c, "per_uid", "bytes"), 32 * MIB);
	CHECK_ERR(register_sparse(c, 4096, &region), -EDQUOT);
	CHECK(strstr(xfer_last_error(c), "per-uid (uid 65534) limit of 32 MiB") != NULL);
	xfer_close(c);
}

/* Two connections of one uid share its budget; another uid has its own. */
TEST(limit_per_uid_shared_and_separate)
{
	struct td d;
	uint64_t region;

	if (geteuid() != 0)
		harness_skip("needs root to run a client as nobody");
	CHECK_OK(td_start(&d, "{\"socket_mode\": 438, \"uid_limits\": {\"bytes\": 33554432}}"));
	struct xfer_client *a = connect_client(&d), *b = connect_client(&d);
	CHECK_OK(register_sparse(a, 16 * MIB, &region));
	CHECK_OK(register_sparse(b, 16 * MIB, &region));
	CHECK_ERR(register_sparse(b, 4096, &region), -EDQUOT);
	CHECK(strstr(xfer_last_error(b), "per-uid (uid 0) limit of 32 MiB registered bytes") !=
	      NULL);
	CHECK_EQ_INT(used(a, "per_uid", "bytes"), 32 * MIB);
	CHECK_EQ_INT(used(a, "per_connection", "bytes"), 16 * MIB);
	pid_t pid = spawn_nobody(&d, nobody_registers);
	CHECK_EQ_INT(td_wait_child(pid, 20000), 0);
	/* nobody is gone: its charges went with it */
	CHECK_EQ_INT(td_wait_stat(&d, "registered_bytes", (long long)(32 * MIB), 5000, NULL), 0);
	CHECK_EQ_INT(used(a, "global", "bytes"), 32 * MIB);
	xfer_close(a);
	xfer_close(b);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* A connection past a limit gets one error naming it at accept, then EOF. */
static void expect_refused(struct td *d, const char *want)
{
	struct xp_reply rep;
	int sock = td_raw_connect(d);

	CHECK_OK(sock);
	CHECK_OK(td_raw_recv(sock, &rep));
	CHECK(!rep.result);
	CHECK_STR_EQ(td_reply_errno(&rep), "EDQUOT");
	if (!rep.message || !strstr(rep.message, want))
		harness_fail(__FILE__, __LINE__, "refusal \"%s\" lacks \"%s\"",
			     rep.message ? rep.message : "(none)", want);
	xp_reply_fini(&rep);
	CHECK(td_raw_closed(sock));
	close(sock);
}

static void nobody_connects(void *arg)
{
	struct td *d = arg;

	become_nobody();
	struct xfer_client *c1 = connect_client(d), *c2 = connect_client(d);
	/* root holds 3, nobody 2: the global 5 is reached */
	expect_refused(d, "global limit of 5 connections reached (5 in use)");
	xfer_close(c1);
	xfer_close(c2);
}

TEST(limit_clients_per_uid_and_global)
{
	struct xfer_client *c[3], *more = NULL;
	struct td d;

	CHECK_OK(td_start(&d, "{\"socket_mode\": 438, \"uid_limits\": {\"clients\": 3}, "
			      "\"global_limits\": {\"clients\": 5}}"));
	for (int i = 0; i < 3; i++)
		c[i] = connect_client(&d);
	expect_refused(&d, "per-uid (uid 0) limit of 3 connections reached (3 in use)");
	/* the library reports it as the failure of its hello */
	CHECK_ERR(xfer_connect(d.sock, "one-too-many", &more), -EDQUOT);
	CHECK(more == NULL);
	CHECK_EQ_INT(used(c[0], "per_uid", "clients"), 3);
	if (geteuid() == 0) {
		pid_t pid = spawn_nobody(&d, nobody_connects);
		CHECK_EQ_INT(td_wait_child(pid, 20000), 0);
	}
	/* a closed connection gives its place back */
	xfer_close(c[2]);
	/* c[0], c[1] and td_stat's own connection */
	CHECK_EQ_INT(td_wait_stat(&d, "clients", 3, 5000, NULL), 0);
	c[2] = connect_client(&d);
	CHECK_EQ_INT(used(c[2], "global", "clients"), 3);
	for (int i = 0; i < 3; i++)
		xfer_close(c[i]);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* A raw connection with a region and a passive op on it; returns the socket and *op. */
static int conn_with_op(struct td *d, long long *op)
{
	const char *reg = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"region.register\","
			  "\"params\":{\"name\":\"w\"}}";
	char req[256];
	struct xp_reply rep;
	int sock = td_raw_connect(d), fd = td_memfd(4096, true);

	CHECK_OK(sock);
	CHECK_OK(fd);
	CHECK_OK(td_raw_hello(sock));
	CHECK_OK(td_raw_call(sock, reg, &fd, 1, &rep));
	close(fd);
	CHECK(rep.result != NULL);
	long long region = json_integer_value(json_object_get(rep.result, "region"));
	xp_reply_fini(&rep);
	snprintf(req, sizeof(req),
		 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"op.readable\",\"params\":"
		 "{\"descs\":[{\"region\":%lld,\"offset\":0,\"length\":4096}]}}",
		 region);
	CHECK_OK(td_raw_call(sock, req, NULL, 0, &rep));
	CHECK(rep.result != NULL);
	*op = json_integer_value(json_object_get(rep.result, "op"));
	xp_reply_fini(&rep);
	return sock;
}

/* Sends op.wait @id on @op without reading a reply (it stays pending). */
static void send_wait(int sock, long long op, int id)
{
	char req[160];

	snprintf(req, sizeof(req),
		 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"op.wait\",\"params\":{\"op\":%lld}}",
		 id, op);
	CHECK_OK(xp_packet_send(sock, req, strlen(req), NULL, 0));
}

/* One more op.wait must be refused EDQUOT with a message containing @want. */
static void expect_wait_refused(int sock, long long op, const char *want)
{
	char req[160];
	struct xp_reply rep;

	snprintf(req, sizeof(req),
		 "{\"jsonrpc\":\"2.0\",\"id\":999,\"method\":\"op.wait\",\"params\":{\"op\":%lld}}",
		 op);
	CHECK_OK(td_raw_call(sock, req, NULL, 0, &rep));
	CHECK_EQ_INT(rep.id, 999);
	CHECK_STR_EQ(td_reply_errno(&rep), "EDQUOT");
	if (!rep.message || !strstr(rep.message, want))
		harness_fail(__FILE__, __LINE__, "refusal \"%s\" lacks \"%s\"",
			     rep.message ? rep.message : "(none)", want);
	xp_reply_fini(&rep);
}

TEST(limit_pending_waits)
{
	struct td d;
	long long op_a, op_b;

	CHECK_OK(td_start(&d, "{\"limits\": {\"waits\": 4}, \"global_limits\": {\"waits\": 6}}"));
	int a = conn_with_op(&d, &op_a), b = conn_with_op(&d, &op_b);
	for (int i = 0; i < 4; i++)
		send_wait(a, op_a, 10 + i);
	expect_wait_refused(a, op_a, "per-connection limit of 4 pending waits reached (4 in use)");
	send_wait(b, op_b, 10);
	send_wait(b, op_b, 11);
	expect_wait_refused(b, op_b, "global limit of 6 pending waits reached (6 in use)");
	struct xfer_client *c = connect_client(&d);
	CHECK_EQ_INT(used(c, "global", "waits"), 6);
	/* a's waiters go with it, and b may wait again */
	close(a);
	/* b, c and td_stat's own connection */
	CHECK_EQ_INT(td_wait_stat(&d, "clients", 3, 5000, NULL), 0);
	CHECK_EQ_INT(used(c, "global", "waits"), 2);
	send_wait(b, op_b, 12);
	send_wait(b, op_b, 13);
	/* b's packets are handled in order: once this answers, both waits are in */
	expect_wait_refused(b, op_b, "per-connection limit of 4 pending waits reached (4 in use)");
	CHECK_EQ_INT(used(c, "global", "waits"), 4);
	CHECK_EQ_INT(used(c, "per_connection", "waits"), 0);
	close(b);
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}

static void nobody_holds(void *arg)
{
	struct td *d = arg;
	struct xfer_desc desc;
	uint64_t region, op;
	char *meta = NULL;

	become_nobody();
	struct xfer_client *c = connect_client(d);
	CHECK_OK(register_sparse(c, 2 * MIB, &region));
	desc = (struct xfer_desc){ .region = region, .offset = 0, .length = 4096 };
	CHECK_OK(xfer_readable(c, &desc, 1, NULL, &op, &meta));
	free(meta);
	/* leaves without cleaning up: the daemon must */
	_exit(0);
}

/* Everything charged comes back when the clients go, whoever they were and however they left. */
TEST(limit_usage_returns_to_zero)
{
	static const char *const res[] = { "bytes", "regions", "ops" };
	struct xfer_client *c[4];
	struct xfer_desc desc;
	struct td d;
	uint64_t region, op;
	char *meta;
	long long op_raw;

	CHECK_OK(td_start(&d, "{\"socket_mode\": 438, \"limits\": {\"bytes\": 8388608}}"));
	for (int i = 0; i < 4; i++) {
		c[i] = connect_client(&d);
		CHECK_OK(register_sparse(c[i], 4 * MIB, &region));
		desc = (struct xfer_desc){ .region = region, .offset = 0, .length = 4096 };
		meta = NULL;
		CHECK_OK(xfer_readable(c[i], &desc, 1, NULL, &op, &meta));
		free(meta);
	}
	/* a refused registration and a deregistered region must not leave charges either */
	CHECK_ERR(register_sparse(c[1], 8 * MIB, &region), -EDQUOT);
	CHECK_OK(register_sparse(c[0], 4096, &region));
	CHECK_OK(xfer_region_deregister(c[0], region, 0));
	int raw = conn_with_op(&d, &op_raw);
	send_wait(raw, op_raw, 10);
	if (geteuid() == 0) {
		pid_t pid = spawn_nobody(&d, nobody_holds);
		CHECK_EQ_INT(td_wait_child(pid, 20000), 0);
	}
	CHECK(used(c[0], "global", "bytes") >= (long long)(16 * MIB));
	CHECK_EQ_INT(used(c[0], "global", "waits"), 1);
	close(raw);
	for (int i = 0; i < 4; i++)
		xfer_close(c[i]);
	CHECK_EQ_INT(td_wait_stat(&d, "clients", 1, 5000, NULL), 0); /* td_stat's own */
	struct xfer_client *probe = connect_client(&d);
	for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
		CHECK_EQ_INT(used(probe, "global", res[i]), 0);
		CHECK_EQ_INT(used(probe, "per_uid", res[i]), 0);
	}
	CHECK_EQ_INT(used(probe, "global", "waits"), 0);
	CHECK_EQ_INT(used(probe, "global", "clients"), 1);
	CHECK_EQ_INT(used(probe, "per_uid", "clients"), 1);
	xfer_close(probe);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* Registers the regular file @path (made if need be) as a region of @c. Returns 0 or -errno. */
static int register_file(struct xfer_client *c, const char *path, uint64_t *region)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	int rc;

	CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
	rc = xfer_region_register_file(c, fd, 0, 0, 0, "file", region);
	close(fd);
	return rc;
}

/*
 * A file region keeps its file open in the daemon: each is charged to the fds limits, so that
 * one local user's file regions cannot take the fds everyone else's connections need. With
 * uid_limits.fds 3, the fourth file region is refused EDQUOT naming the limit while a memfd
 * region still registers; a deregistered file gives its fd back; nothing stays charged once
 * the client is gone.
 */
TEST(limit_fds_of_file_regions)
{
	char path[64];
	uint64_t files[3], region;
	struct td d;

	CHECK_OK(td_start(&d, "{\"uid_limits\": {\"fds\": 3}}"));
	struct xfer_client *c = connect_client(&d);
	snprintf(path, sizeof(path), "/tmp/xferd-limit-fds.%d", (int)getpid());
	for (int i = 0; i < 3; i++)
		CHECK_OK(register_file(c, path, &files[i]));
	CHECK_EQ_INT(used(c, "per_uid", "fds"), 3);
	CHECK_ERR(register_file(c, path, &region), -EDQUOT);
	if (!strstr(xfer_last_error(c),
		    "limit of 3 file descriptors kept for file regions reached"))
		harness_fail(__FILE__, __LINE__, "the refusal: \"%s\"", xfer_last_error(c));
	CHECK_OK(register_sparse(c, 4096, &region)); /* (a memfd keeps no fd) */
	CHECK_EQ_INT(used(c, "per_uid", "fds"), 3);
	CHECK_OK(xfer_region_deregister(c, files[0], 0));
	CHECK_OK(register_file(c, path, &files[0]));
	xfer_close(c);
	CHECK_EQ_INT(td_wait_stat(&d, "clients", 1, 5000, NULL), 0);
	struct xfer_client *probe = connect_client(&d);
	CHECK_EQ_INT(used(probe, "global", "fds"), 0);
	CHECK_EQ_INT(used(probe, "per_uid", "fds"), 0);
	xfer_close(probe);
	CHECK_EQ_INT(td_stop(&d), 0);
	unlink(path);
}

/* The fds limits default from the daemon's own fd limit: half in all, an eighth per uid. */
TEST(limit_fds_default_from_rlimit_nofile)
{
	struct rlimit was, small;
	struct td d;

	CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0);
	small = (struct rlimit){ was.rlim_max < 400 ? was.rlim_max : 400, was.rlim_max };
	CHECK(setrlimit(RLIMIT_NOFILE, &small) == 0); /* (the daemon inherits it) */
	int rc = td_start(&d, NULL);
	CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
	CHECK_OK(rc);
	struct xfer_client *c = connect_client(&d);
	CHECK_EQ_INT(limit_value(c, "global", "fds", "limit"), (long long)small.rlim_cur / 2);
	CHECK_EQ_INT(limit_value(c, "per_uid", "fds", "limit"), (long long)small.rlim_cur / 8);
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}

#define FLOOD_CONNS 8
#define FLOOD_REGIONS 64
#define FLOOD_UID_QUEUED (32 * MIB)
#define FLOOD_REQS 1200 /* per connection: ~12 MiB of replies */

/*
 * FLOOD_CONNS connections of nobody, each with FLOOD_REGIONS regions (a list.regions reply of
 * ~10 KiB), send FLOOD_REQS list.regions requests and never read a reply; they stay open 3 s,
 * then exit.
 */
static void nobody_floods(void *arg)
{
	static const char req[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"list.regions\"}";
	struct td *d = arg;
	struct xfer_client *c[FLOOD_CONNS];
	uint64_t region;

	become_nobody();
	int fd = td_memfd(4096, true);
	CHECK_OK(fd);
	for (int i = 0; i < FLOOD_CONNS; i++) {
		c[i] = connect_client(d);
		for (int r = 0; r < FLOOD_REGIONS; r++)
			CHECK_OK(xfer_region_register(c[i], fd, 0, 0, "flood", &region));
	}
	/* round by round, so that every connection holds replies at once, each below its own
	 * 16 MiB; a send that fails (not for a full socket) is a connection the daemon dropped */
	for (int n = 0; n < FLOOD_REQS; n++)
		for (int i = 0; i < FLOOD_CONNS; i++) {
			struct pollfd p = { .fd = xfer_get_fd(c[i]), .events = POLLOUT };
			while (send(p.fd, req, sizeof(req) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
			       errno == EAGAIN && poll(&p, 1, 5000) == 1)
				;
		}
	sleep(3);
	_exit(0);
}

/*
 * A local user's connections that stop reading: each may have 16 MiB of replies queued in the
 * daemon, but all of the uid's together only its queued_bytes budget (32 MiB here). Without the
 * uid's budget the daemon would hold FLOOD_CONNS * 16 MiB = 128 MiB for nobody.
 */
TEST_TIMEOUT(limit_queued_bytes_per_uid, 120)
{
	struct td d;
	long long peak_queued = 0, peak_rss = 0;
	char cfg[128];

	if (geteuid() != 0)
		harness_skip("needs root to run a client as nobody");
	snprintf(cfg, sizeof(cfg),
		 "{\"socket_mode\": 438, \"uid_limits\": {\"queued_bytes\": %llu}}",
		 FLOOD_UID_QUEUED);
	CHECK_OK(td_start(&d, cfg));
	struct xfer_client *probe = connect_client(&d);
	CHECK_EQ_INT(limit_value(probe, "per_uid", "queued_bytes", "limit"), FLOOD_UID_QUEUED);
	long long base = rss_bytes(d.pid);
	pid_t pid = spawn_nobody(&d, nobody_floods);
	while (waitpid(pid, NULL, WNOHANG) == 0) {
		long long q = used(probe, "global", "queued_bytes"), rss = rss_bytes(d.pid);
		peak_queued = q > peak_queued ? q : peak_queued;
		peak_rss = rss > peak_rss ? rss : peak_rss;
		usleep(20000);
	}
	harness_note("queued for nobody at most %lld MiB; daemon RSS %lld -> %lld MiB",
		     peak_queued >> 20, base >> 20, peak_rss >> 20);
	CHECK(peak_queued > 0 && peak_queued <= (long long)FLOOD_UID_QUEUED);
	/* The daemon's log names the limit that cut them: its scope and its size. */
	CHECK(td_file_has(d.log, "closed: client stopped reading (per-uid (uid 65534) limit of "
				 "32 MiB of replies queued reached"));
#ifndef __SANITIZE_ADDRESS__
	/* (ASan's quarantine keeps freed replies resident: the queued peak is the check there.) */
	CHECK(peak_rss - base < (long long)(FLOOD_UID_QUEUED + 40 * MIB));
#endif
	/* nobody is gone: nothing stays charged, and root is served */
	CHECK_EQ_INT(td_wait_stat(&d, "clients", 2, 5000, NULL), 0);
	CHECK_EQ_INT(used(probe, "global", "queued_bytes"), 0);
	CHECK_EQ_INT(used(probe, "global", "regions"), 0);
	xfer_close(probe);
	CHECK_EQ_INT(td_stop(&d), 0);
}
