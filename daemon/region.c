// SPDX-License-Identifier: MIT
/*
 * Regions: validating a client's memfd (sealed against shrinking, range inside it), mapping it
 * MAP_SHARED and populated, or taking a regular file that is never mapped (file I/O, mem.c),
 * and the reference-counted lifetime that lets a client vanish while a copy is still running
 * on its pages.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

/* The memfd rules of PROTOCOL.md §4. Returns the memfd's size (*st its fstat), or fails the call. */
static int64_t check_memfd(struct xd_call *call, int fd, struct stat *stp)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return xd_fail(call, XP_E_FAILED, EBADF, "fstat of the fd failed: %s",
			       strerror(errno));
	int seals = fcntl(fd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || seals < 0)
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "region.register needs a memfd created with MFD_ALLOW_SEALING; "
			       "the fd is %s",
			       S_ISREG(st.st_mode) ? "a file that is not a memfd" :
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
	rc = xd_work_submit(c->d, register_devices_work, register_devices_done, pr);
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
 * The file rules (PROTOCOL.md §4): a regular file whose fd may be read or written as asked,
 * positioned writes possible (no O_APPEND). What the fd's access mode allows is what the region
 * may be used for. Returns the file's size, or fails the call.
 */
static int64_t check_file(struct xd_call *call, int fd, struct xd_region *r)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fstat(fd, &st) < 0)
		return xd_fail(call, XP_E_FAILED, EBADF, "fstat of the fd failed: %s",
			       strerror(errno));
	if (!S_ISREG(st.st_mode) || (fl & O_PATH))
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "a file region needs an fd of a regular file open for reading or "
			       "writing; the fd is %s",
			       (fl & O_PATH) ? "an O_PATH fd" : fd_type_name(st.st_mode));
	if (fl & O_APPEND)
		return xd_fail(call, XP_E_FAILED, EBADF,
			       "a file region's fd must not be O_APPEND (bytes land at their "
			       "offsets)");
	r->may_read = (fl & O_ACCMODE) != O_WRONLY;
	r->may_write = (fl & O_ACCMODE) != O_RDONLY;
	return st.st_size;
}

/* A file region: checked, its fd kept (a duplicate), charged one region and no bytes. */
static int register_file(struct xd_call *call, int fd, struct xd_region_args *a)
{
	struct xd_conn *c = call->conn;
	struct xd_region *r = calloc(1, sizeof(*r));
	char msg[200];
	int rc;

	if (!r)
		return xd_fail(call, XP_E_INTERNAL, ENOMEM, "out of memory");
	int64_t size = check_file(call, fd, r);
	if (size < 0 || (rc = check_range(call, a, (uint64_t)size))) {
		free(r);
		return size < 0 ? (int)size : rc;
	}
	int direct = xd_mem_file_direct_check(r, fd, a->offset, a->length, msg, sizeof(msg));
	if (direct < 0) {
		free(r);
		return xd_fail(call, XP_E_FAILED, -direct, "%s", msg);
	}
	rc = xd_charge(c->d, c->use, c->uid, XD_RES_REGIONS, 1, msg, sizeof(msg));
	if (rc) {
		free(r);
		return xd_fail(call, XP_E_FAILED, -rc, "%s", msg);
	}
	r->charged = true;
	r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (r->fd < 0) {
		rc = xd_fail(call, XP_E_FAILED, errno == EMFILE ? EMFILE : ENOMEM,
			     "could not keep the file's fd: %s", strerror(errno));
		uncharge_region(c, r);
		free(r);
		return rc;
	}
	r->d = c->d;
	r->pid = c->pid;
	r->uid = c->uid;
	r->mem = direct ? &xd_mem_file_direct : &xd_mem_file;
	r->file_off = a->offset;
	r->length = a->length;
	r->sync = a->sync;
	snprintf(r->name, sizeof(r->name), "%s", a->name);
	r->id = ++c->d->next_region;
	r->owner = c;
	r->refs = 1;
	TAILQ_INSERT_TAIL(&c->d->regions, r, link);
	xd_idmap_add(&c->d->region_ids, &r->by_id, r->id);
	call->result = region_result(r);
	return 0;
}

/*
 * Validates and maps now; pages not in memory yet are faulted in by a worker (a gigabyte of
 * fresh memory takes long enough to stall every other client and peer), and the reply comes
 * after that; a small range already in memory is answered at once (register_resident()). A
 * range large enough that pinning it for the RDMA devices would stall the loop is registered
 * with them on a worker too (register_devices()), before the reply.
 */
int xd_region_register(struct xd_call *call, int fd, struct xd_region_args *a)
{
	struct xd_conn *c = call->conn;
	struct pending_reg *pr = NULL;
	struct xd_region *r = NULL;
	struct stat st;
	int rc = 0;

	if (a->file)
		return register_file(call, fd, a);
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
