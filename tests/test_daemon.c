// SPDX-License-Identifier: MIT
/*
 * The daemon as an operator runs it: per-client limits from the config file, refusal of a bad
 * config at startup, and systemd socket activation (a listening socket passed as fd 3 with
 * LISTEN_FDS/LISTEN_PID, the protocol sd_listen_fds(3) reads).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "daemon_util.h"
#include "xferclient.h"

static struct xfer_client *connect_client(struct td *d)
{
	struct xfer_client *c = NULL;

	CHECK_OK(xfer_connect(d->sock, "limits", &c));
	return c;
}

/* Registers a fresh sealed buffer of @size; the region id lands in *region. */
static int register_buf(struct xfer_client *c, size_t size, struct xfer_buf *buf, uint64_t *region)
{
	int rc = xfer_buf_alloc(size, buf);

	if (rc < 0)
		return rc;
	return xfer_region_register(c, buf->fd, 0, 0, NULL, region);
}

TEST(limit_regions_per_client)
{
	struct td d;
	struct xfer_buf b[3] = { 0 };
	uint64_t r[3];

	CHECK_OK(td_start(&d, "{\"limits\": {\"regions\": 2}}"));
	struct xfer_client *c = connect_client(&d);
	CHECK_OK(register_buf(c, 4096, &b[0], &r[0]));
	CHECK_OK(register_buf(c, 4096, &b[1], &r[1]));
	CHECK_ERR(register_buf(c, 4096, &b[2], &r[2]), -EDQUOT);
	CHECK(strstr(xfer_last_error(c), "limit of 2 regions") != NULL);
	/* Another client has its own allowance. */
	struct xfer_client *c2 = connect_client(&d);
	CHECK_OK(xfer_region_register(c2, b[2].fd, 0, 0, NULL, &r[2]));
	/* Freeing one makes room again. */
	CHECK_OK(xfer_region_deregister(c, r[0], 0));
	CHECK_OK(xfer_region_register(c, b[2].fd, 0, 0, NULL, &r[2]));
	xfer_close(c2);
	xfer_close(c);
	for (int i = 0; i < 3; i++)
		xfer_buf_free(&b[i]);
	CHECK_EQ_INT(td_stop(&d), 0);
}

TEST(limit_bytes_per_client)
{
	struct td d;
	struct xfer_buf a = { 0 }, b = { 0 };
	uint64_t ra, rb;

	CHECK_OK(td_start(&d, "{\"limits\": {\"bytes\": 1048576}}"));
	struct xfer_client *c = connect_client(&d);
	CHECK_OK(register_buf(c, 768 * 1024, &a, &ra));
	CHECK_ERR(register_buf(c, 512 * 1024, &b, &rb), -EDQUOT);
	CHECK(strstr(xfer_last_error(c), "registered bytes") != NULL);
	/* What is left still fits. */
	CHECK_OK(xfer_region_register(c, b.fd, 0, 256 * 1024, NULL, &rb));
	xfer_close(c);
	xfer_buf_free(&a);
	xfer_buf_free(&b);
	CHECK_EQ_INT(td_stop(&d), 0);
}

TEST(limit_ops_per_client)
{
	struct td d;
	struct xfer_buf b = { 0 };
	uint64_t region, op[3];
	char *meta;

	CHECK_OK(td_start(&d, "{\"limits\": {\"ops\": 2}}"));
	struct xfer_client *c = connect_client(&d);
	CHECK_OK(register_buf(c, 4096, &b, &region));
	struct xfer_desc desc = { region, 0, 4096 };
	for (int i = 0; i < 2; i++) {
		CHECK_OK(xfer_readable(c, &desc, 1, NULL, &op[i], &meta));
		free(meta);
	}
	CHECK_ERR(xfer_readable(c, &desc, 1, NULL, &op[2], &meta), -EDQUOT);
	CHECK(strstr(xfer_last_error(c), "limit of 2 operations") != NULL);
	/* Ended operations count until released; releasing frees the slot. */
	CHECK_OK(xfer_release(c, op[0]));
	CHECK_OK(xfer_readable(c, &desc, 1, NULL, &op[2], &meta));
	free(meta);
	xfer_close(c);
	xfer_buf_free(&b);
	CHECK_EQ_INT(td_stop(&d), 0);
}

static int xferd_path(char *buf, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n < 0)
		return -errno;
	self[n] = '\0';
	snprintf(buf, len, "%s/../xferd", dirname(self));
	return access(buf, X_OK) == 0 ? 0 : -errno;
}

/* Runs xferd with @config in @dir; returns its exit status (its stderr goes to DIR/log). */
static int run_with_config(const char *bin, const char *dir, const char *config)
{
	char cfg[128], sock[128], log[128];
	int status;

	snprintf(cfg, sizeof(cfg), "%s/xferd.json", dir);
	snprintf(sock, sizeof(sock), "%s/xferd.sock", dir);
	snprintf(log, sizeof(log), "%s/log", dir);
	FILE *f = fopen(cfg, "we");
	if (!f)
		return -errno;
	fputs(config, f);
	fclose(f);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (out >= 0)
			dup2(out, 2);
		execl(bin, bin, "--config", cfg, "--socket", sock, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -ECHILD;
	unlink(cfg);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(bad_config_refused_at_startup)
{
	static const struct {
		const char *config, *says;
	} cases[] = {
		{ "{\"sockte\": \"/x\"}", "sockte" },
		{ "{\"limits\": {\"regions\": 0}}", "limits must be positive" },
		{ "{\"transport\": \"carrier-pigeon\"}", "transport must be auto, rdma or tcp" },
		{ "{\"peer_connections\": 99}", "peer_connections 1..16" },
		{ "{\"tcp_congestion\": \"Cubic\"}",
		  "tcp_congestion must be a congestion control's" },
		{ "{\"tcp_congestion\": \"a_name_of_16_chr\"}", "tcp_congestion must be" },
		{ "{\"tcp_congestion\": 1}", "tcp_congestion must be" },
		{ "{\"tcp_notsent_lowat\": 4096}", "tcp_notsent_lowat 0 or 16384..67108864" },
		{ "{\"rdma_request_size\": 512}", "rdma_request_size must be 4096 to 4194304" },
		{ "{\"rdma_post_thread\": \"sometimes\"}",
		  "rdma_post_thread must be auto (a poster thread for devices made in software only), "
		  "always or never, not \"sometimes\"" },
		{ "{\"rdma_post_thread\": 1}", "rdma_post_thread must be auto" },
		{ "not json", "xferd.json:1" },
		/* A value of the wrong type is refused by the key's name (each unpack site). */
		{ "{\"busy_poll_us\": \"fast\"}", "busy_poll_us: expected integer, got string" },
		{ "{\"log_level\": 3}", "log_level: expected string, got integer" },
		{ "{\"transport\": 3}", "transport: expected string, got integer" },
		{ "{\"peer_connections\": \"two\"}", "peer_connections: expected integer" },
		{ "{\"handshake_timeout_ms\": 1.5}",
		  "handshake_timeout_ms: expected integer, got real" },
		{ "{\"insecure_peers\": 1}",
		  "insecure_peers: expected true or false, got integer" },
	};
	char bin[PATH_MAX], dir[] = "/tmp/xferd-cfg.XXXXXX", log[64];

	CHECK_OK(xferd_path(bin, sizeof(bin)));
	CHECK(mkdtemp(dir) != NULL);
	snprintf(log, sizeof(log), "%s/log", dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = run_with_config(bin, dir, cases[i].config);
		if (rc != 1 || !td_file_has(log, cases[i].says))
			harness_note("config %s: exit %d, log lacks \"%s\"", cases[i].config, rc,
				     cases[i].says);
		CHECK_EQ_INT(rc, 1);
		CHECK(td_file_has(log, cases[i].says));
	}
	unlink(log);
	rmdir(dir);
}

static int listen_seqpacket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		int err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

/* The child: the listener becomes fd 3 and the environment says so, as systemd does. */
static void exec_activated(const char *bin, int lfd, const char *log)
{
	char pid[16];
	int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (out >= 0)
		dup2(out, 2);
	if (dup2(lfd, 3) < 0)
		_exit(127);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("LISTEN_FDS", "1", 1);
	setenv("LISTEN_PID", pid, 1);
	/* --socket names a path that cannot be bound: only the passed socket can work. */
	execl(bin, bin, "--systemd", "--socket", "/nonexistent/dir/xferd.sock", "--log-level",
	      "info", (char *)NULL);
	_exit(127);
}

TEST(systemd_socket_activation)
{
	char bin[PATH_MAX], dir[] = "/tmp/xferd-act.XXXXXX", path[128], log[128];
	struct xfer_client *c = NULL;
	long long regions = -1;
	int status;

	CHECK_OK(xferd_path(bin, sizeof(bin)));
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/activated.sock", dir);
	snprintf(log, sizeof(log), "%s/xferd.log", dir);
	int lfd = listen_seqpacket(path);
	CHECK(lfd >= 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		exec_activated(bin, lfd, log);
	close(lfd);
	/* The socket already listens: connecting needs no wait for the daemon to bind. */
	CHECK_OK(xfer_connect(path, "activated", &c));
	char *result = NULL;
	CHECK_OK(xfer_call(c, "stats", NULL, &result));
	CHECK(sscanf(strstr(result, "\"regions\":") + 10, "%lld", &regions) == 1);
	CHECK_EQ_INT((int)regions, 0);
	free(result);
	xfer_close(c);
	CHECK_OK(kill(pid, SIGTERM));
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(log);
	unlink(path);
	rmdir(dir);
}
