// SPDX-License-Identifier: MIT
/*
 * Leveled logging to stderr: "<N>" prefixes under systemd (daemon(7)), a timestamp otherwise.
 * libevent's own messages are routed here too.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <event2/event.h>
#include "xferd.h"

int xd_log_level = XD_LOG_INFO;
static bool log_systemd;

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

void xd_log_write(int level, const char *func, const char *fmt, ...)
{
	int saved = errno;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
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
	errno = saved;
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
