// SPDX-License-Identifier: MIT
/*
 * LD_PRELOAD fault injector for tests/rdma/run.sh: ibv_post_send() fails with ENOMEM (as a
 * provider's does when its send queue or memory runs out) at the moment the test chooses, so
 * that the daemon's handling of a failed post runs, on the device's poster thread or on the
 * event loop (daemon/rdma_post.c). Built by scripts/rdma-make.mk, never linked into anything.
 *
 * ibv_post_send() is an inline of <infiniband/verbs.h> calling qp->context->ops.post_send, so it
 * cannot be interposed by name. ibv_create_qp() can: librdmacm's rdma_create_qp() reaches it
 * through the inline ibv_create_qp_ex() (whose attributes name only the PD; librdmacm 44
 * imports ibv_create_qp@IBVERBS_1.1). After the real call, the context's ops.post_send is
 * replaced by post_send_wrap(), once per context.
 *
 * XFERD_TEST_POSTFAIL=PREFIX arms nothing by itself. While the file PREFIX.write exists, RDMA
 * WRITE work requests are counted: the file may hold a number N (read when the file is first
 * seen); the post whose chain holds the N+1th fails there, as a provider's does: the requests
 * before it are posted, it and those after are not, and *bad_wr is it. Work requests, not calls: the poster thread joins neighbouring chains into
 * one call, so calls would not count alike with and without it. The file is then removed and
 * PREFIX.write.fired made, holding "poster thread" or "event loop": which thread made the post
 * (xferd's event loop is its main thread). One shot: the test makes the file again for another.
 * PREFIX.read does the same for RDMA READs.
 *
 * A queue pair whose post failed must not take more work that reaches the wire (a DONE posted
 * behind the failed RDMA WRITEs would tell the owner its bytes arrived): every later post to
 * it while it is not in the error state (ibv_query_qp) appends a line to PREFIX.violation. The
 * failing call returns only after FAIL_DELAY_US, so that the loop queues more work for the
 * queue pair meanwhile, which the poster thread then finds before the loop has heard of the
 * failure: without that, the chance that anything comes between them is small, and a daemon
 * that posts it would pass most runs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define MAX_CONTEXTS 16
#define FAIL_DELAY_US 200000

typedef int (*post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);

/* One trigger file: its path and what the current arming still lets through. */
struct trigger {
	enum ibv_wr_opcode opcode;
	const char *suffix;
	char path[4096];
	bool counting; /* the file was seen: @pass was read from it */
	long pass;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct ibv_context *ctx;
	post_send_fn real;
} patched[MAX_CONTEXTS];
static int npatched;
static struct ibv_qp *failed_qps[MAX_CONTEXTS * 64]; /* whose post failed; NULL: free slot */
static char violation_path[4096];
static struct trigger triggers[] = {
	{ .opcode = IBV_WR_RDMA_WRITE, .suffix = "write" },
	{ .opcode = IBV_WR_RDMA_READ, .suffix = "read" },
};

static post_send_fn real_of(const struct ibv_context *ctx)
{
	post_send_fn fn = NULL;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < npatched && !fn; i++)
		if (patched[i].ctx == ctx)
			fn = patched[i].real;
	pthread_mutex_unlock(&lock);
	return fn;
}

/* How many work requests of the chain @wr are @opcode. */
static long chain_count(const struct ibv_send_wr *wr, enum ibv_wr_opcode opcode)
{
	long n = 0;

	for (; wr; wr = wr->next)
		n += wr->opcode == opcode;
	return n;
}

/* The @k-th (from 0) request of @opcode in @wr's chain; NULL if there are not that many. */
static struct ibv_send_wr *chain_nth(struct ibv_send_wr *wr, enum ibv_wr_opcode opcode, long k)
{
	for (; wr; wr = wr->next)
		if (wr->opcode == opcode && k-- == 0)
			return wr;
	return NULL;
}

/* The number in @path (0 if none). */
static long read_pass(const char *path)
{
	char buf[32] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf) - 1) < 0)
			buf[0] = '\0';
		close(fd);
	}
	return strtol(buf, NULL, 10);
}

/* Writes PATH.fired (through a temporary name, so the test never reads it half written). */
static void mark_fired(const char *path, const char *who)
{
	char tmp[4200], fired[4200];

	snprintf(tmp, sizeof(tmp), "%s.fired.tmp", path);
	snprintf(fired, sizeof(fired), "%s.fired", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, who, strlen(who)) < 0 || write(fd, "\n", 1) < 0) {
		/* (the test then sees an empty file and says so) */
	}
	close(fd);
	rename(tmp, fired);
}

/*
 * The request of @wr's chain whose post must fail (a trigger matching it is armed and has no
 * pass left for it), or NULL.
 */
static struct ibv_send_wr *must_fail(struct ibv_send_wr *wr)
{
	struct ibv_send_wr *fail = NULL;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < sizeof(triggers) / sizeof(triggers[0]) && !fail; i++) {
		struct trigger *t = &triggers[i];
		long n = t->path[0] ? chain_count(wr, t->opcode) : 0;
		if (n == 0)
			continue;
		if (access(t->path, F_OK) != 0) {
			t->counting = false;
			continue;
		}
		if (!t->counting) {
			t->counting = true;
			t->pass = read_pass(t->path);
		}
		if (t->pass >= n) {
			t->pass -= n;
			continue;
		}
		fail = chain_nth(wr, t->opcode, t->pass);
		unlink(t->path);
		t->counting = false;
		mark_fired(t->path, gettid() == getpid() ? "event loop" : "poster thread");
	}
	pthread_mutex_unlock(&lock);
	return fail;
}

/* Finds @qp in failed_qps (@qp NULL: a free slot); -1 if it is not there. */
static int failed_slot(const struct ibv_qp *qp)
{
	for (size_t i = 0; i < sizeof(failed_qps) / sizeof(failed_qps[0]); i++)
		if (failed_qps[i] == qp)
			return (int)i;
	return -1;
}

/* A post to @qp after one of its posts failed: it must be in the error state. */
static void check_after_failure(struct ibv_qp *qp, const struct ibv_send_wr *wr)
{
	/* (by version: unversioned, this library's reference binds to the 1.0 compat one) */
	static int (*query)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_UNKNOWN };
	struct ibv_qp_init_attr init;

	pthread_mutex_lock(&lock);
	bool failed = failed_slot(qp) >= 0;
	if (!query)
		query = dlvsym(RTLD_NEXT, "ibv_query_qp", "IBVERBS_1.1");
	pthread_mutex_unlock(&lock);
	if (!failed ||
	    (query && query(qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR))
		return;
	FILE *f = fopen(violation_path, "ae");
	if (f) {
		fprintf(f, "qp %u: a post (opcode %d) by the %s after a failed post, in state %d\n",
			qp->qp_num, (int)wr->opcode,
			gettid() == getpid() ? "event loop" : "poster thread", (int)attr.qp_state);
		fclose(f);
	}
}

static int post_send_wrap(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	post_send_fn real = real_of(qp->context);

	struct ibv_send_wr *fail, *before;

	check_after_failure(qp, wr);
	if (!real)
		return EINVAL;
	if (!(fail = must_fail(wr)))
		return real(qp, wr, bad);
	/* What comes before the failing request is posted, as a provider posts until one fails. */
	if (fail != wr) {
		for (before = wr; before->next != fail; before = before->next)
			;
		before->next = NULL;
		int rc = real(qp, wr, bad);
		before->next = fail;
		if (rc)
			return rc;
	}
	pthread_mutex_lock(&lock);
	int i = failed_slot(qp) >= 0 ? -1 : failed_slot(NULL);
	if (i >= 0)
		failed_qps[i] = qp;
	pthread_mutex_unlock(&lock);
	usleep(FAIL_DELAY_US);
	*bad = fail;
	return ENOMEM;
}

/* Replaces @ctx's post_send by post_send_wrap(), once. */
static void patch(struct ibv_context *ctx)
{
	pthread_mutex_lock(&lock);
	bool known = false;
	for (int i = 0; i < npatched; i++)
		known |= patched[i].ctx == ctx;
	if (!known && npatched < MAX_CONTEXTS && ctx->ops.post_send != post_send_wrap) {
		patched[npatched].ctx = ctx;
		patched[npatched++].real = ctx->ops.post_send;
		ctx->ops.post_send = post_send_wrap;
	}
	pthread_mutex_unlock(&lock);
}

__attribute__((constructor)) static void postfail_init(void)
{
	const char *prefix = getenv("XFERD_TEST_POSTFAIL");

	for (size_t i = 0; prefix && i < sizeof(triggers) / sizeof(triggers[0]); i++)
		snprintf(triggers[i].path, sizeof(triggers[i].path), "%s.%s", prefix,
			 triggers[i].suffix);
	if (prefix)
		snprintf(violation_path, sizeof(violation_path), "%s.violation", prefix);
}

/* A destroyed queue pair's address may come back for a new one: it is forgotten here. */
int ibv_destroy_qp(struct ibv_qp *qp)
{
	static int (*real)(struct ibv_qp *);

	if (!real)
		real = dlvsym(RTLD_NEXT, "ibv_destroy_qp", "IBVERBS_1.1");
	pthread_mutex_lock(&lock);
	int i = failed_slot(qp);
	if (i >= 0)
		failed_qps[i] = NULL;
	pthread_mutex_unlock(&lock);
	return real ? real(qp) : ENOSYS;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	static struct ibv_qp *(*real)(struct ibv_pd *, struct ibv_qp_init_attr *);

	if (!real)
		real = dlvsym(RTLD_NEXT, "ibv_create_qp", "IBVERBS_1.1");
	if (!real) {
		errno = ENOSYS;
		return NULL;
	}
	struct ibv_qp *qp = real(pd, attr);
	if (qp)
		patch(qp->context);
	return qp;
}
