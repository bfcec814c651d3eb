/* SPDX-License-Identifier: MIT */
/*
 * benchutil: helpers shared by the benchmark clients xferbench and xferbench_net, built only on
 * the public libxferclient API: timing, size parsing and printing, the PRNG test pattern,
 * percentiles, registered buffers and one timed pair of passive + active operations.
 * Messages go to stderr, prefixed with bench_prog.
 */
#ifndef XFERD_BENCHUTIL_H
#define XFERD_BENCHUTIL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xferclient.h"

#define BENCH_KIB (1024ULL)
#define BENCH_MIB (1024ULL * BENCH_KIB)
#define BENCH_GIB (1024ULL * BENCH_MIB)

/* Program name that prefixes every message printed here; each main() sets it first. */
extern const char *bench_prog;

/* A registered buffer: the memfd mapping plus its region on one client. */
struct bench_buf {
	struct xfer_buf buf;
	uint64_t region;
	uint64_t reg_ns; /* time xfer_region_register took */
};

/* The timestamps (bench_now_ns()) of the steps of one pair of operations. */
struct bench_times {
	uint64_t start;	  /* before the passive call */
	uint64_t offered; /* passive operation created, metadata in hand */
	uint64_t claimed; /* active call returned: the claim was accepted */
	uint64_t done;	  /* active operation seen COMPLETE */
};

/* One pair of single-descriptor operations, passive offer then active claim. */
struct bench_pair {
	struct xfer_client *pas, *act; /* borrowed: the offering and the claiming client */
	struct xfer_desc pd, ad;       /* the passive and the active descriptor */
	bool write;		       /* writable/write, else readable/read */
	int timeout_ms;		       /* per xfer_wait(); -1 waits for ever */
	const char *pas_what;	       /* failure label of the passive call; NULL: its name */
	const char *act_what;	       /* failure label of the active call; NULL: its name */
};

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* Returns @bytes / @ns in GB/s (1e9 bytes/s), or 0 when @ns is 0. */
double bench_gbps(uint64_t bytes, uint64_t ns);

/*
 * Formats @n bytes as "4 KiB", "256 MiB", "1.5 GiB" into @buf of @len bytes. Returns @buf
 * (borrowed: the caller's storage).
 */
const char *bench_fmt_size(uint64_t n, char *buf, size_t len);

/* Parses "4096", "64K", "256M", "1G", "1GiB". Returns 0 and *out, or -EINVAL for 0 or junk. */
int bench_parse_size(const char *s, uint64_t *out);

/* Fills @len bytes of @buf with the test pattern of @seed. */
void bench_pattern_fill(void *buf, size_t len, uint64_t seed);

/*
 * Returns true if the @len bytes of @buf hold the pattern of @seed; else false and *bad, the
 * offset of the first word that differs.
 */
bool bench_pattern_check(const void *buf, size_t len, uint64_t seed, size_t *bad);

/* Like bench_pattern_check(), but prints the offset of a mismatch, labelled @who. */
bool bench_verify(const char *who, const void *buf, size_t len, uint64_t seed);

/* Sorts the @n values of @v in place and returns the @pct-th percentile (50 = median). */
uint64_t bench_percentile(uint64_t *v, size_t n, unsigned int pct);

/*
 * Prints "@what: <error>", with the daemon's own sentence from @c (may be NULL) when it refused.
 * Returns @err, so that callers can write "return bench_fail(c, what, err);".
 */
int bench_fail(struct xfer_client *c, const char *what, int err);

/* The socket a NULL @socket stands for: $XFERD_SOCKET, else the library's default. Static. */
const char *bench_socket_name(const char *socket);

/*
 * xfer_connect(@socket, @name); on failure prints where it looked and @hint (NULL: none).
 * Returns 0 and *c, which the caller closes with xfer_close(), or -errno.
 */
int bench_connect(const char *socket, const char *name, const char *hint, struct xfer_client **c);

/*
 * Allocates a sealed memfd buffer of @len bytes, touches every page (so no timed copy pays the
 * client's page faults) and registers it on @c (borrowed) as @name, timing the registration.
 * Returns 0 or -errno (printed); on failure nothing is left to free.
 */
int bench_buf_create(struct xfer_client *c, size_t len, const char *name, struct bench_buf *rb);

/*
 * The same backed by a file: a new file of @len bytes in directory @dir (unlinked at once, so
 * nothing is left behind), registered with xfer_region_register_file(); the client maps it
 * itself to fill and check it (rb->buf), the daemon moves it with file I/O. Returns 0 or
 * -errno (printed).
 */
int bench_file_create(struct xfer_client *c, size_t len, const char *dir, const char *name,
		      struct bench_buf *rb);

/*
 * Deregisters @rb from @c (NULL: skips that) with @force, frees it and zeroes it; a zeroed @rb
 * is fine. Returns 0 or the -errno of the deregistration, not printed: the buffer is freed
 * either way.
 */
int bench_buf_destroy(struct xfer_client *c, struct bench_buf *rb, int force);

/*
 * Waits up to @timeout_ms for @op on @c. Returns 0 only if it ended COMPLETE with all @len
 * bytes moved and, unless @transport is NULL, over @transport; else -errno (printed, labelled
 * @who). Fills @info if not NULL.
 */
int bench_wait_complete(struct xfer_client *c, uint64_t op, uint64_t len, const char *who,
			int timeout_ms, const char *transport, struct xfer_op_info *info);

/*
 * Runs @p once: the passive call, the active claim with its metadata, then waits for the active
 * and the passive operation, and releases both. Fills @t. Returns 0 when both ended COMPLETE,
 * else -errno (printed). Operations are single-use, so every call makes a new pair.
 */
int bench_pair_run(const struct bench_pair *p, struct bench_times *t);

/*
 * Runs getopt_long() over @argv, handing each option to @set(@ctx, option, its argument or
 * NULL); @set returns 0, 2 after saying why the argument is bad, or -EINVAL for an option it
 * does not know. -h/--help prints @usage to stdout and exits 0. Returns 0 with optind at the
 * first operand, or 2 for a usage error (an unknown option also prints @usage to stderr).
 */
int bench_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
		 int (*set)(void *ctx, int ch, const char *arg), void *ctx, void (*usage)(FILE *f));

#endif /* XFERD_BENCHUTIL_H */
