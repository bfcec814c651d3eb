// SPDX-License-Identifier: MIT
/*
 * Unit tests of proto/ without a daemon: packets and SCM_RIGHTS over socketpairs, the JSON-RPC
 * envelope parsers and builders, metadata encode/decode and its strictness, the name tables,
 * and the spec check that proto/PROTOCOL.md and xfer_proto.h agree.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "breq_ref.h"
#include "harness.h"
#include "xfer_proto.h"
#include "xp_fdmsg.h"
#include "xp_json.h"
#include "xp_meta.h"
#include "xp_peer.h"

/* ---- helpers ---- */

static void seqpair(int sv[2])
{
	CHECK_OK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ? -errno : 0);
}

static int count_fds(void)
{
	char path[64];
	int n = 0;

	for (int fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (access(path, F_OK) == 0)
			n++;
	}
	return n;
}

static bool fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static bool same_file(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

/* Sends @len bytes with @nfds fds with plain sendmsg (no length limit). Returns 0 or -errno. */
static int raw_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(8 * sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *h;

	if (nfds > 0) {
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		h = CMSG_FIRSTHDR(&msg);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(h), fds, nfds * sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

/* ---- packets and fds ---- */

TEST(packet_payload_round_trip)
{
	static char out[XP_MAX_MSG], in[XP_MAX_MSG];
	size_t sizes[] = { 1, 17, 4096, XP_MAX_MSG - 1, XP_MAX_MSG };
	struct xp_fdset set;
	int sv[2];

	seqpair(sv);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (size_t j = 0; j < sizes[i]; j++)
			out[j] = (char)(j * 7 + i);
		CHECK_OK(xp_packet_send(sv[0], out, sizes[i], NULL, 0));
		CHECK_EQ_INT(xp_packet_recv(sv[1], in, sizeof(in), &set, 0), sizes[i]);
		CHECK_EQ_INT(set.count, 0);
		CHECK_MEM_EQ(in, out, sizes[i]);
	}
	close(sv[0]);
	close(sv[1]);
}

TEST(packet_send_refuses_bad_lengths)
{
	static char big[XP_MAX_MSG + 1];
	struct xp_fdset set;
	char in[16];
	int sv[2];

	seqpair(sv);
	CHECK(xp_packet_send(sv[0], "x", 0, NULL, 0) < 0);
	/* The spec caps packets at XP_MAX_MSG in both directions; the sender enforces it. */
	CHECK(xp_packet_send(sv[0], big, sizeof(big), NULL, 0) < 0);
	CHECK_ERR(xp_packet_recv(sv[1], in, sizeof(in), &set, 1), -EAGAIN);
	close(sv[0]);
	close(sv[1]);
}

TEST(packet_one_fd_passes)
{
	struct xp_fdset set;
	int sv[2], mfd, fd;
	char in[8];

	seqpair(sv);
	mfd = memfd_create("one", MFD_CLOEXEC);
	CHECK(mfd >= 0);
	CHECK_OK(xp_packet_send(sv[0], "fd", 2, &mfd, 1));
	CHECK_EQ_INT(xp_packet_recv(sv[1], in, sizeof(in), &set, 0), 2);
	CHECK_EQ_INT(set.count, 1);
	fd = set.fds[0];
	CHECK(fd >= 0 && fd != mfd);
	CHECK(same_file(fd, mfd));
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	/* take moves ownership: the slot is emptied and close leaves the fd alone */
	CHECK_EQ_INT(xp_fdset_take(&set, 0), fd);
	CHECK_EQ_INT(xp_fdset_take(&set, 0), -EBADF);
	CHECK_EQ_INT(xp_fdset_take(&set, 1), -EBADF);
	CHECK_EQ_INT(xp_fdset_take(&set, -1), -EBADF);
	xp_fdset_close(&set);
	CHECK_EQ_INT(set.count, 0);
	CHECK(fd_is_open(fd));
	close(fd);
	close(mfd);
	close(sv[0]);
	close(sv[1]);
}

TEST(packet_three_fds_arrive_in_order)
{
	struct xp_fdset set;
	int sv[2], p[2], fds[3], got[3];
	char in[8];

	seqpair(sv);
	CHECK_OK(pipe2(p, O_CLOEXEC) < 0 ? -errno : 0);
	fds[0] = memfd_create("three", MFD_CLOEXEC);
	fds[1] = p[0];
	fds[2] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(fds[0] >= 0 && fds[2] >= 0);
	CHECK_OK(xp_packet_send(sv[0], "abc", 3, fds, 3));
	CHECK_EQ_INT(xp_packet_recv(sv[1], in, sizeof(in), &set, 0), 3);
	CHECK_EQ_INT(set.count, 3);
	for (int i = 0; i < 3; i++) {
		got[i] = set.fds[i];
		CHECK(same_file(got[i], fds[i]));
	}
	/* take one, close the rest: exactly the two left are closed */
	CHECK_EQ_INT(xp_fdset_take(&set, 1), got[1]);
	xp_fdset_close(&set);
	CHECK(!fd_is_open(got[0]));
	CHECK(fd_is_open(got[1]));
	CHECK(!fd_is_open(got[2]));
	close(got[1]);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

TEST(packet_253_fds_all_arrive_and_close)
{
	int fds[XP_RECV_FDS], sv[2], mfd, before;
	struct xp_fdset set;
	char in[8];

	seqpair(sv);
	mfd = memfd_create("many", MFD_CLOEXEC);
	CHECK(mfd >= 0);
	for (int i = 0; i < XP_RECV_FDS; i++)
		fds[i] = mfd;
	before = count_fds();
	CHECK_OK(xp_packet_send(sv[0], "m", 1, fds, XP_RECV_FDS));
	CHECK_EQ_INT(xp_packet_recv(sv[1], in, sizeof(in), &set, 0), 1);
	CHECK_EQ_INT(set.count, XP_RECV_FDS);
	CHECK_EQ_INT(count_fds(), before + XP_RECV_FDS);
	xp_fdset_close(&set);
	CHECK_EQ_INT(count_fds(), before);
	close(mfd);
	close(sv[0]);
	close(sv[1]);
}

TEST(packet_oversized_is_emsgsize_and_leaks_nothing)
{
	static char big[XP_MAX_MSG + 100], in[XP_MAX_MSG];
	struct xp_fdset set;
	int sv[2], fds[2], before;

	seqpair(sv);
	fds[0] = memfd_create("big0", MFD_CLOEXEC);
	fds[1] = memfd_create("big1", MFD_CLOEXEC);
	CHECK(fds[0] >= 0 && fds[1] >= 0);
	memset(big, '{', sizeof(big));
	before = count_fds();
	CHECK_OK(raw_send(sv[0], big, XP_MAX_MSG + 1, fds, 2));
	set.count = 99;
	CHECK_ERR(xp_packet_recv(sv[1], in, XP_MAX_MSG, &set, 0), -EMSGSIZE);
	CHECK_EQ_INT(set.count, 0);
	CHECK_EQ_INT(count_fds(), before);
	/* a small cap truncates a small packet the same way */
	CHECK_OK(raw_send(sv[0], big, 100, fds, 1));
	CHECK_ERR(xp_packet_recv(sv[1], in, 10, &set, 0), -EMSGSIZE);
	CHECK_EQ_INT(set.count, 0);
	CHECK_EQ_INT(count_fds(), before);
	/* the truncated packets were consumed: the next one arrives whole */
	CHECK_OK(xp_packet_send(sv[0], "next", 4, NULL, 0));
	CHECK_EQ_INT(xp_packet_recv(sv[1], in, XP_MAX_MSG, &set, 0), 4);
	CHECK_MEM_EQ(in, "next", 4);
	close(fds[0]);
	close(fds[1]);
	close(sv[0]);
	close(sv[1]);
}

TEST(packet_peer_close_is_econnreset)
{
	struct xp_fdset set;
	char in[16];
	int sv[2];

	seqpair(sv);
	CHECK_ERR(xp_packet_recv(sv[1], in, sizeof(in), &set, 1), -EAGAIN);
	CHECK_OK(xp_packet_send(sv[0], "last", 4, NULL, 0));
	close(sv[0]);
	/* what was sent before the close still arrives, then the close is seen */
	CHECK_EQ_INT(xp_packet_recv(sv[1], in, sizeof(in), &set, 0), 4);
	CHECK_ERR(xp_packet_recv(sv[1], in, sizeof(in), &set, 0), -ECONNRESET);
	CHECK_ERR(xp_packet_recv(sv[1], in, sizeof(in), &set, 1), -ECONNRESET);
	/* sending to a closed peer is an error, not SIGPIPE */
	signal(SIGPIPE, SIG_DFL);
	CHECK(xp_packet_send(sv[1], "x", 1, NULL, 0) < 0);
	signal(SIGPIPE, SIG_IGN);
	close(sv[1]);
}

/* ---- request envelope ---- */

struct req_case {
	const char *text;
	int code;   /* 0 or the JSON-RPC error code */
	int64_t id; /* expected id; -2: not checked */
	int method; /* expected method when code is 0 */
};

static const struct req_case req_cases[] = {
	{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stats\",\"params\":{}}", 0, 1, XP_M_STATS },
	{ "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"list.ops\"}", 0, 0, XP_M_LIST_OPS },
	{ "{\"jsonrpc\":\"2.0\",\"id\":9007199254740991,\"method\":\"hello\","
	  "\"params\":{\"version\":1,\"client\":\"x\"}}",
	  0, 9007199254740991LL, XP_M_HELLO },
	{ "{\"method\":\"op.status\",\"params\":{\"op\":3},\"id\":77,\"jsonrpc\":\"2.0\"}", 0, 77,
	  XP_M_OP_STATUS },
	/* not JSON */
	{ "this is not json", XP_E_PARSE, XP_ID_NONE, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"meth", XP_E_PARSE, XP_ID_NONE, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stats\"} trailing", XP_E_PARSE, XP_ID_NONE,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stats\",}", XP_E_PARSE, XP_ID_NONE, 0 },
	/* bad envelope */
	{ "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stats\"}]", XP_E_INVALID_REQ, XP_ID_NONE,
	  0 },
	{ "{\"id\":1,\"method\":\"stats\"}", XP_E_INVALID_REQ, -2, 0 },
	{ "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"stats\"}", XP_E_INVALID_REQ, -2, 0 },
	{ "{\"jsonrpc\":2.0,\"id\":1,\"method\":\"stats\"}", XP_E_INVALID_REQ, -2, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":-1,\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":9007199254740992,\"method\":\"stats\"}", XP_E_INVALID_REQ,
	  XP_ID_NONE, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"stats\"}", XP_E_INVALID_REQ, XP_ID_NONE, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":5}", XP_E_INVALID_REQ, -2, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":7}", XP_E_INVALID_REQ, -2, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"stats\",\"params\":[]}", XP_E_INVALID_REQ, 7,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"stats\",\"params\":\"x\"}", XP_E_INVALID_REQ,
	  7, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"stats\",\"params\":3}", XP_E_INVALID_REQ, 7,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"stats\",\"params\":null}", XP_E_INVALID_REQ,
	  7, 0 },
	/* unknown method: the id is kept so the error can be matched */
	{ "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"no.such\"}", XP_E_NO_METHOD, 42, 0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":43,\"method\":\"STATS\",\"params\":{}}", XP_E_NO_METHOD, 43,
	  0 },
	{ "{\"jsonrpc\":\"2.0\",\"id\":44,\"method\":\"op.changed\",\"params\":{}}", XP_E_NO_METHOD,
	  44, 0 },
};

static void check_req_case(const struct req_case *c)
{
	struct xp_request req;
	char err[256] = "";
	int rc = xp_request_parse(c->text, strlen(c->text), &req, err, sizeof(err));

	if (rc != c->code)
		harness_fail(__FILE__, __LINE__, "xp_request_parse(%s) = %d, want %d (%s)", c->text,
			     rc, c->code, err);
	if (c->id != -2 && req.id != c->id)
		harness_fail(__FILE__, __LINE__, "xp_request_parse(%s): id %lld, want %lld",
			     c->text, (long long)req.id, (long long)c->id);
	if (rc == 0) {
		CHECK_EQ_INT(req.method, c->method);
		CHECK(json_is_object(req.params));
	} else if (!err[0]) {
		harness_fail(__FILE__, __LINE__, "xp_request_parse(%s): no message", c->text);
	}
	xp_request_fini(&req);
}

TEST(request_parse_table)
{
	for (size_t i = 0; i < sizeof(req_cases) / sizeof(req_cases[0]); i++)
		check_req_case(&req_cases[i]);
}

TEST(request_parse_params)
{
	const char *t = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"op.wait\","
			"\"params\":{\"op\":8,\"timeout_ms\":1000}}";
	struct xp_request req;
	uint64_t v = 0;
	char err[128];

	CHECK_OK(xp_request_parse(t, strlen(t), &req, err, sizeof(err)));
	CHECK_EQ_INT(req.method, XP_M_OP_WAIT);
	CHECK_EQ_INT(json_object_size(req.params), 2);
	CHECK_EQ_INT(xp_get_u64(req.params, "op", &v), 0);
	CHECK_EQ_INT(v, 8);
	CHECK_EQ_INT(xp_get_u64(req.params, "absent", &v), -ENOENT);
	xp_request_fini(&req);

	t = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"op.status\",\"params\":{\"a\":\"abc\","
	    "\"b\":-5,\"c\":1.5,\"d\":null,\"e\":9007199254740993}}";
	CHECK_OK(xp_request_parse(t, strlen(t), &req, err, sizeof(err)));
	CHECK_EQ_INT(xp_get_u64(req.params, "a", &v), -EINVAL);
	CHECK_EQ_INT(xp_get_u64(req.params, "b", &v), -EINVAL);
	CHECK_EQ_INT(xp_get_u64(req.params, "c", &v), -EINVAL);
	CHECK_EQ_INT(xp_get_u64(req.params, "d", &v), -EINVAL);
	CHECK_EQ_INT(xp_get_u64(req.params, "e", &v), 0);
	CHECK_EQ_INT(v, 9007199254740993ULL);
	xp_request_fini(&req);
}

/* ---- reply envelope ---- */

static void parse_reply(const char *text, struct xp_reply *rep)
{
	int rc = xp_reply_parse(text, strlen(text), rep);

	if (rc)
		harness_fail(__FILE__, __LINE__, "xp_reply_parse(%s) = %d", text, rc);
}

TEST(reply_parse_result_error_notification)
{
	struct xp_reply rep;

	parse_reply("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"region\":4,\"length\":4096}}",
		    &rep);
	CHECK(!rep.notification);
	CHECK_EQ_INT(rep.id, 3);
	CHECK_EQ_INT(rep.code, 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(rep.result, "region")), 4);
	xp_reply_fini(&rep);

	parse_reply(
		"{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32000,\"message\":\"region 9 "
		"belongs to another client\",\"data\":{\"errno\":\"EPERM\"}}}",
		&rep);
	CHECK(!rep.notification);
	CHECK_EQ_INT(rep.id, 2);
	CHECK_EQ_INT(rep.code, XP_E_FAILED);
	CHECK_EQ_INT(rep.err, EPERM);
	CHECK_STR_EQ(rep.message, "region 9 belongs to another client");
	CHECK(rep.result == NULL);
	xp_reply_fini(&rep);

	parse_reply(
		"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}",
		&rep);
	CHECK_EQ_INT(rep.id, XP_ID_NONE);
	CHECK_EQ_INT(rep.code, XP_E_PARSE);
	CHECK_EQ_INT(rep.err, EIO);
	xp_reply_fini(&rep);

	parse_reply("{\"jsonrpc\":\"2.0\",\"method\":\"op.changed\",\"params\":{\"op\":7,\"state\":"
		    "\"COMPLETE\"}}",
		    &rep);
	CHECK(rep.notification);
	CHECK_STR_EQ(rep.method, XP_NOTIFY_OP_CHANGED);
	CHECK_EQ_INT(json_integer_value(json_object_get(rep.params, "op")), 7);
	xp_reply_fini(&rep);
}

TEST(reply_parse_rejects_garbage)
{
	const char *bad[] = {
		"nope",
		"[1,2]",
		"{\"jsonrpc\":\"2.0\",\"id\":1}",
		"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{}}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"no code\"}}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.changed\",\"params\":5}",
	};
	struct xp_reply rep;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = xp_reply_parse(bad[i], strlen(bad[i]), &rep);

		if (rc != -EBADMSG)
			harness_fail(__FILE__, __LINE__, "xp_reply_parse(%s) = %d, want -EBADMSG",
				     bad[i], rc);
		xp_reply_fini(&rep);
	}
}

/* The errno names of PROTOCOL.md 2.1 (and the -32603 example), with their values. */
static const struct {
	const char *name;
	int value;
} spec_errnos[] = {
	{ "EPROTO", EPROTO },	      { "EPROTONOSUPPORT", EPROTONOSUPPORT },
	{ "EINVAL", EINVAL },	      { "EBADF", EBADF },
	{ "EPERM", EPERM },	      { "ENOENT", ENOENT },
	{ "EBUSY", EBUSY },	      { "EDQUOT", EDQUOT },
	{ "EBADMSG", EBADMSG },	      { "EACCES", EACCES },
	{ "ESTALE", ESTALE },	      { "EHOSTUNREACH", EHOSTUNREACH },
	{ "EALREADY", EALREADY },     { "ECANCELED", ECANCELED },
	{ "EMSGSIZE", EMSGSIZE },     { "ETIMEDOUT", ETIMEDOUT },
	{ "ECONNRESET", ECONNRESET }, { "ESHUTDOWN", ESHUTDOWN },
	{ "ENOMEM", ENOMEM },	      { "EIO", EIO },
};

#define N_SPEC_ERRNOS (sizeof(spec_errnos) / sizeof(spec_errnos[0]))

TEST(errno_names_round_trip)
{
	for (size_t i = 0; i < N_SPEC_ERRNOS; i++) {
		CHECK_STR_EQ(xp_errno_name(spec_errnos[i].value), spec_errnos[i].name);
		CHECK_EQ_INT(xp_errno_from_name(spec_errnos[i].name), spec_errnos[i].value);
	}
	CHECK_STR_EQ(xp_errno_name(99999), "EIO");
	CHECK_EQ_INT(xp_errno_from_name("ENOSUCHTHING"), 0);
	CHECK_EQ_INT(xp_errno_from_name(""), 0);
}

TEST(reply_error_maps_every_spec_errno)
{
	char text[256];
	struct xp_reply rep;

	for (size_t i = 0; i < N_SPEC_ERRNOS; i++) {
		snprintf(text, sizeof(text),
			 "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"error\":{\"code\":"
			 "-32000,\"message\":\"m\",\"data\":{\"errno\":\"%s\"}}}",
			 i, spec_errnos[i].name);
		parse_reply(text, &rep);
		CHECK_EQ_INT(rep.id, i);
		CHECK_EQ_INT(rep.err, spec_errnos[i].value);
		xp_reply_fini(&rep);
	}
}

/* ---- builders ---- */

/* Serialises @msg (consumed) and returns the text; fails the test on error. */
static char *dump(json_t *msg)
{
	char *text = NULL;
	int n;

	CHECK(msg != NULL);
	n = xp_dump(msg, &text);
	json_decref(msg);
	CHECK_OK(n);
	CHECK_EQ_INT(n, strlen(text));
	return text;
}

TEST(builders_round_trip)
{
	struct xp_request req;
	struct xp_reply rep;
	char err[128], *text;

	text = dump(xp_build_request(12, "op.cancel", json_pack("{s:i}", "op", 7)));
	CHECK_OK(xp_request_parse(text, strlen(text), &req, err, sizeof(err)));
	CHECK_EQ_INT(req.id, 12);
	CHECK_EQ_INT(req.method, XP_M_OP_CANCEL);
	CHECK_EQ_INT(json_integer_value(json_object_get(req.params, "op")), 7);
	xp_request_fini(&req);
	free(text);

	text = dump(xp_build_request(13, "stats", NULL));
	CHECK_OK(xp_request_parse(text, strlen(text), &req, err, sizeof(err)));
	CHECK_EQ_INT(req.method, XP_M_STATS);
	CHECK(json_is_object(req.params));
	xp_request_fini(&req);
	free(text);

	text = dump(xp_build_result(14, json_pack("{s:i}", "region", 4)));
	parse_reply(text, &rep);
	CHECK_EQ_INT(rep.id, 14);
	CHECK_EQ_INT(json_integer_value(json_object_get(rep.result, "region")), 4);
	xp_reply_fini(&rep);
	free(text);

	text = dump(xp_build_error(15, XP_E_FAILED, EBUSY, "region 4 is used by op 7"));
	parse_reply(text, &rep);
	CHECK_EQ_INT(rep.id, 15);
	CHECK_EQ_INT(rep.code, XP_E_FAILED);
	CHECK_EQ_INT(rep.err, EBUSY);
	CHECK_STR_EQ(rep.message, "region 4 is used by op 7");
	xp_reply_fini(&rep);
	free(text);

	text = dump(xp_build_error(XP_ID_NONE, XP_E_PARSE, EBADMSG, "not JSON"));
	parse_reply(text, &rep);
	CHECK_EQ_INT(rep.id, XP_ID_NONE);
	CHECK(strstr(text, "\"id\":null") != NULL);
	xp_reply_fini(&rep);
	free(text);

	text = dump(xp_build_notification(XP_NOTIFY_OP_CHANGED, json_pack("{s:i}", "op", 9)));
	parse_reply(text, &rep);
	CHECK(rep.notification);
	CHECK_STR_EQ(rep.method, "op.changed");
	CHECK(strstr(text, "\"id\"") == NULL);
	xp_reply_fini(&rep);
	free(text);
}

TEST(dump_refuses_oversized)
{
	char *big = malloc(XP_MAX_MSG + 1), *text = NULL;
	json_t *msg;

	CHECK(big != NULL);
	memset(big, 'a', XP_MAX_MSG);
	big[XP_MAX_MSG] = '\0';
	msg = xp_build_result(1, json_pack("{s:s}", "blob", big));
	CHECK(msg != NULL);
	CHECK_ERR(xp_dump(msg, &text), -EMSGSIZE);
	json_decref(msg);
	free(big);
}

/* ---- metadata ---- */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* "xfer1." + unpadded base64url of @json, written independently of proto/xp_meta.c. */
static char *meta_of(const char *json)
{
	size_t n = strlen(json), o = 6;
	char *out = malloc(n / 3 * 4 + 12);
	const unsigned char *in = (const unsigned char *)json;

	CHECK(out != NULL);
	memcpy(out, "xfer1.", 6);
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = in[i] << 16 | (i + 1 < n ? in[i + 1] << 8 : 0) |
			     (i + 2 < n ? in[i + 2] : 0);

		out[o++] = b64url[v >> 18 & 63];
		out[o++] = b64url[v >> 12 & 63];
		if (i + 1 < n)
			out[o++] = b64url[v >> 6 & 63];
		if (i + 2 < n)
			out[o++] = b64url[v & 63];
	}
	out[o] = '\0';
	return out;
}

static void meta_sample(struct xp_meta *m, uint64_t *lengths)
{
	memset(m, 0, sizeof(*m));
	m->kind = XP_KIND_READABLE;
	for (int i = 0; i < XP_ID_BYTES; i++) {
		m->node[i] = (uint8_t)(0x5f + i * 13);
		m->token[i] = (uint8_t)(0xa0 ^ i * 31);
	}
	m->epoch = 1763731200123456ULL;
	m->op = 7;
	snprintf(m->endpoints[0].transport, sizeof(m->endpoints[0].transport), "local");
	m->nendpoints = 1;
	lengths[0] = 1000;
	lengths[1] = 5000;
	lengths[2] = 2192;
	m->lengths = lengths;
	m->nlengths = 3;
}

static void check_meta_equal(const struct xp_meta *a, const struct xp_meta *b)
{
	CHECK_EQ_INT(a->kind, b->kind);
	CHECK_MEM_EQ(a->node, b->node, XP_ID_BYTES);
	CHECK_MEM_EQ(a->token, b->token, XP_ID_BYTES);
	CHECK_EQ_INT(a->epoch, b->epoch);
	CHECK_EQ_INT(a->op, b->op);
	CHECK_EQ_INT(a->nendpoints, b->nendpoints);
	for (int i = 0; i < a->nendpoints; i++) {
		CHECK_STR_EQ(a->endpoints[i].transport, b->endpoints[i].transport);
		CHECK_STR_EQ(a->endpoints[i].addr, b->endpoints[i].addr);
		CHECK_EQ_INT(a->endpoints[i].port, b->endpoints[i].port);
	}
	CHECK_EQ_INT(a->nlengths, b->nlengths);
	for (uint32_t i = 0; i < a->nlengths; i++)
		CHECK_EQ_INT(a->lengths[i], b->lengths[i]);
}

TEST(meta_round_trip)
{
	struct xp_meta m, back;
	uint64_t lengths[3];
	char *s, err[128] = "";

	meta_sample(&m, lengths);
	CHECK_OK(xp_meta_encode(&m, &s));
	CHECK(strncmp(s, XP_META_PREFIX, strlen(XP_META_PREFIX)) == 0);
	CHECK(strspn(s + 6, b64url) == strlen(s + 6));
	CHECK(strlen(s) <= XP_METADATA_MAX);
	CHECK_OK(xp_meta_decode(s, &back, err, sizeof(err)));
	check_meta_equal(&m, &back);
	CHECK_EQ_INT(back.total, 8192);
	xp_meta_fini(&back);
	free(s);

	/* writable, two endpoints, one with an address */
	m.kind = XP_KIND_WRITABLE;
	m.op = 9007199254740991ULL;
	snprintf(m.endpoints[1].transport, sizeof(m.endpoints[1].transport), "tcp");
	snprintf(m.endpoints[1].addr, sizeof(m.endpoints[1].addr), "10.0.0.2");
	m.endpoints[1].port = 7471;
	m.nendpoints = 2;
	m.nlengths = 1;
	CHECK_OK(xp_meta_encode(&m, &s));
	CHECK_OK(xp_meta_decode(s, &back, err, sizeof(err)));
	check_meta_equal(&m, &back);
	CHECK_EQ_INT(back.total, 1000);
	xp_meta_fini(&back);
	free(s);
}

/* What the encoder would write, as text the table below edits. */
#define META_GOOD                                                                       \
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\"," \
	"\"epoch\":5,\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,"               \
	"\"token\":\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}"

static void check_meta_rejects(const char *s, const char *what)
{
	struct xp_meta m;
	char err[256] = "";
	int rc = xp_meta_decode(s, &m, err, sizeof(err));

	if (rc == 0)
		xp_meta_fini(&m);
	if (rc != -EBADMSG)
		harness_fail(__FILE__, __LINE__, "metadata %s (%.80s): decode = %d, want -EBADMSG",
			     what, s, rc);
	if (!err[0])
		harness_fail(__FILE__, __LINE__, "metadata %s: no message", what);
}

/* Decodes the JSON text @json, encoded as metadata; must be refused. */
static void check_json_rejects(const char *json)
{
	char *s = meta_of(json);

	check_meta_rejects(s, json);
	free(s);
}

TEST(meta_decode_accepts_reference_encoding)
{
	char *s = meta_of(META_GOOD), err[128] = "";
	struct xp_meta m;

	CHECK_OK(xp_meta_decode(s, &m, err, sizeof(err)));
	CHECK_EQ_INT(m.kind, XP_KIND_READABLE);
	CHECK_EQ_INT(m.epoch, 5);
	CHECK_EQ_INT(m.op, 7);
	CHECK_EQ_INT(m.node[15], 0x0f);
	CHECK_EQ_INT(m.token[0], 0xff);
	CHECK_EQ_INT(m.total, 4096);
	xp_meta_fini(&m);
	free(s);
}

static const char *const meta_bad_json[] = {
	/* unknown key */
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096],\"extra\":1}",
	/* missing token */
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"lengths\":[4096]}",
	/* wrong types and values */
	"{\"v\":\"1\",\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":2,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"read\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":1,\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"0001020304\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"zzeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":\"5\","
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":-5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":{},\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\",\"key\":\"secret\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":\"7\",\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":-7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[4096]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[0]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[\"4096\"]}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":4096}",
	"{\"v\":1,\"kind\":\"readable\",\"node\":\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,"
	"\"endpoints\":[{\"transport\":\"local\"}],\"op\":7,\"token\":"
	"\"ffeeddccbbaa99887766554433221100\",\"lengths\":[9223372036854775807,"
	"9223372036854775807,9223372036854775807]}",
	/* not an object at all */
	"[1,2,3]",
	"\"xfer\"",
};

TEST(meta_decode_rejects_bad_fields)
{
	for (size_t i = 0; i < sizeof(meta_bad_json) / sizeof(meta_bad_json[0]); i++)
		check_json_rejects(meta_bad_json[i]);
}

TEST(meta_decode_rejects_bad_prefix_and_base64)
{
	char *good = meta_of(META_GOOD), *s;
	const char bad_chars[] = "+/=!. ~";
	size_t len = strlen(good);

	s = strdup(good);
	CHECK(s != NULL);
	s[4] = '2'; /* xfer2. */
	check_meta_rejects(s, "with prefix xfer2.");
	memcpy(s, "XFER1.", 6);
	check_meta_rejects(s, "with prefix XFER1.");
	check_meta_rejects(good + 6, "without prefix");
	check_meta_rejects("", "empty");
	check_meta_rejects("xfer1.", "prefix only");
	check_meta_rejects("xfer1", "prefix without dot");
	for (size_t i = 0; bad_chars[i]; i++) {
		memcpy(s, good, len + 1);
		s[len / 2] = bad_chars[i];
		check_meta_rejects(s, "with a character outside base64url");
	}
	free(s);
	/* padding is not part of unpadded base64url */
	s = malloc(len + 3);
	CHECK(s != NULL);
	snprintf(s, len + 3, "%s==", good);
	check_meta_rejects(s, "with padding");
	free(s);
	free(good);
}

/* Metadata of each shape the encoder writes: local and TCP endpoints, a window, many lengths. */
static void meta_shapes(struct xp_meta *m, int shape, uint64_t *lengths)
{
	meta_sample(m, lengths);
	if (shape >= 1) { /* writable, a TCP endpoint after the local one */
		m->kind = XP_KIND_WRITABLE;
		m->op = 9007199254740991ULL;
		snprintf(m->endpoints[1].transport, sizeof(m->endpoints[1].transport), "tcp");
		snprintf(m->endpoints[1].addr, sizeof(m->endpoints[1].addr), "10.0.0.2");
		m->endpoints[1].port = 7471;
		m->nendpoints = 2;
	}
	if (shape == 2) { /* a window: its access and one length */
		m->kind = XP_KIND_WINDOW;
		m->access = XP_ACCESS_READWRITE;
		m->nlengths = 1;
	}
	if (shape == 3) { /* 1000 lengths: past the direct encoder's buffer */
		for (int i = 0; i < 1000; i++)
			lengths[i] = 1000000007ULL + (uint64_t)i;
		m->nlengths = 1000;
	}
	if (shape == 4) /* an address that needs escapes in JSON */
		snprintf(m->endpoints[1].addr, sizeof(m->endpoints[1].addr), "a\"b\\c");
}

/* The direct encoder writes what jansson writes, byte for byte, for every shape. */
TEST(meta_encode_direct_matches_jansson)
{
	static uint64_t lengths[1000];

	for (int shape = 0; shape <= 4; shape++) {
		struct xp_meta m, back;
		char *direct, *general, err[128] = "";
		meta_shapes(&m, shape, lengths);
		CHECK_OK(xp_meta_encode(&m, &direct));
		CHECK_OK(xp_meta_encode_json(&m, &general));
		CHECK_STR_EQ(direct, general);
		CHECK_OK(xp_meta_decode(direct, &back, err, sizeof(err)));
		check_meta_equal(&m, &back);
		CHECK_EQ_INT(back.access, m.access);
		xp_meta_fini(&back);
		free(direct);
		free(general);
	}
}

/* @json (the text after "xfer1.") decoded whole and by jansson alone: the same outcome. */
static void check_meta_decoders_agree(const char *json, size_t n)
{
	char *text = strndup(json, n), *s = meta_of(text), err1[256] = "", err2[256] = "";
	struct xp_meta a, b;

	CHECK(text != NULL);
	int rc1 = xp_meta_decode(s, &a, err1, sizeof(err1));
	int rc2 = xp_meta_decode_json(text, n, &b, err2, sizeof(err2));
	if (rc1 != rc2)
		harness_fail(__FILE__, __LINE__, "metadata %s: decode %d, jansson alone %d", text,
			     rc1, rc2);
	if (rc1 == 0 && rc2 == 0) {
		check_meta_equal(&a, &b);
		CHECK_EQ_INT(a.total, b.total);
		CHECK_EQ_INT(a.access, b.access);
	}
	if (rc1 == 0)
		xp_meta_fini(&a);
	if (rc2 == 0)
		xp_meta_fini(&b);
	free(s);
	free(text);
}

/*
 * The direct decoder takes only what jansson's takes, with the same result: every byte of the
 * encoder's text of each shape replaced by each of a set of characters, or left out.
 */
TEST(meta_decode_direct_agrees_with_jansson)
{
	static uint64_t lengths[1000];
	static const char subst[] = "\"\\ 0179-,:}]{[ax.";

	for (int shape = 0; shape <= 2; shape++) {
		struct xp_meta m;
		char *enc, err[128] = "";
		unsigned char *raw;
		meta_shapes(&m, shape, lengths);
		CHECK_OK(xp_meta_encode_json(&m, &enc));
		/* the JSON text back out of the encoding, by the general decoder's own rules */
		struct xp_meta back;
		CHECK_OK(xp_meta_decode(enc, &back, err, sizeof(err)));
		xp_meta_fini(&back);
		size_t n = strlen(enc + 6) * 3 / 4;
		raw = malloc(n + 1);
		CHECK(raw != NULL);
		/* (an independent base64url decoder: the test's table, not xp_meta.c's) */
		size_t o = 0;
		unsigned acc = 0;
		int bits = 0;
		for (const char *q = enc + 6; *q; q++) {
			acc = acc << 6 | (unsigned)(strchr(b64url, *q) - b64url);
			if ((bits += 6) >= 8)
				raw[o++] = (unsigned char)(acc >> (bits -= 8));
		}
		CHECK_EQ_INT(o, n);
		char *json = (char *)raw, *v = malloc(n + 1);
		CHECK(v != NULL);
		check_meta_decoders_agree(json, n);
		for (size_t i = 0; i < n; i++) {
			for (size_t j = 0; subst[j]; j++) {
				memcpy(v, json, n);
				v[i] = subst[j];
				check_meta_decoders_agree(v, n);
			}
			memcpy(v, json, i);
			memcpy(v + i, json + i + 1, n - i - 1);
			check_meta_decoders_agree(v, n - 1);
		}
		free(v);
		free(raw);
		free(enc);
	}
}

TEST(meta_decode_rejects_every_truncation)
{
	char *good = meta_of(META_GOOD), *s = strdup(good);
	size_t len = strlen(good);

	CHECK(s != NULL);
	for (size_t n = 0; n < len; n++) {
		memcpy(s, good, n);
		s[n] = '\0';
		check_meta_rejects(s, "truncated");
	}
	free(s);
	free(good);
}

TEST(meta_decode_rejects_tampering)
{
	char *good = meta_of(META_GOOD), *s = strdup(good);
	size_t len = strlen(good);
	struct xp_meta m;
	char err[256];

	CHECK(s != NULL);
	/* 'e' -> 'f' turns the leading '{' into 0x7f: not JSON */
	CHECK(s[6] == 'e');
	s[6] = 'f';
	check_meta_rejects(s, "with its first byte changed");
	/* every single-character change either is refused or decodes to something; never crashes */
	for (size_t i = 6; i < len; i++) {
		memcpy(s, good, len + 1);
		s[i] = s[i] == 'A' ? 'B' : 'A';
		int rc = xp_meta_decode(s, &m, err, sizeof(err));

		if (rc == 0)
			xp_meta_fini(&m);
		else
			CHECK_EQ_INT(rc, -EBADMSG);
	}
	free(s);
	free(good);
}

TEST(meta_decode_rejects_over_16384_chars)
{
	size_t cap = 40000, n;
	char *json = malloc(cap), *s;
	struct xp_meta m;
	char err[128];

	CHECK(json != NULL);
	/* 1024 lengths are within the limits, but 16-digit ones make the string too long */
	n = snprintf(json, cap,
		     "{\"v\":1,\"kind\":\"readable\",\"node\":"
		     "\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,\"endpoints\":"
		     "[{\"transport\":\"local\"}],\"op\":7,\"token\":"
		     "\"ffeeddccbbaa99887766554433221100\",\"lengths\":[");
	for (int i = 0; i < XP_MAX_DESCS; i++)
		n += snprintf(json + n, cap - n, "%s1000000000000000", i ? "," : "");
	snprintf(json + n, cap - n, "]}");
	s = meta_of(json);
	CHECK(strlen(s) > XP_METADATA_MAX);
	check_meta_rejects(s, "longer than 16384");
	free(s);

	/* the same with short lengths fits and decodes */
	n = snprintf(json, cap,
		     "{\"v\":1,\"kind\":\"writable\",\"node\":"
		     "\"000102030405060708090a0b0c0d0e0f\",\"epoch\":5,\"endpoints\":"
		     "[{\"transport\":\"local\"}],\"op\":7,\"token\":"
		     "\"ffeeddccbbaa99887766554433221100\",\"lengths\":[");
	for (int i = 0; i < XP_MAX_DESCS; i++)
		n += snprintf(json + n, cap - n, "%s1", i ? "," : "");
	snprintf(json + n, cap - n, "]}");
	s = meta_of(json);
	CHECK(strlen(s) <= XP_METADATA_MAX);
	CHECK_OK(xp_meta_decode(s, &m, err, sizeof(err)));
	CHECK_EQ_INT(m.nlengths, XP_MAX_DESCS);
	CHECK_EQ_INT(m.total, XP_MAX_DESCS);
	xp_meta_fini(&m);
	free(s);

	/* a plain over-long string, all valid alphabet */
	s = malloc(XP_METADATA_MAX + 2);
	CHECK(s != NULL);
	memcpy(s, "xfer1.", 6);
	memset(s + 6, 'A', XP_METADATA_MAX - 5);
	s[XP_METADATA_MAX + 1] = '\0';
	check_meta_rejects(s, "of 16385 characters");
	free(s);
	free(json);
}

TEST(hex_encode_decode)
{
	const uint8_t in[4] = { 0x00, 0xab, 0xff, 0x10 };
	uint8_t out[4] = { 0 };
	char hex[9];

	xp_hex_encode(in, 4, hex);
	CHECK_STR_EQ(hex, "00abff10");
	CHECK_OK(xp_hex_decode(hex, out, 4));
	CHECK_MEM_EQ(out, in, 4);
	CHECK_ERR(xp_hex_decode("0g", out, 1), -EINVAL);
	CHECK_ERR(xp_hex_decode("abc", out, 2), -EINVAL);
	CHECK_ERR(xp_hex_decode("", out, 1), -EINVAL);
	CHECK_ERR(xp_hex_decode("zz", out, 1), -EINVAL);
	xp_hex_encode(in, 0, hex);
	CHECK_STR_EQ(hex, "");
}

/* The RDMA HELLO's bytes are fixed by PROTOCOL.md §10.5, whatever the host's byte order. */
TEST(rdma_hello_wire_format)
{
	struct xp_rdma_hello h = { .epoch = 0x0102030405060708ull }, back;
	uint8_t wire[XP_RDMA_HELLO_LEN], padded[56];
	static const uint8_t head[8] = { 0x72, 0x65, 0x66, 0x78, XP_PEER_VERSION, 0, 0, 0 };
	static const uint8_t keyed[8] = { 0x72, 0x65, 0x66, 0x78, XP_PEER_VERSION, 1, 0, 0 };
	static const uint8_t epoch[8] = { 8, 7, 6, 5, 4, 3, 2, 1 };
	static const uint8_t zero[XP_RDMA_NONCE_LEN];

	CHECK_EQ_INT(XP_RDMA_HELLO_LEN, 48);
	CHECK(XP_RDMA_HELLO_LEN <= 56); /* the RC REQ private data limit */
	for (int i = 0; i < XP_ID_BYTES; i++)
		h.node[i] = (uint8_t)(0xa0 + i);
	/* Without a nonce (unkeyed): flags 0, zeros after the epoch. */
	xp_rdma_hello_pack(&h, wire);
	CHECK_MEM_EQ(wire, head, 8);
	CHECK_MEM_EQ(wire + 8, h.node, XP_ID_BYTES);
	CHECK_MEM_EQ(wire + 24, epoch, 8);
	CHECK_MEM_EQ(wire + 32, zero, XP_RDMA_NONCE_LEN);
	back.has_nonce = true;
	CHECK_OK(xp_rdma_hello_unpack(wire, sizeof(wire), &back));
	CHECK_MEM_EQ(back.node, h.node, XP_ID_BYTES);
	CHECK_EQ_INT(back.epoch, h.epoch);
	CHECK(!back.has_nonce);
	/* An older peer's 32-byte HELLO, as sent and as padded with zeros on the wire. */
	CHECK_OK(xp_rdma_hello_unpack(wire, XP_RDMA_HELLO_MIN_LEN, &back));
	CHECK(!back.has_nonce);
	CHECK_EQ_INT(back.epoch, h.epoch);
	CHECK_ERR(xp_rdma_hello_unpack(wire, XP_RDMA_HELLO_MIN_LEN - 1, &back), -EPROTO);
	CHECK_ERR(xp_rdma_hello_unpack(NULL, 0, &back), -EPROTO);
	/* With a nonce (keyed): flag byte 5, the nonce at byte 32. */
	h.has_nonce = true;
	for (int i = 0; i < XP_RDMA_NONCE_LEN; i++)
		h.nonce[i] = (uint8_t)(0x30 + i);
	xp_rdma_hello_pack(&h, wire);
	CHECK_MEM_EQ(wire, keyed, 8);
	CHECK_MEM_EQ(wire + 8, h.node, XP_ID_BYTES);
	CHECK_MEM_EQ(wire + 24, epoch, 8);
	CHECK_MEM_EQ(wire + 32, h.nonce, XP_RDMA_NONCE_LEN);
	memset(&back, 0, sizeof(back));
	CHECK_OK(xp_rdma_hello_unpack(wire, sizeof(wire), &back));
	CHECK(back.has_nonce);
	CHECK_MEM_EQ(back.nonce, h.nonce, XP_RDMA_NONCE_LEN);
	CHECK_EQ_INT(back.epoch, h.epoch);
	memset(padded, 0, sizeof(padded));
	memcpy(padded, wire, sizeof(wire));
	memset(&back, 0, sizeof(back));
	CHECK_OK(xp_rdma_hello_unpack(padded, sizeof(padded), &back));
	CHECK(back.has_nonce);
	CHECK_MEM_EQ(back.nonce, h.nonce, XP_RDMA_NONCE_LEN);
	/* A nonce flagged but cut off, an unknown flag. */
	CHECK_ERR(xp_rdma_hello_unpack(wire, sizeof(wire) - 1, &back), -EPROTO);
	wire[5] = 0x05;
	CHECK_ERR(xp_rdma_hello_unpack(wire, sizeof(wire), &back), -EPROTO);
	/* The control connection's flag (bit 1, PROTOCOL.md §10.5), packed and read back. */
	h.control = true;
	xp_rdma_hello_pack(&h, wire);
	CHECK_EQ_INT(wire[5], XP_RDMA_HELLO_NONCE | XP_RDMA_HELLO_CONTROL);
	memset(&back, 0, sizeof(back));
	CHECK_OK(xp_rdma_hello_unpack(wire, sizeof(wire), &back));
	CHECK(back.control && back.has_nonce);
	wire[5] = XP_RDMA_HELLO_NONCE;
	wire[4] = XP_PEER_VERSION + 1;
	CHECK_ERR(xp_rdma_hello_unpack(wire, sizeof(wire), &back), -EPROTO);
	wire[4] = XP_PEER_VERSION;
	wire[0] ^= 1;
	CHECK_ERR(xp_rdma_hello_unpack(wire, sizeof(wire), &back), -EPROTO);
}

/* ---- name tables ---- */

TEST(method_table)
{
	for (int m = 0; m < XP_M_COUNT; m++) {
		const char *name = xp_method_name(m);

		CHECK(name != NULL);
		CHECK_EQ_INT(xp_method_from_name(name), m);
		CHECK_EQ_INT(xp_method_fds(m), m == XP_M_REGION_REGISTER ? 1 : 0);
		CHECK_EQ_INT(xp_method_needs_hello(m), m != XP_M_HELLO);
	}
	CHECK(xp_method_name(XP_M_COUNT) == NULL);
	CHECK(xp_method_name(-1) == NULL);
	CHECK_EQ_INT(xp_method_from_name("no.such"), -EINVAL);
	CHECK_EQ_INT(xp_method_from_name(XP_NOTIFY_OP_CHANGED), -EINVAL);
	CHECK_STR_EQ(xp_method_name(XP_M_REGION_REGISTER), "region.register");
}

TEST(state_and_kind_tables)
{
	static const char *const states[] = { "UNINITIALIZED", "INITIALIZED", "IN_PROGRESS",
					      "COMPLETE",      "CANCELLED",   "ERRORED" };
	static const char *const kinds[] = { "readable", "writable", "read",  "write",
					     "get",	 "put",	     "window" };

	CHECK_EQ_INT(XP_ST_COUNT, 6);
	for (int s = 0; s < XP_ST_COUNT; s++) {
		CHECK_STR_EQ(xp_state_name(s), states[s]);
		CHECK_EQ_INT(xp_state_from_name(states[s]), s);
		CHECK_EQ_INT(xp_state_terminal(s),
			     s == XP_ST_COMPLETE || s == XP_ST_CANCELLED || s == XP_ST_ERRORED);
	}
	CHECK_EQ_INT(xp_state_from_name("DONE"), -EINVAL);
	for (int k = 0; k < XP_KIND_COUNT; k++) {
		CHECK_STR_EQ(xp_kind_name(k), kinds[k]);
		CHECK_EQ_INT(xp_kind_from_name(kinds[k]), k);
		CHECK_EQ_INT(xp_kind_passive(k), k == XP_KIND_READABLE || k == XP_KIND_WRITABLE);
	}
	CHECK_EQ_INT(xp_kind_from_name("readwrite"), -EINVAL);
	CHECK_STR_EQ(xp_access_name(XP_ACCESS_READWRITE), "readwrite");
	CHECK_EQ_INT(xp_access_from_name("write"), XP_ACCESS_WRITE);
	CHECK_EQ_INT(xp_access_from_name("rw"), -EINVAL);
	CHECK_STR_EQ(xp_access_name(0), "unknown");
}

/* ---- the spec check: PROTOCOL.md against xfer_proto.h ---- */

/* Reads proto/PROTOCOL.md ($XFER_SRCDIR, else relative to this binary). Caller frees. */
static char *read_spec(void)
{
	char path[PATH_MAX], exe[PATH_MAX];
	const char *src = getenv("XFER_SRCDIR");
	ssize_t n;
	FILE *f;
	char *text;
	long size;

	if (src && src[0]) {
		snprintf(path, sizeof(path), "%s/proto/PROTOCOL.md", src);
	} else {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		CHECK(n > 0);
		exe[n] = '\0';
		snprintf(path, sizeof(path), "%s/../../proto/PROTOCOL.md", dirname(exe));
	}
	f = fopen(path, "r");
	if (!f)
		harness_fail(__FILE__, __LINE__, "cannot open %s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	text = malloc(size + 1);
	CHECK(text != NULL);
	CHECK_EQ_INT(fread(text, 1, size, f), size);
	text[size] = '\0';
	fclose(f);
	return text;
}

/* Every ```json fenced block of @spec, parsed; fails on one that does not parse. */
static json_t *spec_examples(const char *spec)
{
	json_t *all = json_array();
	const char *p = spec;

	while ((p = strstr(p, "```json\n"))) {
		const char *start = p + 8, *end = strstr(start, "```");
		json_error_t jerr;
		json_t *ex;

		CHECK(end != NULL);
		ex = json_loadb(start, end - start, JSON_REJECT_DUPLICATES, &jerr);
		if (!ex)
			harness_fail(__FILE__, __LINE__,
				     "PROTOCOL.md example does not parse (%s): %.*s", jerr.text,
				     (int)(end - start > 120 ? 120 : end - start), start);
		json_array_append_new(all, ex);
		p = end + 3;
	}
	return all;
}

/* Checks one example: a request must parse as one, a reply or notification as one. */
static void check_example(json_t *ex, bool *requested, bool *notified)
{
	char *text = json_dumps(ex, JSON_COMPACT);
	const char *method = json_string_value(json_object_get(ex, "method"));
	struct xp_request req;
	struct xp_reply rep;
	char err[256] = "";

	CHECK(text != NULL);
	if (method && json_object_get(ex, "id")) {
		int rc = xp_request_parse(text, strlen(text), &req, err, sizeof(err));

		if (rc)
			harness_fail(__FILE__, __LINE__, "spec request %s: parse = %d (%s)", text,
				     rc, err);
		requested[req.method] = true;
		xp_request_fini(&req);
	} else {
		if (xp_reply_parse(text, strlen(text), &rep))
			harness_fail(__FILE__, __LINE__, "spec reply %s does not parse", text);
		if (rep.notification && strcmp(rep.method, XP_NOTIFY_OP_CHANGED) == 0)
			*notified = true;
		if (!rep.notification && rep.code) {
			const char *name = json_string_value(json_object_get(
				json_object_get(json_object_get(ex, "error"), "data"), "errno"));

			CHECK(name && xp_errno_from_name(name) != 0);
		}
		xp_reply_fini(&rep);
	}
	free(text);
}

TEST(spec_examples_parse_and_cover_every_method)
{
	char *spec = read_spec();
	json_t *all = spec_examples(spec), *ex;
	bool requested[XP_M_COUNT] = { false }, notified = false;
	size_t i;

	CHECK(json_array_size(all) >= XP_M_COUNT);
	json_array_foreach(all, i, ex)
		check_example(ex, requested, &notified);
	for (int m = 0; m < XP_M_COUNT; m++)
		if (!requested[m])
			harness_fail(__FILE__, __LINE__, "PROTOCOL.md has no example request of %s",
				     xp_method_name(m));
	if (!notified)
		harness_fail(__FILE__, __LINE__, "PROTOCOL.md has no %s notification example",
			     XP_NOTIFY_OP_CHANGED);
	json_decref(all);
	free(spec);
}

TEST(spec_errno_table_matches_code)
{
	char *spec = read_spec(), *p = strstr(spec, "| errno | rule |");
	int rows = 0;

	CHECK(p != NULL);
	p = strchr(p, '\n');
	while (p && (p = strstr(p, "\n| `E")) && rows < 64) {
		char name[32];

		if (sscanf(p, "\n| `%31[A-Z]`", name) != 1)
			break;
		if (!xp_errno_from_name(name))
			harness_fail(__FILE__, __LINE__,
				     "errno %s of PROTOCOL.md 2.1 is unknown to xp_errno_from_name",
				     name);
		CHECK_STR_EQ(xp_errno_name(xp_errno_from_name(name)), name);
		rows++;
		p++;
	}
	CHECK(rows >= 18); /* the table was found and read; new rows must be known names too */
	free(spec);
}

TEST(spec_limits_match_header)
{
	char *spec = read_spec();
	char row[128];

	CHECK_EQ_INT(XP_MAX_MSG, 65536);
	snprintf(row, sizeof(row), "| packet | %d bytes |", XP_MAX_MSG);
	CHECK(strstr(spec, row) != NULL);
	snprintf(row, sizeof(row), "| descriptors per operation | %d |", XP_MAX_DESCS);
	CHECK(strstr(spec, row) != NULL);
	snprintf(row, sizeof(row), "| name | %d bytes |", XP_MAX_NAME);
	CHECK(strstr(spec, row) != NULL);
	snprintf(row, sizeof(row), "| metadata | %d characters |", XP_METADATA_MAX);
	CHECK(strstr(spec, row) != NULL);
	snprintf(row, sizeof(row), "# xferd control protocol, version %d", XP_PROTO_VERSION);
	CHECK(strstr(spec, row) != NULL);
	CHECK(strstr(spec, "| fds per packet | 1 (`region.register` only) |") != NULL);
	CHECK_EQ_INT(XP_MAX_FDS, 1);
	free(spec);
}

/* ---- xp_jfast.c: the fast path reads and writes what jansson does ---- */

/* jansson's compact text of @v, or "(null)". */
static char *jansson_text(const json_t *v)
{
	return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("(null)");
}

/* xp_json_loadb() and json_loadb() agree on @len bytes of @text under @flags: both refuse it,
 * or both give values that jansson writes the same (key order included); and xp_json_dumps()
 * writes that value as jansson does. */
static void jfast_agree(const char *text, size_t len, size_t flags)
{
	json_error_t e1, e2;
	json_t *fast = xp_json_loadb(text, len, flags, &e1);
	json_t *slow = json_loadb(text, len, flags, &e2);
	char *a = jansson_text(fast), *b = jansson_text(slow);

	if (strcmp(a, b) != 0 || (!fast && strcmp(e1.text, e2.text) != 0))
		harness_fail(__FILE__, __LINE__, "%.*s (flags %zu): fast %s, jansson %s", (int)len,
			     text, flags, a, b);
	if (fast) {
		size_t n;
		char *d = xp_json_dumps(fast, XP_MAX_MSG, &n);
		if (!d || strlen(d) != n || strcmp(d, a) != 0)
			harness_fail(__FILE__, __LINE__, "dump of %s: %s", a, d ? d : "NULL");
		free(d);
	}
	free(a);
	free(b);
	json_decref(fast);
	json_decref(slow);
}

static const char *const jfast_texts[] = {
	"{}",
	"[]",
	" { } ",
	"{\"a\":1}",
	"{\"a\": 1, \"b\": [1, -2, 0, -0, true, false, null]}",
	"{\"a\":1,\"a\":2}",
	"[1.5]",
	"[1e3]",
	"[01]",
	"[-]",
	"[123456789012345678]",
	"[1234567890123456789]",
	"[-9223372036854775808]",
	"[9223372036854775807]",
	"{\"s\":\"xfer1.eyJ2IjoxLCJraW5kIjoicmVhZGFibGUi_-\"}",
	"[\"a\\\"b\"]",
	"[\"\\u00e9\"]",
	"[\"\xc3\xa9\"]",
	"[\"\x7f\"]",
	"[\"tab\there\"]",
	"{\"\":\"\"}",
	"[truex]",
	"[nul]",
	"[1,]",
	"[,1]",
	"{\"a\":}",
	"{\"a\" 1}",
	"{1:2}",
	"[1] x",
	"1",
	"\"s\"",
	"true",
	"",
	"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]"
	"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
	"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"op.batch\",\"params\":{\"ops\":[[\"read\","
	"\"xfer1.abc\",[[1,0,65536]]]],\"event\":\"batch\",\"end_only\":true}}",
	"\t\r\n[ 1 ,\n2 ]\n",
	/* numbers at the edges, as a client may send them in any numeric field */
	"[-0.0]",
	"[-0e0]",
	"[-01]",
	"[00]",
	"[+1]",
	"[.5]",
	"[1.]",
	"[1E3]",
	"[1e-3]",
	"[0x10]",
	"[9007199254740992]",
	"[9007199254740993]",
	"[-9007199254740993]",
	"[999999999999999999]",
	"[-999999999999999999]",
	"[9223372036854775808]",
	"[-9223372036854775809]",
	"[99999999999999999999]",
	"[1e400]",
	"[-1e400]",
	"{\"id\":-0,\"timeout_ms\":-1,\"offset\":18446744073709551615}",
	"[Infinity]",
	"[NaN]",
};

/*
 * Every text above, each byte of each replaced 6 ways or dropped, under both flags jansson is
 * called with here: the two readers agree, and the fast writer writes what jansson writes.
 */
TEST(json_fast_path_matches_jansson)
{
	static const char subst[] = { '"', '\\', ',', '0', '\x01', '\x80' };
	static const size_t flags[] = { 0, JSON_REJECT_DUPLICATES };

	for (size_t t = 0; t < sizeof(jfast_texts) / sizeof(jfast_texts[0]); t++) {
		const char *text = jfast_texts[t];
		size_t len = strlen(text);
		char *m = malloc(len + 1);
		CHECK(m != NULL);
		for (size_t f = 0; f < 2; f++) {
			jfast_agree(text, len, flags[f]);
			for (size_t i = 0; i < len; i++) {
				for (size_t k = 0; k < sizeof(subst); k++) {
					memcpy(m, text, len);
					m[i] = subst[k];
					jfast_agree(m, len, flags[f]);
				}
				memcpy(m, text, i);
				memcpy(m + i, text + i + 1, len - i - 1);
				jfast_agree(m, len - 1, flags[f]);
			}
		}
		free(m);
	}
}

/* Values the fast writer leaves to jansson (reals, escapes, non-ASCII) come out as jansson's. */
TEST(json_fast_dump_defers_what_it_does_not_take)
{
	json_t *v = json_pack("{s:f, s:s, s:s, s:[I, I]}", "r", 1.5, "e", "a\"b\\c\n", "u",
			      "\xc3\xa9", "i", (json_int_t)INT64_MIN, (json_int_t)INT64_MAX);
	size_t n;
	char *fast = xp_json_dumps(v, XP_MAX_MSG, &n), *slow = json_dumps(v, JSON_COMPACT);

	CHECK(fast && slow);
	CHECK_STR_EQ(fast, slow);
	CHECK_EQ_INT(n, strlen(slow));
	free(fast);
	free(slow);
	json_decref(v);
}

/* What op.batch_done was before xp_batch_done_text(): built with jansson, dumped by xp_dump(). */
static int batch_done_long_way(uint64_t batch, const struct xp_batch_end *ends, size_t n,
			       char **text)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *e = json_pack("{s:I, s:s, s:I}", "op", (json_int_t)ends[i].op, "state",
				      xp_state_name((enum xp_state)ends[i].state), "bytes",
				      (json_int_t)ends[i].bytes);
		if (ends[i].err)
			json_object_set_new(e, "errno", json_string(xp_errno_name(ends[i].err)));
		json_array_append_new(arr, e);
	}
	json_t *msg = xp_build_notification(XP_NOTIFY_BATCH_DONE,
					    json_pack("{s:I, s:o}", "batch", (json_int_t)batch,
						      "ops", arr));
	int len = xp_dump(msg, text);
	json_decref(msg);
	return len;
}

/*
 * Fills @ends[0..@n) from the xorshift state *@seed: ops and bytes of every size (0 and
 * INT64_MAX among them), any state, an errno from @errs (@nerrs of them; 0: none).
 */
static void random_ends(uint64_t *seed, struct xp_batch_end *ends, size_t n, const int *errs,
			size_t nerrs)
{
	uint64_t x = *seed;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		ends[i] = (struct xp_batch_end){
			.op = i % 3 ? x >> (x % 64) >> 1 : 0,
			.bytes = i % 5 ? (x >> 1) % 5000 : (uint64_t)INT64_MAX,
			.state = (int32_t)(x % XP_ST_COUNT),
			.err = errs[(x >> 8) % nerrs],
		};
	}
	*seed = x;
}

/* op.batch_done written as text is byte for byte what jansson wrote; too long is EMSGSIZE. */
TEST(batch_done_text_is_what_jansson_writes)
{
	static const int errs[] = { 0, EINVAL, ECANCELED, ETIMEDOUT, EFAULT, EDQUOT, 0, 0 };
	static char buf[XP_MAX_MSG];
	struct xp_batch_end ends[600];
	uint64_t seed = 88172645463325252ull;

	for (int round = 0; round < 200; round++) {
		size_t n = round < 10 ? (size_t)round : 1 + (size_t)(seed % 600);
		random_ends(&seed, ends, n, errs, sizeof(errs) / sizeof(errs[0]));
		uint64_t batch = round % 2 ? (uint64_t)round : ((uint64_t)1 << 52) + seed % 1000;
		char *want;
		int wlen = batch_done_long_way(batch, ends, n, &want);
		int len = xp_batch_done_text(buf, sizeof(buf), batch, ends, n);
		if (wlen == -EMSGSIZE) {
			CHECK_EQ_INT(len, -EMSGSIZE);
			continue;
		}
		CHECK(wlen > 0);
		CHECK_EQ_INT(len, wlen);
		CHECK_MEM_EQ(buf, want, (size_t)wlen);
		/* one byte short of room: EMSGSIZE, never a cut text */
		CHECK_EQ_INT(xp_batch_done_text(buf, (size_t)wlen - 1, batch, ends, n), -EMSGSIZE);
		free(want);
	}
}

/*
 * A batch's op.batch_done too long for one packet goes in parts (PROTOCOL.md §5.2): each part a
 * packet of at most XP_MAX_MSG bytes that jansson reads, "more": true on all but the last (and on
 * the last too when more_after), the ends of the parts in order being the batch's ends.
 */
TEST(batch_done_parts_fit_a_packet_each)
{
	static const int errs[] = { EHOSTUNREACH, ECONNREFUSED, ECANCELED, 0 };
	static char buf[XP_MAX_MSG];
	static struct xp_batch_end ends[XP_MAX_BATCH];
	uint64_t seed = 2463534242ull;

	for (int round = 0; round < 8; round++) {
		size_t n = round < 2 ? XP_MAX_BATCH : 1 + (size_t)(seed % XP_MAX_BATCH);
		bool more_after = round % 2;
		size_t from = 0, parts = 0;
		random_ends(&seed, ends, n, errs, sizeof(errs) / sizeof(errs[0]));
		for (size_t i = 0; round == 0 && i < n; i++) /* the longest ends there are */
			ends[i] = (struct xp_batch_end){ (uint64_t)INT64_MAX, (uint64_t)INT64_MAX,
							 XP_ST_CANCELLED, EHOSTUNREACH };
		while (from < n) {
			size_t taken = 0;
			int len = xp_batch_done_part(buf, sizeof(buf), 7, ends + from, n - from,
						     more_after, &taken);
			CHECK(len > 0 && (size_t)len <= XP_MAX_MSG && taken > 0);
			json_t *root = json_loadb(buf, (size_t)len, 0, NULL);
			json_t *params = json_object_get(root, "params");
			json_t *ops = json_object_get(params, "ops");
			CHECK(json_is_array(ops) && json_array_size(ops) == taken);
			CHECK_EQ_INT(json_is_true(json_object_get(params, "more")),
				     from + taken < n || more_after);
			for (size_t i = 0; i < taken; i++)
				CHECK(json_integer_value(
					      json_object_get(json_array_get(ops, i), "op")) ==
				      (json_int_t)ends[from + i].op);
			json_decref(root);
			from += taken;
			parts++;
		}
		if (round == 0)
			CHECK(parts > 1); /* 1024 of the longest ends need more than one packet */
	}
}

/*
 * What a client's jansson way makes of op.batch_done (xferclient.c's batch_event_parse()): 0 and
 * the values, or 1 when it is no batch event it would deliver.
 */
static int batch_done_ref(const char *text, size_t len, uint64_t *batch, struct xp_batch_end *ends,
			  size_t cap, size_t *n)
{
	json_t *root = json_loadb(text, len, 0, NULL), *params, *ops, *o;
	size_t i;
	int rc = 1;

	params = json_object_get(root, "params");
	ops = json_object_get(params, "ops");
	if (!json_is_string(json_object_get(root, "method")) ||
	    strcmp(json_string_value(json_object_get(root, "method")), "op.batch_done") != 0 ||
	    json_object_get(root, "id") || xp_get_u64(params, "batch", batch) < 0 ||
	    !json_is_array(ops) || json_array_size(ops) > cap)
		goto out;
	json_array_foreach(ops, i, o) {
		const char *st = json_string_value(json_object_get(o, "state"));
		const char *en = json_string_value(json_object_get(o, "errno"));
		int state = st ? xp_state_from_name(st) : -EINVAL;
		if (xp_get_u64(o, "op", &ends[i].op) < 0 || state < 0)
			goto out;
		ends[i].bytes = 0;
		xp_get_u64(o, "bytes", &ends[i].bytes);
		ends[i].state = state;
		ends[i].err = en ? xp_errno_from_name(en) : 0;
	}
	*n = json_array_size(ops);
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* Whether xp_batch_done_read() of @text gives 1, or 0 and the values of the jansson way. */
static void batch_done_read_check(const char *text, size_t len)
{
	struct xp_batch_end fast[64], slow[64];
	uint64_t fb = 0, sb = 0;
	size_t fn = 0, sn = 0;

	if (xp_batch_done_read(text, len, &fb, fast, 64, &fn) != 0)
		return; /* (jansson's way then decides, whatever the text is) */
	if (batch_done_ref(text, len, &sb, slow, 64, &sn) != 0)
		harness_fail(__FILE__, __LINE__, "read back, but jansson's way would not: %.*s",
			     (int)len, text);
	CHECK(fb == sb);
	CHECK_EQ_INT((int)fn, (int)sn);
	for (size_t i = 0; i < fn; i++) {
		CHECK(fast[i].op == slow[i].op && fast[i].bytes == slow[i].bytes);
		CHECK_EQ_INT(fast[i].state, slow[i].state);
		CHECK_EQ_INT(fast[i].err, slow[i].err);
	}
}

/*
 * op.batch_done read back without jansson (the client's fast way): what xp_batch_done_text()
 * wrote comes back whole; every cut of it, every byte of it changed to one of a hostile set,
 * and the forms jansson refuses or reads otherwise (a leading zero, 2^63, a sign, unknown
 * names, a refusal's message, spacing, more ends than room) are 1, or read as jansson reads them.
 */
TEST(batch_done_read_back_or_left_to_jansson)
{
	static const int errs[] = { 0, EINVAL, ECANCELED, ETIMEDOUT, 0 };
	static const char hostile[] = { '0', '9', '"', ',',  '}',	 ']',  '{',
					' ', '-', 'a', '\\', (char)0x80, '\0', ':' };
	static char buf[XP_MAX_MSG];
	struct xp_batch_end ends[64], back[64];
	uint64_t seed = 0x9e3779b97f4a7c15ull, batch;
	size_t n;

	for (int round = 0; round < 100; round++) {
		size_t want = round < 3 ? (size_t)round : 1 + (size_t)(seed % 64);
		random_ends(&seed, ends, want, errs, sizeof(errs) / sizeof(errs[0]));
		uint64_t id = round % 2 ? (uint64_t)round : ((uint64_t)1 << 52) + seed % 1000;
		int len = xp_batch_done_text(buf, sizeof(buf), id, ends, want);
		CHECK(len > 0);
		CHECK_EQ_INT(xp_batch_done_read(buf, (size_t)len, &batch, back, 64, &n), 0);
		CHECK(batch == id);
		CHECK_EQ_INT((int)n, (int)want);
		CHECK(n == 0 || memcmp(back, ends, n * sizeof(*ends)) == 0);
		if (want > 0) /* (no room for the last end) */
			CHECK_EQ_INT(xp_batch_done_read(buf, (size_t)len, &batch, back, want - 1,
							&n),
				     1);
		if (round % 10 != 3)
			continue;
		for (int cut = 0; cut < len; cut++)
			CHECK_EQ_INT(xp_batch_done_read(buf, (size_t)cut, &batch, back, 64, &n), 1);
		for (int at = 0; at < len; at++) {
			char was = buf[at];
			for (size_t h = 0; h < sizeof(hostile); h++) {
				buf[at] = hostile[h];
				batch_done_read_check(buf, (size_t)len);
			}
			buf[at] = was;
		}
	}
	static const char *const refused[] = {
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":01,\"ops\":[]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":9223372036854775808,\"ops\":[]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":18446744073709551616,\"ops\":[]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":-1,\"ops\":[]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[{\"op\":1,\"state\":\"BOGUS\",\"bytes\":0}]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[{\"op\":1,\"state\":\"ERRORED\",\"bytes\":0,\"errno\":\"EBOGUS\"}]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[],\"message\":\"refused\"}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[{\"op\":1,\"state\":\"COMPLETE\",\"bytes\":0},]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[]}} ",
		"{\"jsonrpc\": \"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[]}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":1,\"ops\":[{\"op\":1,\"state\":\"\",\"bytes\":0}]}}",
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (xp_batch_done_read(refused[i], strlen(refused[i]), &batch, back, 64, &n) != 1)
			harness_fail(__FILE__, __LINE__, "read back: %s", refused[i]);
	const char *top =
		"{\"jsonrpc\":\"2.0\",\"method\":\"op.batch_done\",\"params\":{\"batch\":"
		"9223372036854775807,\"ops\":[{\"op\":0,\"state\":\"CANCELLED\",\"bytes\":"
		"10,\"errno\":\"ECANCELED\"}]}}";
	CHECK_EQ_INT(xp_batch_done_read(top, strlen(top), &batch, back, 64, &n), 0);
	CHECK(batch == (uint64_t)INT64_MAX && n == 1 && back[0].op == 0 && back[0].bytes == 10);
	CHECK_EQ_INT(back[0].err, ECANCELED);
	batch_done_read_check(top, strlen(top));
}

/* What the client's jansson way reads from op.batch reply @text to request @id of @n: 0, or 1. */
static int batch_reply_ref(const char *text, size_t len, int64_t id, uint64_t *ops, size_t n,
			   uint64_t *batch)
{
	struct xp_reply rep;
	int rc = 1;

	if (xp_reply_parse(text, len, &rep) == 0 && !rep.notification && rep.id == id &&
	    rep.result && !json_object_get(rep.result, "failed") &&
	    json_array_size(json_object_get(rep.result, "results")) == n) {
		json_t *arr = json_object_get(rep.result, "results");
		size_t i;
		for (i = 0; i < n; i++)
			if (xp_get_u64(json_array_get(arr, i), "op", &ops[i]) < 0)
				break;
		if (i == n) {
			*batch = 0;
			xp_get_u64(rep.result, "batch", batch);
			rc = 0;
		}
	}
	xp_reply_fini(&rep);
	return rc;
}

/*
 * The reply to op.batch read back without jansson (xferclient.c's batch_await()): what the
 * daemon writes comes back; every cut, every byte changed to a hostile set, another id, another
 * count and the forms jansson refuses are 1, or read as the client's jansson way reads them.
 */
TEST(batch_reply_read_back_or_left_to_jansson)
{
	static const char hostile[] = { '0', '9', '"', ',',  '}',	 ']',  '{',
					' ', '-', 'a', '\\', (char)0x80, '\0', ':' };
	uint64_t ops[64], back[64], slow[64], batch, sb;
	uint64_t seed = 0x2545f4914f6cdd1dull;

	for (int round = 0; round < 60; round++) {
		size_t n = 1 + (size_t)(seed % 64);
		int64_t id = round % 2 ? round + 1 : ((int64_t)1 << 52) + round;
		json_t *results = json_array();
		for (size_t i = 0; i < n; i++) {
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			ops[i] = i % 4 ? seed >> (seed % 64) >> 1 : (uint64_t)INT64_MAX;
			json_array_append_new(results,
					      json_pack("{s:I}", "op", (json_int_t)ops[i]));
		}
		json_t *result = json_pack("{s:o}", "results", results);
		if (round % 3)
			json_object_set_new(result, "batch", json_integer(round));
		json_t *msg = xp_build_result(id, result);
		char *text;
		int len = xp_dump(msg, &text);
		json_decref(msg);
		CHECK(len > 0);
		CHECK_EQ_INT(xp_batch_reply_read(text, (size_t)len, id, back, n, &batch), 0);
		CHECK(memcmp(back, ops, n * sizeof(*ops)) == 0);
		CHECK(batch == (uint64_t)(round % 3 ? round : 0));
		CHECK_EQ_INT(xp_batch_reply_read(text, (size_t)len, id + 1, back, n, &batch), 1);
		CHECK_EQ_INT(xp_batch_reply_read(text, (size_t)len, id, back, n - 1, &batch), 1);
		CHECK_EQ_INT(xp_batch_reply_read(text, (size_t)len, id, back, n + 1, &batch), 1);
		if (round % 10 == 4) {
			for (int cut = 0; cut < len; cut++)
				CHECK_EQ_INT(xp_batch_reply_read(text, (size_t)cut, id, back, n,
								 &batch),
					     1);
			for (int at = 0; at < len; at++) {
				char was = text[at];
				for (size_t h = 0; h < sizeof(hostile); h++) {
					text[at] = hostile[h];
					if (xp_batch_reply_read(text, (size_t)len, id, back, n,
								&batch) != 0)
						continue;
					if (batch_reply_ref(text, (size_t)len, id, slow, n, &sb))
						harness_fail(__FILE__, __LINE__,
							     "read back, but jansson's way would "
							     "not: %.*s",
							     len, text);
					CHECK(memcmp(back, slow, n * sizeof(*back)) == 0 &&
					      batch == sb);
				}
				text[at] = was;
			}
		}
		free(text);
	}
	static const char *const refused[] = {
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"results\":[{\"op\":01}],\"batch\":1}}",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"results\":[{\"op\":9223372036854775808}]}}",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"results\":[{\"op\":1}],\"batch\":-1}}",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"results\":[{\"op\":1,\"metadata\":\"x\"}]}}",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"results\":[{\"op\":1}],\"failed\":1}}",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"results\":[{\"op\":1}]}} ",
		"{\"jsonrpc\":\"2.0\",\"id\":33,\"result\":{\"results\":[{\"op\":1}]}}",
		"{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":1,\"message\":\"no\"}}",
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (xp_batch_reply_read(refused[i], strlen(refused[i]), 3, back, 1, &batch) != 1)
			harness_fail(__FILE__, __LINE__, "read back: %s", refused[i]);
	CHECK_EQ_INT(xp_batch_reply_read("", 0, 3, back, 0, &batch), 1);
}

/* ---- op.batch requests read by the daemon without jansson (xp_batch_req.c) ---- */

static uint64_t breq_next(uint64_t *seed)
{
	*seed ^= *seed << 13, *seed ^= *seed >> 7, *seed ^= *seed << 17;
	return *seed;
}

/* A value below 2^63, often small, sometimes the largest. */
static uint64_t breq_value(uint64_t *seed)
{
	uint64_t r = breq_next(seed);

	return r % 5 == 0 ? (uint64_t)INT64_MAX : r % 5 == 1 ? r % 10 : (r >> 1) >> (r % 63);
}

/*
 * A random op.batch of gets and puts in libxferclient's text form (batch_text()) into @t: up
 * to @max_entries entries of 1 to 3 descriptors, tags of 0 to XP_MAX_TAG plain bytes, each
 * option present or not.
 */
static void breq_random_text(struct xp_text *t, uint64_t *seed, size_t max_entries)
{
	size_t n = 1 + breq_next(seed) % max_entries;

	xp_text_put(t, "{\"jsonrpc\":\"2.0\",\"id\":");
	xp_text_u64(t, breq_next(seed) % 3 ? breq_next(seed) % 1000 : ((uint64_t)1 << 53) - 1);
	xp_text_put(t, ",\"method\":\"op.batch\",\"params\":{\"ops\":[");
	for (size_t i = 0; i < n; i++) {
		xp_text_put(t, i ? ",[\"" : "[\"");
		xp_text_put(t, breq_next(seed) % 2 ? "get\"," : "put\",");
		xp_text_u64(t, breq_value(seed));
		xp_text_put(t, ",");
		xp_text_u64(t, breq_value(seed));
		xp_text_put(t, ",[");
		for (uint64_t k = 0, nd = 1 + breq_next(seed) % 2; k < nd; k++) {
			xp_text_put(t, k ? ",[" : "[");
			for (int v = 0; v < 3; v++) {
				xp_text_u64(t, breq_value(seed));
				xp_text_put(t, v < 2 ? "," : "]");
			}
		}
		xp_text_put(t, "]");
		if (breq_next(seed) % 3 == 0) {
			char tag[XP_MAX_TAG + 1];
			size_t len = breq_next(seed) % 4 ? breq_next(seed) % 20 : XP_MAX_TAG;
			for (size_t k = 0; k < len; k++) {
				tag[k] = (char)(0x20 + breq_next(seed) % 95);
				if (tag[k] == '"' || tag[k] == '\\')
					tag[k] = '/';
			}
			tag[len] = '\0';
			xp_text_put(t, ",\"");
			xp_text_put(t, tag);
			xp_text_put(t, "\"");
		}
		xp_text_put(t, "]");
	}
	xp_text_put(t, "]");
	uint64_t o = breq_next(seed);
	if (o & 1)
		xp_text_put(t, o & 2 ? ",\"release_on_end\":true" : ",\"release_on_end\":false");
	if (o & 4)
		xp_text_put(t, o & 8 ? ",\"event\":\"batch\"" : ",\"event\":\"each\"");
	if (o & 16) {
		xp_text_put(t, ",\"timeout_ms\":");
		xp_text_u64(t, breq_value(seed));
	}
	if (o & 32)
		xp_text_put(t, o & 64 ? ",\"end_only\":true" : ",\"end_only\":false");
	if (o & 128)
		xp_text_put(t, o & 256 ? ",\"reply\":false" : ",\"reply\":true");
	xp_text_put(t, "}}");
}

/* Reads @text back: 0 and jansson's reading, or 1. Fails the test if read but not agreed. */
static int breq_read_check(const char *text, size_t len, struct xp_batch_req *rq)
{
	char why[200];

	if (xp_batch_req_read(text, len, rq) != 0)
		return 1;
	if (!breq_agrees(text, len, rq, why, sizeof(why)))
		harness_fail(__FILE__, __LINE__,
			     "read back, but not as jansson's way reads it (%s): %.*s", why,
			     (int)len, text);
	return 0;
}

/*
 * The daemon's reader of op.batch (xp_batch_req_read()) reads the library's form back as
 * jansson's way reads it; every cut of it is left to jansson, and every byte changed to a
 * hostile one is left to jansson or still read as jansson reads it.
 */
TEST(batch_req_read_back_or_left_to_jansson)
{
	static const char hostile[] = {
		'0', '9', '"',	',',	    '}',	']',  '[', '{', ' ',
		'-', 'a', '\\', (char)0x80, (char)0xff, '\0', ':', '.', 'e'
	};
	static struct xp_batch_req rq;
	static char buf[XP_MAX_MSG];
	uint64_t seed = 0x9e3779b97f4a7c15ull;

	for (int round = 0; round < 200; round++) {
		struct xp_text t = { buf, sizeof(buf), 0 };
		breq_random_text(&t, &seed, round % 4 ? 8 : XP_BREQ_ENTRIES / 2);
		CHECK(t.len <= t.cap);
		size_t len = t.len;
		if (breq_read_check(buf, len, &rq) != 0)
			harness_fail(__FILE__, __LINE__, "not read back: %.*s", (int)len, buf);
		if (round % 20 != 3)
			continue;
		for (size_t cut = 0; cut < len; cut++)
			if (xp_batch_req_read(buf, cut, &rq) != 1)
				harness_fail(__FILE__, __LINE__, "a cut at %zu read back", cut);
		for (size_t at = 0; at < len; at++) {
			char was = buf[at];
			for (size_t h = 0; h < sizeof(hostile); h++) {
				buf[at] = hostile[h];
				breq_read_check(buf, len, &rq);
			}
			buf[at] = was;
		}
	}
}

/* Valid requests (or not) that are not exactly the library's form: all jansson's. */
TEST(batch_req_leaves_other_forms_to_jansson)
{
	static struct xp_batch_req rq;
	char tag[XP_MAX_TAG + 2], text[1024], *many = malloc(XP_MAX_MSG);
#define BREQ_HEAD "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"op.batch\",\"params\":{\"ops\":["
	static const char *const left[] = {
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]]}}x",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]] }}",
		BREQ_HEAD "[\"get\", 1,0,[[1,0,8]]]]}}",
		BREQ_HEAD "[\"get\",01,0,[[1,0,8]]]]}}",
		BREQ_HEAD "[\"get\",-1,0,[[1,0,8]]]]}}",
		BREQ_HEAD "[\"get\",1.0,0,[[1,0,8]]]]}}",
		BREQ_HEAD "[\"get\",1,9223372036854775808,[[1,0,8]]]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,18446744073709551616]]]]}}",
		BREQ_HEAD "[\"get\",1,0,[]]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0]]]]}}",
		BREQ_HEAD "[\"get\",1,0,[{\"region\":1,\"offset\":0,\"length\":8}]]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]],\"a\\\"b\"]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]],\"\\u0041\"]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]],\"\xc3\xa9\"]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]],\"a\tb\"]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]],7]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]],\"t\",\"u\"]]}}",
		BREQ_HEAD "[\"readable\",[[1,0,8]]]]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]],[\"read\",\"xfer1.e30\",[[1,0,8]]]]}}",
		BREQ_HEAD "{\"method\":\"op.get\",\"params\":{}}]}}",
		BREQ_HEAD "]}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]],\"event\":\"batch\",\"release_on_end\":true}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]],\"event\":\"batch\",\"event\":\"each\"}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]],\"event\":\"all\"}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]],\"release_on_end\":1}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]],\"timeout_ms\":-5}}",
		BREQ_HEAD "[\"get\",1,0,[[1,0,8]]]],\"other\":1}}",
		"{\"jsonrpc\":\"2.0\",\"id\":9007199254740992,\"method\":\"op.batch\",\"params\":"
		"{\"ops\":[[\"get\",1,0,[[1,0,8]]]]}}",
		"{\"id\":7,\"jsonrpc\":\"2.0\",\"method\":\"op.batch\",\"params\":"
		"{\"ops\":[[\"get\",1,0,[[1,0,8]]]]}}",
		"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"op.get\",\"params\":{\"ops\":[]}}",
		"",
	};

	for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++)
		if (xp_batch_req_read(left[i], strlen(left[i]), &rq) != 1)
			harness_fail(__FILE__, __LINE__, "read: %s", left[i]);
	/* the bounds: XP_MAX_TAG bytes of tag, XP_BREQ_ENTRIES entries, XP_BREQ_DESCS descriptors */
	for (size_t taglen = XP_MAX_TAG; taglen <= XP_MAX_TAG + 1; taglen++) {
		memset(tag, 'x', taglen);
		tag[taglen] = '\0';
		snprintf(text, sizeof(text), BREQ_HEAD "[\"put\",1,0,[[1,0,8]],\"%s\"]]}}", tag);
		CHECK_EQ_INT(breq_read_check(text, strlen(text), &rq), taglen > XP_MAX_TAG);
	}
	for (size_t n = XP_BREQ_ENTRIES; n <= XP_BREQ_ENTRIES + 1; n++) {
		struct xp_text t = { many, XP_MAX_MSG, 0 };
		xp_text_put(&t, BREQ_HEAD);
		for (size_t i = 0; i < n; i++)
			xp_text_put(&t, i ? ",[\"get\",1,0,[[1,0,8],[1,8,8]]]" :
					    "[\"get\",1,0,[[1,0,8]]]");
		xp_text_put(&t, "]}}");
		CHECK_EQ_INT(breq_read_check(many, t.len, &rq), n > XP_BREQ_ENTRIES);
	}
	for (size_t nd = XP_BREQ_DESCS; nd <= XP_BREQ_DESCS + 1; nd++) {
		struct xp_text t = { many, XP_MAX_MSG, 0 };
		xp_text_put(&t, BREQ_HEAD "[\"get\",1,0,[");
		for (size_t k = 0; k < nd; k++)
			xp_text_put(&t, k ? ",[1,0,8]" : "[1,0,8]");
		xp_text_put(&t, "]]]}}");
		CHECK_EQ_INT(breq_read_check(many, t.len, &rq), nd > XP_BREQ_DESCS);
	}
	free(many);
#undef BREQ_HEAD
}

/* The reply written as text is jansson's dump of the same result, and reads back. */
TEST(batch_reply_text_is_what_jansson_writes)
{
	uint64_t ops[XP_BREQ_ENTRIES], back[XP_BREQ_ENTRIES], batch, seed = 0x5deece66dull;
	char text[XP_BREQ_ENTRIES * 32 + 128];

	for (int round = 0; round < 100; round++) {
		size_t n = 1 + breq_next(&seed) % XP_BREQ_ENTRIES;
		int64_t id = round % 2 ? round : ((int64_t)1 << 53) - 1;
		bool has_batch = round % 3 != 0;
		json_t *results = json_array();
		for (size_t i = 0; i < n; i++) {
			ops[i] = breq_value(&seed);
			json_array_append_new(results,
					      json_pack("{s:I}", "op", (json_int_t)ops[i]));
		}
		json_t *result = json_pack("{s:o}", "results", results);
		if (has_batch)
			json_object_set_new(result, "batch", json_integer(round));
		json_t *msg = xp_build_result(id, result);
		char *want;
		int wlen = xp_dump(msg, &want);
		json_decref(msg);
		int len = xp_batch_reply_text(text, sizeof(text), id, ops, n, has_batch,
					      (uint64_t)round);
		CHECK(len > 0 && len == wlen && memcmp(text, want, (size_t)len) == 0);
		free(want);
		CHECK_EQ_INT(xp_batch_reply_read(text, (size_t)len, id, back, n, &batch), 0);
		CHECK(memcmp(back, ops, n * sizeof(*ops)) == 0);
		CHECK(batch == (has_batch ? (uint64_t)round : 0));
		CHECK_EQ_INT(xp_batch_reply_text(text, (size_t)len - 1, id, ops, n, has_batch,
						 (uint64_t)round),
			     -EMSGSIZE);
	}
}

/* ---- xp_jalloc.c: jansson's allocations through a cache of freed blocks ---- */

/* Each of @n blocks of @size bytes from jansson's allocator, filled, checked and freed. */
static void jalloc_round(size_t size, int n)
{
	json_malloc_t mf;
	json_free_t ff;
	unsigned char *b[64];

	json_get_alloc_funcs(&mf, &ff);
	CHECK(n <= 64);
	for (int i = 0; i < n; i++) {
		CHECK((b[i] = mf(size)) != NULL);
		CHECK(((uintptr_t)b[i] & 15) == 0); /* malloc's alignment, whatever the class */
		memset(b[i], 0x40 + i, size);
	}
	for (int i = 0; i < n; i++) {
		for (size_t k = 0; k < size; k++)
			CHECK(b[i][k] == (unsigned char)(0x40 + i)); /* no two blocks overlap */
		ff(b[i]);
	}
}

TEST(jalloc_gives_freed_blocks_again_by_size_class)
{
	struct xp_jalloc *c = xp_jalloc_install();
	uint64_t reused, made;
	size_t kept;

	CHECK(c != NULL);
	CHECK(xp_jalloc_install() == NULL); /* one per thread */
	/* every class boundary, and past the last class (never kept) */
	size_t sizes[] = { 0, 1, 31, 32, 33, 64, 65, 200, 511, 512, 513, 4096, 100000 };
	/*
	 * Classes of 32 bytes: 0-32 are class 0, 33 and 64 class 1, 65 class 2, 200 class 6, 511
	 * and 512 class 15, 513 and up are not kept. A size that shares the class of the one
	 * before takes that one's five freed blocks.
	 */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		jalloc_round(sizes[i], 5);
	xp_jalloc_counts(c, &reused, &made, &kept);
	CHECK_EQ_INT((int)reused, 5 * 5); /* 1, 31, 32, 64, 512 */
	CHECK_EQ_INT((int)made, 5 * 5 + 3 * 5);
	CHECK_EQ_INT((int)kept, 5 * 5);
	/* the same sizes again: every kept class from its list, the large ones from malloc() */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		jalloc_round(sizes[i], 5);
	xp_jalloc_counts(c, &reused, &made, &kept);
	CHECK_EQ_INT((int)reused, 5 * 5 + 10 * 5);
	CHECK_EQ_INT((int)made, 5 * 5 + 3 * 5 + 3 * 5);
	CHECK_EQ_INT((int)kept, 5 * 5);

	/* jansson's own values through it: what a daemon's loop makes and frees per request */
	for (int round = 0; round < 3; round++) {
		json_t *o = json_pack("{s:I, s:s, s:[i, i]}", "op", (json_int_t)round, "metadata",
				      "xfer1.eyJ2IjoxLCJraW5kIjoicmVhZGFibGUifQ", "lengths", 1, 2);
		CHECK(o != NULL);
		char *text = json_dumps(o, JSON_COMPACT);
		CHECK(text != NULL && strstr(text, "\"metadata\":\"xfer1.") != NULL);
		xp_json_free(text);
		json_decref(o);
	}
	xp_jalloc_drop(c);
}

TEST(jalloc_keeps_at_most_its_bound_per_class)
{
	struct xp_jalloc *c = xp_jalloc_install();
	json_malloc_t mf;
	json_free_t ff;
	enum { N = XP_JALLOC_KEEP + 100 };
	void **b = calloc(N, sizeof(*b));
	uint64_t reused, made;
	size_t kept;

	CHECK(c != NULL && b != NULL);
	json_get_alloc_funcs(&mf, &ff);
	for (int i = 0; i < N; i++)
		CHECK((b[i] = mf(100)) != NULL);
	for (int i = 0; i < N; i++)
		ff(b[i]);
	xp_jalloc_counts(c, &reused, &made, &kept);
	CHECK_EQ_INT((int)kept, XP_JALLOC_KEEP); /* the other 100 went back to free() */
	xp_jalloc_drop(c);			 /* frees the kept ones (ASan/valgrind: no leak) */
	free(b);
}

/*
 * xp_json_dumps() hands json_dumps()'s NULL (out of memory) to xp_json_free(), as free() takes
 * NULL. The cache's free once stepped back from the pointer to its header before looking at
 * it: arithmetic on NULL, which UBSan (make test SANITIZE=undefined) stops at.
 */
TEST(jalloc_frees_null_as_free_does)
{
	struct xp_jalloc *c = xp_jalloc_install();
	json_free_t ff;
	uint64_t reused, made;
	size_t kept;

	CHECK(c != NULL);
	json_get_alloc_funcs(NULL, &ff);
	xp_json_free(NULL);
	ff(NULL);
	xp_jalloc_counts(c, &reused, &made, &kept);
	CHECK(reused == 0 && made == 0 && kept == 0); /* nothing listed for it */
	xp_jalloc_drop(c);
}

static void *jalloc_other_thread(void *arg)
{
	json_malloc_t mf;
	json_free_t ff;
	void **blocks = arg;

	json_get_alloc_funcs(&mf, &ff);
	ff(blocks[0]);		   /* made on the cache's thread: freed here, not listed */
	blocks[1] = mf(100);	   /* made here, with malloc() */
	memset(blocks[1], 7, 100); /* (usable) */
	return NULL;
}

TEST(jalloc_blocks_cross_threads_and_outlive_the_cache)
{
	struct xp_jalloc *c = xp_jalloc_install();
	json_malloc_t mf;
	json_free_t ff;
	void *blocks[2];
	pthread_t t;
	uint64_t reused, made;
	size_t kept;

	CHECK(c != NULL);
	json_get_alloc_funcs(&mf, &ff);
	CHECK((blocks[0] = mf(100)) != NULL);
	CHECK_OK(-pthread_create(&t, NULL, jalloc_other_thread, blocks));
	CHECK_OK(-pthread_join(t, NULL));
	xp_jalloc_counts(c, &reused, &made, &kept);
	CHECK_EQ_INT((int)kept, 0); /* another thread never touches this thread's lists */
	ff(blocks[1]);		    /* another thread's block: listed here, a block like any */
	xp_jalloc_counts(c, &reused, &made, &kept);
	CHECK_EQ_INT((int)kept, 1);
	void *live = mf(300);
	CHECK(live != NULL);
	xp_jalloc_drop(c);
	ff(live); /* made by the cache, freed after it is gone: with free() */
	/* and a text jansson cannot write fast still comes back as a malloc()'d string */
	json_t *o = json_pack("{s:s}", "k", "needs \"escapes\"\n");
	size_t len;
	char *s = xp_json_dumps(o, XP_MAX_MSG, &len);
	CHECK(s != NULL && len == strlen(s));
	free(s);
	json_decref(o);
}
