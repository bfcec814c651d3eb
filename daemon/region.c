// SPDX-License-Identifier: MIT
/*
 * Regions: validating a client's memfd (sealed against shrinking, range inside it), mapping it
 * MAP_SHARED and populated, or taking a regular file that is never mapped (file I/O, mem.c),
 * and the reference-counted lifetime that lets a client vanish while a copy is still running
 * on its pages.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include "transport.h"

static const char *fd_type_name(mode_t mode)
{
	if (S_ISFIFO(mode))
		return "a pipe";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device";
	return "a file that is not a memfd";
}

/*
 * The type of @fd's file, from what the kernel knows already (AT_STATX_DONT_SYNC): an fstat
 * asks a FUSE or network file system, which may never answer.
 */
static const char *fd_type_cached(int fd)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) < 0 ||
	    !(stx.stx_mask & STATX_TYPE))
		return "not a memfd";
	return S_ISREG(stx.stx_mode) ? "a file that is not a memfd" : fd_type_name(stx.stx_mode);
}

/*
 * The memfd rules of PROTOCOL.md §4. Returns the memfd's size (*st its fstat), or fails the call.
 * The seals come first: only a memfd has them, and only once it is known to be one is it
 * fstat()ed (its file system is memory's; another file's may hang the loop in that call).
 */
static int64_t check_memfd(struct xd_call *call, int fd, struct stat *stp)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0)
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "region.register needs a memfd created with MFD_ALLOW_SEALING; "
			       "the fd is %s",
			       fd_type_cached(fd));
	if (fstat(fd, &st) < 0)
		return xd_fail(call, XP_E_FAILED, EBADF, "fstat of the fd failed: %s",
			       strerror(errno));
	if (!S_ISREG(st.st_mode))
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "region.register needs a memfd created with MFD_ALLOW_SEALING; "
			       "the fd is %s",
			       fd_type_name(st.st_mode));
	if (!(seals & F_SEAL_SHRINK))
		return xd_fail(call, XP_E_FAILED, EPERM,
			       "memfd is not sealed with F_SEAL_SHRINK (a client could truncate it "
			       "under a transfer)");
	int acc = fcntl(fd, F_GETFL) & O_ACCMODE;
	if (acc != O_RDWR)
		return xd_fail(call, XP_E_FAILED, EBADF, "memfd must be open read-write");
	*stp = st;
	return st.st_size;
}

static int check_range(struct xd_call *call, struct xd_region_args *a, uint64_t size)
{
	const char *what = a->file ? "file" : "memfd";

	uint64_t end;

	if (!a->has_length)
		a->length = a->offset < size ? size - a->offset : 0;
	if (__builtin_add_overflow(a->offset, a->length, &end))
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "offset + length overflows 64 bits (offset %llu, length %llu)",
			       (unsigned long long)a->offset, (unsigned long long)a->length);
	if (a->length == 0)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "region length must be > 0 (%s size %llu, offset %llu)", what,
			       (unsigned long long)size, (unsigned long long)a->offset);
	if (end > size)
		return xd_fail(call, XP_E_FAILED, EINVAL,
			       "range [%llu, %llu) passes the end of the %s (%llu bytes)",
			       (unsigned long long)a->offset, (unsigned long long)end, what,
			       (unsigned long long)size);
	return 0;
}

/*
 * Charges @r (one region, and its page-aligned mapping of the range at @offset: what a worker
 * will populate, whatever the range's length) to the connection, its uid and the daemon before
 * anything is mapped. Returns 0 or fails the call (EDQUOT naming the limit).
 */
static int charge_region(struct xd_call *call, struct xd_region *r, uint64_t offset)
{
	struct xd_conn *c = call->conn;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = offset & ~(page - 1);
	char msg[200];
	int rc;

	/* check_range() bounded offset + length by the memfd's size: no overflow here. */
	r->charge = (offset - start + r->length + page - 1) & ~(page - 1);
	rc = xd_charge(c->d, c->use, c->uid, XD_RES_REGIONS, 1, msg, sizeof(msg));
	if (rc == 0) {
		rc = xd_charge(c->d, c->use, c->uid, XD_RES_BYTES, r->charge, msg, sizeof(msg));
		if (rc)
			xd_uncharge(c->d, c->use, c->uid, XD_RES_REGIONS, 1);
	}
	if (rc) {
		r->charge = 0;
		return xd_fail(call, XP_E_FAILED, -rc, "%s", msg);
	}
	r->charged = true;
	return 0;
}

/* Gives back @r's charge to connection @c (NULL: it is gone and its counters with it). */
static void uncharge_conn(struct xd_conn *c, struct xd_region *r)
{
	if (c) {
		c->use[XD_RES_REGIONS]--;
		c->use[XD_RES_FDS] -= r->fd_charged;
		c->use[XD_RES_BYTES] -= r->charge;
	}
}

/* Gives back @r's charges, @c's and its uid's and the daemon's, for a region never mapped. */
static void uncharge_region(struct xd_conn *c, struct xd_region *r)
{
	uncharge_conn(c, r);
	xd_region_uncharge(r);
}

/* Maps the page-aligned cover of the range; a worker populates it (register_populated()). */
static int map_region(struct xd_call *call, struct xd_region *r, int fd, uint64_t offset)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = offset & ~(page - 1);

	r->map_len = (size_t)(offset - start + r->length);
	r->map = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
	if (r->map == MAP_FAILED) {
		r->map = NULL;
		return xd_fail(call, XP_E_FAILED, errno == ENOMEM ? ENOMEM : EBADF,
			       "mmap of the memfd failed: %s", strerror(errno));
	}
	r->base = (uint8_t *)r->map + (offset - start);
	return 0;
}

static json_t *region_result(struct xd_region *r)
{
	return json_pack("{s:I, s:I}", "region", (json_int_t)r->id, "length",
			 (json_int_t)r->length);
}

/*
 * A registration the client's reply waits for: a worker faults its pages in, and where
 * registering with the devices would stall the loop (xd_region_register_blocks()), a worker
 * does that too. The region has no id until then: no request can name it before its MRs exist.
 */
struct pending_reg {
	struct xd_region *r;
	uint64_t client; /**< the connection's id: it may close meanwhile */
	int64_t request;
	uint64_t t0;
	int err;       /**< of registering with the devices on a worker: 0 or -errno */
	char msg[256]; /**< its cause */
};

/*
 * Undoes a registration that did not happen: @c's charges (NULL: it is gone, and its counters
 * with it), then @r goes as any region does (unmapped, on a worker if large; uncharged).
 */
static void reg_undo(struct xd_conn *c, struct xd_region *r)
{
	uncharge_conn(c, r);
	r->refs = 1;
	xd_region_unref(r);
}

/* Files @r, registered with the transports, under @c: it gets its id now. */
static void region_file(struct xd_conn *c, struct xd_region *r, uint64_t t0)
{
	struct xd_daemon *d = r->d;

	r->id = ++d->next_region;
	r->owner = c;
	r->refs = 1;
	r->register_us = xd_now_us() - t0;
	TAILQ_INSERT_TAIL(&d->regions, r, link);
	xd_idmap_add(&d->region_ids, &r->by_id, r->id);
}

/*
 * Registers @r (mapped, populated or resident) with the transports and files it under @c.
 * Returns 0, or -errno with the cause in @msg; @r is then still the caller's to undo.
 */
static int region_commit(struct xd_conn *c, struct xd_region *r, uint64_t t0, char *msg, size_t len)
{
	int err = xd_region_register_transports(r, msg, len);

	if (err < 0)
		return err;
	region_file(c, r, t0);
	return 0;
}

/* On a worker: the devices pin every page of a large range, which takes long (~1 ms/MiB). */
static void register_devices_work(void *arg)
{
	struct pending_reg *pr = arg;

	pr->r->mr_on_worker = true;
	pr->err = xd_region_register_transports(pr->r, pr->msg, sizeof(pr->msg));
}

/* Back on the loop once a worker registered @pr's region with the devices (or failed to). */
static void register_devices_done(void *arg)
{
	struct pending_reg *pr = arg;
	struct xd_region *r = pr->r;
	struct xd_conn *c = xd_client_find(r->d, pr->client);

	if (!c) { /* the client went away meanwhile: nobody to tell */
		reg_undo(NULL, r);
	} else if (pr->err < 0) {
		xd_client_reply_error(c, pr->request, XP_E_FAILED, -pr->err, pr->msg);
		reg_undo(c, r);
	} else {
		region_file(c, r, pr->t0);
		xd_client_reply(c, pr->request, region_result(r));
	}
	free(pr);
}

/*
 * Registers @pr's region, its pages in memory, with the transports: on a worker when that would
 * stall the loop (register_devices_done() then answers and frees @pr), else at once. Returns 1
 * when a worker took it, 0 when registered and filed under @c, or -errno with the cause in
 * pr->msg (the region still the caller's to undo).
 */
static int register_devices(struct xd_conn *c, struct pending_reg *pr)
{
	int rc;

	if (!xd_region_register_blocks(pr->r))
		return region_commit(c, pr->r, pr->t0, pr->msg, sizeof(pr->msg));
	rc = xd_work_submit(c->d, register_devices_work, register_devices_done, pr, false);
	if (rc < 0) {
		snprintf(pr->msg, sizeof(pr->msg), "could not register with the RDMA devices: %s",
			 rc == -ECANCELED ? "the daemon is stopping" : strerror(-rc));
		return rc;
	}
	return 1;
}

static void register_populated(void *arg, int err)
{
	struct pending_reg *pr = arg;
	struct xd_region *r = pr->r;
	struct xd_conn *c = xd_client_find(r->d, pr->client);

	if (!c) { /* the client went away meanwhile: nobody to tell */
		reg_undo(NULL, r);
	} else if (err) {
		if (err == EFAULT) /* a hugetlb hole with the pool empty (local.c's guard) */
			snprintf(pr->msg, sizeof(pr->msg),
				 "a page of the memfd vanished while faulting it "
				 "in (hole punched in it?)");
		else
			snprintf(pr->msg, sizeof(pr->msg),
				 "faulting in the memfd's pages failed: %s", strerror(err));
		xd_client_reply_error(c, pr->request, XP_E_FAILED, err == ENOMEM ? ENOMEM : EFAULT,
				      pr->msg);
		reg_undo(c, r);
	} else if ((err = register_devices(c, pr)) < 0) {
		xd_client_reply_error(c, pr->request, XP_E_FAILED, -err, pr->msg);
		reg_undo(c, r);
	} else if (err == 1) {
		return; /* a worker registers it; register_devices_done() answers */
	} else {
		xd_client_reply(c, pr->request, region_result(r));
	}
	free(pr);
}

/* The memfd @fd (fstat()ed as @st) whose range @a @r maps: what register_resident() asks. */
struct reg_source {
	int fd;
	const struct stat *st;
	const struct xd_region_args *a;
};

/*
 * The fast path: a small range whose pages are all in memory already (the client touched
 * them) needs no populate worker, since populating it would allocate nothing; it is registered
 * and answered at once (or, with large MRs to make, by register_devices_done()). Returns 1 when
 * it took the call (answered, failed or deferred; @pr is taken), 0 to go the slow way.
 */
static int register_resident(struct xd_call *call, struct pending_reg *pr,
			     const struct reg_source *src)
{
	struct xd_region *r = pr->r;
	int rc;

	if (r->map_len > XD_REG_INLINE_MAX ||
	    !xd_memfd_resident(src->fd, src->st, src->a->offset, src->a->length, r->map,
			       r->map_len))
		return 0;
	rc = register_devices(call->conn, pr);
	if (rc == 1) {
		call->deferred = true;
		return 1;
	}
	if (rc < 0) {
		xd_fail(call, XP_E_FAILED, -rc, "%s", pr->msg);
		reg_undo(call->conn, r);
	} else {
		call->result = region_result(r);
	}
	free(pr);
	return 1;
}

/*
 * File registrations: every call the rules need on the client's fd (fstat, statx, fstatfs)
 * asks the file's file system, and one that never answers (a FUSE mount whose process waits,
 * as a hostile user's may; a dead network mount) would hold the thread making it forever. So
 * they run on a thread of their own per registration (not a copy worker: a hung one would be
 * lost to every client), which reports through an eventfd; past XD_FILE_PROBE_MS the loop
 * answers ETIMEDOUT and leaves the thread to clean up after itself whenever it returns. How
 * many may wait at once is bounded per connection and per daemon (each holds a thread and
 * the client's fd).
 */
#define XD_FILE_PROBE_MS 3000 /* the file system must answer a registration's checks in this */
#define XD_FILE_PROBES_CONN 4 /* registrations of one connection waiting for their checks */
#define XD_FILE_PROBES_MAX 32 /* threads checking files, the daemon's (given-up ones too) */
#define XD_FILE_PROBE_STACK (64u << 10)

enum { PROBE_RUNNING, PROBE_DONE, PROBE_ABANDONED };

/* Threads checking files now, answered or given up on (a process-wide count: it outlives @d). */
static atomic_uint probes_alive;

struct xd_file_probe {
	TAILQ_ENTRY(xd_file_probe) link; /**< in d->file_probes while the loop waits for it */
	struct xd_daemon *d;
	struct xd_region *r; /**< being made: the thread fills dio_align, fs_local, may_* */
	int fd;		     /**< the fd the client sent (the probe's until the region takes it) */
	int efd;	     /**< the thread's "done" to the loop */
	struct event *ev, *timer;
	uint64_t client; /**< the connection's id: it may close meanwhile */
	int64_t request;
	uint64_t t0;
	uint64_t offset, length;
	bool has_length;
	atomic_int state; /**< PROBE_*: who frees it (the loop, or the thread once given up) */
	const char *_Atomic doing; /**< the call the thread is in, for the timeout's cause */
	/* the thread's findings, read by the loop once state is PROBE_DONE */
	int fl;	      /**< F_GETFL */
	int stat_err; /**< fstat's errno, 0 */
	struct stat st;
	int direct; /**< xd_mem_file_direct_check(): 1, 0, or -errno with the cause in msg */
	char msg[200];
};

/* A file system whose calls end: a local disk's or memory's. Any other may hang (FUSE, NFS). */
static bool fs_is_local(long type)
{
	static const unsigned long local[] = {
		0xEF53,	    /* ext2, ext3, ext4 */
		0x58465342, /* xfs */
		0x9123683E, /* btrfs */
		0xF2F52010, /* f2fs */
		0xCA451A4E, /* bcachefs */
		0x2FC12FC1, /* zfs */
		0x01021994, /* tmpfs */
		0x858458f6, /* ramfs */
		0x958458f6, /* hugetlbfs */
	};

	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		if ((unsigned long)(unsigned int)type == local[i])
			return true;
	return false;
}

/* On the probe's thread: what the file rules need to know, each call possibly never ending. */
static void probe_run(struct xd_file_probe *p)
{
	struct statfs sf;

	p->fl = fcntl(p->fd, F_GETFL); /* (the open file's flags: no file system call) */
	atomic_store(&p->doing, "fstat");
	p->stat_err = fstat(p->fd, &p->st) < 0 ? errno : 0;
	if (p->fl < 0 || p->stat_err || !S_ISREG(p->st.st_mode) || (p->fl & O_PATH))
		return;
	uint64_t size = (uint64_t)p->st.st_size;
	uint64_t len = p->has_length ? p->length : p->offset < size ? size - p->offset : 0;
	atomic_store(&p->doing, "statx");
	p->direct = xd_mem_file_direct_check(p->r, p->fd, p->offset, len, p->msg, sizeof(p->msg));
	atomic_store(&p->doing, "fstatfs");
	p->r->fs_local = fstatfs(p->fd, &sf) == 0 && fs_is_local((long)sf.f_type);
}

static void *probe_main(void *arg)
{
	struct xd_file_probe *p = arg;
	uint64_t one = 1;

	probe_run(p);
	if (atomic_exchange(&p->state, PROBE_DONE) == PROBE_ABANDONED) {
		/* The loop gave up on it and forgot it: this thread's to free. */
		close(p->fd);
		close(p->efd);
		free(p->r);
		free(p);
	} else if (write(p->efd, &one, sizeof(one)) < 0) {
		/* Cannot fail for an eventfd short of overflow: the loop reads it. */
	}
	atomic_fetch_sub(&probes_alive, 1);
	return NULL;
}

/* Closes @fd where its file system cannot stall the loop (FUSE sends a FLUSH at each close). */
static void close_file_fd(int fd, bool fs_local)
{
	if (fs_local)
		close(fd);
	else
		xd_mem_close_later(fd);
}

/* On the loop: @p's events gone and @p out of the list; nothing of it is the thread's now. */
static void probe_forget(struct xd_file_probe *p)
{
	xd_event_free(p->ev);
	xd_event_free(p->timer);
	p->ev = p->timer = NULL;
	TAILQ_REMOVE(&p->d->file_probes, p, link);
}

/* On the loop, the thread done: the probe's fds and memory go (@r too unless @keep_r). */
static void probe_free(struct xd_file_probe *p, bool keep_r)
{
	close(p->efd);
	if (p->fd >= 0)
		close_file_fd(p->fd, p->r->fs_local);
	if (!keep_r)
		free(p->r);
	free(p);
}

/*
 * The file rules (PROTOCOL.md §4) on what @p's thread found: a regular file whose fd may be
 * read or written as asked, positioned writes possible (no O_APPEND). What the fd's access mode
 * allows is what the region may be used for. Returns the file's size, or fails @call.
 */
static int64_t check_file(struct xd_call *call, struct xd_file_probe *p)
{
	struct xd_region *r = p->r;
	int fl = p->fl;

	if (fl < 0 || p->stat_err)
		return xd_fail(call, XP_E_FAILED, EBADF, "fstat of the fd failed: %s",
			       strerror(p->stat_err ? p->stat_err : EBADF));
	if (!S_ISREG(p->st.st_mode) || (fl & O_PATH))
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "a file region needs an fd of a regular file open for reading or "
			       "writing; the fd is %s",
			       (fl & O_PATH) ? "an O_PATH fd" : fd_type_name(p->st.st_mode));
	if (fl & O_APPEND)
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "a file region's fd must not be O_APPEND (bytes land at their "
			       "offsets)");
	r->may_read = (fl & O_ACCMODE) != O_WRONLY;
	r->may_write = (fl & O_ACCMODE) != O_RDONLY;
	return p->st.st_size;
}

/* A file region from what @p's thread found: checked, charged one region and no bytes, filed. */
static int file_region_make(struct xd_call *call, struct xd_file_probe *p)
{
	struct xd_conn *c = call->conn;
	struct xd_region *r = p->r;
	struct xd_region_args a = {
		.offset = p->offset, .length = p->length, .has_length = p->has_length, .file = true
	};
	char msg[200];
	int rc;

	int64_t size = check_file(call, p);
	if (size < 0 || (rc = check_range(call, &a, (uint64_t)size)))
		return size < 0 ? (int)size : rc;
	if (p->direct < 0)
		return xd_fail(call, XP_E_FAILED, -p->direct, "%s", p->msg);
	rc = xd_charge(c->d, c->use, c->uid, XD_RES_REGIONS, 1, msg, sizeof(msg));
	if (rc == 0) {
		rc = xd_charge(c->d, c->use, c->uid, XD_RES_FDS, 1, msg, sizeof(msg));
		if (rc)
			xd_uncharge(c->d, c->use, c->uid, XD_RES_REGIONS, 1);
	}
	if (rc)
		return xd_fail(call, XP_E_FAILED, -rc, "%s", msg);
	r->charged = r->fd_charged = true;
	r->fd = p->fd;
	p->fd = -1; /* the region's now */
	r->d = c->d;
	r->pid = c->pid;
	r->uid = c->uid;
	r->mem = p->direct ? &xd_mem_file_direct : &xd_mem_file;
	r->file_off = a.offset;
	r->length = a.length;
	region_file(c, r, p->t0);
	return 0;
}

/* On the loop, @p's thread done (through the eventfd or found so at the deadline): answers. */
static void probe_finish(struct xd_file_probe *p)
{
	struct xd_conn *c = xd_client_find(p->d, p->client);
	struct xd_call call = { .conn = c, .id = p->request };

	if (!c) { /* the client went away meanwhile: nobody to tell */
		probe_free(p, false);
		return;
	}
	if (file_region_make(&call, p) < 0) {
		xd_client_reply_error(c, p->request, call.code, call.cause_errno, call.message);
		probe_free(p, false);
		return;
	}
	xd_client_reply(c, p->request, region_result(p->r));
	probe_free(p, true);
}

static void probe_done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_file_probe *p = arg;
	uint64_t n;

	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		return;
	if (atomic_load(&p->state) != PROBE_DONE)
		return;
	probe_forget(p);
	probe_finish(p);
}

/*
 * Gives up on @p (the loop's part of it forgotten first, so that the thread may close the
 * eventfd the loop watched). Returns false if the thread had finished after all: @p is still
 * the loop's.
 */
static bool probe_abandon(struct xd_file_probe *p)
{
	probe_forget(p);
	return atomic_exchange(&p->state, PROBE_ABANDONED) != PROBE_DONE;
}

static void probe_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct xd_file_probe *p = arg;
	struct xd_daemon *d = p->d;
	uint64_t client = p->client;
	int64_t request = p->request;
	const char *doing = atomic_load(&p->doing);

	if (!probe_abandon(p)) {
		probe_finish(p);
		return;
	}
	/* (@p is the thread's now, and may be freed any moment: only the copies above are used) */
	struct xd_conn *c = xd_client_find(d, client);
	xd_log(XD_LOG_WARN,
	       "a file region's %s did not return within %u ms: its file system does not answer "
	       "(client %llu's registration fails ETIMEDOUT)",
	       doing ? doing : "fcntl", (unsigned)XD_FILE_PROBE_MS, (unsigned long long)client);
	if (c) {
		char why[200];
		snprintf(why, sizeof(why),
			 "the file's file system did not answer %s within %u ms (a hung FUSE or "
			 "network mount?); the file is not registered",
			 doing ? doing : "fcntl", (unsigned)XD_FILE_PROBE_MS);
		xd_client_reply_error(c, request, XP_E_FAILED, ETIMEDOUT, why);
	}
}

/* How many of @c's file registrations wait for their checks. */
static unsigned probes_of(struct xd_conn *c)
{
	struct xd_file_probe *p;
	unsigned n = 0;

	TAILQ_FOREACH(p, &c->d->file_probes, link)
		n += p->client == c->id;
	return n;
}

/* Starts @p's thread: detached, a small stack. Returns 0 or -errno. */
static int probe_start(struct xd_file_probe *p)
{
	pthread_attr_t at;
	pthread_t t;
	int rc;

	if (atomic_fetch_add(&probes_alive, 1) >= XD_FILE_PROBES_MAX) {
		atomic_fetch_sub(&probes_alive, 1);
		return -EAGAIN;
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, XD_FILE_PROBE_STACK);
	rc = pthread_create(&t, &at, probe_main, p);
	pthread_attr_destroy(&at);
	if (rc)
		atomic_fetch_sub(&probes_alive, 1);
	return -rc;
}

/*
 * The probe of @fd's file for @call, which takes @fd (closed off the loop if no probe could be
 * made): its events made, in d->file_probes.
 */
static int probe_new(struct xd_call *call, int fd, const struct xd_region_args *a,
		     struct xd_file_probe **out)
{
	struct xd_conn *c = call->conn;
	struct xd_file_probe *p = calloc(1, sizeof(*p));
	struct timeval tv = { XD_FILE_PROBE_MS / 1000, XD_FILE_PROBE_MS % 1000 * 1000 };

	if (!p || !(p->r = calloc(1, sizeof(*p->r)))) {
		free(p);
		xd_close_client_fd(fd);
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	}
	*p = (struct xd_file_probe){ .d = c->d,
				     .r = p->r,
				     .client = c->id,
				     .request = call->id,
				     .t0 = xd_now_us(),
				     .offset = a->offset,
				     .length = a->length,
				     .has_length = a->has_length,
				     .fd = fd,
				     .efd = -1 };
	p->r->fd = -1;
	p->r->sync = a->sync;
	snprintf(p->r->name, sizeof(p->r->name), "%s", a->name);
	TAILQ_INSERT_TAIL(&c->d->file_probes, p, link);
	*out = p;
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->efd >= 0) {
		p->ev = event_new(c->d->base, p->efd, EV_READ | EV_PERSIST, probe_done_cb, p);
		p->timer = evtimer_new(c->d->base, probe_timeout_cb, p);
	}
	if (!p->ev || !p->timer || event_add(p->ev, NULL) < 0 || evtimer_add(p->timer, &tv) < 0)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	return 0;
}

/*
 * A file region over @fd (taken: kept by the region, else closed off the loop, since its close
 * is a FLUSH on FUSE), the file rules checked on a thread of its own (above), the reply once
 * they are (deferred), or ETIMEDOUT.
 */
static int register_file(struct xd_call *call, int fd, struct xd_region_args *a)
{
	struct xd_file_probe *p = NULL;
	int rc;

	if (probes_of(call->conn) >= XD_FILE_PROBES_CONN) {
		xd_close_client_fd(fd);
		return xd_fail(call, XP_E_FAILED, EAGAIN,
			       "%u file registrations of this client already wait for their file "
			       "systems to answer",
			       (unsigned)XD_FILE_PROBES_CONN);
	}
	rc = probe_new(call, fd, a, &p);
	if (rc == 0 && (rc = probe_start(p)) == -EAGAIN)
		rc = xd_fail(call, XP_E_FAILED, EAGAIN,
			     "%u file registrations already wait for their file systems to answer "
			     "(the daemon's limit)",
			     (unsigned)XD_FILE_PROBES_MAX);
	else if (rc < 0 && !call->code)
		rc = xd_fail(call, XP_E_FAILED, -rc,
			     "could not start a thread to check the file: %s", strerror(-rc));
	if (rc < 0) {
		if (p) { /* (no thread: the loop's) */
			probe_forget(p);
			probe_free(p, false);
		}
		return rc;
	}
	call->deferred = true;
	return 0;
}

void xd_region_probes_fini(struct xd_daemon *d)
{
	struct xd_file_probe *p;

	/* Their clients are gone: nobody waits for an answer. */
	while ((p = TAILQ_FIRST(&d->file_probes)))
		/* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): probe_forget() took @p off the list */
		if (!probe_abandon(p))
			probe_free(p, false);
}

/*
 * Validates and maps now; pages not in memory yet are faulted in by a worker (a gigabyte of
 * fresh memory takes long enough to stall every other client and peer), and the reply comes
 * after that; a small range already in memory is answered at once (register_resident()). A
 * range large enough that pinning it for the RDMA devices would stall the loop is registered
 * with them on a worker too (register_devices()), before the reply.
 */
static int register_memfd(struct xd_call *call, int fd, struct xd_region_args *a)
{
	struct xd_conn *c = call->conn;
	struct pending_reg *pr = NULL;
	struct xd_region *r = NULL;
	struct stat st;
	int rc = 0;
	int64_t size = check_memfd(call, fd, &st);

	if (size < 0 || (rc = check_range(call, a, (uint64_t)size)))
		goto out;
	r = calloc(1, sizeof(*r));
	pr = calloc(1, sizeof(*pr));
	if (!r || !pr) {
		rc = xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
		goto out;
	}
	r->d = c->d;
	r->pid = c->pid;
	r->uid = c->uid;
	r->length = a->length;
	r->mem = &xd_mem_memfd;
	r->fd = -1;
	r->may_read = r->may_write = true;
	/*
	 * Charged before mapping, so that registrations in flight cannot get past the limits
	 * and the daemon never populates memory nobody was charged for.
	 */
	if ((rc = charge_region(call, r, a->offset)))
		goto out;
	if ((rc = map_region(call, r, fd, a->offset)))
		goto err_uncharge;
	snprintf(r->name, sizeof(r->name), "%s", a->name);
	*pr = (struct pending_reg){
		.r = r, .client = c->id, .request = call->id, .t0 = xd_now_us()
	};
	if (register_resident(call, pr, &(struct reg_source){ fd, &st, a }))
		return call->result || call->deferred ? 0 : -call->cause_errno;
	rc = xd_populate_submit(c->d->copier, r->map, r->map_len, register_populated, pr);
	if (rc) {
		munmap(r->map, r->map_len);
		rc = xd_fail(call, XP_E_INTERNAL, -rc, "could not start faulting in the pages");
		goto err_uncharge;
	}
	call->deferred = true;
	return 0;

err_uncharge:
	uncharge_region(c, r);
out:
	free(r);
	free(pr);
	return size < 0 ? (int)size : rc;
}

int xd_region_register(struct xd_call *call, int fd, struct xd_region_args *a)
{
	if (a->file)
		return register_file(call, fd, a);
	int rc = register_memfd(call, fd, a);

	/* (the mapping is what a memfd region keeps; an fd refused as one may be a FUSE file's) */
	xd_close_client_fd(fd);
	return rc;
}

struct xd_region *xd_region_lookup(struct xd_call *call, uint64_t id)
{
	/* (by the index, not a walk of d->regions: a request names up to 1024 of them) */
	struct xd_region *r =
		XD_IDMAP_OBJ(xd_idmap_get(&call->conn->d->region_ids, id), struct xd_region, by_id);

	if (!r) {
		xd_fail(call, XP_E_FAILED, ENOENT, "no region %llu", (unsigned long long)id);
		return NULL;
	}
	if (r->owner != call->conn) {
		xd_fail(call, XP_E_FAILED, EPERM, "region %llu belongs to another client",
			(unsigned long long)id);
		return NULL;
	}
	return r;
}

void xd_region_release(struct xd_region *r)
{
	TAILQ_REMOVE(&r->d->regions, r, link);
	xd_idmap_del(&r->d->region_ids, &r->by_id);
	/*
	 * The connection's charge goes now; its uid's and the daemon's when the mapping does
	 * (xd_region_unref): an operation may hold the pages after deregistration.
	 */
	uncharge_conn(r->owner, r);
	r->owner = NULL;
	xd_region_unref(r);
}

json_t *xd_region_to_json(const struct xd_region *r)
{
	return json_pack("{s:I, s:s, s:s, s:b, s:b, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:b, s:o}",
			 "region", (json_int_t)r->id, "name", r->name, "kind", r->mem->name,
			 "readable", r->may_read, "writable", r->may_write, "client",
			 (json_int_t)r->owner->id, "pid", (int)r->pid, "uid", (json_int_t)r->uid,
			 "length", (json_int_t)r->length, "ops", (json_int_t)r->live_ops,
			 "register_us", (json_int_t)r->register_us, "rdma_register_us",
			 (json_int_t)r->rdma_register_us, "rdma_register_on_worker",
			 r->mr_on_worker, "devices", xd_region_devices_json(r));
}
