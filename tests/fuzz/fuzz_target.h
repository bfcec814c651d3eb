/* SPDX-License-Identifier: MIT */
/*
 * What every fuzz target in tests/fuzz/ (fuzz_ctl.c, fuzz_meta.c, fuzz_peer.c, fuzz_reply.c) offers, to
 * libFuzzer (make fuzz) and to the replay program that make test runs over its seed corpus
 * (replay.c, linked once per target).
 */
#ifndef XFER_FUZZ_TARGET_H
#define XFER_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

/*
 * Runs one input; a target with an in-process daemon starts it at the first call. Returns 0;
 * aborts (after a line on stderr naming why) when the code under test leaks or breaks a
 * promise.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stops what the first input started (daemon, fds, sockets); nothing if nothing was. */
void fuzz_target_fini(void);

/* The seed corpus's directory under tests/fuzz/: "corpus", "corpus-meta", ... */
extern const char fuzz_target_corpus[];

#endif /* XFER_FUZZ_TARGET_H */
