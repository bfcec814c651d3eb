# SPDX-License-Identifier: MIT
"""
Connector and operations, in the shape of Dynamo's nixl_connect, on asyncio without polling:
the connection's fd is on the event loop (loop.add_reader), readable only when the daemon pushed
something, and xfer_dispatch() hands each op.changed to the operation it names. Active
operations are submitted with XFER_OP_NOWAIT, so no call waits for a remote owner.
"""
import asyncio
import base64
import ctypes
import enum
import errno
import json
import re
import select
import threading
import time
import weakref

from . import _clib
from ._clib import XferError, lib
from .memory import Descriptor, Pool


class OperationStatus(enum.IntEnum):
    """nixl_connect's OperationStatus; the values of enum xfer_state."""

    UNINITIALIZED = 0
    INITIALIZED = 1
    IN_PROGRESS = 2
    COMPLETE = 3
    CANCELLED = 4
    ERRORED = 5


_TERMINAL = (OperationStatus.COMPLETE, OperationStatus.CANCELLED, OperationStatus.ERRORED)


class _Event:
    """A snapshot of one op.changed (struct xfer_op_info is only valid during the callback)."""

    __slots__ = ("op", "state", "bytes", "error", "cause", "transport", "peer")

    def __init__(self, info):
        self.op = info.op
        self.state = OperationStatus(info.state)
        self.bytes = info.bytes
        self.error = info.error
        self.cause = info.cause.decode("utf-8", "replace")
        self.transport = info.transport.decode("ascii", "replace")
        self.peer = info.peer.decode("ascii", "replace")


_NODE = re.compile(rb'"node":\s*"([0-9a-f]{32})"')


def _metadata_node(metadata):
    """The owner's node id named in @metadata, or None when it does not say (the daemon then
    refuses it with the reason). Only the head is decoded: the node comes first, and this runs
    on every begin_read/begin_write."""
    if not metadata.startswith("xfer1."):
        return None
    try:
        head = metadata[6:166]
        m = _NODE.search(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except ValueError:
        return None
    return m.group(1).decode() if m else None


async def _within(fut, timeout):
    """Awaits @fut for at most @timeout seconds (asyncio.timeout where there is one: wait_for
    costs a task per call)."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            await fut
    else:
        await asyncio.wait_for(fut, timeout)


def _descriptors(descs):
    if isinstance(descs, (list, tuple)) and not (
        len(descs) == 2 and all(isinstance(v, int) for v in descs)
    ):
        out = [d if isinstance(d, Descriptor) else Descriptor(d) for d in descs]
    else:
        out = [descs if isinstance(descs, Descriptor) else Descriptor(descs)]
    if not out:
        raise XferError(errno.EINVAL, "an operation needs at least one descriptor")
    return out


class Operation:
    """
    One side of a transfer. ``status`` is an OperationStatus kept current by pushed events;
    ``error`` is the XferError of an ERRORED or CANCELLED end (errno name and the daemon's
    cause). Release it with ``release()`` or by leaving ``with op:`` / ``async with op:``;
    an operation that ended needs no release (the daemon forgot it at its end).
    """

    kind = None

    def __init__(self, connector, op_id, descs, status):
        self._connector = connector
        self.id = op_id
        self.descriptors = descs
        self.status = status
        self.error = None
        self.bytes = 0
        self.transport = ""
        self.peer = ""
        self._futures = []
        self._released = False

    def __repr__(self):
        return "<%s op %d %s>" % (type(self).__name__, self.id, self.status.name)

    # -- events --

    def _apply(self, ev):
        if self.status in _TERMINAL:
            return
        self.status = ev.state
        self.bytes = ev.bytes
        self.transport = ev.transport or self.transport
        self.peer = ev.peer or self.peer
        if ev.state not in _TERMINAL:
            return
        if ev.state == OperationStatus.COMPLETE:
            if self._lands_here():
                for d in self.descriptors:
                    d._stage_out()
        else:
            self.error = XferError(
                ev.error or errno.EIO, ev.cause or "operation %d ended %s" % (self.id, ev.state.name),
                op=self.id,
            )
        self._connector._op_ended(self)
        self._wake()

    def _end_locally(self, state, err, message):
        self._apply(
            type("E", (), dict(op=self.id, state=state, bytes=self.bytes, error=err, cause=message,
                               transport="", peer=""))()
        )

    def _lands_here(self):
        return False

    def _wake(self):
        futures, self._futures = self._futures, []
        for fut in futures:
            loop = fut.get_loop()
            if loop.is_closed():
                continue
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                if not fut.done():
                    fut.set_result(None)
            else:
                loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))

    # -- waiting --

    def done(self):
        return self.status in _TERMINAL

    def _result(self):
        if self.status == OperationStatus.COMPLETE:
            return self.status
        raise self.error

    async def wait_for_completion(self, timeout=None):
        """
        Waits (without polling) until the operation ends. Returns OperationStatus.COMPLETE;
        raises XferError for ERRORED or CANCELLED (also kept in ``error``), TimeoutError when
        @timeout seconds passed first (the operation goes on).
        """
        if not self.done():
            # Its end may already be waiting on the socket: taken now, it costs no turn of the
            # loop (one non-blocking read; never a poll loop).
            self._connector.dispatch()
        if not self.done():
            self._connector._attach_loop()
            fut = asyncio.get_running_loop().create_future()
            self._futures.append(fut)
            if timeout is None:
                await fut
            else:
                try:
                    await _within(fut, timeout)
                except (asyncio.TimeoutError, TimeoutError):
                    raise TimeoutError(
                        "op %d is still %s after %s s" % (self.id, self.status.name, timeout)
                    ) from None
        return self._result()

    def wait(self, timeout=None):
        """The blocking form of wait_for_completion(), for scripts without an event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("op %d is still %s after %s s" % (self.id, self.status.name, timeout))
            self._connector._wait_readable(left)
            self._connector.dispatch()
        return self._result()

    # -- ending --

    def cancel(self):
        """Cancels the operation (its peer is told); an ended one stays as it was."""
        if self.done() or self._released:
            return
        rc = self._connector._c_call(lib.xfer_cancel, self.id, raise_error=False)
        if rc < 0 and not self.done():
            raise self._connector._error(rc)
        # The end arrives as an event (delivered before xfer_cancel returned) or already came.
        if not self.done():
            self._end_locally(OperationStatus.CANCELLED, errno.ECANCELED, "cancelled by its owner")

    def release(self):
        """Forgets the operation, cancelling it first if it has not ended. Idempotent."""
        if self._released:
            return
        self._released = True
        if not self.done():
            rc = self._connector._c_call(lib.xfer_release, self.id, raise_error=False)
            if rc < 0 and rc != -errno.ENOENT and not self.done():
                raise self._connector._error(rc)
            if not self.done():
                self._end_locally(
                    OperationStatus.CANCELLED, errno.ECANCELED, "released by its owner before it ended"
                )
        self._connector._op_ended(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.release()


class PassiveOperation(Operation):
    def __init__(self, connector, op_id, descs, metadata):
        super().__init__(connector, op_id, descs, OperationStatus.INITIALIZED)
        self._metadata = metadata

    def metadata(self):
        """The string to hand to the peer (any channel). A capability: treat it as a secret."""
        return self._metadata


class ReadableOperation(PassiveOperation):
    kind = "readable"


class WritableOperation(PassiveOperation):
    kind = "writable"

    def _lands_here(self):
        return True


class ReadOperation(Operation):
    kind = "read"

    def _lands_here(self):
        return True


class WriteOperation(Operation):
    kind = "write"


class Connector:
    """
    A connection to the node's xferd (``socket``: its path; None: $XFERD_SOCKET, else
    /run/xferd/xferd.sock), named ``name`` in listings. Not for use from several threads at
    once without your own lock... it has one: calls are serialised.
    """

    def __init__(self, socket=None, name=None):
        self._lock = threading.RLock()
        self._c = ctypes.c_void_p()
        self._closed = False
        self._ops = {}
        self._early = {}
        self._creating = 0
        self._regions = {}  # block id -> region
        self._live_regions = set()
        self._dead_regions = []
        self._loop = None
        self._error_lost = None
        rc = lib.xfer_connect(
            socket.encode() if socket else None,
            (name or "xferd-python").encode(),
            ctypes.byref(self._c),
        )
        if rc < 0:
            raise XferError(
                -rc, "cannot connect to xferd at %s: %s" % (socket or "the default socket", _clib.strerror(rc))
            )
        me = weakref.ref(self)

        def on_event(c, info, arg):
            conn = me()
            if conn is not None:
                try:
                    conn._on_event(_Event(info.contents))
                except Exception as e:  # never into C: ctypes would only print it
                    conn._error_lost = e

        self._cb = _clib.EVENT_CB(on_event)
        lib.xfer_set_event_cb(self._c, self._cb, None)
        self.fd = lib.xfer_get_fd(self._c)
        self.client_id = lib.xfer_client_id(self._c)
        self.node = self._call_json("stats").get("node")

    # -- lifetime --

    async def initialize(self):
        """nixl_connect's step; connecting already happened. Returns self."""
        self._attach_loop()
        return self

    def close(self):
        """Closes the connection: the daemon ends this client's operations and regions."""
        with self._lock:
            if self._closed:
                return
            self._detach_loop()
            lib.xfer_close(self._c)
            self._closed = True
            self._c = ctypes.c_void_p()
        for op in list(self._ops.values()):
            op._end_locally(OperationStatus.CANCELLED, errno.ECANCELED, "its connector was closed")
        self._ops.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    async def __aenter__(self):
        self._attach_loop()
        return self

    async def __aexit__(self, *exc):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def fileno(self):
        return self.fd

    # -- calls into the library --

    def _error(self, rc):
        msg = lib.xfer_last_error(self._c).decode("utf-8", "replace") if self._c else ""
        return XferError(-rc, msg or _clib.strerror(rc))

    def _c_call(self, fn, *args, raise_error=True):
        with self._lock:
            if self._closed:
                raise XferError(errno.ENOTCONN, "the connector is closed")
            rc = fn(self._c, *args)
            if rc < 0 and raise_error:
                raise self._error(rc)
            return rc

    def _call_json(self, method, params=None):
        out = ctypes.c_void_p()
        self._c_call(
            lib.xfer_call, method.encode(), json.dumps(params).encode() if params else None,
            ctypes.byref(out),
        )
        return json.loads(_clib.take_string(out.value) or "{}")

    # -- events --

    def _on_event(self, ev):
        op = self._ops.get(ev.op)
        if op is not None:
            op._apply(ev)
        elif self._creating:
            # The op's end may come inside the call that creates it, before its object exists.
            self._early.setdefault(ev.op, []).append(ev)

    def _op_ended(self, op):
        if self._ops.get(op.id) is op and (op.done() or op._released):
            del self._ops[op.id]

    def dispatch(self):
        """Takes every event waiting on the connection (non-blocking). Returns how many."""
        with self._lock:
            if self._closed:
                return 0
            n = lib.xfer_dispatch(self._c)
        if n < 0:
            self._lost(n)
            return 0
        if self._error_lost is not None:
            e, self._error_lost = self._error_lost, None
            raise e
        return n

    def _lost(self, rc):
        """The daemon went away: every live operation ends ERRORED with why."""
        err = self._error(rc)
        self._detach_loop()
        for op in list(self._ops.values()):
            op._end_locally(OperationStatus.ERRORED, err.errno, "connection to xferd lost: " + err.message)

    def _wait_readable(self, timeout):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        p.poll(None if timeout is None else max(0, int(timeout * 1000) + 1))

    def _attach_loop(self):
        loop = asyncio.get_running_loop()
        if self._loop is loop or self._closed:
            return
        self._detach_loop()
        loop.add_reader(self.fd, self.dispatch)
        self._loop = loop

    def _detach_loop(self):
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.fd)
        self._loop = None

    # -- memory --

    def _region_for(self, block):
        region = self._regions.get(block.id)
        if region is not None:
            return region
        self._flush_dead_regions()
        out = ctypes.c_uint64()
        self._c_call(lib.xfer_region_register, block.fd, 0, 0, b"python", ctypes.byref(out))
        self._regions[block.id] = out.value
        self._live_regions.add(out.value)
        me = weakref.ref(self)
        block.gone_callbacks.append(lambda b: me() and me()._block_gone(b))
        return out.value

    def _region_live(self, region):
        return region in self._live_regions

    def _block_gone(self, block):
        # Called from a finalizer, at any point: deregistered at the next call, not here.
        region = self._regions.pop(block.id, None)
        if region is not None:
            self._live_regions.discard(region)
            self._dead_regions.append(region)

    def _flush_dead_regions(self):
        while self._dead_regions and not self._closed:
            region = self._dead_regions.pop()
            rc = self._c_call(lib.xfer_region_deregister, region, 0, raise_error=False)
            if rc == -errno.EBUSY:  # an operation of it has not ended: later
                self._dead_regions.append(region)
                return

    def pool(self, nbytes):
        """A registered Pool of ``nbytes`` (one region) to carve arrays and tensors from."""
        return Pool(self, nbytes)

    # -- operations --

    def _c_descs(self, descs):
        arr = (_clib.XferDesc * len(descs))()
        for i, d in enumerate(descs):
            arr[i].region, arr[i].offset, arr[i].length = d._desc_for(self)
        return arr

    def _opts(self, timeout, active):
        flags = _clib.XFER_OP_RELEASE_ON_END | (_clib.XFER_OP_NOWAIT if active else 0)
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        return _clib.XferOpOpts(ms, flags)

    def _adopt(self, op, early):
        self._ops[op.id] = op
        for ev in early.get(op.id, ()):
            op._apply(ev)
        return op

    def _create(self, fn, descs, timeout, extra_args, make):
        """Runs a creating call; events that arrive inside it wait for the op's object."""
        self._flush_dead_regions()
        arr = self._c_descs(descs)
        op_id = ctypes.c_uint64()
        with self._lock:
            self._creating += 1
            try:
                self._c_call(fn, *extra_args(arr, op_id))
            finally:
                self._creating -= 1
                early = self._early
                if not self._creating:
                    self._early = {}
        return self._adopt(make(op_id.value), early)

    def _passive(self, fn, cls, descs, timeout):
        descs = _descriptors(descs)
        if cls is ReadableOperation:
            for d in descs:
                d._stage_in()
        meta = ctypes.c_void_p()
        opts = self._opts(timeout, False)
        args = lambda arr, op_id: (arr, len(descs), ctypes.byref(opts), ctypes.byref(op_id), ctypes.byref(meta))
        return self._create(
            fn, descs, timeout, args, lambda i: cls(self, i, descs, _clib.take_string(meta.value))
        )

    def _active(self, fn, cls, metadata, descs, timeout):
        if not isinstance(metadata, str):
            raise XferError(errno.EINVAL, "metadata must be the str from the passive side's metadata()")
        descs = _descriptors(descs)
        if cls is WriteOperation:
            for d in descs:
                d._stage_in()
        opts = self._opts(timeout, True)
        local = _metadata_node(metadata) == self.node
        status = OperationStatus.IN_PROGRESS if local else OperationStatus.INITIALIZED
        args = lambda arr, op_id: (metadata.encode(), arr, len(descs), ctypes.byref(opts), ctypes.byref(op_id))
        return self._create(fn, descs, timeout, args, lambda i: cls(self, i, descs, status))

    # Blocking forms (scripts): each returns the operation at once.
    def readable(self, descs, timeout=None):
        return self._passive(lib.xfer_readable, ReadableOperation, descs, timeout)

    def writable(self, descs, timeout=None):
        return self._passive(lib.xfer_writable, WritableOperation, descs, timeout)

    def read(self, metadata, descs, timeout=None):
        return self._active(lib.xfer_read, ReadOperation, metadata, descs, timeout)

    def write(self, metadata, descs, timeout=None):
        return self._active(lib.xfer_write, WriteOperation, metadata, descs, timeout)

    # nixl_connect's names, on asyncio.
    async def create_readable(self, descs, timeout=None):
        """Offers @descs to be read once. Returns a ReadableOperation (its metadata() to send)."""
        self._attach_loop()
        return self.readable(descs, timeout)

    async def create_writable(self, descs, timeout=None):
        """Offers @descs to be written once. Returns a WritableOperation."""
        self._attach_loop()
        return self.writable(descs, timeout)

    async def begin_read(self, metadata, descs, timeout=None):
        """Reads readable @metadata's bytes into @descs. Returns a ReadOperation at once; a
        refused claim ends it ERRORED with the owner's reason."""
        self._attach_loop()
        return self.read(metadata, descs, timeout)

    async def begin_write(self, metadata, descs, timeout=None):
        """Writes @descs into writable @metadata's buffer. Returns a WriteOperation at once."""
        self._attach_loop()
        return self.write(metadata, descs, timeout)
