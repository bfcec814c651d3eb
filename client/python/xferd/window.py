# SPDX-License-Identifier: MIT
"""
Windows (proto/PROTOCOL.md §5.1), in the shape engines expect from NIXL: the owner exposes a
range once (``await connector.create_window(desc, access=..., openers=...)``) and hands its
``metadata()`` to peers; a peer opens it once (``await connector.open_window(metadata)``) and
then gets and puts as often as it likes, with an optional notify tag that the owner receives,
once and in order, when the bytes are in place (``async for note in window``).
"""
import asyncio
import collections
import errno
import time
import warnings

from . import _clib
from ._clib import XferError, lib

ACCESS = {"read": 1, "write": 2, "readwrite": 3}
ACCESS_NAMES = {v: k for k, v in ACCESS.items()}
OPENERS = {"many": 0, "one": _clib.XFER_WINDOW_ONE_OPENER}
MAX_TAG = 256  # XP_MAX_TAG
MAX_BATCH = 1024  # XP_MAX_BATCH


class XferNotificationsDropped(UserWarning):
    """A Window's owner let more notifications wait than its ``max_pending``: the oldest went
    (counted in ``Window.dropped``). Said once per window."""


class Notification(collections.namedtuple("Notification", "tag bytes offset kind peer handle")):
    """One tagged get or put that completed on a window: ``tag`` (bytes, as the opener gave
    it), ``bytes`` moved at ``offset`` of the window, ``kind`` ("get" or "put"), ``peer`` (the
    opener's node id, or "local") and ``handle`` (the opener's handle id on its node)."""


def tag_bytes(notify):
    """@notify (bytes or str; None: no tag) as the NUL-free UTF-8 bytes the daemon carries."""
    if notify is None:
        return None
    raw = notify.encode() if isinstance(notify, str) else bytes(notify)
    if not raw or len(raw) > MAX_TAG or b"\0" in raw:
        raise XferError(
            errno.EINVAL, "a notify tag is 1 to %d bytes without NUL (got %d)" % (MAX_TAG, len(raw))
        )
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise XferError(errno.EINVAL, "a notify tag must be UTF-8 (the protocol carries text)") from None
    return raw


class _ClosedOnExit:
    """``with`` and ``async with`` end the object on the way out: ``_on_exit()``, its
    ``close()`` unless a class says otherwise (an Operation's is ``release()``)."""

    def _on_exit(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._on_exit()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self._on_exit()


class Window(_ClosedOnExit):
    """
    A window this connector owns over one Descriptor (memory or a File). ``metadata()`` is the
    capability to hand to openers; iterate it (``async for note in window``) for the
    Notifications of tagged gets and puts, in the order each opener posted them. ``close()``
    revokes it: every opener is told, gets and puts in flight end CANCELLED, and no byte reaches
    the range after it returns. Also closed by leaving ``with``/``async with``.
    """

    MAX_PENDING = 16384
    """Notifications a window keeps for its owner by default until they are taken (at most
    ~8 MiB of Python objects with 256-byte tags)."""

    def __init__(self, connector, window_id, desc, access, openers, metadata, max_pending=MAX_PENDING):
        self._connector = connector
        self.id = window_id
        self.descriptor = desc
        self.access = access
        self.openers = openers
        self.length = desc.nbytes
        self._metadata = metadata
        self.max_pending = max_pending
        self.dropped = 0  # notifications that went unread because max_pending were waiting
        self._notes = collections.deque()
        self._futures = []
        self.closed = False

    def __repr__(self):
        return "<Window %d %s %d bytes%s>" % (self.id, self.access, self.length, " closed" if self.closed else "")

    def metadata(self):
        """The string to hand to openers (any channel). A capability: treat it as a secret."""
        return self._metadata

    # -- notifications --

    def _notified(self, note):
        # The connector reads the socket while a window is owned (else the daemon, 4096 packets
        # behind, would cut the whole connection), so an owner that never iterates must be
        # bounded here: the newest max_pending are kept, the oldest dropped and counted.
        if len(self._notes) >= self.max_pending:
            self._notes.popleft()
            self.dropped += 1
            if self.dropped == 1:
                warnings.warn(XferNotificationsDropped(
                    "window %d: %d notifications were waiting untaken (max_pending), the oldest "
                    "is dropped; Window.dropped counts them" % (self.id, self.max_pending)), stacklevel=2)
        self._notes.append(note)
        futures, self._futures = self._futures, []
        self._connector._waiting -= len(futures)
        for fut in futures:
            if not fut.done():
                fut.set_result(None)

    def pending(self):
        """How many notifications arrived and were not taken yet (at most ``max_pending``;
        events waiting on the connection are taken first)."""
        self._connector.dispatch()
        return len(self._notes)

    async def next_notification(self, timeout=None):
        """The next Notification; waits (without polling) for it. TimeoutError after @timeout
        seconds; XferError(ECANCELED) once the window is closed and nothing is left."""
        if not self._notes:
            self._connector.dispatch()
        while not self._notes:
            if self.closed:
                raise XferError(errno.ECANCELED, "window %d is closed" % self.id)
            self._connector._attach_loop()
            fut = asyncio.get_running_loop().create_future()
            self._futures.append(fut)
            self._connector._waiting += 1
            try:
                if timeout is None:
                    await fut
                else:
                    await asyncio.wait_for(asyncio.shield(fut), timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise TimeoutError("no notification on window %d within %s s" % (self.id, timeout)) from None
        return self._notes.popleft()

    def wait_notification(self, timeout=None):
        """The blocking form of next_notification(), for scripts without an event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._connector.dispatch()
        while not self._notes:
            if self.closed:
                raise XferError(errno.ECANCELED, "window %d is closed" % self.id)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("no notification on window %d within %s s" % (self.id, timeout))
            self._connector._wait_readable(left)
            self._connector.dispatch()
        return self._notes.popleft()

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.next_notification()
        except XferError as e:
            if e.errno == errno.ECANCELED and self.closed and not self._notes:
                raise StopAsyncIteration from None
            raise

    # -- closing --

    def close(self):
        """Revokes the window (returns once no get or put is in flight on it). Idempotent."""
        if self.closed:
            return
        self.closed = True
        conn = self._connector
        conn._windows.pop(self.id, None)
        if not conn._closed:
            conn._c_call(lib.xfer_window_close, self.id)
        self._notified_close()

    def _notified_close(self):
        futures, self._futures = self._futures, []
        self._connector._waiting -= len(futures)
        for fut in futures:
            if not fut.done():
                fut.set_result(None)


class RemoteWindow(_ClosedOnExit):
    """
    A window this connector opened (``connector.open_window(metadata)``): ``get`` and ``put``
    move bytes between it and your Descriptors, each awaiting its end (XferError on failure,
    with the errno name and the daemon's cause); ``begin_get``/``begin_put`` return the
    Operation at once; ``get_many``/``put_many`` post many blocks in one request (op.batch).
    ``closed`` and ``error`` say whether the owner revoked it (or its node was lost).
    """

    def __init__(self, connector, handle, length, access):
        self._connector = connector
        self.handle = handle
        self.length = length
        self.access = access
        self._closed = False
        self.error = None  # XferError once the owner revoked it or the peer was lost

    @property
    def closed(self):
        """Whether the handle is gone (closed here, revoked by the owner, or its peer lost);
        a revocation waiting on the connection is taken first."""
        if not self._closed:
            self._connector._refresh()
        return self._closed

    def __repr__(self):
        return "<RemoteWindow %d %s %d bytes%s>" % (
            self.handle, self.access, self.length, " closed" if self._closed else "")

    def _revoked(self, err, cause):
        self._closed = True
        self.error = XferError(err or errno.ECANCELED, cause or "window handle %d was closed" % self.handle)

    def _check_open(self):
        if self._closed:
            raise self.error or XferError(errno.ECANCELED, "window handle %d is closed" % self.handle)

    # -- one at a time --

    def begin_get(self, offset, descs, notify=None, timeout=None):
        """Posts a get of the window's bytes at @offset into @descs. Returns a GetOperation."""
        return self._begin("get", offset, descs, notify, timeout)

    def begin_put(self, offset, descs, notify=None, timeout=None):
        """Posts a put of @descs at @offset of the window. Returns a PutOperation."""
        return self._begin("put", offset, descs, notify, timeout)

    async def get(self, offset, descs, notify=None, timeout=None):
        """Gets the window's bytes at @offset into @descs; returns the ended GetOperation."""
        return await self._one("get", offset, descs, notify, timeout)

    async def put(self, offset, descs, notify=None, timeout=None):
        """Puts @descs at @offset of the window (the owner is told @notify, bytes or str, once
        they are in place); returns the ended PutOperation."""
        return await self._one("put", offset, descs, notify, timeout)

    def _begin(self, kind, offset, descs, notify, timeout):
        self._check_open()
        return self._connector._window_op(self, kind, offset, descs, tag_bytes(notify), timeout)

    async def _one(self, kind, offset, descs, notify, timeout):
        self._connector._use_loop()
        op = self._begin(kind, offset, descs, notify, timeout)
        await op.wait_for_completion()
        return op

    # -- many in one request --

    def begin_many(self, entries, timeout=None):
        """Posts @entries, each ``("get" | "put", offset, desc | [descs], notify=None)``, in
        one request per 1024 (op.batch; in order, as if one by one). Returns their operations.
        A refused entry raises XferError naming it; the entries before it go on."""
        self._check_open()
        return self._connector._window_batch(self, entries, timeout)

    async def get_many(self, blocks, timeout=None):
        """Gets many blocks, ``[(offset, desc | [descs]), ...]``, in one request; awaits them
        all. Returns the operations; raises the first failure's XferError."""
        return await self._many([("get", b[0], b[1]) for b in blocks], timeout)

    async def put_many(self, blocks, timeout=None):
        """Puts many blocks, ``[(offset, desc | [descs]) or (offset, descs, notify), ...]``, in
        one request; awaits them all. Returns the operations; raises the first failure's
        XferError."""
        return await self._many([("put",) + tuple(b) for b in blocks], timeout)

    async def _many(self, entries, timeout):
        self._connector._use_loop()
        ops = self.begin_many(entries, timeout)
        first = None
        for op in ops:
            try:
                await op.wait_for_completion()
            except XferError as e:
                first = first or e
        if first is not None:
            raise first
        return ops

    # -- closing --

    def close(self):
        """Frees this handle; its gets and puts in flight end CANCELLED. Idempotent."""
        conn = self._connector
        conn._handles.pop(self.handle, None)
        if self._closed:
            return
        self._closed = True
        self.error = XferError(errno.ECANCELED, "window handle %d was closed here" % self.handle)
        if not conn._closed:
            rc = conn._c_call(lib.xfer_window_close, self.handle, raise_error=False)
            if rc < 0 and rc not in (-errno.ENOENT, -errno.ECANCELED, -errno.ECONNRESET):
                raise conn._error(rc)


def access_value(access):
    if access not in ACCESS:
        raise XferError(errno.EINVAL, 'access must be "read", "write" or "readwrite", not %r' % (access,))
    return ACCESS[access]


def openers_value(openers):
    if openers not in OPENERS:
        raise XferError(errno.EINVAL, 'openers must be "one" or "many", not %r' % (openers,))
    return OPENERS[openers]


def max_pending_value(max_pending):
    if type(max_pending) is not int or max_pending < 1:
        raise XferError(errno.EINVAL, "max_pending (notifications kept untaken) is an int >= 1, "
                        "not %r" % (max_pending,))
    return max_pending


def batch_array(n):
    return (_clib.XferBatchOp * n)()
