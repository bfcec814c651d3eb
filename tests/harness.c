// SPDX-License-Identifier: MIT
/*
 * The test runner behind harness.h: registration, one forked child per test (own process group,
 * alarm() timeout, fd-leak check around the body), the result pipe from child to runner, and
 * the summary line that tests/run.sh adds up.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define MAX_HOOKS 16
#define REASON_MAX 512
#define FD_SCAN_MAX 4096

static struct harness_test *tests;
static int ntests;
static const char *cur_name = "?";
static pid_t test_pid = -1;
static int result_fd = -1;
static int cur_timeout;

static struct {
	void (*fn)(void *);
	void *arg;
} hooks[MAX_HOOKS];
static int nhooks;

void harness_register(struct harness_test *t)
{
	t->next = tests;
	tests = t;
	ntests++;
}

int harness_add(const char *name, void (*fn)(void *), void *arg, int timeout_s)
{
	struct harness_test *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->name = name;
	t->fn = fn;
	t->arg = arg;
	t->timeout = timeout_s > 0 ? timeout_s : HARNESS_DEFAULT_TIMEOUT;
	/* Run-time tests sort after the static ones, in the order they were added. */
	t->file = "~";
	t->line = ntests;
	harness_register(t);
	return 0;
}

bool harness_in_test_process(void)
{
	return test_pid == getpid();
}

bool harness_large(void)
{
	const char *v = getenv("XFER_TEST_LARGE");

	return !(v && strcmp(v, "0") == 0);
}

const char *harness_errname(long long err)
{
	const char *name;

	if (err == 0)
		return "0";
	if (err < 0)
		err = -err;
	name = err < 4096 ? strerrorname_np((int)err) : NULL;
	return name ? name : "E?";
}

int harness_cleanup_push(void (*fn)(void *), void *arg)
{
	if (nhooks == MAX_HOOKS)
		return -1;
	hooks[nhooks].fn = fn;
	hooks[nhooks].arg = arg;
	return nhooks++;
}

void harness_cleanup_pop(int handle)
{
	if (handle >= 0 && handle < nhooks)
		nhooks = handle;
}

static void run_hooks(void)
{
	while (nhooks > 0) {
		nhooks--;
		hooks[nhooks].fn(hooks[nhooks].arg);
	}
}

/* Sends the verdict (a tag letter and a reason) to the runner. One write: atomic on a pipe. */
static void report(char tag, const char *reason)
{
	char buf[REASON_MAX];
	int n;

	if (result_fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%c%s", tag, reason ? reason : "");
	if (n >= (int)sizeof(buf))
		n = sizeof(buf) - 1;
	if (write(result_fd, buf, n) < 0)
		perror("harness: result pipe");
	close(result_fd);
	result_fd = -1;
}

void harness_note(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "# %s: ", cur_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void harness_fail(const char *file, int line, const char *fmt, ...)
{
	char msg[REASON_MAX];
	int n;
	va_list ap;

	n = snprintf(msg, sizeof(msg), "%s:%d: ", file, line);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	if (!harness_in_test_process()) {
		fprintf(stderr, "# %s (child %d): %s\n", cur_name, (int)getpid(), msg);
		_exit(1);
	}
	fprintf(stderr, "# %s: %s\n", cur_name, msg);
	report('F', msg);
	run_hooks();
	_exit(1);
}

void harness_skip(const char *why)
{
	if (!harness_in_test_process()) {
		fprintf(stderr, "# %s (child %d): skip requested in a child: %s\n", cur_name,
			(int)getpid(), why);
		_exit(1);
	}
	report('S', why);
	run_hooks();
	_exit(0);
}

void harness_check_mem(const char *file, int line, const char *ea, const char *eb, const void *a,
		       const void *b, size_t n)
{
	const unsigned char *pa = a, *pb = b;
	size_t first = n, ndiff = 0;

	if (memcmp(a, b, n) == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		if (pa[i] != pb[i]) {
			if (first == n)
				first = i;
			ndiff++;
		}
	}
	harness_fail(file, line,
		     "%s != %s over %zu bytes: %zu differ, first at offset %zu (0x%02x != 0x%02x)",
		     ea, eb, n, ndiff, first, pa[first], pb[first]);
}

/* Marks every open fd of this process in @open (FD_SCAN_MAX slots). Returns the count. */
static int fd_snapshot(unsigned char *open)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0, self;

	memset(open, 0, FD_SCAN_MAX);
	if (!dir)
		return -1;
	self = dirfd(dir);
	while ((de = readdir(dir))) {
		int fd;

		if (de->d_name[0] == '.')
			continue;
		fd = atoi(de->d_name);
		if (fd == self)
			continue;
		if (fd < FD_SCAN_MAX)
			open[fd] = 1;
		n++;
	}
	closedir(dir);
	return n;
}

/* Fails the test if the body left fds open that were not open before it. */
static void check_fd_leak(const struct harness_test *t, const unsigned char *before, int nbefore)
{
	unsigned char after[FD_SCAN_MAX];
	char list[REASON_MAX] = "";
	size_t len = 0;
	int nafter = fd_snapshot(after);

	if (nafter == nbefore)
		return;
	for (int fd = 0; fd < FD_SCAN_MAX; fd++) {
		char path[64], target[128] = "?";
		ssize_t tn;

		if (!after[fd] || before[fd])
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		tn = readlink(path, target, sizeof(target) - 1);
		target[tn > 0 ? tn : 1] = '\0';
		len += snprintf(list + len, len < sizeof(list) ? sizeof(list) - len : 0, " %d->%s",
				fd, target);
		if (len >= sizeof(list))
			break;
	}
	harness_fail(t->file, t->line, "fd leak: %d fds open before the test, %d after:%s", nbefore,
		     nafter, list);
}

static void alarm_handler(int sig)
{
	char msg[64];

	(void)sig;
	snprintf(msg, sizeof(msg), "timeout after %d s", cur_timeout);
	report('F', msg);
	run_hooks();
	_exit(1);
}

static void run_child(struct harness_test *t)
{
	unsigned char before[FD_SCAN_MAX];
	int nbefore;

	test_pid = getpid();
	setpgid(0, 0);
	signal(SIGALRM, alarm_handler);
	signal(SIGPIPE, SIG_IGN);
	cur_timeout = t->timeout;
	alarm(t->timeout);
	nbefore = fd_snapshot(before);
	t->fn(t->arg);
	check_fd_leak(t, before, nbefore);
	alarm(0);
	report('P', NULL);
	_exit(0);
}

/* Reaps the test child, waiting at most @limit_ms; kills it on overrun. Returns its status. */
static int reap(pid_t pid, int limit_ms, bool *overrun)
{
	struct timespec ts = { 0, 5 * 1000 * 1000 };
	int status = 0;

	*overrun = false;
	for (int waited = 0;; waited += 5) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return status;
		if (waited >= limit_ms && !*overrun) {
			*overrun = true;
			kill(pid, SIGKILL);
		}
		nanosleep(&ts, NULL);
	}
}

/*
 * Kills what the test left running in its process group (daemons, helpers) and reaps what was
 * reparented to us. Returns true if anything was still running.
 */
static bool sweep_group(pid_t pgid)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	bool left = false;

	for (int i = 0; i < 100; i++) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (kill(-pgid, 0) < 0)
			return left;
		nanosleep(&ts, NULL);
	}
	left = true;
	kill(-pgid, SIGKILL);
	for (int i = 0; i < 100 && kill(-pgid, 0) == 0; i++) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		nanosleep(&ts, NULL);
	}
	return left;
}

/* The verdict of one test: 0 passed, 1 failed, 2 skipped. */
static int verdict(struct harness_test *t, int status, bool overrun, bool left, char *msg)
{
	char tag = msg[0];
	const char *reason = msg[0] ? msg + 1 : "";

	if (overrun) {
		printf("FAIL - %s (hung past its %d s timeout; killed)\n", t->name, t->timeout);
		return 1;
	}
	if (tag == 'F') {
		printf("FAIL - %s (%s)\n", t->name, reason);
		return 1;
	}
	if (WIFSIGNALED(status)) {
		printf("FAIL - %s (killed by signal %d, %s)\n", t->name, WTERMSIG(status),
		       sigabbrev_np(WTERMSIG(status)) ?: "?");
		return 1;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		printf("FAIL - %s (exit status %d without a verdict: crashed? see stderr)\n",
		       t->name, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return 1;
	}
	if (tag == 'S') {
		printf("SKIP - %s (%s)\n", t->name, reason);
		return 2;
	}
	if (tag != 'P') {
		printf("FAIL - %s (exited 0 before the test body returned)\n", t->name);
		return 1;
	}
	if (left) {
		printf("FAIL - %s (left processes running; killed them)\n", t->name);
		return 1;
	}
	printf("ok - %s\n", t->name);
	return 0;
}

static int run_one(struct harness_test *t)
{
	char msg[REASON_MAX + 1] = "";
	int p[2], status;
	bool overrun, left;
	ssize_t n;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	if (pipe2(p, O_CLOEXEC) < 0) {
		perror("harness: pipe");
		return 1;
	}
	cur_name = t->name;
	pid = fork();
	if (pid < 0) {
		perror("harness: fork");
		close(p[0]);
		close(p[1]);
		return 1;
	}
	if (pid == 0) {
		close(p[0]);
		result_fd = p[1];
		run_child(t);
	}
	close(p[1]);
	setpgid(pid, pid); /* also done in the child: whichever runs first */
	status = reap(pid, (t->timeout + 15) * 1000, &overrun);
	left = sweep_group(pid);
	/* Forked helpers that outlived the test hold the pipe's write end: never block on it. */
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	n = read(p[0], msg, REASON_MAX);
	msg[n > 0 ? n : 0] = '\0';
	close(p[0]);
	return verdict(t, status, overrun, left, msg);
}

static int cmp_tests(const void *a, const void *b)
{
	const struct harness_test *x = *(struct harness_test *const *)a;
	const struct harness_test *y = *(struct harness_test *const *)b;
	int c = strcmp(x->file, y->file);

	return c ? c : x->line - y->line;
}

/* The registered tests in (file, line) order, NULL-terminated. */
static struct harness_test **sorted_tests(void)
{
	struct harness_test **v = calloc(ntests + 1, sizeof(*v));
	struct harness_test *t;
	int i = 0;

	if (!v)
		return NULL;
	for (t = tests; t; t = t->next)
		v[i++] = t;
	qsort(v, ntests, sizeof(*v), cmp_tests);
	return v;
}

int main(int argc, char **argv)
{
	const char *filter = argc > 1 ? argv[1] : NULL;
	int counts[3] = { 0, 0, 0 };
	struct harness_test **v = sorted_tests();

	if (!v)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* Orphaned grandchildren (a test's daemon, helpers) come back to us to be reaped. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	for (int i = 0; v[i]; i++) {
		if (filter && !strstr(v[i]->name, filter))
			continue;
		counts[run_one(v[i])]++;
	}
	if (counts[2])
		printf("%d passed, %d failed, %d skipped\n", counts[0], counts[1], counts[2]);
	else
		printf("%d passed, %d failed\n", counts[0], counts[1]);
	free(v);
	return counts[1] ? 1 : 0;
}
