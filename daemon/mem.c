// SPDX-License-Identifier: MIT
/*
 * A region's memory: its mapping, the registrations transports made of it (RDMA memory
 * regions), and the references that keep both alive. It sits in the transport layer because
 * transports hold regions too (a transfer's pages, a memory window's), while registering a
 * client's memfd and deciding who may use it is region.c's. It reaches the transports through
 * d->transports, the table main.c hands it, since transports call down into it.
 */
#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "transport.h"

int xd_region_register_transports(struct xd_region *r, char *msg, size_t len)
{
	for (int i = 0; r->d->transports[i]; i++) {
		const struct xd_transport_ops *t = r->d->transports[i];
		int rc = t->register_region ? t->register_region(r->d, r, msg, len) : 0;
		if (rc < 0) {
			xd_region_deregister_transports(r);
			return rc;
		}
	}
	return 0;
}

void xd_region_deregister_transports(struct xd_region *r)
{
	for (int i = 0; r->d->transports[i]; i++)
		if (r->d->transports[i]->deregister_region)
			r->d->transports[i]->deregister_region(r);
}

json_t *xd_region_devices_json(const struct xd_region *r)
{
	json_t *all = json_array();

	for (int i = 0; all && r->d->transports[i]; i++) {
		if (!r->d->transports[i]->region_json)
			continue;
		json_t *mine = r->d->transports[i]->region_json(r->d, r);
		int rc = mine ? json_array_extend(all, mine) : -1;
		json_decref(mine);
		if (rc < 0) {
			json_decref(all);
			return NULL;
		}
	}
	return all;
}

void xd_region_uncharge(struct xd_region *r)
{
	if (!r->charge)
		return;
	xd_uncharge(r->d, NULL, r->uid, XD_RES_REGIONS, 1);
	xd_uncharge(r->d, NULL, r->uid, XD_RES_BYTES, r->charge);
	r->charge = 0;
}

void xd_region_ref(struct xd_region *r)
{
	r->refs++;
}

void xd_region_unref(struct xd_region *r)
{
	if (!r || --r->refs > 0)
		return;
	xd_region_deregister_transports(r); /* before the unmap: registrations pin these pages */
	if (munmap(r->map, r->map_len) < 0)
		xd_log(XD_LOG_ERR, "munmap of region %llu: %s", (unsigned long long)r->id,
		       strerror(errno));
	xd_region_uncharge(r);
	free(r);
}
