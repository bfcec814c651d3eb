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

#include <string.h>
#include "xferd.h"

struct xp_peer_hdr;
struct xd_seg;
struct xd_copy_job;
struct xd_rdma_grant;
struct xd_wnote;
/*
 * A local copy ended: err 0, ECANCELED or a positive errno; @bytes copied; @why NULL or a cause
 * for @err (EFAULT: which region's page vanished).
 */
typedef void (*xd_copy_done_cb)(void *arg, int err, uint64_t bytes, const char *why);

struct xd_transport_ops {
	const char *name; /**< "tcp": in metadata endpoints, listings and op.transport */
	bool network;	  /**< connects peer sets (tcp, rdma); false: this daemon only (local) */
	/* Whether auto picks this transport before others that both daemons have (rdma). */
	bool preferred;
	/*
	 * Whether the active side alone moves the bytes, reading or writing the owner's memory with
	 * keys the owner grants per claim (grant_open); else both sides send and receive frames.
	 */
	bool one_sided;
	/*
	 * Two-sided: whether its pairings may take the short end (PROTOCOL.md §10.3, "quick_end"
	 * in CLAIM and CLAIM_OK: one last message instead of DONE and DONE_ACK). Else the long
	 * exchange, which every daemon understands.
	 */
	bool quick_end;
	/*
	 * Whether its handshake proves the cluster key (PROTOCOL.md §10.2). A keyed daemon uses a
	 * network transport that does not only under --insecure-peers.
	 */
	bool authenticates;

	/* Both kinds. Starts listening / opens devices. Returns 0 or -errno. */
	int (*start)(struct xd_daemon *d);
	/* Frees everything start made; safe on a partly started daemon. */
	void (*fini)(struct xd_daemon *d);
	/* Whether this daemon can use the transport now; when not, *why (static text) says why. */
	bool (*usable)(const struct xd_daemon *d, const char **why);
	/* Its part of the list.devices result ({"rdma": ..., "devices": [...]}); NULL entry: none. */
	json_t *(*devices_json)(const struct xd_daemon *d);
	/*
	 * Transports that register memory with a device (rdma; NULL elsewhere): registers @r's
	 * range (Returns 0 or -errno with the cause in @msg), drops every registration of @r
	 * (idempotent), and describes them for list.regions.
	 */
	int (*register_region)(struct xd_daemon *d, struct xd_region *r, char *msg, size_t len);
	void (*deregister_region)(struct xd_region *r);
	json_t *(*region_json)(const struct xd_daemon *d, const struct xd_region *r);
	/*
	 * Whether registering @len bytes takes long enough to stall the event loop (pinning every
	 * page on every device): region.c then registers on a worker. NULL: never.
	 */
	bool (*register_blocks)(const struct xd_daemon *d, uint64_t len);

	/* Network transports. */
	/* Opens the first connection of set @p towards @ep; HELLO follows. Returns 0 or -errno. */
	int (*connect)(struct xd_peer *p, const struct xp_endpoint *ep);
	/*
	 * Queues a control message (payload @json borrowed, may be NULL) on connection @via of
	 * @p (0: the set's first that said HELLO). Returns 0 or -errno.
	 */
	int (*send_ctrl)(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags,
			 uint64_t xfer, const json_t *json);
	/*
	 * The same with a binary payload (PROTOCOL.md §10.8: @len bytes of @buf, copied); NULL for
	 * a transport that sends none. Returns 0 or -errno.
	 */
	int (*send_bin)(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
			const uint8_t *buf, uint32_t len);
	/* @p's send queue (p->sendq) gained bytes: move them while the window has room. */
	void (*kick)(struct xd_peer *p);
	/*
	 * Writes @p's queued control messages now rather than at the end of the loop turn, where
	 * the socket takes them and nothing else is under way on it; NULL: the transport sends
	 * them at once anyway. Failures are left to the transport's own callbacks.
	 */
	void (*flush_ctrl)(struct xd_peer *p);
	/* Keepalive tick: PINGs; fails @p through link events when it fell silent. */
	void (*keepalive)(struct xd_peer *p);
	/* Tears down every connection of @p (the set failed); p->tstate is freed. */
	void (*close)(struct xd_peer *p);
	/* Connections of @p that are open, and when any last received (monotonic us, 0: never). */
	int (*nconns)(const struct xd_peer *p);
	uint64_t (*last_rx_us)(const struct xd_peer *p);
	/*
	 * Transports whose connections are kernel sockets (tcp; NULL elsewhere, and list.peers
	 * then has no "conns"): one object per connection of @p, with what the kernel says of it
	 * now (PROTOCOL.md §7), or NULL when out of memory.
	 */
	json_t *(*conns_json)(const struct xd_peer *p);
	/* Whether a control message of @p still waits to be sent (shutdown waits for it). */
	bool (*pending_output)(const struct xd_peer *p);
	/*
	 * Since when (monotonic us) the peer has taken none of some connection's bytes: the
	 * oldest last write of @p's connections that have bytes waiting to go; 0 when none has
	 * any. NULL: the transport cannot tell (a drained transfer is then timed by its own bytes).
	 */
	uint64_t (*tx_stalled_since)(const struct xd_peer *p);
	/*
	 * One-sided transports (rdma; NULL elsewhere): opens the peer's access to @n ranges (of a
	 * claimed operation, or of a window for one opener), for connection @via, with @access
	 * (XP_ACCESS_READ and/or XP_ACCESS_WRITE); fills @rkeys and *grant (closed with
	 * grant_close when the transfer ends or the opener let go; NULL: the device has no memory
	 * windows and the rkeys are the regions' own). Returns 0 or -errno with @msg.
	 */
	int (*grant_open)(struct xd_peer *p, uint32_t via, const struct xd_seg *segs, uint32_t n,
			  int access, uint32_t *rkeys, struct xd_rdma_grant **grant, char *msg,
			  size_t len);
	void (*grant_close)(struct xd_rdma_grant *g);
	/*
	 * Two-sided network transports with one-sided windows (tcp; NULL elsewhere, where gets
	 * and puts go as claims): queues a window frame (PROTOCOL.md §10.7), the @hdrlen bytes of
	 * @hdr (its 24-byte header first) and then @len bytes of @x at transfer offset @off (@x
	 * NULL: none; a reference is taken). Frames of one *@lane go out in the order queued, on
	 * one connection: 0 picks one (spread by @key) and sets it. A frame of an @x with wdrop
	 * set is dropped unsent. Returns 0, or -ENOBUFS (XD_WFRAMES_MAX queued on that connection)
	 * or -ENOTCONN.
	 */
	int (*send_wframe)(struct xd_peer *p, uint32_t *lane, uint64_t key, const uint8_t *hdr,
			   uint32_t hdrlen, struct xd_xfer *x, uint64_t off, uint32_t len);
	/*
	 * One-sided transports: transfer @x (x->stage_local or stage_remote) ended here: its staging
	 * chunks stop, windows onto them are revoked, buffers go back once no request or worker
	 * holds them.
	 */
	void (*stage_close)(struct xd_xfer *x);
	/*
	 * One-sided transports with a control connection per set (rdma; NULL elsewhere: @via):
	 * the connection a claim that came on @via moves its data on, where the owner binds its
	 * keys and answers (CLAIM_OK, WOPEN_OK) so that they stay behind the binds.
	 */
	uint32_t (*data_via)(struct xd_peer *p, uint32_t via);

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

/* transport.c: the table of transports */
/* Every transport, in start order (local, tcp, rdma), NULL-terminated. */
extern const struct xd_transport_ops *const xd_transports[];
/* The transport named @name, or NULL. */
const struct xd_transport_ops *xd_transport_find(const char *name);
/* The one transport of @d's table (d->transports) that is not a network transport (local). */
const struct xd_transport_ops *xd_transport_local(const struct xd_daemon *d);
/* Whether @name is "auto" or a network transport's. */
bool xd_transport_valid(const char *name);
/* "rdma or tcp": the network transports, preferred first. */
void xd_transport_names(char *buf, size_t len);

/*
 * The index of the transport named @name in d->transports plus one, for the counters of
 * xferd.h (0: none or unknown, as for an op that never started).
 */
static inline int xd_metric_transport(const struct xd_daemon *d, const char *name)
{
	for (int i = 0; d->transports[i] && i + 1 < XD_METRIC_TRANSPORTS; i++)
		if (strcmp(d->transports[i]->name, name) == 0)
			return i + 1;
	return 0;
}

/* local.c: memcpy between two mappings of this daemon, on worker threads */
extern const struct xd_transport_ops xd_transport_local_ops;
/*
 * The local transport's workers for another transport (RDMA staging): copies @src's segments
 * into @dst's (either may be a file or a staging buffer) off the loop, on the staging lane's
 * workers (SCHED_IDLE: every other runnable thread goes first), without the fdatasync a local
 * copy ends with; @done runs on the loop thread. Returns 0 or -errno (ECANCELED: the
 * workers are stopped), and @done is not called then.
 */
int xd_copy_submit(struct xd_daemon *d, const struct xd_seg *dst, uint32_t ndst,
		   const struct xd_seg *src, uint32_t nsrc, xd_copy_done_cb done, void *arg);
/*
 * Runs @work(@arg) on one of the local transport's workers, then @done(@arg) on the loop
 * thread: for work that may block (file I/O), which must not run on the loop (DESIGN §7).
 * @may_hang: it touches a file whose file system may never answer (xd_xfer_may_hang()); it
 * runs on workers of their own then. Returns 0 or -errno (ECANCELED: the workers are stopped,
 * or there are none), and neither function is called then.
 */
int xd_work_submit(struct xd_daemon *d, void (*work)(void *arg), void (*done)(void *arg), void *arg,
		   bool may_hang);
/* tcp.c: frames over TCP connections, DATA straight to and from the mappings */
extern const struct xd_transport_ops xd_transport_tcp_ops;
/* tcp_info.c: what the kernel says of a peer connection's TCP, for list.peers */
/*
 * Adds "tcp" to @o: socket @fd's congestion control, state and tcp_info numbers (PROTOCOL.md
 * §7), read now; or "tcp_error" with the cause when getsockopt fails. Returns 0 or -1 (no
 * memory).
 */
int xd_tcp_info_add(json_t *o, int fd);
/* rdma_conn.c: rdma_cm connections, SEND/RECV control, one-sided READ/WRITE (rdma.h) */
extern const struct xd_transport_ops xd_transport_rdma_ops;

/* What a network transport reports about its peer sets (peer.c fills d->link_events). */
struct xd_link_events {
	/*
	 * An accepted connection said HELLO as @node, @epoch: the set of transport @t it joins
	 * (made if new; a new epoch of a known node replaces the old set), or NULL (no memory).
	 */
	struct xd_peer *(*attach)(struct xd_daemon *d, const struct xd_transport_ops *t,
				  const uint8_t node[XP_ID_BYTES], uint64_t epoch,
				  const char *from);
	/* The set's first connection is through HELLO: the claims that waited may go. */
	void (*up)(struct xd_peer *p, uint64_t epoch);
	/* A connection of @p failed: the whole set fails, every transfer on it ends. */
	void (*failed)(struct xd_peer *p, int err, const char *cause);
};

/* What a transport reports about transfers and control messages (claim.c fills it). */
struct xd_xfer_events {
	/* A control message from @p on connection @via (@json NULL: empty). 0 or -EPROTO. */
	int (*ctrl)(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json);
	/* A binary pairing frame (XP_PEER_BINARY, PROTOCOL.md §10.8; its length checked by
	 * xp_peer_hdr_valid()): @len bytes at @payload. 0 or -EPROTO. */
	int (*ctrl_bin)(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
			const uint8_t *payload, uint32_t len);
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
	/* A region of @x failed (x->io_err, x->io_why): its operation ends ERRORED. */
	void (*io_failed)(struct xd_xfer *x);
	/* The worker that wrote bytes of @x is through (xd_xfer_landed()): a held end applies. */
	void (*landed)(struct xd_xfer *x);
	/* The set is up (its claims may go), gone, or at a keepalive tick. */
	void (*peer_up)(struct xd_peer *p);
	void (*peer_lost)(struct xd_peer *p, int err, const char *cause);
	void (*peer_tick)(struct xd_peer *p);
	/*
	 * Window frames (PROTOCOL.md §10.7), on connection @via. A WPUT's header and prefix and
	 * tag (@meta, @metalen): where its payload lands (a transfer with a reference; NULL: read
	 * and drop it), or -EPROTO in *err. WGET and WACK (@payload raw, @len bytes): 0 or -errno.
	 */
	struct xd_xfer *(*wput_target)(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
				       const uint8_t *meta, uint32_t metalen, int *err);
	int (*wframe)(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
		      const uint8_t *payload, uint32_t len);
};

/* frame.c: peer-protocol frames, shared by the network transports */
/*
 * Bounds every network transport keeps: connections from one address still before their
 * handshake (HELLO on TCP, AUTH on RDMA), and control bytes queued on one connection (frame
 * headers included) before it is failed as a peer that does not take what it asked for.
 */
#define XD_PENDING_PER_ADDR 8
#define XD_PEER_CTRLQ_MAX (1u << 20)
/* Window frames (send_wframe) queued on one connection, at most. */
#define XD_WFRAMES_MAX 16384
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
/* The same with the @len bytes of @buf (copied) as its payload. */
struct xd_frame *xd_frame_bin(uint8_t type, uint8_t flags, uint64_t xfer, const uint8_t *buf,
			      uint32_t len, int *err);
/* What a peer's HELLO says. */
struct xd_hello {
	uint8_t node[XP_ID_BYTES];
	uint64_t epoch;
	int64_t version;
	bool has_nonce;	      /**< it offers authentication (it has the cluster key) */
	bool binary_pairing;  /**< it takes the binary pairing frames (PROTOCOL.md §10.8) */
	bool read_ok_in_data; /**< a read's first DATA may stand for its CLAIM_OK (§10.8) */
	uint8_t nonce[XD_NONCE_LEN];
};
/* This daemon's HELLO payload, with @nonce (NULL: none, no key), or NULL. */
json_t *xd_hello_json(const struct xd_daemon *d, const uint8_t *nonce);
/* Checks a HELLO payload into @h. Returns 0 or -EPROTO. */
int xd_hello_parse(json_t *json, struct xd_hello *h);
/*
 * The MAC of an AUTH message (PROTOCOL.md §10.2): under the cluster key, the sender's role
 * (connector or acceptor), both nodes and epochs, the receiver's nonce (the challenge) and the
 * sender's. xd_auth_mac_out() is what this daemon sends on a connection where it is
 * @connector, under the first of its keys; xd_auth_check() verifies what @peer sent there
 * against our @my_nonce under each of them, and names the one it matched in *@key_id. Return
 * 0, or -EIO (no MAC could be made) / -EACCES (it does not match).
 */
int xd_auth_mac_out(const struct xd_daemon *d, bool connector, const struct xd_hello *peer,
		    const uint8_t my_nonce[XD_NONCE_LEN], uint8_t out[XD_MAC_LEN]);
int xd_auth_check(const struct xd_daemon *d, bool connector, const struct xd_hello *peer,
		  const uint8_t my_nonce[XD_NONCE_LEN], const uint8_t mac[XD_MAC_LEN],
		  uint32_t *key_id);
/*
 * Keepalive: fails set @p (ETIMEDOUT, naming keepalive_timeout_ms) when a connection last
 * received at @last_rx_us has been silent too long at @now. Returns whether it did.
 */
bool xd_link_silent(struct xd_peer *p, uint64_t last_rx_us, uint64_t now);
/*
 * A connection of set @p proved the cluster key @key_id (one of this daemon's keys): kept in
 * p->key_ids for listings and for xd_peers_key_check().
 */
void xd_link_key_proven(struct xd_peer *p, uint32_t key_id);
/* Reports that a connection of set @p failed (the whole set fails: d->link_events). */
void xd_link_fail(struct xd_peer *p, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* xfer.c: one cross-node transfer's bytes, as every network transport moves them */
/* One range of the owner's buffer, as CLAIM_OK gives it to a one-sided claimer. */
struct xd_rseg {
	uint64_t addr, len;
	uint32_t rkey;
};
/*
 * A transfer as this daemon sees it. claim.c makes it and decides what it means (claim, DONE,
 * CANCEL); transports move its bytes through xfer.c. It holds references on the regions its
 * bytes come from or go to, so a frame already begun can finish when its operation ended.
 */
struct xd_xfer {
	TAILQ_ENTRY(xd_xfer) link;	/**< in peer->xfers */
	struct xd_idnode idnode;	/**< in peer->xfer_ids[active] while in peer->xfers */
	TAILQ_ENTRY(xd_xfer) send_link; /**< in its peer's send queue while queued */
	bool queued;
	struct xd_peer *peer;
	uint64_t id;	     /**< the active side's op id */
	bool active;	     /**< this daemon claimed (op.read / op.write) */
	bool source;	     /**< this daemon's buffer is where the bytes come from */
	bool one_sided;	     /**< moved by the active side alone (RDMA READ/WRITE) */
	struct xd_op *op;    /**< NULL once the operation ended */
	struct xd_seg *segs; /**< a copy; each holds a region reference */
	uint32_t nsegs;
	uint64_t length;
	uint64_t next_off; /**< next byte to cut into a chunk */
	uint64_t sent, received;
	int refs; /**< its peer set's list's own, plus frames and requests under way */
	/*
	 * One-sided: the connection that carries the transfer, the one the owner received the
	 * CLAIM on and answered it on. Its windows are bound to that queue pair, and DONE must
	 * follow the data on the same one, so data, DONE and release all go there (0 until
	 * CLAIM_OK).
	 */
	uint32_t via;
	unsigned requests_out; /**< one-sided, active: requests posted, not yet completed */
	struct xd_rseg *rsegs; /**< one-sided, active side: the owner's ranges from CLAIM_OK */
	uint32_t nrsegs;
	struct xd_rdma_grant *grant; /**< one-sided, owner: the claimer's windows onto our ranges */
	/*
	 * One-sided, active: a get or put with its handle's own key (PROTOCOL.md §10.6): no claim,
	 * no DONE; it holds the key (window.c) until no request of it is out (@key_held).
	 */
	bool direct, key_held;
	uint64_t handle;
	/*
	 * A region of the transfer failed under it (a file truncated, ENOSPC): the frame under
	 * way is finished with zeros (sent) or dropped (received), and the operation ends ERRORED
	 * with this cause once it is (xd_xfer_io_failed()).
	 */
	int io_err;
	bool io_told;
	bool synced; /**< target files asked to be fdatasynced: done (the end may follow) */
	/*
	 * One-sided with a file region (RDMA staging, rdma_conn.c): this side's bytes pass through
	 * its staging buffers, a chunk at a time (stage_local: a segment of this side is a file);
	 * the owner's do (stage_remote, active side: CLAIM_OK said "staged", and the owner grants
	 * one chunk of its buffers at a time by STAGE). The counts are the transport's.
	 */
	bool stage_local, stage_remote;
	unsigned stage_chunks;	 /**< chunks alive (each holds a reference) */
	unsigned stage_unposted; /**< active: chunks whose requests are not all posted yet */
	bool stage_all_posted;	 /**< active source: all_posted told */
	uint64_t stage_granted;	 /**< owner: bytes granted by STAGE so far, in order */
	uint32_t stage_max;  /**< owner: the claimer's staging size, its largest chunk (0: any) */
	unsigned stage_held; /**< active: the owner's chunks granted, not yet told STAGED */
	char io_why[XD_CAUSE_MAX];
	/* claim.c's state of the exchange (PROTOCOL.md §10.3-10.5) */
	bool claim_sent, done_rx;
	/*
	 * active: the owner's DONE_ACK came while frames of the bytes were still counted out. An
	 * honest owner sends it only once every byte arrived, but a file's frames are counted by
	 * the file lane's worker after the peer may have them (tcp.c lane_done()): the ack applies
	 * once they are out. So does a reader's DONE at the owner (done_rx, maybe_complete_passive()).
	 */
	bool ack_rx;
	bool ok_rx; /**< active: CLAIM_OK arrived (DATA may come before it, on another connection) */
	bool ok_in_data; /**< active: its CLAIM asked for the first DATA as its CLAIM_OK (§10.8) */
	bool file_rx;	 /**< counted in its peer's file_receivers (claim.c) */
	/*
	 * The short end (PROTOCOL.md §10.3), agreed in CLAIM and CLAIM_OK on two-sided transports:
	 * the side that receives the bytes completes once they all arrived and sends the one last
	 * message (the reader's DONE, the owner's DONE_ACK); the side that sends them is committed
	 * once its last byte is out, and an end asked then waits for that message (commit_wait).
	 */
	bool quick, committed, commit_wait;
	uint64_t commit_since_us; /**< when an end was asked of a committed transfer */
	/*
	 * One-sided keys outlive an operation's end until the active side has no request left on
	 * them: the owner keeps an ended transfer draining (its registrations held) until the
	 * active side's CANCEL, which that side sends only once its last request completed.
	 */
	bool draining;		 /**< owner: ended here, waiting for the active side's release */
	uint64_t drain_since_us; /**< owner: when draining began */
	/*
	 * Two-sided: frames of its bytes (DATA, an opener's WPUTs) were under way or queued when
	 * an end was asked. They read the client's buffer as they go, so the end (which frees the
	 * client to reuse it) waits until they are out (tx_drain, since the last one's progress
	 * drain_since_us), at most keepalive_timeout_ms between frames (claim.c).
	 */
	bool tx_drain;
	/*
	 * Two-sided receiver: a worker writes bytes of it into the client's buffer now (tcp.c's
	 * file lane, xd_xfer_landing()). An end asked meanwhile is told once that worker is
	 * through (xd_xfer_landed()), never while bytes may still land: @land_op is the op whose
	 * end waits (claim.c), kept past the transfer's close when the end closed it at once.
	 */
	bool landing;
	struct xd_op *land_op;
	bool release_pending, release_sent;
	int release_cause_errno;
	char release_msg[XD_CAUSE_MAX];
	/*
	 * One-sided TCP windows (window.c, PROTOCOL.md §10.7): an opener's get or put, or at the
	 * owner a put's landing or a get's reply, none of which has an op at the owner. @on_free
	 * runs when the last reference goes (window.c's accounting; NULL: none), @wctx is its.
	 */
	bool wfast;
	bool wdrop;	/**< owner: revoked, its frames dropped and its bytes not taken */
	bool wput_end;	/**< owner: the frame that ends a put (LAST, not PIECE): counted once */
	uint32_t wlane; /**< owner: the connection a put's frame came on (its WACK goes there) */
	/* opener's put: the connections its WPUTs went on, and its last one's number on each */
	uint8_t nwl;
	uint32_t wl_lane[XD_WSTRIPE_LANES];
	uint64_t wl_seq[XD_WSTRIPE_LANES];
	void *wctx;
	struct xd_wnote *wnote;
	TAILQ_ENTRY(xd_xfer) wlink;
	void (*on_free)(struct xd_xfer *x);
	/* active side: what the owner's metadata said, for the CLAIM */
	uint8_t owner_node[XP_ID_BYTES];
	uint64_t owner_op, owner_epoch;
	enum xp_kind meta_kind;
};
void xd_xfer_ref(struct xd_xfer *x);
/* Drops a reference; the last frees @x and its region references. Accepts NULL. */
void xd_xfer_unref(struct xd_xfer *x);
/* @p's transfer @id of this daemon's @active side, or NULL (ended, or never known). */
struct xd_xfer *xd_xfer_find(struct xd_peer *p, uint64_t id, bool active);
/* Whether the transfer's operation is still there to send or receive bytes. */
bool xd_xfer_live(const struct xd_xfer *x);
/* Bytes moved so far for this daemon's side. */
uint64_t xd_xfer_bytes(const struct xd_xfer *x);
/* Whether @x has bytes not yet cut into chunks. */
bool xd_xfer_has_more(const struct xd_xfer *x);
/* Queues @x on @q if it has bytes left / takes it off. */
void xd_xfer_sendq_insert(struct xd_xfer_list *q, struct xd_xfer *x);
void xd_xfer_sendq_remove(struct xd_xfer_list *q, struct xd_xfer *x);
/*
 * The next transfer to cut a chunk of, moved to the back of the queue; NULL if none. @via (not
 * 0) takes only transfers bound to that connection.
 */
struct xd_xfer *xd_xfer_sendq_next(struct xd_xfer_list *q, uint32_t via);
/* Takes the next chunk of @x to send: returns its length (0: nothing left) and its header. */
uint32_t xd_xfer_next_chunk(struct xd_xfer *x, uint32_t max, uint64_t *off, uint64_t *xfer,
			    uint8_t *flags);
/* Marks @len more bytes cut (one-sided transports cut their own pieces). */
void xd_xfer_advance(struct xd_xfer *x, uint64_t len);
/* The segments of @x over [@off, +@len) into @out (at most @max). Returns the count. */
uint32_t xd_xfer_slice(const struct xd_xfer *x, uint64_t off, uint64_t len, struct xd_seg *out,
		       uint32_t max);
#define XD_XFER_IOV_MAX 64 /* iovecs xd_xfer_iov() fills at most per call */
/* Fills up to @max (at most XD_XFER_IOV_MAX) iovecs for @len bytes at transfer offset @off of
 * a mapped transfer. Returns the count. */
int xd_xfer_iov(const struct xd_xfer *x, uint64_t off, uint64_t len, struct iovec *iov, int max);
/* Whether every byte of @x is in a mapping (else some segment is a file: xd_xfer_send/recv). */
bool xd_xfer_mapped(const struct xd_xfer *x);
/* Whether a file of @x is on a file system that may never answer (region.c's fs_local). */
bool xd_xfer_may_hang(const struct xd_xfer *x);
/*
 * Moves at most @len bytes at transfer offset @off between @x's regions and socket @sock,
 * whatever their kinds (struct xd_mem_ops: same returns). A region's failure is recorded in
 * x->io_err; from then on send writes zeros and recv drops into @scratch (@scratchlen), so
 * that the frame under way stays whole.
 */
ssize_t xd_xfer_send(struct xd_xfer *x, uint64_t off, uint64_t len, int sock);
/*
 * Whether xd_xfer_send(@x, @off, @len, ...) would move its bytes without waiting for a disk:
 * mapped memory, or file pages all in the page cache (mem ops send_cached).
 */
bool xd_xfer_send_cached(const struct xd_xfer *x, uint64_t off, uint64_t len);
ssize_t xd_xfer_recv(struct xd_xfer *x, uint64_t off, uint64_t len, int sock, const int pipefd[2],
		     void *scratch, size_t scratchlen);
/* The frame in which x->io_err arose is finished: tells claim.c once (the op ends ERRORED). */
void xd_xfer_io_failed(struct xd_xfer *x);
/* @len bytes of @x were sent / received: counts them and tells claim.c. */
void xd_xfer_data_sent(struct xd_xfer *x, uint32_t len);
void xd_xfer_data_received(struct xd_xfer *x, uint32_t len);
/*
 * A worker starts writing bytes of @x into its buffer (no end of its op is told until then),
 * and is through. @d: x->peer may be gone by then (the set failed while the worker ran).
 */
void xd_xfer_landing(struct xd_xfer *x);
void xd_xfer_landed(struct xd_daemon *d, struct xd_xfer *x);
/*
 * One-sided transports: a request of @x was posted / completed (the owner's keys stay until
 * none is out), and every request of @x is posted.
 */
void xd_xfer_request_posted(struct xd_xfer *x);
void xd_xfer_request_done(struct xd_xfer *x);
void xd_xfer_all_posted(struct xd_xfer *x);

/*
 * mem.c: memory kinds (DESIGN §4). What a region is backed by decides how its bytes are
 * reached; transports ask the region's table for "bytes [off, +len) into this socket" and
 * never test the kind. A memfd is mapped; a file is never mapped (someone may truncate it
 * under the daemon) and moves by sendfile/splice/pread/pwrite.
 *
 * send and recv move at most @len bytes at region offset @off between the region and the
 * non-blocking socket @sock. They return bytes moved (> 0), -EAGAIN when the socket has no
 * room or no bytes, -ECONNRESET at its end, or another -errno of the socket. A failure of the
 * region's side (a file shorter than its region, ENOSPC, EIO) returns the bytes moved before
 * it (recv: taken from the socket and dropped) with a positive errno in *err and the cause in
 * @why.
 */
struct xd_mem_ops {
	const char *name; /**< "memfd", "file": in listings */
	bool mapped;	  /**< its bytes are at r->base; else reached by file I/O only */
	ssize_t (*send)(const struct xd_region *r, uint64_t off, size_t len, int sock, int *err,
			char *why, size_t whylen);
	/* @pipefd: a non-blocking pipe, empty, that recv may splice through (file kind). */
	ssize_t (*recv)(const struct xd_region *r, uint64_t off, size_t len, int sock,
			const int pipefd[2], int *err, char *why, size_t whylen);
	/* Lets go of what the registration holds (the mapping, the file). */
	void (*release)(struct xd_region *r);
	/*
	 * Whether send of [@off, +@len) would not wait for a disk (a file's pages all cached).
	 * NULL: it may always wait (tcp.c then moves the bytes on a worker, its file lane).
	 */
	bool (*send_cached)(const struct xd_region *r, uint64_t off, size_t len);
};
/*
 * xd_mem_staging: a daemon buffer (an RDMA staging buffer) seen as a region, so that the local
 * copy workers move a chunk between it and a transfer's segments of any kind; never sent or
 * received on a socket (send, recv NULL).
 */
extern const struct xd_mem_ops xd_mem_memfd, xd_mem_file, xd_mem_file_direct, xd_mem_staging;
/*
 * Closes @fd on a thread of its own (detached; at most 32 such threads, later fds wait for one
 * of them): on FUSE each close sends the file system a FLUSH and waits for its answer, which a
 * hung one never gives. Returns 0, or -errno when neither a thread nor a place in the queue
 * could be had (it was closed here then).
 */
int xd_mem_close_later(int fd);
/*
 * Closes an fd a client sent (any kind: the loop must not wait in its close): at once if it is
 * a memfd, a pipe or a socket, else as xd_mem_close_later(). A negative @fd is ignored.
 */
int xd_close_client_fd(int fd);
/*
 * For a file region about to be registered over @fd at [@off, +@len): whether @fd is O_DIRECT
 * and, if so, whether that range can be served (its file system reports direct I/O alignment
 * by statx, and @off and @len are multiples of it). Fills @r's dio_align and dio_mem_align.
 * Returns 0 (buffered), 1 (O_DIRECT, served) or -errno with the rule broken in @msg.
 */
int xd_mem_file_direct_check(struct xd_region *r, int fd, uint64_t off, uint64_t len, char *msg,
			     size_t msglen);
/*
 * Copies @len bytes from @src at @soff to @dst at @doff where at least one side is a file
 * (pread into / pwrite from a mapping, copy_file_range between files); blocking, for worker
 * threads and small copies. Returns 0, or a positive errno with the cause in @why; *@done
 * counts the bytes copied.
 */
int xd_mem_copy(const struct xd_region *dst, uint64_t doff, const struct xd_region *src,
		uint64_t soff, uint64_t len, uint64_t *done, char *why, size_t whylen);
/* fdatasync of @r's file when it asked for it (file kind, "sync"). Returns 0 or a positive errno. */
int xd_mem_sync(const struct xd_region *r);

/* mem.c: a region's mapping and registrations, and the references that keep them */
/* Registers @r with every transport that registers memory. Returns 0 or -errno with @msg. */
int xd_region_register_transports(struct xd_region *r, char *msg, size_t len);
/*
 * Whether registering @r with the transports would stall the loop (a large range with RDMA
 * devices in use): then xd_region_register_transports() runs on a worker (region.c), and the
 * registrations are dropped on a worker too when @r goes.
 */
bool xd_region_register_blocks(const struct xd_region *r);
void xd_region_deregister_transports(struct xd_region *r);
/* [{"device", "lkey", "rkey"}] of every registration of @r, or NULL. */
json_t *xd_region_devices_json(const struct xd_region *r);
/* Gives back @r's uid and global charges (limits.c), once: the mapping is going. */
void xd_region_uncharge(struct xd_region *r);
void xd_region_ref(struct xd_region *r);
/*
 * Whether every page of the @len bytes at page-aligned @addr (a MAP_SHARED mapping of a memfd)
 * is already in memory, by mincore(): for a shmem memfd that is its page cache, so pages the
 * client touched count even though this process never faulted them in. Pages of a hugetlb
 * memfd count only once mapped here, so those always take the populate path. Thread-safe.
 */
bool xd_pages_resident(void *addr, size_t len);
/*
 * Whether every page of [@off, +@len) of memfd @fd (fstat()ed into @st, mapped at @map for
 * @map_len bytes) is in memory, cheapest test first: the whole memfd allocated on a machine
 * without swap (st_blocks, no syscall but sysinfo), else cachestat(2) of the range, else
 * xd_pages_resident() of the mapping (mincore over 1 MiB costs ~16 us; the others ~0.5-7 us).
 */
struct stat;
bool xd_memfd_resident(int fd, const struct stat *st, uint64_t off, uint64_t len, void *map,
		       size_t map_len);
/* Drops a reference; the last one deregisters, unmaps and frees @r. Accepts NULL. */
void xd_region_unref(struct xd_region *r);

#endif /* XFERD_TRANSPORT_H */
