// SPDX-License-Identifier: MIT
/*
 * Verbs devices: discovery and selection, one protection domain, completion channel and CQ per
 * device, the registration of every region with every device, and list.devices. Only this file
 * and rdma_conn.c call libibverbs or librdmacm; both turn their errors into -errno at once.
 *
 * Device contexts come from rdma_get_devices(), the ones librdmacm itself uses, because a QP on
 * an rdma_cm id must be created on the PD of the very context the id resolved to.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "xferd.h"
#include "rdma.h"
#include "transport.h"

#define XD_CQ_ENTRIES 8192
/*
 * Regions larger than this register with the devices on a worker (region.c), and drop their
 * registrations there: ibv_reg_mr pins every page, ~1 ms per MiB on Soft-RoCE under TCG (a
 * large region held the loop 0.28 s). Small ones stay on the loop: the worker round trip would
 * cost more than the pinning (the register + deregister fast path).
 */
#define XD_RDMA_REG_INLINE_MAX (1ull << 20)
/* A staging pool that could not be made is not tried again for this long (each try pins it). */
#define XD_STAGE_RETRY_US 1000000
#define XD_POLL_BATCH 32

static const char *link_layer_name(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND:
		return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET:
		return "Ethernet";
	default:
		return "unspecified";
	}
}

static bool device_wanted(const struct xd_config *cfg, const char *name)
{
	if (cfg->nrdma_devices == 0)
		return true;
	for (int i = 0; i < cfg->nrdma_devices; i++)
		if (strcmp(cfg->rdma_devices[i], name) == 0)
			return true;
	return false;
}

/*
 * Reaps one batch of @dev's completions. Never until the CQ is empty: handling a completion
 * posts more work, and Soft-RoCE can complete a request inside ibv_post_send, so draining would
 * hold the event loop for a whole transfer (client requests, keepalives and every other
 * connection waiting). After a full batch the zero timer brings us back once the loop has
 * polled its other fds; anything that completes meanwhile also raises a channel event.
 */
static void cq_reap(struct xd_rdma_dev *dev)
{
	static const struct timeval next_turn = { 0, 0 };
	struct ibv_wc wc[XD_POLL_BATCH];
	int n = ibv_poll_cq(dev->cq, XD_POLL_BATCH, wc);

	if (n < 0)
		xd_log(XD_LOG_ERR, "%s: ibv_poll_cq failed", dev->name);
	for (int i = 0; i < n; i++)
		dev->rdma->completion(dev, &wc[i]);
	if (n == XD_POLL_BATCH && event_add(dev->next_batch_ev, &next_turn) < 0)
		xd_log(XD_LOG_ERR, "%s: event_add failed: completions wait for the next event",
		       dev->name);
}

static void cq_next_batch_cb(evutil_socket_t fd, short what, void *arg)
{
	cq_reap(arg);
}

/*
 * The channel fired: re-arms the CQ first so that no completion can be missed, then reaps. An
 * armed CQ raises one event, so there is one to read (a second read would only find EAGAIN: one
 * system call per wake-up saved; should there ever be more, the fd stays readable and we come
 * back).
 */
static void cq_event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_rdma_dev *dev = arg;
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(dev->channel, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		dev->counters.cq_events++;
	}
	if (ibv_req_notify_cq(dev->cq, 0))
		xd_log(XD_LOG_ERR, "%s: ibv_req_notify_cq failed", dev->name);
	cq_reap(dev);
}

static void staging_free(struct xd_rdma_dev *dev)
{
	struct xd_rdma_staging *st = &dev->staging;

	if (st->nfree != st->nbufs)
		xd_log(XD_LOG_ERR, "%s: %u staging buffers still taken at close", dev->name,
		       st->nbufs - st->nfree);
	if (st->mr && ibv_dereg_mr(st->mr))
		xd_log(XD_LOG_ERR, "%s: ibv_dereg_mr of the staging buffers failed", dev->name);
	if (st->region.base)
		munmap(st->region.base, (size_t)st->nbufs * st->size);
	free(st->free);
	memset(st, 0, sizeof(*st));
}

/* The reverse of dev_open(); safe on a partly opened device. */
static void dev_close(struct xd_rdma_dev *dev)
{
	xd_rdma_post_stop(dev);
	staging_free(dev);
	xd_event_free(dev->next_batch_ev);
	xd_event_free(dev->ev);
	dev->next_batch_ev = NULL;
	dev->ev = NULL;
	if (dev->cq && ibv_destroy_cq(dev->cq))
		xd_log(XD_LOG_ERR, "%s: ibv_destroy_cq failed", dev->name);
	if (dev->channel && ibv_destroy_comp_channel(dev->channel))
		xd_log(XD_LOG_ERR, "%s: ibv_destroy_comp_channel failed", dev->name);
	if (dev->pd && ibv_dealloc_pd(dev->pd))
		xd_log(XD_LOG_ERR, "%s: ibv_dealloc_pd failed", dev->name);
	dev->cq = NULL;
	dev->channel = NULL;
	dev->pd = NULL;
}

/*
 * Whether @dev can give a claimer an rkey for only that operation's bytes, usable only through
 * the claimer's queue pair: type 2 memory windows, bound onto the region's MR per claim. A
 * device that lacks them (or refuses the trial allocation) hands out the region MR's own rkey,
 * which covers the whole region.
 */
static bool dev_has_windows(struct xd_rdma_dev *dev)
{
	const unsigned type2 = IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	struct ibv_mw *mw;

	if (!(dev->attr.device_cap_flags & type2) || dev->attr.max_mw == 0)
		return false;
	mw = ibv_alloc_mw(dev->pd, IBV_MW_TYPE_2);
	if (!mw)
		return false;
	ibv_dealloc_mw(mw);
	return true;
}

static int dev_open(struct xd_daemon *d, struct xd_rdma_dev *dev, struct ibv_context *ctx)
{
	struct ibv_port_attr port;

	dev->ctx = ctx;
	dev->port = 1;
	snprintf(dev->name, sizeof(dev->name), "%s", ibv_get_device_name(ctx->device));
	if (ibv_query_device(ctx, &dev->attr) || ibv_query_port(ctx, dev->port, &port))
		return -EIO;
	dev->max_request = d->cfg.rdma_request_size < port.max_msg_sz ? d->cfg.rdma_request_size :
									port.max_msg_sz;
	dev->pd = ibv_alloc_pd(ctx);
	if (!dev->pd)
		return errno ? -errno : -ENOMEM;
	dev->windows = dev_has_windows(dev);
	dev->channel = ibv_create_comp_channel(ctx);
	if (!dev->channel)
		return errno ? -errno : -ENOMEM;
	int cqe = dev->attr.max_cqe < XD_CQ_ENTRIES ? dev->attr.max_cqe : XD_CQ_ENTRIES;
	dev->cq = ibv_create_cq(ctx, cqe, dev, dev->channel, 0);
	if (!dev->cq)
		return errno ? -errno : -ENOMEM;
	int fl = fcntl(dev->channel->fd, F_GETFL);
	if (fl < 0 || fcntl(dev->channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	if (ibv_req_notify_cq(dev->cq, 0))
		return -EIO;
	dev->ev = event_new(d->base, dev->channel->fd, EV_READ | EV_PERSIST, cq_event_cb, dev);
	dev->next_batch_ev = evtimer_new(d->base, cq_next_batch_cb, dev);
	if (!dev->ev || !dev->next_batch_ev || event_add(dev->ev, NULL) < 0)
		return -ENOMEM;
	xd_rdma_post_start(dev);
	xd_log(XD_LOG_INFO, "using RDMA device %s port %u (%s, %s, active MTU %d)", dev->name,
	       dev->port, ibv_port_state_str(port.state), link_layer_name(port.link_layer),
	       128 << port.active_mtu);
	if (!dev->windows)
		xd_log(XD_LOG_WARN,
		       "%s has no memory windows: a claimer's rkey covers the whole "
		       "region, not only the operation's bytes",
		       dev->name);
	return 0;
}

static int open_devices(struct xd_daemon *d, struct xd_rdma *rd)
{
	int n = 0;

	rd->list = rdma_get_devices(&n);
	if (!rd->list || n == 0) {
		snprintf(rd->why, sizeof(rd->why), "unavailable: %s",
			 rd->list ? "no RDMA devices" : strerror(errno ? errno : ENODEV));
		return 0;
	}
	for (int i = 0; i < n && rd->ndevs < XD_MAX_DEVICES; i++) {
		const char *name = ibv_get_device_name(rd->list[i]->device);
		if (!device_wanted(&d->cfg, name))
			continue;
		struct xd_rdma_dev *dev = &rd->devs[rd->ndevs];
		dev->index = rd->ndevs;
		dev->rdma = rd;
		int rc = dev_open(d, dev, rd->list[i]);
		if (rc < 0) {
			xd_log(XD_LOG_ERR, "RDMA device %s: %s", name, strerror(-rc));
			dev_close(dev);
			return rc;
		}
		rd->ndevs++;
	}
	for (int i = 0; i < d->cfg.nrdma_devices; i++) {
		bool found = false;
		for (int j = 0; j < rd->ndevs; j++)
			found |= strcmp(rd->devs[j].name, d->cfg.rdma_devices[i]) == 0;
		if (!found) {
			xd_log(XD_LOG_ERR, "RDMA device %s (--rdma-device) not found",
			       d->cfg.rdma_devices[i]);
			return -ENODEV;
		}
	}
	if (rd->ndevs == 0)
		snprintf(rd->why, sizeof(rd->why), "unavailable: no device selected");
	else
		snprintf(rd->why, sizeof(rd->why), "available");
	return 0;
}

int xd_rdma_devices_open(struct xd_daemon *d, bool wanted, xd_rdma_completion_cb completion)
{
	struct xd_rdma *rd = calloc(1, sizeof(*rd));

	if (!rd)
		return -ENOMEM;
	d->rdma = rd;
	rd->d = d;
	rd->completion = completion;
	TAILQ_INIT(&rd->live);
	TAILQ_INIT(&rd->dying);
	TAILQ_INIT(&rd->chunks);
	if (!wanted) {
		snprintf(rd->why, sizeof(rd->why), "unused: transport is %s", d->cfg.transport);
		return 0;
	}
	return open_devices(d, rd);
}

void xd_rdma_devices_close(struct xd_daemon *d)
{
	struct xd_rdma *rd = d->rdma;

	if (!rd)
		return;
	for (int i = 0; i < rd->ndevs; i++)
		dev_close(&rd->devs[i]);
	if (rd->list)
		rdma_free_devices(rd->list);
	free(rd);
	d->rdma = NULL;
}

bool xd_rdma_available(const struct xd_daemon *d)
{
	return d->rdma && d->rdma->ndevs > 0 && d->rdma->nlisteners > 0;
}

struct xd_rdma_dev *xd_rdma_dev_for(struct xd_daemon *d, struct ibv_context *ctx)
{
	for (int i = 0; d->rdma && i < d->rdma->ndevs; i++)
		if (d->rdma->devs[i].ctx == ctx)
			return &d->rdma->devs[i];
	return NULL;
}

/* ---- registrations ---- */

static void explain_reg_failure(const struct xd_rdma_dev *dev, int err, char *msg, size_t len)
{
	struct rlimit rl;

	if ((err == ENOMEM || err == EAGAIN || err == EPERM) &&
	    getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		snprintf(msg, len,
			 "ibv_reg_mr on %s failed: %s; the daemon's RLIMIT_MEMLOCK is "
			 "%llu bytes (set LimitMEMLOCK=infinity in its unit)",
			 dev->name, strerror(err), (unsigned long long)rl.rlim_cur);
	else
		snprintf(msg, len, "ibv_reg_mr on %s failed: %s", dev->name, strerror(err));
}

/*
 * With memory windows the MR itself grants no remote access: peers reach a region only through
 * the windows bound for their claims (rdma_conn.c).
 */
static int region_access(const struct xd_rdma_dev *dev)
{
	if (dev->windows)
		return IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
	return IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
}

/* Registrations of a region that went, dropped on a worker (dereg_work()). */
struct dereg_job {
	uint64_t region; /**< its id, for the log */
	int nmrs;
	struct ibv_mr *mrs[XD_MAX_DEVICES];
};

static void dereg_mrs(struct ibv_mr **mrs, int n, uint64_t region)
{
	for (int i = 0; i < n; i++) {
		if (mrs[i] && ibv_dereg_mr(mrs[i]))
			xd_log(XD_LOG_ERR, "ibv_dereg_mr of region %llu failed",
			       (unsigned long long)region);
		mrs[i] = NULL;
	}
}

int xd_rdma_register_region(struct xd_daemon *d, struct xd_region *r, char *msg, size_t len)
{
	struct xd_rdma *rd = d->rdma;
	uint64_t t0 = xd_now_us();

	for (int i = 0; rd && i < rd->ndevs; i++) {
		r->mrs[i] =
			ibv_reg_mr(rd->devs[i].pd, r->base, r->length, region_access(&rd->devs[i]));
		if (!r->mrs[i]) {
			int err = errno ? errno : ENOMEM;
			explain_reg_failure(&rd->devs[i], err, msg, len);
			/* here, not on a worker: this may run on one (region.c) */
			dereg_mrs(r->mrs, r->nmrs, r->id);
			r->nmrs = 0;
			return -err;
		}
		r->nmrs = i + 1;
	}
	r->rdma_register_us = xd_now_us() - t0;
	return 0;
}

static void dereg_work(void *arg)
{
	struct dereg_job *job = arg;

	dereg_mrs(job->mrs, job->nmrs, job->region);
}

/*
 * Unpinning a large registration costs what pinning it did: it goes to a worker with the MRs
 * (the mapping may go meanwhile: the MRs hold their pages until they are deregistered, and a
 * region's MRs are reached only through @r, which no longer names them). Returns whether it did.
 */
static bool dereg_on_worker(struct xd_region *r)
{
	struct dereg_job *job;

	if (!xd_rdma_register_blocks(r->d, r->length) || !(job = calloc(1, sizeof(*job))))
		return false;
	job->region = r->id;
	job->nmrs = r->nmrs;
	memcpy(job->mrs, r->mrs, sizeof(job->mrs));
	if (xd_work_submit(r->d, dereg_work, free, job, false) < 0) {
		free(job); /* (the workers are stopping: the caller deregisters here) */
		return false;
	}
	memset(r->mrs, 0, sizeof(r->mrs));
	r->nmrs = 0;
	return true;
}

void xd_rdma_deregister_region(struct xd_region *r)
{
	if (r->nmrs == 0 || dereg_on_worker(r))
		return;
	dereg_mrs(r->mrs, r->nmrs, r->id);
	r->nmrs = 0;
}

bool xd_rdma_register_blocks(const struct xd_daemon *d, uint64_t len)
{
	return d->rdma && d->rdma->ndevs > 0 && len > XD_RDMA_REG_INLINE_MAX;
}

uint32_t xd_rdma_lkey(const struct xd_region *r, int dev)
{
	return r->mrs[dev]->lkey;
}

uint32_t xd_rdma_rkey(const struct xd_region *r, int dev)
{
	return r->mrs[dev]->rkey;
}

json_t *xd_rdma_region_json(const struct xd_daemon *d, const struct xd_region *r)
{
	json_t *arr = json_array();

	for (int i = 0; arr && i < r->nmrs; i++)
		json_array_append_new(arr,
				      json_pack("{s:s, s:I, s:I}", "device", d->rdma->devs[i].name,
						"lkey", (json_int_t)r->mrs[i]->lkey, "rkey",
						(json_int_t)r->mrs[i]->rkey));
	return arr;
}

/* ---- staging buffers (file regions) ---- */

/*
 * A device's staging pool being made on a worker: ibv_reg_mr of fresh anonymous memory faults in
 * and pins every page (16 x 4 MiB: 1.4-2.0 s in the Soft-RoCE VM, ~60 ms natively), which the
 * loop must not wait for (DESIGN §7). Chunks wait for it as for a buffer (-EAGAIN).
 */
struct staging_job {
	struct xd_rdma_dev *dev;
	size_t bytes;
	int access;
	void *mem;		/**< the worker's: the pool's mapping, or MAP_FAILED */
	struct ibv_mr *mr;	/**< its registration, or NULL */
	int err;		/**< 0 or a positive errno */
	char msg[XD_CAUSE_MAX]; /**< the cause of a failure */
};

/* Maps and registers the pool (on a worker, or on the loop once the workers are stopping). */
static void staging_make_work(void *arg)
{
	struct staging_job *job = arg;

	job->mem =
		mmap(NULL, job->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (job->mem == MAP_FAILED) {
		job->err = ENOMEM;
		snprintf(job->msg, sizeof(job->msg),
			 "no memory for %zu bytes of staging buffers on %s", job->bytes,
			 job->dev->name);
		return;
	}
	job->mr = ibv_reg_mr(job->dev->pd, job->mem, job->bytes, job->access);
	if (!job->mr) {
		job->err = errno ? errno : ENOMEM;
		explain_reg_failure(job->dev, job->err, job->msg, sizeof(job->msg));
		munmap(job->mem, job->bytes);
		job->mem = MAP_FAILED;
	}
}

/* Makes the pool of @job usable (every buffer free). Returns 0 or -ENOMEM (nothing kept). */
static int staging_install(struct xd_rdma_dev *dev, struct staging_job *job)
{
	struct xd_rdma_staging *st = &dev->staging;
	const struct xd_config *cfg = &dev->rdma->d->cfg;

	st->free = calloc(cfg->rdma_staging_buffers, sizeof(*st->free));
	if (!st->free) {
		snprintf(job->msg, sizeof(job->msg), "out of memory for the staging pool's list");
		return -ENOMEM;
	}
	st->mr = job->mr;
	st->region.base = job->mem;
	st->nbufs = cfg->rdma_staging_buffers;
	st->size = cfg->rdma_staging_size;
	st->region.d = dev->rdma->d;
	st->region.mem = &xd_mem_staging;
	st->region.fd = -1;
	st->region.length = job->bytes;
	st->region.may_read = st->region.may_write = true;
	snprintf(st->region.name, sizeof(st->region.name), "staging");
	for (uint32_t i = 0; i < st->nbufs; i++)
		st->free[i] = st->nbufs - 1 - i; /* taken from the end: buffer 0 first */
	st->nfree = st->nbufs;
	xd_log(XD_LOG_INFO, "%s: %u staging buffers of %u bytes registered", dev->name, st->nbufs,
	       st->size);
	return 0;
}

/* Back on the loop: the pool is made (or failed: the cause kept for XD_STAGE_RETRY_US). */
static void staging_made(void *arg)
{
	struct staging_job *job = arg;
	struct xd_rdma_dev *dev = job->dev;
	struct xd_rdma_staging *st = &dev->staging;
	static const struct timeval now = { 0, 0 };
	int err = job->err ? -job->err : staging_install(dev, job);

	st->making = false;
	if (err < 0) {
		if (job->mr && ibv_dereg_mr(job->mr))
			xd_log(XD_LOG_ERR, "%s: ibv_dereg_mr of the staging buffers failed",
			       dev->name);
		if (job->mem != MAP_FAILED)
			munmap(job->mem, job->bytes);
		st->make_err = -err;
		st->failed_us = xd_now_us();
		snprintf(st->make_msg, sizeof(st->make_msg), "%s", job->msg);
		xd_log(XD_LOG_ERR, "%s: %s", dev->name, job->msg);
	}
	free(job);
	/* Every chunk that waited goes on: with a buffer now, or failing with the cause. */
	if (st->waiting && dev->rdma->stage_kick_ev)
		evtimer_add(dev->rdma->stage_kick_ev, &now);
}

/* Starts making @dev's pool: rdma_staging_buffers x rdma_staging_size. Returns 0 or -errno. */
static int staging_start(struct xd_rdma_dev *dev)
{
	const struct xd_config *cfg = &dev->rdma->d->cfg;
	struct staging_job *job = calloc(1, sizeof(*job));

	if (!job)
		return -ENOMEM;
	job->dev = dev;
	job->bytes = (size_t)cfg->rdma_staging_buffers * cfg->rdma_staging_size;
	job->access = region_access(dev);
	job->mem = MAP_FAILED;
	dev->staging.making = true;
	if (xd_work_submit(dev->rdma->d, staging_make_work, staging_made, job, false) < 0) {
		staging_make_work(job); /* (the workers are stopping: here, as before) */
		staging_made(job);
	}
	return 0;
}

int xd_rdma_stage_get(struct xd_rdma_dev *dev, uint32_t *buf, char *msg, size_t len)
{
	struct xd_rdma_staging *st = &dev->staging;

	if (!st->mr && st->make_err && xd_now_us() - st->failed_us < XD_STAGE_RETRY_US) {
		snprintf(msg, len, "%s", st->make_msg);
		return -st->make_err;
	}
	if (!st->mr && !st->making) {
		st->make_err = 0;
		int err = staging_start(dev);
		if (err < 0) {
			snprintf(msg, len, "out of memory starting the staging pool");
			return err;
		}
	}
	if (!st->mr && st->making) {
		st->waiting = true;
		return -EAGAIN;
	}
	if (!st->mr) /* (made at once, and failed: the workers are stopping) */
		return xd_rdma_stage_get(dev, buf, msg, len);
	if (st->nfree == 0) {
		st->waits++;
		st->waiting = true;
		return -EAGAIN;
	}
	*buf = st->free[--st->nfree];
	return 0;
}

void xd_rdma_stage_put(struct xd_rdma_dev *dev, uint32_t buf)
{
	struct xd_rdma_staging *st = &dev->staging;

	st->free[st->nfree++] = buf;
}

uint8_t *xd_rdma_stage_addr(const struct xd_rdma_dev *dev, uint32_t buf)
{
	return dev->staging.region.base + (size_t)buf * dev->staging.size;
}

struct xd_seg xd_rdma_stage_seg(struct xd_rdma_dev *dev, uint32_t buf, uint64_t len)
{
	return (struct xd_seg){ &dev->staging.region, (uint64_t)buf * dev->staging.size, len };
}

static json_t *staging_json(const struct xd_rdma_dev *dev)
{
	const struct xd_rdma_staging *st = &dev->staging;
	const struct xd_config *cfg = &dev->rdma->d->cfg;

	return json_pack("{s:b, s:b, s:I, s:I, s:I, s:I}", "registered", st->mr != NULL,
			 "registering", st->making, "buffers",
			 (json_int_t)cfg->rdma_staging_buffers, "size",
			 (json_int_t)cfg->rdma_staging_size, "in_use",
			 (json_int_t)(st->nbufs - st->nfree), "waits", (json_int_t)st->waits);
}

/* ---- list.devices ---- */

static json_t *port_json(const struct xd_rdma_dev *dev)
{
	struct ibv_port_attr attr;
	char gid[INET6_ADDRSTRLEN] = "";

	if (ibv_query_port(dev->ctx, dev->port, &attr))
		return json_pack("{s:i, s:s}", "port", dev->port, "state", "unknown");
	if (dev->gid_index >= 0)
		inet_ntop(AF_INET6, dev->gid.raw, gid, sizeof(gid));
	return json_pack("{s:i, s:s, s:s, s:i, s:s, s:i}", "port", dev->port, "state",
			 ibv_port_state_str(attr.state), "link_layer",
			 link_layer_name(attr.link_layer), "active_mtu", 128 << attr.active_mtu,
			 "gid", gid, "gid_index", dev->gid_index);
}

static json_t *dev_json(const struct xd_rdma_dev *dev)
{
	const struct xd_rdma_counters *c = &dev->counters;

	return json_pack("{s:s, s:b, s:b, s:[o], s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
			 "s:I, s:I, s:I, s:I}}",
			 "name", dev->name, "memory_windows", dev->windows, "poster_thread",
			 dev->poster != NULL, "ports", port_json(dev), "staging", staging_json(dev),
			 "counters", "rdma_reads", (json_int_t)c->reads, "rdma_read_bytes",
			 (json_int_t)c->read_bytes, "rdma_writes", (json_int_t)c->writes,
			 "rdma_write_bytes", (json_int_t)c->write_bytes, "sends",
			 (json_int_t)c->sends, "recvs", (json_int_t)c->recvs, "completion_errors",
			 (json_int_t)c->errors, "windows_bound", (json_int_t)c->windows_bound,
			 "windows_open", (json_int_t)c->windows_open, "chains_posted",
			 (json_int_t)c->chains, "completions", (json_int_t)c->completions,
			 "cq_events", (json_int_t)c->cq_events);
}

/* Devices the kernel has but this daemon does not use (transport tcp, or not selected). */
static json_t *unused_devices_json(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	json_t *arr = json_array();

	for (int i = 0; list && list[i] && arr; i++)
		json_array_append_new(arr, json_pack("{s:s, s:b}", "name",
						     ibv_get_device_name(list[i]), "used", 0));
	if (list)
		ibv_free_device_list(list);
	return arr;
}

json_t *xd_rdma_devices_json(const struct xd_daemon *d)
{
	const struct xd_rdma *rd = d->rdma;
	json_t *arr = rd && rd->ndevs ? json_array() : unused_devices_json();

	for (int i = 0; rd && arr && i < rd->ndevs; i++)
		json_array_append_new(arr, dev_json(&rd->devs[i]));
	return json_pack("{s:s, s:o}", "rdma", rd ? rd->why : "unavailable", "devices", arr);
}

/* ---- metrics ---- */

bool xd_rdma_device_stats(const struct xd_daemon *d, int i, struct xd_rdma_dev_stats *out)
{
	const struct xd_rdma *rd = d->rdma;

	if (!rd || i < 0 || i >= rd->ndevs)
		return false;
	const struct xd_rdma_counters *c = &rd->devs[i].counters;
	*out = (struct xd_rdma_dev_stats){
		.name = rd->devs[i].name,
		.reads = c->reads,
		.read_bytes = c->read_bytes,
		.writes = c->writes,
		.write_bytes = c->write_bytes,
		.sends = c->sends,
		.recvs = c->recvs,
		.errors = c->errors,
		.windows_bound = c->windows_bound,
		.windows_open = c->windows_open,
	};
	return true;
}
