// SPDX-License-Identifier: MIT
/*
 * Leveled logging to stderr: "<N>" prefixes under systemd (daemon(7)), a timestamp otherwise.
 * libevent's own messages are routed here too. Lines are rate-limited per function (below).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <event2/event.h>
#include "xferd.h"

int xd_log_level = XD_LOG_INFO;
static bool log_systemd;

/*
 * Rate limit per function (the site: its __func__, a string whose address is the key): at most
 * LOG_BURST lines in a LOG_WINDOW_S window, then the site's lines are counted, not written,
 * until its window ends; its next line then says how many were dropped, as does
 * xd_log_fini(). Any host that reaches the peer port, and any local user, can provoke a line
 * per connection or packet (a peer dropped before HELLO, a client closed for a bad packet): at
 * their rate the journal (or the log file) would grow and the loop would spend its time in
 * write(), and one noisy site would drown every other. Debug lines, asked for, are not limited.
 * (Like xd_log_level, file state: logging is below the daemon struct and shared by its threads,
 * hence the lock; a line costs it an uncontended lock and unlock.)
 */
#define LOG_BURST 100
#define LOG_WINDOW_S 10
#define LOG_SITES 256 /* more functions log than this? the rest share the last slot */

struct log_site {
	const char *func;	 /**< the key; NULL while the slot is free */
	int64_t window_end;	 /**< CLOCK_MONOTONIC seconds */
	uint32_t lines;		 /**< written in this window */
	uint64_t suppressed;	 /**< counted, not written, since the site's last report */
	int64_t suppressed_from; /**< when the first of those was dropped */
};

static struct log_site log_sites[LOG_SITES];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t log_suppressed_total;

static const char *const level_names[] = { "err", "warn", "info", "debug" };
static const int syslog_prio[] = { 3, 4, 6, 7 };

int xd_log_parse_level(const char *name)
{
	for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
		if (strcmp(level_names[i], name) == 0)
			return i;
	return -EINVAL;
}

int xd_log_set_level(const char *name)
{
	int level = xd_log_parse_level(name);

	if (level < 0)
		return level;
	xd_log_level = level;
	return 0;
}

static void libevent_log_cb(int severity, const char *msg)
{
	int level = severity >= EVENT_LOG_ERR  ? XD_LOG_ERR :
		    severity == EVENT_LOG_WARN ? XD_LOG_WARN :
						 XD_LOG_DEBUG;
	xd_log(level, "libevent: %s", msg);
}

void xd_log_init(bool systemd)
{
	log_systemd = systemd;
	event_set_log_callback(libevent_log_cb);
}

static void log_line(int level, const char *func, const char *msg)
{
	if (log_systemd) {
		fprintf(stderr, "<%d>%s: %s\n", syslog_prio[level], func, msg);
	} else {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s %s: %s\n", tm.tm_hour, tm.tm_min,
			tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], func, msg);
	}
}

static int64_t log_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return ts.tv_sec;
}

/* The slot of @func (found or taken; the last one when the table is full). */
static struct log_site *log_site_of(const char *func)
{
	size_t i = ((uintptr_t)func >> 4) % (LOG_SITES - 1);

	for (size_t n = 0; n < LOG_SITES - 1; n++, i = (i + 1) % (LOG_SITES - 1)) {
		if (log_sites[i].func == func)
			return &log_sites[i];
		if (!log_sites[i].func) {
			log_sites[i].func = func;
			return &log_sites[i];
		}
	}
	return &log_sites[LOG_SITES - 1];
}

/*
 * Whether a line of @func may be written now (called with log_lock held). Sets *@dropped to the
 * lines of @func suppressed before it, to be reported first (0: none), and *@since to when.
 */
static bool log_admit(const char *func, uint64_t *dropped, int64_t *since)
{
	struct log_site *site = log_site_of(func);
	int64_t now = log_now_s();

	*dropped = 0;
	if (now >= site->window_end) {
		*dropped = site->suppressed;
		*since = site->suppressed_from;
		site->suppressed = 0;
		site->window_end = now + LOG_WINDOW_S;
		site->lines = 0;
	}
	if (site->lines >= LOG_BURST) {
		if (!site->suppressed++)
			site->suppressed_from = now;
		log_suppressed_total++;
		return false;
	}
	site->lines++;
	return true;
}

/* Reports @n lines of @func suppressed since @since (CLOCK_MONOTONIC seconds). */
static void log_report_dropped(const char *func, uint64_t n, int64_t since)
{
	char msg[160];

	snprintf(msg, sizeof(msg),
		 "%llu more lines from here suppressed over the last %lld s (at most %d per %d s)",
		 (unsigned long long)n, (long long)(log_now_s() - since), LOG_BURST, LOG_WINDOW_S);
	log_line(XD_LOG_WARN, func, msg);
}

void xd_log_write(int level, const char *func, const char *fmt, ...)
{
	int saved = errno;
	uint64_t dropped = 0;
	int64_t since = 0;
	char msg[1024];
	va_list ap;

	if (level < XD_LOG_DEBUG) {
		bool admit;

		pthread_mutex_lock(&log_lock);
		admit = log_admit(func, &dropped, &since);
		pthread_mutex_unlock(&log_lock);
		if (dropped)
			log_report_dropped(func, dropped, since);
		if (!admit) {
			errno = saved;
			return;
		}
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_line(level, func, msg);
	errno = saved;
}

uint64_t xd_log_suppressed(void)
{
	uint64_t n;

	pthread_mutex_lock(&log_lock);
	n = log_suppressed_total;
	pthread_mutex_unlock(&log_lock);
	return n;
}

void xd_log_fini(void)
{
	for (int i = 0; i < LOG_SITES; i++) {
		struct log_site *site = &log_sites[i];
		const char *func;
		uint64_t n;
		int64_t since;

		pthread_mutex_lock(&log_lock);
		func = site->func ? site->func : "(other functions)";
		n = site->suppressed;
		since = site->suppressed_from;
		site->suppressed = 0;
		pthread_mutex_unlock(&log_lock);
		if (n)
			log_report_dropped(func, n, since);
	}
}

void xd_escape(const char *in, char *out, size_t n)
{
	size_t o = 0;

	for (; *in && o + 5 < n; in++) {
		unsigned char ch = (unsigned char)*in;
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, n - o, "\\x%02x", ch);
	}
	out[o] = '\0';
}
