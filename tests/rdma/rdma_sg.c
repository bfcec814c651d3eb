/* SPDX-License-Identifier: MIT */
/*
 * rdma_sg: multi-descriptor (scatter/gather) transfers between two daemons, through the public
 * libxferclient API. xferctl makes one descriptor per operation; this makes
 *
 *   - a 3-descriptor readable (over two regions) read by a 2-descriptor read, and
 *   - a 2-descriptor writable written by a 3-descriptor write,
 *
 * with descriptor boundaries that line up nowhere on the two sides and offsets that are not
 * page-aligned, at a small and a large total size. Every destination byte is compared with the
 * source stream, bytes outside the destination descriptors must be untouched, and all four
 * operations must end COMPLETE with the expected transport.
 *
 *   rdma_sg PASSIVE_SOCKET ACTIVE_SOCKET [TRANSPORT]      (TRANSPORT default "rdma")
 *
 * The passive operations are made on PASSIVE_SOCKET's daemon, the active ones on the other.
 * Prints "ok - NAME" or "FAIL - NAME (why)" per case; exit 0 when every case passed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_fill.h"
#include "xferclient.h"

#define GAP 0xa5
#define WAIT_MS 180000
#define MIB (1024ULL * 1024ULL)

struct side {
	struct xfer_client *c;
	struct xfer_buf buf[2];
	uint64_t region[2];
};

static const char *want_transport = "rdma";
static int failures;

/* The bytes of @d (n descriptors over @s's regions) as one stream, into @out. */
static void gather(const struct side *s, const struct xfer_desc *d, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		int r = d[i].region == s->region[0] ? 0 : 1;

		memcpy(out, (uint8_t *)s->buf[r].addr + d[i].offset, d[i].length);
		out += d[i].length;
	}
}

/* 0 if every byte of @s's buffers outside the @n descriptors is still GAP. */
static int gaps_intact(const struct side *s, const struct xfer_desc *d, size_t n, char *why,
		       size_t len)
{
	for (int r = 0; r < 2; r++) {
		const uint8_t *p = s->buf[r].addr;

		for (size_t off = 0; off < s->buf[r].length; off++) {
			int inside = 0;

			for (size_t i = 0; i < n && !inside; i++)
				inside = d[i].region == s->region[r] && off >= d[i].offset &&
					 off < d[i].offset + d[i].length;
			if (!inside && p[off] != GAP) {
				snprintf(why, len,
					 "byte %zu of region %d outside the descriptors changed",
					 off, r);
				return -1;
			}
		}
	}
	return 0;
}

static int check_info(const char *who, const struct xfer_op_info *info, uint64_t total, char *why,
		      size_t len)
{
	if (info->state != XFER_COMPLETE) {
		snprintf(why, len, "%s op ended %s: %s", who, xfer_state_name(info->state),
			 info->cause[0] ? info->cause : xfer_strerror(info->error));
		return -1;
	}
	if (strcmp(info->transport, want_transport) != 0) {
		snprintf(why, len, "%s op has transport '%s', expected '%s'", who, info->transport,
			 want_transport);
		return -1;
	}
	if (info->bytes != total || info->length != total) {
		snprintf(why, len,
			 "%s op moved %" PRIu64 " of %" PRIu64 " bytes, expected %" PRIu64, who,
			 info->bytes, info->length, total);
		return -1;
	}
	return 0;
}

static int side_open(const char *sock, const char *name, size_t len0, size_t len1, struct side *s)
{
	int rc = xfer_connect(sock, name, &s->c);

	if (rc < 0) {
		fprintf(stderr, "rdma_sg: cannot reach %s: %s\n", sock, xfer_strerror(rc));
		return rc;
	}
	size_t lens[2] = { len0, len1 };
	for (int r = 0; r < 2; r++) {
		rc = xfer_buf_alloc(lens[r], &s->buf[r]);
		if (rc == 0)
			rc = xfer_region_register(s->c, s->buf[r].fd, 0, 0, name, &s->region[r]);
		if (rc < 0) {
			fprintf(stderr, "rdma_sg: %s: buffer/region of %zu bytes: %s (%s)\n", name,
				lens[r], xfer_strerror(rc), xfer_last_error(s->c));
			return rc;
		}
	}
	return 0;
}

static void side_close(struct side *s)
{
	xfer_close(s->c);
	xfer_buf_free(&s->buf[0]);
	xfer_buf_free(&s->buf[1]);
}

/*
 * One case. @pd/@np: passive descriptors, @ad/@na: active descriptors (same total). @read: the
 * passive op is readable (source = passive side), else writable (source = active side).
 */
static void run_case(const char *name, struct side *p, struct side *a, int read,
		     const struct xfer_desc *pd, size_t np, const struct xfer_desc *ad, size_t na)
{
	struct xfer_op_opts opts = { .timeout_ms = WAIT_MS };
	struct xfer_op_info pi, ai;
	uint64_t pop, aop, total = 0, total2 = 0;
	char why[512] = "", *meta = NULL;
	uint8_t *want = NULL, *got = NULL;
	struct side *src = read ? p : a, *dst = read ? a : p;
	const struct xfer_desc *sd = read ? pd : ad, *dd = read ? ad : pd;
	size_t sn = read ? np : na, dn = read ? na : np;
	int rc;

	for (size_t i = 0; i < np; i++)
		total += pd[i].length;
	for (size_t i = 0; i < na; i++)
		total2 += ad[i].length;
	if (total != total2) {
		snprintf(why, sizeof(why), "test bug: totals %" PRIu64 " and %" PRIu64, total,
			 total2);
		goto out;
	}
	for (int r = 0; r < 2; r++) {
		rdma_fill(src->buf[r].addr, src->buf[r].length, (uint32_t)(total + 77 * r));
		memset(dst->buf[r].addr, GAP, dst->buf[r].length);
	}
	rc = read ? xfer_readable(p->c, pd, np, &opts, &pop, &meta) :
		    xfer_writable(p->c, pd, np, &opts, &pop, &meta);
	if (rc < 0) {
		snprintf(why, sizeof(why), "%s: %s (%s)", read ? "readable" : "writable",
			 xfer_strerror(rc), xfer_last_error(p->c));
		goto out;
	}
	rc = read ? xfer_read(a->c, meta, ad, na, &opts, &aop) :
		    xfer_write(a->c, meta, ad, na, &opts, &aop);
	if (rc < 0) {
		snprintf(why, sizeof(why), "%s refused: %s (%s)", read ? "read" : "write",
			 xfer_strerror(rc), xfer_last_error(a->c));
		xfer_release(p->c, pop);
		goto out;
	}
	rc = xfer_wait(p->c, pop, WAIT_MS, &pi);
	if (rc == 0)
		rc = xfer_wait(a->c, aop, WAIT_MS, &ai);
	if (rc < 0) {
		snprintf(why, sizeof(why), "wait: %s", xfer_strerror(rc));
		xfer_release(a->c, aop);
		xfer_release(p->c, pop);
		goto out;
	}
	xfer_release(a->c, aop);
	xfer_release(p->c, pop);
	if (check_info(read ? "readable" : "writable", &pi, total, why, sizeof(why)) ||
	    check_info(read ? "read" : "write", &ai, total, why, sizeof(why)))
		goto out;
	want = malloc(total);
	got = malloc(total);
	if (!want || !got) {
		snprintf(why, sizeof(why), "out of memory");
		goto out;
	}
	gather(src, sd, sn, want);
	gather(dst, dd, dn, got);
	if (memcmp(want, got, total) != 0) {
		uint64_t i = 0;

		while (want[i] == got[i])
			i++;
		snprintf(why, sizeof(why), "byte %" PRIu64 " of %" PRIu64 " of the stream differs",
			 i, total);
		goto out;
	}
	gaps_intact(dst, dd, dn, why, sizeof(why));
out:
	if (why[0]) {
		printf("FAIL - %s (%s)\n", name, why);
		failures++;
	} else {
		printf("ok - %s: %" PRIu64 " bytes identical, gaps untouched, transport %s\n", name,
		       total, want_transport);
	}
	fflush(stdout);
	free(meta);
	free(want);
	free(got);
}

int main(int argc, char **argv)
{
	struct side p = { 0 }, a = { 0 };

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: rdma_sg PASSIVE_SOCKET ACTIVE_SOCKET [TRANSPORT]\n");
		return 2;
	}
	if (argc == 4)
		want_transport = argv[3];
	/* passive: two regions; active: two regions (the second unused by the active descs) */
	if (side_open(argv[1], "rdma_sg-passive", 6 * MIB, 3 * MIB, &p) ||
	    side_open(argv[2], "rdma_sg-active", 12 * MIB, 4096, &a)) {
		printf("FAIL - rdma_sg setup (see stderr)\n");
		side_close(&p);
		side_close(&a);
		return 1;
	}
	uint64_t P0 = p.region[0], P1 = p.region[1], A0 = a.region[0];

	for (int big = 0; big < 2; big++) {
		/* lengths: small ~10 KiB, big ~5.5 MiB; every boundary unaligned */
		uint64_t k = big ? 1024 : 2;
		uint64_t l1 = 1000 * k + 3, l2 = 1500 * k + 1, l3 = 2900 * k + 5;
		uint64_t t = l1 + l2 + l3, m1 = l1 + l2 / 2 + 11;
		struct xfer_desc pd3[3] = { { P0, 100, l1 },
					    { P1, 4097, l2 },
					    { P0, 3 * l1 + 333, l3 } };
		struct xfer_desc ad2[2] = { { A0, 7, m1 }, { A0, m1 + 64 * k + 13, t - m1 } };
		struct xfer_desc pd2[2] = { { P1, 9, m1 }, { P0, 65537, t - m1 } };
		struct xfer_desc ad3[3] = { { A0, t + 321, l3 },
					    { A0, 1, l1 },
					    { A0, t + l3 + 999, l2 } };
		char name[160];

		snprintf(name, sizeof(name),
			 "3-descriptor readable read by a 2-descriptor read, %s",
			 big ? "~5.4 MiB" : "~5.4 KiB");
		run_case(name, &p, &a, 1, pd3, 3, ad2, 2);
		snprintf(name, sizeof(name),
			 "2-descriptor writable written by a 3-descriptor write, %s",
			 big ? "~5.4 MiB" : "~5.4 KiB");
		run_case(name, &p, &a, 0, pd2, 2, ad3, 3);
	}
	side_close(&p);
	side_close(&a);
	return failures ? 1 : 0;
}
