// SPDX-License-Identifier: MIT
/*
 * The cluster key and what is computed with it (PROTOCOL.md §10.2): loading the key file
 * (hex, at least 32 bytes, readable by its owner only), fresh nonces, and HMAC-SHA256 over a
 * list of parts, from OpenSSL's libcrypto. No cryptography is written here.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include "xferd.h"

/* Reads at most @cap bytes of @fd into @buf. Returns the count or -errno. */
static ssize_t read_small(int fd, char *buf, size_t cap)
{
	size_t got = 0;

	while (got < cap) {
		ssize_t n = read(fd, buf + got, cap - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Hex digits of @text (white space around them allowed) into @key. Returns bytes or -EINVAL. */
static int key_from_hex(const char *text, uint8_t *key, size_t cap)
{
	size_t n = 0;

	while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r')
		text++;
	for (; text[0] && text[1] && isxdigit((unsigned char)text[0]) &&
	       isxdigit((unsigned char)text[1]) && n < cap;
	     text += 2) {
		unsigned v;
		if (sscanf(text, "%2x", &v) != 1)
			return -EINVAL;
		key[n++] = (uint8_t)v;
	}
	while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r')
		text++;
	return *text ? -EINVAL : (int)n;
}

int xd_key_load(const char *path, uint8_t *key, size_t *len, char *err, size_t errlen)
{
	char text[2 * XD_KEY_MAX + 64];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "peer key %s: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077)) {
		snprintf(err, errlen,
			 "peer key %s must be a regular file readable by its owner only "
			 "(mode 0600 or 0400, is %04o)",
			 path, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	ssize_t n = read_small(fd, text, sizeof(text) - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "peer key %s: %s", path, strerror((int)-n));
		return (int)n;
	}
	text[n] = '\0';
	int bytes = key_from_hex(text, key, XD_KEY_MAX);
	explicit_bzero(text, sizeof(text));
	if (bytes < XD_KEY_MIN) {
		snprintf(err, errlen,
			 "peer key %s must hold at least %d (at most %d) random bytes as hex "
			 "digits, e.g. 64 digits from /dev/urandom",
			 path, XD_KEY_MIN, XD_KEY_MAX);
		explicit_bzero(key, XD_KEY_MAX);
		return -EINVAL;
	}
	*len = (size_t)bytes;
	return 0;
}

int xd_random(void *buf, size_t len)
{
	ssize_t n = getrandom(buf, len, 0);

	return n == (ssize_t)len ? 0 : -EIO;
}

int xd_random_pooled(struct xd_daemon *d, void *buf, size_t len)
{
	if (len > XD_RANDOM_POOL)
		return -EIO;
	if (d->random_left < len) {
		if (xd_random(d->random_pool, XD_RANDOM_POOL) < 0)
			return -EIO;
		d->random_left = XD_RANDOM_POOL;
	}
	uint8_t *from = d->random_pool + XD_RANDOM_POOL - d->random_left;
	memcpy(buf, from, len);
	explicit_bzero(from, len); /* (given out once, kept nowhere else) */
	d->random_left -= len;
	return 0;
}

int xd_hmac(const uint8_t *key, size_t keylen, const struct xd_mac_part *parts, int nparts,
	    uint8_t out[XD_MAC_LEN])
{
	int ok;

	/* EVP_MAC (OpenSSL 3): HMAC_CTX is deprecated, and the one-shot HMAC() takes one buffer. */
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *mctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	size_t got = 0;

	ok = mctx && EVP_MAC_init(mctx, key, keylen, params);
	for (int i = 0; ok && i < nparts; i++)
		ok = EVP_MAC_update(mctx, parts[i].data, parts[i].len);
	ok = ok && EVP_MAC_final(mctx, out, &got, XD_MAC_LEN) && got == XD_MAC_LEN;
	EVP_MAC_CTX_free(mctx);
	EVP_MAC_free(mac);
	return ok ? 0 : -EIO;
}

void *xd_hmac_keyed_new(const uint8_t *key, size_t keylen)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *mctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0),
		OSSL_PARAM_construct_end(),
	};

	EVP_MAC_free(mac); /* (the context holds its own reference) */
	if (mctx && !EVP_MAC_init(mctx, key, keylen, params)) {
		EVP_MAC_CTX_free(mctx);
		mctx = NULL;
	}
	return mctx;
}

void xd_hmac_keyed_free(void *keyed)
{
	EVP_MAC_CTX_free(keyed); /* (frees NULL; cleanses the key) */
}

/* HMAC of @parts from a copy of the keyed state @keyed. Returns 0 or -EIO. */
static int hmac_from_keyed(const void *keyed, const struct xd_mac_part *parts, int nparts,
			   uint8_t out[XD_MAC_LEN])
{
	EVP_MAC_CTX *mctx = EVP_MAC_CTX_dup(keyed);
	size_t got = 0;
	int ok = mctx != NULL;

	for (int i = 0; ok && i < nparts; i++)
		ok = EVP_MAC_update(mctx, parts[i].data, parts[i].len);
	ok = ok && EVP_MAC_final(mctx, out, &got, XD_MAC_LEN) && got == XD_MAC_LEN;
	EVP_MAC_CTX_free(mctx);
	return ok ? 0 : -EIO;
}

bool xd_mac_equal(const uint8_t a[XD_MAC_LEN], const uint8_t b[XD_MAC_LEN])
{
	return CRYPTO_memcmp(a, b, XD_MAC_LEN) == 0;
}

/* A node id and epoch as MAC input: 16 bytes, then 8 bytes little-endian. */
static void put_ident(uint8_t out[XP_ID_BYTES + 8], const uint8_t node[XP_ID_BYTES], uint64_t epoch)
{
	memcpy(out, node, XP_ID_BYTES);
	for (int i = 0; i < 8; i++)
		out[XP_ID_BYTES + i] = (uint8_t)(epoch >> (8 * i));
}

int xd_claim_proof(const struct xd_daemon *d, const uint8_t owner[XP_ID_BYTES],
		   uint64_t owner_epoch, const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch,
		   uint64_t op, uint64_t xfer, const uint8_t token[XP_ID_BYTES],
		   uint8_t out[XD_MAC_LEN])
{
	static const char label[] = "xferd-claim-v1";
	uint8_t o[XP_ID_BYTES + 8], c[XP_ID_BYTES + 8], ids[16];

	put_ident(o, owner, owner_epoch);
	put_ident(c, claimer, claimer_epoch);
	for (int i = 0; i < 8; i++) {
		ids[i] = (uint8_t)(op >> (8 * i));
		ids[8 + i] = (uint8_t)(xfer >> (8 * i));
	}
	const struct xd_mac_part parts[] = {
		{ label, sizeof(label) }, { o, sizeof(o) },	  { c, sizeof(c) },
		{ ids, sizeof(ids) },	  { token, XP_ID_BYTES },
	};
	if (d->peer_mac)
		return hmac_from_keyed(d->peer_mac, parts, 5, out);
	return xd_hmac(d->peer_key, d->peer_key_len, parts, 5, out);
}

bool xd_token_held(const struct xd_daemon *d, const uint8_t *proof, const uint8_t *sent,
		   const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch, uint64_t op,
		   uint64_t xfer, const uint8_t token[XP_ID_BYTES])
{
	uint8_t want[XD_MAC_LEN];
	unsigned char diff = 0;

	if (proof)
		return xd_claim_proof(d, d->node, d->epoch, claimer, claimer_epoch, op, xfer, token,
				      want) == 0 &&
		       xd_mac_equal(want, proof);
	for (int i = 0; i < XP_ID_BYTES; i++)
		diff |= (unsigned char)(sent[i] ^ token[i]);
	return diff == 0;
}
