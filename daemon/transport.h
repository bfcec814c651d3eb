/* SPDX-License-Identifier: MIT */
/*
 * The transport interface: what the transfer engine (peer.c) and the claims (claim.c) ask of a
 * way to move bytes, and what a transport tells them back. A transport is one file (or two)
 * that fills a struct xd_transport_ops with designated initialisers (rdma-core's
 * verbs_context_ops) and one line in transport.c's table; nothing outside the transport files
 * names a transport or tests which one a peer uses.
 *
 * Two kinds share the table: network transports (tcp, rdma) carry a peer set's control
 * messages and its transfers' bytes; the local transport copies between two mappings of this
 * daemon and has no peers. An entry a kind has no use for is NULL, and the table says which.
 *
 * Upward, a transport never calls the engine or the claims: it reports through two tables of
 * callbacks, the peer-set events peer.c fills (struct xd_link_events) and the transfer events
 * claim.c fills (struct xd_xfer_events), both reached through struct xd_daemon (tmux
 * proc_add_peer's dispatchcb, Wayland's wl_connection update callback).
 */
#ifndef XFERD_TRANSPORT_H
#define XFERD_TRANSPORT_H

#include "xferd.h"

struct xp_peer_hdr;
struct xd_seg;
struct xd_copy_job;
struct xd_rdma_grant;
/* A local copy ended: err 0, ECANCELED or a positive errno; @bytes copied. */
typedef void (*xd_copy_done_cb)(void *arg, int err, uint64_t bytes);

struct xd_transport_ops {
	const char *name; /**< "tcp": in metadata endpoints, listings and op.transport */
	bool network;	  /**< connects peer sets (tcp, rdma); false: this daemon only (local) */
	/* Whether auto picks this transport before others that both daemons have (rdma). */
	bool preferred;

	/* Both kinds. Starts listening / opens devices. Returns 0 or -errno. */
	int (*start)(struct xd_daemon *d);
	/* Frees everything start made; safe on a partly started daemon. */
	void (*fini)(struct xd_daemon *d);
	/* Whether this daemon can use the transport now; when not, *why (static text) says why. */
	bool (*usable)(const struct xd_daemon *d, const char **why);
	/* [{...}] of the devices behind it (list.devices), or NULL when it has none. */
	json_t *(*devices_json)(const struct xd_daemon *d);

	/* Network transports. */
	/* Opens the first connection of set @p towards @ep; HELLO follows. Returns 0 or -errno. */
	int (*connect)(struct xd_peer *p, const struct xp_endpoint *ep);
	/*
	 * Queues a control message (payload @json borrowed, may be NULL) on connection @via of
	 * @p (0: the set's first that said HELLO). Returns 0 or -errno.
	 */
	int (*send_ctrl)(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags,
			 uint64_t xfer, const json_t *json);
	/* @p's send queue (p->sendq) gained bytes: move them while the window has room. */
	void (*kick)(struct xd_peer *p);
	/* Keepalive tick: PINGs; fails @p through link events when it fell silent. */
	void (*keepalive)(struct xd_peer *p);
	/* Tears down every connection of @p (the set failed); p->tstate is freed. */
	void (*close)(struct xd_peer *p);
	/* Connections of @p that are open, and when any last received (monotonic us, 0: never). */
	int (*nconns)(const struct xd_peer *p);
	uint64_t (*last_rx_us)(const struct xd_peer *p);
	/* Whether a control message of @p still waits to be sent (shutdown waits for it). */
	bool (*pending_output)(const struct xd_peer *p);
	/*
	 * One-sided transports (rdma; NULL elsewhere): opens the peer's access to @n ranges of a
	 * claimed operation, for connection @via, read-only or write-only; fills @rkeys and *grant
	 * (closed with grant_close when the transfer ends). Returns 0 or -errno with @msg.
	 */
	int (*grant_open)(struct xd_peer *p, uint32_t via, const struct xd_seg *segs, uint32_t n,
			  bool writable, uint32_t *rkeys, struct xd_rdma_grant **grant, char *msg,
			  size_t len);
	void (*grant_close)(struct xd_rdma_grant *g);

	/* The local transport (NULL elsewhere): copies between two mappings of this daemon. */
	/*
	 * Copies the bytes of @src (@nsrc segments) into @dst (@ndst; the same total length,
	 * boundaries need not agree) off the event loop; @done(@arg, err, bytes) runs on the loop
	 * thread when it finished (err 0), was cancelled (ECANCELED) or failed. *job identifies
	 * it until then. Returns 0 or -errno (and @done is not called).
	 */
	int (*copy)(struct xd_daemon *d, const struct xd_seg *dst, uint32_t ndst,
		    const struct xd_seg *src, uint32_t nsrc, xd_copy_done_cb done, void *arg,
		    struct xd_copy_job **job);
	/* Asks @job to stop at its next slice; its @done still runs. */
	void (*copy_cancel)(struct xd_copy_job *job);
	/* Bytes @job has copied so far. */
	uint64_t (*copy_progress)(const struct xd_copy_job *job);
};

/* The transports, preferred first, NULL-terminated (transport.c). */
extern const struct xd_transport_ops *const xd_transports[];
/* The transport named @name, or NULL. */
const struct xd_transport_ops *xd_transport_find(const char *name);
/* The one transport that is not a network transport (local). */
const struct xd_transport_ops *xd_transport_local(void);

/* What a network transport reports about its peer sets (peer.c fills d->link_events). */
struct xd_link_events {
	/*
	 * An accepted connection said HELLO as @node, @epoch: the set of transport @t it joins
	 * (made if new; a new epoch of a known node replaces the old set), or NULL (no memory).
	 */
	struct xd_peer *(*attach)(struct xd_daemon *d, const struct xd_transport_ops *t,
				  const uint8_t node[XP_ID_BYTES], uint64_t epoch, const char *from);
	/* The set's first connection is through HELLO: the claims that waited may go. */
	void (*up)(struct xd_peer *p, uint64_t epoch);
	/* A connection of @p failed: the whole set fails, every transfer on it ends. */
	void (*failed)(struct xd_peer *p, int err, const char *cause);
};

/* What a transport reports about transfers and control messages (claim.c fills it). */
struct xd_xfer_events {
	/* A control message from @p on connection @via (@json NULL: empty). 0 or -EPROTO. */
	int (*ctrl)(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json);
	/*
	 * A DATA frame's header: its transfer with a reference (the payload goes there), or NULL
	 * to read and drop it; -EPROTO in *err for a frame out of range.
	 */
	struct xd_xfer *(*data_target)(struct xd_peer *p, const struct xp_peer_hdr *h, int *err);
	/* @len bytes of @x left (sent) or landed (received), counted already by xfer.c. */
	void (*data_sent)(struct xd_xfer *x);
	void (*data_received)(struct xd_xfer *x);
	/* One-sided: every request of @x is posted; one more request of @x completed. */
	void (*all_posted)(struct xd_xfer *x);
	void (*request_done)(struct xd_xfer *x);
	/* The set is up (its claims may go), gone, or at a keepalive tick. */
	void (*peer_up)(struct xd_peer *p);
	void (*peer_lost)(struct xd_peer *p, int err, const char *cause);
	void (*peer_tick)(struct xd_peer *p);
};

/* transport.c: peer-protocol frames, shared by the network transports */
/* A peer-protocol message ready to send: the 24-byte header, then the payload. */
struct xd_frame {
	STAILQ_ENTRY(xd_frame) link;
	uint32_t len;
	uint8_t data[];
};
/*
 * Builds a control message with @json (borrowed; NULL: no payload) as its payload. Returns it
 * (free() it), or NULL with -ENOMEM or -EMSGSIZE (over XP_PEER_MAX_CTRL) in *err.
 */
struct xd_frame *xd_frame_new(uint8_t type, uint8_t flags, uint64_t xfer, const json_t *json,
			      int *err);
/* The HELLO payload of this daemon (node, epoch, version), or NULL. */
json_t *xd_hello_json(const struct xd_daemon *d);
/* Checks a HELLO payload; fills @node and @epoch. Returns 0 or -EPROTO. */
int xd_hello_parse(json_t *json, uint8_t node[XP_ID_BYTES], uint64_t *epoch, int64_t *version);

#endif /* XFERD_TRANSPORT_H */
