/* SPDX-License-Identifier: MIT */
/*
 * What rdma.c (devices, registrations) and rdma_conn.c (rdma_cm connections, SEND/RECV control,
 * RDMA READ/WRITE data) share. Nothing else in the daemon includes verbs headers.
 */
#ifndef XFERD_RDMA_H
#define XFERD_RDMA_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "xferd.h"

struct xd_rdma_counters {
	uint64_t reads, read_bytes, writes, write_bytes, sends, recvs, errors;
	uint64_t windows_bound; /**< memory windows bound for claims, ever */
	uint64_t windows_open;	/**< of which not yet deallocated */
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
};

struct xd_rdma {
	struct xd_daemon *d;
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
};

/* rdma.c */
/* The device a verbs context belongs to, or NULL if this daemon does not use it. */
struct xd_rdma_dev *xd_rdma_dev_for(struct xd_daemon *d, struct ibv_context *ctx);

/* rdma_conn.c */
/* Creates the CM event channel and the rdma_cm listeners. Returns 0 or -errno. */
int xd_rconn_start(struct xd_daemon *d);
/* Destroys every connection, the listeners and the CM channel. */
void xd_rconn_fini(struct xd_daemon *d);
/* One work completion from @dev's CQ. */
void xd_rconn_completion(struct xd_rdma_dev *dev, const struct ibv_wc *wc);

#endif /* XFERD_RDMA_H */
