// SPDX-License-Identifier: MIT
/*
 * Objects by their 64-bit id: a chained hash table whose nodes live in the objects (regions,
 * operations, windows, window handles, a peer set's transfers). A request names objects by id,
 * up to 1024 times a packet (an op.readable's descriptors, an op.batch's entries), and every
 * peer frame about a transfer names it; walking a list of every client's objects for each
 * name let one client hold the loop from all the others (~50 ms a packet at 16384 regions,
 * and 16 packets a wakeup), and one peer likewise (~330 us a frame at 16000 transfers).
 * Adding never fails: a table that cannot grow keeps its size, and its chains get longer.
 */
#include <stdlib.h>
#include "xferd.h"

#define IDMAP_MAX_BITS 24 /* 16M chains: far past every limit on the objects */

/* Fibonacci hashing: ids are consecutive, and the top bits of the product spread them. */
static size_t chain_of(const struct xd_idmap *m, uint64_t id)
{
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> (64 - m->bits));
}

static struct xd_idnode **chains(struct xd_idmap *m)
{
	return m->heap ? m->heap : m->small;
}

void xd_idmap_init(struct xd_idmap *m)
{
	*m = (struct xd_idmap){ .bits = XD_IDMAP_SMALL_BITS };
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
			if (--m->count ==
			    0) /* (back to the chains in the map: none are left to move) */
				xd_idmap_fini(m);
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
	free(m->heap);
	xd_idmap_init(m);
}
