/* SPDX-License-Identifier: MIT */
/*
 * The control-packet fuzz target (fuzz_ctl.c), shared by libFuzzer (make fuzz) and by the
 * replay program that make test runs over the seed corpus (replay.c).
 */
#ifndef XFER_FUZZ_CTL_H
#define XFER_FUZZ_CTL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Runs one input against the in-process daemon, which the first call starts. Returns 0; aborts
 * (after a line on stderr naming why) when the daemon leaks or breaks a protocol promise.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stops the daemon the first input started, closes the target's fds, removes its socket. */
void fuzz_ctl_fini(void);

#endif /* XFER_FUZZ_CTL_H */
