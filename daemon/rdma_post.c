// SPDX-License-Identifier: MIT
/*
 * A device's poster: a thread (started with the device) that calls ibv_post_send for the event
 * loop (PROTOCOL.md §10.5 is unchanged: the same work requests, in the same order per queue
 * pair).
 *
 * Why a thread: Soft-RoCE (rdma_rxe) does its protocol work inside the system call that rings
 * the doorbell of a user queue pair: building every packet of an RDMA WRITE (copy and ICRC),
 * and, through the softirqs that run when it re-enables them, the receiving side's work and
 * the ACKs. Measured in the VM (2 vCPUs): an ibv_post_send took 1-2 ms on average (64 KiB
 * WRITEs 2 ms, READs 1 ms), so the loop spent most of a put bench inside it, and the wire
 * stood still while the loop answered clients and reaped completions. rdma_conn.c hands over
 * RDMA WRITEs (READs measured better posted by the loop itself). On a real NIC a post is a
 * doorbell of a few hundred nanoseconds, less than a hand-over and a wake-up of the thread:
 * only a device made in software gets one (device_is_software()), unless rdma_post_thread
 * (config) says "always" or "never".
 *
 * The loop still owns every queue entry: it numbers the work requests (rdma_conn.c's sq ring)
 * and hands a copy of each chain here; one thread per device posts them in the order given, so
 * the order of each queue pair is the loop's. A connection whose chains wait here posts
 * everything behind them (its @queued count); rdma_conn.c calls xd_rdma_post_forget() before it
 * destroys a queue pair, so nothing is posted to a destroyed one. A failed post comes back to
 * the loop through an eventfd (struct xd_rdma's post_failed callback); nothing more reaches
 * its queue pair until the loop has failed the connection (job_failed()).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "rdma.h"

/* One chain of work requests for one queue pair, copied with its scatter lists. */
struct post_job {
	STAILQ_ENTRY(post_job) link;
	struct ibv_qp *qp;
	uint32_t conn;
	atomic_uint *queued;	      /**< the connection's count of chains waiting here */
	int err;		      /**< a positive errno once its post failed */
	enum ibv_wr_opcode failed_op; /**< then the opcode of the request that failed */
	int n;
	struct ibv_send_wr wr[]; /* then the scatter entries */
};

STAILQ_HEAD(post_jobs, post_job);

struct xd_rdma_poster {
	struct xd_rdma_dev *dev;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work; /**< a job queued, or stop */
	pthread_cond_t idle; /**< the thread put down the jobs it held */
	struct post_jobs queue;
	struct post_jobs failed; /**< for the loop: posts that failed, until it failed their sets */
	bool holding;		 /**< the thread posts jobs it took off the queue */
	bool stop;
	int efd; /**< the thread -> the loop: something failed */
	struct event *ev;
};

/* Copies the chain @wr into a new job (NULL: out of memory). */
static struct post_job *job_copy(const struct ibv_send_wr *wr)
{
	int n = 0, nsge = 0;

	for (const struct ibv_send_wr *w = wr; w; w = w->next, n++)
		nsge += w->num_sge;
	struct post_job *j = calloc(1, sizeof(*j) + (size_t)n * sizeof(j->wr[0]) +
					       (size_t)nsge * sizeof(struct ibv_sge));
	if (!j)
		return NULL;
	struct ibv_sge *sge = (struct ibv_sge *)&j->wr[n];
	int i = 0;
	for (const struct ibv_send_wr *w = wr; w; w = w->next, i++) {
		j->wr[i] = *w;
		j->wr[i].next = i + 1 < n ? &j->wr[i + 1] : NULL;
		j->wr[i].sg_list = w->num_sge ? sge : NULL;
		memcpy(sge, w->sg_list, (size_t)w->num_sge * sizeof(*sge));
		sge += w->num_sge;
	}
	j->n = n;
	return j;
}

/* Whether a post to @qp failed and the loop has not failed its connection yet (lock held). */
static bool qp_failed(const struct xd_rdma_poster *ps, const struct ibv_qp *qp)
{
	const struct post_job *j;

	STAILQ_FOREACH(j, &ps->failed, link)
		if (j->qp == qp)
			return true;
	return false;
}

/*
 * Files @j, whose post failed with @err, for the loop. It keeps its count in its connection's
 * @queued until the loop has failed the connection (poster_failed_cb()): until then the loop
 * posts nothing to the queue pair itself, and this thread drops what comes for it (qp_failed()),
 * so that nothing queued behind the lost requests (a DONE behind lost RDMA WRITEs would tell
 * the owner that its bytes arrived) reaches the wire before the queue pair is in error.
 */
static void job_failed(struct xd_rdma_poster *ps, struct post_job *j, int err)
{
	uint64_t one = 1;

	j->err = err;
	pthread_mutex_lock(&ps->lock);
	STAILQ_INSERT_TAIL(&ps->failed, j, link);
	pthread_mutex_unlock(&ps->lock);
	if (write(ps->efd, &one, sizeof(one)) < 0) {
		/* (EAGAIN: the counter is full, the loop will read it anyway) */
	}
}

/*
 * Posts the jobs @held in order, chaining neighbours of one queue pair into one call (one
 * doorbell); frees them, but for a failed one (job_failed()). Jobs of a queue pair whose post
 * failed are dropped unposted: their connection is about to fail.
 */
static void post_held(struct xd_rdma_poster *ps, struct post_jobs *held)
{
	struct post_job *j;

	while ((j = STAILQ_FIRST(held))) {
		struct post_job *last = j, *next;
		while ((next = STAILQ_NEXT(last, link)) && next->qp == j->qp) {
			last->wr[last->n - 1].next = &next->wr[0];
			last = next;
		}
		pthread_mutex_lock(&ps->lock);
		bool dropped = qp_failed(ps, j->qp);
		pthread_mutex_unlock(&ps->lock);
		struct ibv_send_wr *bad = NULL;
		int err = dropped ? 0 : ibv_post_send(j->qp, &j->wr[0], &bad);
		/* The request that failed names the cause: the chain may start with a job of
		 * another kind (a control SEND queued before the WRITEs). Read before @bad's job
		 * is freed below. */
		j->failed_op = bad ? bad->opcode : j->wr[0].opcode;
		for (struct post_job *k = j, *end = STAILQ_NEXT(last, link); k != end; k = next) {
			next = STAILQ_NEXT(k, link);
			STAILQ_REMOVE_HEAD(held, link);
			if (err && k == j) {
				job_failed(ps, k, err);
				continue;
			}
			atomic_fetch_sub(k->queued, 1);
			free(k); /* (after a failure the rest of the chain was not posted either) */
		}
	}
}

static void *poster_main(void *arg)
{
	struct xd_rdma_poster *ps = arg;
	struct post_jobs held = STAILQ_HEAD_INITIALIZER(held);

	pthread_mutex_lock(&ps->lock);
	for (;;) {
		while (!ps->stop && STAILQ_EMPTY(&ps->queue))
			pthread_cond_wait(&ps->work, &ps->lock);
		if (ps->stop)
			break;
		STAILQ_CONCAT(&held, &ps->queue);
		ps->holding = true;
		pthread_mutex_unlock(&ps->lock);
		post_held(ps, &held);
		pthread_mutex_lock(&ps->lock);
		ps->holding = false;
		pthread_cond_broadcast(&ps->idle);
	}
	pthread_mutex_unlock(&ps->lock);
	return NULL;
}

/*
 * The loop: posts the thread could not make; each fails its connection. A job leaves the failed
 * list (and its connection's count) only after: by then rdma_disconnect() put the queue pair in
 * the error state, and what is posted to it is flushed, never sent.
 */
static void poster_failed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_rdma_poster *ps = arg;
	struct post_job *j;
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0) {
		/* (EAGAIN: read already) */
	}
	for (;;) {
		pthread_mutex_lock(&ps->lock);
		j = STAILQ_FIRST(&ps->failed); /* (the thread only appends) */
		pthread_mutex_unlock(&ps->lock);
		if (!j)
			break;
		ps->dev->rdma->post_failed(ps->dev, j->conn, j->err, j->failed_op);
		pthread_mutex_lock(&ps->lock);
		STAILQ_REMOVE_HEAD(&ps->failed, link);
		pthread_mutex_unlock(&ps->lock);
		atomic_fetch_sub(j->queued, 1);
		free(j);
	}
}

static void poster_free(struct xd_rdma_poster *ps)
{
	struct post_job *j;

	xd_event_free(ps->ev);
	if (ps->efd >= 0)
		close(ps->efd);
	STAILQ_CONCAT(&ps->queue, &ps->failed);
	while ((j = STAILQ_FIRST(&ps->queue))) {
		STAILQ_REMOVE_HEAD(&ps->queue, link);
		free(j);
	}
	pthread_cond_destroy(&ps->idle);
	pthread_cond_destroy(&ps->work);
	pthread_mutex_destroy(&ps->lock);
	free(ps);
}

/*
 * Whether @ctx's device is made in software (Soft-RoCE, siw): its sysfs entry has no bus device
 * behind it (/sys/class/infiniband/rxe0 is a virtual device; a NIC's links to its PCI function
 * as "device"). Only there does a post do the protocol's work; a NIC's doorbell costs less than
 * handing the chain to a thread and waking it, so the loop keeps posting for hardware.
 */
static bool device_is_software(const struct ibv_context *ctx)
{
	char path[IBV_SYSFS_PATH_MAX + sizeof("/device")];

	snprintf(path, sizeof(path), "%s/device", ctx->device->ibdev_path);
	return access(path, F_OK) != 0 && errno == ENOENT;
}

/*
 * Whether @dev gets a poster thread under rdma_post_thread: "auto" for a device made in
 * software; "always" and "never" override it, so that a test can run the loop's own post path
 * (what a NIC uses) on Soft-RoCE, or measure a NIC with the thread. Logs which, and why.
 */
static bool poster_wanted(const struct xd_rdma_dev *dev)
{
	enum xd_post_thread cfg = dev->rdma->d->cfg.rdma_post_thread;
	bool software = device_is_software(dev->ctx);
	bool want = cfg == XD_POST_THREAD_ALWAYS || (cfg == XD_POST_THREAD_AUTO && software);

	xd_log(XD_LOG_INFO, "%s: a %s device, rdma_post_thread %s: %s", dev->name,
	       software ? "software" : "hardware", xd_config_post_thread_name(cfg),
	       want ? "RDMA WRITEs are posted by a thread of their own" :
		      "the event loop posts its work requests");
	return want;
}

void xd_rdma_post_start(struct xd_rdma_dev *dev)
{
	struct xd_rdma_poster *ps;

	if (!poster_wanted(dev))
		return;
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		goto fail;
	ps->dev = dev;
	ps->efd = -1;
	STAILQ_INIT(&ps->queue);
	STAILQ_INIT(&ps->failed);
	pthread_mutex_init(&ps->lock, NULL);
	pthread_cond_init(&ps->work, NULL);
	pthread_cond_init(&ps->idle, NULL);
	ps->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ps->ev = ps->efd < 0 ? NULL :
			       event_new(dev->rdma->d->base, ps->efd, EV_READ | EV_PERSIST,
					 poster_failed_cb, ps);
	if (!ps->ev || event_add(ps->ev, NULL) < 0 ||
	    pthread_create(&ps->thread, NULL, poster_main, ps) != 0) {
		poster_free(ps);
		goto fail;
	}
	dev->poster = ps;
	return;
fail:
	xd_log(XD_LOG_WARN, "%s: no poster thread: the event loop posts work requests itself",
	       dev->name);
}

int xd_rdma_post(struct xd_rdma_dev *dev, struct ibv_qp *qp, uint32_t conn,
		 const struct ibv_send_wr *wr, atomic_uint *queued, bool bulk)
{
	struct xd_rdma_poster *ps = dev->poster;
	struct ibv_send_wr *bad;

	if ((!bulk && atomic_load(queued) == 0) || !ps)
		return -ibv_post_send(qp, (struct ibv_send_wr *)wr, &bad);
	struct post_job *j = job_copy(wr);
	if (!j)
		return -ENOMEM;
	j->qp = qp;
	j->conn = conn;
	j->queued = queued;
	atomic_fetch_add(queued, 1);
	pthread_mutex_lock(&ps->lock);
	bool was_empty = STAILQ_EMPTY(&ps->queue);
	STAILQ_INSERT_TAIL(&ps->queue, j, link);
	if (was_empty)
		pthread_cond_signal(&ps->work);
	pthread_mutex_unlock(&ps->lock);
	return 0;
}

/* Frees the jobs of @qp in @list (lock held), each taken off its connection's @queued. */
static void drop_jobs(struct post_jobs *list, const struct ibv_qp *qp, atomic_uint *queued)
{
	struct post_job *j, *tmp;

	for (j = STAILQ_FIRST(list); j; j = tmp) {
		tmp = STAILQ_NEXT(j, link);
		if (j->qp != qp)
			continue;
		STAILQ_REMOVE(list, j, post_job, link);
		atomic_fetch_sub(queued, 1);
		free(j);
	}
}

void xd_rdma_post_forget(struct xd_rdma_dev *dev, struct ibv_qp *qp, atomic_uint *queued)
{
	struct xd_rdma_poster *ps = dev->poster;

	if (!ps || atomic_load(queued) == 0)
		return;
	pthread_mutex_lock(&ps->lock);
	drop_jobs(&ps->queue, qp, queued);
	drop_jobs(&ps->failed, qp, queued); /* (the loop has not reached them: no need now) */
	while (atomic_load(queued) > 0)	    /* (the thread posts this queue pair's last ones) */
		pthread_cond_wait(&ps->idle, &ps->lock);
	pthread_mutex_unlock(&ps->lock);
}

void xd_rdma_post_stop(struct xd_rdma_dev *dev)
{
	struct xd_rdma_poster *ps = dev->poster;

	if (!ps)
		return;
	pthread_mutex_lock(&ps->lock);
	ps->stop = true;
	pthread_cond_signal(&ps->work);
	pthread_mutex_unlock(&ps->lock);
	pthread_join(ps->thread, NULL);
	dev->poster = NULL;
	poster_free(ps);
}
