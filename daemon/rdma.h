/* SPDX-License-Identifier: MIT */
/*
 * What rdma.c (devices, registrations) and rdma_conn.c (rdma_cm connections, SEND/RECV control,
 * RDMA READ/WRITE data) share. Nothing else in the daemon includes verbs headers.
 */
#ifndef XFERD_RDMA_H
#define XFERD_RDMA_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <rdma/rdma_cma.h>
#include "xferd.h"

struct xd_rdma_grant;
struct xd_seg;
struct xd_peer;

struct xd_rdma_counters {
	uint64_t reads, read_bytes, writes, write_bytes, sends, recvs, errors;
	uint64_t windows_bound; /**< memory windows bound for claims, ever */
	uint64_t windows_open;	/**< of which not yet deallocated */
	/* Per-op costs (rdma_conn.c, rdma.c): calls that post work, completions, loop wake-ups */
	uint64_t chains;      /**< chains of work requests posted or handed to the poster */
	uint64_t completions; /**< work completions handled (sends and receives) */
	uint64_t cq_events;   /**< completion channel events: wake-ups of the loop by the CQ */
};

/*
 * A device's staging buffers for file regions (rdma.c): rdma_staging_buffers of
 * rdma_staging_size bytes in one mapping, registered once, on first use. The MR grants no
 * remote access where the device has memory windows: a peer reaches a buffer only through a
 * window bound onto one chunk of it (rdma_conn.c). @region presents the pool to the copy
 * workers as a mapped region of kind staging.
 */
struct xd_rdma_staging {
	struct xd_region region;
	struct ibv_mr *mr;
	uint32_t size, nbufs;
	uint32_t *free; /**< indexes of the free buffers, nfree of them */
	uint32_t nfree;
	uint64_t waits; /**< times a chunk found every buffer taken */
	bool waiting;	/**< a chunk waits for a buffer: kick the device's connections on a put */
	bool making;	/**< a worker maps and registers the pool (first use) */
	int make_err;	/**< that failed (a positive errno): refused until XD_STAGE_RETRY_US */
	uint64_t failed_us;
	char make_msg[XD_CAUSE_MAX]; /**< why */
};

struct xd_rdma_dev {
	int index; /**< into xd_region.mrs[] */
	struct xd_rdma *rdma;
	char name[64];
	struct ibv_context *ctx; /**< librdmacm's context: ids resolve to it */
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	struct ibv_cq *cq; /**< one CQ for every QP of the device, send and receive */
	struct event *ev;  /**< the completion channel's fd */
	/** zero timer: the next batch of completions, after a full one */
	struct event *next_batch_ev;
	struct ibv_device_attr attr;
	uint8_t port;
	uint32_t max_request; /**< largest READ/WRITE: rdma_request_size, at most the port's max */
	bool windows;	      /**< binds type 2 memory windows: claims get per-op rkeys */
	union ibv_gid gid;    /**< the RoCE v2 GID of the listen address, if found */
	int gid_index;	      /**< -1 when unknown */
	struct xd_rdma_counters counters;
	struct xd_rdma_staging staging;
	struct xd_rdma_poster *poster; /**< rdma_post.c: posts RDMA WRITEs off the loop */
};

struct xd_rdma_dev;
/* rdma_conn.c's handler of every work completion of a device's CQ. */
typedef void (*xd_rdma_completion_cb)(struct xd_rdma_dev *dev, const struct ibv_wc *wc);
/*
 * rdma_conn.c's handler of a post that @dev's poster thread could not make (@err: errno;
 * @opcode: that of the work request that failed).
 */
typedef void (*xd_rdma_post_failed_cb)(struct xd_rdma_dev *dev, uint32_t conn, int err,
				       enum ibv_wr_opcode opcode);

struct xd_rdma {
	struct xd_daemon *d;
	xd_rdma_completion_cb completion;
	xd_rdma_post_failed_cb post_failed;
	struct ibv_context **list; /**< rdma_get_devices(), freed last */
	struct xd_rdma_dev devs[XD_MAX_DEVICES];
	int ndevs;
	struct rdma_event_channel *cm;
	struct event *cm_ev;
	struct rdma_cm_id *listeners[XD_MAX_LISTEN];
	int nlisteners;
	char why[160];		      /**< "available", or why not */
	TAILQ_HEAD(, xd_rconn) live;  /**< rdma_conn.c: connections by id */
	TAILQ_HEAD(, xd_rconn) dying; /**< killed, QP not yet destroyed */
	uint32_t next_conn_id;
	TAILQ_HEAD(, xd_stage_chunk) chunks; /**< rdma_conn.c: staging chunks alive */
	struct event *stage_kick_ev; /**< a staging buffer came free: pump the connections */
};

/* One work request: a local piece and the remote piece it pairs with. */
struct xd_rdma_piece {
	uint64_t laddr, raddr;
	uint32_t lkey, rkey, len;
};

/* rdma_post.c: a device's poster thread */
/*
 * Posts the chain @wr on @qp of connection @conn: on @dev's poster thread when @bulk (RDMA
 * WRITEs) or while chains of the connection wait there (*@queued, the connection's
 * count), else at once. The chain is copied. Returns 0 or -errno; a post the thread could
 * not make reaches the rdma->post_failed callback on the loop.
 */
int xd_rdma_post(struct xd_rdma_dev *dev, struct ibv_qp *qp, uint32_t conn,
		 const struct ibv_send_wr *wr, atomic_uint *queued, bool bulk);
/*
 * Starts @dev's poster thread (at open: its eventfd is part of the device) as config
 * rdma_post_thread says: "auto" for a device made in software (Soft-RoCE, siw), "always",
 * "never". Without one (a NIC under "auto", "never", or a failure, warned) the loop posts.
 */
void xd_rdma_post_start(struct xd_rdma_dev *dev);
/* Drops the chains of @qp that wait, and waits for the thread to put down the ones it holds. */
void xd_rdma_post_forget(struct xd_rdma_dev *dev, struct ibv_qp *qp, atomic_uint *queued);
/* Stops @dev's poster thread (after every queue pair is gone); drops what still waits. */
void xd_rdma_post_stop(struct xd_rdma_dev *dev);

/* rdma.c: devices and registrations */
/* The device a verbs context belongs to, or NULL if this daemon does not use it. */
struct xd_rdma_dev *xd_rdma_dev_for(struct xd_daemon *d, struct ibv_context *ctx);
/*
 * Makes d->rdma and, when @wanted, opens the devices to use, each with its CQ on the event
 * loop; every work completion goes to @completion. Returns 0 or -errno.
 */
int xd_rdma_devices_open(struct xd_daemon *d, bool wanted, xd_rdma_completion_cb completion);
/* Closes the devices and frees d->rdma (every QP and MR must be gone). */
void xd_rdma_devices_close(struct xd_daemon *d);
/* The ops table's device entries (transport.h says what each does). */
json_t *xd_rdma_devices_json(const struct xd_daemon *d);
int xd_rdma_register_region(struct xd_daemon *d, struct xd_region *r, char *msg, size_t len);
void xd_rdma_deregister_region(struct xd_region *r);
/* Whether registering @len bytes on every device is worth a worker (XD_RDMA_REG_INLINE_MAX). */
bool xd_rdma_register_blocks(const struct xd_daemon *d, uint64_t len);
json_t *xd_rdma_region_json(const struct xd_daemon *d, const struct xd_region *r);
/* Whether this daemon can take and make RDMA connections. */
bool xd_rdma_available(const struct xd_daemon *d);
/* @r's keys on device @dev. */
uint32_t xd_rdma_lkey(const struct xd_region *r, int dev);
uint32_t xd_rdma_rkey(const struct xd_region *r, int dev);

/*
 * A free staging buffer of @dev into *@buf (the pool is made and registered on first use).
 * Returns 0, -EAGAIN when all are taken (staging.waiting is set), or -errno with @msg.
 */
int xd_rdma_stage_get(struct xd_rdma_dev *dev, uint32_t *buf, char *msg, size_t len);
/* Gives buffer @buf back to @dev's pool. */
void xd_rdma_stage_put(struct xd_rdma_dev *dev, uint32_t buf);
/* @len bytes of buffer @buf as a segment (for the copy workers), and its first byte. */
struct xd_seg xd_rdma_stage_seg(struct xd_rdma_dev *dev, uint32_t buf, uint64_t len);
uint8_t *xd_rdma_stage_addr(const struct xd_rdma_dev *dev, uint32_t buf);

/* rdma_conn.c: the connections behind its ops table (xd_transport_rdma_ops) */
int xd_rdma_connect(struct xd_peer *p, const struct xp_endpoint *ep);
/* Queues a control message on connection @via (0: the set's first). Returns 0 or -errno. */
int xd_rdma_send_ctrl(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
		      const json_t *json);
/* Posts RDMA READ/WRITE for the peer's transfers while the window has room. */
void xd_rdma_kick(struct xd_peer *p);
void xd_rdma_close_peer(struct xd_peer *p);
void xd_rdma_keepalive(struct xd_peer *p);
int xd_rdma_peer_conns(const struct xd_peer *p);
/* When the peer's connections last received anything (monotonic us), 0 if never. */
uint64_t xd_rdma_peer_last_rx(const struct xd_peer *p);
/*
 * Memory windows onto one operation's ranges, for a claimer over RDMA (PROTOCOL.md §10.5):
 * opens remote access to @n ranges with @access (XP_ACCESS_READ / XP_ACCESS_WRITE bits: a
 * claim's is one of them, a window's may be both), for the peer's end of RDMA connection @via, and fills @rkeys (one per range). Where the device has memory windows,
 * *grant owns them and the rkeys reach those bytes, through that queue pair, and nothing else;
 * where it has none, *grant is NULL and the rkeys are the regions' own. Returns 0 or -errno
 * with the cause in @msg.
 */
int xd_rdma_grant_open(struct xd_peer *p, uint32_t via, const struct xd_seg *segs, uint32_t n,
		       int access, uint32_t *rkeys, struct xd_rdma_grant **grant, char *msg,
		       size_t len);
/* Revokes @g's windows: at once, or as soon as their binds have left the send queue. */
void xd_rdma_grant_close(struct xd_rdma_grant *g);
/* The ops table's stage_close (transport.h): a staged transfer ended here. */
void xd_rdma_stage_close(struct xd_xfer *x);

#endif /* XFERD_RDMA_H */
