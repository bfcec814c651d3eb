// SPDX-License-Identifier: MIT
/*
 * jansson's allocations through a cache of freed blocks, for a process whose jansson is its own
 * (xferd; never a library, whose application may set its own allocator or free what jansson
 * gave it with free()).
 *
 * A batch of pairings makes and frees a few hundred small jansson values in each daemon, all of
 * a handful of sizes, then does it again. glibc's per-thread cache keeps 7 freed blocks of a
 * size; the rest went through _int_malloc, its fastbins and their consolidation: ~14% of a
 * daemon's CPU in a profile of local 4 KiB pairings in batches of 8 (perf, dwarf stacks). Here
 * blocks of up to XP_JALLOC_CLASSES * XP_JALLOC_STEP bytes come in size classes and a freed
 * one goes onto its class's list, at most XP_JALLOC_KEEP of them, for the next request of that
 * class. Each block is still one malloc() of its own with a 16-byte header that names its
 * class, so a block is freed correctly whichever thread frees it and after the cache is gone.
 *
 * jansson's hooks take no argument, so the cache is reached through a thread-local pointer: the
 * thread that installed it (the daemon's loop) uses it; any other thread's jansson calls
 * malloc() and free() directly.
 *
 * Under valgrind (tests/valgrind.sh) a cached block is what a freed one would be to memcheck:
 * no access while on its list (a use after free is reported) and undefined when given again (a
 * read before a write is reported); the slack of a class beyond the size asked is never
 * accessible. Without valgrind's header, or not under valgrind, the annotations cost nothing
 * or a few instructions.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "xp_json.h"

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#endif
#endif
#ifndef VALGRIND_MAKE_MEM_NOACCESS
#define VALGRIND_MAKE_MEM_NOACCESS(addr, len) ((void)0)
#define VALGRIND_MAKE_MEM_UNDEFINED(addr, len) ((void)0)
#endif

#define JA_HDR 16 /* the header: the class; keeps malloc's 16-byte alignment for the caller */

struct ja_free {
	struct ja_free *next;
};

struct xp_jalloc {
	struct ja_free *head[XP_JALLOC_CLASSES];
	uint32_t count[XP_JALLOC_CLASSES];
	uint64_t reused, made; /* blocks given from the lists / from malloc() (tests) */
};

/* The installing thread's cache (NULL on every other thread, and once it is gone). */
static __thread struct xp_jalloc *ja_cache;

static void *ja_malloc(size_t size)
{
	size_t cls = size ? (size - 1) / XP_JALLOC_STEP : 0;
	struct xp_jalloc *c = ja_cache;
	unsigned char *b;

	if (cls < XP_JALLOC_CLASSES && c && c->head[cls]) {
		b = (unsigned char *)c->head[cls];
		c->head[cls] = c->head[cls]->next;
		c->count[cls]--;
		c->reused++;
	} else {
		if (size > SIZE_MAX - JA_HDR - XP_JALLOC_STEP)
			return NULL;
		b = malloc(JA_HDR + (cls < XP_JALLOC_CLASSES ? (cls + 1) * XP_JALLOC_STEP : size));
		if (!b)
			return NULL;
		if (c)
			c->made++;
	}
	memcpy(b, &cls, sizeof(cls));
	if (cls < XP_JALLOC_CLASSES) {
		VALGRIND_MAKE_MEM_UNDEFINED(b + JA_HDR, size);
		VALGRIND_MAKE_MEM_NOACCESS(b + JA_HDR + size, (cls + 1) * XP_JALLOC_STEP - size);
	}
	return b + JA_HDR;
}

static void ja_free(void *p)
{
	struct xp_jalloc *c = ja_cache;
	unsigned char *b;
	size_t cls;

	if (!p)
		return; /* (before the step back to the header: NULL - JA_HDR is undefined) */
	b = (unsigned char *)p - JA_HDR;
	memcpy(&cls, b, sizeof(cls));
	if (cls < XP_JALLOC_CLASSES && c && c->count[cls] < XP_JALLOC_KEEP) {
		struct ja_free *f = (struct ja_free *)(void *)b;
		f->next = c->head[cls];
		c->head[cls] = f;
		c->count[cls]++;
		VALGRIND_MAKE_MEM_NOACCESS(b + JA_HDR, (cls + 1) * XP_JALLOC_STEP);
		return;
	}
	free(b);
}

struct xp_jalloc *xp_jalloc_install(void)
{
	struct xp_jalloc *c;

	if (ja_cache || !(c = calloc(1, sizeof(*c))))
		return NULL;
	ja_cache = c;
	json_set_alloc_funcs(ja_malloc, ja_free);
	return c;
}

void xp_jalloc_drop(struct xp_jalloc *c)
{
	if (!c)
		return;
	for (int i = 0; i < XP_JALLOC_CLASSES; i++)
		while (c->head[i]) {
			struct ja_free *f = c->head[i];
			c->head[i] = f->next;
			free(f);
		}
	if (ja_cache == c)
		ja_cache = NULL;
	free(c);
}

void xp_jalloc_counts(const struct xp_jalloc *c, uint64_t *reused, uint64_t *made, size_t *kept)
{
	*reused = c->reused;
	*made = c->made;
	*kept = 0;
	for (int i = 0; i < XP_JALLOC_CLASSES; i++)
		*kept += c->count[i];
}
