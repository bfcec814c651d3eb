/* SPDX-License-Identifier: MIT */
/*
 * rdma_rogue: a hostile peer daemon against one real xferd. It proves from the outside what
 * PROTOCOL.md §10.5 promises an RDMA claimer: the rkeys of CLAIM_OK reach exactly the claimed
 * operation's range, only in the operation's direction, only while the transfer lasts, and the
 * region's own MR grants no remote access at all; and for windows (§10.6, keyed owners), that
 * an opener (WOPEN with a proof, a get by WCLAIM) holding a revoked window's rkey is refused
 * once it let go, and cut off when it does not; and that the key an opener gets at open
 * (WOPEN_OK) reads the window, is refused outside it and for a write of a read-only window,
 * and dies with the revocation; and (§10.9) that an opener flooding WNOTIFYs past its credit,
 * or past 4096 without one, is revoked EDQUOT while the owner's client, which reads nothing
 * meanwhile, stays connected and then gets every notification that came before, in order.
 *
 * With ROGUE_ONLY=o and ROGUE_FAKE_OWNER=ADDR:PORT it is the other way round (case o): a fake
 * window OWNER's daemon listening there, whose window the real daemon (OWNER_SOCKET's) opens as
 * the opener; after the opener's tagged puts it sends WNOTIFY_ACKs no owner may send (§10.9),
 * and each must end the opener's set with a cause naming the rule, its held puts ERRORED, the
 * daemon serving on (test_fake_owner()); then (cases p) it holds readables and writables that
 * the real daemon claims, and answers with a CLAIM_OK sent twice, or granting ranges that do
 * not cover the claim: each must fail the claimer's set EPROTO with a cause naming the rule.
 *
 *   rdma_rogue OWNER_SOCKET OWNER_RDMA_ADDR:PORT [SOURCE_ADDR [KEY_FILE]]
 * With KEY_FILE (the owner's cluster key, hex) the rogue proves the key as a daemon does
 * (PROTOCOL.md §10.2: a nonce in its HELLO, AUTH as its first SEND, with the MAC of
 * daemon/frame.c made here with libcrypto), and first checks that a HELLO without a nonce, an
 * AUTH with a wrong MAC and a CLAIM before AUTH are each refused while the owner keeps serving.
 *
 * It is two things at once:
 *   - the owner's client (libxferclient): a buffer of three 64 KiB slices filled with a known
 *     pattern, registered, and passive operations over the middle slice only; it watches the
 *     owner's buffer through its own mapping;
 *   - a peer daemon that speaks the peer protocol by hand over rdma_cm: HELLO in the private
 *     data, CLAIM, one-sided READ and WRITE with the rkeys of CLAIM_OK, DONE, CANCEL, PONG.
 * SOURCE_ADDR (default $RXE_IP0) is where the rogue's connections leave from, as a daemon
 * resolves from its own listen address so that it leaves through its own device.
 *
 * A request the owner refuses moves the rogue's QP to error, so each negative probe is a fresh
 * connection (as a fresh random node) and a fresh claim of a fresh operation: probe_open().
 * Every wait has a deadline and the whole run an alarm. Prints "ok - ..." or "FAIL - ... (why)"
 * per check, "# ..." notes, and "N passed, N failed" last; exits 0 when every check passed.
 *
 * Notes, not checks: what a hostile peer gets within the protocol as designed ("FINDING:": a
 * writable's window used between the owner's CANCEL and the claimer's release or cut-off), and
 * the bounds probes (b, c) on a device that does not confine a window to its range at all, which
 * the rogue asks its own device first (check_device_bounds(): Soft-RoCE 6.1 checks a window's
 * access rights and queue pair, but not its bounds).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <rdma/rdma_cma.h>

#include "xfer_proto.h"
#include "xferclient.h"
#include "xp_meta.h"
#include "xp_peer.h"

#define KIB 1024u
#define SLICE (64 * KIB) /* the claimed range: the middle of three slices */
#define BUF_LEN (3 * SLICE)
#define PROBE_LEN (4 * KIB)
#define WAIT_MS 10000 /* every single wait */
#define RESOLVE_MS 2000
#define OP_TIMEOUT_MS 300000 /* the owner's ops must not expire on their own mid-test */
#define RUN_LIMIT_S 300	     /* the whole run: a hung daemon must not hang the suite */
#define LINGER_MS 8000	     /* the owner's keepalive_timeout_ms (5000), a keepalive tick, slack */

/* PROTOCOL.md §10.5: HELLO in the private data, 16 receive buffers of header + 64 KiB. */
#define RECV_BUFS 16
#define RECV_SIZE (XP_PEER_HDR_LEN + XP_PEER_MAX_CTRL)
#define SEND_SLOTS 16
#define SEND_SIZE 4096
#define ACK_TIMEOUT 16 /* as the daemon's default: a lost packet costs ~270 ms, not 2 s */
#define MAX_MSGS 32
#define STINGY_EVERY 16 /* test_pong_flood: one credit returned per this many PINGs */
#define FLOOD_MS 60000	/* test_pong_flood: the owner must drop the flooder within this */
#define MAX_NODES 64
#define PENDING_CASES 16 /* test_pending: the most connections held before AUTH */

/* wr_id: what a completion is for, and which buffer slot. */
#define WR_RECV (1ull << 32)
#define WR_SEND (2ull << 32)
#define WR_DATA (3ull << 32)

#define ANY_XFER UINT64_MAX /* struct rogue's xfer: wait for a message of any transfer */

/* The pattern's seeds: the owner's bytes, a legitimate write, a rogue's unwanted write. */
#define SEED_OWNER 1
#define SEED_WRITE 2
#define SEED_ROGUE 3

struct target {
	struct sockaddr_storage dst, src;
	bool has_src;
	const char *dst_text, *src_text;
};

/* The owner's side as its client sees it. */
struct ctx {
	struct target tg;
	const char *sock;
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t region;
	uint64_t xfer_seq;		       /* the rogue's transfer ids (its own op ids) */
	uint8_t nodes[MAX_NODES][XP_ID_BYTES]; /* every node id the rogue used */
	int nnodes;
	int ended[XFER_ERRORED + 1]; /* final states of the claimed ops */
	int stuck;		     /* claimed ops that did not end */
	bool hello_noted;
	int bounds; /* 1: the device confines a window to its range; 0: not; -1: unknown */
	char bounds_why[320];
};

/* A passive operation over the middle slice and its decoded metadata. */
struct offer {
	uint64_t op;
	char *metadata;
	struct xp_meta m;
	bool decoded;
};

/* A control message from the owner, kept until someone waits for it. */
struct msg {
	uint8_t type;
	uint64_t xfer;
	json_t *json;
};

/* One rogue connection: an RC QP set up by rdma_cm, and the grant of its one claim. */
struct rogue {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	uint8_t *ctl, *data; /* ctl: RECV_BUFS receive slots, then SEND_SLOTS send slots */
	struct ibv_mr *ctl_mr, *data_mr;
	bool send_busy[SEND_SLOTS];
	int credits;   /* messages the owner has receive buffers for */
	int to_return; /* our receive buffers re-posted and not yet told */
	bool established, disconnected, qp_error;
	bool acceptor;	    /* the rogue accepted this connection (a fake owner): AUTH role 'A' */
	bool shared_pd;	    /* @pd is the fake owner's, not this connection's to free */
	struct rogue *also; /* another connection of the same set, pumped with this one */
	uint8_t peer_node[XP_ID_BYTES]; /* the real daemon's HELLO */
	uint64_t peer_epoch;
	uint8_t node[XP_ID_BYTES], peer_nonce[XP_RDMA_NONCE_LEN], nonce[XP_RDMA_NONCE_LEN];
	uint64_t epoch;
	uint64_t xfer;	   /* the transfer (or handle) messages are waited for; ANY_XFER: any */
	uint64_t got_xfer; /* the xfer of the message take_msg() took last */
	struct msg q[MAX_MSGS];
	int nq;
	unsigned pongs;
	/*
	 * Stingy (test_pong_flood): PINGs and PONGs are not answered, and of the receive buffers
	 * re-posted only one in STINGY_EVERY is returned to the owner as a credit.
	 */
	bool stingy;
	unsigned stingy_sent;
	bool data_done;
	enum ibv_wc_status data_status;
	uint64_t addr, len; /* the grant of CLAIM_OK */
	uint32_t rkey;
	char why[320];
};

struct probe {
	struct offer o;
	struct rogue r;
	pid_t canceller; /* the child process whose op.cancel is under way, or 0 */
};

static volatile sig_atomic_t passed, failed;

/* The cluster key of KEY_FILE (none: the owner is unkeyed, no AUTH). */
static uint8_t peer_key[64];
static size_t peer_key_len;

/* How rogue_connect() handles the handshake of a keyed owner. */
enum auth_mode {
	AUTH_GOOD,     /* a nonce, then AUTH with the right MAC, then the owner's AUTH checked */
	AUTH_NO_NONCE, /* the HELLO offers no authentication */
	AUTH_BAD_MAC,  /* a nonce, then AUTH with a MAC under another key */
	AUTH_SKIP,     /* a nonce, and no AUTH at all */
};

/* ---- output ---- */

static void ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void ok(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ok - ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	fflush(stdout);
	passed++;
}

static void fail(const char *name, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("FAIL - %s (", name);
	vprintf(fmt, ap);
	puts(")");
	va_end(ap);
	fflush(stdout);
	failed++;
}

static void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("# ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	fflush(stdout);
}

static void put_num(char **p, long v)
{
	char tmp[24];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) > 0);
	while (n > 0)
		*(*p)++ = tmp[--n];
}

/* The last word of a run that hung somewhere (a daemon that stops answering): async-safe. */
static void on_alarm(int sig)
{
	static const char line[] = "FAIL - rdma_rogue did not finish within its time limit\n";
	char buf[64], *p = buf;

	(void)!write(STDOUT_FILENO, line, sizeof(line) - 1);
	put_num(&p, passed);
	memcpy(p, " passed, ", 9);
	p += 9;
	put_num(&p, failed + 1);
	memcpy(p, " failed\n", 8);
	p += 8;
	(void)!write(STDOUT_FILENO, buf, (size_t)(p - buf));
	_exit(1);
}

/* ---- small helpers ---- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint8_t pattern(size_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ seed * 0x9e3779b9u;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return (uint8_t)x;
}

/* @n bytes at @p as the pattern of @seed at positions @off.. of the owner's buffer. */
static void fill(uint8_t *p, size_t off, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(off + i, seed);
}

/* The first byte of @p that is not the pattern of @seed at positions @off.., or -1. */
static long mismatch(const uint8_t *p, size_t off, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(off + i, seed))
			return (long)i;
	return -1;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static int resolve(const char *addr, const char *port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;

	if (getaddrinfo(addr, port, &hints, &ai))
		return -EINVAL;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* "ADDR:PORT" of the owner's listener, and the source address the rogue leaves from. */
static int parse_target(const char *arg, const char *src, struct target *tg)
{
	char host[128];
	const char *colon = strrchr(arg, ':');

	if (!colon || colon == arg || (size_t)(colon - arg) >= sizeof(host))
		return -EINVAL;
	memcpy(host, arg, (size_t)(colon - arg));
	host[colon - arg] = '\0';
	if (resolve(host, colon + 1, &tg->dst))
		return -EINVAL;
	tg->dst_text = arg;
	tg->src_text = src && *src ? src : "(routing)";
	tg->has_src = src && *src;
	return tg->has_src ? resolve(src, "0", &tg->src) : 0;
}

static const char *state_name(const struct xfer_op_info *info)
{
	return xfer_state_name(info->state);
}

/* ---- the owner's client ---- */

static void reset_buffer(struct ctx *t)
{
	fill(t->buf.addr, 0, BUF_LEN, SEED_OWNER);
}

/* Whether the owner's buffer holds the owner's pattern, with @mid_seed in the middle slice. */
static int buffer_is(struct ctx *t, uint32_t mid_seed, char *why, size_t len)
{
	const uint8_t *p = t->buf.addr;
	long at;

	if ((at = mismatch(p, 0, SLICE, SEED_OWNER)) >= 0) {
		snprintf(why, len, "the owner's buffer changed before the range, at byte %ld", at);
		return -1;
	}
	if ((at = mismatch(p + 2 * SLICE, 2 * SLICE, SLICE, SEED_OWNER)) >= 0) {
		snprintf(why, len, "the owner's buffer changed after the range, at byte %ld",
			 2 * (long)SLICE + at);
		return -1;
	}
	if ((at = mismatch(p + SLICE, SLICE, SLICE, mid_seed)) >= 0) {
		snprintf(why, len, "the owner's range holds %s at byte %ld",
			 mid_seed == SEED_OWNER ? "bytes it did not have" : "not the bytes written",
			 at);
		return -1;
	}
	return 0;
}

static json_t *owner_call(struct ctx *t, const char *method, char *why, size_t len)
{
	char *res = NULL;
	json_t *j;
	int rc = xfer_call(t->c, method, NULL, &res);

	if (rc < 0) {
		snprintf(why, len, "%s: %s (%s)", method, xfer_strerror(rc), xfer_last_error(t->c));
		return NULL;
	}
	j = json_loads(res, 0, NULL);
	free(res);
	if (!j)
		snprintf(why, len, "%s: the result is not JSON", method);
	return j;
}

/* Sums windows_open over the owner's devices; *all_mw: every device has memory windows. */
static int owner_windows(struct ctx *t, long long *open, bool *all_mw, char *names, size_t nlen,
			 char *why, size_t len)
{
	json_t *j = owner_call(t, "list.devices", why, len), *dev;
	size_t i;

	if (!j)
		return -1;
	*open = 0;
	*all_mw = true;
	if (names)
		names[0] = '\0';
	json_array_foreach(json_object_get(j, "devices"), i, dev) {
		json_t *c = json_object_get(dev, "counters");
		*open += json_integer_value(json_object_get(c, "windows_open"));
		*all_mw = *all_mw && json_is_true(json_object_get(dev, "memory_windows"));
		if (names)
			snprintf(names + strlen(names), nlen - strlen(names), "%s%s", i ? " " : "",
				 json_string_value(json_object_get(dev, "name")) ?: "?");
	}
	if (i == 0) {
		snprintf(why, len, "list.devices lists no RDMA device: %s",
			 json_string_value(json_object_get(j, "rdma")) ?: "?");
		json_decref(j);
		return -1;
	}
	json_decref(j);
	return 0;
}

/* The owner's windows_open now, for the evidence of a failed check; -1 if unknown. */
static long long windows_now(struct ctx *t)
{
	long long open;
	bool all_mw;
	char why[256];

	return owner_windows(t, &open, &all_mw, NULL, 0, why, sizeof(why)) ? -1 : open;
}

/* The region MR's own rkey, as list.regions shows it (the first device's). */
static int region_rkey(struct ctx *t, uint32_t *rkey, int *ndevs, char *why, size_t len)
{
	json_t *j = owner_call(t, "list.regions", why, len), *r, *devs;
	size_t i;

	if (!j)
		return -1;
	json_array_foreach(json_object_get(j, "regions"), i, r) {
		if ((uint64_t)json_integer_value(json_object_get(r, "region")) != t->region)
			continue;
		devs = json_object_get(r, "devices");
		if (json_array_size(devs) > 0) {
			*rkey = (uint32_t)json_integer_value(
				json_object_get(json_array_get(devs, 0), "rkey"));
			*ndevs = (int)json_array_size(devs);
			json_decref(j);
			return 0;
		}
	}
	snprintf(why, len, "list.regions shows no device keys for region %" PRIu64, t->region);
	json_decref(j);
	return -1;
}

/* How many of the rogue's node ids (from the @first-th used on) the owner lists as peers. */
static int peers_listed_from(struct ctx *t, int first, char *why, size_t len)
{
	json_t *j = owner_call(t, "list.peers", why, len), *p;
	char hex[2 * XP_ID_BYTES + 1];
	int n = 0;
	size_t i;

	if (!j)
		return -1;
	json_array_foreach(json_object_get(j, "peers"), i, p) {
		const char *node = json_string_value(json_object_get(p, "node")) ?: "";
		for (int k = first; k < t->nnodes; k++) {
			xp_hex_encode(t->nodes[k], XP_ID_BYTES, hex);
			if (strcmp(hex, node) == 0)
				n++;
		}
	}
	json_decref(j);
	return n;
}

static int rogue_peers_listed(struct ctx *t, char *why, size_t len)
{
	return peers_listed_from(t, 0, why, len);
}

/* A passive operation over the middle slice, and its metadata decoded as a daemon would. */
/* A passive op over @region's SLICE bytes at @off. */
static int offer_over(struct ctx *t, bool writable, uint64_t region, uint64_t off, struct offer *o,
		      char *why, size_t len)
{
	struct xfer_desc d = { region, off, SLICE };
	struct xfer_op_opts opts = { .timeout_ms = OP_TIMEOUT_MS };
	char err[256];
	int rc = writable ? xfer_writable(t->c, &d, 1, &opts, &o->op, &o->metadata) :
			    xfer_readable(t->c, &d, 1, &opts, &o->op, &o->metadata);

	if (rc < 0) {
		snprintf(why, len, "op.%s: %s (%s)", writable ? "writable" : "readable",
			 xfer_strerror(rc), xfer_last_error(t->c));
		return -1;
	}
	if (xp_meta_decode(o->metadata, &o->m, err, sizeof(err)) < 0) {
		snprintf(why, len, "the owner's metadata does not decode: %s", err);
		return -1;
	}
	o->decoded = true;
	if (o->m.op != o->op || o->m.total != SLICE) {
		snprintf(why, len,
			 "metadata names op %" PRIu64 " of %" PRIu64 " bytes, the client "
			 "made op %" PRIu64 " of %u",
			 o->m.op, o->m.total, o->op, SLICE);
		return -1;
	}
	return 0;
}

static int offer_new(struct ctx *t, bool writable, struct offer *o, char *why, size_t len)
{
	return offer_over(t, writable, t->region, SLICE, o, why, len);
}

/* Waits for the op to end (the rogue is gone by now), counts how it ended, forgets it. */
static void offer_end(struct ctx *t, struct offer *o)
{
	struct xfer_op_info info;

	if (o->metadata) {
		int rc = xfer_wait(t->c, o->op, WAIT_MS, &info);
		if (rc == 0)
			t->ended[info.state]++;
		else
			t->stuck++;
		xfer_release(t->c, o->op);
	}
	free(o->metadata);
	if (o->decoded)
		xp_meta_fini(&o->m);
	memset(o, 0, sizeof(*o));
}

/* Forgets an offer nobody claimed (the owner cancels it): not counted among the claimed. */
static void offer_drop(struct ctx *t, struct offer *o)
{
	if (o->metadata)
		xfer_release(t->c, o->op);
	free(o->metadata);
	if (o->decoded)
		xp_meta_fini(&o->m);
	memset(o, 0, sizeof(*o));
}

/* Waits until the owner's client sees @op COMPLETE. */
static int owner_complete(struct ctx *t, uint64_t op, char *why, size_t len)
{
	struct xfer_op_info info;
	int rc = xfer_wait(t->c, op, WAIT_MS, &info);

	if (rc < 0) {
		snprintf(why, len, "op.wait on the owner: %s", xfer_strerror(rc));
		return -1;
	}
	if (info.state != XFER_COMPLETE || strcmp(info.transport, "rdma") != 0) {
		snprintf(why, len, "the owner's op ended %s over '%s': %s", state_name(&info),
			 info.transport, info.cause);
		return -1;
	}
	return 0;
}

static int ctx_open(struct ctx *t, char *why, size_t len)
{
	int rc = xfer_connect(t->sock, "rdma_rogue", &t->c);

	if (rc == 0)
		rc = xfer_buf_alloc(BUF_LEN, &t->buf);
	if (rc == 0)
		rc = xfer_region_register(t->c, t->buf.fd, 0, 0, "rdma_rogue", &t->region);
	if (rc < 0) {
		snprintf(why, len, "owner client setup on %s: %s (%s)", t->sock, xfer_strerror(rc),
			 t->c ? xfer_last_error(t->c) : "");
		return -1;
	}
	reset_buffer(t);
	return 0;
}

/* ---- the rogue: control messages ---- */

static uint8_t *recv_slot(struct rogue *r, int slot)
{
	return r->ctl + (size_t)slot * RECV_SIZE;
}

static uint8_t *send_slot(struct rogue *r, int slot)
{
	return r->ctl + (size_t)RECV_BUFS * RECV_SIZE + (size_t)slot * SEND_SIZE;
}

static int rogue_err(struct rogue *r, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int rogue_err(struct rogue *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	return -err;
}

static int post_recv(struct rogue *r, int slot)
{
	struct ibv_sge sge = { (uintptr_t)recv_slot(r, slot), RECV_SIZE, r->ctl_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = WR_RECV | (uint32_t)slot,
				  .sg_list = &sge,
				  .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(r->id->qp, &wr, &bad);
}

/*
 * Sends one control message of @blen payload bytes @body whose header says @hdr_len (a hostile
 * peer's header may lie), by the peer's credit rule: the last credit is kept for a message that
 * returns credits, or both sides could stall (§10.5).
 */
static int send_bytes(struct rogue *r, uint8_t type, uint8_t flags, uint64_t xfer, const char *body,
		      size_t blen, uint32_t hdr_len)
{
	int slot = 0, err;

	if (blen > SEND_SIZE - XP_PEER_HDR_LEN)
		return rogue_err(r, EMSGSIZE, "message too long");
	while (slot < SEND_SLOTS && r->send_busy[slot])
		slot++;
	if (slot == SEND_SLOTS || !(r->credits >= 2 || (r->credits == 1 && r->to_return > 0)))
		return rogue_err(r, EAGAIN, "no %s to send %s (credits %d)",
				 slot == SEND_SLOTS ? "send buffer" : "credit",
				 xp_peer_type_name(type), r->credits);
	uint8_t *buf = send_slot(r, slot);
	int give = r->to_return;
	/* Stingy, our last credit still returns one: else neither side could ever send again. */
	if (r->stingy)
		give = r->to_return > 0 &&
		       (++r->stingy_sent % STINGY_EVERY == 0 || r->credits == 1);
	struct xp_peer_hdr h = { .type = type,
				 .flags = flags,
				 .credits = (uint16_t)give,
				 .length = hdr_len,
				 .xfer = xfer };
	xp_peer_hdr_pack(&h, buf);
	if (blen)
		memcpy(buf + XP_PEER_HDR_LEN, body, blen);
	struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)(XP_PEER_HDR_LEN + blen),
			       r->ctl_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_SEND | (uint32_t)slot,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	if ((err = ibv_post_send(r->id->qp, &wr, &bad)))
		return rogue_err(r, err, "ibv_post_send of %s: %s", xp_peer_type_name(type),
				 strerror(err));
	r->send_busy[slot] = true;
	r->credits--;
	r->to_return -= give;
	return 0;
}

/* Sends one control message (@json may be NULL), as send_bytes(). */
static int send_msg(struct rogue *r, uint8_t type, uint8_t flags, uint64_t xfer, json_t *json)
{
	char *body = json ? json_dumps(json, JSON_COMPACT) : NULL;
	size_t blen = body ? strlen(body) : 0;
	int err;

	if (json && !body)
		return rogue_err(r, ENOMEM, "out of memory");
	err = send_bytes(r, type, flags, xfer, body, blen, (uint32_t)blen);
	free(body);
	return err;
}

static void keep_msg(struct rogue *r, const struct xp_peer_hdr *h, json_t *json)
{
	if (r->nq == MAX_MSGS) { /* nobody waits for the oldest: make room */
		json_decref(r->q[0].json);
		memmove(r->q, r->q + 1, sizeof(r->q[0]) * (MAX_MSGS - 1));
		r->nq--;
	}
	r->q[r->nq++] = (struct msg){ h->type, h->xfer, json };
}

/* A message from the owner in receive slot @slot: re-post the slot first, then act on it. */
static void on_recv(struct rogue *r, int slot, uint32_t len)
{
	const uint8_t *b = recv_slot(r, slot);
	struct xp_peer_hdr h;
	json_t *json = NULL;
	int err;

	if (len < XP_PEER_HDR_LEN) {
		rogue_err(r, EPROTO, "the owner sent a message of %u bytes", len);
		r->qp_error = true;
		return;
	}
	xp_peer_hdr_unpack(b, &h);
	if (!xp_peer_hdr_valid(&h) || h.length != len - XP_PEER_HDR_LEN) {
		rogue_err(r, EPROTO, "the owner sent a malformed %s", xp_peer_type_name(h.type));
		r->qp_error = true;
		return;
	}
	if (h.length)
		json = json_loadb((const char *)b + XP_PEER_HDR_LEN, h.length, 0, NULL);
	r->credits += h.credits;
	if ((err = post_recv(r, slot))) {
		json_decref(json);
		rogue_err(r, -err, "ibv_post_recv: %s", strerror(-err));
		r->qp_error = true;
		return;
	}
	r->to_return++;
	if (r->stingy) {
		r->pongs += h.type == XP_PEER_PONG;
		json_decref(json);
		return;
	}
	if (h.type == XP_PEER_PING)
		send_msg(r, XP_PEER_PONG, 0, 0, NULL); /* the owner drops a silent peer after 5 s */
	else if (h.type == XP_PEER_PONG)
		r->pongs++;
	if (h.type == XP_PEER_PING || h.type == XP_PEER_PONG || h.type == XP_PEER_CREDIT)
		json_decref(json);
	else
		keep_msg(r, &h, json);
	if (r->to_return >= RECV_BUFS / 2)
		send_msg(r, XP_PEER_CREDIT, 0, 0, NULL);
}

static void on_completion(struct rogue *r, const struct ibv_wc *wc)
{
	uint32_t slot = (uint32_t)wc->wr_id;

	if (wc->status != IBV_WC_SUCCESS)
		r->qp_error = true;
	switch (wc->wr_id & ~0xffffffffull) {
	case WR_RECV:
		if (wc->status == IBV_WC_SUCCESS)
			on_recv(r, (int)slot, wc->byte_len);
		break;
	case WR_SEND:
		r->send_busy[slot] = false;
		break;
	case WR_DATA:
		r->data_done = true;
		r->data_status = wc->status;
		break;
	}
}

static int drain_cq(struct rogue *r)
{
	struct ibv_wc wc[16];
	int n, total = 0;

	while ((n = ibv_poll_cq(r->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++)
			on_completion(r, &wc[i]);
		total += n;
	}
	return n < 0 ? rogue_err(r, EIO, "ibv_poll_cq failed") : total;
}

/* rdma_cm events after ESTABLISHED: only DISCONNECTED matters (the owner dropped us). */
static void drain_cm(struct rogue *r)
{
	struct rdma_cm_event *ev;

	while (r->ech && rdma_get_cm_event(r->ech, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
			r->disconnected = true;
		rdma_ack_cm_event(ev);
	}
}

/* Completions of @r and of its companion r->also: a count, or -errno (in r->why). */
static int drain_both(struct rogue *r)
{
	int n = drain_cq(r), m = r->also ? drain_cq(r->also) : 0;

	if (m < 0)
		return rogue_err(r, EIO, "the other connection: %s", r->also->why);
	return n < 0 ? n : n + m;
}

/*
 * Handles whatever completes within @ms on @r (and r->also), sleeping on the completion
 * channels, never spinning.
 */
static int pump(struct rogue *r, int ms)
{
	struct rogue *rs[2] = { r, r->also };
	struct pollfd pfd[4];
	int nr = r->also ? 2 : 1, n = drain_both(r);

	if (n != 0)
		return n < 0 ? n : 0;
	for (int i = 0; i < nr; i++) {
		if (ibv_req_notify_cq(rs[i]->cq, 0))
			return rogue_err(r, EIO, "ibv_req_notify_cq failed");
		pfd[2 * i] = (struct pollfd){ .fd = rs[i]->cch->fd, .events = POLLIN };
		pfd[2 * i + 1] = (struct pollfd){ .fd = rs[i]->ech->fd, .events = POLLIN };
	}
	if ((n = drain_both(r)) != 0) /* completions that came before the arming */
		return n < 0 ? n : 0;
	n = poll(pfd, (nfds_t)(2 * nr), ms);
	if (n < 0)
		return errno == EINTR ? 0 : rogue_err(r, errno, "poll: %s", strerror(errno));
	if (n == 0)
		return -ETIMEDOUT;
	for (int i = 0; i < nr; i++) {
		if (pfd[2 * i].revents & POLLIN) {
			struct ibv_cq *cq;
			void *cq_ctx;
			if (ibv_get_cq_event(rs[i]->cch, &cq, &cq_ctx) == 0)
				ibv_ack_cq_events(cq, 1);
		}
		if (pfd[2 * i + 1].revents & POLLIN)
			drain_cm(rs[i]);
	}
	return 0;
}

/* One turn of waiting that ends by @deadline: -ETIMEDOUT once it has passed. */
static int step(struct rogue *r, uint64_t deadline)
{
	uint64_t now = now_ms();
	int rc;

	if (now >= deadline)
		return -ETIMEDOUT;
	rc = pump(r, (int)(deadline - now));
	return rc == -ETIMEDOUT ? 0 : rc;
}

static int take_msg(struct rogue *r, uint8_t type, json_t **json)
{
	for (int i = 0; i < r->nq; i++) {
		if (r->q[i].type != type || (r->xfer != ANY_XFER && r->q[i].xfer != r->xfer))
			continue;
		*json = r->q[i].json;
		r->got_xfer = r->q[i].xfer;
		memmove(r->q + i, r->q + i + 1, sizeof(r->q[0]) * (size_t)(r->nq - i - 1));
		r->nq--;
		return 1;
	}
	return 0;
}

/* Why the owner ended our transfer, if it did (a CLAIM_ERR or CANCEL we were not waiting for). */
static int owner_refused(struct rogue *r, uint8_t wanted)
{
	for (int i = 0; i < r->nq; i++) {
		const struct msg *m = &r->q[i];
		if (m->xfer != r->xfer || m->type == wanted ||
		    (m->type != XP_PEER_CLAIM_ERR && m->type != XP_PEER_CANCEL))
			continue;
		return rogue_err(r, ECONNABORTED, "the owner sent %s instead of %s: %s: %s",
				 xp_peer_type_name(m->type), xp_peer_type_name(wanted),
				 json_string_value(json_object_get(m->json, "errno")) ?: "?",
				 json_string_value(json_object_get(m->json, "message")) ?: "?");
	}
	return 0;
}

/* Waits for the owner's message @type about our transfer; *json is the caller's. */
static int wait_msg(struct rogue *r, uint8_t type, json_t **json)
{
	uint64_t deadline = now_ms() + WAIT_MS;
	int rc;

	for (;;) {
		if (take_msg(r, type, json))
			return 0;
		if ((rc = owner_refused(r, type)))
			return rc;
		if (r->disconnected || r->qp_error) {
			char was[sizeof(r->why)];
			snprintf(was, sizeof(was), "%s", r->why);
			return rogue_err(r, ECONNRESET,
					 "the connection failed while waiting for %s%s%s",
					 xp_peer_type_name(type), was[0] ? ": " : "", was);
		}
		if ((rc = step(r, deadline)) == -ETIMEDOUT)
			return rogue_err(r, ETIMEDOUT, "no %s from the owner within %d ms",
					 xp_peer_type_name(type), WAIT_MS);
		if (rc < 0)
			return rc;
	}
}

/* Keeps the connection alive (answering PINGs) for @ms, as a patient attacker would. */
static int linger(struct rogue *r, int ms)
{
	uint64_t deadline = now_ms() + (uint64_t)ms;
	int rc;

	while ((rc = step(r, deadline)) == 0)
		if (r->disconnected || r->qp_error)
			return rogue_err(r, ECONNRESET, "the owner dropped the connection");
	return rc == -ETIMEDOUT ? 0 : rc;
}

/* ---- the rogue: one-sided requests ---- */

/*
 * One RDMA READ (into our buffer) or WRITE (from it) of @len bytes at the owner's @raddr with
 * @rkey. Returns 0 and *st (the completion's status), or -errno when it did not complete.
 */
static int rdma_op(struct rogue *r, bool write, uint64_t raddr, uint32_t rkey, uint32_t len,
		   enum ibv_wc_status *st)
{
	struct ibv_sge sge = { (uintptr_t)r->data, len, r->data_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_DATA,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = raddr, .rkey = rkey } };
	struct ibv_send_wr *bad;
	uint64_t deadline = now_ms() + WAIT_MS;
	int rc;

	r->data_done = false;
	if ((rc = ibv_post_send(r->id->qp, &wr, &bad)))
		return rogue_err(r, rc, "ibv_post_send of the RDMA %s: %s",
				 write ? "WRITE" : "READ", strerror(rc));
	while (!r->data_done) {
		if ((rc = step(r, deadline)) == -ETIMEDOUT)
			return rogue_err(r, ETIMEDOUT, "the RDMA %s did not complete within %d ms",
					 write ? "WRITE" : "READ", WAIT_MS);
		if (rc < 0)
			return rc;
	}
	*st = r->data_status;
	return 0;
}

/* 0 when the request completed with IBV_WC_REM_ACCESS_ERR: the owner's HCA refused it. */
static int expect_refused(struct rogue *r, bool write, uint64_t raddr, uint32_t rkey, uint32_t len,
			  char *why, size_t wlen)
{
	enum ibv_wc_status st;

	if (rdma_op(r, write, raddr, rkey, len, &st) < 0) {
		snprintf(why, wlen, "%s", r->why);
		return -1;
	}
	if (st == IBV_WC_REM_ACCESS_ERR)
		return 0;
	if (st == IBV_WC_SUCCESS)
		snprintf(why, wlen,
			 "the owner let the %s of %u bytes at 0x%" PRIx64 " rkey 0x%x "
			 "through",
			 write ? "WRITE" : "READ", len, raddr, rkey);
	else
		snprintf(why, wlen, "completed with %s, not %s", ibv_wc_status_str(st),
			 ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	return -1;
}

/* 0 when the request succeeded; a READ's bytes must be the owner's pattern at @off. */
static int expect_success(struct rogue *r, bool write, uint64_t raddr, uint32_t rkey, uint32_t len,
			  size_t off, char *why, size_t wlen)
{
	enum ibv_wc_status st;
	long at;

	if (rdma_op(r, write, raddr, rkey, len, &st) < 0) {
		snprintf(why, wlen, "%s", r->why);
		return -1;
	}
	if (st != IBV_WC_SUCCESS) {
		snprintf(why, wlen, "the %s completed with %s", write ? "WRITE" : "READ",
			 ibv_wc_status_str(st));
		return -1;
	}
	if (!write && (at = mismatch(r->data, off, len, SEED_OWNER)) >= 0) {
		snprintf(why, wlen, "byte %ld of the READ is not the owner's", at);
		return -1;
	}
	return 0;
}

/* ---- the rogue: authentication (PROTOCOL.md §10.2, as daemon/frame.c's auth_mac) ---- */

static int load_key(const char *path)
{
	FILE *f = fopen(path, "r");
	char text[256];
	size_t n = 0, len;

	if (!f)
		return -errno;
	len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = '\0';
	for (size_t i = 0; i + 1 < len && n < sizeof(peer_key);) {
		unsigned v;
		if (text[i] == ' ' || text[i] == '\n' || text[i] == '\t') {
			i++;
			continue;
		}
		if (sscanf(text + i, "%2x", &v) != 1)
			return -EINVAL;
		peer_key[n++] = (uint8_t)v;
		i += 2;
	}
	peer_key_len = n;
	return n >= 16 ? 0 : -EINVAL;
}

static void ident_put(uint8_t *p, const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	memcpy(p, node, XP_ID_BYTES);
	for (int i = 0; i < 8; i++)
		p[XP_ID_BYTES + i] = (uint8_t)(epoch >> (8 * i));
}

/*
 * HMAC-SHA256 under the key of: "xferd-auth-v1\0" | role ('C' connector, 'A' acceptor) |
 * sender node+epoch | receiver node+epoch | the receiver's nonce | the sender's nonce.
 */
static int auth_mac(bool from_connector, const uint8_t from_node[XP_ID_BYTES], uint64_t from_epoch,
		    const uint8_t to_node[XP_ID_BYTES], uint64_t to_epoch,
		    const uint8_t challenge[XP_RDMA_NONCE_LEN],
		    const uint8_t from_nonce[XP_RDMA_NONCE_LEN], uint8_t out[32])
{
	static const char label[] = "xferd-auth-v1";
	uint8_t msg[sizeof(label) + 1 + 2 * (XP_ID_BYTES + 8) + 2 * XP_RDMA_NONCE_LEN], *p = msg;
	unsigned int outlen = 0;

	memcpy(p, label, sizeof(label));
	p += sizeof(label);
	*p++ = from_connector ? 'C' : 'A';
	ident_put(p, from_node, from_epoch);
	p += XP_ID_BYTES + 8;
	ident_put(p, to_node, to_epoch);
	p += XP_ID_BYTES + 8;
	memcpy(p, challenge, XP_RDMA_NONCE_LEN);
	p += XP_RDMA_NONCE_LEN;
	memcpy(p, from_nonce, XP_RDMA_NONCE_LEN);
	if (!HMAC(EVP_sha256(), peer_key, (int)peer_key_len, msg, sizeof(msg), out, &outlen) ||
	    outlen != 32)
		return -EIO;
	return 0;
}

/*
 * A keyed claimer's CLAIM (or opener's WOPEN) carries a proof of the token (PROTOCOL.md §10.2,
 * daemon/crypto.c): HMAC-SHA256 under the key of "xferd-claim-v1\0" | owner node+epoch |
 * claimer node+epoch | op (8 bytes LE) | transfer (8 bytes LE) | token. @m names the owner,
 * the op (or window) and the token.
 */
static int token_proof(const struct xp_meta *m, const uint8_t claimer[XP_ID_BYTES],
		       uint64_t claimer_epoch, uint64_t xfer, uint8_t out[32])
{
	static const char label[] = "xferd-claim-v1";
	uint8_t msg[sizeof(label) + 2 * (XP_ID_BYTES + 8) + 16 + XP_ID_BYTES], *p = msg;
	unsigned int outlen = 0;

	memcpy(p, label, sizeof(label));
	p += sizeof(label);
	ident_put(p, m->node, m->epoch);
	p += XP_ID_BYTES + 8;
	ident_put(p, claimer, claimer_epoch);
	p += XP_ID_BYTES + 8;
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(m->op >> (8 * i));
		p[8 + i] = (uint8_t)(xfer >> (8 * i));
	}
	p += 16;
	memcpy(p, m->token, XP_ID_BYTES);
	if (!HMAC(EVP_sha256(), peer_key, (int)peer_key_len, msg, sizeof(msg), out, &outlen) ||
	    outlen != 32)
		return -EIO;
	return 0;
}

/* The proof of the rogue's own claim @r->xfer (the rogue is the claimer). */
static int claim_proof(const struct rogue *r, const struct xp_meta *m, uint8_t out[32])
{
	return token_proof(m, r->node, r->epoch, r->xfer, out);
}

/* ---- the rogue: connection ---- */

/* The next event of (non-blocking) @ech by @deadline: 0, -ETIMEDOUT or -errno. */
static int next_cm_event(struct rdma_event_channel *ech, uint64_t deadline,
			 struct rdma_cm_event **ev)
{
	for (;;) {
		if (rdma_get_cm_event(ech, ev) == 0)
			return 0;
		if (errno != EAGAIN)
			return -errno;
		uint64_t now = now_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd pfd = { .fd = ech->fd, .events = POLLIN };
		poll(&pfd, 1, (int)(deadline - now));
	}
}

static int wait_cm(struct rogue *r, enum rdma_cm_event_type want, uint8_t *pdata, size_t *plen)
{
	struct rdma_cm_event *ev;
	int err = next_cm_event(r->ech, now_ms() + WAIT_MS, &ev);

	if (err == -ETIMEDOUT)
		return rogue_err(r, ETIMEDOUT, "no %s within %d ms", rdma_event_str(want), WAIT_MS);
	if (err)
		return rogue_err(r, -err, "rdma_get_cm_event: %s", strerror(-err));
	enum rdma_cm_event_type got = ev->event;
	int status = ev->status;
	if (got == want && pdata) {
		*plen = ev->param.conn.private_data_len < 64 ? ev->param.conn.private_data_len : 64;
		if (ev->param.conn.private_data)
			memcpy(pdata, ev->param.conn.private_data, *plen);
		else
			*plen = 0;
	}
	rdma_ack_cm_event(ev);
	if (got == want)
		return 0;
	return rogue_err(r, ECONNREFUSED, "rdma_cm %s (status %d) while waiting for %s",
			 rdma_event_str(got), status, rdma_event_str(want));
}

/* PD, CQ on a completion channel, RC QP, buffers, and every receive posted (§10.5). */
static int setup_qp(struct rogue *r)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = SEND_SLOTS + 8,
			 .max_recv_wr = RECV_BUFS,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	size_t ctl_len = (size_t)RECV_BUFS * RECV_SIZE + (size_t)SEND_SLOTS * SEND_SIZE;
	int err;

	if ((!r->pd && !(r->pd = ibv_alloc_pd(r->id->verbs))) ||
	    !(r->cch = ibv_create_comp_channel(r->id->verbs)) || set_nonblock(r->cch->fd) ||
	    !(r->cq = ibv_create_cq(r->id->verbs, 2 * (RECV_BUFS + SEND_SLOTS) + 8, NULL, r->cch,
				    0)))
		return rogue_err(r, EIO, "PD/CQ setup failed: %s", strerror(errno));
	attr.send_cq = attr.recv_cq = r->cq;
	if (rdma_create_qp(r->id, r->pd, &attr))
		return rogue_err(r, errno, "rdma_create_qp: %s", strerror(errno));
	r->ctl = malloc(ctl_len);
	r->data = malloc(BUF_LEN + 1);
	if (!r->ctl || !r->data ||
	    !(r->ctl_mr = ibv_reg_mr(r->pd, r->ctl, ctl_len, IBV_ACCESS_LOCAL_WRITE)) ||
	    !(r->data_mr = ibv_reg_mr(r->pd, r->data, BUF_LEN + 1, IBV_ACCESS_LOCAL_WRITE)))
		return rogue_err(r, ENOMEM, "buffers: %s", strerror(errno));
	for (int i = 0; i < RECV_BUFS; i++)
		if ((err = post_recv(r, i)))
			return rogue_err(r, -err, "ibv_post_recv: %s", strerror(-err));
	r->credits = RECV_BUFS; /* the owner posts as many before it accepts */
	return 0;
}

static void conn_param(struct rogue *r, struct rdma_conn_param *p, const uint8_t *hello)
{
	struct ibv_device_attr da;
	int rd = 1;

	if (ibv_query_device(r->id->verbs, &da) == 0) {
		rd = da.max_qp_init_rd_atom < da.max_qp_rd_atom ? da.max_qp_init_rd_atom :
								  da.max_qp_rd_atom;
		rd = rd > 16 ? 16 : rd < 1 ? 1 : rd;
	}
	*p = (struct rdma_conn_param){ .private_data = hello,
				       .private_data_len = XP_RDMA_HELLO_LEN,
				       .responder_resources = (uint8_t)rd,
				       .initiator_depth = (uint8_t)rd,
				       .retry_count = 7,
				       .rnr_retry_count = 7 };
}

/* A fresh random node id for this connection, remembered for the peers check. */
static void new_node(struct ctx *t, uint8_t node[XP_ID_BYTES])
{
	if (getrandom(node, XP_ID_BYTES, 0) != XP_ID_BYTES)
		for (int i = 0; i < XP_ID_BYTES; i++)
			node[i] = (uint8_t)(rand() ^ i);
	if (t->nnodes < MAX_NODES)
		memcpy(t->nodes[t->nnodes++], node, XP_ID_BYTES);
}

/* The acceptor's HELLO (accept private data) must name the daemon the metadata names. */
static int check_hello(struct rogue *r, const uint8_t *p, size_t len, const struct xp_meta *m)
{
	struct xp_rdma_hello h;

	if (xp_rdma_hello_unpack(p, len, &h) < 0 || (peer_key_len && !h.has_nonce))
		return rogue_err(r, EPROTO,
				 "the owner's HELLO (%zu bytes of accept private data) is "
				 "not valid",
				 len);
	memcpy(r->peer_node, h.node, XP_ID_BYTES);
	r->peer_epoch = h.epoch;
	memcpy(r->peer_nonce, h.nonce, XP_RDMA_NONCE_LEN);
	if (memcmp(r->peer_node, m->node, XP_ID_BYTES) || r->peer_epoch != m->epoch)
		return rogue_err(r, EPROTO,
				 "the owner's HELLO names another node or epoch than its metadata");
	return 0;
}

/* An rdma_cm id whose address is resolved towards the owner: it knows the rogue's device. */
static int resolve_local(struct ctx *t, struct rogue *r)
{
	memset(r, 0, sizeof(*r));
	if (!(r->ech = rdma_create_event_channel()) || set_nonblock(r->ech->fd) ||
	    rdma_create_id(r->ech, &r->id, r, RDMA_PS_TCP))
		return rogue_err(r, EIO, "rdma_cm setup: %s", strerror(errno));
	if (rdma_resolve_addr(r->id, t->tg.has_src ? (struct sockaddr *)&t->tg.src : NULL,
			      (struct sockaddr *)&t->tg.dst, RESOLVE_MS))
		return rogue_err(r, errno, "rdma_resolve_addr: %s", strerror(errno));
	return wait_cm(r, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL);
}

/*
 * Keyed: AUTH with our proof (@bad: under another key), and for a good one the peer's AUTH,
 * checked against our nonce. The roles (connector 'C', acceptor 'A') as r->acceptor says.
 */
static int rogue_auth(struct rogue *r, bool bad)
{
	uint8_t mac[32], want[32];
	char hex[65];
	json_t *auth, *theirs = NULL;
	const char *got;
	int err;

	if (auth_mac(!r->acceptor, r->node, r->epoch, r->peer_node, r->peer_epoch, r->peer_nonce,
		     r->nonce, mac))
		return rogue_err(r, EIO, "HMAC failed");
	if (bad)
		mac[0] ^= 0x5a;
	xp_hex_encode(mac, sizeof(mac), hex);
	auth = json_pack("{s:s}", "mac", hex);
	err = auth ? send_msg(r, XP_PEER_AUTH, 0, 0, auth) : rogue_err(r, ENOMEM, "out of memory");
	json_decref(auth);
	if (err || bad)
		return err;
	if ((err = wait_msg(r, XP_PEER_AUTH, &theirs)))
		return err;
	got = json_string_value(json_object_get(theirs, "mac"));
	err = auth_mac(r->acceptor, r->peer_node, r->peer_epoch, r->node, r->epoch, r->nonce,
		       r->peer_nonce, want);
	xp_hex_encode(want, sizeof(want), hex);
	if (!err && (!got || strcmp(got, hex) != 0))
		err = rogue_err(r, EACCES, "the peer's AUTH does not prove the key: %s",
				got ? got : "(no mac)");
	json_decref(theirs);
	return err;
}

/* Connects to the owner as a peer daemon, with a HELLO of a fresh node: ready for CLAIM. */
static int rogue_connect_as(struct ctx *t, struct rogue *r, const struct xp_meta *m,
			    enum auth_mode mode)
{
	uint8_t hello[XP_RDMA_HELLO_LEN], pdata[64];
	struct xp_rdma_hello mine;
	struct rdma_conn_param param;
	struct timespec ts;
	uint8_t ack = ACK_TIMEOUT;
	size_t plen = 0;
	int err;

	if ((err = resolve_local(t, r)))
		return err;
	if (rdma_resolve_route(r->id, RESOLVE_MS))
		return rogue_err(r, errno, "rdma_resolve_route: %s", strerror(errno));
	if ((err = wait_cm(r, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL)) || (err = setup_qp(r)))
		return err;
	rdma_set_option(r->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof(ack));
	memset(&mine, 0, sizeof(mine));
	new_node(t, mine.node);
	clock_gettime(CLOCK_REALTIME, &ts);
	mine.epoch = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
	if (peer_key_len && mode != AUTH_NO_NONCE) {
		mine.has_nonce = true;
		if (getrandom(mine.nonce, sizeof(mine.nonce), 0) != (ssize_t)sizeof(mine.nonce))
			return rogue_err(r, EIO, "getrandom failed");
	}
	memcpy(r->node, mine.node, XP_ID_BYTES);
	memcpy(r->nonce, mine.nonce, XP_RDMA_NONCE_LEN);
	r->epoch = mine.epoch;
	xp_rdma_hello_pack(&mine, hello);
	conn_param(r, &param, hello);
	if (mode == AUTH_NO_NONCE)
		param.private_data_len = XP_RDMA_HELLO_MIN_LEN; /* an older peer's 32 bytes */
	if (rdma_connect(r->id, &param))
		return rogue_err(r, errno, "rdma_connect: %s", strerror(errno));
	if ((err = wait_cm(r, RDMA_CM_EVENT_ESTABLISHED, pdata, &plen)))
		return err;
	r->established = true;
	if ((err = check_hello(r, pdata, plen, m)))
		return err;
	if (!peer_key_len || mode == AUTH_SKIP)
		return 0;
	return rogue_auth(r, mode == AUTH_BAD_MAC);
}

static int rogue_connect(struct ctx *t, struct rogue *r, const struct xp_meta *m)
{
	return rogue_connect_as(t, r, m, AUTH_GOOD);
}

static void rogue_close(struct rogue *r)
{
	if (r->id && r->established && !r->disconnected)
		rdma_disconnect(r->id);
	if (r->id && r->id->qp)
		rdma_destroy_qp(r->id);
	if (r->ctl_mr)
		ibv_dereg_mr(r->ctl_mr);
	if (r->data_mr)
		ibv_dereg_mr(r->data_mr);
	free(r->ctl);
	free(r->data);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->cch)
		ibv_destroy_comp_channel(r->cch);
	if (r->pd && !r->shared_pd)
		ibv_dealloc_pd(r->pd);
	if (r->id) {
		drain_cm(r); /* rdma_destroy_id waits for every event it handed out to be acked */
		rdma_destroy_id(r->id);
	}
	if (r->ech)
		rdma_destroy_event_channel(r->ech);
	for (int i = 0; i < r->nq; i++)
		json_decref(r->q[i].json);
	memset(r, 0, sizeof(*r));
}

/* The grant of CLAIM_OK: one range (the op has one descriptor) of the op's length. */
static int parse_grant(struct rogue *r, json_t *ok)
{
	json_t *segs = json_object_get(ok, "segs");
	json_int_t addr, len, rkey;

	if (json_array_size(segs) != 1 ||
	    json_unpack(json_array_get(segs, 0), "{s:I, s:I, s:I}", "addr", &addr, "len", &len,
			"rkey", &rkey) ||
	    len != SLICE || rkey < 0 || rkey > UINT32_MAX) {
		char *text = json_dumps(ok, JSON_COMPACT);
		rogue_err(r, EPROTO, "CLAIM_OK does not grant one range of %u bytes: %s", SLICE,
			  text ?: "?");
		free(text);
		return -EPROTO;
	}
	r->addr = (uint64_t)addr;
	r->len = (uint64_t)len;
	r->rkey = (uint32_t)rkey;
	return 0;
}

/* CLAIM as daemon/claim.c send_claim() builds it, then CLAIM_OK (*ok, the caller's). */
static int rogue_claim_ok(struct ctx *t, struct rogue *r, const struct offer *o, json_t **ok)
{
	char token[2 * XP_ID_BYTES + 1], node[2 * XP_ID_BYTES + 1];
	bool read = o->m.kind == XP_KIND_READABLE;
	json_t *claim;
	int err;

	*ok = NULL;
	xp_hex_encode(o->m.token, XP_ID_BYTES, token);
	xp_hex_encode(o->m.node, XP_ID_BYTES, node);
	r->xfer = ++t->xfer_seq;
	claim = json_pack("{s:I, s:s, s:s, s:I, s:I, s:s}", "op", (json_int_t)o->m.op, "kind",
			  xp_kind_name(read ? XP_KIND_READ : XP_KIND_WRITE), "node", node, "epoch",
			  (json_int_t)o->m.epoch, "length", (json_int_t)o->m.total, "metadata_kind",
			  xp_kind_name(o->m.kind));
	if (claim && peer_key_len) { /* a keyed owner takes a proof of the token, never the token */
		uint8_t proof[32];
		char phex[65];
		if (claim_proof(r, &o->m, proof)) {
			json_decref(claim);
			return rogue_err(r, EIO, "HMAC failed");
		}
		xp_hex_encode(proof, sizeof(proof), phex);
		json_object_set_new(claim, "proof", json_string(phex));
	} else if (claim) {
		json_object_set_new(claim, "token", json_string(token));
	}
	err = claim ? send_msg(r, XP_PEER_CLAIM, XP_PEER_FROM_ACTIVE, r->xfer, claim) :
		      rogue_err(r, ENOMEM, "out of memory");
	json_decref(claim);
	if (!err)
		err = wait_msg(r, XP_PEER_CLAIM_OK, ok);
	return err;
}

/* The claim, then CLAIM_OK and its grant. */
static int rogue_claim(struct ctx *t, struct rogue *r, const struct offer *o)
{
	json_t *ok = NULL;
	int err = rogue_claim_ok(t, r, o, &ok);

	if (!err)
		err = parse_grant(r, ok);
	json_decref(ok);
	return err;
}

/* DONE, then DONE_ACK (§10.3): the owner's op is COMPLETE and the transfer over. */
static int rogue_done(struct rogue *r)
{
	json_t *done = json_pack("{s:I}", "bytes", (json_int_t)r->len), *ack = NULL;
	int err = send_msg(r, XP_PEER_DONE, XP_PEER_FROM_ACTIVE, r->xfer, done);

	json_decref(done);
	if (!err)
		err = wait_msg(r, XP_PEER_DONE_ACK, &ack);
	json_decref(ack);
	return err;
}

/*
 * The active side's release after the owner's CANCEL (§10.5: CANCEL back), then PING: the
 * owner handles messages in order, so its PONG says the release was handled.
 */
static int rogue_release(struct rogue *r)
{
	json_t *c = json_pack("{s:s, s:s}", "errno", "ECANCELED", "message", "rogue releases");
	unsigned pongs = r->pongs;
	uint64_t deadline = now_ms() + WAIT_MS;
	int err = send_msg(r, XP_PEER_CANCEL, XP_PEER_FROM_ACTIVE, r->xfer, c);

	json_decref(c);
	if (!err)
		err = send_msg(r, XP_PEER_PING, 0, 0, NULL);
	while (!err && r->pongs == pongs)
		if ((err = step(r, deadline)) == -ETIMEDOUT)
			return rogue_err(r, ETIMEDOUT, "no PONG within %d ms", WAIT_MS);
	return err;
}

/* ---- does the device itself confine a window to its range? ---- */

/*
 * Checks b and c can fail for two reasons: the owner bound a window wider than the operation,
 * or the device does not check a window's bounds at all. Soft-RoCE (rxe) up to at least Linux
 * 6.1 is the latter: its responder checks a window's rkey, state and access flags, then the
 * range against the underlying MR only. So the rogue first asks its own device, on a loopback
 * QP pair: a window bound read-only onto the middle of an MR, and a READ just before it.
 */
struct loop {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b; /* a reads from b's memory */
	struct ibv_mr *mr, *lmr;
	struct ibv_mw *mw;
	uint8_t *buf, *lbuf;
};

/* The index of the RoCE v2 GID of IPv4 address @sin on @port, or -1. */
static int roce_gid(struct ibv_context *verbs, uint8_t port, const struct sockaddr *sa,
		    union ibv_gid *gid)
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
	const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
	struct ibv_port_attr pa;
	struct ibv_gid_entry e;

	if (sa->sa_family != AF_INET || ibv_query_port(verbs, port, &pa))
		return -1;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(verbs, port, (uint32_t)i, &e, 0) == 0 &&
		    e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4mapped, 12) == 0 &&
		    memcmp(e.gid.raw + 12, &sin->sin_addr, 4) == 0) {
			*gid = e.gid;
			return i;
		}
	}
	return -1;
}

/* Moves @q to RTS, connected to @peer on the same port (loopback through GID @gidx). */
static int loop_connect(struct ibv_qp *q, const struct ibv_qp *peer, uint8_t port, int gidx,
			const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT,
				 .port_num = port,
				 .qp_access_flags = IBV_ACCESS_REMOTE_READ };

	if (ibv_modify_qp(q, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qp_num,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1,
			     .port_num = port,
			     .grh = { .dgid = *gid, .sgid_index = (uint8_t)gidx, .hop_limit = 1 } }
	};
	if (ibv_modify_qp(q, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS,
				  .timeout = ACK_TIMEOUT,
				  .retry_cnt = 3,
				  .rnr_retry = 3,
				  .max_rd_atomic = 1 };
	return ibv_modify_qp(q, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) ?
		       -1 :
		       0;
}

/* One completion within WAIT_MS, polled with short sleeps: this runs once, before any probe. */
static int loop_wait(struct loop *l, enum ibv_wc_status *st)
{
	uint64_t deadline = now_ms() + WAIT_MS;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(l->cq, 1, &wc)) == 0 && now_ms() < deadline)
		usleep(1000);
	if (n <= 0)
		return -1;
	*st = wc.status;
	return 0;
}

static void loop_free(struct loop *l)
{
	if (l->mw)
		ibv_dealloc_mw(l->mw);
	if (l->a)
		ibv_destroy_qp(l->a);
	if (l->b)
		ibv_destroy_qp(l->b);
	if (l->mr)
		ibv_dereg_mr(l->mr);
	if (l->lmr)
		ibv_dereg_mr(l->lmr);
	if (l->cq)
		ibv_destroy_cq(l->cq);
	if (l->pd)
		ibv_dealloc_pd(l->pd);
	free(l->buf);
	free(l->lbuf);
}

static int loop_setup(struct loop *l, struct rdma_cm_id *id, char *why, size_t len)
{
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1
	};
	union ibv_gid gid;
	int gidx = roce_gid(id->verbs, id->port_num, rdma_get_local_addr(id), &gid);

	if (gidx < 0) {
		snprintf(why, len, "no RoCE v2 GID of the rogue's address on its device");
		return -1;
	}
	l->buf = calloc(1, BUF_LEN);
	l->lbuf = calloc(1, BUF_LEN);
	if (!l->buf || !l->lbuf || !(l->pd = ibv_alloc_pd(id->verbs)) ||
	    !(l->cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0)) ||
	    !(l->mr = ibv_reg_mr(l->pd, l->buf, BUF_LEN,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)) ||
	    !(l->lmr = ibv_reg_mr(l->pd, l->lbuf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE))) {
		snprintf(why, len, "loopback resources: %s", strerror(errno));
		return -1;
	}
	qa.send_cq = qa.recv_cq = l->cq;
	if (!(l->a = ibv_create_qp(l->pd, &qa)) || !(l->b = ibv_create_qp(l->pd, &qa)) ||
	    loop_connect(l->a, l->b, id->port_num, gidx, &gid) ||
	    loop_connect(l->b, l->a, id->port_num, gidx, &gid)) {
		snprintf(why, len, "loopback QP pair: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Binds a read-only window onto the middle slice of @l's MR, on QP b. */
static int loop_bind(struct loop *l, char *why, size_t len)
{
	struct ibv_mw_bind bind = { .send_flags = IBV_SEND_SIGNALED,
				    .bind_info = { .mr = l->mr,
						   .addr = (uintptr_t)l->buf + SLICE,
						   .length = SLICE,
						   .mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	enum ibv_wc_status st;

	if (!(l->mw = ibv_alloc_mw(l->pd, IBV_MW_TYPE_1)) || ibv_bind_mw(l->b, l->mw, &bind) ||
	    loop_wait(l, &st) || st != IBV_WC_SUCCESS) {
		snprintf(why, len, "binding a type 1 window on the rogue's device failed");
		return -1;
	}
	return 0;
}

/* Sets t->bounds from a READ of the 4 KiB just before a window, on the rogue's own device. */
static void check_device_bounds(struct ctx *t)
{
	struct loop l = { 0 };
	struct rogue r;
	enum ibv_wc_status st;
	const char *dev = "?";

	t->bounds = -1;
	if (resolve_local(t, &r)) {
		snprintf(t->bounds_why, sizeof(t->bounds_why), "%s", r.why);
		rogue_close(&r);
		return;
	}
	dev = ibv_get_device_name(r.id->verbs->device);
	if (loop_setup(&l, r.id, t->bounds_why, sizeof(t->bounds_why)) == 0 &&
	    loop_bind(&l, t->bounds_why, sizeof(t->bounds_why)) == 0) {
		struct ibv_sge sge = { (uintptr_t)l.lbuf, PROBE_LEN, l.lmr->lkey };
		struct ibv_send_wr wr = { .sg_list = &sge,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .wr.rdma = { (uintptr_t)l.buf + SLICE - PROBE_LEN,
						       l.mw->rkey } },
				   *bad;
		if (ibv_post_send(l.a, &wr, &bad) || loop_wait(&l, &st))
			snprintf(t->bounds_why, sizeof(t->bounds_why),
				 "the loopback READ did not complete");
		else if (st == IBV_WC_SUCCESS)
			t->bounds = 0;
		else
			t->bounds = 1;
		if (t->bounds >= 0)
			snprintf(
				t->bounds_why, sizeof(t->bounds_why),
				"the rogue's own %s, loopback: "
				"a READ of the 4 KiB just before a type 1 window, with its rkey -> %s",
				dev, ibv_wc_status_str(st));
	}
	loop_free(&l);
	rogue_close(&r);
}

/* ---- probes: a fresh op, a fresh connection, a fresh claim ---- */

static void probe_close(struct ctx *t, struct probe *p)
{
	rogue_close(&p->r);
	if (p->canceller > 0)
		waitpid(p->canceller, NULL, 0); /* its op.cancel returns once the op ended */
	p->canceller = 0;
	offer_end(t, &p->o);
}

static int probe_open(struct ctx *t, bool writable, struct probe *p, char *why, size_t len)
{
	memset(p, 0, sizeof(*p));
	reset_buffer(t);
	if (offer_new(t, writable, &p->o, why, len)) {
		probe_close(t, p);
		return -1;
	}
	if (rogue_connect(t, &p->r, &p->o.m) || rogue_claim(t, &p->r, &p->o)) {
		snprintf(why, len, "connect+claim: %s", p->r.why);
		probe_close(t, p);
		return -1;
	}
	if (!t->hello_noted) {
		char node[2 * XP_ID_BYTES + 1];
		xp_hex_encode(p->r.peer_node, XP_ID_BYTES, node);
		note("rogue connects from %s to %s; the owner's HELLO names node %s epoch %" PRIu64
		     " as its metadata does",
		     t->tg.src_text, t->tg.dst_text, node, p->r.peer_epoch);
		t->hello_noted = true;
	}
	return 0;
}

/*
 * A request the owner must refuse: on a fresh claim of a readable (or @writable) op, @write or
 * read @len bytes at the granted address + @delta, with the window's rkey (or *@rkey: rxe gives
 * an MR without remote access rkey 0, so 0 is no "unset"); the owner's buffer must be as it was.
 */
static void probe_refused(struct ctx *t, const char *name, bool writable, bool write, long delta,
			  uint32_t len, const uint32_t *rkey, bool bounds)
{
	struct probe p;
	char why[512];

	if (probe_open(t, writable, &p, why, sizeof(why))) {
		fail(name, "%s", why);
		return;
	}
	uint64_t raddr = p.r.addr + (uint64_t)delta;
	uint32_t key = rkey ? *rkey : p.r.rkey;
	if (write)
		fill(p.r.data, SLICE + (size_t)delta, len, SEED_ROGUE);
	bool refused = expect_refused(&p.r, write, raddr, key, len, why, sizeof(why)) == 0 &&
		       buffer_is(t, SEED_OWNER, why, sizeof(why)) == 0;
	if (refused)
		ok("%s: %s of %u bytes at 0x%" PRIx64 " rkey 0x%x -> %s, owner's buffer unchanged",
		   name, write ? "WRITE" : "READ", len, raddr, key,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	else if (bounds && t->bounds == 0)
		note("NOT PROVABLE HERE: %s: %s; the device ignores window bounds (see above), so "
		     "this says nothing about the owner",
		     name, why);
	else
		fail(name, "%s", why);
	probe_close(t, &p);
}

/* ---- file regions (PROTOCOL.md §10.5.1): a window onto one staged chunk ---- */

/* An owner's op over a file region: the file holds what the middle slice holds. */
struct sprobe {
	struct offer o;
	struct rogue r;
	uint64_t region;
	int fd; /* the file, for reading it back (already unlinked) */
};

/* The owner's file region of SLICE bytes, read-only (@writable: write-only) for the daemon. */
static int file_region(struct ctx *t, bool writable, struct sprobe *sp, char *why, size_t len)
{
	char path[] = "/dev/shm/rdma_rogue.XXXXXX";
	uint8_t *bytes = malloc(SLICE);
	int fd = mkstemp(path), dfd = -1, rc = -1;

	if (fd >= 0 && bytes) {
		fill(bytes, SLICE, SLICE, SEED_OWNER);
		dfd = pwrite(fd, bytes, SLICE, 0) == SLICE ?
			      open(path, (writable ? O_WRONLY : O_RDONLY) | O_CLOEXEC) :
			      -1;
		rc = dfd < 0 ? -errno :
			       xfer_region_register_file(t->c, dfd, 0, SLICE, 0, "rogue-file",
							 &sp->region);
	}
	if (fd >= 0)
		unlink(path);
	if (dfd >= 0)
		close(dfd);
	free(bytes);
	sp->fd = fd;
	if (rc < 0)
		snprintf(why, len, "file region: %s (%s)", strerror(rc < -1 ? -rc : errno),
			 xfer_last_error(t->c));
	return rc < 0 ? -1 : 0;
}

static void sprobe_close(struct ctx *t, struct sprobe *sp)
{
	rogue_close(&sp->r);
	offer_end(t, &sp->o);
	if (sp->region)
		xfer_region_deregister(t->c, sp->region, 1);
	if (sp->fd >= 0)
		close(sp->fd);
	sp->fd = -1;
	sp->region = 0;
}

/* STAGE: the owner's grant of its first chunk, into r->addr, len, rkey. */
static int wait_stage(struct rogue *r)
{
	json_t *st = NULL;
	json_int_t off, len, addr, rkey;
	int err = wait_msg(r, XP_PEER_STAGE, &st);

	if (!err && (json_unpack(st, "{s:I, s:I, s:I, s:I}", "off", &off, "len", &len, "addr",
				 &addr, "rkey", &rkey) ||
		     off != 0 || len != SLICE))
		err = rogue_err(r, EPROTO, "STAGE does not grant the op's one chunk");
	json_decref(st);
	if (!err) {
		r->addr = (uint64_t)addr;
		r->len = (uint64_t)len;
		r->rkey = (uint32_t)rkey;
	}
	return err;
}

/* A fresh file region, op, connection and claim, up to the owner's first STAGE. */
static int sprobe_open(struct ctx *t, bool writable, struct sprobe *sp, char *why, size_t len)
{
	json_t *ok = NULL;

	memset(sp, 0, sizeof(*sp));
	sp->fd = -1;
	if (file_region(t, writable, sp, why, len) ||
	    offer_over(t, writable, sp->region, 0, &sp->o, why, len)) {
		sprobe_close(t, sp);
		return -1;
	}
	int err = rogue_connect(t, &sp->r, &sp->o.m) || rogue_claim_ok(t, &sp->r, &sp->o, &ok);
	if (!err && !json_is_true(json_object_get(ok, "staged")))
		err = rogue_err(&sp->r, EPROTO,
				"CLAIM_OK of a file region is not {\"staged\": true}");
	json_decref(ok);
	if (err || wait_stage(&sp->r)) {
		snprintf(why, len, "connect+claim+STAGE: %s", sp->r.why);
		sprobe_close(t, sp);
		return -1;
	}
	return 0;
}

/* STAGED for chunk 0, then PING: the owner's PONG says it handled STAGED (in order). */
static int rogue_staged(struct rogue *r)
{
	json_t *j = json_pack("{s:I}", "off", 0);
	unsigned pongs = r->pongs;
	uint64_t deadline = now_ms() + WAIT_MS;
	int err = send_msg(r, XP_PEER_STAGED, XP_PEER_FROM_ACTIVE, r->xfer, j);

	json_decref(j);
	if (!err)
		err = send_msg(r, XP_PEER_PING, 0, 0, NULL);
	while (!err && r->pongs == pongs)
		if ((err = step(r, deadline)) == -ETIMEDOUT)
			return rogue_err(r, ETIMEDOUT, "no PONG within %d ms", WAIT_MS);
	return err;
}

/*
 * p. A readable over a file: the STAGE's window reads exactly the file's chunk, only through
 * the claimer's queue pair, never for writing, and no more once the claimer said STAGED.
 */
static void test_staged_read(struct ctx *t)
{
	const char *a = "p. RDMA READ of a file readable's staged chunk with its STAGE rkey";
	const char *o = "p. another connection cannot use the staged chunk's rkey";
	const char *g = "p. after STAGED the staged chunk's rkey no longer works";
	const char *w = "p. WRITE into a file readable's staged chunk (read-only window)";
	struct sprobe sp;
	struct rogue other;
	char why[512];

	if (sprobe_open(t, false, &sp, why, sizeof(why))) {
		fail(a, "%s", why);
		return;
	}
	if (expect_success(&sp.r, false, sp.r.addr, sp.r.rkey, SLICE, SLICE, why, sizeof(why)) == 0)
		ok("%s: %u bytes at 0x%" PRIx64 " rkey 0x%x equal the file's", a, SLICE, sp.r.addr,
		   sp.r.rkey);
	else
		fail(a, "%s", why);
	if (rogue_connect(t, &other, &sp.o.m))
		fail(o, "a second connection could not be made: %s", other.why);
	else if (expect_refused(&other, false, sp.r.addr, sp.r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(o, "%s", why);
	else
		ok("%s: READ -> %s", o, ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	rogue_close(&other);
	if (rogue_staged(&sp.r))
		fail(g, "STAGED: %s", sp.r.why);
	else if (expect_refused(&sp.r, false, sp.r.addr, sp.r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(g, "%s", why);
	else
		ok("%s: READ with rkey 0x%x -> %s", g, sp.r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	sprobe_close(t, &sp);

	if (sprobe_open(t, false, &sp, why, sizeof(why))) {
		fail(w, "%s", why);
		return;
	}
	fill(sp.r.data, SLICE, PROBE_LEN, SEED_ROGUE);
	if (expect_refused(&sp.r, true, sp.r.addr, sp.r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(w, "%s", why);
	else
		ok("%s: WRITE -> %s", w, ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	sprobe_close(t, &sp);
}

/*
 * q. A writable over a file: the window takes the chunk's bytes, which reach the file once
 * STAGED and DONE came (the owner's op COMPLETE), and takes nothing after STAGED.
 */
static void test_staged_write(struct ctx *t)
{
	const char *e = "q. RDMA WRITE into a file writable's staged chunk, STAGED, DONE";
	const char *g = "q. after STAGED the file writable's chunk rkey no longer works";
	struct sprobe sp;
	char why[512];
	uint8_t *back = malloc(SLICE);
	long at;

	if (!back || sprobe_open(t, true, &sp, why, sizeof(why))) {
		fail(e, "%s", back ? why : "out of memory");
		free(back);
		return;
	}
	fill(sp.r.data, SLICE, SLICE, SEED_WRITE);
	if (expect_success(&sp.r, true, sp.r.addr, sp.r.rkey, SLICE, SLICE, why, sizeof(why)) ||
	    (rogue_staged(&sp.r) && snprintf(why, sizeof(why), "STAGED: %s", sp.r.why)) ||
	    (rogue_done(&sp.r) && snprintf(why, sizeof(why), "DONE: %s", sp.r.why)) ||
	    owner_complete(t, sp.o.op, why, sizeof(why)))
		fail(e, "%s", why);
	else if (pread(sp.fd, back, SLICE, 0) != SLICE ||
		 (at = mismatch(back, SLICE, SLICE, SEED_WRITE)) >= 0)
		fail(e,
		     "the owner's file does not hold the bytes written (read back failed or byte "
		     "differs)");
	else
		ok("%s: the owner's op COMPLETE, its file holds the %u bytes", e, SLICE);
	fill(sp.r.data, SLICE, PROBE_LEN, SEED_ROGUE);
	if (expect_refused(&sp.r, true, sp.r.addr, sp.r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(g, "%s", why);
	else
		ok("%s: WRITE with rkey 0x%x -> %s", g, sp.r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	free(back);
	sprobe_close(t, &sp);
}

/* ---- windows (PROTOCOL.md §5.1, §10.6): keys of a revoked window ---- */

/* A window over the middle slice, opened by the rogue (WOPEN with a proof), then one get. */
struct wprobe {
	uint64_t window;
	char *metadata;
	struct xp_meta m;
	bool decoded;
	struct rogue r;
	pid_t closer;
	/* The opener's own key of WOPEN_OK (§10.6): onto the whole window, for its life. */
	bool keyed;
	uint64_t kaddr, klen;
	uint32_t krkey;
	uint32_t credit; /* WOPEN_OK's notify_credit (§10.9), when the WOPEN asked for it */
};

/* The key WOPEN_OK carries: {"addr", "len", "rkey"} (absent on a device without windows). */
static void parse_open_key(struct wprobe *w, json_t *ok)
{
	json_int_t addr, len, rkey;

	if (ok &&
	    json_unpack(ok, "{s:I, s:I, s:I}", "addr", &addr, "len", &len, "rkey", &rkey) == 0) {
		w->keyed = true;
		w->kaddr = (uint64_t)addr;
		w->klen = (uint64_t)len;
		w->krkey = (uint32_t)rkey;
	}
	w->credit = (uint32_t)json_integer_value(json_object_get(ok, "notify_credit"));
}

static void wprobe_close(struct ctx *t, struct wprobe *w)
{
	rogue_close(&w->r);
	if (w->closer > 0)
		waitpid(w->closer, NULL, 0);
	else if (w->metadata)
		xfer_window_close(t->c, w->window);
	free(w->metadata);
	if (w->decoded)
		xp_meta_fini(&w->m);
	memset(w, 0, sizeof(*w));
}

/*
 * A read-only window over the middle slice, and its WOPEN (as handle 1, with a proof; asking
 * for a credit of notifications if @credit) answered by WOPEN_OK: its key and credit in @w.
 */
static int wprobe_wopen(struct ctx *t, struct wprobe *w, bool credit, char *why, size_t len)
{
	char node[2 * XP_ID_BYTES + 1], phex[65], err[256];
	uint8_t proof[32];
	json_t *j, *ok = NULL;
	int rc;

	memset(w, 0, sizeof(*w));
	reset_buffer(t);
	rc = xfer_window_create(t->c, t->region, SLICE, SLICE, XFER_ACCESS_READ, 0, &w->window,
				&w->metadata);
	if (rc < 0 || xp_meta_decode(w->metadata, &w->m, err, sizeof(err)) < 0) {
		snprintf(why, len, "window.create: %s (%s)", xfer_strerror(rc),
			 xfer_last_error(t->c));
		return -1;
	}
	w->decoded = true;
	if (rogue_connect(t, &w->r, &w->m)) {
		snprintf(why, len, "connect: %s", w->r.why);
		return -1;
	}
	xp_hex_encode(w->m.node, XP_ID_BYTES, node);
	w->r.xfer = 1; /* the handle: the proof is bound to it */
	if (claim_proof(&w->r, &w->m, proof))
		return snprintf(why, len, "HMAC failed"), -1;
	xp_hex_encode(proof, sizeof(proof), phex);
	j = json_pack("{s:I, s:s, s:I, s:s}", "window", (json_int_t)w->m.op, "node", node, "epoch",
		      (json_int_t)w->m.epoch, "proof", phex);
	if (j && credit)
		json_object_set_new(j, "notify_credit", json_true());
	rc = send_msg(&w->r, XP_PEER_WOPEN, XP_PEER_FROM_ACTIVE, 1, j);
	json_decref(j);
	if (!rc)
		rc = wait_msg(&w->r, XP_PEER_WOPEN_OK, &ok);
	parse_open_key(w, ok);
	json_decref(ok);
	if (rc)
		snprintf(why, len, "open: %s", w->r.why);
	return rc ? -1 : 0;
}

/* WOPEN as handle 1, then WCLAIM of a get of the whole window; the grant in w->r. */
static int wprobe_open(struct ctx *t, struct wprobe *w, char *why, size_t len)
{
	char node[2 * XP_ID_BYTES + 1];
	json_t *j, *ok = NULL;
	int rc;

	if (wprobe_wopen(t, w, false, why, len))
		return -1;
	xp_hex_encode(w->m.node, XP_ID_BYTES, node);
	w->r.xfer = ++t->xfer_seq;
	j = json_pack("{s:I, s:I, s:s, s:I, s:I, s:s, s:I}", "window", (json_int_t)w->m.op,
		      "handle", (json_int_t)1, "kind", "get", "offset", (json_int_t)0, "length",
		      (json_int_t)SLICE, "node", node, "epoch", (json_int_t)w->m.epoch);
	rc = send_msg(&w->r, XP_PEER_WCLAIM, XP_PEER_FROM_ACTIVE, w->r.xfer, j);
	json_decref(j);
	if (!rc)
		rc = wait_msg(&w->r, XP_PEER_CLAIM_OK, &ok);
	if (!rc)
		rc = parse_grant(&w->r, ok);
	json_decref(ok);
	if (rc)
		snprintf(why, len, "open+get: %s", w->r.why);
	return rc ? -1 : 0;
}

/*
 * The opener lets go of the window and of its own key (WCLOSE from the active side, §10.6),
 * then PING: the owner handles messages in order, so its PONG says the release was handled.
 */
static int rogue_let_go(struct wprobe *w)
{
	json_t *c = json_pack("{s:I}", "window", (json_int_t)w->m.op);
	unsigned pongs = w->r.pongs;
	uint64_t deadline = now_ms() + WAIT_MS;
	int err = send_msg(&w->r, XP_PEER_WCLOSE, XP_PEER_FROM_ACTIVE, 1, c);

	json_decref(c);
	if (!err)
		err = send_msg(&w->r, XP_PEER_PING, 0, 0, NULL);
	while (!err && w->r.pongs == pongs)
		if ((err = step(&w->r, deadline)) == -ETIMEDOUT)
			return rogue_err(&w->r, ETIMEDOUT, "no PONG within %d ms", WAIT_MS);
	return err;
}

/* The owner's client closes the window (in a child: it returns once the keys are let go). */
static int owner_revokes(struct ctx *t, struct wprobe *w, char *why, size_t len)
{
	json_t *c = NULL;
	pid_t pid = fork();

	if (pid == 0)
		_exit(xfer_window_close(t->c, w->window) == 0 ? 0 : 1);
	if (pid < 0)
		return snprintf(why, len, "fork: %s", strerror(errno)), -1;
	w->closer = pid;
	if (wait_msg(&w->r, XP_PEER_CANCEL, &c) == 0) {
		uint64_t xfer = w->r.xfer;
		int rc;
		json_decref(c);
		c = NULL;
		w->r.xfer = 1; /* (WCLOSE names the handle, not the get's transfer) */
		rc = wait_msg(&w->r, XP_PEER_WCLOSE, &c);
		w->r.xfer = xfer;
		json_decref(c);
		if (rc == 0)
			return 0;
	}
	snprintf(why, len, "%s", w->r.why);
	return -1;
}

/* g: a window's rkey reads the window while its get lasts; once revoked and let go, nothing. */
static void test_window_revoked(struct ctx *t)
{
	const char *g = "g. a revoked window's rkey, let go by the opener, no longer works";
	struct wprobe w;
	char why[512];
	int status = -1;

	if (wprobe_open(t, &w, why, sizeof(why))) {
		fail(g, "%s", why);
		wprobe_close(t, &w);
		return;
	}
	if (expect_success(&w.r, false, w.r.addr, w.r.rkey, PROBE_LEN, SLICE, why, sizeof(why)) ||
	    owner_revokes(t, &w, why, sizeof(why)))
		fail(g, "%s", why);
	else if (rogue_release(&w.r) || rogue_let_go(&w))
		fail(g, "release: %s", w.r.why);
	else if (expect_refused(&w.r, false, w.r.addr, w.r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(g, "%s; the owner's windows_open is %lld", why, windows_now(t));
	else if (waitpid(w.closer, &status, 0) != w.closer || status != 0)
		fail(g, "the owner's window.close did not return 0 (status %d)", status);
	else
		ok("%s: READ with rkey 0x%x -> %s, window.close returned", g, w.r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	w.closer = status == -1 ? w.closer : 0;
	wprobe_close(t, &w);
}

/*
 * i: the opener's own key (bound once at open) reads exactly the window while it is open, is
 * refused once the owner revoked the window and the opener let go, and window.close returns.
 */
static void test_window_key_revoked(struct ctx *t)
{
	const char *i = "i. an opener's key (WOPEN_OK) reads the window, and once revoked and let "
			"go no longer works";
	struct wprobe w;
	char why[512];
	int status = -1;

	if (wprobe_open(t, &w, why, sizeof(why))) {
		fail(i, "%s", why);
		wprobe_close(t, &w);
		return;
	}
	if (!w.keyed)
		fail(i, "WOPEN_OK carried no key (addr, len, rkey) though the device has windows");
	else if (w.klen != SLICE)
		fail(i, "WOPEN_OK's key covers %" PRIu64 " bytes, the window %u", w.klen,
		     (unsigned)SLICE);
	else if (expect_success(&w.r, false, w.kaddr, w.krkey, SLICE, SLICE, why, sizeof(why)) ||
		 owner_revokes(t, &w, why, sizeof(why)))
		fail(i, "%s", why);
	else if (rogue_release(&w.r) || rogue_let_go(&w))
		fail(i, "release: %s", w.r.why);
	else if (expect_refused(&w.r, false, w.kaddr, w.krkey, PROBE_LEN, why, sizeof(why)))
		fail(i, "%s; the owner's windows_open is %lld", why, windows_now(t));
	else if (waitpid(w.closer, &status, 0) != w.closer || status != 0)
		fail(i, "the owner's window.close did not return 0 (status %d)", status);
	else
		ok("%s: READ of the whole window with rkey 0x%x -> owner's bytes; after the "
		   "revocation -> %s, window.close returned",
		   i, w.krkey, ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	w.closer = status == -1 ? w.closer : 0;
	wprobe_close(t, &w);
}

/*
 * i: an opener's key used outside what it was bound for: past the window's end, before its
 * start, and a WRITE through a read-only window's key. Each is refused by the owner's device
 * (the bounds only on a device that checks a window's bounds: Soft-RoCE 6.1 does not).
 */
static void key_probe_refused(struct ctx *t, const char *name, bool write, long delta, uint32_t len,
			      bool bounds)
{
	struct wprobe w;
	char why[512];

	if (wprobe_open(t, &w, why, sizeof(why)) || !w.keyed) {
		fail(name, "%s", w.keyed ? why : "WOPEN_OK carried no key");
		wprobe_close(t, &w);
		return;
	}
	uint64_t raddr = w.kaddr + (uint64_t)delta;
	if (write)
		fill(w.r.data, SLICE + (size_t)delta, len, SEED_ROGUE);
	bool refused = expect_refused(&w.r, write, raddr, w.krkey, len, why, sizeof(why)) == 0 &&
		       buffer_is(t, SEED_OWNER, why, sizeof(why)) == 0;
	if (refused)
		ok("%s: %s of %u bytes at 0x%" PRIx64 " rkey 0x%x -> %s, owner's buffer unchanged",
		   name, write ? "WRITE" : "READ", len, raddr, w.krkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	else if (bounds && t->bounds == 0)
		note("NOT PROVABLE HERE: %s: %s; the device ignores window bounds (see above), so "
		     "this says nothing about the owner",
		     name, why);
	else
		fail(name, "%s", why);
	wprobe_close(t, &w);
}

/* g: an opener that keeps a revoked window's keys is cut off, and only then does close return. */
static void test_window_unreleased(struct ctx *t)
{
	const char *g = "g. an opener that keeps a revoked window's keys is cut off within "
			"keepalive_timeout_ms";
	struct wprobe w;
	char why[512];
	uint64_t t0;

	if (wprobe_open(t, &w, why, sizeof(why)) || owner_revokes(t, &w, why, sizeof(why))) {
		fail(g, "%s", why);
		wprobe_close(t, &w);
		return;
	}
	t0 = now_ms();
	if (linger(&w.r, LINGER_MS) == 0)
		fail(g, "the connection still stood %d ms after the revocation", LINGER_MS);
	else
		ok("%s: the owner dropped the connection (and the window with its queue pair) "
		   "%llu ms after revoking",
		   g, (unsigned long long)(now_ms() - t0));
	wprobe_close(t, &w);
}

/* ---- notifications (PROTOCOL.md §10.9): an opener that ignores its credit ---- */

/* The tags the owner's client took ("n00000", "n00001", ...), checked in order as they come. */
struct nseen {
	int next, wrong;
};

static void nseen_cb(struct xfer_client *c, const struct xfer_window_event *ev, void *arg)
{
	struct nseen *s = arg;
	char want[16];

	(void)c;
	if (ev->type != XFER_WINDOW_NOTIFIED)
		return;
	snprintf(want, sizeof(want), "n%05d", s->next++);
	s->wrong += strcmp(ev->tag, want) != 0;
}

/*
 * WNOTIFYs as fast as the owner's receive credits allow, never waiting for a WNOTIFY_ACK, until
 * the owner's WCLOSE (into *@close) or @cap sent. Returns how many were sent.
 */
static int notify_flood(struct wprobe *w, int cap, json_t **close)
{
	uint64_t deadline = now_ms() + FLOOD_MS;
	char tag[16];
	int sent = 0;

	w->r.xfer = 1; /* (the owner's WCLOSE names the handle) */
	while (!*close && !w->r.disconnected && !w->r.qp_error && sent < cap &&
	       now_ms() < deadline) {
		for (int more = 1; more && sent < cap;) {
			snprintf(tag, sizeof(tag), "n%05d", sent);
			json_t *j = json_pack("{s:I, s:s, s:I, s:I, s:s}", "window",
					      (json_int_t)w->m.op, "kind", "get", "offset",
					      (json_int_t)0, "bytes", (json_int_t)1, "tag", tag);
			more = send_msg(&w->r, XP_PEER_WNOTIFY, XP_PEER_FROM_ACTIVE, 1, j) == 0;
			sent += more;
			json_decref(j);
		}
		int rc = pump(&w->r, 200);
		if (rc < 0 && rc != -ETIMEDOUT)
			break;
		take_msg(&w->r, XP_PEER_WCLOSE, close);
	}
	return sent;
}

/*
 * Pumps until the owner has returned credits for @want messages (the flood spent them all):
 * 0, or -1 with the reason in r->why.
 */
static int await_credits(struct rogue *r, int want)
{
	uint64_t deadline = now_ms() + WAIT_MS;

	while (r->credits < want) {
		if (r->disconnected || r->qp_error)
			return rogue_err(r, ECONNRESET, "the connection failed"), -1;
		if (step(r, deadline) == -ETIMEDOUT)
			return rogue_err(r, ETIMEDOUT, "credits %d after %d ms", r->credits,
					 WAIT_MS),
			       -1;
	}
	return 0;
}

/*
 * The owner's client reads until the owner's daemon holds no notification for it and it took
 * every one the daemon sent (list.windows "waiting" 0, "notified" = what it saw).
 */
static int owner_takes_all(struct ctx *t, struct wprobe *w, struct nseen *seen, long long *told,
			   char *why, size_t len)
{
	uint64_t deadline = now_ms() + FLOOD_MS;

	for (;;) {
		json_t *j = owner_call(t, "list.windows", why, len), *row;
		long long waiting = -1;
		size_t i;
		if (!j)
			return -1;
		json_array_foreach(json_object_get(j, "windows"), i, row) {
			if ((uint64_t)json_integer_value(json_object_get(row, "window")) !=
			    w->window)
				continue;
			waiting = json_integer_value(json_object_get(row, "waiting"));
			*told = json_integer_value(json_object_get(row, "notified"));
		}
		json_decref(j);
		if (xfer_dispatch(t->c) < 0)
			return snprintf(why, len, "the owner's client was cut"), -1;
		if (waiting == 0 && seen->next == *told)
			return 0;
		if (now_ms() > deadline)
			return snprintf(why, len, "%lld notifications still wait, %d of %lld taken",
					waiting, seen->next, *told),
			       -1;
		usleep(10000);
	}
}

/*
 * n: an opener that floods WNOTIFYs at an owner whose client reads nothing, past what it may
 * have waiting there (§10.9: the credit of WOPEN_OK when it asked for one, else 4096), is
 * revoked (WCLOSE EDQUOT naming the rule), never the owner's client: that stays connected and
 * then takes every notification the owner accepted before the revocation, once and in order.
 */
static void test_notify_flood(struct ctx *t, bool credit)
{
	const char *name =
		credit ? "n. an opener that sends WNOTIFYs past its credit is revoked "
			 "EDQUOT, the owner's client kept" :
			 "n. an opener without credit (an older daemon) flooding WNOTIFYs "
			 "is revoked EDQUOT past 4096 waiting, the owner's client kept";
	struct nseen seen = { 0, 0 };
	struct wprobe w;
	json_t *close = NULL;
	long long told = -1;
	char why[512];

	xfer_dispatch(t->c); /* (the owner's client starts with nothing unread) */
	int rc = wprobe_wopen(t, &w, credit, why, sizeof(why));
	if (rc || !w.keyed || w.credit != (credit ? 1024u : 0u)) {
		if (rc)
			fail(name, "%s", why);
		else if (!w.keyed)
			fail(name, "no key in WOPEN_OK");
		else
			fail(name, "WOPEN_OK granted a credit of %u", w.credit);
		wprobe_close(t, &w);
		return;
	}
	xfer_set_window_cb(t->c, nseen_cb, &seen);
	int sent = notify_flood(&w, 12000, &close);
	const char *err = json_string_value(json_object_get(close, "errno"));
	const char *msg = json_string_value(json_object_get(close, "message"));
	int most = credit ? 4096 : 12000; /* (a credit's revocation comes long before 4096) */
	if (!close || !err || strcmp(err, "EDQUOT") != 0 || !msg || !strstr(msg, "10.9"))
		fail(name, "after %d WNOTIFYs: %s %s: %s", sent, close ? "WCLOSE" : "no WCLOSE",
		     err ?: "", msg ?: w.r.why);
	else if (await_credits(&w.r, 3) || rogue_let_go(&w)) /* (WCLOSE, PING, a CREDIT) */
		fail(name, "let go: %s", w.r.why);
	else if (owner_takes_all(t, &w, &seen, &told, why, sizeof(why)))
		fail(name, "%s", why);
	else if (seen.wrong || told < 1024 + (credit ? 1024 : 4096) || told >= most || told >= sent)
		fail(name, "%d WNOTIFYs sent, the owner's client took %lld (%d out of order)", sent,
		     told, seen.wrong);
	else
		ok("%s: revoked after %d WNOTIFYs (\"%s\"); the owner's client then took %lld, in "
		   "order",
		   name, sent, msg, told);
	json_decref(close);
	xfer_set_window_cb(t->c, NULL, NULL);
	wprobe_close(t, &w);
}

/* ---- a fake window owner (PROTOCOL.md §10.6, §10.9): the real daemon is the opener ---- */

/*
 * The rogue as a window OWNER's daemon, the real xferd as the opener: it listens (rdma_cm),
 * accepts the opener's control and data connections with their HELLOs and AUTHs (role 'A'),
 * answers WOPEN (its proof checked) with WOPEN_OK granting its own MR's key onto the window and
 * a credit of FAKE_CREDIT notifications, takes each WNOTIFY (its put's bytes must be in the
 * window by then), and acknowledges as the case says: rightly, or with a WNOTIFY_ACK the opener
 * must refuse. The opener's client is the rogue's own client (t->c) on the main thread; the
 * fake owner serves on a thread of its own, since window.open returns only once it answered.
 */
#define FAKE_WINDOW 12 /* the fake owner's window id */
#define FAKE_LEN SLICE
#define FAKE_PUTS 6
#define FAKE_PUT_LEN (4 * KIB)
#define FAKE_CREDIT 2
#define FAKE_GET_OFF (32 * KIB) /* the good case's get: window bytes no put touched */
#define FAKE_GET_LEN (16 * KIB)

enum fake_ack {
	ACK_GOOD,	 /**< each WNOTIFY acknowledged: puts COMPLETE, a get, the opener lets go */
	ACK_BACKWARDS,	 /**< {"count":2}, two more WNOTIFYs, then {"count":1} */
	ACK_PAST,	 /**< {"count":3} when 2 were sent */
	ACK_NO_COUNT,	 /**< {} */
	ACK_TEXT_COUNT,	 /**< {"count":"2"} */
	ACK_NOT_JSON,	 /**< a payload that does not parse */
	ACK_LONG_HEADER, /**< a header that says 8 bytes more than the SEND carries */
	ACK_FROM_ACTIVE, /**< a right count, flagged FROM_ACTIVE (an opener's direction) */
};

struct fake_case {
	enum fake_ack ack;
	const char *name;
	int notified;	  /* WNOTIFYs before the bad ack: so many puts COMPLETE, the rest ERRORED */
	const char *rule; /* what the opener's cause must name */
};

static const struct fake_case fake_cases[] = {
	{ ACK_GOOD, "o. a fake owner that acknowledges rightly: tagged puts and a get", FAKE_PUTS,
	  NULL },
	{ ACK_BACKWARDS, "o. a WNOTIFY_ACK count that goes backwards (4 sent, 2 acked, then 1)", 4,
	  "going back or past what was sent (§10.9)" },
	{ ACK_PAST, "o. a WNOTIFY_ACK count past what was sent (2 sent, 3 acked)", FAKE_CREDIT,
	  "going back or past what was sent (§10.9)" },
	{ ACK_NO_COUNT, "o. a WNOTIFY_ACK without a count", FAKE_CREDIT,
	  "WNOTIFY_ACK without an integer count" },
	{ ACK_TEXT_COUNT, "o. a WNOTIFY_ACK whose count is a string", FAKE_CREDIT,
	  "WNOTIFY_ACK without an integer count" },
	{ ACK_NOT_JSON, "o. a WNOTIFY_ACK whose payload does not parse", FAKE_CREDIT,
	  "protocol error in a control message (type WNOTIFY_ACK)" },
	{ ACK_LONG_HEADER, "o. a WNOTIFY_ACK whose header length exceeds its bytes", FAKE_CREDIT,
	  "protocol error in a control message (type WNOTIFY_ACK)" },
	{ ACK_FROM_ACTIVE, "o. a WNOTIFY_ACK flagged FROM_ACTIVE (an opener's message)",
	  FAKE_CREDIT, "WNOTIFY_ACK flagged FROM_ACTIVE" },
	{ ACK_GOOD, "o. after the refused WNOTIFY_ACKs the opener still puts and gets", FAKE_PUTS,
	  NULL },
};

/* The fake owner: its listener, its identity and window (an MR whose key it hands out). */
struct fake_owner {
	struct sockaddr_storage addr;
	const char *addr_text;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *listen;
	struct ibv_pd *pd;
	uint8_t *win;
	struct ibv_mr *win_mr;
	struct xp_meta m; /* node, epoch, window id, token: what its metadata says */
	char *metadata;
	/* One case, served on the owner's thread: */
	const struct fake_case *c;
	uint32_t seed; /* the case's put bytes */
	struct rogue ctl, data;
	uint64_t handle; /* the opener's handle (WOPEN's xfer), or the claimer's transfer */
	int all_posted;	 /* the opener's client posted every put (set by the main thread) */
	/* One pairing case (claim_cases), served on the owner's thread: */
	const struct claim_case *cc;
	struct xp_meta pm; /* the case's readable or writable: what its metadata says */
	char *pmetadata;   /* its metadata, for the claimer's client */
	int client_ended;  /* the claimer's client saw its op end (set by the main thread) */
	int notes;	   /* WNOTIFYs taken */
	bool cut;	   /* the real daemon closed the set after the bad message */
	char why[512];	   /* what went wrong on the owner's side, "" if nothing */
};

static int fake_fail(struct fake_owner *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fake_fail(struct fake_owner *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
	return -1;
}

static void fake_tag(const struct fake_owner *f, int i, char *tag, size_t len)
{
	snprintf(tag, len, "fake%u-put%d", (unsigned)f->seed, i);
}

/* The next connection request on the listener within WAIT_MS: its id and HELLO. */
static int listen_next(struct fake_owner *f, struct rogue *r, struct rdma_cm_id **id,
		       struct xp_rdma_hello *h)
{
	struct rdma_cm_event *ev;
	int err = next_cm_event(f->ech, now_ms() + WAIT_MS, &ev);

	if (err)
		return rogue_err(r, -err, "no connection request within %d ms: %s", WAIT_MS,
				 strerror(-err));
	enum rdma_cm_event_type got = ev->event;
	bool valid = got == RDMA_CM_EVENT_CONNECT_REQUEST &&
		     xp_rdma_hello_unpack(ev->param.conn.private_data,
					  ev->param.conn.private_data_len, h) == 0;
	*id = ev->id;
	rdma_ack_cm_event(ev);
	if (got != RDMA_CM_EVENT_CONNECT_REQUEST)
		return rogue_err(r, EPROTO, "rdma_cm %s on the listener", rdma_event_str(got));
	if (!valid || (peer_key_len && !h->has_nonce)) {
		rdma_reject(*id, NULL, 0);
		rdma_destroy_id(*id);
		return rogue_err(r, EPROTO,
				 "the opener's HELLO (connect private data) is not valid");
	}
	return 0;
}

/*
 * Accepts the opener's next connection (@control: its set's first) as the owner's daemon
 * would: our HELLO with the metadata's node and epoch, then AUTH both ways. 0 or -errno.
 */
static int fake_accept(struct fake_owner *f, struct rogue *r, bool control)
{
	struct xp_rdma_hello theirs, mine = { .epoch = f->m.epoch, .control = control };
	uint8_t hello[XP_RDMA_HELLO_LEN], ack = ACK_TIMEOUT;
	struct rdma_conn_param param;
	struct rdma_cm_id *id = NULL;
	int err;

	memset(r, 0, sizeof(*r));
	r->acceptor = true;
	r->pd = f->pd;
	r->shared_pd = true;
	if ((err = listen_next(f, r, &id, &theirs)))
		return err;
	r->id = id;
	if (theirs.control != control)
		return rogue_err(r, EPROTO, "the opener's %s connection came flagged %s",
				 control ? "first" : "second", theirs.control ? "control" : "data");
	memcpy(r->peer_node, theirs.node, XP_ID_BYTES);
	r->peer_epoch = theirs.epoch;
	memcpy(r->peer_nonce, theirs.nonce, XP_RDMA_NONCE_LEN);
	/* Its own channel, so that pump() and rogue_close() treat it as any rogue connection. */
	if (!(r->ech = rdma_create_event_channel()) || set_nonblock(r->ech->fd) ||
	    rdma_migrate_id(id, r->ech))
		return rogue_err(r, EIO, "rdma_cm channel: %s", strerror(errno));
	if ((err = setup_qp(r)))
		return err;
	memcpy(mine.node, f->m.node, XP_ID_BYTES);
	mine.has_nonce = peer_key_len > 0;
	if (mine.has_nonce && getrandom(mine.nonce, sizeof(mine.nonce), 0) != sizeof(mine.nonce))
		return rogue_err(r, EIO, "getrandom failed");
	memcpy(r->node, mine.node, XP_ID_BYTES);
	memcpy(r->nonce, mine.nonce, XP_RDMA_NONCE_LEN);
	r->epoch = mine.epoch;
	xp_rdma_hello_pack(&mine, hello);
	conn_param(r, &param, hello);
	rdma_set_option(r->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof(ack));
	if (rdma_accept(r->id, &param))
		return rogue_err(r, errno, "rdma_accept: %s", strerror(errno));
	if ((err = wait_cm(r, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL)))
		return err;
	r->established = true;
	return peer_key_len ? rogue_auth(r, false) : 0;
}

/* WOPEN (window, node, epoch, a proof of the token for its handle, asking for credit). */
static int check_wopen(struct fake_owner *f, json_t *j)
{
	const struct rogue *r = &f->ctl;
	json_int_t window = 0, epoch = 0;
	const char *node = "", *proof = "";
	char mine[2 * XP_ID_BYTES + 1], want[65];
	uint8_t mac[32];
	int credit = 0;

	xp_hex_encode(f->m.node, XP_ID_BYTES, mine);
	if (token_proof(&f->m, r->peer_node, r->peer_epoch, f->handle, mac))
		return fake_fail(f, "HMAC failed");
	xp_hex_encode(mac, sizeof(mac), want);
	if (json_unpack(j, "{s:I, s:s, s:I, s:s, s?b}", "window", &window, "node", &node, "epoch",
			&epoch, "proof", &proof, "notify_credit", &credit) ||
	    window != FAKE_WINDOW || strcmp(node, mine) != 0 || (uint64_t)epoch != f->m.epoch ||
	    strcmp(proof, want) != 0 || !credit)
		return fake_fail(f,
				 "the opener's WOPEN is not the metadata's window with a proof and "
				 "notify_credit (window %lld, epoch %lld, credit %d, proof %s)",
				 (long long)window, (long long)epoch, credit,
				 strcmp(proof, want) ? "wrong" : "right");
	return 0;
}

/* Takes the opener's connections and its WOPEN, answered by WOPEN_OK with key and credit. */
static int fake_open(struct fake_owner *f)
{
	struct rogue *r = &f->ctl;
	json_t *j = NULL;
	int err;

	if (fake_accept(f, &f->ctl, true))
		return fake_fail(f, "the opener's control connection: %s", f->ctl.why);
	if (fake_accept(f, &f->data, false))
		return fake_fail(f, "the opener's data connection: %s", f->data.why);
	r->also = &f->data; /* (its PINGs answered while we wait on the control one) */
	r->xfer = ANY_XFER;
	if (wait_msg(r, XP_PEER_WOPEN, &j))
		return fake_fail(f, "WOPEN: %s", r->why);
	f->handle = r->got_xfer;
	err = check_wopen(f, j);
	json_decref(j);
	if (err)
		return -1;
	r->xfer = f->handle;
	/* The owner answers on a connection that carries data, or the control one (§10.5). */
	j = json_pack("{s:I, s:I, s:I, s:i}", "addr", (json_int_t)(uintptr_t)f->win, "len",
		      (json_int_t)FAKE_LEN, "rkey", (json_int_t)f->win_mr->rkey, "notify_credit",
		      FAKE_CREDIT);
	err = j ? send_msg(r, XP_PEER_WOPEN_OK, 0, f->handle, j) : -ENOMEM;
	json_decref(j);
	return err ? fake_fail(f, "WOPEN_OK: %s", r->why) : 0;
}

/* WNOTIFY number f->notes: in order, of its put, whose bytes are in the window by now. */
static int check_note(struct fake_owner *f, json_t *j)
{
	json_int_t off = -1, bytes = -1;
	const char *kind = "", *tag = "";
	char want[32];
	long at;

	fake_tag(f, f->notes, want, sizeof(want));
	if (json_unpack(j, "{s:s, s:I, s:I, s:s}", "kind", &kind, "offset", &off, "bytes", &bytes,
			"tag", &tag) ||
	    strcmp(kind, "put") != 0 || off != (json_int_t)f->notes * FAKE_PUT_LEN ||
	    bytes != FAKE_PUT_LEN || strcmp(tag, want) != 0)
		return fake_fail(f, "WNOTIFY %d is %s %lld+%lld \"%s\", not put %u+%u \"%s\"",
				 f->notes + 1, kind, (long long)off, (long long)bytes, tag,
				 (unsigned)(f->notes * FAKE_PUT_LEN), (unsigned)FAKE_PUT_LEN, want);
	if ((at = mismatch(f->win + off, (size_t)off, FAKE_PUT_LEN, f->seed)) >= 0)
		return fake_fail(
			f, "WNOTIFY \"%s\" came, but byte %ld of its put is not in the window", tag,
			at);
	return 0;
}

/* Takes WNOTIFYs until @n came, each checked. */
static int take_notes(struct fake_owner *f, int n)
{
	while (f->notes < n) {
		json_t *j = NULL;
		if (wait_msg(&f->ctl, XP_PEER_WNOTIFY, &j))
			return fake_fail(f, "WNOTIFY %d of %d: %s", f->notes + 1, n, f->ctl.why);
		int err = check_note(f, j);
		json_decref(j);
		if (err)
			return -1;
		f->notes++;
	}
	return 0;
}

static int send_count(struct fake_owner *f, json_t *count, uint8_t flags)
{
	json_t *j = json_pack("{s:o}", "count", count);
	int err = j ? send_msg(&f->ctl, XP_PEER_WNOTIFY_ACK, flags, f->handle, j) : -ENOMEM;

	json_decref(j);
	return err ? fake_fail(f, "WNOTIFY_ACK: %s", f->ctl.why) : 0;
}

/* The case's bad WNOTIFY_ACK. */
static int send_bad_ack(struct fake_owner *f)
{
	static const char text[] = "{\"count\":2", whole[] = "{\"count\":2}";
	struct rogue *r = &f->ctl;
	json_t *empty;
	int err;

	switch (f->c->ack) {
	case ACK_BACKWARDS:
		return send_count(f, json_integer(1), 0);
	case ACK_PAST:
		return send_count(f, json_integer(f->notes + 1), 0);
	case ACK_TEXT_COUNT:
		return send_count(f, json_string("2"), 0);
	case ACK_FROM_ACTIVE:
		return send_count(f, json_integer(f->notes), XP_PEER_FROM_ACTIVE);
	case ACK_NO_COUNT:
		empty = json_object();
		err = send_msg(r, XP_PEER_WNOTIFY_ACK, 0, f->handle, empty);
		json_decref(empty);
		break;
	case ACK_NOT_JSON:
		err = send_bytes(r, XP_PEER_WNOTIFY_ACK, 0, f->handle, text, sizeof(text) - 1,
				 sizeof(text) - 1);
		break;
	case ACK_LONG_HEADER:
		err = send_bytes(r, XP_PEER_WNOTIFY_ACK, 0, f->handle, whole, sizeof(whole) - 1,
				 sizeof(whole) - 1 + 8);
		break;
	default:
		return fake_fail(f, "no bad WNOTIFY_ACK for this case");
	}
	return err ? fake_fail(f, "WNOTIFY_ACK: %s", r->why) : 0;
}

/*
 * ACK_GOOD: each WNOTIFY acknowledged as it comes, then the opener's WCLOSE (it let go). First a
 * WNOTIFY_ACK for a handle the opener does not have, which it must ignore (§10.6: the two ends
 * crossed), not take for a protocol error.
 */
static void fake_good(struct fake_owner *f)
{
	json_t *j = json_pack("{s:i}", "count", 5);
	int err = j ? send_msg(&f->ctl, XP_PEER_WNOTIFY_ACK, 0, f->handle + 1000, j) : -ENOMEM;

	json_decref(j);
	j = NULL;
	if (err) {
		fake_fail(f, "WNOTIFY_ACK of an unknown handle: %s", f->ctl.why);
		return;
	}
	while (f->notes < FAKE_PUTS)
		if (take_notes(f, f->notes + 1) || send_count(f, json_integer(f->notes), 0))
			return;
	if (wait_msg(&f->ctl, XP_PEER_WCLOSE, &j))
		fake_fail(f, "no WCLOSE from the opener once its client closed the handle: %s",
			  f->ctl.why);
	json_decref(j);
}

/*
 * Pumps @r (and r->also, answering PINGs) until the main thread sets *@flag; @what names what
 * that waits for, for the failure. 0, or -1 with why not in f->why.
 */
static int await_client(struct fake_owner *f, struct rogue *r, int *flag, const char *what)
{
	uint64_t deadline = now_ms() + WAIT_MS;

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		int rc = pump(r, 20);
		if (rc < 0 && rc != -ETIMEDOUT)
			return fake_fail(f, "while waiting for %s: %s", what, r->why);
		if (now_ms() > deadline)
			return fake_fail(f, "waited %d ms for %s", WAIT_MS, what);
	}
	return 0;
}

/* The bad ack must find the later puts held for credit, not refused at posting (set gone). */
static int await_posted(struct fake_owner *f)
{
	return await_client(f, &f->ctl, &f->all_posted, "the opener's client to post its puts");
}

/* A bad case: the credit's WNOTIFYs (and two more after a right ack), the bad ack, the cut. */
static void fake_bad(struct fake_owner *f)
{
	if (take_notes(f, FAKE_CREDIT))
		return;
	if (f->c->ack == ACK_BACKWARDS &&
	    (send_count(f, json_integer(FAKE_CREDIT), 0) || take_notes(f, f->c->notified)))
		return;
	if (await_posted(f) || send_bad_ack(f))
		return;
	linger(&f->ctl, WAIT_MS);
	f->cut = f->ctl.disconnected || f->ctl.qp_error;
	if (!f->cut)
		fake_fail(f, "the opener kept the connection %d ms after the bad WNOTIFY_ACK",
			  WAIT_MS);
}

static void *fake_serve(void *arg)
{
	struct fake_owner *f = arg;

	if (fake_open(f) == 0) {
		if (f->c->ack == ACK_GOOD)
			fake_good(f);
		else
			fake_bad(f);
	}
	rogue_close(&f->data);
	rogue_close(&f->ctl);
	return NULL;
}

static void fake_owner_free(struct fake_owner *f)
{
	if (f->win_mr)
		ibv_dereg_mr(f->win_mr);
	free(f->win);
	if (f->pd)
		ibv_dealloc_pd(f->pd);
	if (f->listen)
		rdma_destroy_id(f->listen);
	if (f->ech)
		rdma_destroy_event_channel(f->ech);
	free(f->metadata);
	free(f->pmetadata);
	memset(f, 0, sizeof(*f));
}

/* "ADDR:PORT" to listen on, a node and epoch of its own, a window MR and its metadata. */
static int fake_owner_make(struct fake_owner *f, const char *addr, char *why, size_t len)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	uint64_t length = FAKE_LEN;
	struct timespec ts;

	memset(f, 0, sizeof(*f));
	f->addr_text = addr;
	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return snprintf(why, len, "ROGUE_FAKE_OWNER '%s' is not ADDR:PORT", addr), -1;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	if (resolve(host, colon + 1, &f->addr) || !(f->ech = rdma_create_event_channel()) ||
	    set_nonblock(f->ech->fd) || rdma_create_id(f->ech, &f->listen, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(f->listen, (struct sockaddr *)&f->addr) || rdma_listen(f->listen, 4) ||
	    !f->listen->verbs || !(f->pd = ibv_alloc_pd(f->listen->verbs)))
		return snprintf(why, len, "listening on %s: %s", addr, strerror(errno)), -1;
	if (!(f->win = malloc(FAKE_LEN)) ||
	    !(f->win_mr = ibv_reg_mr(f->pd, f->win, FAKE_LEN,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					     IBV_ACCESS_REMOTE_WRITE)))
		return snprintf(why, len, "the window's MR: %s", strerror(errno)), -1;
	clock_gettime(CLOCK_REALTIME, &ts);
	f->m = (struct xp_meta){ .kind = XP_KIND_WINDOW,
				 .epoch = (uint64_t)ts.tv_sec * 1000000 +
					  (uint64_t)ts.tv_nsec / 1000,
				 .op = FAKE_WINDOW,
				 .access = XP_ACCESS_READWRITE,
				 .lengths = &length,
				 .nlengths = 1,
				 .nendpoints = 1 };
	snprintf(f->m.endpoints[0].transport, sizeof(f->m.endpoints[0].transport), "rdma");
	snprintf(f->m.endpoints[0].addr, sizeof(f->m.endpoints[0].addr), "%s", host);
	f->m.endpoints[0].port = (uint16_t)atoi(colon + 1);
	if (getrandom(f->m.node, XP_ID_BYTES, 0) != XP_ID_BYTES ||
	    getrandom(f->m.token, XP_ID_BYTES, 0) != XP_ID_BYTES ||
	    xp_meta_encode(&f->m, &f->metadata))
		return snprintf(why, len, "the window's metadata could not be made"), -1;
	f->m.lengths = NULL; /* (on this stack frame: the metadata has it now) */
	return 0;
}

/* What the opener's client saw of its handle: window.closed with its cause. */
struct fake_seen {
	uint64_t handle;
	bool closed;
	int error;
	char cause[256];
};

static void fake_seen_cb(struct xfer_client *c, const struct xfer_window_event *ev, void *arg)
{
	struct fake_seen *s = arg;

	(void)c;
	if (ev->type != XFER_WINDOW_CLOSED || ev->window != s->handle)
		return;
	s->closed = true;
	s->error = ev->error;
	snprintf(s->cause, sizeof(s->cause), "%s", ev->cause);
}

/* Dispatches the opener's client's events until its handle was closed, or WAIT_MS passed. */
static void await_closed(struct ctx *t, struct fake_seen *seen)
{
	uint64_t deadline = now_ms() + WAIT_MS;
	struct pollfd pfd = { .fd = xfer_get_fd(t->c), .events = POLLIN };

	while (!seen->closed && now_ms() < deadline) {
		poll(&pfd, 1, 100);
		if (xfer_dispatch(t->c) < 0)
			return;
	}
}

/* The opener's client: FAKE_PUTS tagged puts of t->buf's first bytes; their ends in @info. */
static int fake_puts(struct ctx *t, struct fake_owner *f, uint64_t handle,
		     struct xfer_op_info *info, int *stuck, char *why, size_t len)
{
	struct xfer_op_opts opts = { .timeout_ms = OP_TIMEOUT_MS };
	uint64_t ops[FAKE_PUTS];
	char tag[32];
	int posted = 0;

	for (; posted < FAKE_PUTS; posted++) {
		struct xfer_desc d = { t->region, (uint64_t)posted * FAKE_PUT_LEN, FAKE_PUT_LEN };
		fake_tag(f, posted, tag, sizeof(tag));
		int rc = xfer_put(t->c, handle, d.offset, &d, 1, tag, &opts, &ops[posted]);
		if (rc < 0) {
			snprintf(why, len, "op.put %d: %s (%s)", posted + 1, xfer_strerror(rc),
				 xfer_last_error(t->c));
			break;
		}
	}
	__atomic_store_n(&f->all_posted, 1, __ATOMIC_RELEASE);
	*stuck = 0;
	for (int i = 0; i < posted; i++) {
		if (xfer_wait(t->c, ops[i], WAIT_MS, &info[i]) < 0) {
			info[i].state = XFER_IN_PROGRESS;
			(*stuck)++;
		}
		xfer_release(t->c, ops[i]);
	}
	return posted == FAKE_PUTS ? 0 : -1;
}

/* The good case's get: window bytes no put touched, into t->buf's last slice, checked. */
static int fake_get(struct ctx *t, uint64_t handle, char *why, size_t len)
{
	struct xfer_desc d = { t->region, 2 * SLICE, FAKE_GET_LEN };
	struct xfer_op_info info;
	uint64_t op;
	long at;
	int rc = xfer_get(t->c, handle, FAKE_GET_OFF, &d, 1, NULL, NULL, &op);

	if (rc == 0 && (rc = xfer_wait(t->c, op, WAIT_MS, &info)) == 0)
		xfer_release(t->c, op);
	if (rc < 0)
		return snprintf(why, len, "op.get: %s", xfer_strerror(rc)), -1;
	if (info.state != XFER_COMPLETE || strcmp(info.transport, "rdma") != 0)
		return snprintf(why, len, "the get ended %s over '%s': %s", state_name(&info),
				info.transport, info.cause),
		       -1;
	if ((at = mismatch((uint8_t *)t->buf.addr + 2 * SLICE, FAKE_GET_OFF, FAKE_GET_LEN,
			   SEED_OWNER)) >= 0)
		return snprintf(why, len, "byte %ld of the get is not the window's", at), -1;
	return 0;
}

/*
 * How the puts ended against what the case expects: "" when right, else why not. The held
 * ones' cause must name the rule the owner broke.
 */
static void judge_puts(const struct fake_case *c, const struct xfer_op_info *info, int stuck,
		       char *why, size_t len)
{
	for (int i = 0; i < FAKE_PUTS && !why[0]; i++) {
		bool early = i < c->notified;
		if (info[i].state == XFER_IN_PROGRESS)
			snprintf(why, len, "%d puts did not end within %d ms (put %d hangs)", stuck,
				 WAIT_MS, i + 1);
		else if (early && info[i].state != XFER_COMPLETE)
			snprintf(why, len, "put %d, notified and acknowledged, ended %s: %s", i + 1,
				 state_name(&info[i]), info[i].cause);
		else if (!early &&
			 (info[i].state != XFER_ERRORED || !strstr(info[i].cause, c->rule)))
			snprintf(why, len, "put %d, held for credit, ended %s (cause '%s')", i + 1,
				 state_name(&info[i]), info[i].cause);
	}
}

static int fake_listed(struct ctx *t, struct fake_owner *f, char *why, size_t len);

/* One case: the fake owner on its thread, the opener's client here. */
static void fake_case(struct ctx *t, struct fake_owner *f, const struct fake_case *c, uint32_t seed)
{
	struct xfer_op_info info[FAKE_PUTS];
	struct fake_seen seen = { 0 };
	char why[512] = "";
	int stuck = 0;
	pthread_t th;

	f->c = c;
	f->seed = seed;
	f->all_posted = 0;
	f->notes = 0;
	f->cut = false;
	f->why[0] = '\0';
	fill(f->win, 0, FAKE_LEN, SEED_OWNER);
	fill(t->buf.addr, 0, FAKE_PUTS * FAKE_PUT_LEN, seed);
	memset(info, 0, sizeof(info));
	if (pthread_create(&th, NULL, fake_serve, f)) {
		fail(c->name, "pthread_create failed");
		return;
	}
	xfer_set_window_cb(t->c, fake_seen_cb, &seen);
	int rc = xfer_window_open(t->c, f->metadata, &seen.handle, NULL, NULL);
	if (rc < 0)
		snprintf(why, sizeof(why), "window.open: %s (%s)", xfer_strerror(rc),
			 xfer_last_error(t->c));
	else if (fake_puts(t, f, seen.handle, info, &stuck, why, sizeof(why)) == 0)
		judge_puts(c, info, stuck, why, sizeof(why));
	if (rc == 0 && !why[0] && c->ack == ACK_GOOD)
		fake_get(t, seen.handle, why, sizeof(why));
	if (rc == 0 && c->ack != ACK_GOOD)
		await_closed(t, &seen);
	if (rc == 0)
		xfer_window_close(t->c, seen.handle); /* (a revoked handle is freed by its close) */
	pthread_join(th, NULL);
	xfer_set_window_cb(t->c, NULL, NULL);
	if (!why[0] && f->why[0])
		snprintf(why, sizeof(why), "the fake owner: %.480s", f->why);
	/* The next case's window.open must not find this set, which the fake owner just closed. */
	if (!why[0] && fake_listed(t, f, why, sizeof(why)))
		snprintf(why + strlen(why), sizeof(why) - strlen(why), " after the case");
	if (!why[0] && c->ack != ACK_GOOD &&
	    (!seen.closed || !seen.error || !strstr(seen.cause, c->rule)))
		snprintf(why, sizeof(why),
			 "the opener's client was told %s (%s) '%s', not a cause "
			 "naming %s",
			 seen.closed ? "window.closed" : "nothing",
			 seen.error ? xfer_strerror(seen.error) : "-", seen.cause, c->rule);
	if (why[0])
		fail(c->name, "%s", why);
	else if (c->ack == ACK_GOOD)
		ok("%s: a WNOTIFY_ACK of an unknown handle ignored, %d tagged puts COMPLETE, each "
		   "WNOTIFY in order with its bytes in the window, a %u-byte get equal, the opener's "
		   "WCLOSE",
		   c->name, FAKE_PUTS, (unsigned)FAKE_GET_LEN);
	else
		ok("%s: the opener closed the set; %d puts COMPLETE, %d held ERRORED, window.closed "
		   "%s: %s",
		   c->name, c->notified, FAKE_PUTS - c->notified, xfer_strerror(seen.error),
		   seen.cause);
}

/* How many rows of @list's array @key have @field equal to @value. */
static size_t rows_with(json_t *list, const char *key, const char *field, const char *value)
{
	json_t *row;
	size_t i, n = 0;

	json_array_foreach(json_object_get(list, key), i, row)
		n += strcmp(json_string_value(json_object_get(row, field)) ?: "", value) == 0;
	return n;
}

/*
 * Waits (WAIT_MS at most: the end of a set the fake owner closed may still be on its way) until
 * the opener lists no handle, peer or op of the fake owner. 0, or -1 with what is left in @why.
 */
static int fake_listed(struct ctx *t, struct fake_owner *f, char *why, size_t len)
{
	char node[2 * XP_ID_BYTES + 1];
	uint64_t deadline = now_ms() + WAIT_MS;
	json_t *w = NULL, *p = NULL, *o = NULL;
	size_t nh = 0, np = 0, no = 0;
	int rc = -1;

	xp_hex_encode(f->m.node, XP_ID_BYTES, node);
	for (;;) {
		json_decref(w), json_decref(p), json_decref(o);
		w = owner_call(t, "list.windows", why, len);
		p = owner_call(t, "list.peers", why, len);
		o = owner_call(t, "list.ops", why, len);
		if (!w || !p || !o)
			break;
		nh = rows_with(w, "windows", "owner_node", node);
		np = rows_with(p, "peers", "node", node);
		no = rows_with(o, "ops", "peer", node);
		if (nh == 0 && np == 0 && no == 0) {
			rc = 0;
			break;
		}
		if (now_ms() > deadline) {
			snprintf(why, len,
				 "%zu handles, %zu peers, %zu ops of node %s still listed", nh, np,
				 no, node);
			break;
		}
		usleep(20 * 1000);
	}
	json_decref(w), json_decref(p), json_decref(o);
	return rc;
}

static void fake_leftovers(struct ctx *t, struct fake_owner *f)
{
	const char *name = "o. the opener lists no handle, peer or op of the fake owner after it";
	char why[512] = "";

	if (fake_listed(t, f, why, sizeof(why)))
		fail(name, "%s", why);
	else
		ok("%s", name);
}

/* ---- a fake pairing owner (PROTOCOL.md §10.3-§10.5): the real daemon is the claimer ---- */

/*
 * The same fake owner's daemon, now holding a readable or writable of its own (FAKE_LEN bytes
 * of its MR): the real daemon's client reads or writes it by its metadata, so the real daemon
 * claims it. The fake owner checks the CLAIM (its proof) and answers as the case says: one
 * CLAIM_OK granting its MR's range, then DONE_ACK to the claimer's DONE (the bytes checked); or
 * a CLAIM_OK no owner may send, which must fail the claimer's set EPROTO with a cause naming
 * the rule, its client's operation ended (not hung), and the daemon claim again afterwards.
 * A second CLAIM_OK once replaced a one-sided transfer's ranges under its requests in flight
 * and leaked the first ones (up to 24 KiB a frame, as often as the owner liked).
 */
#define FAKE_OP 40 /* the fake owner's op ids: FAKE_OP + the case's index */

enum fake_grant {
	GRANT_GOOD,	 /**< one CLAIM_OK granting the range; DONE answered by DONE_ACK */
	GRANT_TWICE,	 /**< the same CLAIM_OK twice, back to back */
	GRANT_SHORT,	 /**< one range a byte short of the claimed length */
	GRANT_NO_SEGS,	 /**< a CLAIM_OK without "segs" */
	GRANT_WIDE_RKEY, /**< an rkey of 2^32 */
};

struct claim_case {
	enum fake_grant grant;
	bool write; /* the fake owner holds a writable (the claimer writes), else a readable */
	const char *name;
	const char *rule; /* what the claimer's cause must name; NULL: the transfer COMPLETEs */
};

#define PROTO_CLAIM_OK "protocol error in a control message (type CLAIM_OK)"

static const struct claim_case claim_cases[] = {
	{ GRANT_GOOD, false, "p. a fake owner's readable: one CLAIM_OK, READ, DONE, DONE_ACK",
	  NULL },
	{ GRANT_GOOD, true, "p. a fake owner's writable: one CLAIM_OK, WRITE, DONE, DONE_ACK",
	  NULL },
	{ GRANT_TWICE, false, "p. a readable's CLAIM_OK sent twice", "a second CLAIM_OK (§10.3)" },
	{ GRANT_TWICE, true, "p. a writable's CLAIM_OK sent twice", "a second CLAIM_OK (§10.3)" },
	{ GRANT_SHORT, false, "p. a CLAIM_OK whose ranges are a byte short of the claim",
	  PROTO_CLAIM_OK },
	{ GRANT_NO_SEGS, false, "p. a CLAIM_OK without ranges", PROTO_CLAIM_OK },
	{ GRANT_WIDE_RKEY, false, "p. a CLAIM_OK whose rkey does not fit 32 bits", PROTO_CLAIM_OK },
	{ GRANT_GOOD, false, "p. after the refused CLAIM_OKs the claimer still reads", NULL },
};

/* The case's readable or writable of FAKE_LEN bytes, op FAKE_OP + @index, and its metadata. */
static int fake_offer(struct fake_owner *f, const struct claim_case *c, size_t index)
{
	uint64_t length = FAKE_LEN;

	free(f->pmetadata);
	f->pmetadata = NULL;
	f->pm = f->m; /* (node, epoch, endpoint and token of the fake owner) */
	f->pm.kind = c->write ? XP_KIND_WRITABLE : XP_KIND_READABLE;
	f->pm.op = FAKE_OP + index;
	f->pm.access = 0;
	f->pm.lengths = &length;
	int err = xp_meta_encode(&f->pm, &f->pmetadata);
	f->pm.lengths = NULL; /* (on this stack frame: the metadata has it now) */
	return err;
}

/* The claimer's CLAIM: the case's op and kind, node, epoch, length, a proof for its transfer. */
static int check_claim(struct fake_owner *f, json_t *j)
{
	const struct rogue *r = &f->ctl;
	const char *want_kind = xp_kind_name(f->cc->write ? XP_KIND_WRITE : XP_KIND_READ);
	json_int_t op = 0, epoch = 0, length = 0;
	const char *kind = "", *node = "", *proof = "";
	char mine[2 * XP_ID_BYTES + 1], want[65];
	uint8_t mac[32];

	xp_hex_encode(f->pm.node, XP_ID_BYTES, mine);
	if (token_proof(&f->pm, r->peer_node, r->peer_epoch, f->handle, mac))
		return fake_fail(f, "HMAC failed");
	xp_hex_encode(mac, sizeof(mac), want);
	if (json_unpack(j, "{s:I, s:s, s:s, s:I, s:I, s:s}", "op", &op, "kind", &kind, "node",
			&node, "epoch", &epoch, "length", &length, "proof", &proof) ||
	    (uint64_t)op != f->pm.op || strcmp(kind, want_kind) != 0 || strcmp(node, mine) != 0 ||
	    (uint64_t)epoch != f->pm.epoch || length != FAKE_LEN || strcmp(proof, want) != 0)
		return fake_fail(f,
				 "the claimer's CLAIM is not a %s of the metadata's op %llu with a "
				 "proof (op %lld, kind %s, epoch %lld, length %lld, proof %s)",
				 want_kind, (unsigned long long)f->pm.op, (long long)op, kind,
				 (long long)epoch, (long long)length,
				 strcmp(proof, want) ? "wrong" : "right");
	return 0;
}

/* The case's CLAIM_OK: the fake owner's MR as the op's one range, or what the case makes of it. */
static json_t *grant_json(const struct fake_owner *f)
{
	json_int_t len = FAKE_LEN, rkey = f->win_mr->rkey;

	if (f->cc->grant == GRANT_NO_SEGS)
		return json_object();
	if (f->cc->grant == GRANT_SHORT)
		len--;
	if (f->cc->grant == GRANT_WIDE_RKEY)
		rkey = (json_int_t)1 << 32;
	return json_pack("{s:[{s:I, s:I, s:I}]}", "segs", "addr", (json_int_t)(uintptr_t)f->win,
			 "len", len, "rkey", rkey);
}

/* Takes the claimer's connections and its CLAIM (checked), answered as the case says. */
static int fake_grant(struct fake_owner *f)
{
	json_t *j = NULL;
	int err;

	if (fake_accept(f, &f->ctl, true))
		return fake_fail(f, "the claimer's control connection: %s", f->ctl.why);
	if (fake_accept(f, &f->data, false))
		return fake_fail(f, "the claimer's data connection: %s", f->data.why);
	f->ctl.also = &f->data; /* (each one's PINGs answered while we wait on the other) */
	f->data.also = &f->ctl;
	f->ctl.xfer = ANY_XFER;
	if (wait_msg(&f->ctl, XP_PEER_CLAIM, &j))
		return fake_fail(f, "CLAIM: %s", f->ctl.why);
	f->handle = f->ctl.got_xfer;
	err = check_claim(f, j);
	json_decref(j);
	if (err)
		return -1;
	/* The answer goes on the data connection, and the transfer stays there (§10.5). */
	f->data.xfer = f->handle;
	j = grant_json(f);
	err = j ? send_msg(&f->data, XP_PEER_CLAIM_OK, 0, f->handle, j) : -ENOMEM;
	if (!err && f->cc->grant == GRANT_TWICE)
		err = send_msg(&f->data, XP_PEER_CLAIM_OK, 0, f->handle, j);
	json_decref(j);
	return err ? fake_fail(f, "CLAIM_OK: %s", f->data.why) : 0;
}

/* GRANT_GOOD: the claimer's DONE, its write's bytes in place by then, and DONE_ACK. */
static void fake_done(struct fake_owner *f)
{
	json_t *j = NULL;
	long at;

	if (wait_msg(&f->data, XP_PEER_DONE, &j)) {
		fake_fail(f, "DONE: %s", f->data.why);
		return;
	}
	json_decref(j);
	if (f->cc->write && (at = mismatch(f->win, 0, FAKE_LEN, f->seed)) >= 0) {
		fake_fail(f, "DONE came, but byte %ld of the write is not in the buffer", at);
		return;
	}
	j = json_object();
	if (!j || send_msg(&f->data, XP_PEER_DONE_ACK, 0, f->handle, j))
		fake_fail(f, "DONE_ACK: %s", f->data.why);
	json_decref(j);
	/* (closing before the claimer's client saw COMPLETE could flush the DONE_ACK) */
	await_client(f, &f->data, &f->client_ended, "the claimer's client to see its op end");
}

static void *fake_claim_serve(void *arg)
{
	struct fake_owner *f = arg;

	if (fake_grant(f) == 0) {
		if (f->cc->grant == GRANT_GOOD) {
			fake_done(f);
		} else {
			linger(&f->data, WAIT_MS);
			f->cut = f->data.disconnected || f->data.qp_error;
			if (!f->cut)
				fake_fail(f,
					  "the claimer kept the connection %d ms after the bad "
					  "CLAIM_OK",
					  WAIT_MS);
		}
	}
	rogue_close(&f->data);
	rogue_close(&f->ctl);
	return NULL;
}

/*
 * The claimer's client: reads the fake owner's readable into the buffer's first slice (checked)
 * or writes that slice (the case's pattern) into its writable. "" in @why when the op ended as
 * the case says: COMPLETE, or refused or ERRORED EPROTO with a cause naming the rule.
 */
static void claim_client(struct ctx *t, struct fake_owner *f, bool *refused, char *why, size_t len)
{
	const struct claim_case *c = f->cc;
	struct xfer_op_opts opts = { .timeout_ms = OP_TIMEOUT_MS };
	struct xfer_desc d = { t->region, 0, FAKE_LEN };
	struct xfer_op_info info = { 0 };
	uint64_t op = 0;
	long at;
	int rc = c->write ? xfer_write(t->c, f->pmetadata, &d, 1, &opts, &op) :
			    xfer_read(t->c, f->pmetadata, &d, 1, &opts, &op);

	*refused = rc < 0;
	if (rc < 0) { /* refused at the claim: the client is told why */
		if (!c->rule || rc != -EPROTO || !strstr(xfer_last_error(t->c), c->rule))
			snprintf(why, len, "%s refused: %s (%s)", c->write ? "op.write" : "op.read",
				 xfer_strerror(rc), xfer_last_error(t->c));
		return;
	}
	rc = xfer_wait(t->c, op, WAIT_MS, &info);
	xfer_release(t->c, op);
	__atomic_store_n(&f->client_ended, 1, __ATOMIC_RELEASE);
	if (rc < 0)
		snprintf(why, len, "the op did not end within %d ms: %s", WAIT_MS,
			 xfer_strerror(rc));
	else if (!c->rule && (info.state != XFER_COMPLETE || strcmp(info.transport, "rdma") != 0))
		snprintf(why, len, "the op ended %s over '%s': %s", state_name(&info),
			 info.transport, info.cause);
	else if (c->rule && (info.state != XFER_ERRORED || info.error != -EPROTO ||
			     !strstr(info.cause, c->rule)))
		snprintf(why, len, "the op ended %s (%s): '%s', not ERRORED EPROTO naming '%s'",
			 state_name(&info), info.error ? xfer_strerror(info.error) : "-",
			 info.cause, c->rule);
	else if (!c->rule && !c->write &&
		 (at = mismatch(t->buf.addr, 0, FAKE_LEN, SEED_OWNER)) >= 0)
		snprintf(why, len, "byte %ld of the read is not the owner's", at);
}

/* One pairing case: the fake owner on its thread, the claimer's client here. */
static void claim_case(struct ctx *t, struct fake_owner *f, size_t index, uint32_t seed)
{
	const struct claim_case *c = &claim_cases[index];
	char why[512] = "";
	bool refused = false;
	pthread_t th;

	f->c = NULL;
	f->cc = c;
	f->seed = seed;
	f->client_ended = 0;
	f->cut = false;
	f->why[0] = '\0';
	fill(f->win, 0, FAKE_LEN, SEED_OWNER);
	fill(t->buf.addr, 0, FAKE_LEN, c->write ? seed : SEED_ROGUE); /* (a read must replace it) */
	if (fake_offer(f, c, index)) {
		fail(c->name, "the fake owner's metadata could not be made");
		return;
	}
	if (pthread_create(&th, NULL, fake_claim_serve, f)) {
		fail(c->name, "pthread_create failed");
		return;
	}
	claim_client(t, f, &refused, why, sizeof(why));
	__atomic_store_n(&f->client_ended, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	if (!why[0] && f->why[0])
		snprintf(why, sizeof(why), "the fake owner: %.480s", f->why);
	if (!why[0] && fake_listed(t, f, why, sizeof(why)))
		snprintf(why + strlen(why), sizeof(why) - strlen(why), " after the case");
	if (why[0])
		fail(c->name, "%s", why);
	else if (!c->rule)
		ok("%s: %u bytes equal, COMPLETE on both sides", c->name, (unsigned)FAKE_LEN);
	else
		ok("%s: the claimer closed the set, its op %s EPROTO: %s", c->name,
		   refused ? "refused" : "ERRORED", c->rule);
}

/*
 * o: the opener's side of §10.9. A real xferd opens a window of the fake owner, puts with tags,
 * and gets WNOTIFY_ACKs no owner may send: each ends the connection set (a protocol error,
 * PROTOCOL.md §10.9 and §10.1), its client's held puts end ERRORED with the cause and its handle
 * closed, and it opens and moves bytes again afterwards.
 */
static void test_fake_owner(struct ctx *t)
{
	const char *addr = getenv("ROGUE_FAKE_OWNER");
	struct fake_owner f;
	char why[512];

	if (!addr || !*addr) {
		note("o. not run: ROGUE_FAKE_OWNER (ADDR:PORT, on the rogue's device) is where a "
		     "fake window owner listens");
		return;
	}
	if (fake_owner_make(&f, addr, why, sizeof(why))) {
		fail("o. a fake window owner", "%s", why);
		fake_owner_free(&f);
		return;
	}
	for (size_t i = 0; i < sizeof(fake_cases) / sizeof(fake_cases[0]); i++)
		fake_case(t, &f, &fake_cases[i], SEED_ROGUE + 1 + (uint32_t)i);
	for (size_t i = 0; i < sizeof(claim_cases) / sizeof(claim_cases[0]); i++)
		claim_case(t, &f, i, SEED_ROGUE + 100 + (uint32_t)i);
	fake_leftovers(t, &f);
	fake_owner_free(&f);
}

/* ---- the checks ---- */

/*
 * Type 1 windows hang off the PD, not the claimer's QP: can a second connection (another node
 * that claimed nothing) use @p's rkey while @p's transfer is open? A note: §10.5 chose type 1.
 */
static void check_other_connection(struct ctx *t, struct probe *p)
{
	const char *f = "a. another connection, as a node that claimed nothing, cannot use the "
			"claimer's rkey";
	struct rogue other;
	char why[512];

	if (rogue_connect(t, &other, &p->o.m))
		fail(f, "a second connection could not be made: %s", other.why);
	else if (expect_refused(&other, false, p->r.addr, p->r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(f, "%s (the window is not bound to the claimer's queue pair)", why);
	else
		ok("%s: READ with rkey 0x%x -> %s", f, p->r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	rogue_close(&other);
}

/* a, and f by DONE: the window reads exactly the owner's bytes, then dies with the transfer. */
static void test_read_then_done(struct ctx *t)
{
	const char *a = "a. RDMA READ of a readable's granted range with the granted rkey";
	const char *f = "f. after DONE/DONE_ACK the readable's rkey no longer works";
	struct probe p;
	char why[512];

	if (probe_open(t, false, &p, why, sizeof(why))) {
		fail(a, "%s", why);
		fail(f, "no grant to test");
		return;
	}
	if (expect_success(&p.r, false, p.r.addr, p.r.rkey, SLICE, SLICE, why, sizeof(why)) == 0)
		ok("%s: %u bytes at 0x%" PRIx64 " rkey 0x%x equal the owner's", a, SLICE, p.r.addr,
		   p.r.rkey);
	else
		fail(a, "%s", why);
	check_other_connection(t, &p);
	if (rogue_done(&p.r)) {
		fail(f, "DONE: %s", p.r.why);
	} else if (owner_complete(t, p.o.op, why, sizeof(why)) == 0 &&
		   expect_refused(&p.r, false, p.r.addr, p.r.rkey, PROBE_LEN, why, sizeof(why)) ==
			   0) {
		ok("%s: the owner's op is COMPLETE, READ with rkey 0x%x -> %s", f, p.r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	} else {
		fail(f, "%s; the owner's windows_open is %lld", why, windows_now(t));
	}
	probe_close(t, &p);
}

/* e, and f by DONE for a writable: its window takes exactly the written bytes, then dies. */
static void test_write_then_done(struct ctx *t)
{
	const char *e = "e. RDMA WRITE into a writable's granted range";
	const char *f = "f. after DONE/DONE_ACK the writable's rkey no longer works";
	struct probe p;
	char why[512];

	if (probe_open(t, true, &p, why, sizeof(why))) {
		fail(e, "%s", why);
		fail(f, "no grant to test");
		return;
	}
	fill(p.r.data, SLICE, SLICE, SEED_WRITE);
	if (expect_success(&p.r, true, p.r.addr, p.r.rkey, SLICE, SLICE, why, sizeof(why)) == 0 &&
	    buffer_is(t, SEED_WRITE, why, sizeof(why)) == 0)
		ok("%s: %u bytes at 0x%" PRIx64
		   " rkey 0x%x landed in the owner's range and nowhere else",
		   e, SLICE, p.r.addr, p.r.rkey);
	else
		fail(e, "%s", why);
	fill(p.r.data, SLICE, PROBE_LEN, SEED_ROGUE);
	if (rogue_done(&p.r)) {
		fail(f, "DONE: %s", p.r.why);
	} else if (owner_complete(t, p.o.op, why, sizeof(why)) == 0 &&
		   expect_refused(&p.r, true, p.r.addr, p.r.rkey, PROBE_LEN, why, sizeof(why)) ==
			   0 &&
		   buffer_is(t, SEED_WRITE, why, sizeof(why)) == 0) {
		ok("%s: the owner's op is COMPLETE, WRITE with rkey 0x%x -> %s, buffer unchanged",
		   f, p.r.rkey, ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	} else {
		fail(f, "%s; the owner's windows_open is %lld", why, windows_now(t));
	}
	probe_close(t, &p);
}

/*
 * Cancels the owner's op from a child process with a client of its own (as root may): op.cancel
 * answers only once the op has ended, which over RDMA is once the claimer let go of its keys,
 * and the claimer is us. Returns the child's pid, or -1.
 */
static pid_t cancel_in_child(struct ctx *t, uint64_t op)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct xfer_client *c = NULL;
		int rc = xfer_connect(t->sock, "rdma_rogue-cancel", &c);
		if (rc == 0)
			rc = xfer_cancel(c, op);
		_exit(rc == 0 ? 0 : 1);
	}
	return pid;
}

/* The owner's op is cancelled; the owner's CANCEL reaches the rogue. */
static int owner_cancels(struct ctx *t, struct probe *p, char *why, size_t len)
{
	json_t *c = NULL;

	p->canceller = cancel_in_child(t, p->o.op);
	if (p->canceller < 0) {
		snprintf(why, len, "fork: %s", strerror(errno));
		return -1;
	}
	if (wait_msg(&p->r, XP_PEER_CANCEL, &c)) {
		snprintf(why, len, "%s", p->r.why);
		return -1;
	}
	json_decref(c);
	return 0;
}

/*
 * f by cancel, for a readable. §10.5 keeps the window until the active side releases it (so
 * that its READs in flight do not fail the whole connection set): the release must revoke it.
 */
static void test_read_cancelled(struct ctx *t)
{
	const char *f = "f. after the owner's CANCEL and the claimer's release the readable's rkey "
			"no longer works";
	struct probe p;
	char why[512];

	if (probe_open(t, false, &p, why, sizeof(why))) {
		fail(f, "%s", why);
		return;
	}
	if (expect_success(&p.r, false, p.r.addr, p.r.rkey, PROBE_LEN, SLICE, why, sizeof(why)) ||
	    owner_cancels(t, &p, why, sizeof(why)))
		fail(f, "%s", why);
	else if (rogue_release(&p.r))
		fail(f, "release: %s", p.r.why);
	else if (expect_refused(&p.r, false, p.r.addr, p.r.rkey, PROBE_LEN, why, sizeof(why)))
		fail(f, "%s; the owner's windows_open is %lld", why, windows_now(t));
	else
		ok("%s: READ with rkey 0x%x -> %s", f, p.r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	probe_close(t, &p);
}

/* A fresh probe whose operation the owner's client then cancelled; 0, or -1 after fail(@f). */
static int probe_cancelled(struct ctx *t, bool writable, struct probe *p, const char *f)
{
	char why[512];

	if (probe_open(t, writable, p, why, sizeof(why))) {
		fail(f, "%s", why);
		return -1;
	}
	if (owner_cancels(t, p, why, sizeof(why))) {
		fail(f, "%s", why);
		probe_close(t, p);
		return -1;
	}
	return 0;
}

/*
 * f by cancel, for a claimer that never releases and keeps answering PINGs: the owner must cut
 * it off within keepalive_timeout_ms (5000 by default) plus a keepalive period, which revokes the
 * window with the queue pair.
 */
static void test_unreleased_cut_off(struct ctx *t)
{
	const char *f = "f. a claimer that keeps a cancelled readable's keys is cut off within "
			"keepalive_timeout_ms";
	struct probe p;
	uint64_t t0;

	if (probe_cancelled(t, false, &p, f))
		return;
	t0 = now_ms();
	if (linger(&p.r, LINGER_MS) == 0)
		fail(f, "the connection still stood %d ms after the CANCEL", LINGER_MS);
	else
		ok("%s: the owner dropped the connection (and with its queue pair the window) "
		   "%llu ms after its CANCEL",
		   f, (unsigned long long)(now_ms() - t0));
	probe_close(t, &p);
}

/* Once the claimer released, the owner's cancel has returned and the op is CANCELLED. */
static void check_cancel_returned(struct ctx *t, struct probe *p)
{
	const char *f = "f. the owner's op.cancel returns CANCELLED once the claimer released";
	struct xfer_op_info info;
	int status = -1;

	if (p->canceller > 0 && waitpid(p->canceller, &status, 0) == p->canceller)
		p->canceller = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail(f, "the cancelling client's op.cancel failed (status %d)", status);
	else if (xfer_status(t->c, p->o.op, &info) < 0 || info.state != XFER_CANCELLED)
		fail(f, "the owner's op is not CANCELLED");
	else
		ok("%s", f);
}

/*
 * While a claimer still holds the keys, bytes may still land: the owner's op must not look
 * ended yet (a client would reuse the buffer), only once the claimer let go.
 */
static void check_not_ended_yet(struct ctx *t, struct probe *p)
{
	const char *f = "f. a cancelled writable is not reported ended while its claimer still "
			"holds the keys";
	struct xfer_op_info info;
	int rc = xfer_status(t->c, p->o.op, &info);

	if (rc < 0)
		fail(f, "op.status: %s", xfer_strerror(rc));
	else if (info.state == XFER_CANCELLED || info.state == XFER_ERRORED ||
		 info.state == XFER_COMPLETE)
		fail(f, "the owner's op is %s while the claimer can still write into it",
		     state_name(&info));
	else
		ok("%s: the owner's op is still %s after the claimer wrote %u bytes", f,
		   state_name(&info), SLICE);
}

/* The same for a writable: an unreleased window would let a rogue write into a cancelled buffer. */
static void test_write_cancelled(struct ctx *t)
{
	const char *f = "f. after the owner's CANCEL and the claimer's release the writable's rkey "
			"no longer works";
	struct probe p;
	char why[512];
	uint32_t seed = SEED_OWNER;

	if (probe_cancelled(t, true, &p, f))
		return;
	fill(p.r.data, SLICE, SLICE, SEED_WRITE);
	if (expect_refused(&p.r, true, p.r.addr, p.r.rkey, SLICE, why, sizeof(why)) == 0) {
		if (buffer_is(t, SEED_OWNER, why, sizeof(why)) == 0)
			ok("f. the owner's CANCEL revoked the writable's rkey at once: WRITE -> %s",
			   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
		else
			fail(f, "%s", why);
		probe_close(t, &p);
		return;
	}
	if (buffer_is(t, SEED_WRITE, why, sizeof(why)) == 0) {
		seed = SEED_WRITE; /* in flight before the release: still the op's, not yet ended */
		check_not_ended_yet(t, &p);
	} else {
		note("after the owner's CANCEL the unreleased writable rkey: %s", why);
	}
	fill(p.r.data, SLICE, PROBE_LEN, SEED_ROGUE);
	if (rogue_release(&p.r))
		fail(f, "release: %s", p.r.why);
	else if (expect_refused(&p.r, true, p.r.addr, p.r.rkey, PROBE_LEN, why, sizeof(why)) ||
		 buffer_is(t, seed, why, sizeof(why)))
		fail(f, "%s; the owner's windows_open is %lld", why, windows_now(t));
	else
		ok("%s: WRITE with rkey 0x%x -> %s, buffer unchanged", f, p.r.rkey,
		   ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	check_cancel_returned(t, &p);
	probe_close(t, &p);
}

/* g: the region MR's own rkey reaches nothing, not even where a window allows access. */
static void test_mr_rkey(struct ctx *t)
{
	const char *g = "g. the region MR's own rkey";
	uint32_t rkey = 0;
	int ndevs = 0;
	char why[512];

	if (region_rkey(t, &rkey, &ndevs, why, sizeof(why))) {
		fail(g, "%s", why);
		return;
	}
	note("list.regions: the region's MR rkey is 0x%x (%d device%s; the first is probed)", rkey,
	     ndevs, ndevs == 1 ? "" : "s");
	probe_refused(t, "g. READ with the region MR's rkey at the region's start", false, false,
		      -(long)SLICE, PROBE_LEN, &rkey, false);
	probe_refused(t, "g. READ with the region MR's rkey of a claimed readable's own range",
		      false, false, 0, PROBE_LEN, &rkey, false);
	probe_refused(t, "g. WRITE with the region MR's rkey into a claimed writable's own range",
		      true, true, 0, PROBE_LEN, &rkey, false);
	probe_refused(t, "g. WRITE with the region MR's rkey at the region's end", false, true,
		      (long)(2 * SLICE - PROBE_LEN), PROBE_LEN, &rkey, false);
}

/* h, 1: a well-behaved peer still gets through after all that. */
static void health_rdma(struct ctx *t)
{
	const char *h = "h. the owner still serves an RDMA peer: connect, claim, READ, DONE";
	struct probe p;
	char why[512];

	if (probe_open(t, false, &p, why, sizeof(why))) {
		fail(h, "%s", why);
		return;
	}
	if (expect_success(&p.r, false, p.r.addr, p.r.rkey, SLICE, SLICE, why, sizeof(why)))
		fail(h, "%s", why);
	else if (rogue_done(&p.r))
		fail(h, "DONE: %s", p.r.why);
	else if (owner_complete(t, p.o.op, why, sizeof(why)))
		fail(h, "%s", why);
	else
		ok("%s: %u bytes equal, the owner's op COMPLETE", h, SLICE);
	probe_close(t, &p);
}

/* h, 2: a normal op.readable, read on the same node by a second client. */
static void health_local(struct ctx *t)
{
	const char *h = "h. a normal op.readable on the owner works";
	struct xfer_client *c2 = NULL;
	struct xfer_buf b2 = { 0 };
	struct xfer_op_info pi, ai;
	struct offer o = { 0 };
	uint64_t region2, aop;
	char why[512] = "";
	int rc;

	reset_buffer(t);
	if (offer_new(t, false, &o, why, sizeof(why)))
		goto out;
	rc = xfer_connect(t->sock, "rdma_rogue-reader", &c2);
	if (rc == 0 && (rc = xfer_buf_alloc(SLICE, &b2)) == 0 &&
	    (rc = xfer_region_register(c2, b2.fd, 0, 0, "reader", &region2)) == 0) {
		struct xfer_desc d = { region2, 0, SLICE };
		rc = xfer_read(c2, o.metadata, &d, 1, NULL, &aop);
	}
	if (rc == 0 && (rc = xfer_wait(c2, aop, WAIT_MS, &ai)) == 0)
		rc = xfer_wait(t->c, o.op, WAIT_MS, &pi);
	if (rc < 0)
		snprintf(why, sizeof(why), "second client: %s (%s)", xfer_strerror(rc),
			 c2 ? xfer_last_error(c2) : "");
	else if (ai.state != XFER_COMPLETE || pi.state != XFER_COMPLETE)
		snprintf(why, sizeof(why), "read %s (%.200s), readable %s (%.200s)",
			 state_name(&ai), ai.cause, state_name(&pi), pi.cause);
	else if (mismatch(b2.addr, SLICE, SLICE, SEED_OWNER) >= 0)
		snprintf(why, sizeof(why), "the bytes read differ from the owner's");
out:
	if (why[0])
		fail(h, "%s", why);
	else
		ok("%s: read by a second client over '%s', both ops COMPLETE, %u bytes equal", h,
		   ai.transport, SLICE);
	xfer_close(c2);
	xfer_buf_free(&b2);
	offer_end(t, &o);
}

/* h, 3: every window and every rogue peer is gone once the rogue's connections are. */
static void health_cleanup(struct ctx *t)
{
	const char *hw = "h. the owner's windows_open is back to 0";
	const char *hp = "h. the owner lists none of the rogue's nodes as peers";
	const char *ho = "h. every operation the rogue claimed ended";
	uint64_t deadline = now_ms() + WAIT_MS;
	long long open = -1;
	bool all_mw;
	int peers = -1;
	char why[512] = "";

	while (now_ms() < deadline) {
		if (owner_windows(t, &open, &all_mw, NULL, 0, why, sizeof(why)) == 0 && open == 0 &&
		    (peers = rogue_peers_listed(t, why, sizeof(why))) == 0)
			break;
		usleep(100 * 1000);
	}
	if (open == 0)
		ok("%s", hw);
	else
		fail(hw, "%s", why[0] ? why : "windows_open stayed above 0");
	if (open != 0 && owner_windows(t, &open, &all_mw, NULL, 0, why, sizeof(why)) == 0)
		note("windows_open is %lld %d s after the last rogue connection closed", open,
		     WAIT_MS / 1000);
	if ((peers = rogue_peers_listed(t, why, sizeof(why))) == 0)
		ok("%s (%d nodes used)", hp, t->nnodes);
	else if (peers > 0)
		fail(hp, "%d of the rogue's %d nodes still listed", peers, t->nnodes);
	else
		fail(hp, "%s", why);
	if (t->stuck == 0)
		ok("%s once its connection went (%d COMPLETE, %d ERRORED, %d CANCELLED)", ho,
		   t->ended[XFER_COMPLETE], t->ended[XFER_ERRORED], t->ended[XFER_CANCELLED]);
	else
		fail(ho, "%d did not end within %d ms of the rogue's connection closing", t->stuck,
		     WAIT_MS);
}

static int setup(struct ctx *t)
{
	long long open;
	bool all_mw;
	char why[512], names[128];

	if (ctx_open(t, why, sizeof(why)) ||
	    owner_windows(t, &open, &all_mw, names, sizeof(names), why, sizeof(why))) {
		fail("setup", "%s", why);
		return -1;
	}
	if (!all_mw) {
		fail("setup",
		     "the owner's device %s has no memory windows: its claimers get the "
		     "region MR's rkey by design (§10.5), nothing here would hold",
		     names);
		return -1;
	}
	ok("setup: owner client with a %u-byte region; the owner's device %s has memory windows "
	   "(%lld open)",
	   BUF_LEN, names, open);
	check_device_bounds(t);
	if (t->bounds == 0)
		note("the device ignores memory window bounds (%s): b and c cannot be proven against "
		     "an owner on such a device and are reported as notes",
		     t->bounds_why);
	else if (t->bounds < 0)
		note("whether the device enforces memory window bounds is unknown (%s): b and c are "
		     "checks",
		     t->bounds_why);
	return 0;
}

/*
 * j: a keyed owner takes no peer that does not prove the key. Each hostile handshake must end
 * its connection without a set for its node and without a grant; the readable they tried stays
 * claimable, and an authenticated rogue then claims it and reads its bytes.
 */
static void test_auth(struct ctx *t)
{
	static const struct {
		enum auth_mode mode;
		const char *name;
	} cases[] = {
		{ AUTH_NO_NONCE, "j. a HELLO without a nonce is refused" },
		{ AUTH_BAD_MAC, "j. an AUTH with a wrong MAC ends the connection" },
		{ AUTH_SKIP, "j. a CLAIM before AUTH ends the connection" },
	};
	const char *served = "j. after the refused handshakes the owner still serves that readable";
	struct probe p;
	struct rogue r;
	char why[512];
	int first = t->nnodes, listed;

	memset(&p, 0, sizeof(p));
	reset_buffer(t);
	if (offer_new(t, false, &p.o, why, sizeof(why))) {
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			fail(cases[i].name, "%s", why);
		fail(served, "no readable");
		probe_close(t, &p);
		return;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int err = rogue_connect_as(t, &r, &p.o.m, cases[i].mode);
		const char *how;

		if (cases[i].mode == AUTH_NO_NONCE) {
			if (err && !r.established)
				ok("%s: %s", cases[i].name, r.why);
			else
				fail(cases[i].name, "the owner accepted the connection%s%s",
				     err ? ": " : "", err ? r.why : "");
			rogue_close(&r);
			continue;
		}
		if (err) {
			fail(cases[i].name, "connect: %s", r.why);
			rogue_close(&r);
			continue;
		}
		/* Then a CLAIM as if proven: no CLAIM_OK may come back, the connection must go. */
		err = rogue_claim(t, &r, &p.o);
		how = r.why;
		if (!err)
			fail(cases[i].name, "the owner granted the claim (rkey 0x%x)", r.rkey);
		else if (!r.disconnected && !r.qp_error && linger(&r, WAIT_MS) == 0)
			fail(cases[i].name, "no grant, but the connection stayed up: %s", how);
		else
			ok("%s: no grant, connection dropped (%s)", cases[i].name, how);
		rogue_close(&r);
	}
	listed = peers_listed_from(t, first, why, sizeof(why));
	if (listed == 0)
		ok("j. the owner lists none of the refused handshakes' nodes as peers");
	else if (listed > 0)
		fail("j. the owner lists none of the refused handshakes' nodes as peers",
		     "%d listed", listed);
	else
		fail("j. the owner lists none of the refused handshakes' nodes as peers", "%s",
		     why);
	if (rogue_connect(t, &p.r, &p.o.m) || rogue_claim(t, &p.r, &p.o)) {
		fail(served, "connect+claim: %s", p.r.why);
	} else if (expect_success(&p.r, false, p.r.addr, p.r.rkey, SLICE, SLICE, why,
				  sizeof(why))) {
		fail(served, "%s", why);
	} else if (rogue_done(&p.r)) {
		fail(served, "DONE: %s", p.r.why);
	} else if (owner_complete(t, p.o.op, why, sizeof(why))) {
		fail(served, "%s", why);
	} else {
		ok("%s: an authenticated claim read its %u bytes, equal the owner's, op COMPLETE",
		   served, SLICE);
	}
	probe_close(t, &p);
}

/*
 * k: connections that never send their AUTH hold a queue pair each until handshake_timeout_ms,
 * so a keyed owner takes at most max_pending_peer_conns of them at once (run.sh sets
 * ROGUE_MAX_PENDING to what it configured) and rejects the next one before making its QP.
 */
static void test_pending(struct ctx *t)
{
	const char *capped = "k. connections that never AUTH are capped (max_pending_peer_conns)";
	const char *env = getenv("ROGUE_MAX_PENDING");
	int max = env ? atoi(env) : 0, opened = 0;
	struct rogue r[PENDING_CASES + 1];
	struct offer o = { 0 };
	char why[512];

	if (max < 1 || max > PENDING_CASES) {
		note("k. not run: ROGUE_MAX_PENDING (1..%d) tells the owner's max_pending_peer_conns",
		     PENDING_CASES);
		return;
	}
	if (offer_new(t, false, &o, why, sizeof(why))) {
		fail(capped, "%s", why);
		offer_drop(t, &o);
		return;
	}
	memset(r, 0, sizeof(r));
	for (; opened < max; opened++) {
		if (rogue_connect_as(t, &r[opened], &o.m, AUTH_SKIP)) {
			fail(capped, "connection %d of %d, under the bound, failed: %s", opened + 1,
			     max, r[opened].why);
			break;
		}
	}
	if (opened == max) {
		int err = rogue_connect_as(t, &r[max], &o.m, AUTH_SKIP);
		if (!err || r[max].established)
			fail(capped, "connection %d, over the bound of %d, was accepted", max + 1,
			     max);
		else
			ok("%s: %d held, connection %d refused (%s)", capped, max, max + 1,
			   r[max].why);
		opened++;
	}
	for (int i = 0; i < opened; i++)
		rogue_close(&r[i]);
	offer_drop(t, &o);
}

/*
 * m: a peer that sends PINGs but returns almost no credits would have the owner queue PONGs it
 * cannot send, without end. The owner must drop it once XD_PEER_CTRLQ_MAX (1 MiB) is queued.
 */
static void test_pong_flood(struct ctx *t)
{
	const char *name = "m. a peer that PINGs but returns no credits is dropped (1 MiB bound)";
	struct offer o = { 0 };
	struct rogue r;
	char why[512];
	unsigned pings = 0;
	int err = 0;

	if (offer_new(t, false, &o, why, sizeof(why)) || rogue_connect(t, &r, &o.m)) {
		fail(name, "%s", o.decoded ? r.why : why);
		if (o.decoded)
			rogue_close(&r);
		offer_drop(t, &o);
		return;
	}
	r.stingy = true;
	uint64_t start = now_ms(), deadline = start + FLOOD_MS;
	while (!r.disconnected && !r.qp_error && now_ms() < deadline) {
		while (send_msg(&r, XP_PEER_PING, 0, 0, NULL) == 0)
			pings++;
		if ((err = pump(&r, 200)) < 0 && err != -ETIMEDOUT)
			break;
	}
	if (r.disconnected || r.qp_error)
		ok("%s: dropped after %u PINGs, %u PONGs sent back, %.1f s", name, pings, r.pongs,
		   (double)(now_ms() - start) / 1000);
	else
		fail(name, "still connected after %u PINGs in %.1f s, %u PONGs back (%u held)%s%s",
		     pings, (double)(now_ms() - start) / 1000, r.pongs, pings - r.pongs,
		     err < 0 && err != -ETIMEDOUT ? ": " : "",
		     err < 0 && err != -ETIMEDOUT ? r.why : "");
	rogue_close(&r);
	offer_drop(t, &o);
}

/* Every case against the owner, in the order run.sh's "hostile" group runs them. */
static void test_all(struct ctx *t)
{
	if (peer_key_len) {
		test_auth(t);
		test_pending(t);
		test_pong_flood(t);
	} else
		note("no KEY_FILE: the owner is taken to be unkeyed, no AUTH cases");
	test_read_then_done(t);
	probe_refused(t, "b. READ of the 4 KiB just before a readable's range", false, false,
		      -(long)PROBE_LEN, PROBE_LEN, NULL, true);
	probe_refused(t, "c. READ of the 4 KiB just after a readable's range", false, false,
		      (long)SLICE, PROBE_LEN, NULL, true);
	probe_refused(t, "c. READ of a readable's whole range plus one byte", false, false, 0,
		      SLICE + 1, NULL, true);
	probe_refused(t, "c. WRITE of the 4 KiB just after a writable's range", true, true,
		      (long)SLICE, PROBE_LEN, NULL, true);
	probe_refused(t, "d. WRITE into a readable's granted range (read-only window)", false, true,
		      0, PROBE_LEN, NULL, false);
	test_write_then_done(t);
	probe_refused(t, "e. READ of a writable's granted range (write-only window)", true, false,
		      0, PROBE_LEN, NULL, false);
	test_read_cancelled(t);
	test_unreleased_cut_off(t);
	test_write_cancelled(t);
	test_mr_rkey(t);
	test_staged_read(t);
	test_staged_write(t);
	if (peer_key_len) { /* (the rogue opens windows with a proof) */
		test_window_revoked(t);
		test_window_key_revoked(t);
		key_probe_refused(t, "i. READ with an opener's key, 4 KiB past the window's end",
				  false, (long)SLICE, PROBE_LEN, true);
		key_probe_refused(t, "i. READ with an opener's key, 4 KiB before the window", false,
				  -(long)PROBE_LEN, PROBE_LEN, true);
		key_probe_refused(t, "i. WRITE with a read-only window's opener key", true, 0,
				  PROBE_LEN, false);
		test_window_unreleased(t);
		test_notify_flood(t, true);
		test_notify_flood(t, false);
	}
	health_rdma(t);
	health_local(t);
	health_cleanup(t);
}

int main(int argc, char **argv)
{
	struct ctx t = { 0 };
	const char *only = getenv("ROGUE_ONLY"); /* "o": only the fake owner's cases */

	if (argc < 3 || argc > 5) {
		fprintf(stderr,
			"usage: rdma_rogue OWNER_SOCKET OWNER_RDMA_ADDR:PORT [SOURCE_ADDR [KEY_FILE]]\n"
			"  SOURCE_ADDR defaults to $RXE_IP0; KEY_FILE: the owner's cluster key\n");
		return 2;
	}
	t.sock = argv[1];
	if (argc == 5 && load_key(argv[4]) < 0) {
		fprintf(stderr, "rdma_rogue: no key of at least 16 bytes (hex) in %s\n", argv[4]);
		return 2;
	}
	if (parse_target(argv[2], argc >= 4 ? argv[3] : getenv("RXE_IP0"), &t.tg)) {
		fprintf(stderr, "rdma_rogue: bad address '%s' or source address\n", argv[2]);
		return 2;
	}
	signal(SIGALRM, on_alarm);
	alarm(RUN_LIMIT_S);
	if (setup(&t) == 0) {
		if (only && strcmp(only, "o") == 0 && peer_key_len) /* (run.sh's fakeowner group) */
			test_fake_owner(&t);
		else if (only && strcmp(only, "o") == 0)
			fail("o. a fake window owner",
			     "it needs KEY_FILE, the opener's cluster key");
		else
			test_all(&t);
	}
	xfer_close(t.c);
	xfer_buf_free(&t.buf);
	printf("%d passed, %d failed\n", (int)passed, (int)failed);
	return failed ? 1 : 0;
}
