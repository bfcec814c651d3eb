// SPDX-License-Identifier: MIT
/*
 * daemon/idmap.c, the daemon's objects by id: every id found again through the table's growth
 * and shrinking, and no chain longer than random ids would make, whether the ids are the
 * daemon's own (consecutive) or chosen by a peer to collide (a peer set's transfer ids are the
 * claimer's). With the unkeyed Fibonacci hash the chosen ones all shared one chain.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../daemon/xferd.h"
#include "harness.h"

#define N 8192	       /* ids in the spread checks: their chains number 8192 or 16384 */
#define LONGEST_OK 32  /* random ids: at most ~9 in a chain over 300 keys */
#define GROWTH_N 50000 /* ids in the growth check: the table grows 12 times */
#define FIB 0x9e3779b97f4a7c15ull

struct obj {
	struct xd_idnode node;
	uint64_t id;
};

/* The longest chain of @m, walked as idmap.c files them. */
static size_t longest_chain(const struct xd_idmap *m)
{
	struct xd_idnode *const *chains = m->heap ? m->heap : m->small;
	size_t longest = 0;

	for (size_t i = 0; i < ((size_t)1 << m->bits); i++) {
		size_t n = 0;
		for (const struct xd_idnode *node = chains[i]; node; node = node->next)
			n++;
		if (n > longest)
			longest = n;
	}
	return longest;
}

/* The inverse of odd @a modulo 2^64 (Newton's iteration: each step doubles the bits right). */
static uint64_t inverse(uint64_t a)
{
	uint64_t x = a;

	for (int i = 0; i < 6; i++)
		x *= 2 - a * x;
	return x;
}

/* Files N objects with ids @id(i), checks every one is found, and returns the longest chain. */
static size_t spread_of(uint64_t (*id)(uint64_t))
{
	struct obj *objs = calloc(N, sizeof(*objs));
	struct xd_idmap m;
	size_t longest;

	CHECK(objs);
	xd_idmap_init(&m);
	for (uint64_t i = 0; i < N; i++) {
		objs[i].id = id(i);
		xd_idmap_add(&m, &objs[i].node, objs[i].id);
	}
	for (uint64_t i = 0; i < N; i++)
		CHECK(xd_idmap_get(&m, objs[i].id) == &objs[i].node);
	longest = longest_chain(&m);
	for (uint64_t i = 0; i < N; i++)
		xd_idmap_del(&m, &objs[i].node);
	CHECK(m.count == 0 && !m.heap);
	xd_idmap_fini(&m);
	free(objs);
	return longest;
}

static uint64_t consecutive(uint64_t i)
{
	return 1 + i;
}

/* Ids a peer would pick against the Fibonacci hash: t * FIB^-1 is t after the multiply, so
 * its top bits, every size's chain, are 0. */
static uint64_t chosen_against_fibonacci(uint64_t i)
{
	return (1 + i) * inverse(FIB);
}

/* Multiples of a large power of two: only their high bits differ. */
static uint64_t high_bits_only(uint64_t i)
{
	return i << 51;
}

TEST(consecutive_ids_spread)
{
	size_t longest = spread_of(consecutive);

	if (longest > LONGEST_OK)
		harness_fail(__FILE__, __LINE__, "%zu consecutive ids in one chain", longest);
}

TEST(ids_chosen_to_collide_spread_as_random_ones)
{
	CHECK(inverse(FIB) * FIB == 1);
	size_t longest = spread_of(chosen_against_fibonacci);

	if (longest > LONGEST_OK)
		harness_fail(__FILE__, __LINE__, "%zu of %d chosen ids in one chain", longest, N);
}

TEST(ids_differing_in_high_bits_spread)
{
	size_t longest = spread_of(high_bits_only);

	if (longest > LONGEST_OK)
		harness_fail(__FILE__, __LINE__, "%zu of %d ids in one chain", longest, N);
}

/* Two maps draw their own keys: what a peer learns of one set's map says nothing of another. */
TEST(maps_have_keys_of_their_own)
{
	struct xd_idmap a, b;

	xd_idmap_init(&a);
	xd_idmap_init(&b);
	CHECK(a.key != b.key);
	xd_idmap_fini(&a);
	xd_idmap_fini(&b);
}

/* Through every growth and back to the chains inside the map: each id found, absent ones not. */
TEST(add_get_del_through_growth)
{
	struct obj *objs = calloc(GROWTH_N, sizeof(*objs));
	struct xd_idmap m;

	CHECK(objs);
	xd_idmap_init(&m);
	for (size_t i = 0; i < GROWTH_N; i++) {
		objs[i].id = i % 2 ? 3 * i : ((uint64_t)rand() << 32) ^ (uint64_t)rand() ^ (i << 1);
		xd_idmap_add(&m, &objs[i].node, objs[i].id);
	}
	CHECK(m.count == GROWTH_N && m.heap && m.bits > XD_IDMAP_SMALL_BITS);
	for (size_t i = 0; i < GROWTH_N; i++)
		CHECK(xd_idmap_get(&m, objs[i].id) == &objs[i].node);
	for (size_t i = 0; i < GROWTH_N; i += 2)
		xd_idmap_del(&m, &objs[i].node);
	for (size_t i = 0; i < GROWTH_N; i++)
		CHECK(xd_idmap_get(&m, objs[i].id) == (i % 2 ? &objs[i].node : NULL));
	for (size_t i = 1; i < GROWTH_N; i += 2)
		xd_idmap_del(&m, &objs[i].node);
	CHECK(m.count == 0 && !m.heap && m.bits == XD_IDMAP_SMALL_BITS);
	CHECK(!xd_idmap_get(&m, objs[1].id));
	xd_idmap_fini(&m);
	free(objs);
}
