// SPDX-License-Identifier: MIT
/*
 * The daemon's clock: monotonic microseconds for ages, deadlines and keepalive. It lives in the
 * base layer so that every file can read it without reaching up into main.c.
 */
#include <time.h>
#include "xferd.h"

uint64_t xd_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}
