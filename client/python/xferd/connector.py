# SPDX-License-Identifier: MIT
"""
Connector and operations, in the shape of Dynamo's nixl_connect, on asyncio without polling:
the connection's fd is on the event loop (loop.add_reader), readable only when the daemon pushed
something, and xfer_dispatch() hands each op.changed to the operation it names. Active
operations are submitted with XFER_OP_NOWAIT, so no call waits for a remote owner. While other
tasks of the process make such calls (or other work is due), the async calls post their request
(xfer_post_op()) and suspend until the reply comes through the fd the loop watches, so several
tasks' round trips to the local daemon overlap instead of running one after the other on the
loop's thread.
"""
import asyncio
import base64
import ctypes
import enum
import itertools
import errno
import json
import re
import select
import threading
import time
import weakref

from . import _clib
from ._clib import XferError, lib
from . import window as _window
from .files import File
from .memory import Descriptor, Pool
from ._waiter import Waiter

_dispatch_end = lib.xfer_dispatch_end


class OperationStatus(enum.IntEnum):
    """nixl_connect's OperationStatus; the values of enum xfer_state."""

    UNINITIALIZED = 0
    INITIALIZED = 1
    IN_PROGRESS = 2
    COMPLETE = 3
    CANCELLED = 4
    ERRORED = 5


_TERMINAL = (OperationStatus.COMPLETE, OperationStatus.CANCELLED, OperationStatus.ERRORED)
# (module globals: looked up faster than the enum's). States below COMPLETE are live, COMPLETE
# and above are ends (enum xfer_state's order): `status < _COMPLETE` is "not ended yet".
_COMPLETE = OperationStatus.COMPLETE
_INITIALIZED, _IN_PROGRESS = OperationStatus.INITIALIZED, OperationStatus.IN_PROGRESS


class _Event:
    """A copy of one op.changed with struct xfer_op_info's fields (that struct is only valid
    during the callback): kept for an operation whose object does not exist yet, and made for
    ends that happen here (cancel, release, a lost connection)."""

    __slots__ = ("op", "state", "bytes", "error", "cause", "transport", "peer")

    def __init__(self, info):
        self.op = info.op
        self.state = int(info.state)
        self.bytes = info.bytes
        self.error = info.error
        self.cause = info.cause
        self.transport = info.transport
        self.peer = info.peer

    @classmethod
    def local(cls, op, state, err, message):
        ev = cls.__new__(cls)
        ev.op, ev.state, ev.bytes, ev.error = op.id, int(state), op.bytes, err
        ev.cause, ev.transport, ev.peer = message.encode(), b"", b""
        return ev


_STATES = tuple(OperationStatus)

_NODE = re.compile(rb'"node":\s*"([0-9a-f]{32})"')


def _metadata_node(metadata):
    """The owner's node id named in @metadata, or None when it does not say (the daemon then
    refuses it with the reason). Only the head is decoded: the node comes first, and this runs
    on every begin_read/begin_write; heads repeat (same owner, same kind), so they are cached."""
    if not metadata.startswith("xfer1."):
        return None
    head = metadata[6:166]
    node = _node_cache.get(head[:96])
    if node is None:
        try:
            m = _NODE.search(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
        except ValueError:
            return None
        node = m.group(1).decode() if m else ""
        if m and m.end() <= 72:  # the node lies in the 96 characters of the key
            if len(_node_cache) > 256:
                _node_cache.clear()
            _node_cache[head[:96]] = node
    return node or None


_node_cache = {}

# The tasks of this process that made create_* / begin_* calls and have not finished: id(task)
# -> task (each removed by its own done callback). While another task than the caller's is
# here, or other work of the loop is due to run, create_* / begin_* post their request instead
# of blocking the loop's thread (and those tasks) for the round trip. A task alone keeps the
# blocking round trip: posting costs it a wakeup of the loop per reply (scripts/BENCHMARKS.md,
# pyasync: 1 MiB pairings one at a time 215-275 -> 300-330 us). Counting tasks with operations
# in flight was not enough: with blocking calls, and ends already in the socket when awaited
# (a 1 MiB op.read's reply comes after its copy), the first of four tasks never yielded and
# made every pairing of the round alone, before the others ran at all.
_tasks = {}


_tasks_finished = 0  # tasks of _tasks finished so far: a change ends _others_seen's answer

# On a loop that shows no ready queue (uvloop), _others_due() asks asyncio.all_tasks(), which
# walks every task of the process: ~0.3 ms per 1,000 tasks, on every call of a server that
# holds many idle ones. Its "yes" is kept for _OTHERS_KEEP_S on that loop, or until a task of
# _tasks finishes (a burst of pairings ending leaves a lone one that should block again); a
# "no" is asked again (few tasks: a short walk, and new ones are seen at once).
_OTHERS_KEEP_S = 0.1
_others_seen = {"loop": None, "until": 0.0, "finished": 0}


def _others_due(loop):
    """Whether other work of @loop waits to run: asyncio's own loop keeps it in ``_ready``
    (callbacks and task steps due); on another loop (uvloop), whether it has other unfinished
    tasks (asyncio.all_tasks(), its "yes" kept a while: see _others_seen)."""
    ready = getattr(loop, "_ready", None)
    if ready is not None:
        return len(ready) > 0
    seen, now = _others_seen, loop.time()
    if seen["loop"] == id(loop) and seen["finished"] == _tasks_finished and now < seen["until"]:
        return True
    if len(asyncio.all_tasks(loop)) <= 1:
        return False
    seen.update(loop=id(loop), until=now + _OTHERS_KEEP_S, finished=_tasks_finished)
    return True


def _task_key(loop):
    """The running task's key in _tasks, entered there on its first call."""
    task = asyncio.current_task(loop)
    key = id(task)
    if key not in _tasks and task is not None:
        _tasks[key] = task
        task.add_done_callback(_task_done)
    return key


def _task_done(task):
    global _tasks_finished
    _tasks.pop(id(task), None)
    _tasks_finished += 1


class _Request:
    """A posted create_* / begin_* whose reply has not been delivered: what the reply needs to
    make the operation, and the Waiter its task is suspended on."""

    __slots__ = ("method", "cls", "descs", "status", "waiter", "op", "error")

    def __init__(self, method, cls, descs, status, waiter):
        self.method, self.cls, self.descs, self.status = method, cls, descs, status
        self.waiter = waiter
        self.op = self.error = None


async def _within(fut, timeout):
    """Awaits @fut for at most @timeout seconds (asyncio.timeout where there is one: wait_for
    costs a task per call)."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            await fut
    else:
        await asyncio.wait_for(fut, timeout)


def _descriptors(descs):
    """@descs (one or a list of Descriptors, Files, or what Descriptor() takes) as a list."""
    if isinstance(descs, (list, tuple)) and not (
        len(descs) == 2 and all(isinstance(v, int) for v in descs)
    ):
        out = [d if isinstance(d, (Descriptor, File)) else Descriptor(d) for d in descs]
    else:
        out = [descs if isinstance(descs, (Descriptor, File)) else Descriptor(descs)]
    if not out:
        raise XferError(errno.EINVAL, "an operation needs at least one descriptor")
    return out


class Operation(_window._ClosedOnExit):
    """
    One side of a transfer. ``status`` is an OperationStatus kept current by pushed events;
    ``error`` is the XferError of an ERRORED or CANCELLED end (errno name and the daemon's
    cause). Release it with ``release()`` or by leaving ``with op:`` / ``async with op:``;
    an operation that ended needs no release (the daemon forgot it at its end).
    """

    kind = None
    # Until an event or a release says otherwise (class attributes: an operation is made per
    # pairing, and four stores fewer per object are CPU the pairing's path does not spend).
    error = None
    bytes = 0
    transport = ""
    peer = ""
    _released = False

    def __init__(self, connector, op_id, descs, status):
        self._connector = connector
        self.id = op_id
        self.descriptors = descs
        self._status = status
        self._futures = []

    @property
    def status(self):
        """The OperationStatus, current: events waiting on the connection are taken first."""
        if self._status not in _TERMINAL:
            self._connector._refresh()
        return self._status

    def __repr__(self):
        return "<%s op %d %s>" % (type(self).__name__, self.id, self._status.name)

    # -- events --

    def _apply(self, info):
        """One op.changed: @info is the library's struct xfer_op_info or an _Event (the same
        fields). Runs for every event of every operation: kept short."""
        if self._status >= _COMPLETE:
            return
        state = self._status = _STATES[info.state]
        self.bytes = info.bytes
        if not self.transport and info.transport:
            self.transport = info.transport.decode("ascii", "replace")
            self.peer = info.peer.decode("ascii", "replace")
        if state < _COMPLETE:
            return
        if state is _COMPLETE:
            if self._LANDS_HERE:
                for d in self.descriptors:
                    if d.staged:
                        d._stage_out()
        else:
            cause = info.cause.decode("utf-8", "replace")
            self.error = XferError(
                info.error or errno.EIO, cause or "operation %d ended %s" % (self.id, state.name),
                op=self.id,
            )
        ops = self._connector._ops
        if ops.get(self.id) is self:
            del ops[self.id]
        if self._futures:
            self._wake()

    def _end_locally(self, state, err, message):
        self._apply(_Event.local(self, state, err, message))

    _LANDS_HERE = False  # the bytes land in this side's descriptors (staged copies go out)

    def _wake(self):
        futures, self._futures = self._futures, []
        self._connector._waiting -= len(futures)
        direct = self._connector._resume_here
        # In the reader callback the running loop is the one it is on (no getpid() to ask).
        running = self._connector._loop if direct is not None else asyncio._get_running_loop()
        for fut in futures:
            loop = fut.get_loop()
            if running is loop:  # (a running loop is not closed)
                if fut.done():
                    continue
                if direct is not None:  # inside the reader callback: resumed after dispatch
                    direct.append(fut)
                else:
                    fut.set_result(None)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))

    # -- waiting --

    def done(self):
        return self.status in _TERMINAL

    def _result(self):
        if self._status is _COMPLETE:
            return self._status
        raise self.error

    async def wait_for_completion(self, timeout=None):
        """
        Waits (without polling) until the operation ends. Returns OperationStatus.COMPLETE;
        raises XferError for ERRORED or CANCELLED (also kept in ``error``), TimeoutError when
        @timeout seconds passed first (the operation goes on).
        """
        conn = self._connector
        if self._status < _COMPLETE:
            # Its end may already be waiting on the socket: taken now, it costs no turn of the
            # loop (non-blocking reads up to it, others' ends met on the way applied too; never
            # a poll loop).
            while conn._dispatch_end() and self._status < _COMPLETE:
                pass
        if self._status < _COMPLETE:
            loop = asyncio.get_running_loop()
            if not conn._reading or conn._loop is not loop:
                conn._attach_loop(loop)
            fut = Waiter(loop)
            self._futures.append(fut)
            conn._waiting += 1
            if timeout is None:
                await fut
            else:
                try:
                    await _within(fut, timeout)
                except (asyncio.TimeoutError, TimeoutError):
                    raise TimeoutError(
                        "op %d is still %s after %s s" % (self.id, self._status.name, timeout)
                    ) from None
        return self._result()

    def wait(self, timeout=None):
        """The blocking form of wait_for_completion(), for scripts without an event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("op %d is still %s after %s s" % (self.id, self._status.name, timeout))
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

    def _on_exit(self):  # (leaving with / async with: _window._ClosedOnExit)
        self.release()


class PassiveOperation(Operation):
    def __init__(self, connector, op_id, descs, metadata):
        Operation.__init__(self, connector, op_id, descs, _INITIALIZED)
        self._metadata = metadata

    def metadata(self):
        """The string to hand to the peer (any channel). A capability: treat it as a secret."""
        return self._metadata


class ReadableOperation(PassiveOperation):
    kind = "readable"


class WritableOperation(PassiveOperation):
    kind = "writable"

    _LANDS_HERE = True


class ReadOperation(Operation):
    kind = "read"

    _LANDS_HERE = True


class WriteOperation(Operation):
    kind = "write"


_serials = itertools.count(1)


class GetOperation(Operation):
    """A get on a RemoteWindow (``window``): the window's bytes into your descriptors."""

    kind = "get"

    def __init__(self, connector, op_id, descs, status, window=None):
        super().__init__(connector, op_id, descs, status)
        self.window = window

    _LANDS_HERE = True


class PutOperation(Operation):
    """A put on a RemoteWindow (``window``): your descriptors' bytes into the window."""

    kind = "put"

    def __init__(self, connector, op_id, descs, status, window=None):
        super().__init__(connector, op_id, descs, status)
        self.window = window


class Connector:
    """
    A connection to the node's xferd (``socket``: its path; None: $XFERD_SOCKET, else
    /run/xferd/xferd.sock), named ``name`` in listings. Not for use from several threads at
    once without your own lock... it has one: calls are serialised.

    ``posting``: how the async create_* / begin_* calls reach the daemon. "auto" (default):
    posted (the task suspends until the reply, the loop runs other tasks meanwhile) while
    another unfinished task of the process has made such calls or other work of the loop is
    due, else one blocking round trip (cheaper for a task alone); "always"; "never" (every call
    blocks the loop's thread for its round trip, as before).
    """

    POSTING = ("auto", "always", "never")

    def __init__(self, socket=None, name=None, posting="auto"):
        if posting not in self.POSTING:
            raise XferError(errno.EINVAL, "posting is one of %s, not %r" % (", ".join(self.POSTING), posting))
        self.posting = posting
        self._post_always, self._post_never = posting == "always", posting == "never"
        self._pending = {}  # request id -> _Request: posted, its reply not delivered yet
        self._replied_max = 0  # the highest op id a delivered reply to a posted request named
        self._lock = threading.RLock()
        self._serial = next(_serials)  # unlike id(), never reused: keys Descriptor's caches
        self._c = ctypes.c_void_p()
        self._closed = False
        self._ops = {}
        self._early = {}
        self._creating = 0
        self._regions = {}  # block id -> region
        self._live_regions = set()
        self._dead_regions = []
        self._loop = None
        self._waiting = 0  # futures of this connector's operations not yet woken
        self._reading = False  # the fd is on self._loop
        self._in_dispatch = False
        self._resume_here = None  # in _on_readable: the Waiters its dispatch() ended
        self._windows = {}  # window id -> Window this connector owns
        self._handles = {}  # handle id -> RemoteWindow this connector opened
        self._error_lost = None
        self._end = _clib.XferOpInfo()  # xfer_dispatch_end()'s out-parameter, reused
        self._end_ref = ctypes.byref(self._end)
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

        def to_connector(method):
            """A ctypes callback handing the struct it points at to this connector's @method
            (by name: looked up per call) while it lives; an exception is kept for the call
            that dispatched, never raised into C (ctypes would only print it)."""

            def cb(c, ptr, arg):
                conn = me()
                if conn is not None:
                    try:
                        getattr(conn, method)(ptr[0])
                    except Exception as e:
                        conn._error_lost = e

            return cb

        self._cb = _clib.EVENT_CB(to_connector("_on_event"))
        self._wcb = _clib.WINDOW_CB(to_connector("_on_window_event"))
        self._rcb = _clib.REPLY_CB(to_connector("_on_reply"))
        lib.xfer_set_event_cb(self._c, self._cb, None)
        lib.xfer_set_window_cb(self._c, self._wcb, None)
        lib.xfer_set_reply_cb(self._c, self._rcb, None)
        self.fd = lib.xfer_get_fd(self._c)
        self.client_id = lib.xfer_client_id(self._c)
        self.node = self._call_json("stats").get("node")

    # -- lifetime --

    async def initialize(self):
        """nixl_connect's step; connecting already happened. Returns self."""
        self._use_loop()
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
        self._fail_requests(errno.ENOTCONN, "the connector was closed before xferd answered %s")
        for op in list(self._ops.values()):
            op._end_locally(OperationStatus.CANCELLED, errno.ECANCELED, "its connector was closed")
        self._ops.clear()
        for win in list(self._windows.values()):
            win.closed = True
            win._notified_close()
        self._windows.clear()
        for rw in list(self._handles.values()):
            rw._revoked(errno.ECANCELED, "its connector was closed")
        self._handles.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    async def __aenter__(self):
        self._use_loop()
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

    def _on_event(self, info):
        """One op.changed (struct xfer_op_info, valid during this call, or an _Event)."""
        op = self._ops.get(info.op)
        if op is not None:
            op._apply(info)
        elif self._creating or (self._pending and info.op > self._replied_max):
            # The op's end may come inside the call that creates it, or before the reply to its
            # posted request, before its object exists. Not an op named by a reply delivered
            # already (the daemon numbers ops in the order of its replies, which come in order):
            # that one was released, and a connector that always has requests outstanding
            # would keep such events forever.
            self._early.setdefault(info.op, []).append(_Event(info))

    def _on_reply(self, reply):
        """The reply to a posted request (struct xfer_reply, valid during this call): makes
        its operation (with the events that came before it) or keeps the refusal, and resumes
        the task that posted it. A task cancelled meanwhile gets nothing: its op is released."""
        self._replied_max = max(self._replied_max, reply.op)
        r = self._pending.pop(reply.request, None)
        if r is None:
            return
        if reply.error:
            msg = (reply.message or b"").decode("utf-8", "replace")
            r.error = XferError(-reply.error, msg or _clib.strerror(reply.error))
        else:
            if r.status is None:  # passive: its metadata is in the reply
                op = r.cls(self, reply.op, r.descs, (reply.metadata or b"").decode())
            else:
                op = r.cls(self, reply.op, r.descs, r.status)
            self._adopt(op, self._early)
            if r.waiter.cancelled():
                op.release()
            else:
                r.op = op
        if not self._pending and not self._creating:
            self._early = {}
        self._wake_request(r.waiter)

    def _wake_request(self, waiter):
        if waiter.done():
            return
        if self._resume_here is not None:  # inside the reader callback: resumed after dispatch
            self._resume_here.append(waiter)
        else:
            waiter.set_result(None)

    def _fail_requests(self, err, message):
        """Every posted request still unanswered fails with @err and @message (%s: its
        method): the connection that would carry its reply is gone."""
        pending, self._pending = self._pending, {}
        for r in pending.values():
            r.error = XferError(err, message % r.method)
            self._wake_request(r.waiter)

    def _on_window_event(self, ev):
        if ev.type == _clib.WINDOW_NOTIFIED:
            win = self._windows.get(ev.window)
            if win is not None:
                win._notified(_window.Notification(
                    ev.tag, ev.bytes, ev.offset, "get" if ev.kind == _clib.KIND_GET else "put",
                    ev.peer.decode("ascii", "replace"), ev.handle))
        elif ev.type == _clib.WINDOW_CLOSED:
            rw = self._handles.pop(ev.window, None)
            if rw is not None:
                rw._revoked(-ev.error, ev.cause.decode("utf-8", "replace"))

    def _op_ended(self, op):
        if self._ops.get(op.id) is op and (op._status in _TERMINAL or op._released):
            del self._ops[op.id]

    def dispatch(self):
        """Takes every event waiting on the connection (non-blocking). Returns how many."""
        with self._lock:
            if self._closed or self._in_dispatch:
                return 0
            self._in_dispatch = True
            try:
                n = lib.xfer_dispatch(self._c)
            finally:
                self._in_dispatch = False
        if n < 0:
            self._lost(n)
            return 0
        if self._error_lost is not None:
            e, self._error_lost = self._error_lost, None
            raise e
        return n

    def _dispatch_end(self):
        """dispatch() up to the first operation end, which it applies here (xfer_dispatch_end:
        no callback trampoline for it, and no read that only finds the socket empty before its
        waiter resumes). What arrived after it stays in the socket, readable, for the next call
        or the loop's next turn. Returns True when it took an end."""
        with self._lock:
            if self._closed or self._in_dispatch:
                return False
            self._in_dispatch = True
            try:
                n = _dispatch_end(self._c, self._end_ref)
                if n == 1:
                    self._on_event(self._end)
            finally:
                self._in_dispatch = False
        if n < 0:
            self._lost(n)
        elif self._error_lost is not None:
            e, self._error_lost = self._error_lost, None
            raise e
        return n == 1

    def _refresh(self):
        """Takes waiting events unless the loop does it anyway (or we are inside delivery)."""
        if not self._reading and not self._closed and not self._in_dispatch:
            self.dispatch()

    def _lost(self, rc):
        """The daemon went away: every live operation ends ERRORED with why."""
        err = self._error(rc)
        self._detach_loop()
        self._fail_requests(err.errno, "connection to xferd lost before it answered %s: "
                            + err.message.replace("%", "%%"))
        for op in list(self._ops.values()):
            op._end_locally(OperationStatus.ERRORED, err.errno, "connection to xferd lost: " + err.message)

    def _wait_readable(self, timeout):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        p.poll(None if timeout is None else max(0, int(timeout * 1000) + 1))

    # The fd is on the loop only while something needs events pushed: an awaited operation or
    # window notification, an owned window, or many live operations (their events must not
    # pile up unread: the daemon drops a client 4096 packets behind). Otherwise events wait in
    # the socket and are taken by the next call, await or look at ``status``: a connector
    # nobody waits on is not woken for events nobody waits for (the passive side's
    # IN_PROGRESS while the loop waits for the active side cost a wakeup per transfer).
    _MANY_OPS = 512

    def _use_loop(self, loop=None):
        """Remembers the running loop (the async calls run on it; @loop: it, already asked)."""
        loop = loop or asyncio.get_running_loop()
        if self._loop is not loop and not self._closed:
            self._detach_loop()
            self._loop = loop

    def _attach_loop(self, loop=None):
        """Puts the fd on the running loop (@loop: it, already asked): someone waits for an
        event."""
        self._use_loop(loop)
        if not self._reading and not self._closed:
            self._loop.add_reader(self.fd, self._on_readable)
            self._reading = True

    def _detach_loop(self):
        if self._reading and self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.fd)
        self._reading = False
        self._loop = None

    def _needs_reader(self):
        return (self._waiting > 0 or self._pending or self._windows
                or len(self._ops) >= self._MANY_OPS)

    def _on_readable(self):
        # Only a wakeup that nobody waited for takes the fd off the loop: one that ended a wait
        # leaves it on for the next (add_reader/remove_reader per operation cost more).
        idle = not self._needs_reader()
        ended = self._resume_here = []
        try:
            self._dispatch_end()
        finally:
            self._resume_here = None
            self._resume_tasks(ended)  # also when dispatch() raised: they were taken off ops
        if idle and self._reading and not self._needs_reader():
            self._loop.remove_reader(self.fd)
            self._reading = False

    def _resume_tasks(self, waiters):
        """Resumes the tasks waiting on @waiters now, in this reader callback (no task runs
        here and the library is not inside xfer_dispatch()): not a turn of the loop later (see
        _waiter.py). A task that raises keeps its exception; it does not reach this callback."""
        for w in waiters:
            w.end_here()

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
        if len(descs) == 1:
            return descs[0]._c_array(self)
        arr = (_clib.XferDesc * len(descs))()
        for i, d in enumerate(descs):
            arr[i].region, arr[i].offset, arr[i].length = d._desc_for(self)
        return arr

    _OPTS = {
        (active, end_only): _clib.XferOpOpts(0, _clib.op_flags(active, end_only))
        for active in (False, True)
        for end_only in (False, True)
    }
    _OPTS_REFS = {k: ctypes.byref(v) for k, v in _OPTS.items()}  # (byref made once)

    def _opts(self, timeout, active, end_only):
        """A pointer to the struct xfer_op_opts of an operation (for the C call)."""
        if type(end_only) is not bool:
            raise XferError(errno.EINVAL, "end_only must be True or False, not %r" % (end_only,))
        if timeout is None:
            return self._OPTS_REFS[active, end_only]  # read-only for the library: shared
        return ctypes.byref(
            _clib.XferOpOpts(max(1, int(timeout * 1000)), _clib.op_flags(active, end_only)))

    def _creating_call(self, fn, args, raise_error=True):
        """Runs @fn(c, *@args), a call that makes operations, keeping the events that arrive
        inside it for operations whose objects do not exist yet. Returns (rc, those events by
        op id). (_c_call's work, under one hold of the lock: this runs twice per pairing.)"""
        if self._dead_regions:
            self._flush_dead_regions()
        with self._lock:
            if self._closed:
                raise XferError(errno.ENOTCONN, "the connector is closed")
            self._creating += 1
            try:
                rc = fn(self._c, *args)
            finally:
                self._creating -= 1
                early = self._early
                if not self._creating and early and not self._pending:
                    self._early = {}
            if rc < 0 and raise_error:
                raise self._error(rc)
        return rc, early

    def _adopt(self, op, early):
        self._ops[op.id] = op
        if early:
            for ev in early.pop(op.id, ()):
                op._apply(ev)
        return op

    @staticmethod
    def _op_descs(descs, source):
        """The Descriptors of an operation; @source: its bytes leave from them, so those that
        stage (copy=True) take the caller's bytes in first."""
        descs = [descs] if type(descs) is Descriptor else _descriptors(descs)
        if source:
            for d in descs:
                if d.staged:
                    d._stage_in()
        return descs

    @classmethod
    def _passive_descs(cls, op_cls, descs):
        return cls._op_descs(descs, op_cls is ReadableOperation)

    def _passive(self, fn, cls, descs, timeout, end_only):
        descs = self._passive_descs(cls, descs)
        meta = ctypes.c_void_p()
        op_id = ctypes.c_uint64()
        _, early = self._creating_call(fn, (
            self._c_descs(descs), len(descs), self._opts(timeout, False, end_only),
            ctypes.byref(op_id), ctypes.byref(meta)))
        return self._adopt(cls(self, op_id.value, descs, _clib.take_string(meta.value)), early)

    @classmethod
    def _active_descs(cls, op_cls, metadata, descs):
        if type(metadata) is not str:
            raise XferError(errno.EINVAL, "metadata must be the str from the passive side's metadata()")
        return cls._op_descs(descs, op_cls is WriteOperation)

    def _active(self, fn, cls, metadata, descs, timeout, end_only):
        descs = self._active_descs(cls, metadata, descs)
        op_id = ctypes.c_uint64()
        _, early = self._creating_call(fn, (
            metadata.encode(), self._c_descs(descs), len(descs),
            self._opts(timeout, True, end_only), ctypes.byref(op_id)))
        # (After the call: nothing but what the request needs runs before it is sent.)
        status = _IN_PROGRESS if _metadata_node(metadata) == self.node else _INITIALIZED
        return self._adopt(cls(self, op_id.value, descs, status), early)

    # Blocking forms (scripts): each returns the operation at once. end_only=True: the daemon
    # pushes only the operation's end, never IN_PROGRESS (XFER_OP_END_ONLY): one event (a
    # wakeup and a parse) less per operation for a client that only awaits ends; ``status``
    # then goes from INITIALIZED (or IN_PROGRESS, a local claim) straight to its end.
    def readable(self, descs, timeout=None, end_only=False):
        return self._passive(lib.xfer_readable, ReadableOperation, descs, timeout, end_only)

    def writable(self, descs, timeout=None, end_only=False):
        return self._passive(lib.xfer_writable, WritableOperation, descs, timeout, end_only)

    def read(self, metadata, descs, timeout=None, end_only=False):
        return self._active(lib.xfer_read, ReadOperation, metadata, descs, timeout, end_only)

    def write(self, metadata, descs, timeout=None, end_only=False):
        return self._active(lib.xfer_write, WriteOperation, metadata, descs, timeout, end_only)

    def _posts(self, loop):
        """Whether an async create_* / begin_* posts its request now: with posting "auto",
        while another unfinished task of this process has made such calls, or other work of
        @loop is due (see _tasks)."""
        if self._post_never:
            return False
        return (self._post_always or len(_tasks) > (_task_key(loop) in _tasks)
                or _others_due(loop))

    async def _posted(self, loop, kind, cls, metadata, descs, opts, status):
        """Posts one creating request (xfer_post_op()) and suspends until its reply. Returns
        the operation; raises the refusal, or the connection's loss or close. Cancelled before
        the reply: the op it makes is released when the reply comes (or here, if it came)."""
        c_descs = self._c_descs(descs)
        req = ctypes.c_uint64()
        self._c_call(lib.xfer_post_op, kind, metadata, c_descs, len(descs), opts, ctypes.byref(req))
        r = self._pending[req.value] = _Request("op." + cls.kind, cls, descs, status, Waiter(loop))
        if not self._reading or self._loop is not loop:
            self._attach_loop(loop)
        try:
            await r.waiter
        except BaseException:
            if r.op is not None:  # the reply came, the task did not resume: nobody holds it
                r.op.release()
            raise
        if r.error is not None:
            raise r.error
        return r.op

    async def _create(self, loop, kind, cls, descs, timeout, end_only):
        """create_* posted (_posts() said so)."""
        descs = self._passive_descs(cls, descs)
        return await self._posted(loop, kind, cls, None, descs,
                                  self._opts(timeout, False, end_only), None)

    async def _begin(self, loop, kind, cls, metadata, descs, timeout, end_only):
        """begin_* posted (_posts() said so)."""
        descs = self._active_descs(cls, metadata, descs)
        status = _IN_PROGRESS if _metadata_node(metadata) == self.node else _INITIALIZED
        return await self._posted(loop, kind, cls, metadata.encode(), descs,
                                  self._opts(timeout, True, end_only), status)

    # nixl_connect's names, on asyncio. Each posts its request while other tasks work
    # (``posting``), else makes one round trip to the local daemon on the loop's thread (inline
    # here: a coroutine more per call is CPU a lone pairing's path would spend).
    async def create_readable(self, descs, timeout=None, end_only=False):
        """Offers @descs to be read once. Returns a ReadableOperation (its metadata() to send).
        end_only=True: no IN_PROGRESS event, only the end (see readable())."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._use_loop(loop)
        if self._posts(loop):
            return await self._create(loop, _clib.KIND_READABLE, ReadableOperation, descs,
                                      timeout, end_only)
        return self._passive(lib.xfer_readable, ReadableOperation, descs, timeout, end_only)

    async def create_writable(self, descs, timeout=None, end_only=False):
        """Offers @descs to be written once. Returns a WritableOperation."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._use_loop(loop)
        if self._posts(loop):
            return await self._create(loop, _clib.KIND_WRITABLE, WritableOperation, descs,
                                      timeout, end_only)
        return self._passive(lib.xfer_writable, WritableOperation, descs, timeout, end_only)

    async def begin_read(self, metadata, descs, timeout=None, end_only=False):
        """Reads readable @metadata's bytes into @descs. Returns a ReadOperation at once; a
        refused claim ends it ERRORED with the owner's reason (with end_only=True too)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._use_loop(loop)
        if self._posts(loop):
            return await self._begin(loop, _clib.KIND_READ, ReadOperation, metadata, descs,
                                     timeout, end_only)
        return self._active(lib.xfer_read, ReadOperation, metadata, descs, timeout, end_only)

    async def begin_write(self, metadata, descs, timeout=None, end_only=False):
        """Writes @descs into writable @metadata's buffer. Returns a WriteOperation at once."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._use_loop(loop)
        if self._posts(loop):
            return await self._begin(loop, _clib.KIND_WRITE, WriteOperation, metadata, descs,
                                     timeout, end_only)
        return self._active(lib.xfer_write, WriteOperation, metadata, descs, timeout, end_only)

    # -- windows (PROTOCOL.md §5.1) --

    def window(self, desc, access="readwrite", openers="many", max_pending=_window.Window.MAX_PENDING):
        """The blocking form of create_window()."""
        acc, flags = _window.access_value(access), _window.openers_value(openers)
        max_pending = _window.max_pending_value(max_pending)
        descs = _descriptors(desc)
        if len(descs) != 1:
            raise XferError(errno.EINVAL, "a window is over one Descriptor, not %d" % len(descs))
        desc = descs[0]
        region, offset, length = desc._desc_for(self)
        wid, meta = ctypes.c_uint64(), ctypes.c_void_p()
        self._c_call(lib.xfer_window_create, region, offset, length, acc, flags,
                     ctypes.byref(wid), ctypes.byref(meta))
        win = _window.Window(self, wid.value, desc, access, openers, _clib.take_string(meta.value),
                             max_pending)
        self._windows[win.id] = win
        return win

    async def create_window(self, desc, access="readwrite", openers="many",
                            max_pending=_window.Window.MAX_PENDING):
        """
        Exposes @desc (one Descriptor: memory or a File) as a window: ``access`` "read"
        (openers get), "write" (openers put) or "readwrite"; ``openers`` "one" (one at a time)
        or "many" (up to 64). Returns a Window: its metadata() goes to the openers, iterating
        it yields the Notifications of tagged gets and puts. At most ``max_pending`` of them
        wait untaken: beyond, the oldest is dropped and counted in ``Window.dropped`` (with an
        XferNotificationsDropped warning, once).
        """
        self._use_loop()
        win = self.window(desc, access, openers, max_pending)
        self._attach_loop()  # notifications are pushed: they must not pile up unread
        return win

    def remote_window(self, metadata):
        """The blocking form of open_window()."""
        if type(metadata) is not str:
            raise XferError(errno.EINVAL, "metadata must be the str from the owner's Window.metadata()")
        handle, length, access = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int()
        self._c_call(lib.xfer_window_open, metadata.encode(), ctypes.byref(handle),
                     ctypes.byref(length), ctypes.byref(access))
        rw = _window.RemoteWindow(self, handle.value, length.value,
                                  _window.ACCESS_NAMES.get(access.value, "?"))
        self._handles[rw.handle] = rw
        return rw

    async def open_window(self, metadata):
        """Opens the window @metadata names (its owner accepts or refuses: XferError with
        EACCES, EBUSY, ENOENT, ESTALE ...). Returns a RemoteWindow."""
        self._use_loop()
        return self.remote_window(metadata)

    _WINDOW_OPTS = _clib.XferOpOpts(0, _clib.XFER_OP_RELEASE_ON_END)

    def _window_opts(self, timeout):
        if timeout is None:
            return self._WINDOW_OPTS
        return _clib.XferOpOpts(max(1, int(timeout * 1000)), _clib.XFER_OP_RELEASE_ON_END)

    @staticmethod
    def _offset(offset):
        if type(offset) is not int or offset < 0:
            raise XferError(errno.EINVAL, "a window offset is an int >= 0, not %r" % (offset,))
        return offset

    # get and put differ only in these: the call, the kind in a batch, the operation's class.
    _WINDOW_KINDS = {
        "get": (lib.xfer_get, _clib.KIND_GET, GetOperation),
        "put": (lib.xfer_put, _clib.KIND_PUT, PutOperation),
    }

    def _window_descs(self, kind, descs):
        """@descs of a @kind ("get" or "put") as a list and its C array; a put's staged
        copies are filled first."""
        descs = [descs] if type(descs) is Descriptor else _descriptors(descs)
        if kind == "put":
            for d in descs:
                d._stage_in()
        return descs, self._c_descs(descs)

    def _window_op(self, rw, kind, offset, descs, tag, timeout):
        """One op.get or op.put (@kind "get" or "put") on handle @rw. Returns its operation."""
        fn, _, cls = self._WINDOW_KINDS[kind]
        offset = self._offset(offset)
        descs, c_descs = self._window_descs(kind, descs)
        op_id = ctypes.c_uint64()
        _, early = self._creating_call(fn, (
            rw.handle, offset, c_descs, len(descs), tag,
            ctypes.byref(self._window_opts(timeout)), ctypes.byref(op_id)))
        return self._adopt(cls(self, op_id.value, descs, OperationStatus.IN_PROGRESS, rw), early)

    def _window_batch(self, rw, entries, timeout):
        """op.batch of @entries on handle @rw, 1024 a request. Returns the operations."""
        entries = list(entries)
        ops = []
        for first in range(0, len(entries), _window.MAX_BATCH):
            ops += self._window_batch_chunk(
                rw, entries[first:first + _window.MAX_BATCH], first, ops, timeout)
        return ops

    def _window_batch_chunk(self, rw, entries, base, made_before, timeout):
        if not entries:
            raise XferError(errno.EINVAL, "a batch needs at least one entry")
        arr = _window.batch_array(len(entries))
        keep, plan = [], []
        for k, entry in enumerate(entries):
            if len(entry) not in (3, 4) or entry[0] not in self._WINDOW_KINDS:
                raise XferError(errno.EINVAL, 'batch entry %d is not ("get" | "put", offset, '
                                "descs[, notify]): %r" % (base + k, entry))
            _, c_kind, cls = self._WINDOW_KINDS[entry[0]]
            descs, c_descs = self._window_descs(entry[0], entry[2])
            tag = _window.tag_bytes(entry[3] if len(entry) == 4 else None)
            keep.append((c_descs, tag))  # alive until the call returns
            o = arr[k]
            o.kind, o.handle, o.offset = c_kind, rw.handle, self._offset(entry[1])
            o.descs = ctypes.cast(c_descs, ctypes.POINTER(_clib.XferDesc))
            o.n, o.tag = len(descs), tag
            plan.append((cls, descs))
        done = ctypes.c_size_t()
        rc, early = self._creating_call(
            lib.xfer_batch, (arr, len(entries), ctypes.byref(self._window_opts(timeout)),
                             ctypes.byref(done), None), raise_error=False)
        ops = [self._adopt(plan[k][0](self, arr[k].op, plan[k][1], OperationStatus.IN_PROGRESS, rw), early)
               for k in range(done.value)]
        if rc < 0:
            e = self._error(rc)
            e.ops = made_before + ops  # posted before the refused entry: they go on
            e.failed = base + done.value  # the daemon's message names it too
            raise e
        return ops
