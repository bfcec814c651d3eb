// SPDX-License-Identifier: MIT
/*
 * libFuzzer target over one received control packet (STYLE 9.10). An in-process daemon is made
 * of the real daemon objects (event loop, copier, peer and RDMA start-up, control socket); each
 * input connects a client through the real listener and sends its bytes as one SOCK_SEQPACKET
 * packet, which conn_read_cb -> xp_packet_recv -> xd_dispatch_packet handle as in xferd.
 *
 * Byte 0 of an input sets up the session and the fds sent with the packet (SCM_RIGHTS); the
 * rest is the packet:
 *   bits 0-1  sealed memfds (0-3)          bit 4  then a pipe's read end
 *   bits 2-3  then unsealed memfds (0-3)   bit 5  the preamble (below)
 *   bit 6     hello first                  bit 7  unused
 * The preamble is hello, region 1 (64 KiB), readable op 1 on its bytes [0, 4096) and writable
 * op 2 on [4096, 8192); "$R" and "$W" in the packet then stand for the two ops' metadata, so
 * that claims can succeed and copies run (a random token is not for guessing).
 * '@' is "after hello", 'A' "after hello, with one sealed memfd", ' ' "after the preamble".
 *
 * After every input the client hangs up and the daemon must be back at its baseline: the same
 * fds open, no connection, region, operation or peer left, no copy outstanding. The request
 * must have had exactly one reply (PROTOCOL.md §2; op.wait may still be waiting). Anything
 * else aborts with a line on stderr, so that libFuzzer reports the input.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz_daemon.h"
#include "fuzz_target.h"

/* Fixed, so that metadata in the seed corpus names this daemon and gets to the token check. */
#define FUZZ_NODE "f0220000000000000000000000000001"
#define FUZZ_EPOCH 1700000000000000ull
/* Not above the copier's inline size: populating and copying run on the loop thread, in order. */
#define FUZZ_MEMFD_SIZE (64 << 10)
#define FUZZ_MAX_FDS 7

enum {
	OPT_SEALED = 0x03,
	OPT_UNSEALED = 0x0c,
	OPT_PIPE = 0x10,
	OPT_PREAMBLE = 0x20,
	OPT_HELLO = 0x40,
};

static const char HELLO[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\","
			    "\"params\":{\"version\":1,\"client\":\"fuzz\"}}";
static const char REGISTER[] = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"region.register\","
			       "\"params\":{\"name\":\"fuzz\"}}";
static const char READABLE[] =
	"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"op.readable\","
	"\"params\":{\"descs\":[{\"region\":1,\"offset\":0,\"length\":4096}]}}";
static const char WRITABLE[] =
	"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"op.writable\","
	"\"params\":{\"descs\":[{\"region\":1,\"offset\":4096,\"length\":4096}]}}";

static struct {
	struct fuzz_daemon fd;
	int sealed[3], unsealed[3], pipe[2];
	int region_fd; /* the preamble's memfd */
	/* what "$R" and "$W" stand for */
	char meta_r[XP_METADATA_MAX + 1], meta_w[XP_METADATA_MAX + 1];
} F;

/* What the daemon must answer to one input. */
struct expect {
	int64_t id;   /* the replies' id; XP_ID_NONE for null */
	int min, max; /* how many replies */
};

/* Names every open fd on stderr, to show what leaked. */
static void print_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;

	while (dir && (de = readdir(dir))) {
		char path[300], target[256] = "?";
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		target[n > 0 ? n : 1] = '\0';
		fprintf(stderr, "fuzz_ctl:   fd %s -> %s\n", de->d_name, target);
	}
	if (dir)
		closedir(dir);
}

static int make_memfd(bool seal)
{
	int fd = memfd_create(seal ? "fuzz-sealed" : "fuzz-unsealed",
			      MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, FUZZ_MEMFD_SIZE) < 0 ||
	    (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0))
		fuzz_die("memfd: %s", strerror(errno));
	return fd;
}

/* One turn of the daemon's loop; @block waits for an event first. */
static void turn(bool block)
{
	if (event_base_loop(F.fd.d.base, block ? EVLOOP_ONCE : EVLOOP_NONBLOCK) < 0)
		fuzz_die("event_base_loop failed");
}

/*
 * An input must not make the target resolve or connect to an address its metadata names: with
 * require_rdma and no RDMA listener, a claim on another node is refused before any peer is made.
 */
static void configure(struct xd_config *cfg)
{
	cfg->require_rdma = true;
}

static void fuzz_start(void)
{
	for (int i = 0; i < 3; i++) {
		F.sealed[i] = make_memfd(true);
		F.unsealed[i] = make_memfd(false);
	}
	F.region_fd = make_memfd(true);
	if (pipe2(F.pipe, O_CLOEXEC) < 0)
		fuzz_die("pipe: %s", strerror(errno));
	fuzz_daemon_start(&F.fd, "fuzz_ctl", FUZZ_NODE, FUZZ_EPOCH, configure);
}

const char fuzz_target_corpus[] = "corpus";

void fuzz_target_fini(void)
{
	if (!F.fd.started)
		return;
	fuzz_daemon_stop(&F.fd);
	for (int i = 0; i < 3; i++) {
		close(F.sealed[i]);
		close(F.unsealed[i]);
	}
	close(F.region_fd);
	close(F.pipe[0]);
	close(F.pipe[1]);
}

/* Connects as a client process would; the daemon's accept callback makes the connection. */
static int client_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", F.fd.d.cfg.socket_path);
	if (sock < 0 || fuzz_connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fuzz_die("connect to %s: %s", sa.sun_path, strerror(errno));
	while (TAILQ_EMPTY(&F.fd.d.conns))
		turn(true);
	return sock;
}

/*
 * Sends @len bytes (0 allowed: the daemon reads it as EOF) as one packet with @nfds fds; unlike
 * xp_packet_send() it lets through what that refuses (empty, oversized, too many fds).
 */
static void client_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(FUZZ_MAX_FDS * sizeof(int))];
	} cmsg;
	char empty = 0;
	struct iovec iov = { .iov_base = len ? (void *)buf : &empty, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds > 0)
		xp_msg_put_fds(&msg, cmsg.buf, fds, nfds);
	ssize_t n;
	while ((n = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		; /* libFuzzer's SIGALRM */
	if (n != (ssize_t)len)
		fuzz_die("sendmsg of %zu bytes: %s", len, strerror(errno));
}

/* One packet from the daemon, without blocking: its length, 0 at EOF, -EAGAIN if none. */
static ssize_t client_recv(int sock, char *buf, size_t cap)
{
	ssize_t n = recv(sock, buf, cap, MSG_DONTWAIT | MSG_TRUNC);

	if (n < 0 && errno == EAGAIN)
		return -EAGAIN;
	if (n < 0 && errno == ECONNRESET)
		return 0;
	if (n < 0)
		fuzz_die("recv: %s", strerror(errno));
	if ((size_t)n > cap)
		fuzz_die("the daemon sent a packet of %zd bytes (limit %zu)", n, cap);
	return n;
}

/* Copies the "metadata" of a preamble reply's result into @meta (empty if it has none). */
static void save_metadata(const struct xp_reply *rep, char *meta)
{
	const char *s = json_string_value(json_object_get(rep->result, "metadata"));

	snprintf(meta, XP_METADATA_MAX + 1, "%s", s ? s : "");
}

/*
 * Sends a preamble request (with @fd unless -1) and waits for its successful reply; keeps the
 * metadata it returns in @meta if not NULL.
 */
static void preamble_call(int sock, const char *json, int fd, char *meta)
{
	static char buf[XP_MAX_MSG];
	struct xp_reply rep;

	client_send(sock, json, strlen(json), &fd, fd >= 0);
	for (;;) {
		turn(false);
		ssize_t n = client_recv(sock, buf, sizeof(buf));
		if (n == -EAGAIN) {
			turn(true);
			continue;
		}
		if (n == 0 || xp_reply_parse(buf, (size_t)n, &rep) < 0)
			fuzz_die("preamble %s: connection closed or a bad reply", json);
		bool reply = !rep.notification, failed = rep.code != 0;
		if (reply && !failed && meta)
			save_metadata(&rep, meta);
		xp_reply_fini(&rep);
		if (reply && failed)
			fuzz_die("preamble %s failed: %.*s", json, (int)n, buf);
		if (reply)
			return;
	}
}

/* The fds byte 0 asks for: sealed memfds, then unsealed ones, then a pipe. Returns the count. */
static int pick_fds(unsigned opts, int *fds)
{
	int n = 0;

	for (unsigned i = 0; i < (opts & OPT_SEALED); i++)
		fds[n++] = F.sealed[i];
	for (unsigned i = 0; i < (opts & OPT_UNSEALED) >> 2; i++)
		fds[n++] = F.unsealed[i];
	if (opts & OPT_PIPE)
		fds[n++] = F.pipe[0];
	return n;
}

/*
 * Every request gets one reply, an error with a null id when its id could not be read; an
 * empty packet reads as EOF and gets none. op.wait replies when its op ends, which may be
 * after the client has hung up. A posted op.batch ("reply": false) is answered by its event,
 * and by an error reply only when it is refused as a whole.
 */
static struct expect expected_replies(const uint8_t *pkt, size_t len)
{
	struct expect e = { XP_ID_NONE, 1, 1 };
	struct xp_request req;
	char err[256];

	if (len == 0)
		return (struct expect){ XP_ID_NONE, 0, 0 };
	if (len > XP_MAX_MSG) /* refused before it is parsed */
		return e;
	int code = xp_request_parse(pkt, len, &req, err, sizeof(err));
	e.id = req.id;
	if (code == 0 &&
	    (req.method == XP_M_OP_WAIT ||
	     (req.method == XP_M_OP_BATCH && json_is_false(json_object_get(req.params, "reply")))))
		e.min = 0;
	xp_request_fini(&req);
	return e;
}

/* Reads everything the daemon sent and holds the replies to @want. */
static void check_replies(int sock, const struct expect *want)
{
	static char buf[XP_MAX_MSG];
	struct xp_reply rep;
	int got = 0;
	ssize_t n;

	while ((n = client_recv(sock, buf, sizeof(buf))) > 0) {
		if (xp_reply_parse(buf, (size_t)n, &rep) < 0)
			fuzz_die("the daemon sent neither a reply nor a notification: %.*s",
				 n < 200 ? (int)n : 200, buf);
		if (!rep.notification && rep.id != want->id)
			fuzz_die("a reply to id %lld; the request's id is %lld", (long long)rep.id,
				 (long long)want->id);
		got += !rep.notification;
		xp_reply_fini(&rep);
	}
	if (got < want->min || got > want->max)
		fuzz_die("the request (id %lld) got %d replies, not %d to %d", (long long)want->id,
			 got, want->min, want->max);
}

/* @fds: open before the input (libFuzzer opens some between inputs: llvm-symbolizer's pipes). */
static void check_baseline(int fds_before)
{
	struct xd_daemon *d = &F.fd.d;
	int fds = fuzz_count_fds();

	if (!TAILQ_EMPTY(&d->conns))
		fuzz_die("connection %llu outlived its client",
			 (unsigned long long)TAILQ_FIRST(&d->conns)->id);
	if (!TAILQ_EMPTY(&d->regions))
		fuzz_die("region %llu outlived its client",
			 (unsigned long long)TAILQ_FIRST(&d->regions)->id);
	if (!TAILQ_EMPTY(&d->ops))
		fuzz_die("operation %llu outlived its client",
			 (unsigned long long)TAILQ_FIRST(&d->ops)->id);
	if (!TAILQ_EMPTY(&d->peers)) /* (transfers live in their peer set) */
		fuzz_die("a peer connection was made");
	if (xd_copier_busy(d->copier))
		fuzz_die("a copy is still outstanding");
	if (fds != fds_before) {
		print_fds();
		fuzz_die("%d fds open after the input, %d before it", fds, fds_before);
	}
}

/*
 * The packet with "$R" and "$W" replaced by the preamble's metadata (when there was a preamble).
 * Every packet longer than XP_MAX_MSG + 1 is refused the same way, so the result is cut there
 * and the socket's buffer need not hold more. Returns its length; *@out is a static buffer.
 */
static size_t substitute(const uint8_t *pkt, size_t len, const uint8_t **out)
{
	static uint8_t buf[XP_MAX_MSG + 1];
	size_t o = 0;

	for (size_t i = 0; i < len && o < sizeof(buf); i++) {
		const char *meta = NULL;
		if (pkt[i] == '$' && i + 1 < len)
			meta = pkt[i + 1] == 'R' ? F.meta_r : pkt[i + 1] == 'W' ? F.meta_w : NULL;
		if (meta && meta[0]) {
			size_t n = strlen(meta) < sizeof(buf) - o ? strlen(meta) : sizeof(buf) - o;
			memcpy(buf + o, meta, n);
			o += n;
			i++;
		} else {
			buf[o++] = pkt[i];
		}
	}
	*out = buf;
	return o;
}

static void run_input(unsigned opts, const uint8_t *pkt, size_t len)
{
	struct xd_daemon *d = &F.fd.d;
	int fds[FUZZ_MAX_FDS], nfds = pick_fds(opts, fds);
	struct expect want;

	/* Ids restart with every input, so that "region 1" names the same region in every run. */
	d->next_client = d->next_region = d->next_op = 0;
	int sock = client_connect();
	F.meta_r[0] = F.meta_w[0] = '\0';
	if (opts & (OPT_HELLO | OPT_PREAMBLE))
		preamble_call(sock, HELLO, -1, NULL);
	if (opts & OPT_PREAMBLE) {
		preamble_call(sock, REGISTER, F.region_fd, NULL);
		preamble_call(sock, READABLE, -1, F.meta_r);
		preamble_call(sock, WRITABLE, -1, F.meta_w);
	}
	len = substitute(pkt, len, &pkt);
	want = expected_replies(pkt, len);
	client_send(sock, pkt, len, fds, nfds);
	/* The daemon reads the packet now; registrations and copies report back via the copier. */
	turn(false);
	while (xd_copier_busy(d->copier))
		turn(true);
	check_replies(sock, &want);
	close(sock);
	while (!TAILQ_EMPTY(&d->conns) || xd_copier_busy(d->copier))
		turn(true);
	turn(false); /* the reapers the close woke up */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0; /* not even byte 0: nothing to set up or send */
	if (!F.fd.started)
		fuzz_start();
	int fds = fuzz_count_fds();
	run_input(data[0], data + 1, size - 1);
	check_baseline(fds);
	return 0;
}
