// SPDX-License-Identifier: MIT
/*
 * Runs a fuzz target (fuzz_ctl.c, fuzz_meta.c, fuzz_peer.c, fuzz_reply.c: the one it is linked with) over
 * files without libFuzzer, as jansson's standalone engine does: make test replays each seed
 * corpus with it, and a crash file that make fuzz wrote replays the same way in a plain or
 * sanitized build.
 *
 *   test_fuzz_replay [FILE|DIR]...    default: $XFER_SRCDIR/tests/fuzz/CORPUS, else the
 *                                     CORPUS of the source tree this binary was built in
 *   (test_fuzz_meta_replay, test_fuzz_peer_replay alike; CORPUS is the target's)
 *
 * Each file runs in a forked child, so that an abort (a leak, a sanitizer report) fails that
 * file and not the run; then all files run in one process, in order, as libFuzzer runs inputs
 * one after another against one daemon. Prints "ok - NAME" or "FAIL - NAME (why)" per case and
 * the final "N passed, N failed" that tests/run.sh adds up.
 */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz_target.h"

#define CASE_TIMEOUT 60 /* seconds, for one file or the whole corpus in one process */
#define MAX_FILES 4096
#define REPLAY_MAX_INPUT (1 << 20) /* libFuzzer's default -max_len is far below */

static char *files[MAX_FILES];
static int nfiles;

static void add_file(const char *path)
{
	if (nfiles == MAX_FILES) {
		fprintf(stderr, "replay: more than %d files; ignoring %s\n", MAX_FILES, path);
		return;
	}
	files[nfiles] = strdup(path);
	if (files[nfiles])
		nfiles++;
}

static int visible(const struct dirent *de)
{
	return de->d_name[0] != '.';
}

/* Adds @path, or the files of directory @path in name order. Returns 0 or -errno. */
static int add_path(const char *path)
{
	struct dirent **names;
	struct stat st;
	char full[PATH_MAX];

	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode)) {
		add_file(path);
		return 0;
	}
	int n = scandir(path, &names, visible, alphasort);
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name);
		if (stat(full, &st) == 0 && S_ISREG(st.st_mode))
			add_file(full);
		free(names[i]);
	}
	free(names);
	return 0;
}

/* The target's corpus in $XFER_SRCDIR, else in the tree this binary lives in (BUILD/tests/). */
static void default_corpus(char *out, size_t cap)
{
	const char *src = getenv("XFER_SRCDIR");
	char exe[PATH_MAX];
	ssize_t n;

	if (src) {
		snprintf(out, cap, "%s/tests/fuzz/%s", src, fuzz_target_corpus);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	snprintf(out, cap, "%s/../../tests/fuzz/%s", dirname(exe), fuzz_target_corpus);
}

/* Reads @path and runs it through the target. Returns 0 or -errno. */
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = malloc(REPLAY_MAX_INPUT);
	size_t n = 0;

	if (!f || !buf) {
		int err = f ? -ENOMEM : -errno;
		if (f)
			fclose(f);
		free(buf);
		return err;
	}
	n = fread(buf, 1, REPLAY_MAX_INPUT, f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

/* Why a case's child failed, from its wait status. */
static void describe(int status, char *why, size_t cap)
{
	if (WIFSIGNALED(status))
		snprintf(why, cap, "killed by signal %d, %s%s", WTERMSIG(status),
			 sigabbrev_np(WTERMSIG(status)) ?: "?",
			 WTERMSIG(status) == SIGALRM ? ": timed out" : ": see stderr");
	else if (WEXITSTATUS(status) == 2)
		snprintf(why, cap, "cannot read the file");
	else
		snprintf(why, cap, "exit status %d: a sanitizer report? see stderr",
			 WEXITSTATUS(status));
}

/* Runs @n files in one forked child and prints the verdict line. Returns true if it passed. */
static bool run_case(const char *name, char **paths, int n)
{
	char why[128];
	int status;

	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		printf("FAIL - %s (fork: %s)\n", name, strerror(errno));
		return false;
	}
	if (pid == 0) {
		alarm(CASE_TIMEOUT);
		for (int i = 0; i < n; i++)
			if (run_file(paths[i]) < 0)
				_exit(2);
		fuzz_target_fini();
		exit(0); /* not _exit: a sanitized build checks for leaks at exit */
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("ok - %s\n", name);
		return true;
	}
	describe(status, why, sizeof(why));
	printf("FAIL - %s (%s)\n", name, why);
	return false;
}

/* Adds a command-line argument's files, or says why there are none. */
static void add_arg(const char *path)
{
	int rc = add_path(path);

	if (rc < 0)
		printf("# replay: %s: %s\n", path, strerror(-rc));
}

int main(int argc, char **argv)
{
	char corpus[PATH_MAX], name[64];
	int passed = 0, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		default_corpus(corpus, sizeof(corpus));
		add_arg(corpus);
	}
	for (int i = 1; i < argc; i++)
		add_arg(argv[i]);
	if (nfiles == 0) {
		printf("FAIL - replay (no input files)\n0 passed, 1 failed\n");
		return 1;
	}
	for (int i = 0; i < nfiles; i++) {
		char *copy = strdup(files[i]);
		if (run_case(copy ? basename(copy) : files[i], &files[i], 1))
			passed++;
		else
			failed++;
		free(copy);
	}
	if (nfiles > 1) {
		snprintf(name, sizeof(name), "all %d files in one process", nfiles);
		if (run_case(name, files, nfiles))
			passed++;
		else
			failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
