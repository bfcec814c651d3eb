// SPDX-License-Identifier: MIT
/*
 * libFuzzer target over the peer protocol after the handshake (PROTOCOL.md §10). An in-process
 * daemon made of the real daemon objects listens for peers on 127.0.0.1 (an ephemeral port)
 * with --insecure-peers semantics (no key), so that the bytes reach the frames after HELLO.
 * Each input is one fresh TCP connection: a valid HELLO from a fixed fuzz node, then the
 * input's bytes as they are (headers and payloads: PROTOCOL.md §10.3), then a half-close; the
 * target reads what the daemon answers until it closes.
 *
 * After every input the daemon must be back at its baseline once the loop settles: no peer set,
 * no transfer, no operation, no connection still waiting for HELLO, the same fds open. Anything
 * else aborts with a line on stderr, so that libFuzzer reports the input.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_daemon.h"
#include "fuzz_target.h"

#define FUZZ_NODE "f0220000000000000000000000000001"
#define FUZZ_EPOCH 1700000000000000ull
#define FUZZ_PEER_HELLO "{\"version\":1,\"node\":\"f0220000000000000000000000000002\",\"epoch\":7}"
#define SETTLE_US 5000000 /* the most one input may take to settle */

const char fuzz_target_corpus[] = "corpus-peer";

static struct {
	struct fuzz_daemon fd;
	uint16_t port;
} F;

/* One turn of the loop; @wait: waiting at most 10 ms for an event if none is ready. */
static void turn(bool wait)
{
	struct timeval tv = { 0, 10000 };

	if (wait)
		event_base_loopexit(F.fd.d.base, &tv);
	if (event_base_loop(F.fd.d.base, wait ? EVLOOP_ONCE : EVLOOP_NONBLOCK) < 0)
		fuzz_die("event_base_loop failed");
}

/* A peer-serving daemon: TCP on 127.0.0.1 (an ephemeral port), no key (--insecure-peers). */
static void configure(struct xd_config *cfg)
{
	cfg->insecure_peers = true;
	if (xd_config_add_addr(cfg->listen, &cfg->nlisten, "127.0.0.1:0") < 0)
		fuzz_die("out of memory");
}

static void fuzz_start(void)
{
	struct xd_daemon *d = &F.fd.d;

	fuzz_daemon_start(&F.fd, "fuzz_peer", FUZZ_NODE, FUZZ_EPOCH, configure);
	for (int i = 0; i < d->nendpoints; i++)
		if (strcmp(d->endpoints[i].transport, xd_transport_tcp_ops.name) == 0)
			F.port = d->endpoints[i].port;
	if (!F.port)
		fuzz_die("no TCP listener");
}

void fuzz_target_fini(void)
{
	fuzz_daemon_stop(&F.fd);
}

/* Appends a frame header for a @len-byte payload of @type to @buf. */
static size_t put_hdr(uint8_t *buf, uint8_t type, uint32_t len)
{
	struct xp_peer_hdr h = { .type = type, .length = len };

	xp_peer_hdr_pack(&h, buf);
	return XP_PEER_HDR_LEN;
}

/* Sends all of @buf, turning the loop while the socket is full; stops if the daemon closed. */
static void send_all(int sock, const uint8_t *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(sock, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EAGAIN) {
			turn(true);
			continue;
		}
		if (n < 0)
			return; /* EPIPE, ECONNRESET: the daemon cut the connection, which it may */
		buf += n;
		len -= (size_t)n;
	}
}

/* Reads and drops what the daemon sends until it closes the connection. */
static void drain_until_closed(int sock)
{
	static char buf[65536];
	uint64_t start = xd_now_us();

	for (bool wait = false;; wait = true) {
		turn(wait);
		ssize_t n;
		while ((n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
			;
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return;
		if (xd_now_us() - start > SETTLE_US)
			fuzz_die("the daemon kept the connection open after the peer's half-close");
	}
}

static bool at_baseline(struct xd_daemon *d)
{
	return TAILQ_EMPTY(&d->peers) && TAILQ_EMPTY(&d->ops); /* (transfers live in their set) */
}

/* @fds: open before the input. */
static void run_input(const uint8_t *data, size_t size, int fds)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(F.port) };
	uint8_t hello[XP_PEER_HDR_LEN + sizeof(FUZZ_PEER_HELLO)];
	size_t hlen = strlen(FUZZ_PEER_HELLO);
	int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (sock < 0 || fuzz_connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fuzz_die("connect to 127.0.0.1:%u: %s", F.port, strerror(errno));
	put_hdr(hello, XP_PEER_HELLO, (uint32_t)hlen);
	memcpy(hello + XP_PEER_HDR_LEN, FUZZ_PEER_HELLO, hlen);
	send_all(sock, hello, XP_PEER_HDR_LEN + hlen);
	send_all(sock, data, size);
	shutdown(sock, SHUT_WR);
	drain_until_closed(sock);
	close(sock);
	uint64_t start = xd_now_us();
	/* The reapers the failure queued close the fds at a later turn: wait for them too. */
	for (bool wait = false; !at_baseline(&F.fd.d) || fuzz_count_fds() != fds; wait = true) {
		if (xd_now_us() - start > SETTLE_US && !at_baseline(&F.fd.d))
			fuzz_die("a peer set, transfer or operation outlived its connection");
		if (xd_now_us() - start > SETTLE_US)
			fuzz_die("%d fds open after the input, %d before it", fuzz_count_fds(),
				 fds);
		turn(wait);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!F.fd.started)
		fuzz_start();
	run_input(data, size, fuzz_count_fds());
	return 0;
}
