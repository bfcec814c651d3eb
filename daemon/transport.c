// SPDX-License-Identifier: MIT
/*
 * The table of transports. Adding one is a file that fills a struct xd_transport_ops and one
 * line below; the engine, the claims and the listings find it here.
 */
#include <stdio.h>
#include <string.h>
#include "transport.h"

/*
 * In start order: the local transport, then the network ones (tcp binds the listen addresses
 * that rdma's rdma_cm listeners then take too). Which one auto picks is each one's `preferred`.
 */
const struct xd_transport_ops *const xd_transports[] = {
	&xd_transport_local_ops,
	&xd_transport_tcp_ops,
	&xd_transport_rdma_ops,
	NULL,
};

const struct xd_transport_ops *xd_transport_find(const char *name)
{
	for (int i = 0; xd_transports[i]; i++)
		if (strcmp(xd_transports[i]->name, name) == 0)
			return xd_transports[i];
	return NULL;
}

const struct xd_transport_ops *xd_transport_local(const struct xd_daemon *d)
{
	for (int i = 0; d->transports[i]; i++)
		if (!d->transports[i]->network)
			return d->transports[i];
	return NULL;
}

bool xd_transport_valid(const char *name)
{
	const struct xd_transport_ops *t = xd_transport_find(name);

	return strcmp(name, XD_TRANSPORT_AUTO) == 0 || (t && t->network);
}

void xd_transport_names(char *buf, size_t len)
{
	const struct xd_transport_ops *net[8];
	int n = 0;

	/* Preferred first, as auto tries them. */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; xd_transports[i] && n < 8; i++)
			if (xd_transports[i]->network && xd_transports[i]->preferred == (pass == 0))
				net[n++] = xd_transports[i];
	buf[0] = '\0';
	for (int i = 0; i < n; i++) {
		size_t used = strlen(buf);
		snprintf(buf + used, len - used, "%s%s",
			 i == 0	    ? "" :
			 i == n - 1 ? " or " :
				      ", ",
			 net[i]->name); /* cppcheck-suppress uninitvar ; net[0..n) were set above */
	}
}
