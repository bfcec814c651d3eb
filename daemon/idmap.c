// SPDX-License-Identifier: MIT
/*
 * Objects by their 64-bit id: a chained hash table whose nodes live in the objects (regions,
 * operations, windows, window handles, a peer set's transfers). A request names objects by id,
 * up to 1024 times a packet (an op.readable's descriptors, an op.batch's entries), and every
 * peer frame about a transfer names it; walking a list of every client's objects for each
 * name let one client hold the loop from all the others (~50 ms a packet at 16384 regions,
 * and 16 packets a wakeup), and one peer likewise (~330 us a frame at 16000 transfers).
 * Adding never fails: a table that cannot grow keeps its size, and its chains get longer.
 *
 * Some ids are chosen by others (a peer's transfer ids): the hash is keyed, so that no one can
 * put their ids in one chain (with the fixed multiplier of Fibonacci hashing, ids t times its
 * inverse all landed in chain 0 at every size, and each lookup walked them all).
 */
#include <stdlib.h>
#include <sys/random.h>
#include "xferd.h"

#define IDMAP_MAX_BITS 24 /* 16M chains: far past every limit on the objects */

/*
 * The id offset by the map's secret random key, through MurmurHash3's 64-bit finaliser (a
 * bijection whose every output bit depends on every input bit): without the key, chosen ids
 * land in chains as random ones do, and so do consecutive ids, the daemon's own (8192 of them
 * in 8192 chains: 9 at most in one, over 300 keys). A fixed multiplier spread consecutive ids
 * perfectly but let anyone pick colliding ones; a random multiplier alone spreads some
 * arithmetic progressions badly (177 in one chain for one key in 3000). Not a cryptographic
 * function: it only has to deny a peer the choice of chain.
 */
static size_t chain_of(const struct xd_idmap *m, uint64_t id)
{
	uint64_t h = id + m->key;

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (size_t)(h >> (64 - m->bits));
}

/* Returns to the chains inside the map (after the last node left): the key stays. */
static void shrink(struct xd_idmap *m)
{
	free(m->heap);
	m->heap = NULL;
	m->bits = XD_IDMAP_SMALL_BITS;
	for (size_t i = 0; i < (1u << XD_IDMAP_SMALL_BITS); i++)
		m->small[i] = NULL;
}

static struct xd_idnode **chains(struct xd_idmap *m)
{
	return m->heap ? m->heap : m->small;
}

void xd_idmap_init(struct xd_idmap *m)
{
	uint64_t key;

	/* (never fails once the kernel's pool is ready, long before a daemon starts) */
	if (getrandom(&key, sizeof(key), GRND_NONBLOCK) != sizeof(key))
		key = (uint64_t)(uintptr_t)m ^ xd_now_us(); /* (guessable, and still spread) */
	*m = (struct xd_idmap){ .bits = XD_IDMAP_SMALL_BITS, .key = key };
}

/* Twice the chains, when there are more nodes than chains; nothing changes when out of memory. */
static void grow(struct xd_idmap *m)
{
	size_t n = (size_t)1 << m->bits;
	struct xd_idnode **old = chains(m), **fresh;

	/* NOLINTNEXTLINE(bugprone-sizeof-expression): the chains' heads are pointers */
	if (m->count <= n || m->bits >= IDMAP_MAX_BITS || !(fresh = calloc(2 * n, sizeof(*fresh))))
		return;
	m->bits++;
	for (size_t i = 0; i < n; i++) {
		struct xd_idnode *node;
		while ((node = old[i])) {
			size_t j = chain_of(m, node->id);
			old[i] = node->next;
			node->next = fresh[j];
			fresh[j] = node;
		}
	}
	free(m->heap);
	m->heap = fresh;
}

void xd_idmap_add(struct xd_idmap *m, struct xd_idnode *node, uint64_t id)
{
	struct xd_idnode **head = &chains(m)[chain_of(m, id)];

	node->id = id;
	node->next = *head;
	*head = node;
	m->count++;
	grow(m);
}

void xd_idmap_del(struct xd_idmap *m, struct xd_idnode *node)
{
	for (struct xd_idnode **p = &chains(m)[chain_of(m, node->id)]; *p; p = &(*p)->next)
		if (*p == node) {
			*p = node->next;
			node->next = NULL;
			if (--m->count == 0)
				shrink(m); /* (none are left to move) */
			return;
		}
}

struct xd_idnode *xd_idmap_get(struct xd_idmap *m, uint64_t id)
{
	struct xd_idnode *node = chains(m)[chain_of(m, id)];

	while (node && node->id != id)
		node = node->next;
	return node;
}

void xd_idmap_fini(struct xd_idmap *m)
{
	shrink(m);
	m->count = 0; /* (its nodes are the objects' to free) */
}
