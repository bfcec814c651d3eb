/* SPDX-License-Identifier: MIT */
/*
 * benchutil: the helpers xferbench and xferbench_net share (see benchutil.h). Only the public
 * libxferclient API is used, so the benchmarks measure what an application would see.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>

#include "benchutil.h"

const char *bench_prog = "xferbench";

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

double bench_gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0; /* bytes per ns == GB/s (1e9 B/s) */
}

const char *bench_fmt_size(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	unsigned int u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	if (v == (double)(uint64_t)v)
		snprintf(buf, len, "%" PRIu64 " %s", (uint64_t)v, units[u]);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

int bench_parse_size(const char *s, uint64_t *out)
{
	static const char suffixes[] = "KMGT";
	const char *sfx;
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	/* strtoull() accepts "-1" and wraps it, so a sign is refused here. */
	if (errno || end == s || *s == '-')
		return -EINVAL;
	sfx = *end ? strchr(suffixes, toupper((unsigned char)*end)) : NULL;
	if (sfx) {
		mult = 1ULL << (10 * (sfx - suffixes + 1));
		end++;
		if (*end == 'i')
			end++;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v == 0 || __builtin_mul_overflow((uint64_t)v, mult, out))
		return -EINVAL;
	return 0;
}

/*
 * The test pattern: word i of a buffer is splitmix64(seed + i), so any range can be checked
 * without state and a misplaced or stale chunk is caught, not just a missing one.
 */
static uint64_t pattern_word(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void bench_pattern_fill(void *buf, size_t len, uint64_t seed)
{
	uint64_t *w = buf, last;
	size_t n = len / 8, i;

	for (i = 0; i < n; i++)
		w[i] = pattern_word(seed, i);
	if (len % 8) {
		last = pattern_word(seed, n);
		memcpy(w + n, &last, len % 8);
	}
}

bool bench_pattern_check(const void *buf, size_t len, uint64_t seed, size_t *bad)
{
	const uint64_t *w = buf;
	size_t n = len / 8, i;
	uint64_t last;

	for (i = 0; i < n; i++) {
		if (w[i] != pattern_word(seed, i)) {
			*bad = i * 8;
			return false;
		}
	}
	last = pattern_word(seed, n);
	if (len % 8 && memcmp(w + n, &last, len % 8)) {
		*bad = n * 8;
		return false;
	}
	return true;
}

bool bench_verify(const char *who, const void *buf, size_t len, uint64_t seed)
{
	size_t bad = 0;

	if (bench_pattern_check(buf, len, seed, &bad))
		return true;
	fprintf(stderr, "%s: %s: byte mismatch at offset %zu of %zu\n", bench_prog, who, bad, len);
	return false;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

uint64_t bench_percentile(uint64_t *v, size_t n, unsigned int pct)
{
	size_t i;

	qsort(v, n, sizeof(*v), cmp_u64);
	i = (n * pct + 99) / 100;
	return v[i ? i - 1 : 0];
}

int bench_fail(struct xfer_client *c, const char *what, int err)
{
	const char *why = c ? xfer_last_error(c) : "";

	fprintf(stderr, "%s: %s: %s%s%s\n", bench_prog, what, xfer_strerror(err), *why ? ": " : "",
		why);
	return err;
}

const char *bench_socket_name(const char *socket)
{
	const char *env = getenv("XFERD_SOCKET");

	if (socket)
		return socket;
	return env && *env ? env : "/run/xferd/xferd.sock";
}

int bench_connect(const char *socket, const char *name, const char *hint, struct xfer_client **c)
{
	int err = xfer_connect(socket, name, c);

	if (err)
		fprintf(stderr, "%s: cannot reach xferd at %s: %s\n%s", bench_prog,
			bench_socket_name(socket), xfer_strerror(err), hint ? hint : "");
	return err;
}

int bench_buf_create(struct xfer_client *c, size_t len, const char *name, struct bench_buf *rb)
{
	int err;

	memset(rb, 0, sizeof(*rb));
	rb->buf.fd = -1;
	err = xfer_buf_alloc(len, &rb->buf);
	if (err)
		return bench_fail(NULL, "xfer_buf_alloc", err);
	memset(rb->buf.addr, 0, len);
	rb->reg_ns = bench_now_ns();
	err = xfer_region_register(c, rb->buf.fd, 0, 0, name, &rb->region);
	rb->reg_ns = bench_now_ns() - rb->reg_ns;
	if (err) {
		xfer_buf_free(&rb->buf);
		return bench_fail(c, "xfer_region_register", err);
	}
	return 0;
}

/* A new unlinked file of @len bytes in @dir, mapped into @buf. Returns 0 or -errno. */
static int file_buf_alloc(size_t len, const char *dir, struct xfer_buf *buf)
{
	char path[4096];
	int err = 0;

	if (snprintf(path, sizeof(path), "%s/xferbench-XXXXXX", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	buf->fd = mkostemp(path, O_CLOEXEC);
	if (buf->fd < 0)
		return -errno;
	unlink(path);
	if (ftruncate(buf->fd, (off_t)len) < 0)
		err = -errno;
	buf->addr = err ? MAP_FAILED :
			  mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, buf->fd, 0);
	if (!err && buf->addr == MAP_FAILED)
		err = -errno;
	if (err) {
		close(buf->fd);
		buf->fd = -1;
		buf->addr = NULL;
		return err;
	}
	buf->length = len;
	return 0;
}

int bench_file_create(struct xfer_client *c, size_t len, const char *dir, const char *name,
		      struct bench_buf *rb)
{
	int err;

	memset(rb, 0, sizeof(*rb));
	rb->buf.fd = -1;
	err = file_buf_alloc(len, dir, &rb->buf);
	if (err)
		return bench_fail(NULL, "creating a file buffer", err);
	memset(rb->buf.addr, 0, len); /* allocated now, not in a timed transfer */
	rb->reg_ns = bench_now_ns();
	err = xfer_region_register_file(c, rb->buf.fd, 0, 0, 0, name, &rb->region);
	rb->reg_ns = bench_now_ns() - rb->reg_ns;
	if (err) {
		xfer_buf_free(&rb->buf);
		return bench_fail(c, "xfer_region_register_file", err);
	}
	return 0;
}

int bench_buf_destroy(struct xfer_client *c, struct bench_buf *rb, int force)
{
	int err = 0;

	if (!rb->buf.addr)
		return 0;
	if (c)
		err = xfer_region_deregister(c, rb->region, force);
	xfer_buf_free(&rb->buf);
	memset(rb, 0, sizeof(*rb));
	return err;
}

int bench_wait_complete(struct xfer_client *c, uint64_t op, uint64_t len, const char *who,
			int timeout_ms, const char *transport, struct xfer_op_info *info)
{
	struct xfer_op_info local;
	int err;

	if (!info)
		info = &local;
	err = xfer_wait(c, op, timeout_ms, info);
	if (err)
		return bench_fail(c, who, err);
	if (info->state != XFER_COMPLETE || info->bytes != len) {
		fprintf(stderr,
			"%s: %s: op %" PRIu64 " ended %s after %" PRIu64 " of %" PRIu64
			" bytes: %s (%s)\n",
			bench_prog, who, op, xfer_state_name(info->state), info->bytes, len,
			info->cause, xfer_strerror(info->error));
		return info->error ? info->error : -EIO;
	}
	if (transport && strcmp(info->transport, transport) != 0) {
		fprintf(stderr, "%s: %s: op %" PRIu64 " used transport '%s', not '%s'\n",
			bench_prog, who, op, info->transport, transport);
		return -EPROTO;
	}
	return 0;
}

int bench_pair_run(const struct bench_pair *p, struct bench_times *t)
{
	const char *pas_what = p->write ? "xfer_writable" : "xfer_readable";
	const char *act_what = p->write ? "xfer_write" : "xfer_read";
	uint64_t pop, aop;
	char *md = NULL;
	int err;

	t->start = bench_now_ns();
	err = p->write ? xfer_writable(p->pas, &p->pd, 1, NULL, &pop, &md) :
			 xfer_readable(p->pas, &p->pd, 1, NULL, &pop, &md);
	if (err)
		return bench_fail(p->pas, p->pas_what ? p->pas_what : pas_what, err);
	t->offered = bench_now_ns();
	err = p->write ? xfer_write(p->act, md, &p->ad, 1, NULL, &aop) :
			 xfer_read(p->act, md, &p->ad, 1, NULL, &aop);
	free(md);
	if (err) {
		bench_fail(p->act, p->act_what ? p->act_what : act_what, err);
		xfer_release(p->pas, pop);
		return err;
	}
	t->claimed = bench_now_ns();
	err = bench_wait_complete(p->act, aop, p->ad.length, "active", p->timeout_ms, NULL, NULL);
	t->done = bench_now_ns();
	if (!err)
		err = bench_wait_complete(p->pas, pop, p->pd.length, "passive", p->timeout_ms, NULL,
					  NULL);
	xfer_release(p->act, aop);
	xfer_release(p->pas, pop);
	return err;
}

int bench_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
		 int (*set)(void *ctx, int ch, const char *arg), void *ctx, void (*usage)(FILE *f))
{
	int ch, rc;

	while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		if (ch == 'h') {
			usage(stdout);
			exit(0);
		}
		rc = set(ctx, ch, optarg);
		if (rc > 0)
			return rc;
		if (rc < 0) {
			usage(stderr); /* getopt_long() has said what was wrong */
			return 2;
		}
	}
	return 0;
}
