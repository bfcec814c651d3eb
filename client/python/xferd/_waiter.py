# SPDX-License-Identifier: MIT
"""
The awaitable an Operation's wait_for_completion() suspends on: asyncio's Future protocol
(what a Task accepts from a coroutine: ``_asyncio_future_blocking``, ``get_loop()``,
``add_done_callback(cb, context=)``, ``cancel()``, ``result()``), with one thing a Future
cannot do: its end can resume the waiting task at once, inside the connector's reader
callback, instead of through loop.call_soon(). A Future's set_result() schedules the task's
wakeup for the next turn of the loop: one more epoll_wait() and a pass through the loop's
Python code after the fd's callback, ~10-25 us per operation after a 16 MiB copy has left
the interpreter cold (perf_counter_ns probes, 16 MiB reads on one daemon).

Resuming directly is only safe where no task runs and the library is not inside
xfer_dispatch(): the connector does it from its reader callback, after dispatch returned
(``Connector._on_readable``). Everywhere else (an end seen inside a coroutine's own call, a
cancel, another thread) the callbacks go through the loop as a Future's would.
"""
import asyncio

_PENDING, _DONE, _CANCELLED = 0, 1, 2


class Waiter:
    __slots__ = ("_loop", "_state", "_callbacks", "_cancel_msg", "_asyncio_future_blocking")

    def __init__(self, loop):
        self._loop = loop
        self._state = _PENDING
        self._callbacks = []  # (callback, context)
        self._cancel_msg = None
        self._asyncio_future_blocking = False

    def __await__(self):
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            yield self  # the task calls add_done_callback(its wakeup)
        if self._state != _DONE:
            self.result()  # raises
        return None

    __iter__ = __await__

    def get_loop(self):
        return self._loop

    def done(self):
        return self._state != _PENDING

    def cancelled(self):
        return self._state == _CANCELLED

    def result(self):
        if self._state == _CANCELLED:
            raise asyncio.CancelledError(*(() if self._cancel_msg is None else (self._cancel_msg,)))
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("the operation has not ended")
        return None

    def exception(self):
        self.result()  # raises when cancelled or pending, as a Future's does
        return None

    def add_done_callback(self, fn, *, context=None):
        if self._state == _PENDING:
            self._callbacks.append((fn, context))
        else:
            self._loop.call_soon(fn, self, context=context)

    def remove_done_callback(self, fn):
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def cancel(self, msg=None):
        if self._state != _PENDING:
            return False
        self._state, self._cancel_msg = _CANCELLED, msg
        self._schedule()
        return True

    def set_result(self, result=None):
        """Ends the wait (@result is always None); the waiting task resumes at the loop's next
        turn."""
        if self._state == _PENDING:
            self._state = _DONE
            self._schedule()

    def end_here(self):
        """Ends the wait and resumes the waiting task now, in this call. Only from a loop
        callback of this waiter's loop outside any task (the connector's reader callback)."""
        if self._state != _PENDING:
            return
        self._state = _DONE
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            if context is None:
                fn(self)
            else:
                context.run(fn, self)

    def _schedule(self):
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            self._loop.call_soon(fn, self, context=context)
