/* SPDX-License-Identifier: MIT */
/*
 * The in-house test runner (STYLE 9.10): TEST() registers a function at load time; main() in
 * harness.c forks one child per test under an alarm() timeout, checks that the test body left
 * no fd open, and prints "ok - ", "FAIL - " or "SKIP - " lines and a final count line.
 */
#ifndef XFER_TEST_HARNESS_H
#define XFER_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

#define HARNESS_DEFAULT_TIMEOUT 60 /* seconds */

struct harness_test {
	const char *name;
	void (*fn)(void *arg);
	void *arg;
	int timeout;	  /* seconds */
	const char *file; /* tests run in (file, line) order */
	int line;
	struct harness_test *next;
};

/* Adds @t to the run list. @t must stay alive; TEST() uses static storage. */
void harness_register(struct harness_test *t);

/*
 * Registers a test at run time, e.g. one per row of a table. Copies nothing: @name and @arg must
 * outlive the run. Returns 0 or -ENOMEM.
 */
int harness_add(const char *name, void (*fn)(void *), void *arg, int timeout_s);

#define TEST_TIMEOUT(tname, seconds)                                    \
	static void tname(void);                                        \
	static void tname##_run(void *arg)                              \
	{                                                               \
		(void)arg;                                              \
		tname();                                                \
	}                                                               \
	static struct harness_test tname##_test = {                     \
		.name = #tname,                                         \
		.fn = tname##_run,                                      \
		.timeout = (seconds),                                   \
		.file = __FILE__,                                       \
		.line = __LINE__,                                       \
	};                                                              \
	__attribute__((constructor)) static void tname##_register(void) \
	{                                                               \
		harness_register(&tname##_test);                        \
	}                                                               \
	static void tname(void)

#define TEST(tname) TEST_TIMEOUT(tname, HARNESS_DEFAULT_TIMEOUT)

/*
 * Fails the running test: prints "file:line: message" to stderr, runs the cleanup hooks and
 * exits the test process with status 1. In a process the test forked, it only prints and exits 1
 * (the test checks its children's status). Never returns.
 */
__attribute__((noreturn, format(printf, 3, 4))) void harness_fail(const char *file, int line,
								  const char *fmt, ...);

/* Marks the running test SKIP with @why and ends it (cleanup hooks run). Never returns. */
__attribute__((noreturn)) void harness_skip(const char *why);

/* Prints a diagnostic line to stderr, prefixed with the test's name. */
__attribute__((format(printf, 1, 2))) void harness_note(const char *fmt, ...);

/*
 * Cleanup hooks run, newest first, when a test fails, skips or times out (not when it returns:
 * a test undoes its own work). Returns a handle for harness_cleanup_pop(), or -1 when full.
 */
int harness_cleanup_push(void (*fn)(void *), void *arg);
/* Removes hook @handle (and every hook pushed after it). */
void harness_cleanup_pop(int handle);

/* Whether the current process is the test process itself (not a child it forked). */
bool harness_in_test_process(void);

/* False when XFER_TEST_LARGE=0: tests shrink their biggest cases (slow or sanitised builds). */
bool harness_large(void);

/* errno name for a negative or positive errno ("EINVAL"), "0" for 0. Static storage. */
const char *harness_errname(long long err);

/* Compares @n bytes; on a difference fails with the first differing offset and its bytes. */
void harness_check_mem(const char *file, int line, const char *ea, const char *eb, const void *a,
		       const void *b, size_t n);

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond))                                                         \
			harness_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond); \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                                 \
	do {                                                                               \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);            \
		if (check_a_ != check_b_)                                                  \
			harness_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, \
				     check_a_, check_b_);                                  \
	} while (0)

/* @expr returns 0 (or a non-negative count) or a negative errno. */
#define CHECK_OK(expr)                                                                        \
	do {                                                                                  \
		long long check_r_ = (long long)(expr);                                       \
		if (check_r_ < 0)                                                             \
			harness_fail(__FILE__, __LINE__, "%s: %lld %s (%s)", #expr, check_r_, \
				     harness_errname(check_r_), strerror((int)-check_r_));    \
	} while (0)

/* @expr must return exactly @want, a negative errno such as -EINVAL. */
#define CHECK_ERR(expr, want)                                                                    \
	do {                                                                                     \
		long long check_r_ = (long long)(expr), check_w_ = (long long)(want);            \
		if (check_r_ != check_w_)                                                        \
			harness_fail(__FILE__, __LINE__, "%s: got %lld %s, want %lld %s", #expr, \
				     check_r_, harness_errname(check_r_), check_w_,              \
				     harness_errname(check_w_));                                 \
	} while (0)

#define CHECK_MEM_EQ(a, b, n) harness_check_mem(__FILE__, __LINE__, #a, #b, (a), (b), (n))

#define CHECK_STR_EQ(a, b)                                                                     \
	do {                                                                                   \
		const char *check_a_ = (a), *check_b_ = (b);                                   \
		if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0)                 \
			harness_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, \
				     check_a_ ? check_a_ : "(null)",                           \
				     check_b_ ? check_b_ : "(null)");                          \
	} while (0)

#include <string.h>

#endif /* XFER_TEST_HARNESS_H */
