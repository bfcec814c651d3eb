// SPDX-License-Identifier: MIT
/*
 * Prints, as JSON, sizeof and every field's offsetof of the structs of xferclient.h that the
 * Python package mirrors with ctypes (client/python/xferd/_clib.py); test_layout.py compares.
 * A field added to the header without the mirror, or a type changed, fails there.
 */
#include <stddef.h>
#include <stdio.h>
#include "xferclient.h"

#define FIELD(s, f) \
	printf("\"%s\": [%zu, %zu], ", #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define END(s) printf("\"sizeof\": [0, %zu]}", sizeof(struct s))

int main(void)
{
	printf("{\"xfer_desc\": {");
	FIELD(xfer_desc, region);
	FIELD(xfer_desc, offset);
	FIELD(xfer_desc, length);
	END(xfer_desc);
	printf(", \"xfer_op_info\": {");
	FIELD(xfer_op_info, op);
	FIELD(xfer_op_info, kind);
	FIELD(xfer_op_info, state);
	FIELD(xfer_op_info, length);
	FIELD(xfer_op_info, bytes);
	FIELD(xfer_op_info, client);
	FIELD(xfer_op_info, timeout_ms);
	FIELD(xfer_op_info, age_ms);
	FIELD(xfer_op_info, error);
	FIELD(xfer_op_info, cause);
	FIELD(xfer_op_info, transport);
	FIELD(xfer_op_info, peer);
	END(xfer_op_info);
	printf(", \"xfer_op_opts\": {");
	FIELD(xfer_op_opts, timeout_ms);
	FIELD(xfer_op_opts, flags);
	END(xfer_op_opts);
	printf(", \"xfer_window_event\": {");
	FIELD(xfer_window_event, type);
	FIELD(xfer_window_event, window);
	FIELD(xfer_window_event, tag);
	FIELD(xfer_window_event, kind);
	FIELD(xfer_window_event, offset);
	FIELD(xfer_window_event, bytes);
	FIELD(xfer_window_event, peer);
	FIELD(xfer_window_event, handle);
	FIELD(xfer_window_event, error);
	FIELD(xfer_window_event, cause);
	END(xfer_window_event);
	printf(", \"xfer_batch_op\": {");
	FIELD(xfer_batch_op, kind);
	FIELD(xfer_batch_op, handle);
	FIELD(xfer_batch_op, offset);
	FIELD(xfer_batch_op, descs);
	FIELD(xfer_batch_op, n);
	FIELD(xfer_batch_op, tag);
	FIELD(xfer_batch_op, op);
	END(xfer_batch_op);
	printf(", \"xfer_reply\": {");
	FIELD(xfer_reply, request);
	FIELD(xfer_reply, error);
	FIELD(xfer_reply, op);
	FIELD(xfer_reply, metadata);
	FIELD(xfer_reply, message);
	END(xfer_reply);
	printf(", \"enums\": {\"XFER_COMPLETE\": %d, \"XFER_ERRORED\": %d, \"XFER_WRITE\": %d, "
	       "\"XFER_GET\": %d, \"XFER_PUT\": %d, \"XFER_OP_RELEASE_ON_END\": %u, "
	       "\"XFER_OP_NOWAIT\": %u, \"XFER_WINDOW_ONE_OPENER\": %u, \"XFER_FILE_SYNC\": %u, "
	       "\"XFER_WINDOW_CLOSED\": %d, \"XFER_ACCESS_READWRITE\": %d}}\n",
	       XFER_COMPLETE, XFER_ERRORED, XFER_WRITE, XFER_GET, XFER_PUT, XFER_OP_RELEASE_ON_END,
	       XFER_OP_NOWAIT, XFER_WINDOW_ONE_OPENER, XFER_FILE_SYNC, XFER_WINDOW_CLOSED,
	       XFER_ACCESS_READWRITE);
	return 0;
}
