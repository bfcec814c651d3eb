/* SPDX-License-Identifier: MIT */
/*
 * What the daemon's jansson way (xp_request_parse(), then method_window.c's batch_opts() and
 * compact_entry()) makes of an op.batch request, compared with what xp_batch_req_read() read
 * from the same bytes: test_proto and the fuzz target fuzz_req hold the reader to it.
 */
#ifndef XFER_TESTS_BREQ_REF_H
#define XFER_TESTS_BREQ_REF_H

#include <stdbool.h>
#include <stddef.h>
#include "xp_json.h"

/*
 * True when jansson's way reads @buf of @len bytes as @rq: the same request id, an op.batch
 * whose params hold nothing but "ops" and the options, each option's meaning (absent as its
 * default), and entries of exactly those kinds, values, descriptors and tags. On false, a
 * sentence naming the first difference in @why.
 */
bool breq_agrees(const char *buf, size_t len, const struct xp_batch_req *rq, char *why,
		 size_t whylen);

#endif /* XFER_TESTS_BREQ_REF_H */
