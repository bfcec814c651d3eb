// SPDX-License-Identifier: MIT
/*
 * xferbench_fileio: the file <-> socket system calls the daemon could use, measured side by
 * side on one TCP connection, without xferd (issue 15: "io_uring where that measures faster").
 *
 *   xferbench_fileio recv --listen ADDR:PORT --mode M [--file PATH] --size N
 *   xferbench_fileio send --connect ADDR:PORT --mode M [--file PATH] --size N
 *
 * recv modes (socket -> file; prints the seconds from accept to the last byte in the file):
 *   mem          recv() into one 1 MiB buffer, dropped (the iperf3-like reference)
 *   splice       splice socket -> pipe -> file, blocking
 *   splice-nb    the same non-blocking after poll() says readable, as tcp.c and mem.c do
 *   pwrite       recv() into a buffer, pwrite() to the file
 *   uring-write  io_uring: one recv (MSG_WAITALL) at a time into 4 registered 1 MiB buffers,
 *                each full buffer written with write_fixed while the next recv runs
 *   uring-splice io_uring: splice socket -> pipe, then pipe -> file, as `splice` but submitted
 *                through the ring
 * send modes (file -> socket):
 *   mem          send() from one 1 MiB buffer (the reference)
 *   sendfile     sendfile(), as daemon/mem.c does
 *   uring-send   io_uring: read_fixed from the file into 4 registered 1 MiB buffers, each sent
 *                with send while the next reads run
 * The receiving file is created new beside PATH (fallocated, as xferctl sizes its landing
 * files) and removed at the end; the sending file must hold --size bytes (page cache: the
 * caller reads it once first). scripts/bench-fileio.sh runs every pairing in one run.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FIO_CHUNK (1u << 20) /* bytes per call or per buffer */
#define FIO_NBUF 4	     /* io_uring buffers in flight */

struct fio {
	const char *mode, *file, *addr;
	uint64_t size;
	int sock, fd;
	char *buf; /* FIO_NBUF * FIO_CHUNK, page aligned */
};

static void die(const char *what, int err)
{
	fprintf(stderr, "xferbench_fileio: %s: %s\n", what, strerror(err));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sockaddr_in parse_addr(const char *s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char host[64];
	const char *colon = strrchr(s, ':');

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		die("ADDR:PORT expected", EINVAL);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("not an IPv4 address", EINVAL);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	return sa;
}

/* ---- socket -> file ---- */

static void recv_mem(struct fio *f)
{
	for (uint64_t got = 0; got < f->size;) {
		ssize_t n = recv(f->sock, f->buf, FIO_CHUNK, 0);
		if (n <= 0)
			die("recv", n ? errno : ECONNRESET);
		got += (uint64_t)n;
	}
}

static void recv_pwrite(struct fio *f)
{
	for (uint64_t got = 0; got < f->size;) {
		ssize_t n = recv(f->sock, f->buf, FIO_CHUNK, 0);
		if (n <= 0)
			die("recv", n ? errno : ECONNRESET);
		if (pwrite(f->fd, f->buf, (size_t)n, (off_t)got) != n)
			die("pwrite", errno);
		got += (uint64_t)n;
	}
}

static void pipe_make(int p[2])
{
	if (pipe(p) < 0)
		die("pipe", errno);
	fcntl(p[1], F_SETPIPE_SZ, (int)FIO_CHUNK);
}

static void recv_splice(struct fio *f)
{
	int p[2];

	pipe_make(p);
	for (loff_t off = 0; (uint64_t)off < f->size;) {
		ssize_t n = splice(f->sock, NULL, p[1], NULL, FIO_CHUNK, SPLICE_F_MOVE);
		if (n <= 0)
			die("splice from the socket", n ? errno : ECONNRESET);
		while (n > 0) {
			ssize_t w = splice(p[0], NULL, f->fd, &off, (size_t)n, SPLICE_F_MOVE);
			if (w <= 0)
				die("splice into the file", w ? errno : EIO);
			n -= w;
		}
	}
	close(p[0]);
	close(p[1]);
}

/*
 * The daemon's own pattern (tcp.c, mem.c): wait for the socket to be readable (poll, as the
 * event loop's epoll), then splice without blocking until the socket is drained.
 */
static void recv_splice_nb(struct fio *f)
{
	struct pollfd pfd = { .fd = f->sock, .events = POLLIN };
	int p[2];

	pipe_make(p);
	for (loff_t off = 0; (uint64_t)off < f->size;) {
		if (poll(&pfd, 1, -1) < 0)
			die("poll", errno);
		while ((uint64_t)off < f->size) {
			ssize_t n = splice(f->sock, NULL, p[1], NULL, FIO_CHUNK,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0 && errno == EAGAIN)
				break;
			if (n <= 0)
				die("splice from the socket", n ? errno : ECONNRESET);
			while (n > 0) {
				ssize_t w =
					splice(p[0], NULL, f->fd, &off, (size_t)n, SPLICE_F_MOVE);
				if (w <= 0)
					die("splice into the file", w ? errno : EIO);
				n -= w;
			}
		}
	}
	close(p[0]);
	close(p[1]);
}

static void ring_init(struct io_uring *ring, struct fio *f)
{
	struct iovec iov[FIO_NBUF];
	int rc = io_uring_queue_init(2 * FIO_NBUF + 2, ring, 0);

	if (rc < 0)
		die("io_uring_queue_init", -rc);
	for (int i = 0; i < FIO_NBUF; i++)
		iov[i] = (struct iovec){ f->buf + (size_t)i * FIO_CHUNK, FIO_CHUNK };
	rc = io_uring_register_buffers(ring, iov, FIO_NBUF);
	if (rc < 0)
		die("io_uring_register_buffers", -rc);
}

/* Waits for one completion; returns its result and user_data. */
static int ring_reap(struct io_uring *ring, uint64_t *tag)
{
	struct io_uring_cqe *cqe;
	int rc = io_uring_wait_cqe(ring, &cqe);

	if (rc < 0)
		die("io_uring_wait_cqe", -rc);
	rc = cqe->res;
	*tag = cqe->user_data;
	io_uring_cqe_seen(ring, cqe);
	return rc;
}

static struct io_uring_sqe *ring_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		die("io_uring_get_sqe", EBUSY);
	return sqe;
}

#define TAG_RECV (1ull << 32) /* user_data: kind in the high half, buffer index below */
#define TAG_WRITE (2ull << 32)
#define TAG_SEND (3ull << 32)
#define TAG_READ (4ull << 32)

static void post_recv(struct io_uring *ring, struct fio *f, int b, uint64_t want)
{
	struct io_uring_sqe *sqe = ring_sqe(ring);

	io_uring_prep_recv(sqe, f->sock, f->buf + (size_t)b * FIO_CHUNK, want, MSG_WAITALL);
	sqe->user_data = TAG_RECV | (unsigned)b;
}

/*
 * One recv in flight (a stream's bytes must land in order), writes of the filled buffers
 * behind it: the file's copy of buffer i runs while buffer i+1 fills.
 */
static void recv_uring_write(struct fio *f)
{
	struct io_uring ring;
	uint64_t posted = 0, written = 0, off[FIO_NBUF];
	bool busy[FIO_NBUF] = { false };
	int recving = -1;

	ring_init(&ring, f);
	while (written < f->size) {
		for (int b = 0; recving < 0 && posted < f->size && b < FIO_NBUF; b++) {
			if (busy[b])
				continue;
			uint64_t want = f->size - posted < FIO_CHUNK ? f->size - posted : FIO_CHUNK;
			post_recv(&ring, f, b, want);
			off[b] = posted;
			busy[b] = true;
			recving = b;
		}
		io_uring_submit(&ring);
		uint64_t tag;
		int res = ring_reap(&ring, &tag);
		int b = (int)(tag & 0xffffffffu);
		if (res <= 0)
			die((tag >> 32) == 1 ? "io_uring recv" : "io_uring write",
			    res ? -res : ECONNRESET);
		if ((tag & ~0xffffffffull) == TAG_RECV) {
			struct io_uring_sqe *sqe = ring_sqe(&ring);
			io_uring_prep_write_fixed(sqe, f->fd, f->buf + (size_t)b * FIO_CHUNK,
						  (unsigned)res, off[b], b);
			sqe->user_data = TAG_WRITE | (unsigned)b;
			posted += (uint64_t)res;
			recving = -1;
		} else {
			written += (uint64_t)res; /* a short buffered write does not happen here */
			busy[b] = false;
		}
	}
	io_uring_queue_exit(&ring);
}

static void recv_uring_splice(struct fio *f)
{
	struct io_uring ring;
	uint64_t tag;
	int p[2];

	pipe_make(p);
	if (io_uring_queue_init(4, &ring, 0) < 0)
		die("io_uring_queue_init", errno);
	for (uint64_t off = 0; off < f->size;) {
		io_uring_prep_splice(ring_sqe(&ring), f->sock, -1, p[1], -1, FIO_CHUNK,
				     SPLICE_F_MOVE);
		io_uring_submit(&ring);
		int n = ring_reap(&ring, &tag);
		if (n <= 0)
			die("io_uring splice from the socket", n ? -n : ECONNRESET);
		while (n > 0) {
			io_uring_prep_splice(ring_sqe(&ring), p[0], -1, f->fd, (int64_t)off,
					     (unsigned)n, SPLICE_F_MOVE);
			io_uring_submit(&ring);
			int w = ring_reap(&ring, &tag);
			if (w <= 0)
				die("io_uring splice into the file", w ? -w : EIO);
			n -= w;
			off += (uint64_t)w;
		}
	}
	io_uring_queue_exit(&ring);
	close(p[0]);
	close(p[1]);
}

/* ---- file -> socket ---- */

static void send_mem(struct fio *f)
{
	for (uint64_t sent = 0; sent < f->size;) {
		size_t want = f->size - sent < FIO_CHUNK ? f->size - sent : FIO_CHUNK;
		ssize_t n = send(f->sock, f->buf, want, MSG_NOSIGNAL);
		if (n <= 0)
			die("send", errno);
		sent += (uint64_t)n;
	}
}

static void send_sendfile(struct fio *f)
{
	for (off_t off = 0; (uint64_t)off < f->size;) {
		size_t want = f->size - (uint64_t)off < FIO_CHUNK ? f->size - (uint64_t)off :
								    FIO_CHUNK;
		ssize_t n = sendfile(f->sock, f->fd, &off, want);
		if (n <= 0)
			die("sendfile", n ? errno : EIO);
	}
}

/* Reads ahead into free buffers; buffer i is sent (in file order) once its read is in. */
static void send_uring(struct fio *f)
{
	struct io_uring ring;
	uint64_t read_at = 0, sent = 0, len[FIO_NBUF] = { 0 };
	bool filled[FIO_NBUF] = { false }, busy[FIO_NBUF] = { false };
	int next_send = 0, sending = -1;

	ring_init(&ring, f);
	while (sent < f->size) {
		for (int i = 0; i < FIO_NBUF && read_at < f->size; i++) {
			int b = (int)((read_at / FIO_CHUNK) % FIO_NBUF);
			if (busy[b])
				break;
			len[b] = f->size - read_at < FIO_CHUNK ? f->size - read_at : FIO_CHUNK;
			struct io_uring_sqe *sqe = ring_sqe(&ring);
			io_uring_prep_read_fixed(sqe, f->fd, f->buf + (size_t)b * FIO_CHUNK,
						 (unsigned)len[b], read_at, b);
			sqe->user_data = TAG_READ | (unsigned)b;
			busy[b] = true;
			read_at += len[b];
		}
		if (sending < 0 && filled[next_send]) {
			struct io_uring_sqe *sqe = ring_sqe(&ring);
			io_uring_prep_send(sqe, f->sock, f->buf + (size_t)next_send * FIO_CHUNK,
					   len[next_send], MSG_WAITALL | MSG_NOSIGNAL);
			sqe->user_data = TAG_SEND | (unsigned)next_send;
			sending = next_send;
		}
		io_uring_submit(&ring);
		uint64_t tag;
		int res = ring_reap(&ring, &tag);
		int b = (int)(tag & 0xffffffffu);
		if ((tag & ~0xffffffffull) == TAG_READ) {
			if ((uint64_t)res != len[b])
				die("io_uring read_fixed", res < 0 ? -res : EIO);
			filled[b] = true;
		} else {
			if ((uint64_t)res != len[b])
				die("io_uring send", res < 0 ? -res : EIO);
			sent += len[b];
			filled[b] = busy[b] = false;
			sending = -1;
			next_send = (next_send + 1) % FIO_NBUF;
		}
	}
	io_uring_queue_exit(&ring);
}

/* ---- setup ---- */

static int listen_accept(const char *addr)
{
	struct sockaddr_in sa = parse_addr(addr);
	int one = 1, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (l < 0)
		die("socket", errno);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0)
		die("bind/listen", errno);
	printf("listening\n");
	fflush(stdout);
	int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0)
		die("accept", errno);
	close(l);
	return s;
}

static int connect_to(const char *addr)
{
	struct sockaddr_in sa = parse_addr(addr);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect", errno);
	return s;
}

/* A new file beside f->file, fallocated to the size, already unlinked (gone at exit). */
static int recv_file_open(const struct fio *f)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s.fio-XXXXXX", f->file);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		die(path, errno);
	unlink(path);
	if (fallocate(fd, 0, 0, (off_t)f->size) < 0 && ftruncate(fd, (off_t)f->size) < 0)
		die("sizing the file", errno);
	return fd;
}

struct fio_mode {
	const char *name;
	bool recv, file;
	void (*run)(struct fio *f);
};

static const struct fio_mode modes[] = {
	{ "mem", true, false, recv_mem },
	{ "splice", true, true, recv_splice },
	{ "splice-nb", true, true, recv_splice_nb },
	{ "pwrite", true, true, recv_pwrite },
	{ "uring-write", true, true, recv_uring_write },
	{ "uring-splice", true, true, recv_uring_splice },
	{ "mem", false, false, send_mem },
	{ "sendfile", false, true, send_sendfile },
	{ "uring-send", false, true, send_uring },
};

static const struct fio_mode *mode_find(bool recv, const char *name)
{
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (modes[i].recv == recv && !strcmp(modes[i].name, name))
			return &modes[i];
	die("unknown --mode", EINVAL);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: xferbench_fileio recv --listen ADDR:PORT --mode "
		"mem|splice|splice-nb|pwrite|uring-write|uring-splice [--file PATH] --size BYTES\n"
		"       xferbench_fileio send --connect ADDR:PORT --mode "
		"mem|sendfile|uring-send [--file PATH] --size BYTES\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' },
		{ "mode", required_argument, NULL, 'm' },
		{ "file", required_argument, NULL, 'f' },
		{ "size", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	struct fio f = { .fd = -1 };
	int c;

	if (argc < 2 || (strcmp(argv[1], "recv") && strcmp(argv[1], "send")))
		usage();
	bool recv_side = !strcmp(argv[1], "recv");
	optind = 2;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'l' || c == 'c')
			f.addr = optarg;
		else if (c == 'm')
			f.mode = optarg;
		else if (c == 'f')
			f.file = optarg;
		else if (c == 's')
			f.size = strtoull(optarg, NULL, 0);
		else
			usage();
	}
	if (!f.addr || !f.mode || !f.size)
		usage();
	const struct fio_mode *m = mode_find(recv_side, f.mode);
	if (m->file && !f.file)
		die("this mode needs --file", EINVAL);
	if (posix_memalign((void **)&f.buf, 4096, (size_t)FIO_NBUF * FIO_CHUNK))
		die("posix_memalign", ENOMEM);
	memset(f.buf, 0x5a, (size_t)FIO_NBUF * FIO_CHUNK);
	if (recv_side) {
		f.sock = listen_accept(f.addr);
		if (m->file)
			f.fd = recv_file_open(&f);
		double t0 = now_s();
		m->run(&f);
		printf("%s %.6f\n", m->name, now_s() - t0);
	} else {
		if (m->file && (f.fd = open(f.file, O_RDONLY | O_CLOEXEC)) < 0)
			die(f.file, errno);
		f.sock = connect_to(f.addr);
		m->run(&f);
		shutdown(f.sock, SHUT_WR);
		char b;
		while (read(f.sock, &b, 1) > 0) { /* the receiver's close: all of it is in */
		}
	}
	if (f.fd >= 0)
		close(f.fd);
	close(f.sock);
	free(f.buf);
	return 0;
}
