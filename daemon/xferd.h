/* SPDX-License-Identifier: MIT */
/*
 * xferd's internal types and prototypes, grouped by the file that owns them.
 *
 * Ownership in one paragraph: the daemon owns connections, regions and operations, each in one
 * list. A connection owns the regions it registered and the operations it created (counted, not
 * listed). A region is reference-counted: one reference for its registration, one for every
 * operation that has not ended and uses it; the mapping goes when the last one does. An
 * operation that has a copy running cannot end until the copy reports back (the copy holds
 * raw pointers into the mappings), so ending is requested and applied when the copy returns.
 */
#ifndef XFERD_H
#define XFERD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <event2/event.h>
#include <jansson.h>

#include "xfer_proto.h"
#include "xp_peer.h"
#include "xp_fdmsg.h"
#include "xp_json.h"
#include "xp_meta.h"

/* glibc's sys/queue.h predates the BSD iterators that allow removing the current element. */
#ifndef TAILQ_FOREACH_SAFE
#define TAILQ_FOREACH_SAFE(var, head, field, tvar)                                     \
	for ((var) = TAILQ_FIRST(head); (var) && ((tvar) = TAILQ_NEXT(var, field), 1); \
	     (var) = (tvar))
#endif

#define XD_MAX_QUEUED 4096 /* packets queued to one client before it is dropped */
/* (and bytes of them: the queued_bytes limits, at every scope) */
/*
 * Window notifications (PROTOCOL.md §10.9): once a window owner's client has XD_NOTIFY_HIGH
 * packets queued, window.notified waits at the daemon (and a TCP opener's WACKs with it), till
 * the queue falls to XD_NOTIFY_LOW. A slow owner slows its openers; it is never cut for them.
 */
#define XD_NOTIFY_HIGH 1024
#define XD_NOTIFY_LOW 256
_Static_assert(XD_NOTIFY_LOW < XD_NOTIFY_HIGH && XD_NOTIFY_HIGH * 4 <= XD_MAX_QUEUED,
	       "notifications leave room under the client's bound for replies and events");
/*
 * events.subscribe: at most this many subscribed connections of users other than root (root's
 * are bounded by the clients limits only), and an event is dropped (and counted) rather than
 * queued to a subscriber that has this many packets queued already, so that a watcher that
 * stops reading costs at most ~64 small packets, and is never closed.
 */
#define XD_MAX_SUBSCRIBERS 16
#define XD_EVENTS_MAX_QUEUED 64
#define XD_SHUTDOWN_FLUSH_MS 2000 /* how long SIGTERM waits for copies and notifications */
#define XD_CAUSE_MAX 200
#define XD_MAX_LISTEN 8	     /* listen and advertise addresses */
#define XD_MAX_DEVICES 8     /* RDMA devices used */
#define XD_MAX_PEER_ALLOW 64 /* CIDRs in peer_allow */

/*
 * Sizes of the data path, in one place; PROTOCOL.md names these constants.
 * A transfer is cut into chunks, one per round-robin turn of its peer set, so that a small
 * transfer waits behind a large one for one chunk at most; RDMA posts a chunk as requests of
 * at most rdma_request_size (config); the local transport copies in slices, the granularity
 * at which a cancel lands.
 */
#define XD_TCP_CHUNK (1u << 20)	     /* bytes of one DATA frame */
#define XD_TCP_FILE_CHUNK (4u << 20) /* ...of one whose source has bytes in files (tcp.c) */
#define XD_RDMA_CHUNK (4u << 20)     /* one turn of a transfer on a queue pair */
#define XD_RDMA_MAX_PIECES 32	     /* work requests one RDMA chunk may take */
#define XD_RDMA_REQUEST_MIN 4096u    /* rdma_request_size bounds */
#define XD_RDMA_REQUEST_MAX XD_RDMA_CHUNK
#define XD_RDMA_REQUEST_DEFAULT (128u << 10)
/*
 * The peer connections' congestion control unless the config says otherwise (tcp_congestion).
 * Not the host's default: where that is BBR without the fq qdisc, the kernel paces each
 * connection with its own timers, and over a link of microseconds that never drops, this cost
 * the sending daemon CPU per byte and reordered segments into spurious retransmits (README's
 * configuration table, tcp_congestion; scripts/BENCHMARKS.md, "TCP congestion control").
 */
#define XD_TCP_CONGESTION_DEFAULT "cubic"
/*
 * How many bytes a peer connection may hold written but not yet sent (TCP_NOTSENT_LOWAT,
 * config tcp_notsent_lowat). Without a bound the kernel queues up to the whole send buffer
 * (megabytes), and ACKs handled in softirq on another CPU send from that queue while the loop
 * sends from its own CPU: over veth each CPU feeds its own backlog, segments arrive out of
 * order, and the sender takes them for lost. Window gets at 1 and 16 MiB ran at a third of
 * puts' rate from the retransmits (scripts/BENCHMARKS.md, "Unsent bytes"). A small queue
 * also keeps a frame written after a bulk one from waiting behind megabytes.
 */
#define XD_TCP_NOTSENT_LOWAT_DEFAULT (128 << 10)
#define XD_TCP_NOTSENT_LOWAT_MIN (16u << 10)
#define XD_TCP_NOTSENT_LOWAT_MAX (64u << 20)
/*
 * RDMA staging buffers for file regions (rdma_staging_buffers x rdma_staging_size per device,
 * registered on first use): a file's bytes go through them one chunk per buffer, several
 * chunks of a transfer in flight at once, at most XD_STAGE_DEPTH_MAX (and half the pool).
 */
#define XD_STAGE_BUFFERS_DEFAULT 16
#define XD_STAGE_BUFFERS_MAX 1024
/*
 * 4 MiB (64 MiB pinned per device with the 16 buffers): every chunk costs a copy worker's
 * wake-up, and where the owner stages a window bind, STAGE and STAGED; file reads in the VM
 * moved 0.83-0.89x of memory's rate with 1 MiB, 0.92-1.00x with 2 MiB, 0.96-1.18x with 4 MiB
 * (64 MiB reads, two rounds, one boot).
 */
#define XD_STAGE_SIZE_DEFAULT (4u << 20)
#define XD_STAGE_SIZE_MIN (64u << 10)
#define XD_STAGE_SIZE_MAX (64u << 20)
#define XD_STAGE_ALIGN 4096u /* buffers and chunk boundaries: what O_DIRECT asks */
#define XD_STAGE_DEPTH_MAX 8
/*
 * A staged source's first chunks ramp up from this size, doubling, to rdma_staging_size: the
 * first bytes go on the wire after a short fill instead of a whole buffer's (4 MiB took 12-24 ms
 * to fill in the VM, while the claimer of memory starts at once).
 */
#define XD_STAGE_FIRST (256u << 10)
#define XD_COPY_SLICE (256ull << 20) /* above glibc's non-temporal threshold here */
/* Registration: mapped ranges checked for residency (and populated if not) slice by slice;
 * ranges up to XD_REG_INLINE_MAX that are all resident are registered without a worker. */
#define XD_POPULATE_SLICE (16ull << 20)
#define XD_REG_INLINE_MAX (16ull << 20)
/*
 * A region mapping larger than this is unmapped on a worker when the region goes: munmap of a
 * populated 256 MiB mapping took 275-460 ms in the Soft-RoCE VM (~25 ms per GiB natively), and
 * the loop must not wait for it (DESIGN §7). Smaller ones stay on the loop: the register +
 * deregister fast path.
 */
#define XD_UNMAP_INLINE_MAX (16ull << 20)
_Static_assert(XD_TCP_CHUNK <= XP_PEER_MAX_DATA, "a DATA frame must fit the peer protocol");
_Static_assert(XD_TCP_FILE_CHUNK <= XP_PEER_MAX_DATA, "a DATA frame must fit the peer protocol");
_Static_assert(XD_RDMA_REQUEST_DEFAULT >= XD_RDMA_REQUEST_MIN &&
		       XD_RDMA_REQUEST_DEFAULT <= XD_RDMA_REQUEST_MAX,
	       "the default request size must be a valid one");
_Static_assert((uint64_t)XD_RDMA_MAX_PIECES *XD_RDMA_REQUEST_DEFAULT >= XD_RDMA_CHUNK,
	       "at the default request size a chunk must fit its pieces");

struct xd_conn;
struct xd_op;
struct xd_xfer;
struct xd_tcp;
struct xp_peer_hdr;
struct iovec;
struct ibv_mr;
struct xd_rdma;
struct xd_mem_ops;

/* event_free() of libevent 2.1 crashes on NULL; destroy functions here accept NULL. */
static inline void xd_event_free(struct event *ev)
{
	if (ev)
		event_free(ev);
}

/*
 * @src into @dst of @cap (> 0) bytes, cut to fit, as snprintf(dst, cap, "%s", src) but without
 * printf's machinery (for 4 KiB gets and puts, vfprintf() and its helpers were ~8% of the
 * opener daemon's samples; an op's transport, peer and cause were three of the five calls).
 */
static inline void xd_strcopy(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}
struct xd_copy_job;
struct xd_window;
struct xd_wopener;
struct xd_whandle;

/* log.c */
enum xd_log_level { XD_LOG_ERR, XD_LOG_WARN, XD_LOG_INFO, XD_LOG_DEBUG };
extern int xd_log_level;
/* The level named @name ("err", "warn", "info", "debug"), or -EINVAL. */
int xd_log_parse_level(const char *name);
/* Sets the level from a name ("err", "warn", "info", "debug"). Returns 0 or -EINVAL. */
int xd_log_set_level(const char *name);
/* @systemd: prefix lines with <N> (daemon(7)) instead of a timestamp. */
void xd_log_init(bool systemd);
/* Writes the counts of lines still suppressed (each function's; see log.c). At exit. */
void xd_log_fini(void);
/* Writes one line of @level from function @func, unless @func is over its rate (log.c):
 * at most 100 lines in 10 s per function but for debug lines. Use xd_log(). */
void xd_log_write(int level, const char *func, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Lines suppressed by the rate limit since start (any thread). */
uint64_t xd_log_suppressed(void);
/* Checks the level before formatting; preserves errno. */
#define xd_log(level, ...)                                            \
	do {                                                          \
		if ((level) <= xd_log_level)                          \
			xd_log_write((level), __func__, __VA_ARGS__); \
	} while (0)
/* Copies @in into @out (size @n) with non-printable bytes as \xNN, for client strings. */
void xd_escape(const char *in, char *out, size_t n);

/* config.c */
#define XD_TRANSPORT_AUTO "auto" /* cfg.transport: the best both daemons have */
#define XD_TRANSPORT_NAME_MAX 16

/* What the limits count, at three scopes (limits.c). */
enum xd_res {
	XD_RES_BYTES,	/**< registered bytes: the page-aligned mappings the daemon populates */
	XD_RES_REGIONS, /**< regions */
	XD_RES_OPS,	/**< operations not yet released */
	XD_RES_CLIENTS, /**< control connections (per uid and global) */
	XD_RES_WAITS,	/**< pending op.wait and op.cancel replies (per connection and global) */
	XD_RES_WINDOWS, /**< windows created and window handles opened */
	XD_RES_QUEUED,	/**< bytes of replies and events queued for a client that is not reading */
	XD_RES_FDS,	/**< fds the daemon keeps open for clients' file regions (one each) */
	XD_NRES,
};
#define XD_NO_LIMIT UINT64_MAX
struct xd_limits {
	uint64_t max[XD_NRES]; /**< XD_NO_LIMIT where a scope does not limit a resource */
};

/* netaddr.c: one peer_allow entry, ADDR/BITS */
struct xd_cidr {
	int family; /**< AF_INET or AF_INET6 */
	uint8_t addr[16];
	int bits;
};
struct sockaddr;
/* Parses "ADDR/BITS" (IPv4 or IPv6, BITS required). Returns 0 or -EINVAL. */
int xd_netaddr_parse_cidr(const char *s, struct xd_cidr *out);
/*
 * Whether the numeric address @addr lies in one of the @n CIDRs of @list (n == 0 allows all).
 * Returns 0 if it does, -EACCES if it does not, -EINVAL if @addr is not a numeric IPv4 or IPv6
 * address (names are not resolved: a name's answer could change between check and connect).
 */
int xd_netaddr_allowed(const struct xd_cidr *list, int n, const char *addr);
/* Writes @c as "ADDR/BITS" into @buf (64 bytes are enough). */
void xd_netaddr_format_cidr(const struct xd_cidr *c, char *buf, size_t len);
/* The same test for a peer's address as accept() or rdma_cm gives it; other families: false. */
bool xd_netaddr_sockaddr_allowed(const struct xd_cidr *list, int n, const struct sockaddr *sa);

/* rdma_post_thread: which devices get a thread that posts their RDMA WRITEs (rdma_post.c). */
enum xd_post_thread {
	XD_POST_THREAD_AUTO,   /**< devices made in software only (Soft-RoCE, siw) */
	XD_POST_THREAD_ALWAYS, /**< every device */
	XD_POST_THREAD_NEVER,  /**< none: the event loop posts everything */
};

struct xd_config {
	char *socket_path;
	unsigned socket_mode;
	char *log_level;
	char *node_id; /**< 32 hex digits, or NULL to derive one */
	uint64_t default_timeout_ms;
	struct xd_limits limits;	/**< per connection */
	struct xd_limits uid_limits;	/**< per uid, over all its connections */
	struct xd_limits global_limits; /**< the whole daemon */
	int copy_threads;		/**< local-transport worker threads */
	unsigned busy_poll_us;		/**< busypoll.c: poll this long after light turns, 0: off */
	char *listen[XD_MAX_LISTEN];	/**< "addr:port" to accept peer daemons on */
	int nlisten;
	char *advertise[XD_MAX_LISTEN]; /**< "addr:port" put into metadata */
	int nadvertise;
	int peer_connections;  /**< TCP connections per peer daemon */
	int tcp_notsent_lowat; /**< TCP_NOTSENT_LOWAT of peer connections, 0: the host's */
	char *peer_key_file;   /**< the cluster key (crypto.c), or NULL */
	bool insecure_peers;   /**< peers unauthenticated: allowed only when asked for */
	uint64_t keepalive_ms, keepalive_timeout_ms, connect_timeout_ms;
	uint64_t handshake_timeout_ms; /**< an accepted connection's time to say HELLO */
	int max_pending_peer_conns;    /**< accepted connections not yet through HELLO */
	int max_peer_sets;	       /**< peer sets (all transports) */
	/** dialled and accepted peers' addresses must lie in one; none listed: all allowed */
	struct xd_cidr peer_allow[XD_MAX_PEER_ALLOW];
	int npeer_allow;
	/** "auto" or a transport's name; main.c checks it against transport.c's table */
	char transport[XD_TRANSPORT_NAME_MAX];
	bool require_rdma;		    /**< a fallback from RDMA to TCP is an error */
	int rdma_ack_timeout;		    /**< QP local ACK timeout: 4.096 us * 2^N */
	uint32_t rdma_request_size;	    /**< largest RDMA READ/WRITE work request */
	uint32_t rdma_staging_buffers;	    /**< staging buffers per device (file regions) */
	uint32_t rdma_staging_size;	    /**< bytes of one staging buffer: one chunk */
	char *rdma_devices[XD_MAX_DEVICES]; /**< devices to use; none listed: all */
	int nrdma_devices;
	/** which devices get a thread that posts their RDMA WRITEs (rdma_post.c) */
	enum xd_post_thread rdma_post_thread;
	char *metrics_listen; /**< "ADDR:PORT" of the Prometheus endpoint, or NULL: none */
	/** the peer connections' congestion control (TCP_CONGESTION); "": the host's default */
	char tcp_congestion[16];
};
/* Sets cfg.transport to @name (checked later against the transports). Returns 0 or -EINVAL. */
int xd_config_set_transport(struct xd_config *cfg, const char *name);
/* The config name of @v ("auto", "always", "never"). */
const char *xd_config_post_thread_name(enum xd_post_thread v);
/* Adds "addr:port" to a list of @cfg (listen or advertise). Returns 0 or -errno. */
int xd_config_add_addr(char **list, int *n, const char *addr);
/* Fills defaults. */
void xd_config_defaults(struct xd_config *cfg);
/* Reads a JSON config file over the defaults. Returns 0 or -errno with a message in @err. */
int xd_config_load(struct xd_config *cfg, const char *path, char *err, size_t errlen);
void xd_config_fini(struct xd_config *cfg);
#define XD_CONFIG_MAX (1u << 20) /* bytes of a config file */
/* The configuration as a config file would say it (every key that has a value), or NULL. */
json_t *xd_config_to_json(const struct xd_config *cfg);
/*
 * SIGHUP: takes from @fresh (a whole new configuration) into @cur what can change at run time
 * (log_level, default_timeout_ms, the limits, peer_allow, metrics_listen) and names, comma
 * separated, the keys that changed in @changed and those that need a restart in @refused (not
 * applied). Returns 0 or -ENOMEM (nothing applied).
 */
int xd_config_reload(struct xd_config *cur, struct xd_config *fresh, char *changed,
		     size_t changed_len, char *refused, size_t refused_len);

/* limits.c: limits per connection, per uid and global, and what is charged against them */
struct xd_daemon;
/* One uid's charges (d->uid_usage): made on its first charge, freed when it holds nothing. */
struct xd_uid_usage {
	TAILQ_ENTRY(xd_uid_usage) link;
	uid_t uid;
	uint64_t use[XD_NRES];
};
/* The config key of @res ("bytes", "regions", "ops", "clients", "waits"). */
const char *xd_res_name(enum xd_res res);
/* Fills the three scopes' defaults, the bytes ones from MemTotal. */
void xd_limits_defaults(struct xd_config *cfg);
/*
 * Reads config object @obj (borrowed; NULL: absent) named @key over @lim: keys of the resources
 * in the bit mask @allowed (1 << XD_RES_*), positive integers. Returns 0 or -EINVAL with @err.
 */
int xd_limits_load(struct xd_limits *lim, const json_t *obj, unsigned allowed, const char *key,
		   char *err, size_t errlen);
/* Empty counters and uid table. */
void xd_usage_init(struct xd_daemon *d);
/* Frees the uid table (shutdown). */
void xd_usage_fini(struct xd_daemon *d);
/*
 * Charges @n of @res to a connection's counters @conn_use (NULL: not counted per connection),
 * to @uid and to the daemon, unless that would pass one of the three limits. Returns 0, or
 * -EDQUOT with a message naming the limit and its value in @msg, or -ENOMEM; on failure
 * nothing is charged.
 */
int xd_charge(struct xd_daemon *d, uint64_t *conn_use, uid_t uid, enum xd_res res, uint64_t n,
	      char *msg, size_t len);
/* Whether xd_charge() would succeed (it may still fail with -ENOMEM). Returns 0 or -EDQUOT. */
int xd_charge_check(const struct xd_daemon *d, const uint64_t *conn_use, uid_t uid, enum xd_res res,
		    uint64_t n, char *msg, size_t len);
/* Gives back @n of @res that xd_charge() took (@conn_use NULL: not per connection). */
void xd_uncharge(struct xd_daemon *d, uint64_t *conn_use, uid_t uid, enum xd_res res, uint64_t n);
/* What @uid holds now (zeros when nothing). */
void xd_uid_usage_get(const struct xd_daemon *d, uid_t uid, uint64_t use[XD_NRES]);
/*
 * {"uid", "global", "per_uid", "per_connection"}: {"bytes": {"used", "limit"}, ...} of each
 * scope for @uid and a connection's counters @conn_use (borrowed), or NULL.
 */
json_t *xd_limits_json(const struct xd_daemon *d, const uint64_t conn_use[XD_NRES], uid_t uid);

/* idmap.c: objects by id (regions, operations, windows, handles, transfers), the nodes in them */
struct xd_idnode {
	struct xd_idnode *next;
	uint64_t id;
};
#define XD_IDMAP_SMALL_BITS 4 /* chains held in the map itself: adding never allocates first */
struct xd_idmap {
	struct xd_idnode *small[1u << XD_IDMAP_SMALL_BITS];
	struct xd_idnode **heap; /**< the chains once grown past small (NULL: small) */
	unsigned bits;		 /**< log2 of the number of chains */
	size_t count;
	uint64_t key; /**< the hash's secret, random per map (idmap.c) */
};
/* The object of type @type whose member @member is @node (NULL: NULL). */
#define XD_IDMAP_OBJ(node, type, member) \
	((node) ? (type *)(void *)((char *)(node)-offsetof(type, member)) : (type *)NULL)
/* An empty map (no allocation), with a fresh random key. */
void xd_idmap_init(struct xd_idmap *m);
/* Files @node under @id (unique: not in the map). Cannot fail. */
void xd_idmap_add(struct xd_idmap *m, struct xd_idnode *node, uint64_t id);
/* Takes @node (added) out. */
void xd_idmap_del(struct xd_idmap *m, struct xd_idnode *node);
/* The node of @id, or NULL. */
struct xd_idnode *xd_idmap_get(struct xd_idmap *m, uint64_t id);
/* Frees what the map allocated; it is empty again (its nodes are the objects' to free). */
void xd_idmap_fini(struct xd_idmap *m);

/* defer.c: the one deferred-free mechanism */
struct xd_daemon;
/* A node embedded in an object that may be queued to be handled at the next loop turn. */
struct xd_deferred {
	TAILQ_ENTRY(xd_deferred) link;
	void (*fn)(void *arg);
	void *arg;
	bool queued;
};
/* Creates the event that runs queued work. Returns 0 or -ENOMEM. */
int xd_defer_init(struct xd_daemon *d);
/*
 * Runs @fn(@arg) at the next turn of the loop, outside every callback now on the stack. @df is
 * embedded in the object @fn frees; queuing it again while queued does nothing. Cannot fail.
 */
void xd_defer(struct xd_daemon *d, struct xd_deferred *df, void (*fn)(void *), void *arg);
/* Takes @df off the queue (the object goes another way). */
void xd_defer_cancel(struct xd_daemon *d, struct xd_deferred *df);
/* Runs everything queued now, including what the functions queue. */
void xd_defer_flush(struct xd_daemon *d);
/* Flushes, then frees the event (teardown). */
void xd_defer_fini(struct xd_daemon *d);

/* call.c: the record of one request being handled */
struct xd_call {
	struct xd_conn *conn;
	int64_t id;
	enum xp_method method;
	json_t *params;	      /**< borrowed */
	struct xp_fdset *fds; /**< borrowed; a handler takes what it keeps */
	json_t *result;	      /**< set by a handler that succeeds */
	bool deferred;	      /**< the handler will reply later (op.wait, op.cancel) */
	bool compact;	      /**< op.batch's compact entry: descriptors [region, offset, length] */
	bool no_reply;	      /**< op.batch "reply": false: a success is not answered */
	bool answered;	      /**< the handler sent its reply itself (or owes none) */
	int code;	      /**< a refusal's JSON-RPC error code */
	int cause_errno;      /**< a refusal's positive errno */
	char message[256];
};
/* Records a refusal (@cause_errno positive): returns -@cause_errno, for `return xd_fail(...)`. */
int xd_fail(struct xd_call *call, int code, int cause_errno, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* json_unpack_ex(JSON_STRICT) of the params, failing with XP_E_PARAMS and jansson's text. */
int xd_unpack_params(struct xd_call *call, const char *fmt, ...);

/*
 * One page of a listing (list.ops, list.regions, list.clients, list.peers): entries whose
 * cursor is greater than the request's "after", in cursor order, at most "limit" of them and
 * never more than fit one reply packet; "next" tells the client where the following page starts.
 */
#define XD_PAGE_LIMIT 100		  /* entries in a page when the request names no limit */
#define XD_PAGE_LIMIT_MAX 10000		  /* the bytes budget ends a page long before this */
#define XD_PAGE_BYTES (XP_MAX_MSG - 1024) /* entries' JSON; the rest is for the envelope */
struct xd_page {
	json_int_t after; /**< the request's cursor, -1 when absent */
	size_t limit;
	size_t bytes; /**< the entries' compact JSON so far */
	json_t *arr;
	bool more;     /**< an entry was left for the next page */
	uint64_t last; /**< the cursor of the last entry added */
};
struct xd_page_item {
	uint64_t id;
	const void *p;
};
/* Unpacks {"after", "limit"} and starts an empty page. Returns 0 or -errno (refused). */
int xd_page_begin(struct xd_call *call, struct xd_page *pg);
/*
 * Starts an empty page after cursor @after (-1: from the first) of at most @limit entries, both
 * unpacked by a caller whose method takes more params. Returns 0 or -errno (refused).
 */
int xd_page_start(struct xd_call *call, struct xd_page *pg, json_int_t after, json_int_t limit);
/*
 * Sorts @items by id (lists are not always in id order: an op's id can be taken before it is
 * listed) and adds entry(item, @arg) for each until the page is full. Returns 0 or -ENOMEM.
 */
int xd_page_fill(struct xd_page *pg, struct xd_page_item *items, size_t n,
		 json_t *(*entry)(const void *p, void *arg), void *arg);
/*
 * Adds @entry (consumed; NULL means out of memory) with cursor @id. Returns 1 when added, 0
 * when the page is full (the caller stops), -ENOMEM.
 */
int xd_page_add(struct xd_page *pg, uint64_t id, json_t *entry);
/* Sets call->result to {@key: [...], "next"?} when @rc >= 0. Returns 0 or -errno (refused). */
int xd_page_finish(struct xd_call *call, struct xd_page *pg, const char *key, int rc);

/* crypto.c: the cluster key, nonces and HMAC-SHA256 (libcrypto) */
#define XD_KEY_MIN 32	    /* bytes of a cluster key, at least */
#define XD_KEY_MAX 64	    /* bytes read from the key file, at most */
#define XD_RANDOM_POOL 4096 /* bytes of random taken from the kernel at a time */
#define XD_NONCE_LEN 16	    /* bytes of a handshake nonce */
#define XD_MAC_LEN 32	    /* HMAC-SHA256 */
/* One input of a MAC. */
struct xd_mac_part {
	const void *data;
	size_t len;
};
#define XD_KEYS_MAX 4 /* keys in the key file: the first proves, every one is accepted */
/* One cluster key. */
struct xd_key {
	uint8_t bytes[XD_KEY_MAX];
	size_t len;
	uint32_t id; /**< the first 4 bytes of its SHA-256: names it in logs and listings */
	void *mac;   /**< xd_hmac_keyed_new() of it (NULL: keyed per call) */
};
/*
 * The cluster keys of the key file, in its order: this daemon proves itself and its claims with
 * keys[0] and accepts a peer's proof under any of them, so that a new key can be rolled out to
 * the nodes one at a time (README, "Rolling the cluster key").
 */
struct xd_keyring {
	struct xd_key keys[XD_KEYS_MAX];
	int n; /**< 0: no key (peers are not authenticated) */
};
/*
 * Loads the cluster keys from @path: one to XD_KEYS_MAX lines of at least XD_KEY_MIN bytes as
 * hex each (blank lines skipped), the file readable by its owner only. Returns 0 and the keys in
 * @kr (xd_keyring_clear() frees them), or -errno with @err and @kr empty.
 */
int xd_keyring_load(const char *path, struct xd_keyring *kr, char *err, size_t errlen);
/* Frees and wipes @kr's keys; @kr is then empty. */
void xd_keyring_clear(struct xd_keyring *kr);
/* The key of @kr named @id, or NULL. */
const struct xd_key *xd_keyring_find(const struct xd_keyring *kr, uint32_t id);
/* The key ids @ids as a JSON array of 8 hex digits each (new reference), or NULL. */
json_t *xd_key_ids_json(const uint32_t *ids, int n);
/* Fills @buf with @len random bytes. Returns 0 or -EIO. */
int xd_random(void *buf, size_t len);
struct xd_daemon;
/*
 * Fills @buf with @len (<= XD_RANDOM_POOL) random bytes from the daemon's pool, refilled from
 * getrandom() XD_RANDOM_POOL bytes at a time (a passive operation's token was one system call
 * per operation); the bytes given out are wiped from the pool. Returns 0 or -EIO.
 */
int xd_random_pooled(struct xd_daemon *d, void *buf, size_t len);
/* HMAC-SHA256 of the @nparts parts, in order, under @key. Returns 0 or -EIO. */
int xd_hmac(const uint8_t *key, size_t keylen, const struct xd_mac_part *parts, int nparts,
	    uint8_t out[XD_MAC_LEN]);
/*
 * An HMAC-SHA256 state keyed with @key once, for xd_claim_proof() (one per claim on each side:
 * fetching the algorithm and keying it per call was ~3 us of a claim). NULL if OpenSSL fails
 * (the claims then key per call). xd_hmac_keyed_free() accepts NULL.
 */
void *xd_hmac_keyed_new(const uint8_t *key, size_t keylen);
void xd_hmac_keyed_free(void *keyed);
/* Constant-time comparison of two MACs. */
bool xd_mac_equal(const uint8_t a[XD_MAC_LEN], const uint8_t b[XD_MAC_LEN]);
struct xd_daemon;
/*
 * The proof of a claim's token that travels instead of the token (keyed daemons): a MAC under
 * the cluster key of the owner's and the claimer's node and epoch, the op, the transfer and the
 * token. Returns 0 or -EIO.
 */
int xd_claim_proof(const struct xd_daemon *d, const uint8_t owner[XP_ID_BYTES],
		   uint64_t owner_epoch, const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch,
		   uint64_t op, uint64_t xfer, const uint8_t token[XP_ID_BYTES],
		   uint8_t out[XD_MAC_LEN]);
/*
 * Whether a claimer holds @token (the capability this daemon, the owner, gave out): it sent a
 * @proof of it (keyed peers; see xd_claim_proof() for @claimer .. @xfer), or else @sent, the
 * token itself (this daemon, unkeyed peers). Constant-time either way.
 */
bool xd_token_held(const struct xd_daemon *d, const uint8_t *proof, const uint8_t *sent,
		   const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch, uint64_t op,
		   uint64_t xfer, const uint8_t token[XP_ID_BYTES]);

/* clock.c */
/* Monotonic microseconds. */
uint64_t xd_now_us(void);

/*
 * The counters metrics.c exports (Prometheus), kept by the files that see the events. Labels
 * are bounded: a transport is its index in d->transports plus one (0: none, the op never
 * started), at most XD_METRIC_TRANSPORTS - 1 of them; kinds and end states are the protocol's.
 */
#define XD_METRIC_TRANSPORTS 8
#define XD_HIST_BUCKETS 14
#define XD_RECENT_FAILED 64 /* peer nodes whose set failed, remembered to count reconnects */
/* Upper bounds of the histogram buckets in microseconds (the last bucket, +Inf, is implied). */
static const uint64_t xd_hist_bounds_us[XD_HIST_BUCKETS] = {
	100,   250,   500,    1000,   2500,    5000,	 10000,
	25000, 50000, 100000, 250000, 1000000, 10000000, 60000000,
};
struct xd_hist {
	uint64_t count, sum_us;
	uint64_t bucket[XD_HIST_BUCKETS]; /**< observations <= the bound (not cumulative) */
};
static inline void xd_hist_observe(struct xd_hist *h, uint64_t us)
{
	int i = 0;

	while (i < XD_HIST_BUCKETS && us > xd_hist_bounds_us[i])
		i++;
	if (i < XD_HIST_BUCKETS)
		h->bucket[i]++;
	h->count++;
	h->sum_us += us;
}
enum xd_end { XD_END_COMPLETE, XD_END_CANCELLED, XD_END_ERRORED, XD_NEND };
struct xd_counters {
	uint64_t ops_ended[XP_KIND_COUNT][XD_METRIC_TRANSPORTS][XD_NEND];
	uint64_t bytes_moved[XD_METRIC_TRANSPORTS]; /**< sums to stats.bytes_moved */
	struct xd_hist op_duration[XP_KIND_COUNT];  /**< creation to end */
	/** op.read/op.write to the owner's answer, cross-node claims */
	struct xd_hist claim_latency[XD_METRIC_TRANSPORTS];
	uint64_t peer_sets_opened[XD_METRIC_TRANSPORTS], peer_sets_failed[XD_METRIC_TRANSPORTS];
	uint64_t peer_reconnects[XD_METRIC_TRANSPORTS]; /**< a set to a node whose set failed */
	uint8_t recent_failed[XD_RECENT_FAILED][XP_ID_BYTES]; /**< a ring, for reconnects */
	unsigned nrecent_failed;
};

/*
 * looplag.c: how late the event loop runs (DESIGN §7: nothing may block it). A tick due every
 * XD_LOOP_TICK_MS measures its own lateness; instrumented callbacks note their length, and the
 * longest since the last tick is named when a late tick is logged.
 */
#define XD_LOOP_TICK_MS 100
#define XD_LOOP_WARN_MS 250 /* a tick this late is logged (at most once per 10 s, counted) */
struct xd_looplag {
	struct event *tick;
	uint64_t due_us;
	struct xd_hist lag;	  /**< each tick's lateness */
	uint64_t max_us;	  /**< the largest lateness seen */
	uint64_t late;		  /**< ticks at least XD_LOOP_WARN_MS late */
	uint64_t cb_us;		  /**< the longest noted callback since the last tick */
	const char *cb_what;	  /**< what it was (a string literal), NULL: none noted */
	char cb_who[80];	  /**< on what (a peer's address, a client), may be "" */
	int schedstat_fd;	  /**< /proc/thread-self/schedstat of the loop thread, or -1 */
	uint64_t run_ns, wait_ns; /**< its on-CPU and run-queue times at the last tick */
	uint64_t warned_us;	  /**< when a late tick was last logged */
	unsigned unwarned;	  /**< late ticks not logged since */
};

/* busypoll.c: the event loop polls a while after light turns before it sleeps */
#define XD_BUSY_POLL_DEFAULT_US 100
#define XD_BUSY_POLL_MAX_CFG_US 1000 /* the largest busy_poll_us a config may ask for */
#define XD_BUSY_POLL_MAX_US 2000     /* one poll, from its start, at most */
#define XD_BUSY_POLL_HEAVY_NS 50000  /* a turn this long on the CPU is not followed by a poll */
#define XD_BUSY_POLL_IDLE_NS 5000    /* a polling pass shorter than this found nothing to do */
#define XD_BUSY_POLL_SPARSE_US 2000  /* a turn after a sleep this long is not followed by a poll */
#define XD_BUSY_POLL_BULK (256u << 10)	 /* a frame or copy this large is bulk data... */
#define XD_BUSY_POLL_BULK_QUIET_US 10000 /* ...and no poll begins this long after one */
struct xd_busypoll {
	uint64_t bulk_us;      /**< when a transport last noted bulk data */
	uint64_t polls;	       /**< polls begun */
	uint64_t caught;       /**< polling passes that found work */
	uint64_t skipped_bulk; /**< light turns not followed by a poll: bulk data moving */
	uint64_t polled_us;    /**< time spent polling, in all */
};

struct xd_conn;
struct xp_fdset;
/* What the control socket does with one client packet (dispatch.c's xd_dispatch_packet). */
typedef void (*xd_packet_cb)(struct xd_conn *c, const char *buf, size_t len, struct xp_fdset *fds);

struct xd_file_probe; /* region.c */

/* The daemon: one event loop and everything it owns. */
struct xd_daemon {
	struct event_base *base;
	struct xd_config cfg;
	uint8_t node[XP_ID_BYTES];
	char node_hex[2 * XP_ID_BYTES + 1];
	uint64_t epoch;			     /**< start time in us: changes on every restart */
	struct xd_keyring keys;		     /**< the cluster keys; none: peers not authenticated */
	uint8_t random_pool[XD_RANDOM_POOL]; /**< xd_random_pooled(): its unused bytes at the end */
	size_t random_left;		     /**< how many of the pool's last bytes are unused */
	uint64_t start_us;		     /**< monotonic start */
	int listen_fd;
	bool listen_from_systemd;
	bool systemd;
	struct event *watchdog_ev; /**< sd.c: WATCHDOG=1 to systemd (NULL: no WatchdogSec=) */
	struct event *listen_ev, *shutdown_ev;
	TAILQ_HEAD(, xd_deferred) deferred; /**< defer.c: work for the next loop turn */
	struct event *defer_ev;
	struct event *sig_ev[3];
	TAILQ_HEAD(, xd_conn) conns;
	TAILQ_HEAD(, xd_region) regions;
	/** region.c: file registrations whose checks wait for their file system, on threads */
	TAILQ_HEAD(, xd_file_probe) file_probes;
	TAILQ_HEAD(, xd_op) ops;
	struct xd_idmap region_ids, op_ids; /**< idmap.c: d->regions and d->ops by id */
	uint64_t next_client, next_region, next_op, next_batch;
	struct xd_copier *copier;
	/*
	 * local.c, while its workers run (else NULL): munmap of [@addr, +@len) on a worker, for
	 * mem.c, which local.c itself uses. Returns 0, or -errno with nothing queued.
	 */
	int (*unmap_later)(struct xd_daemon *d, void *addr, size_t len);
	struct xd_tcp *tcp; /**< tcp.c: listeners, connections not yet through HELLO */
	struct xp_endpoint endpoints[XP_MAX_ENDPOINTS]; /**< advertised in metadata */
	int nendpoints;
	struct xp_endpoint listen_eps[XD_MAX_LISTEN]; /**< bound listen addresses, real ports */
	int nlisten_eps;
	struct xd_rdma *rdma;		     /**< rdma.c: devices and listeners */
	const struct xd_client_ops *clients; /**< ctl.c's, for the layers below it */
	unsigned event_subscribers;	     /**< connections with ->subscribed */
	/** the transports this daemon uses, NULL-terminated: transport.c's table unless a test
	 *  puts its own (xd_daemon_clear() sets it); everything finds transports here */
	const struct xd_transport_ops *const *transports;
	const struct xd_link_events *link_events; /**< peer.c's, for the transports */
	const struct xd_xfer_events *xfer_events; /**< claim.c's, for transports and peer.c */
	const struct xd_remote_ops *remote;	  /**< claim.c's, for op.c */
	xd_packet_cb ctl_dispatch;		  /**< where ctl.c hands each packet */
	char ctl_rxbuf[XP_MAX_MSG]; /**< ctl.c: the packet being handled (one at a time) */
	TAILQ_HEAD(, xd_peer) peers;
	TAILQ_HEAD(, xd_window) windows;	/**< window.c: windows this daemon's clients own */
	TAILQ_HEAD(, xd_whandle) whandles;	/**< window.c: windows its clients opened */
	struct xd_idmap window_ids, handle_ids; /**< window.c: the two lists by id */
	uint64_t next_window;			/**< ids of windows and handles, one space */
	bool stopping;
	unsigned shutdown_ticks; /**< main.c: 10 ms turns spent draining after SIGTERM */
	struct {
		uint64_t ops_completed, ops_failed, ops_cancelled, bytes_moved;
		uint64_t window_ops, window_notified;
	} stats;
	struct xd_counters counters;	       /**< for metrics.c, kept where the events happen */
	struct xd_looplag loop;		       /**< looplag.c: the event loop's lateness */
	struct xd_busypoll busypoll;	       /**< busypoll.c: the loop's polls */
	struct xd_metrics *metrics;	       /**< metrics.c: the HTTP listener, NULL when off */
	const char *config_path;	       /**< main.c: --config, read again on SIGHUP */
	const struct xd_main_options *options; /**< main.c's command line, for reloads */
	uint64_t usage[XD_NRES];	       /**< limits.c: charged in all */
	TAILQ_HEAD(, xd_uid_usage) uid_usage;  /**< limits.c: per uid, those holding something */
};

/* main.c */
/* Empty lists, no listening socket, the start time: the state every daemon begins from. */
void xd_daemon_clear(struct xd_daemon *d);

/* looplag.c */
/* Starts the tick that measures the loop's lateness. Returns 0 or -ENOMEM. */
int xd_looplag_start(struct xd_daemon *d);
void xd_looplag_stop(struct xd_daemon *d);
/*
 * A callback that began at @start_us (xd_now_us()) ends: if it is the longest since the last
 * tick, it is the one a late tick names, as @what (a string literal) on @who (may be NULL).
 */
void xd_loop_note(struct xd_daemon *d, uint64_t start_us, const char *what, const char *who);

/* busypoll.c */
/* Runs the event loop until it is told to stop; busy-polls as busypoll.c says. */
void xd_loop_run(struct xd_daemon *d);
/* A transport moves @bytes in one frame or copy: at XD_BUSY_POLL_BULK or more, polls pause. */
void xd_busypoll_note_bulk(struct xd_daemon *d, uint64_t bytes);
/* The busy_poll object of `stats`: a new reference, or NULL without memory. */
json_t *xd_busypoll_json(const struct xd_daemon *d);

/* sd.c */
/* Returns the listening fd systemd passed (>= 0), -ENOENT if none, or -errno. */
int xd_sd_listen_fd(void);
void xd_sd_notify(struct xd_daemon *d, const char *state);
/* Under systemd with WatchdogSec= (WATCHDOG_USEC), sends WATCHDOG=1 from the event loop at half
 * that interval, so that a loop that stops turning gets the daemon restarted. Returns 0 (also
 * when there is no watchdog) or -errno. */
int xd_sd_watchdog_start(struct xd_daemon *d);
/* Stops the pings (NULL-safe on a daemon without them). */
void xd_sd_watchdog_stop(struct xd_daemon *d);

/* ctl.c: the control socket and client connections */
struct xd_outq_item;
struct xd_conn {
	TAILQ_ENTRY(xd_conn) link;
	struct xd_daemon *d;
	uint64_t id;
	int fd;
	struct event *rev, *wev;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char name[XP_MAX_NAME + 1];
	bool hello;
	bool closing;
	const char *close_reason; /**< set: close at the next turn of the loop */
	char close_text[200];	  /**< close_reason's text when it was formatted */
	int close_level;	  /**< close_reason's XD_LOG_* level (WARN: the daemon cut it) */
	struct xd_deferred free_later; /**< freed at the next loop turn once closed */
	STAILQ_HEAD(, xd_outq_item) outq;
	unsigned queued;       /**< packets in outq (their bytes: use[XD_RES_QUEUED]) */
	uint64_t use[XD_NRES]; /**< charged to this connection (limits.c) */
	bool charged;	       /**< its XD_RES_CLIENTS charge is held */
	uint64_t created_us;
	TAILQ_HEAD(, xd_waiter) waiters;
	bool subscribed;	 /**< events.subscribe: gets others' op.changed too */
	uint64_t events_dropped; /**< of those, not sent: it was XD_EVENTS_MAX_QUEUED behind */
	unsigned queued_max;	 /**< the most packets ever queued to it (list.clients) */
	bool notes_waiting;	 /**< window notifications wait for its queue to drain */
};
/*
 * How the layers below control reach a client: xd_ctl_start() fills d->clients. A notification
 * or a deferred reply (op.wait, a remote claim's answer, a registration whose pages were faulted
 * in) goes up through this table, never by a call into ctl.c (daemon/LAYERS).
 */
struct xd_client_ops {
	/* Queues @msg (borrowed) to @c; on overflow the connection is closed. */
	void (*send)(struct xd_conn *c, const json_t *msg);
	/* Queues the @len bytes of JSON text at @text (borrowed) to @c, as send() does. */
	void (*send_text)(struct xd_conn *c, const char *text, size_t len);
	/* Replies to request @id with @result (consumed). */
	void (*reply)(struct xd_conn *c, int64_t id, json_t *result);
	/* Replies to request @id with an error; @err is a positive errno. */
	void (*reply_error)(struct xd_conn *c, int64_t id, int code, int err, const char *message);
	/* The open connection with id @id, or NULL. */
	struct xd_conn *(*find)(struct xd_daemon *d, uint64_t id);
	/*
	 * Offers @msg (borrowed), an op.changed of an operation of @owner, to the connections
	 * subscribed to events (events.subscribe) that may see it, @owner excepted.
	 */
	void (*publish)(struct xd_daemon *d, const struct xd_conn *owner, const json_t *msg);
	/*
	 * Whether window notifications to @c must wait: it has XD_NOTIFY_HIGH packets queued.
	 * When it says so, ctl.c calls xd_windows_conn_drained(@c) once the queue falls to
	 * XD_NOTIFY_LOW.
	 */
	bool (*notes_wait)(struct xd_conn *c);
};
static inline void xd_client_send(struct xd_conn *c, const json_t *msg)
{
	c->d->clients->send(c, msg);
}
static inline void xd_client_send_text(struct xd_conn *c, const char *text, size_t len)
{
	c->d->clients->send_text(c, text, len);
}
static inline void xd_client_reply(struct xd_conn *c, int64_t id, json_t *result)
{
	c->d->clients->reply(c, id, result);
}
static inline void xd_client_reply_error(struct xd_conn *c, int64_t id, int code, int err,
					 const char *message)
{
	c->d->clients->reply_error(c, id, code, err, message);
}
static inline struct xd_conn *xd_client_find(struct xd_daemon *d, uint64_t id)
{
	return d->clients->find(d, id);
}
/*
 * Binds (or takes from systemd) the control socket and starts accepting; every packet a client
 * sends goes to @dispatch, which consumes its fds. Returns 0 or -errno.
 */
int xd_ctl_start(struct xd_daemon *d, xd_packet_cb dispatch);
/* Stops accepting; existing connections go on. */
void xd_ctl_stop_listening(struct xd_daemon *d);
/* Queues @msg (borrowed) to @c. Returns 0 or -errno; on overflow the connection is closed. */
int xd_conn_send(struct xd_conn *c, const json_t *msg);
/* Queues @len bytes of JSON text at @text (borrowed) to @c, as xd_conn_send(). */
int xd_conn_send_text(struct xd_conn *c, const char *text, size_t len);
/*
 * Sends what is queued for @c now rather than at the end of the loop turn: for a reply the
 * client should not wait for while the handler works on (region.deregister's unmap).
 */
void xd_conn_flush(struct xd_conn *c);
/* Sends a reply to @id on @c: the result @result (consumed). */
void xd_reply_result(struct xd_conn *c, int64_t id, json_t *result);
/* Sends an error reply. @cause_errno is a positive errno. */
void xd_reply_error(struct xd_conn *c, int64_t id, int code, int cause_errno, const char *message);
/* The open connection with id @id, or NULL (closed, or never). */
struct xd_conn *xd_conn_find(struct xd_daemon *d, uint64_t id);
/* Ends @c: its operations end, its regions are released, it is freed at a safe point. */
void xd_conn_close(struct xd_conn *c, const char *why);
/* Frees every connection (shutdown). */
void xd_ctl_fini(struct xd_daemon *d);
/* Whether any connection still has packets queued. */
bool xd_ctl_pending_output(struct xd_daemon *d);
/* Root may see and touch everything; others only their own connection's. */
static inline bool xd_conn_may_access(const struct xd_conn *c, const struct xd_conn *owner)
{
	return c->uid == 0 || c == owner;
}

/* dispatch.c: one request from packet to handler */
/* Handles one received packet of @c (consumes @fds). */
void xd_dispatch_packet(struct xd_conn *c, const char *buf, size_t len, struct xp_fdset *fds);

/* region.c */
struct xd_region {
	TAILQ_ENTRY(xd_region) link; /**< in d->regions while registered */
	struct xd_idnode by_id;	     /**< in d->region_ids while in d->regions */
	struct xd_daemon *d;
	uint64_t id;
	struct xd_conn *owner; /**< NULL once deregistered */
	char name[XP_MAX_NAME + 1];
	const struct xd_mem_ops *mem; /**< its memory kind (mem.c): how its bytes are reached */
	void *map; /**< memfd kind: page-aligned MAP_SHARED mapping (file kind: NULL) */
	size_t map_len;
	uint8_t *base;	    /**< memfd kind: first byte of the registered range (file kind: NULL) */
	int fd;		    /**< file kind: the client's file, never mapped (memfd kind: -1) */
	uint64_t file_off;  /**< file kind: where the registered range starts in the file */
	bool may_read;	    /**< bytes may come from it (readable, write source) */
	bool may_write;	    /**< bytes may go into it (read target, writable) */
	bool sync;	    /**< file kind: fdatasync before a transfer into it completes */
	uint32_t dio_align; /**< file opened O_DIRECT: its offset alignment (0: buffered) */
	uint32_t dio_mem_align; /**< and the alignment its buffers need (mem.c bounces) */
	/**
	 * file kind: its file system is a local disk's or memory's (fstatfs at registration), so
	 * a call on the fd ends; on any other (FUSE, NFS, SMB, ...) it may never return, and
	 * nothing of it runs on the loop thread (the file lane, copy workers, a closing thread).
	 */
	bool fs_local;
	uint64_t length;
	uint64_t charge;   /**< bytes charged (the populated mapping), to @uid and the daemon too */
	bool charged;	   /**< its uid and global charges are held (a file's bytes are 0) */
	bool fd_charged;   /**< a file's: its fd is charged too (XD_RES_FDS) */
	int refs;	   /**< registration + operations that have not ended */
	unsigned live_ops; /**< operations that have not ended using it */
	uint64_t register_us;	   /**< time taken to validate, map and register */
	uint64_t rdma_register_us; /**< of which ibv_reg_mr on every device */
	bool mr_on_worker; /**< registered with the devices on a worker (large), not on the loop */
	struct ibv_mr *mrs[XD_MAX_DEVICES]; /**< one registration per RDMA device in use */
	int nmrs;
	pid_t pid;
	uid_t uid;
};
/* What region.register asks for: a name and a range of the memfd (or file). */
struct xd_region_args {
	const char *name;
	uint64_t offset, length;
	bool has_length; /**< false: to the end of the memfd */
	bool file;	 /**< "kind": "file": a regular file, moved by file I/O */
	bool sync;	 /**< file kind: fdatasync before a transfer into it completes */
};
/*
 * Validates @fd against the memfd rules (or, @a->file, the file rules, on a thread) and @a's
 * range against it and the limits, maps it, and has a worker fault the pages in; @call's reply
 * is sent once they are (deferred). Takes @fd whatever happens: a file region keeps it, else it
 * is closed, never by a close(2) on the loop that could wait in a file system (a FUSE FLUSH).
 * Returns 0 or fails @call.
 */
int xd_region_register(struct xd_call *call, int fd, struct xd_region_args *a);
/* Looks up region @id for @call's client; fails the call (ENOENT/EPERM) when it may not. */
struct xd_region *xd_region_lookup(struct xd_call *call, uint64_t id);
/* Deregisters @r: gone from listings, mapping freed once no operation holds it. */
void xd_region_release(struct xd_region *r);
/* At shutdown, once the connections are gone: gives up on file checks still waiting. */
void xd_region_probes_fini(struct xd_daemon *d);
/* {"region", "name", "client", ...} of @r, or NULL. */
json_t *xd_region_to_json(const struct xd_region *r);

/* method_region.c: the region.* and list.regions methods */
int xd_handle_region_register(struct xd_call *call);
int xd_handle_region_deregister(struct xd_call *call);
int xd_handle_list_regions(struct xd_call *call);

/* op.c: operations and their state machine */
struct xd_seg {
	struct xd_region *region;
	uint64_t offset, length;
};

struct xd_waiter {
	TAILQ_ENTRY(xd_waiter) op_link;	  /**< in op->waiters */
	TAILQ_ENTRY(xd_waiter) conn_link; /**< in conn->waiters */
	struct xd_conn *conn;
	struct xd_op *op;
	int64_t id;
	struct event *timer; /**< NULL: no timeout */
	uint64_t timeout_ms;
};

/*
 * An operation's lifecycle as this daemon holds it; what clients see is op->state (the wire
 * state). op.c's op_enter() is the one place it changes:
 *
 *   NEW --start--> OPEN --end--> ENDED
 *    |              `--end while a copy or a one-sided claimer holds the buffer--> ENDING
 *    |                                         ENDING --copy/claimer let go--> ENDED
 *    |                                         ENDING --owner released it--> ENDING_RELEASED
 *    |                                         ENDING_RELEASED --let go--> (freed)
 *    `--start (remote claim)--> CLAIMING --owner's answer--> OPEN
 *                                    `--refused, or ended before the answer--> ENDED
 */
enum xd_op_life {
	XD_OP_NEW,	/**< made, not listed: no id given out, no region held */
	XD_OP_CLAIMING, /**< listed, regions held; op.read/op.write awaits the owner's answer */
	XD_OP_OPEN,	/**< listed, regions held, deadline running (INITIALIZED, IN_PROGRESS) */
	XD_OP_ENDING,	/**< end requested while a copy or claimer held the buffer: applied later */
	XD_OP_ENDING_RELEASED, /**< the same, and its owner let go of it: freed once ended */
	XD_OP_ENDED,	       /**< terminal state told; regions let go */
};

struct xd_op {
	TAILQ_ENTRY(xd_op) link; /**< in d->ops until released */
	struct xd_idnode by_id;	 /**< in d->op_ids while in d->ops */
	struct xd_daemon *d;
	uint64_t id;
	enum xp_kind kind;
	enum xp_state state;
	struct xd_conn *owner; /**< NULL once its connection closed */
	uint64_t client_id;
	struct xd_seg *segs;
	uint32_t nsegs;
	uint64_t length, bytes;
	uint8_t token[XP_ID_BYTES];
	struct xd_op *pair; /**< the other side, local transport */
	char transport[8], peer[2 * XP_ID_BYTES + 1];
	uint64_t created_us, timeout_ms;
	struct event *deadline;
	struct xd_copy_job *job; /**< running copy; the op cannot end until it returns */
	struct xd_xfer *xfer;	 /**< cross-node transfer (claim.c), while it runs */
	enum xd_op_life life;
	enum xp_state end_state; /**< ENDING: the state it will end in */
	int cause_errno;	 /**< positive errno once CANCELLED or ERRORED (or ENDING) */
	char cause[XD_CAUSE_MAX];
	bool release_on_end; /**< the client's option: forgotten once its end was pushed */
	bool end_only;	     /**< the client's option: its owner is pushed the end alone */
	bool charged;	     /**< counted against its owner's XD_RES_OPS limits */
	int64_t reply_id;    /**< CLAIMING: the op.read/op.write to answer */
	bool claim_nowait;   /**< op.read/op.write "nowait": answered at once, outcome pushed */
	/*
	 * Windows (window.c). An owner's side of an op.get/op.put is an internal op: no client
	 * owns it or hears of it, window.c is told of its end through @on_end and it is freed
	 * right after. An opener's op.get/op.put carries @wreq: where in the window it goes.
	 */
	bool internal;
	void (*on_end)(struct xd_op *op); /**< internal: called once, when it ended */
	void *on_end_arg;
	/*
	 * A local opener's op.get/op.put whose copy is done but whose notification waits for the
	 * owner's client (PROTOCOL.md §10.9): window.c keeps the op in *@held_slot and ends it
	 * through xd_op_drained() once the notification went; an earlier end (deadline, cancel,
	 * its client gone) clears *@held_slot first. NULL: not held.
	 */
	struct xd_op **held_slot;
	struct xd_wreq *wreq;	/**< opener's get/put over the network: owned, freed with the op */
	struct xd_batch *batch; /**< op.batch with one event: its end goes there, not op.changed */
	struct xd_deferred forget_later; /**< an op whose id was never given, or released */
	TAILQ_HEAD(, xd_waiter) waiters;
};

/*
 * What op.c asks of an operation's cross-node transfer (claim.c fills d->remote): op.c sits
 * below claim.c, which drives it.
 */
struct xd_remote_ops {
	/*
	 * @op (an owner's, claimed one-sidedly) is ending: tells the claimer, which may still be
	 * reading or writing with its keys, and keeps the transfer until it lets go
	 * (xd_op_drained() follows). Returns false when @op's transfer holds no such keys.
	 */
	bool (*drain)(struct xd_op *op);
	/* @op ended here: tell the peer (unless it already knows), let go of the transfer. */
	void (*op_ended)(struct xd_op *op);
};

/* An opener's op.get/op.put as the owner is asked for it (the WCLAIM of PROTOCOL.md §10.6). */
struct xd_wreq {
	uint64_t window; /**< the owner's window id */
	uint64_t handle; /**< the opener's handle id (the owner's name for this opener) */
	uint64_t offset; /**< in the window */
	bool has_tag;
	char tag[XP_MAX_TAG + 1];
};

/*
 * An op.batch whose ends its client takes as one op.batch_done (PROTOCOL.md §5.2): its ops'
 * op.changed are held back, each end is recorded, and once the batch is sealed and every op of
 * it ended the list is pushed (at the next loop turn, after the batch's reply).
 */
struct xd_batch {
	struct xd_daemon *d;
	uint64_t id;
	uint64_t client; /**< the connection's id: it may close meanwhile */
	unsigned pending;
	bool sealed;
	struct xp_batch_end *ends; /**< what op.batch_done lists, in the order they ended */
	size_t nends, ends_cap;
	json_t *refusal; /**< a posted batch's refused entry: {"failed", "message"}, or NULL */
	struct xd_deferred push_later;
};
/*
 * A batch for @call's client, its id the daemon's next (or, @posted, the request's own id: the
 * client gets no reply to learn another). NULL when out of memory.
 */
struct xd_batch *xd_batch_create(struct xd_call *call, bool posted);
/*
 * A posted batch's entry @failed was refused (@cause_errno, @message) and the @skipped after it
 * never ran: their ends (op 0; ERRORED, then CANCELLED) go into @b's event with the why.
 * Returns 0 or -ENOMEM.
 */
int xd_batch_refuse(struct xd_batch *b, size_t failed, size_t skipped, int cause_errno,
		    const char *message);
/* @op (listed by this batch's request) ends into @b. Returns 0 or -ENOMEM. */
int xd_batch_join(struct xd_batch *b, struct xd_op *op);
/* No more ops join @b; it is pushed and freed once every one ended. Accepts NULL. */
void xd_batch_seal(struct xd_batch *b);
/* The op @id of @call's client, or NULL (no lookup error recorded). */
struct xd_op *xd_op_find_own(struct xd_call *call, uint64_t id);

/* Makes an op of @kind with its deadline timer, not yet listed. NULL when out of memory. */
struct xd_op *xd_op_create(struct xd_daemon *d, enum xp_kind kind);
/* Frees an op from xd_op_create() that was never started. */
void xd_op_discard(struct xd_op *op);
/* Looks up op @id for @call's client; fails the call (ENOENT/EPERM) when it may not. */
struct xd_op *xd_op_lookup(struct xd_call *call, uint64_t id);
/* Detaches @op from its owner; frees it now, or when its running copy or its drain ends. */
void xd_op_forget(struct xd_op *op);
/* Defers @call's reply until @op ends, or @timeout_ms (-1: none) passes. Returns 0 or -errno. */
int xd_waiter_add(struct xd_call *call, struct xd_op *op, int64_t timeout_ms);
/* Pairs the started @active with @passive on this node and starts the copy. 0 or -errno. */
int xd_op_start_local(struct xd_op *active, struct xd_op *passive);
/*
 * An ended owner's operation whose one-sided claimer has let go of its keys (or is gone):
 * applies the end that xd_op_end() left pending, and frees the op if its owner released it.
 */
void xd_op_drained(struct xd_op *op);
/* @op (borrowed) no longer waits for a notification: its end, if pending, is applied. */
void xd_op_unhold(struct xd_op *op);
/* A claim of a passive operation, from a local op.read/op.write or a peer's CLAIM. */
struct xd_claim {
	enum xp_kind want;  /**< the passive kind the claimer needs */
	const char *method; /**< for messages: "op.read", "op.write" */
	uint8_t node[XP_ID_BYTES];
	uint64_t epoch, op, length;
	uint8_t token[XP_ID_BYTES];
	enum xp_kind meta_kind; /**< the kind the metadata says */
	/* a claim from a keyed peer: a proof of the token instead of the token */
	bool has_proof;
	uint8_t proof[XD_MAC_LEN];
	uint8_t claimer[XP_ID_BYTES]; /**< the proof is bound to the claimer and the transfer */
	uint64_t claimer_epoch, xfer;
};
/* The refusals of PROTOCOL.md §5. Returns the passive op, or NULL with -errno in *err. */
struct xd_op *xd_claim_lookup(struct xd_daemon *d, const struct xd_claim *cl, int *err, char *msg,
			      size_t msglen);
/* A claim was accepted: @op (passive) or the new active op moves bytes over @transport. */
void xd_op_set_in_progress(struct xd_op *op, const char *transport, const char *peer);
/* Every byte arrived and both sides agree: @op is COMPLETE. */
void xd_op_complete(struct xd_op *op);
/*
 * Every byte of an opener's keyed get/put @op arrived but its notification waits for credit
 * (PROTOCOL.md §10.9): @op stays IN_PROGRESS, kept in *@slot, and ends COMPLETE on
 * xd_op_unhold(); an earlier end (deadline, cancel) clears *@slot first.
 */
void xd_op_complete_held(struct xd_op *op, struct xd_op **slot);
/* Lists an internal op (no client), holds its regions, starts its deadline: OPEN. */
void xd_op_start_internal(struct xd_op *op);
/* Lists @op under @call's client, holds its regions, starts its deadline. */
void xd_op_start(struct xd_call *call, struct xd_op *op, enum xp_state state);
/*
 * The same for an active op whose claim goes to another node: CLAIMING, and @call's reply
 * waits for the owner's answer (claim.c sends it, or op.c the refusal).
 */
void xd_op_start_claim(struct xd_call *call, struct xd_op *op);
/* Whether an end of @op waits for a copy or a one-sided claimer to let go (ENDING). */
bool xd_op_ending(const struct xd_op *op);
/* Ends @op (and its pair) as @state with positive errno @err and a cause. */
void xd_op_end(struct xd_op *op, enum xp_state state, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A connection is closing: end and forget its operations; drop its waiters. */
void xd_ops_conn_closed(struct xd_conn *c);
/* SIGTERM: end every operation CANCELLED with ESHUTDOWN. */
void xd_ops_shutdown(struct xd_daemon *d);
/* Frees every operation (final teardown, after the copier stopped). */
void xd_ops_fini(struct xd_daemon *d);
/* {"op", "kind", "state", ...} of @op, or NULL. */
json_t *xd_op_to_json(const struct xd_op *op);

/* method_op.c: the op.* and list.ops methods */
int xd_handle_op_passive(struct xd_call *call);
int xd_handle_op_active(struct xd_call *call);
/* What a pairing request asks: op.readable/writable/read/write's params, or op.batch's. */
struct xd_pair_in {
	enum xp_kind kind;    /**< XP_KIND_READABLE, _WRITABLE, _READ or _WRITE */
	const char *metadata; /**< active kinds (borrowed) */
	json_t *descs;	    /**< (borrowed) objects, or [region, offset, length] (call->compact) */
	json_int_t timeout; /**< -1: none asked */
	int release_on_end, nowait, end_only;
};
/*
 * Starts the pairing @in asks for, as op.readable/writable/read/write would (call->result set).
 * Returns 0 with the new op in *@op (NULL when the reply waits for the owner, or the op was
 * taken back), or -errno with @call failed.
 */
int xd_pair_start(struct xd_call *call, const struct xd_pair_in *in, struct xd_op **op);
int xd_handle_op_status(struct xd_call *call);
int xd_handle_op_wait(struct xd_call *call);
int xd_handle_op_cancel(struct xd_call *call);
int xd_handle_op_release(struct xd_call *call);
int xd_handle_list_ops(struct xd_call *call);
/*
 * An active op of @kind from @descs (borrowed) and @timeout (-1: default), checked against the
 * limits; not yet listed. NULL with @call failed.
 */
struct xd_op *xd_op_new(struct xd_call *call, enum xp_kind kind, json_t *descs, json_int_t timeout,
			int release_on_end);
/* The same from the descriptors of a batch read as text, @raw[0..@nraw), 1 or more. */
struct xd_op *xd_op_new_raw(struct xd_call *call, enum xp_kind kind, const struct xp_breq_desc *raw,
			    size_t nraw, json_int_t timeout, int release_on_end);
/* Decodes @metadata into @m (xp_meta_fini() it). Returns 0 or fails @call (EBADMSG). */
int xd_metadata_decode(struct xd_call *call, const char *metadata, struct xp_meta *m);

/* method_window.c: window.*, op.get, op.put, op.batch, list.windows */
int xd_handle_window_create(struct xd_call *call);
int xd_handle_window_open(struct xd_call *call);
int xd_handle_window_close(struct xd_call *call);
int xd_handle_op_window(struct xd_call *call);
/*
 * op.batch of gets and puts read as text (xp_batch_req_read()), run as xd_handle_op_batch()
 * runs the same request parsed by jansson: the same ops, events and refusals; a reply in full
 * is sent as text (@call->answered), a refused batch's is left in @call->result.
 */
int xd_handle_op_batch_text(struct xd_call *call, const struct xp_batch_req *rq);
int xd_handle_op_batch(struct xd_call *call);
int xd_handle_list_windows(struct xd_call *call);

/* method_events.c: events.subscribe, and handing op.changed to the subscribers */
int xd_handle_events_subscribe(struct xd_call *call);
/* The publish entry of struct xd_client_ops (ctl.c's table points here). */
void xd_events_publish(struct xd_daemon *d, const struct xd_conn *owner, const json_t *msg);

/* local.c: the local transport (transport.h), and populating new regions on its workers */
/* Called on the loop thread when a populate job is done (err: 0 or a positive errno). */
typedef void (*xd_populate_cb)(void *arg, int err);
/* Faults in [@addr, +@len) on a worker, then calls @done. Returns 0 or -errno. */
int xd_populate_submit(struct xd_copier *cp, void *addr, uint64_t len, xd_populate_cb done,
		       void *arg);
/*
 * fdatasync of every file region among @segs that asked for it (sync), on a worker; then
 * @done(@arg, 0 or a positive errno) on the loop thread. The regions must stay referenced
 * until then. Returns 0 or -errno.
 */
int xd_sync_submit(struct xd_copier *cp, const struct xd_seg *segs, uint32_t n, xd_populate_cb done,
		   void *arg);
/* Whether a copy or populate job was submitted and not yet reported back. */
bool xd_copier_busy(const struct xd_copier *cp);

/* rdma.c: a device's counters, for metrics.c (which includes no verbs header) */
struct xd_rdma_dev_stats {
	const char *name; /**< borrowed from the device */
	uint64_t reads, read_bytes, writes, write_bytes, sends, recvs, errors;
	uint64_t windows_bound, windows_open;
};
/* Fills @out for the @i-th device in use. Returns false when there is none (past the last). */
bool xd_rdma_device_stats(const struct xd_daemon *d, int i, struct xd_rdma_dev_stats *out);

/* metrics.c: the Prometheus endpoint (cfg.metrics_listen): HTTP on a thread of its own, from
 * snapshots the event loop renders */
struct sockaddr_storage;
/* Listens on cfg.metrics_listen when set, and starts the HTTP thread. Returns 0 or -errno
 * (logged, naming the rule). */
int xd_metrics_start(struct xd_daemon *d);
/* Stops and joins the HTTP thread, closes the listener and every HTTP connection; safe when
 * not started. Event loop only. */
void xd_metrics_stop(struct xd_daemon *d);
/* Checks "ADDR:PORT" (numeric address, port 1..65535). Returns 0 or -EINVAL. */
int xd_metrics_parse_listen(const char *s, struct sockaddr_storage *ss, int *len);

/* peer.c: the transfer engine's peer sets (connections to one other daemon) */
struct xd_transport_ops;
enum xd_peer_state {
	XD_PEER_CONNECTING, /**< first connection not yet through HELLO */
	XD_PEER_UP,	    /**< at least one connection has exchanged HELLO */
	XD_PEER_DEAD,	    /**< failed; freed at the next loop turn */
};
/*
 * One set of connections to one other daemon over one transport, shared by every local client.
 * peer.c owns it; its transport reads it and keeps its own per-set state in @tstate.
 */
TAILQ_HEAD(xd_xfer_list, xd_xfer);

struct xd_peer {
	TAILQ_ENTRY(xd_peer) link; /**< in d->peers until it fails */
	struct xd_daemon *d;
	const struct xd_transport_ops *transport;
	void *tstate; /**< the transport's part of the set */
	uint8_t node[XP_ID_BYTES];
	char node_hex[2 * XP_ID_BYTES + 1];
	uint64_t epoch;
	enum xd_peer_state state;
	struct xp_endpoint endpoints[XP_MAX_ENDPOINTS];
	int nendpoints, next_endpoint;
	char endpoint[100];	   /**< where we connected, or "accepted from ..." */
	struct xd_xfer_list sendq; /**< transfers with bytes left to move, round-robin */
	struct event *keepalive, *connect_timer;
	uint64_t bytes_sent, bytes_received, created_us;
	/*
	 * Its transfers (claim.c), from their making to their close: what the set's own events
	 * walk (its HELLO, its keepalive tick's drain checks, its loss), never every set's.
	 */
	struct xd_xfer_list xfers;
	unsigned transfers; /**< how many, for listings */
	/*
	 * Its transfers by id (claim.c), filed from their making to their close: [0] the passive
	 * ones (named by the peer's op id), [1] the active ones (ours). Per set: a transfer id is
	 * the claimer's choice, so two peers may use the same one, and one peer must not reach
	 * another's transfers; a peer frame names one by id, and a walk of every transfer per
	 * frame let one peer hold the loop (~330 us a frame beside 16000 transfers).
	 */
	struct xd_idmap xfer_ids[2];
	/*
	 * Transfers on this set that may still receive DATA into a file region here: counted
	 * from the transfer's making (before the peer can learn of it) to its close (claim.c).
	 * While any is, tcp.c reads this set's sockets without read-ahead (ra_allowed()).
	 */
	unsigned file_receivers;
	uint64_t socket_reads;	   /**< tcp.c: read(2)/readv(2) of the set's sockets */
	uint64_t read_ahead_fills; /**< tcp.c: of those, reads into the read-ahead buffer */
	bool binary_pairing;	   /**< its HELLO said it takes binary pairing frames (§10.8) */
	bool read_ok_in_data;	   /**< its HELLO said a read's first DATA may be its CLAIM_OK */
	uint32_t key_ids[XD_KEYS_MAX]; /**< the cluster keys its connections proved (frame.c) */
	int nkey_ids;
	struct xd_deferred free_later;
};
/*
 * After the cluster keys were read again: fails every set with a connection that proved a key no
 * longer among them (EACCES, naming the key), since what was trusted under it no longer is.
 * Returns how many sets it failed.
 */
int xd_peers_key_check(struct xd_daemon *d);
/* Starts the network transports and fills d->endpoints. Returns 0 or -errno. */
int xd_peers_start(struct xd_daemon *d);
/*
 * Writes the control messages queued for every peer now, where their sockets take them, rather
 * than at the end of the loop turn (a batch's CLAIMs before its reply to the client).
 */
void xd_peers_flush_ctrl(struct xd_daemon *d);
/* Whether a control message (a CANCEL at shutdown, say) still waits to be sent. */
bool xd_peers_pending_output(struct xd_daemon *d);
/* Fails every peer set (shutdown); the transports stay until xd_peers_fini(). */
void xd_peers_stop(struct xd_daemon *d);
/*
 * Stops the network transports, after the last operation is gone (their registrations must be
 * dropped before the devices close).
 */
void xd_peers_fini(struct xd_daemon *d);
/*
 * The connection set to the node metadata @m names, over the transport config and both
 * daemons allow, made on first use (connecting in the background). Returns NULL and fails
 * @call when no transport can reach it.
 */
struct xd_peer *xd_peer_for_meta(struct xd_call *call, const struct xp_meta *m);
/* Queues a control message (payload @json borrowed, may be NULL). Returns 0 or -errno. */
int xd_peer_send_ctrl(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
		      const json_t *json);
/*
 * Queues a binary pairing frame (PROTOCOL.md §10.8: @type with XP_PEER_BINARY added to @flags,
 * @len bytes of @buf copied). Returns 0 or -errno; -EOPNOTSUPP unless
 * xd_peer_binary_pairing(@p).
 */
int xd_peer_send_bin(struct xd_peer *p, uint32_t via, uint8_t type, uint8_t flags, uint64_t xfer,
		     const uint8_t *buf, uint32_t len);
/* Whether @p takes binary pairing frames: its HELLO said so, and its transport sends them. */
bool xd_peer_binary_pairing(const struct xd_peer *p);
/* Queues a window frame: the transport's send_wframe (transport.h), -EOPNOTSUPP without. */
int xd_peer_send_wframe(struct xd_peer *p, uint32_t *lane, uint64_t key, const uint8_t *hdr,
			uint32_t hdrlen, struct xd_xfer *x, uint64_t off, uint32_t len);
/* Whether @p's transport moves window gets and puts as one-sided frames (send_wframe). */
bool xd_peer_window_frames(const struct xd_peer *p);
/* Offers @x's bytes to the set's round-robin scheduler / takes them back. */
void xd_peer_stream_add(struct xd_peer *p, struct xd_xfer *x);
void xd_peer_stream_remove(struct xd_peer *p, struct xd_xfer *x);
/* Fails @p: every transfer on it ends with @err and the cause. */
void xd_peer_fail(struct xd_peer *p, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * Fills page @pg of list.peers with {node, transport, state, ...} of the sets after position
 * pg->after, making only the entries the page takes; with @conns also each set's connections
 * (reading their sockets' TCP state). Returns 0 or -ENOMEM.
 */
int xd_peers_page(struct xd_daemon *d, struct xd_page *pg, bool conns);

/* window.c: windows (PROTOCOL.md §5.1, §10.6) */
#define XD_WINDOW_MAX_OPENERS 64 /* openers a window keeps: open, or closed with notes due */
/*
 * One-sided window frames (TCP): a get's reply or an untagged put larger than this goes as
 * pieces of this size spread over the set's data connections (PROTOCOL.md §10.7), so that one
 * large get or put uses every connection as a pairing's DATA does, in pieces of a pairing's
 * DATA chunk (256 KiB pieces cost more per byte than they gave, at 1 MiB, on a busy machine).
 */
#define XD_WSTRIPE XD_TCP_CHUNK
#define XD_WSTRIPE_LANES 4	    /* connections the pieces of one put go on, at most */
#define XD_WINDOW_MAX_INFLIGHT 4096 /* an opener's gets/puts not yet ended, at the owner */
/*
 * A keyed RDMA opener's credit of notifications (PROTOCOL.md §10.9): WNOTIFYs it may have sent
 * that the owner has not yet handed to its client (WNOTIFY_ACK). Its tagged gets and puts
 * complete once their WNOTIFY went, so a slow owner slows them instead of revoking the opener.
 */
#define XD_NOTIFY_CREDIT 1024
_Static_assert(XD_NOTIFY_CREDIT <= XD_WINDOW_MAX_INFLIGHT, "credit within the owner's bound");
/* What window.c asks of a transfer's claim (op.get/op.put), so that it sits below claim.c. */
struct xd_wclaim {
	enum xp_kind kind; /**< XP_KIND_GET or XP_KIND_PUT */
	uint64_t window, handle, offset, length;
	const char *tag; /**< NULL: no notification */
};
/* window.create: a window over a range of a region of @call's client. 0 or fails @call. */
int xd_window_create(struct xd_call *call, uint64_t region, uint64_t offset, uint64_t length,
		     int access, bool many);
/* window.open of metadata @m: local at once, else over the peer set (deferred reply). */
int xd_window_open(struct xd_call *call, const struct xp_meta *m);
/* window.close of a window or a handle of @call's client. 0 or fails @call. */
int xd_window_close(struct xd_call *call, uint64_t id);
/* Where an opener's get or put goes. */
struct xd_wtarget {
	struct xd_peer *peer; /**< NULL: the window is on this daemon */
	uint64_t window;      /**< the owner's id */
	uint8_t node[XP_ID_BYTES];
	uint64_t epoch;
	/*
	 * One-sided transports: the handle holds a key of its own onto the window (bound at
	 * window.open, PROTOCOL.md §10.6), so the get or put goes without a claim: @raddr is where
	 * its bytes are in the owner's registration, @rkey the key, @via the connection it is
	 * bound to.
	 */
	bool keyed;
	uint64_t raddr;
	uint32_t rkey, via;
};
/*
 * The opener's checks of an op.get/op.put on handle @w->handle of @call's client: open,
 * in range, allowed. Returns 0 and where it goes in @t, or -errno with @call failed.
 */
int xd_window_check(struct xd_call *call, const struct xd_wclaim *w, struct xd_wtarget *t);
/*
 * The owner's side of an op.get/op.put from opener @handle of set @p (NULL: on this daemon):
 * every refusal decided before any byte moves, then an internal op over the window's range,
 * started. NULL with -errno in *err and the cause in @msg.
 */
struct xd_op *xd_window_claim(struct xd_daemon *d, struct xd_peer *p, const struct xd_wclaim *w,
			      int *err, char *msg, size_t msglen);
/*
 * One-sided TCP windows (PROTOCOL.md §10.7). The owner: where a WPUT's payload lands (a
 * transfer with a reference, NULL: dropped, -EPROTO in *err). Either side: a WGET or WACK;
 * @acked ends an opener's put whose frames the owner all took. The opener: queues @x's WPUTs or
 * its WGET (@x an op.get/op.put transfer of an open handle). Return 0 or -errno.
 */
struct xd_xfer *xd_window_put_target(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
				     const uint8_t *meta, uint32_t metalen, int *err);
int xd_window_frame(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h,
		    const uint8_t *payload, uint32_t len, void (*acked)(struct xd_xfer *x));
int xd_window_fast_start(struct xd_xfer *x);
/* Whether handle @handle's gets and puts may go as one-sided frames (not a file region's). */
bool xd_window_frames_ok(struct xd_daemon *d, uint64_t handle);
/*
 * An opener's keyed get or put @op (op->wreq filled) starts without a claim: it holds the
 * handle's key until xd_window_key_quiet(), and a tagged one is queued for its WNOTIFY, which
 * xd_window_direct_ended() sends in the order the ops started, each once its op COMPLETED.
 * Returns 0 or -ENOMEM.
 */
int xd_window_direct_start(struct xd_daemon *d, const struct xd_op *op);
void xd_window_direct_ended(struct xd_daemon *d, uint64_t handle, uint64_t op, bool complete);
/*
 * Keyed get/put @op moved every byte, but its WNOTIFY waits (for credit, or for an earlier tag):
 * with an owner that grants credit, @op is held IN_PROGRESS (xd_op_complete_held()) till it
 * went, and true is returned; false: complete it now.
 */
bool xd_window_direct_hold(struct xd_daemon *d, uint64_t handle, struct xd_op *op);
/* A keyed get or put of handle @handle has no request left on the owner's memory. */
void xd_window_key_quiet(struct xd_daemon *d, uint64_t handle);
/* Keepalive tick of set @p: an opener that keeps a revoked window's key too long fails it. */
void xd_windows_peer_tick(struct xd_peer *p);
/* A window message from @p (WOPEN, WOPEN_OK, WOPEN_ERR, WCLOSE, WNOTIFY). 0 or -EPROTO. */
int xd_window_ctrl(struct xd_peer *p, uint32_t via, const struct xp_peer_hdr *h, json_t *json);
/* Set @p is up (its pending opens go) / lost (its openers and handles are gone). */
void xd_windows_peer_up(struct xd_peer *p);
void xd_windows_peer_lost(struct xd_peer *p, int err, const char *cause);
/* How many windows this daemon's clients own and have opened (handles), for metrics.c. */
void xd_windows_count(const struct xd_daemon *d, uint64_t *windows, uint64_t *handles);
/* A connection closes: its windows are revoked, its handles closed. */
void xd_windows_conn_closed(struct xd_conn *c);
/* @c's queue fell to XD_NOTIFY_LOW: the notifications waiting for it go (ctl.c calls this). */
void xd_windows_conn_drained(struct xd_conn *c);
/* Region @r is deregistered with force: the windows over it are revoked. */
void xd_windows_region_gone(struct xd_region *r);
/* list.windows: one page of @call's client's windows and handles. */
int xd_windows_list(struct xd_call *call);
/* Frees everything (final teardown). */
void xd_windows_fini(struct xd_daemon *d);

/* claim.c: operations whose pair is on another node (PROTOCOL.md §10.3-10.5) */
/* Listens to the peer sets and transports (d->xfer_events) and to op.c (d->remote). */
void xd_claims_start(struct xd_daemon *d);
/* Claims the passive op @m names on its owner for @op (not yet listed). Defers the reply. */
int xd_remote_claim(struct xd_call *call, struct xd_op *op, const struct xp_meta *m);
/*
 * Starts @op (an op.get/op.put with its wreq filled, not yet listed) as a transfer to window
 * @op->wreq->window at @t: listed under @call's client at once; with the handle's own key
 * (@t->keyed) its requests go at once, else the WCLAIM is sent when the set is up. Returns 0
 * or fails @call.
 */
int xd_remote_window_op(struct xd_call *call, struct xd_op *op, const struct xd_wtarget *t);

#endif /* XFERD_H */
