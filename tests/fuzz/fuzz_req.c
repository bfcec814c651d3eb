// SPDX-License-Identifier: MIT
/*
 * libFuzzer target over op.batch read by the daemon without jansson (proto/xp_batch_req.c,
 * xp_batch_req_read()), which xd_dispatch_packet() runs on every control packet before it
 * parses one with jansson. Any input must be read or left to jansson without a crash or an
 * over-read (the input is copied to a buffer of exactly its size, so ASan sees one); one that
 * is read must be what the daemon's jansson way makes of the same bytes (tests/breq_ref.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../breq_ref.h"
#include "xp_json.h"
#include "fuzz_target.h"

const char fuzz_target_corpus[] = "corpus-req";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct xp_batch_req rq;
	char why[200];
	char *copy = malloc(size ? size : 1);

	if (!copy)
		abort();
	memcpy(copy, data, size);
	if (xp_batch_req_read(copy, size, &rq) == 0 &&
	    !breq_agrees(copy, size, &rq, why, sizeof(why))) {
		fprintf(stderr,
			"fuzz_req: read, but not as jansson's way reads it (%s)\n"
			"fuzz_req: packet %.*s\n",
			why, (int)(size > 300 ? 300 : size), copy);
		abort();
	}
	free(copy);
	return 0;
}

void fuzz_target_fini(void)
{
}
