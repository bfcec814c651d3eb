/* SPDX-License-Identifier: MIT */
/*
 * The byte pattern the tests/rdma programs put into a source and expect at the target: a
 * xorshift32 stream from @seed, so that a byte moved to the wrong offset (or a block moved
 * twice) does not compare equal by chance. Header-only: each program is one file, linked
 * against libxferclient alone (scripts/rdma-make.mk).
 */
#ifndef XFERD_TESTS_RDMA_FILL_H
#define XFERD_TESTS_RDMA_FILL_H

#include <stddef.h>
#include <stdint.h>

static inline void rdma_fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed | 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

#endif
