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
	size_t len = 0;
	char *text = json ? xp_json_dumps(json, XP_PEER_MAX_CTRL, &len) : NULL;

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

struct xd_frame *xd_frame_bin(uint8_t type, uint8_t flags, uint64_t xfer, const uint8_t *buf,
			      uint32_t len, int *err)
{
	struct xp_peer_hdr h = { .type = type, .flags = flags, .length = len, .xfer = xfer };
	struct xd_frame *f = len <= XP_PEER_MAX_CTRL ? malloc(sizeof(*f) + XP_PEER_HDR_LEN + len) :
						       NULL;

	*err = len > XP_PEER_MAX_CTRL ? -EMSGSIZE : f ? 0 : -ENOMEM;
	if (f) {
		f->len = XP_PEER_HDR_LEN + len;
		xp_peer_hdr_pack(&h, f->data);
		if (len)
			memcpy(f->data + XP_PEER_HDR_LEN, buf, len);
	}
	return f;
}

json_t *xd_hello_json(const struct xd_daemon *d, const uint8_t *nonce)
{
	char hex[2 * XD_NONCE_LEN + 1];
	/*
	 * (binary_pairing, read_ok_in_data: older peers ignore keys they do not know, and so send
	 * JSON and every CLAIM_OK)
	 */
	json_t *o = json_pack("{s:i, s:s, s:I, s:b, s:b}", "version", XP_PEER_VERSION, "node",
			      d->node_hex, "epoch", (json_int_t)d->epoch, "binary_pairing", 1,
			      "read_ok_in_data", 1);

	if (o && nonce) {
		xp_hex_encode(nonce, XD_NONCE_LEN, hex);
		if (json_object_set_new(o, "nonce", json_string(hex))) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

int xd_hello_parse(json_t *json, struct xd_hello *h)
{
	const char *node_hex, *nonce = NULL;
	json_int_t v, e;
	int binary = 0, read_ok_in_data = 0;

	if (!json ||
	    json_unpack(json, "{s:I, s:s, s:I, s?s, s?b, s?b}", "version", &v, "node", &node_hex,
			"epoch", &e, "nonce", &nonce, "binary_pairing", &binary, "read_ok_in_data",
			&read_ok_in_data) ||
	    xp_hex_decode(node_hex, h->node, XP_ID_BYTES) || e < 0 ||
	    (nonce && xp_hex_decode(nonce, h->nonce, XD_NONCE_LEN)))
		return -EPROTO;
	h->epoch = (uint64_t)e;
	h->version = v;
	h->has_nonce = nonce != NULL;
	h->binary_pairing = binary;
	h->read_ok_in_data = read_ok_in_data;
	return 0;
}

/* A node id and epoch as MAC parts: 16 bytes, then 8 bytes little-endian. */
struct mac_ident {
	uint8_t node[XP_ID_BYTES];
	uint8_t epoch[8];
};

static void ident_fill(struct mac_ident *id, const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	memcpy(id->node, node, XP_ID_BYTES);
	for (int i = 0; i < 8; i++)
		id->epoch[i] = (uint8_t)(epoch >> (8 * i));
}

/* The MAC under @k of an AUTH whose sender is (@from, @from_nonce), receiver (@to, @challenge). */
static int auth_mac(const struct xd_key *k, bool from_connector, const struct mac_ident *from,
		    const struct mac_ident *to, const uint8_t challenge[XD_NONCE_LEN],
		    const uint8_t from_nonce[XD_NONCE_LEN], uint8_t out[XD_MAC_LEN])
{
	static const char label[] = "xferd-auth-v1";
	const uint8_t role = from_connector ? 'C' : 'A';
	const struct xd_mac_part parts[] = {
		{ label, sizeof(label) },    { &role, 1 },
		{ from, sizeof(*from) },     { to, sizeof(*to) },
		{ challenge, XD_NONCE_LEN }, { from_nonce, XD_NONCE_LEN },
	};

	return xd_hmac(k->bytes, k->len, parts, 6, out);
}

int xd_auth_mac_out(const struct xd_daemon *d, bool connector, const struct xd_hello *peer,
		    const uint8_t my_nonce[XD_NONCE_LEN], uint8_t out[XD_MAC_LEN])
{
	struct mac_ident me, them;

	if (d->keys.n == 0)
		return -EIO;
	ident_fill(&me, d->node, d->epoch);
	ident_fill(&them, peer->node, peer->epoch);
	return auth_mac(&d->keys.keys[0], connector, &me, &them, peer->nonce, my_nonce, out);
}

int xd_auth_check(const struct xd_daemon *d, bool connector, const struct xd_hello *peer,
		  const uint8_t my_nonce[XD_NONCE_LEN], const uint8_t mac[XD_MAC_LEN],
		  uint32_t *key_id)
{
	struct mac_ident me, them;
	uint8_t want[XD_MAC_LEN];

	ident_fill(&me, d->node, d->epoch);
	ident_fill(&them, peer->node, peer->epoch);
	/* The peer proves with the first key of its file: any of ours (a key being rolled). */
	for (int i = 0; i < d->keys.n; i++) {
		/* The peer is the other role: a MAC reflected back at its maker does not pass. */
		if (auth_mac(&d->keys.keys[i], !connector, &them, &me, my_nonce, peer->nonce,
			     want) < 0)
			return -EIO;
		if (xd_mac_equal(want, mac)) {
			*key_id = d->keys.keys[i].id;
			return 0;
		}
	}
	return -EACCES;
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

void xd_link_key_proven(struct xd_peer *p, uint32_t key_id)
{
	for (int i = 0; i < p->nkey_ids; i++)
		if (p->key_ids[i] == key_id)
			return;
	if (p->nkey_ids == XD_KEYS_MAX) { /* (keys rolled more often than the set lived) */
		memmove(p->key_ids, p->key_ids + 1, sizeof(p->key_ids[0]) * (XD_KEYS_MAX - 1));
		p->nkey_ids--;
	}
	p->key_ids[p->nkey_ids++] = key_id;
}

bool xd_link_silent(struct xd_peer *p, uint64_t last_rx_us, uint64_t now)
{
	uint64_t silent_ms = (now - last_rx_us) / 1000;

	if (silent_ms <= p->d->cfg.keepalive_timeout_ms)
		return false;
	xd_link_fail(p, ETIMEDOUT,
		     "nothing heard from the peer for %llu ms (keepalive_timeout_ms %llu)",
		     (unsigned long long)silent_ms,
		     (unsigned long long)p->d->cfg.keepalive_timeout_ms);
	return true;
}
