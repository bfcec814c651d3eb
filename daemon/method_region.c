// SPDX-License-Identifier: MIT
/*
 * The region.* and list.regions methods: their params checked, then handed to region.c, which
 * validates and maps the memfd; a forced deregistration first ends the operations using it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "transport.h"

/* Names reach terminals through xferctl and logs: control bytes could rewrite what they show. */
static bool name_has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			return true;
	return false;
}

/* An absent length means "to the end"; a present one, -1 included, must not be negative. */
static int parse_register_args(struct xd_call *call, struct xd_region_args *a)
{
	json_int_t offset = 0, length = 0;
	json_t *jlength = NULL;
	const char *kind = "memfd";
	int sync = 0;

	a->name = "";
	if (xd_unpack_params(call, "{s?s, s?I, s?o, s?s, s?b}", "name", &a->name, "offset", &offset,
			     "length", &jlength, "kind", &kind, "sync", &sync))
		return -EINVAL;
	if (strcmp(kind, "memfd") != 0 && strcmp(kind, "file") != 0)
		return xd_fail(call, XP_E_FAILED, EINVAL, "kind must be \"memfd\" or \"file\"");
	a->file = strcmp(kind, "file") == 0;
	a->sync = sync;
	if (sync && !a->file)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "sync applies to file regions only (kind \"file\")");
	if (jlength && !json_is_integer(jlength))
		return xd_fail(call, XP_E_PARAMS, EINVAL,
			       "invalid params: \"length\": expected integer");
	length = json_integer_value(jlength);
	if (offset < 0 || length < 0 || strlen(a->name) > XP_MAX_NAME)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "offset and length must not be negative; name at most 64 bytes");
	if (name_has_control(a->name))
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "name must not contain control characters (bytes below 0x20, 0x7f)");
	a->offset = (uint64_t)offset;
	a->has_length = jlength != NULL;
	a->length = (uint64_t)length;
	return 0;
}

/*
 * Validates and maps now; the pages are faulted in by a worker and the reply comes after that
 * (region.c). The fd is the daemon's to close whatever happens (xd_region_register() takes it),
 * and not with a close(2) on the loop: the client chose its file system.
 */
int xd_handle_region_register(struct xd_call *call)
{
	struct xd_region_args a;
	int fd = xp_fdset_take(call->fds, 0);
	int rc = parse_register_args(call, &a);

	if (rc == 0)
		return xd_region_register(call, fd, &a);
	xd_close_client_fd(fd);
	return rc;
}

/* Ends every operation using @r that has not ended (region.deregister with force). */
static void end_ops_using(struct xd_daemon *d, struct xd_region *r)
{
	struct xd_op *op, *tmp;

	TAILQ_FOREACH_SAFE(op, &d->ops, link, tmp)
		for (uint32_t i = 0; i < op->nsegs && !xp_state_terminal(op->state); i++)
			if (op->segs[i].region == r)
				xd_op_end(op, XP_ST_CANCELLED, ECANCELED,
					  "region %llu was deregistered with force",
					  (unsigned long long)r->id);
}

/*
 * Answers first, then lets @r go: unmapping (and deregistering from RDMA devices) is work the
 * client need not wait for, and nothing can reach @r between the two (one thread). Returns 0
 * with the call answered (deferred), or fails it before anything is released.
 */
static int release_after_reply(struct xd_call *call, struct xd_region *r)
{
	json_t *result = json_object();

	if (!result)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory building the reply");
	xd_reply_result(call->conn, call->id, result);
	xd_conn_flush(call->conn); /* (replies leave at the end of the turn: this one first) */
	call->deferred = true;
	xd_region_release(r);
	return 0;
}

int xd_handle_region_deregister(struct xd_call *call)
{
	json_int_t id;
	int force = 0;

	if (xd_unpack_params(call, "{s:I, s?b}", "region", &id, "force", &force))
		return -EINVAL;
	struct xd_region *r = xd_region_lookup(call, (uint64_t)id);
	if (!r)
		return -call->cause_errno;
	if (r->live_ops && !force)
		return xd_fail(call, XP_E_FAILED, EBUSY,
			       "region %llu is used by %u operation(s) or window(s) that have "
			       "not ended; cancel or close them, or pass force",
			       (unsigned long long)r->id, r->live_ops);
	if (r->live_ops) {
		end_ops_using(call->conn->d, r);
		xd_windows_region_gone(r);
	}
	return release_after_reply(call, r);
}

static json_t *region_entry(const void *r, void *arg)
{
	return xd_region_to_json(r);
}

/* Pages by region id (PROTOCOL.md §7). */
int xd_handle_list_regions(struct xd_call *call)
{
	struct xd_daemon *d = call->conn->d;
	struct xd_page_item *items;
	struct xd_region *r;
	struct xd_page pg;
	size_t n = 0;
	int rc = xd_page_begin(call, &pg);

	if (rc)
		return rc;
	TAILQ_FOREACH(r, &d->regions, link)
		n++;
	items = calloc(n + 1, sizeof(*items));
	if (!items)
		return xd_page_finish(call, &pg, "regions", -ENOMEM);
	n = 0;
	TAILQ_FOREACH(r, &d->regions, link)
		if (xd_conn_may_access(call->conn, r->owner) && (json_int_t)r->id > pg.after)
			items[n++] = (struct xd_page_item){ r->id, r };
	rc = xd_page_fill(&pg, items, n, region_entry, NULL);
	free(items);
	return xd_page_finish(call, &pg, "regions", rc);
}
