// SPDX-License-Identifier: MIT
/*
 * xfer_post_op(): readables, writables, reads and writes posted without waiting for their
 * replies, each reply delivered to the reply callback. Against a real xferd: many pairings in
 * flight from one client, bytes compared; a refused offer and a refused claim reach the reply
 * with the errno and the daemon's sentence; a reply that arrives while a blocking call waits
 * for its own is not taken for it; a client closed with requests outstanding leaves no
 * operation behind. Against a fake daemon: an operation's event that arrives before the reply
 * naming it is delivered before that reply, in arrival order. The library's own rules.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "harness.h"
#include "xfer_proto.h"
#include "xferclient.h"
#include "xp_fdmsg.h"
#include "xp_json.h"

#define NPAIRS 16
#define BLOCK 65536ul
#define WAIT_MS 30000

/* The replies and ends one client was handed, in delivery order. */
struct seen {
	uint64_t requests[2 * NPAIRS];
	int nrequests;
	struct {
		uint64_t request, op;
		int error;
		char meta[512], message[256];
	} replies[2 * NPAIRS];
	int nreplies, stray;
	int ends, complete;
	char order[16]; /* 'e' for an event, 'r' for a reply, as delivered (first 15) */
	int norder;
};

static void note(struct seen *s, char what)
{
	if (s->norder < (int)sizeof(s->order) - 1)
		s->order[s->norder++] = what;
}

static void on_reply(struct xfer_client *c, const struct xfer_reply *r, void *arg)
{
	struct seen *s = arg;
	bool ours = false;

	(void)c;
	for (int i = 0; i < s->nrequests; i++)
		ours |= s->requests[i] == r->request;
	if (!ours || s->nreplies >= 2 * NPAIRS) {
		s->stray++;
		return;
	}
	note(s, 'r');
	s->replies[s->nreplies].request = r->request;
	s->replies[s->nreplies].op = r->op;
	s->replies[s->nreplies].error = r->error;
	snprintf(s->replies[s->nreplies].meta, sizeof(s->replies[0].meta), "%s",
		 r->metadata ? r->metadata : "");
	snprintf(s->replies[s->nreplies].message, sizeof(s->replies[0].message), "%s", r->message);
	s->nreplies++;
}

static void on_event(struct xfer_client *c, const struct xfer_op_info *info, void *arg)
{
	struct seen *s = arg;

	(void)c;
	note(s, 'e');
	if (info->state >= XFER_COMPLETE) {
		s->ends++;
		s->complete += info->state == XFER_COMPLETE;
	}
}

/* Dispatches until @s holds @replies replies and @ends ends. */
static void take(struct xfer_client *c, struct seen *s, int replies, int ends)
{
	long long until = td_now_ms() + WAIT_MS;

	while (s->nreplies < replies || s->ends < ends) {
		CHECK(td_now_ms() < until);
		CHECK(xfer_dispatch(c) >= 0);
		usleep(200);
	}
}

/* The reply to @request that @s holds (fails the test without one). */
static int reply_of(const struct seen *s, uint64_t request)
{
	for (int i = 0; i < s->nreplies; i++)
		if (s->replies[i].request == request)
			return i;
	harness_fail(__FILE__, __LINE__, "no reply to request %llu", (unsigned long long)request);
	return -1;
}

static void post(struct xfer_client *c, struct seen *s, enum xfer_kind kind, const char *meta,
		 const struct xfer_desc *d)
{
	struct xfer_op_opts o = { 0, XFER_OP_RELEASE_ON_END | (meta ? XFER_OP_NOWAIT : 0) };

	CHECK_OK(xfer_post_op(c, kind, meta, d, 1, &o, &s->requests[s->nrequests]));
	CHECK(s->requests[s->nrequests] != 0);
	s->nrequests++;
}

/*
 * NPAIRS offers posted back to back from one client, then NPAIRS claims on them (@write:
 * writables and writes), all in flight: one reply each with the request's id, every pairing
 * COMPLETE, every byte where it belongs.
 */
static void many_in_flight(bool write)
{
	struct td d;
	struct xfer_client *c;
	struct xfer_buf pas, act;
	uint64_t preg, areg;
	struct seen s = { 0 };

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "poster", &c));
	CHECK_OK(xfer_buf_alloc(NPAIRS * BLOCK, &pas));
	CHECK_OK(xfer_buf_alloc(NPAIRS * BLOCK, &act));
	CHECK_OK(xfer_region_register(c, pas.fd, 0, 0, "pas", &preg));
	CHECK_OK(xfer_region_register(c, act.fd, 0, 0, "act", &areg));
	td_fill(write ? act.addr : pas.addr, NPAIRS * BLOCK, 21);
	memset(write ? pas.addr : act.addr, 0, NPAIRS * BLOCK);
	xfer_set_reply_cb(c, on_reply, &s);
	xfer_set_event_cb(c, on_event, &s);
	for (size_t i = 0; i < NPAIRS; i++) {
		struct xfer_desc pd = { preg, i * BLOCK, BLOCK };
		post(c, &s, write ? XFER_WRITABLE : XFER_READABLE, NULL, &pd);
	}
	take(c, &s, NPAIRS, 0);
	for (int i = 0; i < NPAIRS; i++) {
		int k = reply_of(&s, s.requests[i]);
		CHECK_EQ_INT(s.replies[k].error, 0);
		CHECK(s.replies[k].op != 0 && strncmp(s.replies[k].meta, "xfer1.", 6) == 0);
	}
	for (size_t i = 0; i < NPAIRS; i++) {
		struct xfer_desc ad = { areg, (NPAIRS - 1 - i) * BLOCK, BLOCK };
		post(c, &s, write ? XFER_WRITE : XFER_READ,
		     s.replies[reply_of(&s, s.requests[i])].meta, &ad);
	}
	take(c, &s, 2 * NPAIRS, 2 * NPAIRS);
	CHECK_EQ_INT(s.stray, 0);
	CHECK_EQ_INT(s.complete, 2 * NPAIRS);
	for (int i = NPAIRS; i < 2 * NPAIRS; i++)
		CHECK_EQ_INT(s.replies[reply_of(&s, s.requests[i])].error, 0);
	for (size_t i = 0; i < NPAIRS; i++)
		CHECK_MEM_EQ((char *)pas.addr + i * BLOCK,
			     (char *)act.addr + (NPAIRS - 1 - i) * BLOCK, BLOCK);
	CHECK_EQ_INT(td_wait_stat(&d, "ops", 0, 5000, NULL), 0);
	xfer_close(c);
	xfer_buf_free(&pas);
	xfer_buf_free(&act);
	CHECK_EQ_INT(td_stop(&d), 0);
}

TEST(posted_reads_many_in_flight)
{
	many_in_flight(false);
}

TEST(posted_writes_many_in_flight)
{
	many_in_flight(true);
}

/*
 * A readable over a region that does not exist and a read of metadata that names no offer:
 * each refusal is its own request's reply, with the errno and the daemon's sentence, and the
 * request posted between them is made.
 */
TEST(posted_refusals_reach_their_reply)
{
	struct td d;
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t reg;
	struct seen s = { 0 };
	struct xfer_desc bad = { 999999, 0, 4096 }, good;
	char fake_meta[600];

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "refused", &c));
	CHECK_OK(xfer_buf_alloc(BLOCK, &buf));
	CHECK_OK(xfer_region_register(c, buf.fd, 0, 0, "buf", &reg));
	good = (struct xfer_desc){ reg, 0, BLOCK };
	xfer_set_reply_cb(c, on_reply, &s);
	post(c, &s, XFER_READABLE, NULL, &bad);
	post(c, &s, XFER_READABLE, NULL, &good);
	take(c, &s, 2, 0);
	/* The made readable's metadata with its token changed: the daemon knows no such offer. */
	snprintf(fake_meta, sizeof(fake_meta), "%s", s.replies[reply_of(&s, s.requests[1])].meta);
	fake_meta[strlen(fake_meta) - 2] = fake_meta[strlen(fake_meta) - 2] == 'A' ? 'B' : 'A';
	post(c, &s, XFER_READ, fake_meta, &good);
	take(c, &s, 3, 0);

	int k = reply_of(&s, s.requests[0]);
	CHECK_EQ_INT(s.replies[k].error, -ENOENT);
	CHECK(strstr(s.replies[k].message, "no region 999999") != NULL);
	CHECK_EQ_INT(s.replies[k].op, 0);
	k = reply_of(&s, s.requests[1]);
	CHECK_EQ_INT(s.replies[k].error, 0);
	CHECK_STR_EQ(s.replies[k].message, "");
	k = reply_of(&s, s.requests[2]);
	CHECK(s.replies[k].error < 0);
	CHECK(s.replies[k].message[0] != '\0');
	CHECK_EQ_INT(s.replies[k].op, 0);
	CHECK_EQ_INT(s.stray, 0);
	xfer_close(c);
	xfer_buf_free(&buf);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/*
 * A posted readable's reply that arrives while xfer_readable() waits for its own is queued for
 * the reply callback (delivered before that call returns), not taken as the blocking call's.
 */
TEST(posted_reply_during_a_blocking_call)
{
	struct td d;
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t reg, op = 0;
	char *meta = NULL;
	struct seen s = { 0 };

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "mixed", &c));
	CHECK_OK(xfer_buf_alloc(2 * BLOCK, &buf));
	CHECK_OK(xfer_region_register(c, buf.fd, 0, 0, "buf", &reg));
	xfer_set_reply_cb(c, on_reply, &s);
	struct xfer_desc d0 = { reg, 0, BLOCK }, d1 = { reg, BLOCK, BLOCK };
	post(c, &s, XFER_READABLE, NULL, &d0);
	CHECK_OK(xfer_readable(c, &d1, 1, NULL, &op, &meta));
	CHECK_EQ_INT(s.nreplies, 1); /* delivered before xfer_readable() returned */
	CHECK(s.replies[0].op != 0 && s.replies[0].op != op);
	CHECK(strcmp(s.replies[0].meta, meta) != 0);
	CHECK_OK(xfer_release(c, op));
	CHECK_OK(xfer_release(c, s.replies[0].op));
	free(meta);
	xfer_close(c);
	xfer_buf_free(&buf);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* A client closed with NPAIRS requests unanswered: the daemon keeps no operation of them. */
TEST(closed_with_requests_outstanding)
{
	struct td d;
	struct xfer_client *c;
	struct xfer_buf buf;
	uint64_t reg;
	struct seen s = { 0 };

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "closer", &c));
	CHECK_OK(xfer_buf_alloc(NPAIRS * BLOCK, &buf));
	CHECK_OK(xfer_region_register(c, buf.fd, 0, 0, "buf", &reg));
	xfer_set_reply_cb(c, on_reply, &s);
	for (size_t i = 0; i < NPAIRS; i++) {
		struct xfer_desc pd = { reg, i * BLOCK, BLOCK };
		post(c, &s, XFER_READABLE, NULL, &pd);
	}
	xfer_close(c);
	CHECK_EQ_INT(s.nreplies, 0);
	CHECK_EQ_INT(td_wait_stat(&d, "ops", 0, 5000, NULL), 0);
	CHECK_EQ_INT(td_wait_stat(&d, "regions", 0, 5000, NULL), 0);
	xfer_buf_free(&buf);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* The library's rules, each refused before anything is sent, with a sentence. */
TEST(post_op_rules)
{
	struct td d;
	struct xfer_client *c;
	struct seen s = { 0 };
	struct xfer_desc dd = { 1, 0, 4096 };
	uint64_t req = 5;

	CHECK_OK(td_start(&d, NULL));
	CHECK_OK(xfer_connect(d.sock, "rules", &c));
	CHECK_EQ_INT(xfer_post_op(NULL, XFER_READABLE, NULL, &dd, 1, NULL, &req), -EINVAL);
	CHECK_EQ_INT(xfer_post_op(c, XFER_READABLE, NULL, &dd, 1, NULL, NULL), -EINVAL);
	CHECK_EQ_INT(xfer_post_op(c, XFER_READABLE, NULL, &dd, 1, NULL, &req), -EINVAL);
	CHECK(strstr(xfer_last_error(c), "reply callback") != NULL);
	CHECK_EQ_INT(req, 0);
	xfer_set_reply_cb(c, on_reply, &s);
	CHECK_EQ_INT(xfer_post_op(c, XFER_GET, NULL, &dd, 1, NULL, &req), -EINVAL);
	CHECK(strstr(xfer_last_error(c), "not get") != NULL);
	CHECK_EQ_INT(xfer_post_op(c, XFER_READ, NULL, &dd, 1, NULL, &req), -EINVAL);
	CHECK_STR_EQ(xfer_last_error(c), "op.read needs metadata");
	CHECK_EQ_INT(xfer_post_op(c, XFER_WRITABLE, "xfer1.x", &dd, 1, NULL, &req), -EINVAL);
	CHECK_STR_EQ(xfer_last_error(c), "op.writable takes no metadata");
	CHECK_EQ_INT(xfer_post_op(c, (enum xfer_kind)77, NULL, &dd, 1, NULL, &req), -EINVAL);
	CHECK_EQ_INT(xfer_dispatch(c), 0); /* nothing was sent: nothing comes back */
	CHECK_EQ_INT(s.nreplies + s.stray, 0);
	xfer_close(c);
	CHECK_EQ_INT(td_stop(&d), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* A fake daemon: answers hello, and a posted request with an op's end first, then its reply. */

static void fake_serve(int lfd)
{
	static char buf[XP_MAX_MSG];
	int sock = accept(lfd, NULL, NULL);

	while (sock >= 0) {
		ssize_t n = recv(sock, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		json_t *req = json_loadb(buf, (size_t)n, 0, NULL);
		json_int_t id = json_integer_value(json_object_get(req, "id"));
		if (strcmp(json_string_value(json_object_get(req, "method")), "hello") == 0) {
			td_raw_send_json(sock, xp_build_result(id, json_pack("{s:i, s:i}", "client",
									     1, "version",
									     XP_PROTO_VERSION)));
		} else {
			td_raw_send_json(sock,
					 json_pack("{s:s, s:s, s:{s:i, s:s, s:s, s:i, s:i}}",
						   "jsonrpc", "2.0", "method", XP_NOTIFY_OP_CHANGED,
						   "params", "op", 77, "kind", "read", "state",
						   "COMPLETE", "length", 4096, "bytes", 4096));
			td_raw_send_json(sock, xp_build_result(id, json_pack("{s:i}", "op", 77)));
		}
		json_decref(req);
	}
	_exit(0);
}

TEST(event_before_its_reply_is_delivered_first)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct xfer_client *c;
	struct seen s = { 0 };
	struct xfer_desc dd = { 1, 0, 4096 };
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	pid_t pid;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/xferd-postop.%d.sock", (int)getpid());
	unlink(sa.sun_path);
	CHECK(lfd >= 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		fake_serve(lfd);
	close(lfd);
	CHECK_OK(xfer_connect(sa.sun_path, "order", &c));
	xfer_set_reply_cb(c, on_reply, &s);
	xfer_set_event_cb(c, on_event, &s);
	post(c, &s, XFER_READ, "xfer1.e30", &dd);
	take(c, &s, 1, 1);
	CHECK_STR_EQ(s.order, "er");
	CHECK_EQ_INT(s.replies[0].op, 77);
	CHECK_EQ_INT(s.complete, 1);
	xfer_close(c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	unlink(sa.sun_path);
}
