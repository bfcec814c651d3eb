/* SPDX-License-Identifier: MIT */
/*
 * Test helpers around a real xferd: start one on a private socket in a temp dir and stop it,
 * count its fds, read its counters, talk raw protocol packets to it, and run helper functions
 * in forked children.
 */
#ifndef XFER_TEST_DAEMON_UTIL_H
#define XFER_TEST_DAEMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "xp_json.h"

/* One daemon started by td_start(). */
struct td {
	char dir[48];	/* mkdtemp'd; removed by td_stop() */
	char sock[100]; /* DIR/xferd.sock */
	char log[100];	/* DIR/xferd.log: the daemon's stderr */
	pid_t pid;	/* -1 once reaped */
	int hook;	/* harness cleanup hook */
};

/*
 * Starts xferd (dir of /proc/self/exe/../xferd, or $XFERD_BIN) on DIR/xferd.sock with
 * DIR/xferd.json if @config_json is not NULL, and waits up to 10 s until the socket accepts.
 * Returns 0 or -errno (the daemon is gone and the dir removed on failure).
 */
int td_start(struct td *d, const char *config_json);

/* A cluster key file shared by daemons that peer with each other. */
struct td_key {
	char path[64]; /* the "peer_key_file" of their configs */
	int hook;      /* harness cleanup hook: removes it if the test fails */
};

/* Writes a fresh random key (64 hex digits) to a file of mode 0600. Returns 0 or -errno. */
int td_key_make(struct td_key *k);

/* Removes the key file (a test that passes undoes its own work). */
void td_key_remove(struct td_key *k);

/* Sends @sig to the daemon. Returns 0 or -errno. */
int td_signal(struct td *d, int sig);

/*
 * Waits for the daemon to exit (SIGKILL after 10 s), removes the dir. Returns the exit status,
 * 128 + signal number when it was killed by a signal, or -errno. Prints its log on non-zero.
 */
int td_wait_exit(struct td *d);

/*
 * Whether the daemon is still running. If it is not, reaps it, prints its log and fails the
 * test naming its exit status (a crash, a sanitizer abort). Returns only when it runs.
 */
void td_check_alive(struct td *d, const char *when);

/* SIGTERM, then td_wait_exit(). Tests check that it returns 0. */
int td_stop(struct td *d);

/* Number of fds process @pid has open, or -errno. */
int td_fd_count(pid_t pid);

/* Field @field ("VmRSS", "RssShmem", ...) of /proc/PID/status in KiB, or -1 if it is not there. */
long long td_status_kib(pid_t pid, const char *field);

/*
 * Waits up to @ms for the daemon's fd count to equal @want. Returns the last count seen (equal
 * to @want unless it timed out).
 */
int td_wait_fd_count(struct td *d, int want, int ms);

/*
 * The daemon's fd count once it has settled with exactly @others client connections besides a
 * probe connection of its own (which is closed and not counted). Waits up to 10 s for the
 * connection count. Returns the fd count or -errno (-ETIMEDOUT if it never got there).
 */
int td_quiet_fd_count(struct td *d, int others);

/*
 * Reads integer @key of the daemon's `stats` result (via xfer_call); "a.b" names b inside object
 * a. Returns 0 or -errno.
 */
int td_stat(struct td *d, const char *key, long long *val);

/*
 * Waits up to @ms until stats @key equals @want (asking again while a connection limit refuses
 * the asking connection: EDQUOT). Returns 0, or -ETIMEDOUT (with *last set), or -errno.
 */
int td_wait_stat(struct td *d, const char *key, long long want, int ms, long long *last);

/* Dumps the daemon's log to stderr (for diagnosing a failure). */
void td_dump_log(struct td *d);

/* Whether a line of file @path (a daemon's log) contains @needle. */
bool td_file_has(const char *path, const char *needle);

/*
 * Forks a child that runs @fn(@arg) and exits 0 when it returns (a failed CHECK exits 1).
 * Returns the child's pid, or -errno.
 */
pid_t td_spawn(void (*fn)(void *), void *arg);

/* Waits up to @ms for child @pid. Returns its exit status, 128 + signal, or -ETIMEDOUT. */
int td_wait_child(pid_t pid, int ms);

/* SIGKILLs child @pid and reaps it. Returns 0 or -errno. */
int td_kill9(pid_t pid);

/* Milliseconds on the monotonic clock. */
long long td_now_ms(void);

/* ---- raw protocol: packets written by hand, no client library ---- */

/* Connects a SOCK_SEQPACKET socket (CLOEXEC, 10 s receive timeout) to @d. Returns fd or -errno. */
int td_raw_connect(struct td *d);

/*
 * Sends @text as one packet with @nfds fds (borrowed), then receives the next packet that is not
 * a notification and parses it into @rep (xp_reply_fini() it). Returns 0 or -errno
 * (-ECONNRESET when the daemon closed instead of answering).
 */
int td_raw_call(int sock, const char *text, const int *fds, int nfds, struct xp_reply *rep);

/* Receives one packet (skipping notifications) into @rep. Returns 0 or -errno. */
int td_raw_recv(int sock, struct xp_reply *rep);

/* Sends hello (version 1) and checks the reply succeeded. Returns 0 or -errno. */
int td_raw_hello(int sock);
/* Sends @msg (consumed) as one packet, as a daemon or client would: fake peers of the tests. */
void td_raw_send_json(int sock, json_t *msg);

/* Whether the daemon has closed @sock: the next receive (up to 10 s) says so. */
bool td_raw_closed(int sock);

/* The errno name of an error reply ("" when absent). */
const char *td_reply_errno(const struct xp_reply *rep);

/*
 * Makes a memfd of @size bytes (MFD_ALLOW_SEALING), sealed with F_SEAL_SHRINK|F_SEAL_GROW when
 * @seal. Returns the fd or -errno.
 */
int td_memfd(size_t size, bool seal);

/* Fills @buf with a xorshift stream from @seed. */
void td_fill(void *buf, size_t len, uint64_t seed);

#endif /* XFER_TEST_DAEMON_UTIL_H */
