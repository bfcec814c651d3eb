// SPDX-License-Identifier: MIT
/*
 * peer_allow: the CIDR list (IPv4 and IPv6) that every dialled and every accepted peer address
 * must lie in. Parsing a "ADDR/BITS" entry, and the test of a numeric address or a sockaddr
 * against the list. An IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a dual-stack listener
 * sees) is tested as the IPv4 address it carries.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "xferd.h"

int xd_netaddr_parse_cidr(const char *s, struct xd_cidr *out)
{
	char addr[INET6_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	char *end;

	if (!slash || (size_t)(slash - s) >= sizeof(addr) || !slash[1])
		return -EINVAL;
	memcpy(addr, s, (size_t)(slash - s));
	addr[slash - s] = '\0';
	long bits = strtol(slash + 1, &end, 10);
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, addr, out->addr) == 1)
		out->family = AF_INET;
	else if (inet_pton(AF_INET6, addr, out->addr) == 1)
		out->family = AF_INET6;
	else
		return -EINVAL;
	if (*end || bits < 0 || bits > (out->family == AF_INET ? 32 : 128))
		return -EINVAL;
	out->bits = (int)bits;
	return 0;
}

void xd_netaddr_format_cidr(const struct xd_cidr *c, char *buf, size_t len)
{
	char addr[INET6_ADDRSTRLEN] = "?";

	inet_ntop(c->family, c->addr, addr, sizeof(addr));
	snprintf(buf, len, "%s/%d", addr, c->bits);
}

/* Whether the first @bits bits of @a and @b are equal. */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, int bits)
{
	int whole = bits / 8, rest = bits % 8;

	if (memcmp(a, b, (size_t)whole) != 0)
		return false;
	if (!rest)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[whole] & mask) == (b[whole] & mask);
}

/* @family's address in @bytes (4 or 16 bytes); a v4-mapped v6 address becomes v4. */
static bool in_list(const struct xd_cidr *list, int n, int family, const uint8_t *bytes)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (family == AF_INET6 && memcmp(bytes, v4mapped, sizeof(v4mapped)) == 0) {
		family = AF_INET;
		bytes += sizeof(v4mapped);
	}
	for (int i = 0; i < n; i++)
		if (list[i].family == family && prefix_equal(list[i].addr, bytes, list[i].bits))
			return true;
	return false;
}

int xd_netaddr_allowed(const struct xd_cidr *list, int n, const char *addr)
{
	uint8_t bytes[16];

	if (n == 0)
		return 0;
	if (inet_pton(AF_INET, addr, bytes) == 1)
		return in_list(list, n, AF_INET, bytes) ? 0 : -EACCES;
	if (inet_pton(AF_INET6, addr, bytes) == 1)
		return in_list(list, n, AF_INET6, bytes) ? 0 : -EACCES;
	return -EINVAL;
}

bool xd_netaddr_sockaddr_allowed(const struct xd_cidr *list, int n, const struct sockaddr *sa)
{
	if (n == 0)
		return true;
	if (sa->sa_family == AF_INET)
		return in_list(list, n, AF_INET,
			       (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa->sa_family == AF_INET6)
		return in_list(list, n, AF_INET6,
			       (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}
