// SPDX-License-Identifier: MIT
/*
 * The cluster keys and what is computed with them (PROTOCOL.md §10.2): loading the key file
 * (one to four keys, one per line, each hex of at least 32 bytes; the file readable by its
 * owner only), fresh nonces, and HMAC-SHA256 over a list of parts, from OpenSSL's libcrypto.
 * No cryptography is written here.
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

	while (*text == ' ' || *text == '\t' || *text == '\r')
		text++;
	for (; text[0] && text[1] && isxdigit((unsigned char)text[0]) &&
	       isxdigit((unsigned char)text[1]) && n < cap;
	     text += 2) {
		unsigned v;
		if (sscanf(text, "%2x", &v) != 1)
			return -EINVAL;
		key[n++] = (uint8_t)v;
	}
	while (*text == ' ' || *text == '\t' || *text == '\r')
		text++;
	return *text ? -EINVAL : (int)n;
}

/* The key's name in logs and listings: the first 4 bytes of its SHA-256. Returns 0 or -EIO. */
static int key_id(const uint8_t *key, size_t len, uint32_t *id)
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;

	if (!EVP_Digest(key, len, md, &mdlen, EVP_sha256(), NULL) || mdlen < 4)
		return -EIO;
	*id = (uint32_t)md[0] << 24 | (uint32_t)md[1] << 16 | (uint32_t)md[2] << 8 | md[3];
	return 0;
}

/* The keys of @text, one per line (blank lines skipped), into @kr. Returns 0 or -errno + @err. */
static int keys_from_text(char *text, struct xd_keyring *kr, const char *path, char *err,
			  size_t errlen)
{
	int line = 0;

	for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		line++;
		if (strspn(l, " \t\r") == strlen(l))
			continue;
		if (kr->n == XD_KEYS_MAX) {
			snprintf(err, errlen, "peer key %s holds more than %d keys", path,
				 XD_KEYS_MAX);
			return -EINVAL;
		}
		struct xd_key *k = &kr->keys[kr->n];
		int bytes = key_from_hex(l, k->bytes, XD_KEY_MAX);
		if (bytes < XD_KEY_MIN) {
			snprintf(err, errlen,
				 "peer key %s, line %d: a key is at least %d (at most %d) random "
				 "bytes as hex digits, e.g. 64 digits from /dev/urandom",
				 path, line, XD_KEY_MIN, XD_KEY_MAX);
			return -EINVAL;
		}
		k->len = (size_t)bytes;
		if (key_id(k->bytes, k->len, &k->id) < 0) {
			snprintf(err, errlen, "peer key %s: SHA-256 failed", path);
			return -EIO;
		}
		for (int i = 0; i < kr->n; i++)
			if (kr->keys[i].id == k->id) {
				snprintf(err, errlen,
					 "peer key %s, line %d: the key of line %d again", path,
					 line, i + 1);
				return -EINVAL;
			}
		k->mac = xd_hmac_keyed_new(k->bytes, k->len); /* (NULL: keyed per call) */
		kr->n++;
	}
	if (kr->n == 0) {
		snprintf(err, errlen,
			 "peer key %s holds no key (at least %d random bytes as hex digits, e.g. "
			 "64 digits from /dev/urandom)",
			 path, XD_KEY_MIN);
		return -EINVAL;
	}
	return 0;
}

int xd_keyring_load(const char *path, struct xd_keyring *kr, char *err, size_t errlen)
{
	char text[XD_KEYS_MAX * (2 * XD_KEY_MAX + 8) + 64];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	memset(kr, 0, sizeof(*kr));
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
	int rc = n == (ssize_t)sizeof(text) - 1 ? -EFBIG :
						  keys_from_text(text, kr, path, err, errlen);
	explicit_bzero(text, sizeof(text));
	if (rc == -EFBIG)
		snprintf(err, errlen, "peer key %s is longer than %d keys of %d bytes", path,
			 XD_KEYS_MAX, XD_KEY_MAX);
	if (rc < 0)
		xd_keyring_clear(kr);
	return rc;
}

void xd_keyring_clear(struct xd_keyring *kr)
{
	for (int i = 0; i < kr->n; i++)
		xd_hmac_keyed_free(kr->keys[i].mac);
	explicit_bzero(kr, sizeof(*kr)); /* (the cluster keys leave no copy) */
}

const struct xd_key *xd_keyring_find(const struct xd_keyring *kr, uint32_t id)
{
	for (int i = 0; i < kr->n; i++)
		if (kr->keys[i].id == id)
			return &kr->keys[i];
	return NULL;
}

json_t *xd_key_ids_json(const uint32_t *ids, int n)
{
	json_t *out = json_array();
	char id[9];

	for (int i = 0; out && i < n; i++) {
		snprintf(id, sizeof(id), "%08x", (unsigned)ids[i]);
		if (json_array_append_new(out, json_string(id))) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
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

/* The claim proof of xd_claim_proof() under @k. Returns 0 or -EIO. */
static int claim_mac(const struct xd_key *k, const uint8_t owner[XP_ID_BYTES], uint64_t owner_epoch,
		     const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch, uint64_t op,
		     uint64_t xfer, const uint8_t token[XP_ID_BYTES], uint8_t out[XD_MAC_LEN])
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
	if (k->mac)
		return hmac_from_keyed(k->mac, parts, 5, out);
	return xd_hmac(k->bytes, k->len, parts, 5, out);
}

int xd_claim_proof(const struct xd_daemon *d, const uint8_t owner[XP_ID_BYTES],
		   uint64_t owner_epoch, const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch,
		   uint64_t op, uint64_t xfer, const uint8_t token[XP_ID_BYTES],
		   uint8_t out[XD_MAC_LEN])
{
	if (d->keys.n == 0)
		return -EIO;
	return claim_mac(&d->keys.keys[0], owner, owner_epoch, claimer, claimer_epoch, op, xfer,
			 token, out);
}

bool xd_token_held(const struct xd_daemon *d, const uint8_t *proof, const uint8_t *sent,
		   const uint8_t claimer[XP_ID_BYTES], uint64_t claimer_epoch, uint64_t op,
		   uint64_t xfer, const uint8_t token[XP_ID_BYTES])
{
	uint8_t want[XD_MAC_LEN];
	unsigned char diff = 0;

	/* A peer proves with the first key of its own file: any of ours (a key being rolled). */
	for (int i = 0; proof && i < d->keys.n; i++)
		if (claim_mac(&d->keys.keys[i], d->node, d->epoch, claimer, claimer_epoch, op, xfer,
			      token, want) == 0 &&
		    xd_mac_equal(want, proof))
			return true;
	if (proof)
		return false;
	for (int i = 0; i < XP_ID_BYTES; i++)
		diff |= (unsigned char)(sent[i] ^ token[i]);
	return diff == 0;
}
