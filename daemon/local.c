// SPDX-License-Identifier: MIT
/*
 * The local transport: memcpy between two mappings of this daemon, on worker threads so the
 * event loop never stalls behind a gigabyte. Workers talk to the loop through a mutex-guarded
 * queue and an eventfd; the loop owns every op and region, workers only touch the bytes, and a
 * finished job is reported through the callback its submitter gave (transport.h), never by
 * calling up into the operations.
 *
 * Copies are cut into slices of XD_COPY_SLICE (256 MiB, xferd.h) so that a cancel lands within
 * a few milliseconds, yet each memcpy call stays above glibc's non-temporal threshold (~192 MiB
 * here): smaller calls run at about 60% of the speed of one large copy on this machine
 * (shared/MACHINE-FACTS.md).
 *
 * A local copy of XD_COPY_STREAM bytes or more stores with non-temporal (streaming) stores, which
 * bypass the cache: a copy that large evicts most of what the cache held anyway, and streaming
 * stores skip reading each destination line before writing it. glibc's memmove switches to them
 * only above ~192 MiB here.
 *
 * Staging copies (RDMA file regions: a file into a staging buffer, or out of one) have a lane
 * of their own: XD_STAGING_WORKERS workers at SCHED_IDLE, so that any other runnable thread
 * (the event loop, the kernel's network and RDMA work) runs first and a chunk's copy takes the
 * CPU time that is left. It has time to spare: a transfer keeps several chunks ahead.
 *
 * Jobs that touch a file whose file system may never answer (FUSE, NFS) have a lane of their
 * own too (XD_REMOTE_FS_WORKERS): a dead server holds those workers, not everyone's.
 *
 * Every touch of client memory is guarded against SIGBUS: a page of a client's memfd can vanish
 * after registration (a hole punched in a hugetlb memfd with no free huge page left to refill
 * it; F_SEAL_SHRINK does not stop hole punching). The fault ends that job with EFAULT, as
 * Wayland's wl_shm does for its pools; a SIGBUS anywhere else keeps its previous action.
 */
#include <errno.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include "transport.h"

/*
 * Smaller copies run on the loop thread. Not more: 1 MiB copies between mappings inline made the
 * clients' 1 MiB pairings ~30% slower here, likely since a woken worker runs on the idle vCPU,
 * the waiting client's, whose L2 holds the buffers (scripts/BENCHMARKS.md, "1 MiB local copies").
 */
#define XD_COPY_INLINE (64ull << 10)
/*
 * Local copies of at least this many bytes use streaming stores. Measured here (one thread,
 * between two memfd mappings, the source just written and the destination just read as a
 * client does, p50): 8 MiB 27 GB/s streaming against 29-31 memmove, but 22 against 13 when other
 * work evicted the buffers from the cache first; 16 MiB 21-26 against 16-18 (15 against 10
 * evicted); 64 MiB 16 against 10.5. Below 8 MiB memmove wins (48 GB/s at 4 MiB: L2/L3 hits).
 * 32 MiB was tried on a host with a 300 MiB L3: memmove at 16 MiB was 25-40% faster when the
 * client had just written the destination (a streaming store over a dirty line waits for its
 * write-back), but 25% slower on reads when other work ran in between (it reads every uncached
 * destination line first). Neither wins in both states, and the daemon cannot see which one it
 * is in (scripts/BENCHMARKS.md, "Same-node copies").
 */
#define XD_COPY_STREAM (8ull << 20)
/*
 * Workers of the staging lane. Two: one transfer's next chunk fills while another's does.
 * SCHED_IDLE, measured in the Soft-RoCE VM (file reads 16/64/256 MiB against memory, one boot,
 * alternating with normal-priority fills): 1.10/0.98/0.95x against 0.84/0.93/0.86x; the fills
 * took CPU from rdma_rxe's work, which slowed the wire.
 */
#define XD_STAGING_WORKERS 2
/*
 * Workers of the lane of jobs that read or write a file whose file system may never answer
 * (FUSE, NFS, sshfs: region.c's fs_local; the TCP file lane's payloads of such files). A hung
 * server holds these, never the workers every other copy, registration and TCP file transfer
 * needs (with 2 copy workers, two reads stuck in a dead NFS mount stopped all of them).
 */
#define XD_REMOTE_FS_WORKERS 2

/*
 * One memmove of a copy: a stretch where neither side crosses a segment boundary. Where a side
 * is a file (not mapped), the piece is file I/O instead (mem.c) at the regions' offsets.
 */
struct xd_copy_piece {
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len;
	uint64_t dst_region, src_region; /**< ids, for the cause of a fault */
	const struct xd_region *dst_r, *src_r;
	uint64_t dst_off, src_off; /**< in the regions, for file I/O */
	bool file;		   /**< a side is a file: xd_mem_copy() */
};

struct xd_copy_job {
	STAILQ_ENTRY(xd_copy_job) link;
	xd_copy_done_cb copied; /**< a copy: whom to tell */
	uint8_t *populate;	/**< a populate job: the range to fault in (pieces unused) */
	uint64_t populate_len;
	xd_populate_cb populated;  /**< a populate job: whom to tell */
	void *arg;		   /**< for copied or populated */
	void (*work)(void *arg);   /**< a work job (xd_work_submit): what runs on the worker */
	void (*worked)(void *arg); /**< a work job: whom to tell */
	struct xd_copy_piece *pieces;
	uint32_t npieces;
	bool sync_only; /**< a sync job: fdatasync the pieces' target files (populated reports) */
	bool no_sync;	/**< a staging copy: its transfer fdatasyncs once, at its end */
	bool staging;	/**< runs in the staging lane (xd_copy_submit) */
	bool may_hang;	/**< runs in the remote file systems' lane (xd_work_submit, job_hangs) */
	bool stream;	/**< a large local copy: streaming stores (move_bytes) */
	uint64_t total;
	atomic_bool cancel;
	atomic_uint_fast64_t done;
	int err;
	char why[128]; /**< the cause of a fault ("" otherwise) */
};

STAILQ_HEAD(xd_job_list, xd_copy_job);

struct xd_copier {
	struct xd_daemon *d;
	pthread_t *threads;
	int nthreads;
	pthread_mutex_t lock;
	pthread_cond_t cond;	     /* a job in queue, or stop */
	pthread_cond_t staging_cond; /* a job in staging, or stop */
	pthread_cond_t remote_cond;  /* a job in remote, or stop */
	struct xd_job_list queue;    /* waiting for a worker */
	struct xd_job_list staging;  /* waiting for a worker of the staging lane */
	struct xd_job_list remote;   /* waiting for a worker of the remote file systems' lane */
	struct xd_job_list finished; /* waiting for the loop */
	bool stop;
	int efd;
	struct event *ev;
	unsigned outstanding; /* submitted, not yet reported to the loop */
};

/*
 * The SIGBUS guard. The handler is the process's, as a signal disposition is, and is installed
 * once; a thread arms its guard only around a memmove or page touch of client memory, so the
 * siglongjmp never crosses a frame other than that memmove's (never libevent's on the loop
 * thread, where small copies run). SA_NODEFER keeps SIGBUS unblocked in the handler, so the
 * jump needs no saved signal mask (sigsetjmp(env, 0): no system call per slice).
 */
struct bus_guard {
	sigjmp_buf env;
	uintptr_t lo, hi;	 /**< the client memory being touched: [lo, hi) */
	uintptr_t lo2, hi2;	 /**< the other side of a copy (empty for a populate) */
	volatile uintptr_t addr; /**< where the fault hit */
};

static __thread struct bus_guard *volatile bus_armed;
static struct sigaction bus_prev;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static int bus_install_err;

static bool bus_in(const struct bus_guard *g, uintptr_t a)
{
	return (a >= g->lo && a < g->hi) || (a >= g->lo2 && a < g->hi2);
}

/* Async-signal-safe: reads a thread-local, then jumps or restores the previous action. */
static void bus_handler(int sig, siginfo_t *si, void *uc)
{
	struct bus_guard *g = bus_armed;

	if (g && si->si_code > 0 && bus_in(g, (uintptr_t)si->si_addr)) {
		bus_armed = NULL;
		g->addr = (uintptr_t)si->si_addr;
		siglongjmp(g->env, 1);
	}
	/* Not ours: the previous action applies, to the re-executed fault or to a raise. */
	sigaction(SIGBUS, &bus_prev, NULL);
	if (si->si_code <= 0)
		raise(SIGBUS);
}

static void bus_install(void)
{
	struct sigaction sa = { .sa_sigaction = bus_handler, .sa_flags = SA_SIGINFO | SA_NODEFER };

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &bus_prev) < 0)
		bus_install_err = errno;
}

/* Installs the handler on first use. Returns 0 or -errno. */
static int bus_guard_init(void)
{
	pthread_once(&bus_once, bus_install);
	return -bus_install_err;
}

#if defined(__x86_64__)
/* Copies @n bytes (a multiple of 128) to @dst (64-byte aligned) with 32-byte streaming stores. */
__attribute__((target("avx2"))) static void stream_avx2(uint8_t *dst, const uint8_t *src,
							uint64_t n)
{
	for (uint64_t i = 0; i < n; i += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(src + i + 64));
		__m256i e = _mm256_loadu_si256((const __m256i *)(src + i + 96));
		_mm256_stream_si256((__m256i *)(dst + i), a);
		_mm256_stream_si256((__m256i *)(dst + i + 32), b);
		_mm256_stream_si256((__m256i *)(dst + i + 64), c);
		_mm256_stream_si256((__m256i *)(dst + i + 96), e);
	}
}

/* The same with 16-byte stores: SSE2 is in every x86-64 CPU. */
static void stream_sse2(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	for (uint64_t i = 0; i < n; i += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(src + i + 48));
		_mm_stream_si128((__m128i *)(dst + i), a);
		_mm_stream_si128((__m128i *)(dst + i + 16), b);
		_mm_stream_si128((__m128i *)(dst + i + 32), c);
		_mm_stream_si128((__m128i *)(dst + i + 48), e);
	}
}

/*
 * memcpy(@dst, @src, @n) of ranges that do not overlap, the bulk by streaming stores. Streaming
 * stores need an aligned destination: the head up to a 64-byte boundary and the tail under 128
 * bytes go by memcpy. The sfence orders the weakly ordered streaming stores before whatever
 * reports the copy done (a store the loop thread reads).
 */
static void stream_copy(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	uint64_t head = (uint64_t)(-(uintptr_t)dst & 63);
	uint64_t body = (n - head) & ~(uint64_t)127;

	memcpy(dst, src, head);
	if (__builtin_cpu_supports("avx2"))
		stream_avx2(dst + head, src + head, body);
	else
		stream_sse2(dst + head, src + head, body);
	_mm_sfence();
	memcpy(dst + head + body, src + head + body, n - head - body);
}
#endif

/*
 * memmove(@dst, @src, @n); by streaming stores (@stream) where the machine has them and the two
 * ranges do not overlap (a client may name overlapping ranges of one region: memmove's order).
 */
static void move_bytes(uint8_t *dst, const uint8_t *src, uint64_t n, bool stream)
{
#if defined(__x86_64__)
	bool apart = (uintptr_t)dst + n <= (uintptr_t)src || (uintptr_t)src + n <= (uintptr_t)dst;

	if (stream && apart && n >= 256) {
		stream_copy(dst, src, n);
		return;
	}
#else
	(void)stream;
#endif
	memmove(dst, src, n);
}

/*
 * memmove(@dst, @src, @n) of client memory (move_bytes(): @stream for streaming stores). Returns
 * 0, or -EFAULT with *@fault the address of a page that vanished under it.
 */
static int guarded_move(uint8_t *dst, const uint8_t *src, uint64_t n, bool stream, uintptr_t *fault)
{
	struct bus_guard g = { .lo = (uintptr_t)dst,
			       .hi = (uintptr_t)dst + n,
			       .lo2 = (uintptr_t)src,
			       .hi2 = (uintptr_t)src + n };

	if (sigsetjmp(g.env, 0)) {
		*fault = g.addr;
		return -EFAULT;
	}
	bus_armed = &g;
	atomic_signal_fence(memory_order_seq_cst);
	move_bytes(dst, src, n, stream);
	atomic_signal_fence(memory_order_seq_cst);
	bus_armed = NULL;
	return 0;
}

/* Reads a byte of every page of [@p, @p + @n). Returns 0 or -EFAULT. */
static int guarded_touch(const uint8_t *p, uint64_t n, uint64_t page)
{
	struct bus_guard g = { .lo = (uintptr_t)p, .hi = (uintptr_t)p + n };

	if (sigsetjmp(g.env, 0))
		return -EFAULT;
	bus_armed = &g;
	atomic_signal_fence(memory_order_seq_cst);
	for (uint64_t off = 0; off < n; off += page)
		(void)*(volatile const uint8_t *)(p + off);
	atomic_signal_fence(memory_order_seq_cst);
	bus_armed = NULL;
	return 0;
}

/*
 * Maps pages already in the memfd's page cache into this mapping by reading them: a read fault
 * maps its neighbours too (fault-around, 16 pages a fault here), writable, since a shared
 * memfd mapping needs no write notification, so the transfers writing them later take no
 * fault. Left undone, the first transfer into a touched region took a write fault per 4 KiB
 * page on the event loop (a 256 MiB window: 61,440 faults in its first two batches of 16 MiB
 * gets, which took 2-3x as long as the others). Measured on a 1 GiB memfd: 0.10 s here, once,
 * on the worker, against 0.35 s of faults (0.18 s with MADV_POPULATE_WRITE). Only an
 * optimisation: a failure (a hole punched meanwhile) is left to the copies, which fault under
 * their guard as before.
 */
static void map_resident(uint8_t *p, uint64_t n, uint64_t page)
{
	if (madvise(p, n, MADV_POPULATE_READ) < 0 && errno == EINVAL)
		(void)guarded_touch(p, n, page); /* kernels before 5.14 */
}

/*
 * Faults in every page of a new region, so that no transfer ever takes a page fault, without
 * stalling the event loop for the second a gigabyte of fresh memory can take. A page that
 * cannot be had (a hugetlb hole with the pool empty) is EFAULT, from madvise or the guard.
 */
static void run_populate(struct xd_copy_job *job)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	for (uint64_t off = 0; off < job->populate_len; off += XD_POPULATE_SLICE) {
		uint64_t n = job->populate_len - off < XD_POPULATE_SLICE ? job->populate_len - off :
									   XD_POPULATE_SLICE;
		/*
		 * Pages the client already touched are in the memfd's page cache: nothing to
		 * allocate, only to map, which reads do cheapest.
		 */
		if (xd_pages_resident(job->populate + off, (size_t)n)) {
			map_resident(job->populate + off, n, page);
			atomic_fetch_add_explicit(&job->done, n, memory_order_relaxed);
			continue;
		}
		if (madvise(job->populate + off, n, MADV_POPULATE_WRITE) < 0) {
			if (errno != EINVAL) {
				job->err = errno;
				return;
			}
			/* Kernels before 5.14: touch a byte of every page instead. */
			if (guarded_touch(job->populate + off, n, page) < 0) {
				job->err = EFAULT;
				return;
			}
		}
		atomic_fetch_add_explicit(&job->done, n, memory_order_relaxed);
	}
}

/* Ends @job with EFAULT and a cause naming the region whose page at @addr vanished. */
static void copy_faulted(struct xd_copy_job *job, const struct xd_copy_piece *p, uintptr_t addr)
{
	bool in_dst = addr >= (uintptr_t)p->dst && addr < (uintptr_t)p->dst + p->len;

	job->err = EFAULT;
	snprintf(job->why, sizeof(job->why),
		 "a page of region %llu vanished under the copy (hole punched in its memfd?)",
		 (unsigned long long)(in_dst ? p->dst_region : p->src_region));
}

/* A piece with a file side: file I/O in slices, each a point where a cancel lands. */
static void run_file_piece(struct xd_copy_job *job, const struct xd_copy_piece *p)
{
	for (uint64_t off = 0; off < p->len; off += XD_COPY_SLICE) {
		if (atomic_load_explicit(&job->cancel, memory_order_relaxed)) {
			job->err = ECANCELED;
			return;
		}
		uint64_t n = p->len - off < XD_COPY_SLICE ? p->len - off : XD_COPY_SLICE, done = 0;
		int err = xd_mem_copy(p->dst_r, p->dst_off + off, p->src_r, p->src_off + off, n,
				      &done, job->why, sizeof(job->why));
		atomic_fetch_add_explicit(&job->done, done, memory_order_relaxed);
		if (err) {
			job->err = err;
			return;
		}
	}
}

/* fdatasync of every target file of @job that asked for it (XFER_FILE_SYNC). */
static void run_syncs(struct xd_copy_job *job)
{
	for (uint32_t i = 0; i < job->npieces && !job->err; i++) {
		const struct xd_region *r = job->pieces[i].dst_r;
		if (i > 0 && r == job->pieces[i - 1].dst_r)
			continue;
		job->err = xd_mem_sync(r);
		if (job->err)
			snprintf(job->why, sizeof(job->why),
				 "fdatasync of the file of region %llu failed: %s",
				 (unsigned long long)r->id, strerror(job->err));
	}
}

static void run_job(struct xd_copy_job *job)
{
	uintptr_t fault = 0;

	if (job->work) {
		job->work(job->arg);
		return;
	}
	if (job->populate) {
		run_populate(job);
		return;
	}
	if (job->sync_only) {
		run_syncs(job);
		return;
	}
	for (uint32_t i = 0; i < job->npieces; i++) {
		const struct xd_copy_piece *p = &job->pieces[i];
		if (p->file) {
			run_file_piece(job, p);
			if (job->err)
				return;
			continue;
		}
		for (uint64_t off = 0; off < p->len; off += XD_COPY_SLICE) {
			if (atomic_load_explicit(&job->cancel, memory_order_relaxed)) {
				job->err = ECANCELED;
				return;
			}
			uint64_t n = p->len - off < XD_COPY_SLICE ? p->len - off : XD_COPY_SLICE;
			/* memmove: a client may hand both sides overlapping ranges of one region. */
			if (guarded_move(p->dst + off, p->src + off, n, job->stream, &fault) < 0) {
				copy_faulted(job, p, fault);
				return;
			}
			atomic_fetch_add_explicit(&job->done, n, memory_order_relaxed);
		}
	}
	if (!job->no_sync)
		run_syncs(job); /* COMPLETE means on disk for a target that asked */
}

static void job_finished(struct xd_copier *cp, struct xd_copy_job *job)
{
	uint64_t one = 1;

	pthread_mutex_lock(&cp->lock);
	STAILQ_INSERT_TAIL(&cp->finished, job, link);
	pthread_mutex_unlock(&cp->lock);
	if (write(cp->efd, &one, sizeof(one)) < 0) {
		/* Cannot fail for an eventfd short of overflow at 2^64-1 pending wakeups. */
	}
}

/* Runs the jobs of one lane (@q, signalled on @cond) until the copier stops. */
static void worker_loop(struct xd_copier *cp, struct xd_job_list *q, pthread_cond_t *cond)
{
	pthread_mutex_lock(&cp->lock);
	for (;;) {
		while (!cp->stop && STAILQ_EMPTY(q))
			pthread_cond_wait(cond, &cp->lock);
		struct xd_copy_job *job = STAILQ_FIRST(q);
		if (!job)
			break; /* stopping and nothing left */
		STAILQ_REMOVE_HEAD(q, link);
		pthread_mutex_unlock(&cp->lock);
		run_job(job);
		job_finished(cp, job);
		pthread_mutex_lock(&cp->lock);
	}
	pthread_mutex_unlock(&cp->lock);
}

static void *worker_main(void *arg)
{
	struct xd_copier *cp = arg;

	worker_loop(cp, &cp->queue, &cp->cond);
	return NULL;
}

static void *staging_worker_main(void *arg)
{
	struct xd_copier *cp = arg;
	const struct sched_param idle = { .sched_priority = 0 };

	/* (if refused, e.g. by a seccomp filter, the lane runs at normal priority) */
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
	worker_loop(cp, &cp->staging, &cp->staging_cond);
	return NULL;
}

static void *remote_worker_main(void *arg)
{
	struct xd_copier *cp = arg;

	worker_loop(cp, &cp->remote, &cp->remote_cond);
	return NULL;
}

/* Reports every finished job to whoever submitted it, on the loop thread. */
static void deliver_finished(struct xd_copier *cp)
{
	struct xd_job_list done = STAILQ_HEAD_INITIALIZER(done);
	struct xd_copy_job *job;

	pthread_mutex_lock(&cp->lock);
	STAILQ_CONCAT(&done, &cp->finished);
	pthread_mutex_unlock(&cp->lock);
	while ((job = STAILQ_FIRST(&done))) {
		STAILQ_REMOVE_HEAD(&done, link);
		cp->outstanding--;
		xd_copy_done_cb copied = job->copied;
		xd_populate_cb populated = job->populated;
		void (*worked)(void *) = job->worked;
		void *arg = job->arg;
		int err = job->err;
		uint64_t bytes = atomic_load(&job->done);
		char why[sizeof(job->why)];
		snprintf(why, sizeof(why), "%s", job->why);
		free(job->pieces);
		free(job);
		if (worked)
			worked(arg);
		else if (populated)
			populated(arg, err);
		else
			copied(arg, err, bytes, why[0] ? why : NULL);
	}
}

static void efd_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_copier *cp = arg;
	uint64_t n;

	uint64_t t0 = xd_now_us();

	if (read(cp->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		xd_log(XD_LOG_ERR, "eventfd read: %s", strerror(errno));
	deliver_finished(cp);
	xd_loop_note(cp->d, t0, "the copy workers' reports", NULL);
}

/* Starts the copier with @threads workers. Returns 0 or -errno (d->copier is set even then). */
static int copier_create(struct xd_daemon *d, int threads)
{
	struct xd_copier *cp = calloc(1, sizeof(*cp));

	if (!cp)
		return -ENOMEM;
	cp->d = d;
	cp->efd = -1;
	STAILQ_INIT(&cp->queue);
	STAILQ_INIT(&cp->staging);
	STAILQ_INIT(&cp->remote);
	STAILQ_INIT(&cp->finished);
	pthread_mutex_init(&cp->lock, NULL);
	pthread_cond_init(&cp->cond, NULL);
	pthread_cond_init(&cp->staging_cond, NULL);
	pthread_cond_init(&cp->remote_cond, NULL);
	d->copier = cp;
	cp->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cp->efd < 0)
		return -errno;
	cp->ev = event_new(d->base, cp->efd, EV_READ | EV_PERSIST, efd_cb, cp);
	int all = threads + XD_STAGING_WORKERS + XD_REMOTE_FS_WORKERS;
	cp->threads = calloc((size_t)all, sizeof(*cp->threads));
	if (!cp->ev || !cp->threads || event_add(cp->ev, NULL) < 0)
		return -ENOMEM;
	for (int n = 0; n < all; n++) {
		/* (the copy workers, then the staging lane's, then the remote file systems') */
		void *(*run)(void *) = n < threads			? worker_main :
				       n < threads + XD_STAGING_WORKERS ? staging_worker_main :
									  remote_worker_main;
		int rc = pthread_create(&cp->threads[n], NULL, run, cp);
		if (rc)
			return -rc;
		cp->nthreads++;
	}
	return 0;
}

/* Stops the workers (running jobs are cancelled and finish first) and frees the copier. */
static void copier_destroy(struct xd_copier *cp)
{
	struct xd_copy_job *job;

	if (!cp)
		return;
	pthread_mutex_lock(&cp->lock);
	cp->stop = true;
	STAILQ_FOREACH(job, &cp->queue, link)
		atomic_store(&job->cancel, true);
	STAILQ_FOREACH(job, &cp->staging, link)
		atomic_store(&job->cancel, true);
	STAILQ_FOREACH(job, &cp->remote, link)
		atomic_store(&job->cancel, true);
	pthread_cond_broadcast(&cp->cond);
	pthread_cond_broadcast(&cp->staging_cond);
	pthread_cond_broadcast(&cp->remote_cond);
	pthread_mutex_unlock(&cp->lock);
	for (int i = 0; i < cp->nthreads; i++)
		pthread_join(cp->threads[i], NULL);
	/* Workers are gone: everything submitted is in finished now (running ones completed). */
	deliver_finished(cp);
	xd_event_free(cp->ev);
	if (cp->efd >= 0)
		close(cp->efd);
	pthread_cond_destroy(&cp->cond);
	pthread_cond_destroy(&cp->staging_cond);
	pthread_cond_destroy(&cp->remote_cond);
	pthread_mutex_destroy(&cp->lock);
	free(cp->threads);
	cp->d->copier = NULL;
	free(cp);
}

/*
 * Whether @job reads or writes a file whose file system may not answer (FUSE, a network's:
 * region.c's fs_local): never on the loop thread, whatever its size.
 */
static bool job_hangs(const struct xd_copy_job *job)
{
	for (uint32_t i = 0; i < job->npieces; i++) {
		const struct xd_region *s = job->pieces[i].src_r, *t = job->pieces[i].dst_r;
		if ((s && !s->mem->mapped && !s->fs_local) ||
		    (t && !t->mem->mapped && !t->fs_local))
			return true;
	}
	return false;
}

/* Whether @job would fdatasync a file: never on the loop thread, whatever its size. */
static bool job_syncs(const struct xd_copy_job *job)
{
	for (uint32_t i = 0; i < job->npieces && !job->no_sync; i++)
		if (job->pieces[i].dst_r && !job->pieces[i].dst_r->mem->mapped &&
		    job->pieces[i].dst_r->sync)
			return true;
	return false;
}

/* Runs small jobs at once (still reported through the queue), large ones on a worker. */
static void job_start(struct xd_copier *cp, struct xd_copy_job *job, uint64_t size)
{
	struct xd_job_list *q = &cp->queue;
	pthread_cond_t *cond = &cp->cond;

	cp->outstanding++;
	job->may_hang = job->may_hang || job_hangs(job);
	if (size <= XD_COPY_INLINE && !job_syncs(job) && !job->may_hang) {
		run_job(job);
		job_finished(cp, job);
		return;
	}
	xd_busypoll_note_bulk(cp->d, size); /* (a poll would take a worker's CPU) */
	if (job->staging) { /* (an RDMA file's staging: its own lane, hanging or not) */
		q = &cp->staging;
		cond = &cp->staging_cond;
	} else if (job->may_hang) {
		q = &cp->remote;
		cond = &cp->remote_cond;
	}
	pthread_mutex_lock(&cp->lock);
	STAILQ_INSERT_TAIL(q, job, link);
	pthread_cond_signal(cond);
	pthread_mutex_unlock(&cp->lock);
}

int xd_populate_submit(struct xd_copier *cp, void *addr, uint64_t len, xd_populate_cb done,
		       void *arg)
{
	struct xd_copy_job *job = calloc(1, sizeof(*job));

	if (!job)
		return -ENOMEM;
	job->populate = addr;
	job->populate_len = len;
	job->populated = done;
	job->arg = arg;
	job_start(cp, job, len);
	return 0;
}

int xd_sync_submit(struct xd_copier *cp, const struct xd_seg *segs, uint32_t n, xd_populate_cb done,
		   void *arg)
{
	struct xd_copy_job *job = calloc(1, sizeof(*job));

	if (job)
		job->pieces = calloc(n, sizeof(*job->pieces));
	if (!job || !job->pieces) {
		free(job);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		job->pieces[i].dst_r = segs[i].region;
	job->npieces = n;
	job->sync_only = true;
	job->populated = done;
	job->arg = arg;
	job_start(cp, job, UINT64_MAX);
	return 0;
}

int xd_work_submit(struct xd_daemon *d, void (*work)(void *arg), void (*done)(void *arg), void *arg,
		   bool may_hang)
{
	/* (none once the workers stop: a job queued then would never run nor be reported) */
	struct xd_copy_job *job = d->copier && !d->copier->stop ? calloc(1, sizeof(*job)) : NULL;

	if (!job)
		return d->copier && !d->copier->stop ? -ENOMEM : -ECANCELED;
	job->work = work;
	job->worked = done;
	job->arg = arg;
	job->may_hang = may_hang;
	job_start(d->copier, job, UINT64_MAX); /* always on a worker: it may block */
	return 0;
}

/* The piece of @len bytes from @ss at @sj to @ds at @di. */
static struct xd_copy_piece piece_of(const struct xd_seg *ds, uint64_t di, const struct xd_seg *ss,
				     uint64_t sj, uint64_t len)
{
	const struct xd_region *dr = ds->region, *sr = ss->region;
	struct xd_copy_piece p = { .len = len,
				   .dst_region = dr->id,
				   .src_region = sr->id,
				   .dst_r = dr,
				   .src_r = sr,
				   .dst_off = ds->offset + di,
				   .src_off = ss->offset + sj,
				   .file = !dr->mem->mapped || !sr->mem->mapped };

	if (!p.file) {
		p.dst = dr->base + p.dst_off;
		p.src = sr->base + p.src_off;
	}
	return p;
}

/* Copy pieces from @src's segments to @dst's: boundaries of the two sides need not agree. */
static struct xd_copy_piece *plan_pieces(const struct xd_seg *dst, uint32_t ndst,
					 const struct xd_seg *src, uint32_t nsrc, uint32_t *n)
{
	struct xd_copy_piece *p = calloc((size_t)ndst + nsrc, sizeof(*p));
	uint32_t i = 0, j = 0, k = 0;
	uint64_t di = 0, sj = 0; /* bytes used of dst[i] and src[j] */

	if (!p)
		return NULL;
	while (i < ndst && j < nsrc) {
		const struct xd_seg *ds = &dst[i], *ss = &src[j];
		uint64_t len = ds->length - di < ss->length - sj ? ds->length - di :
								   ss->length - sj;
		p[k++] = piece_of(ds, di, ss, sj, len);
		di += len;
		sj += len;
		if (di == ds->length) {
			i++;
			di = 0;
		}
		if (sj == ss->length) {
			j++;
			sj = 0;
		}
	}
	*n = k;
	return p;
}

/* A copy job from @src's segments to @dst's; @sync: fdatasync target files that asked, after. */
static struct xd_copy_job *copy_job_new(const struct xd_seg *dst, uint32_t ndst,
					const struct xd_seg *src, uint32_t nsrc, bool sync,
					xd_copy_done_cb done, void *arg)
{
	uint32_t n;
	struct xd_copy_piece *pieces = plan_pieces(dst, ndst, src, nsrc, &n);
	struct xd_copy_job *job = pieces ? calloc(1, sizeof(*job)) : NULL;

	if (!job) {
		free(pieces);
		return NULL;
	}
	job->copied = done;
	job->arg = arg;
	job->pieces = pieces;
	job->npieces = n;
	job->no_sync = !sync;
	for (uint32_t i = 0; i < n; i++)
		job->total += pieces[i].len;
	return job;
}

int xd_copy_submit(struct xd_daemon *d, const struct xd_seg *dst, uint32_t ndst,
		   const struct xd_seg *src, uint32_t nsrc, xd_copy_done_cb done, void *arg)
{
	/* (none once the workers stop: a job queued then would never run nor be reported) */
	bool running = d->copier && !d->copier->stop;
	struct xd_copy_job *job = running ? copy_job_new(dst, ndst, src, nsrc, false, done, arg) :
					    NULL;

	if (!job)
		return running ? -ENOMEM : -ECANCELED;
	job->staging = true;
	job_start(d->copier, job, job->total);
	return 0;
}

static int local_copy(struct xd_daemon *d, const struct xd_seg *dst, uint32_t ndst,
		      const struct xd_seg *src, uint32_t nsrc, xd_copy_done_cb done, void *arg,
		      struct xd_copy_job **jobp)
{
	struct xd_copy_job *job = copy_job_new(dst, ndst, src, nsrc, true, done, arg);

	if (!job)
		return -ENOMEM;
	/*
	 * Set before the job can run: the caller keeps its op from ending while *jobp is set, and
	 * the job is freed only on the loop thread (this one), after @done ran.
	 */
	*jobp = job;
	job->stream = job->total >= XD_COPY_STREAM;
	/* Small copies run now but report through the queue, so the op.read reply goes first. */
	job_start(d->copier, job, job->total);
	return 0;
}

static void local_copy_cancel(struct xd_copy_job *job)
{
	atomic_store(&job->cancel, true);
}

static uint64_t local_copy_progress(const struct xd_copy_job *job)
{
	return atomic_load_explicit(&job->done, memory_order_relaxed);
}

bool xd_copier_busy(const struct xd_copier *cp)
{
	return cp && cp->outstanding > 0;
}

/* A mapping a region left behind, unmapped on a worker (unmap_later()). */
struct unmap_job {
	void *addr;
	size_t len;
};

static void unmap_work(void *arg)
{
	struct unmap_job *job = arg;

	if (munmap(job->addr, job->len) < 0)
		xd_log(XD_LOG_ERR, "munmap of a region's %zu bytes: %s", job->len, strerror(errno));
}

static int unmap_later(struct xd_daemon *d, void *addr, size_t len)
{
	struct unmap_job *job = malloc(sizeof(*job));
	int rc;

	if (!job)
		return -ENOMEM;
	*job = (struct unmap_job){ addr, len };
	rc = xd_work_submit(d, unmap_work, free, job, false);
	if (rc < 0)
		free(job);
	return rc;
}

static int local_start(struct xd_daemon *d)
{
	int rc = bus_guard_init();

	d->unmap_later = unmap_later;
	return rc ? rc : copier_create(d, d->cfg.copy_threads);
}

static void local_fini(struct xd_daemon *d)
{
	d->unmap_later = NULL;
	copier_destroy(d->copier);
}

static bool local_usable(const struct xd_daemon *d, const char **why)
{
	return true;
}

const struct xd_transport_ops xd_transport_local_ops = {
	.name = "local",
	.network = false,
	.preferred = false,
	.start = local_start,
	.fini = local_fini,
	.usable = local_usable,
	.copy = local_copy,
	.copy_cancel = local_copy_cancel,
	.copy_progress = local_copy_progress,
	/* No devices, no peers, no registrations: every other entry stays NULL. */
};
