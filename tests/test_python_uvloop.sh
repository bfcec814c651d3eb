#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The Python package's suite again, on uvloop's event loop (Debian python3-uvloop) instead of
# asyncio's own: the serving processes of vLLM and SGLang run uvloop, and the package's reader
# callback resumes awaiting tasks itself (client/python/xferd/_waiter.py), which must hold on
# either loop. tests/python/conftest.py installs the loop; test_loop.py checks which one ran.
set -u
if ! /usr/bin/python3 -c 'import uvloop' 2>/dev/null; then
	echo "SKIP - python suite on uvloop (python3-uvloop not installed: make deps)"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
XFERD_TEST_LOOP=uvloop exec bash "$(dirname "$0")/test_python.sh" "$@"
