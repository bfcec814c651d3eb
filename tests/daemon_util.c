// SPDX-License-Identifier: MIT
/*
 * Helpers for tests that run the real xferd binary: its lifetime (temp dir, spawn, readiness,
 * SIGTERM, exit status, cleanup on failure), its fd count and counters, raw protocol packets,
 * forked helper processes, memfds and byte patterns.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"
#include "xp_fdmsg.h"

#define TD_START_MS 10000
#define TD_STOP_MS 10000

long long td_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static void remove_dir(const char *dir)
{
	if (dir[0])
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The daemon binary: $XFERD_BIN, else xferd in the parent of this test's directory. */
static int daemon_path(char *out, size_t cap)
{
	char exe[PATH_MAX];
	const char *env = getenv("XFERD_BIN");
	ssize_t n;

	if (env && env[0]) {
		snprintf(out, cap, "%s", env);
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0)
		return -errno;
	exe[n] = '\0';
	snprintf(out, cap, "%s/../xferd", dirname(exe));
	return access(out, X_OK) == 0 ? 0 : -ENOENT;
}

void td_dump_log(struct td *d)
{
	char line[1024];
	FILE *f = fopen(d->log, "r");
	int n = 0;

	if (!f)
		return;
	fprintf(stderr, "# ---- %s ----\n", d->log);
	while (fgets(line, sizeof(line), f) && n++ < 200)
		fprintf(stderr, "#   %s", line);
	fprintf(stderr, "# ---- end of log ----\n");
	fclose(f);
}

bool td_file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	while (f && !found && getline(&line, &cap, f) >= 0)
		found = strstr(line, needle) != NULL;
	free(line);
	if (f)
		fclose(f);
	return found;
}

/* Cleanup hook: the test failed with the daemon running. */
static void td_abort_hook(void *arg)
{
	struct td *d = arg;

	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = -1;
	}
	td_dump_log(d);
	remove_dir(d->dir);
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int ok;

	if (!f)
		return -errno;
	ok = fputs(text, f) >= 0;
	return fclose(f) == 0 && ok ? 0 : -EIO;
}

static void exec_daemon(struct td *d, const char *bin, bool config)
{
	char cfg[160];
	int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (log < 0 || null < 0)
		_exit(126);
	dup2(null, 0);
	dup2(log, 1);
	dup2(log, 2);
	signal(SIGPIPE, SIG_DFL);
	snprintf(cfg, sizeof(cfg), "%s/xferd.json", d->dir);
	if (config)
		execl(bin, "xferd", "--socket", d->sock, "--foreground", "--log-level", "warn",
		      "--config", cfg, (char *)NULL);
	else
		execl(bin, "xferd", "--socket", d->sock, "--foreground", "--log-level", "warn",
		      (char *)NULL);
	_exit(127);
}

/* Whether a connection to the socket is accepted. */
static bool sock_accepts(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	bool ok;

	if (s < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(s);
	return ok;
}

static int wait_ready(struct td *d)
{
	long long end = td_now_ms() + TD_START_MS;
	int status;

	while (td_now_ms() < end) {
		if (sock_accepts(d->sock))
			return 0;
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			harness_note("xferd exited during startup (status 0x%x)", status);
			d->pid = -1;
			return -ECHILD;
		}
		sleep_ms(5);
	}
	harness_note("xferd did not accept on %s within %d ms", d->sock, TD_START_MS);
	return -ETIMEDOUT;
}

static void key_unlink_hook(void *arg)
{
	struct td_key *k = arg;

	unlink(k->path);
}

int td_key_make(struct td_key *k)
{
	uint8_t raw[32];
	char hex[65];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC), err = 0;

	if (fd < 0 || read(fd, raw, sizeof(raw)) != (ssize_t)sizeof(raw))
		err = -EIO;
	if (fd >= 0)
		close(fd);
	if (err)
		return err;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	snprintf(k->path, sizeof(k->path), "/tmp/xferd-test-key.XXXXXX");
	fd = mkstemp(k->path); /* mode 0600 */
	if (fd < 0)
		return -errno;
	if (write(fd, hex, 64) != 64)
		err = -EIO;
	close(fd);
	if (err) {
		unlink(k->path);
		return err;
	}
	k->hook = harness_cleanup_push(key_unlink_hook, k);
	return 0;
}

void td_key_remove(struct td_key *k)
{
	if (k->hook >= 0)
		harness_cleanup_pop(k->hook);
	unlink(k->path);
}

int td_start(struct td *d, const char *config_json)
{
	char bin[PATH_MAX], cfg[160];
	int err;

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	err = daemon_path(bin, sizeof(bin));
	if (err) {
		harness_note("no xferd binary beside the tests (%s)", strerror(-err));
		return err;
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/xferd-test.XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/xferd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/xferd.log", d->dir);
	snprintf(cfg, sizeof(cfg), "%s/xferd.json", d->dir);
	if (config_json && (err = write_file(cfg, config_json)) < 0)
		goto err_rmdir;
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		err = -errno;
		goto err_rmdir;
	}
	if (d->pid == 0)
		exec_daemon(d, bin, config_json != NULL);
	d->hook = harness_cleanup_push(td_abort_hook, d);
	err = wait_ready(d);
	if (err) {
		harness_cleanup_pop(d->hook);
		td_abort_hook(d);
		return err;
	}
	return 0;

err_rmdir:
	remove_dir(d->dir);
	return err;
}

int td_signal(struct td *d, int sig)
{
	if (d->pid <= 0)
		return -ESRCH;
	return kill(d->pid, sig) < 0 ? -errno : 0;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -EIO;
}

int td_wait_exit(struct td *d)
{
	int code;

	if (d->pid <= 0)
		return -ESRCH;
	code = td_wait_child(d->pid, TD_STOP_MS);
	if (code == -ETIMEDOUT) {
		harness_note("xferd did not exit within %d ms of SIGTERM; killing it", TD_STOP_MS);
		td_kill9(d->pid);
	}
	d->pid = -1;
	harness_cleanup_pop(d->hook);
	if (code != 0)
		td_dump_log(d);
	remove_dir(d->dir);
	return code;
}

void td_check_alive(struct td *d, const char *when)
{
	int status;

	if (d->pid > 0 && waitpid(d->pid, &status, WNOHANG) == d->pid) {
		d->pid = -1;
		harness_fail(__FILE__, __LINE__, "xferd died %s: %s %d", when,
			     WIFSIGNALED(status) ? "signal" : "exit status",
			     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	}
}

int td_stop(struct td *d)
{
	int err = td_signal(d, SIGTERM);

	return err ? err : td_wait_exit(d);
}

int td_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while ((de = readdir(dir)))
		if (de->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

long long td_status_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "re")))
		return -1;
	while (kib < 0 && fgets(line, sizeof(line), f))
		if (strncmp(line, field, flen) == 0 && line[flen] == ':' &&
		    sscanf(line + flen + 1, "%lld kB", &kib) != 1)
			kib = -1;
	fclose(f);
	return kib;
}

int td_wait_fd_count(struct td *d, int want, int ms)
{
	long long end = td_now_ms() + ms;
	int n;

	for (;;) {
		n = td_fd_count(d->pid);
		if (n == want || td_now_ms() >= end)
			return n;
		sleep_ms(10);
	}
}

/* Reads integer @key of a stats reply on raw connection @sock. Returns 0 or -errno. */
static int raw_stat(int sock, const char *key, long long *val)
{
	struct xp_reply rep;
	json_t *v;
	int err = td_raw_call(sock, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"stats\"}", NULL, 0,
			      &rep);

	if (!err) {
		v = json_object_get(rep.result, key);
		if (json_is_integer(v))
			*val = json_integer_value(v);
		else
			err = -ENOENT;
	}
	xp_reply_fini(&rep);
	return err;
}

int td_quiet_fd_count(struct td *d, int others)
{
	long long end = td_now_ms() + 10000, clients = -1;
	int sock = td_raw_connect(d), err, n;

	if (sock < 0)
		return sock;
	err = td_raw_hello(sock);
	while (!err) {
		err = raw_stat(sock, "clients", &clients);
		if (err || clients == others + 1)
			break;
		if (td_now_ms() >= end) {
			harness_note("daemon still has %lld clients, want %d", clients, others + 1);
			err = -ETIMEDOUT;
		}
		sleep_ms(10);
	}
	n = td_fd_count(d->pid);
	close(sock);
	if (err)
		return err;
	/* only our own connection goes away now */
	return td_wait_fd_count(d, n - 1, 10000);
}

int td_stat(struct td *d, const char *key, long long *val)
{
	struct xfer_client *c;
	char *res = NULL;
	json_t *root, *v;
	int err;

	err = xfer_connect(d->sock, "td_stat", &c);
	if (err)
		return err;
	err = xfer_call(c, "stats", NULL, &res);
	xfer_close(c);
	if (err)
		return err;
	root = json_loads(res, 0, NULL);
	free(res);
	v = root;
	for (const char *k = key, *dot; v && k; k = dot ? dot + 1 : NULL) {
		dot = strchr(k, '.');
		char part[64];
		snprintf(part, sizeof(part), "%.*s", dot ? (int)(dot - k) : (int)strlen(k), k);
		v = json_object_get(v, part);
	}
	if (json_is_integer(v))
		*val = json_integer_value(v);
	else
		err = -ENOENT;
	json_decref(root);
	return err;
}

int td_wait_stat(struct td *d, const char *key, long long want, int ms, long long *last)
{
	long long end = td_now_ms() + ms, v = -1;
	int err;

	for (;;) {
		err = td_stat(d, key, &v);
		if (last)
			*last = v;
		/* EDQUOT: at a connection limit, the daemon has not yet seen a closed one go */
		if (err == -EDQUOT && td_now_ms() < end) {
			sleep_ms(10);
			continue;
		}
		if (err)
			return err;
		if (v == want)
			return 0;
		if (td_now_ms() >= end)
			return -ETIMEDOUT;
		sleep_ms(10);
	}
}

pid_t td_spawn(void (*fn)(void *), void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		fn(arg);
		_exit(0);
	}
	return pid;
}

int td_wait_child(pid_t pid, int ms)
{
	long long end = td_now_ms() + ms;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return exit_code(status);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (td_now_ms() >= end)
			return -ETIMEDOUT;
		sleep_ms(2);
	}
}

int td_kill9(pid_t pid)
{
	if (pid <= 0)
		return -ESRCH;
	if (kill(pid, SIGKILL) < 0)
		return -errno;
	return waitpid(pid, NULL, 0) == pid ? 0 : -errno;
}

int td_raw_connect(struct td *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->sock);
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(s);
		return err;
	}
	return s;
}

/* Receives one packet of any kind. Returns its length or -errno (-ETIMEDOUT after 10 s). */
static int raw_recv_any(int sock, char *buf)
{
	struct xp_fdset set;
	int n;

	xp_fdset_init(&set);
	n = xp_packet_recv(sock, buf, XP_MAX_MSG, &set, 0);
	xp_fdset_close(&set); /* the daemon sends no fds; never keep any */
	return n == -EAGAIN ? -ETIMEDOUT : n;
}

int td_raw_recv(int sock, struct xp_reply *rep)
{
	char *buf = malloc(XP_MAX_MSG);
	int n, err;

	memset(rep, 0, sizeof(*rep));
	if (!buf)
		return -ENOMEM;
	for (;;) {
		n = raw_recv_any(sock, buf);
		if (n < 0) {
			err = n;
			break;
		}
		err = xp_reply_parse(buf, n, rep);
		if (err || !rep->notification)
			break;
		xp_reply_fini(rep);
	}
	free(buf);
	return err;
}

int td_raw_call(int sock, const char *text, const int *fds, int nfds, struct xp_reply *rep)
{
	int err = xp_packet_send(sock, text, strlen(text), fds, nfds);

	if (err) {
		memset(rep, 0, sizeof(*rep));
		return err;
	}
	return td_raw_recv(sock, rep);
}

void td_raw_send_json(int sock, json_t *msg)
{
	char *text;
	int len = xp_dump(msg, &text);

	if (len > 0) {
		xp_packet_send(sock, text, (size_t)len, NULL, 0);
		free(text);
	}
	json_decref(msg);
}

int td_raw_hello(int sock)
{
	struct xp_reply rep;
	int err = td_raw_call(sock,
			      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\","
			      "\"params\":{\"version\":1,\"client\":\"raw-test\"}}",
			      NULL, 0, &rep);

	if (!err && (rep.code || !rep.result))
		err = -rep.err ?: -EIO;
	xp_reply_fini(&rep);
	return err;
}

bool td_raw_closed(int sock)
{
	struct xp_reply rep;
	int err = td_raw_recv(sock, &rep);

	xp_reply_fini(&rep);
	return err == -ECONNRESET;
}

const char *td_reply_errno(const struct xp_reply *rep)
{
	json_t *err = json_object_get(rep->root, "error");
	json_t *data = json_object_get(err, "data");
	const char *name = json_string_value(json_object_get(data, "errno"));

	return name ? name : "";
}

int td_memfd(size_t size, bool seal)
{
	int fd = memfd_create("xfer-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, size) < 0 ||
	    (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

void td_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
	unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v;

		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		v = x * 0x2545f4914f6cdd1dULL;
		memcpy(p + i, &v, 8);
	}
	for (; i < len; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[i] = (unsigned char)(x * 0x2545f4914f6cdd1dULL >> 56);
	}
}
