// SPDX-License-Identifier: MIT
/*
 * The TCP read path reads small frames ahead into a per-connection buffer while no file region
 * is alive (tcp.c, ra_allowed()): a DATA frame for a file must reach the file lane straight
 * from the socket. Here a stream of small window puts (4 KiB, posted in batches of 8) shares
 * the peer connections with a pairing whose target is a file registered mid-stream, and goes
 * on after the file region is gone again: every put's bytes and every byte of the file are
 * compared, no set fails. Read-ahead is kept per peer set: a file region that no transfer of
 * a peer receives into (an idle one, another client's) leaves it on, as list.peers's
 * read_ahead_fills shows.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon_util.h"
#include "harness.h"
#include "xferclient.h"

#define BLOCK 4096ul
#define NBLOCKS 256 /* window blocks: each round's puts go to blocks of their own */
#define PER_ROUND 64
#define BATCH 8
#define FILE_LEN (4ul << 20)
#define WAIT_MS 60000

struct rig {
	struct td a, b;
	struct td_key key;
	struct xfer_client *owner, *opener;
	struct xfer_buf wbuf, pbuf, src;
	uint64_t wregion, pregion, sregion, window, handle;
	int events, complete, next_block;
};

static void node_start(struct rig *r, struct td *d)
{
	char cfg[300];

	snprintf(cfg, sizeof(cfg), "{\"listen\": [\"127.0.0.1:0\"], \"peer_key_file\": \"%s\"}",
		 r->key.path);
	CHECK_OK(td_start(d, cfg));
}

static void batch_cb(struct xfer_client *c, const struct xfer_batch_event *ev, void *arg)
{
	struct rig *r = arg;

	(void)c;
	r->events++;
	for (size_t i = 0; i < ev->n; i++)
		r->complete += ev->ends[i].state == XFER_COMPLETE;
}

/* Posts PER_ROUND puts of the opener's blocks into the next window blocks, BATCH per request. */
static void post_round(struct rig *r)
{
	struct xfer_op_opts opts = { .flags = XFER_OP_RELEASE_ON_END | XFER_OP_BATCH_EVENT |
					      XFER_OP_POST };

	for (int k = 0; k < PER_ROUND; k += BATCH) {
		struct xfer_desc d[BATCH];
		struct xfer_batch_op ops[BATCH];
		for (int i = 0; i < BATCH; i++) {
			uint64_t b = (uint64_t)r->next_block++;
			d[i] = (struct xfer_desc){ r->pregion, b * BLOCK, BLOCK };
			ops[i] = (struct xfer_batch_op){ .kind = XFER_PUT,
							 .handle = r->handle,
							 .offset = b * BLOCK,
							 .descs = &d[i],
							 .n = 1 };
		}
		CHECK_OK(xfer_batch(r->opener, ops, BATCH, &opts, NULL, NULL));
	}
}

/* Takes the opener's events until every batch posted so far ended. */
static void wait_puts(struct rig *r)
{
	long long until = td_now_ms() + WAIT_MS;

	while (r->events < r->next_block / BATCH) {
		CHECK(td_now_ms() < until);
		CHECK(xfer_dispatch(r->opener) >= 0);
		usleep(1000);
	}
	CHECK_EQ_INT(r->complete, r->next_block);
	CHECK_MEM_EQ(r->wbuf.addr, r->pbuf.addr, (size_t)r->next_block * BLOCK);
}

static void rig_start(struct rig *r)
{
	char *meta = NULL;

	memset(r, 0, sizeof(*r));
	CHECK_OK(td_key_make(&r->key));
	node_start(r, &r->a);
	node_start(r, &r->b);
	CHECK_OK(xfer_connect(r->a.sock, "owner", &r->owner));
	CHECK_OK(xfer_connect(r->b.sock, "opener", &r->opener));
	CHECK_OK(xfer_buf_alloc(NBLOCKS * BLOCK, &r->wbuf));
	CHECK_OK(xfer_buf_alloc(NBLOCKS * BLOCK, &r->pbuf));
	CHECK_OK(xfer_buf_alloc(FILE_LEN, &r->src));
	td_fill(r->pbuf.addr, NBLOCKS * BLOCK, 31);
	td_fill(r->src.addr, FILE_LEN, 32);
	CHECK_OK(xfer_region_register(r->owner, r->wbuf.fd, 0, 0, "window", &r->wregion));
	CHECK_OK(xfer_region_register(r->opener, r->pbuf.fd, 0, 0, "puts", &r->pregion));
	CHECK_OK(xfer_region_register(r->opener, r->src.fd, 0, 0, "src", &r->sregion));
	CHECK_OK(xfer_window_create(r->owner, r->wregion, 0, 0, XFER_ACCESS_WRITE, 0, &r->window,
				    &meta));
	CHECK_OK(xfer_window_open(r->opener, meta, &r->handle, NULL, NULL));
	free(meta);
	xfer_set_batch_cb(r->opener, batch_cb, r);
}

static void rig_stop(struct rig *r)
{
	xfer_set_batch_cb(r->opener, NULL, NULL);
	CHECK_OK(xfer_window_close(r->opener, r->handle));
	CHECK_OK(xfer_window_close(r->owner, r->window));
	xfer_close(r->opener);
	xfer_close(r->owner);
	xfer_buf_free(&r->src);
	xfer_buf_free(&r->pbuf);
	xfer_buf_free(&r->wbuf);
	CHECK_EQ_INT(td_stop(&r->b), 0);
	CHECK_EQ_INT(td_stop(&r->a), 0);
	td_key_remove(&r->key);
}

/* The one peer set in @c's daemon's list.peers: its @key (read_ahead_fills, ...). */
static long long peer_count(struct xfer_client *c, const char *key)
{
	char *res = NULL;

	CHECK_OK(xfer_call(c, "list.peers", NULL, &res));
	json_t *root = json_loads(res, 0, NULL);
	free(res);
	json_t *peers = json_object_get(root, "peers");
	CHECK_EQ_INT(json_array_size(peers), 1);
	json_t *v = json_object_get(json_array_get(peers, 0), key);
	CHECK(json_is_integer(v));
	long long n = json_integer_value(v);
	json_decref(root);
	return n;
}

/* Waits (by state, up to WAIT_MS) until @c's daemon's one set counts @want file receivers. */
static void wait_file_receivers(struct xfer_client *c, long long want)
{
	long long until = td_now_ms() + WAIT_MS;

	while (peer_count(c, "file_receivers") != want) {
		CHECK(td_now_ms() < until);
		usleep(2000);
	}
}

/*
 * Round 1: puts alone (read ahead). Round 2: the owner registers a file and makes it writable,
 * the opener writes 4 MiB into it between two rounds of puts, so the file's DATA frames follow
 * small frames on the same connections. Round 3: the file region deregistered, puts alone again.
 */
TEST(cross_small_puts_beside_a_file_write)
{
	struct rig r;
	char path[128];
	uint64_t fregion, wop, aop;
	char *meta = NULL;
	struct xfer_op_info info;

	rig_start(&r);
	post_round(&r);
	wait_puts(&r);

	snprintf(path, sizeof(path), "/tmp/xferd-readahead-XXXXXX");
	int fd = mkostemp(path, O_CLOEXEC);
	CHECK(fd >= 0);
	unlink(path); /* (the fd is all the test needs) */
	CHECK_OK(ftruncate(fd, FILE_LEN) < 0 ? -errno : 0);
	CHECK_OK(xfer_region_register_file(r.owner, fd, 0, FILE_LEN, 0, "file", &fregion));
	struct xfer_desc fd_desc = { fregion, 0, FILE_LEN }, sd = { r.sregion, 0, FILE_LEN };
	CHECK_OK(xfer_writable(r.owner, &fd_desc, 1, NULL, &wop, &meta));
	post_round(&r);
	CHECK_OK(xfer_write(r.opener, meta, &sd, 1, NULL, &aop));
	post_round(&r);
	CHECK_OK(xfer_wait(r.opener, aop, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	CHECK_OK(xfer_wait(r.owner, wop, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	wait_file_receivers(r.owner, 0); /* (the owner's side of the write into its file) */
	CHECK_EQ_INT(peer_count(r.opener, "file_receivers"), 0);
	wait_puts(&r);
	char *back = malloc(FILE_LEN);
	CHECK(back != NULL);
	CHECK_EQ_INT(pread(fd, back, FILE_LEN, 0), (long long)FILE_LEN);
	CHECK_MEM_EQ(back, r.src.addr, FILE_LEN);
	free(back);
	free(meta);
	CHECK_OK(xfer_release(r.opener, aop));
	CHECK_OK(xfer_release(r.owner, wop));
	CHECK_OK(xfer_region_deregister(r.owner, fregion, 0));
	close(fd);

	post_round(&r);
	wait_puts(&r);
	rig_stop(&r);
}

/* Registers a file of @len bytes (unlinked) on @c's daemon as @c's region. Returns its fd. */
static int idle_file_region(struct xfer_client *c, size_t len, uint64_t *region)
{
	char path[] = "/tmp/xferd-readahead-idle-XXXXXX";
	int fd = mkostemp(path, O_CLOEXEC);

	CHECK(fd >= 0);
	unlink(path);
	CHECK_OK(ftruncate(fd, (off_t)len) < 0 ? -errno : 0);
	CHECK_OK(xfer_region_register_file(c, fd, 0, len, 0, "idle", region));
	return fd;
}

/*
 * Another client on each daemon keeps a file region registered that no transfer uses: the
 * puts' peer sets have no transfer receiving into a file, so both daemons still read their
 * small frames ahead (the owner the WPUTs, the opener the WACKs and replies): each round of
 * puts fills the read-ahead buffer at least once on both sides, with and without the files.
 */
TEST(cross_idle_file_region_keeps_read_ahead)
{
	struct rig r;
	struct xfer_client *ka, *kb;
	uint64_t fa, fb;

	rig_start(&r);
	post_round(&r);
	wait_puts(&r);
	long long owner0 = peer_count(r.owner, "read_ahead_fills");
	long long opener0 = peer_count(r.opener, "read_ahead_fills");
	CHECK(owner0 > 0 && opener0 > 0);

	CHECK_OK(xfer_connect(r.a.sock, "keeper", &ka));
	CHECK_OK(xfer_connect(r.b.sock, "keeper", &kb));
	int fda = idle_file_region(ka, FILE_LEN, &fa);
	int fdb = idle_file_region(kb, FILE_LEN, &fb);
	post_round(&r);
	wait_puts(&r);
	CHECK(peer_count(r.owner, "read_ahead_fills") > owner0);
	CHECK(peer_count(r.opener, "read_ahead_fills") > opener0);
	CHECK_EQ_INT(peer_count(r.owner, "file_receivers"), 0);
	CHECK_EQ_INT(peer_count(r.opener, "file_receivers"), 0);
	CHECK(peer_count(r.owner, "socket_reads") >= peer_count(r.owner, "read_ahead_fills"));

	xfer_close(ka);
	xfer_close(kb);
	close(fda);
	close(fdb);
	rig_stop(&r);
}

#define PAIR_LEN (64ul << 10)

/* The opener reads @len bytes of a readable over the owner's window buffer into its file. */
struct file_read {
	struct rig r;
	uint64_t region; /* the opener's file region */
	int fd;
};

static void file_read_start(struct file_read *f)
{
	rig_start(&f->r);
	f->fd = idle_file_region(f->r.opener, PAIR_LEN, &f->region);
}

/* A readable of the owner's buffer's first PAIR_LEN bytes: its metadata (free() it). */
static char *owner_readable(struct rig *r)
{
	struct xfer_desc d = { r->wregion, 0, PAIR_LEN };
	uint64_t op;
	char *meta = NULL;

	CHECK_OK(xfer_readable(r->owner, &d, 1, NULL, &op, &meta));
	return meta;
}

/* The read into the opener's file, made at once (the owner may be stopped). Its op id. */
static uint64_t read_into_file(struct file_read *f, const char *meta, uint32_t timeout_ms)
{
	struct xfer_desc d = { f->region, 0, PAIR_LEN };
	struct xfer_op_opts opts = { .timeout_ms = timeout_ms, .flags = XFER_OP_NOWAIT };
	uint64_t op;

	CHECK_OK(xfer_read(f->r.opener, meta, &d, 1, &opts, &op));
	return op;
}

/*
 * A transfer that receives into a file is counted on its peer set from its making (the owner
 * stopped: no CLAIM_OK yet) until it can take no more DATA; read-ahead stays off meanwhile
 * meanwhile. Completion, cancel and deadline each bring the
 * count back to 0 (never below: the daemon asserts it).
 */
TEST(cross_file_receiver_counted_until_its_end)
{
	struct file_read f;
	struct xfer_op_info info;

	file_read_start(&f);
	char *meta = owner_readable(&f.r);
	uint64_t op = read_into_file(&f, meta, 0);
	CHECK_OK(xfer_wait(f.r.opener, op, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_COMPLETE);
	char back[PAIR_LEN];
	CHECK_EQ_INT(pread(f.fd, back, PAIR_LEN, 0), (long long)PAIR_LEN);
	CHECK_MEM_EQ(back, f.r.wbuf.addr, PAIR_LEN);
	CHECK_EQ_INT(peer_count(f.r.opener, "file_receivers"), 0);
	free(meta);

	/* cancelled by the opener while the owner is stopped */
	meta = owner_readable(&f.r);
	CHECK_OK(td_signal(&f.r.a, SIGSTOP));
	op = read_into_file(&f, meta, 0);
	CHECK_EQ_INT(peer_count(f.r.opener, "file_receivers"), 1);
	CHECK_OK(xfer_cancel(f.r.opener, op));
	CHECK_OK(td_signal(&f.r.a, SIGCONT));
	wait_file_receivers(f.r.opener, 0);
	free(meta);

	/* its deadline passes while the owner is stopped */
	meta = owner_readable(&f.r);
	CHECK_OK(td_signal(&f.r.a, SIGSTOP));
	op = read_into_file(&f, meta, 200);
	CHECK_EQ_INT(peer_count(f.r.opener, "file_receivers"), 1);
	CHECK_OK(xfer_wait(f.r.opener, op, WAIT_MS, &info));
	CHECK(info.state == XFER_ERRORED || info.state == XFER_CANCELLED);
	CHECK_OK(td_signal(&f.r.a, SIGCONT));
	wait_file_receivers(f.r.opener, 0);
	free(meta);
	long long fills = peer_count(f.r.opener, "read_ahead_fills");

	/* and read-ahead is back for the set: a round of puts fills its buffer again */
	post_round(&f.r);
	wait_puts(&f.r);
	CHECK(peer_count(f.r.opener, "read_ahead_fills") > fills);
	close(f.fd);
	rig_stop(&f.r);
}

/*
 * The owner's daemon dies while the opener's read into a file waits for its CLAIM_OK: the set
 * fails with the transfer counted; the opener's daemon closes it (the count back to 0, which
 * it asserts when the set is freed) and stops cleanly.
 */
TEST(cross_file_receiver_uncounted_on_peer_loss)
{
	struct file_read f;
	struct xfer_op_info info;

	file_read_start(&f);
	char *meta = owner_readable(&f.r);
	CHECK_OK(td_signal(&f.r.a, SIGSTOP));
	uint64_t op = read_into_file(&f, meta, 0);
	CHECK_EQ_INT(peer_count(f.r.opener, "file_receivers"), 1);
	CHECK_OK(td_signal(&f.r.a, SIGKILL));
	CHECK_EQ_INT(td_wait_exit(&f.r.a), 128 + SIGKILL);
	CHECK_OK(xfer_wait(f.r.opener, op, WAIT_MS, &info));
	CHECK_EQ_INT(info.state, XFER_ERRORED);
	free(meta);
	xfer_set_batch_cb(f.r.opener, NULL, NULL);
	xfer_close(f.r.opener);
	xfer_close(f.r.owner);
	close(f.fd);
	xfer_buf_free(&f.r.src);
	xfer_buf_free(&f.r.pbuf);
	xfer_buf_free(&f.r.wbuf);
	CHECK_EQ_INT(td_stop(&f.r.b), 0);
	td_key_remove(&f.r.key);
}
