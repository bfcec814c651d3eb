# SPDX-License-Identifier: MIT
"""
The suite runs on the event loop XFERD_TEST_LOOP names (tests/test_python.sh: asyncio's own,
tests/test_python_uvloop.sh: uvloop), so a run meant for uvloop cannot pass on asyncio's loop
unnoticed.
"""
import asyncio
import os


def test_the_suite_runs_on_the_loop_it_was_asked_for():
    async def loop_module():
        return type(asyncio.get_running_loop()).__module__

    module = asyncio.run(loop_module())
    if os.environ.get("XFERD_TEST_LOOP", "asyncio") == "uvloop":
        assert module.startswith("uvloop"), module
    else:
        assert module.startswith("asyncio"), module
