// SPDX-License-Identifier: MIT
/*
 * What the kernel's TCP says about one peer connection, for list.peers (PROTOCOL.md §7): the
 * congestion control and the fields of getsockopt(TCP_INFO) an operator needs to tell why
 * transfers between two nodes are slow (retransmits, a small window, a long round trip, a
 * receive window that stays closed). Read when a listing asks, never kept: the call copies a
 * few hundred bytes out of the socket and does not wait for the network.
 *
 * A file of its own because the fields after tcpi_total_retrans (bytes acked, delivery rate,
 * the time limited by the receive window, ...) are only in the kernel's <linux/tcp.h>, whose
 * struct tcp_info clashes with glibc's <netinet/tcp.h>, which tcp.c includes.
 */
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "transport.h"

#define XD_CC_NAME_MAX 16 /* the kernel's TCP_CA_NAME_MAX, which no uapi header has */

/* A number of struct tcp_info listed as @key when the kernel's struct reaches it. */
struct info_field {
	const char *key;
	size_t off, size;
};

#define FIELD(key, f)                                                                \
	{                                                                            \
		key, offsetof(struct tcp_info, f), sizeof(((struct tcp_info *)0)->f) \
	}

/* The units are the kernel's: us for times, bytes, segments for cwnd and unacked. */
static const struct info_field info_fields[] = {
	FIELD("rtt_us", tcpi_rtt),
	FIELD("rttvar_us", tcpi_rttvar),
	FIELD("min_rtt_us", tcpi_min_rtt),
	FIELD("snd_cwnd", tcpi_snd_cwnd),
	FIELD("snd_ssthresh", tcpi_snd_ssthresh),
	FIELD("snd_mss", tcpi_snd_mss),
	FIELD("unacked", tcpi_unacked),
	FIELD("total_retrans", tcpi_total_retrans),
	FIELD("bytes_retrans", tcpi_bytes_retrans),
	FIELD("bytes_acked", tcpi_bytes_acked),
	FIELD("bytes_received", tcpi_bytes_received),
	FIELD("delivery_rate", tcpi_delivery_rate),
	FIELD("notsent_bytes", tcpi_notsent_bytes),
	FIELD("snd_wnd", tcpi_snd_wnd),
	FIELD("busy_us", tcpi_busy_time),
	FIELD("rwnd_limited_us", tcpi_rwnd_limited),
	FIELD("sndbuf_limited_us", tcpi_sndbuf_limited),
};

/* The kernel's TCP states (include/net/tcp_states.h), named as ss(8) names them. */
static const char *state_name(uint8_t state)
{
	static const char *const names[] = {
		"unknown",   "established", "syn-sent",	  "syn-recv", "fin-wait-1", "fin-wait-2",
		"time-wait", "close",	    "close-wait", "last-ack", "listen",	    "closing",
	};

	return state < sizeof(names) / sizeof(names[0]) ? names[state] : "unknown";
}

/* The field at @f of @ti as a JSON integer (a u64 past 2^63 - 1 is clamped: JSON's reach). */
static json_t *field_value(const struct tcp_info *ti, const struct info_field *f)
{
	uint64_t v = 0;

	if (f->size == sizeof(uint32_t)) {
		uint32_t v32;
		memcpy(&v32, (const char *)ti + f->off, sizeof(v32));
		v = v32;
	} else {
		memcpy(&v, (const char *)ti + f->off, sizeof(v));
	}
	return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/*
 * {"cc", "state", the numbers of info_fields} of socket @fd, or NULL with the cause in @why.
 * A field the running kernel does not fill (its struct ends before it: getsockopt says how
 * much it wrote) is left out rather than shown as a zero it never measured.
 */
static json_t *info_json(int fd, char *why, size_t whylen)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	char cc[XD_CC_NAME_MAX + 1] = "";
	socklen_t cclen = XD_CC_NAME_MAX;

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &cclen) < 0) {
		snprintf(why, whylen, "getsockopt(TCP_INFO, TCP_CONGESTION): %s", strerror(errno));
		return NULL;
	}
	json_t *o = json_pack("{s:s, s:s}", "cc", cc, "state", state_name(ti.tcpi_state));
	/* (0: never set on this socket, so the host's net.ipv4.tcp_notsent_lowat holds) */
	int lowat = 0;
	socklen_t lowlen = sizeof(lowat);
	if (o && getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, &lowlen) == 0 &&
	    json_object_set_new(o, "notsent_lowat", json_integer(lowat))) {
		json_decref(o);
		o = NULL;
	}
	for (size_t i = 0; o && i < sizeof(info_fields) / sizeof(info_fields[0]); i++) {
		const struct info_field *f = &info_fields[i];
		if (f->off + f->size <= len &&
		    json_object_set_new(o, f->key, field_value(&ti, f))) {
			json_decref(o);
			o = NULL;
		}
	}
	if (!o)
		snprintf(why, whylen, "out of memory");
	return o;
}

int xd_tcp_info_add(json_t *o, int fd)
{
	char why[128];
	json_t *info = info_json(fd, why, sizeof(why));

	if (info)
		return json_object_set_new(o, "tcp", info);
	return json_object_set_new(o, "tcp_error", json_string(why));
}
