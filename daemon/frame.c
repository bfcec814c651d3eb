// SPDX-License-Identifier: MIT
/*
 * What the network transports share: peer-protocol messages as they send them (PROTOCOL.md
 * §10), a control frame built from JSON and the HELLO every connection begins with, and the
 * report of a failed connection. Framing on the wire is each transport's own; what a message
 * means is claim.c's, what a failure means peer.c's.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transport.h"
#include "xp_peer.h"

struct xd_frame *xd_frame_new(uint8_t type, uint8_t flags, uint64_t xfer, const json_t *json,
			      int *err)
{
	char *text = json ? json_dumps(json, JSON_COMPACT) : NULL;
	size_t len = text ? strlen(text) : 0;
	struct xp_peer_hdr h = {
		.type = type, .flags = flags, .length = (uint32_t)len, .xfer = xfer
	};
	struct xd_frame *f = NULL;

	*err = (json && !text) ? -ENOMEM : len > XP_PEER_MAX_CTRL ? -EMSGSIZE : 0;
	if (*err == 0 && !(f = malloc(sizeof(*f) + XP_PEER_HDR_LEN + len)))
		*err = -ENOMEM;
	if (f) {
		f->len = XP_PEER_HDR_LEN + (uint32_t)len;
		xp_peer_hdr_pack(&h, f->data);
		memcpy(f->data + XP_PEER_HDR_LEN, text ? text : "", len);
	}
	free(text);
	return f;
}

json_t *xd_hello_json(const struct xd_daemon *d)
{
	return json_pack("{s:i, s:s, s:I}", "version", XP_PEER_VERSION, "node", d->node_hex,
			 "epoch", (json_int_t)d->epoch);
}

int xd_hello_parse(json_t *json, uint8_t node[XP_ID_BYTES], uint64_t *epoch, int64_t *version)
{
	const char *node_hex;
	json_int_t v, e;

	if (!json ||
	    json_unpack(json, "{s:I, s:s, s:I}", "version", &v, "node", &node_hex, "epoch", &e) ||
	    xp_hex_decode(node_hex, node, XP_ID_BYTES) || e < 0)
		return -EPROTO;
	*epoch = (uint64_t)e;
	*version = v;
	return 0;
}

void xd_link_fail(struct xd_peer *p, int err, const char *fmt, ...)
{
	char cause[XD_CAUSE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	p->d->link_events->failed(p, err, cause);
}
