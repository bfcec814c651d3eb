# SPDX-License-Identifier: MIT
"""
Files as descriptors (PROTOCOL.md §4, "File regions"): ``xferd.File(path, mode, offset,
length)`` is a range of a regular file that operations and windows take wherever they take a
Descriptor. The daemon never maps it; it moves the bytes with file I/O straight between the
file and the other side (sendfile/splice over TCP, pread/pwrite/copy_file_range locally), so a
readable over a File serves it without a copy into memory, and a read into a File writes the
remote bytes straight into it: PyTorch's GdsFile load/save at a file offset, through a peer.
This process opens the file, so its own permissions apply.
"""
import ctypes
import errno
import os
import weakref

from . import _clib
from ._clib import XferDesc, XferError, lib

_MODES = {
    # mode: (open flags, what the region may be)
    "r": (os.O_RDONLY, "read"),
    "w": (os.O_WRONLY | os.O_CREAT, "write"),
    "r+": (os.O_RDWR, "read and write"),
    "w+": (os.O_RDWR | os.O_CREAT, "read and write"),
}


class File:
    """
    ``length`` bytes at ``offset`` of the regular file ``path``, for operations and windows.
    ``mode`` is what this process opens it for, which decides what the daemon lets the range
    be: "r" a source (readable, begin_write, a read window), "w" a target (writable,
    begin_read, a write window; the file is created if missing, never truncated), "r+"/"w+"
    both. ``length`` None: to the end of the file ("r"/"r+"); a target is extended to
    ``offset + length`` first when it is shorter (the daemon needs the range inside the file).
    ``sync=True``: a transfer into the file completes only once it was fdatasync'ed.
    Close it with ``close()`` or ``with``; its registrations go with it.
    """

    staged = False

    def __init__(self, path, mode="r", offset=0, length=None, sync=False):
        if mode not in _MODES:
            raise XferError(errno.EINVAL, 'File mode must be "r", "w", "r+" or "w+", not %r' % (mode,))
        if type(offset) is not int or offset < 0 or (length is not None and (type(length) is not int or length <= 0)):
            raise XferError(errno.EINVAL, "a File's offset is an int >= 0 and its length an int > 0 (or None)")
        flags, self.use = _MODES[mode]
        self.path = os.fspath(path)
        self.mode = mode
        self.sync = bool(sync)
        try:
            self.fd = os.open(self.path, flags | os.O_CLOEXEC, 0o666)
        except OSError as e:
            raise XferError(
                e.errno, "cannot open %s for %s (%s): %s; this process's permissions apply"
                % (self.path, self.use, mode, e.strerror)) from None
        try:
            size = os.fstat(self.fd).st_size
            if length is None:
                length = size - offset
                if length <= 0:
                    raise XferError(errno.EINVAL, "%s has %d bytes: nothing at offset %d" % (self.path, size, offset))
            if size < offset + length:
                if not flags & (os.O_WRONLY | os.O_RDWR):
                    raise XferError(errno.EINVAL, "%s has %d bytes: [%d, +%d) is past its end"
                                    % (self.path, size, offset, length))
                os.ftruncate(self.fd, offset + length)
        except OSError as e:
            os.close(self.fd)
            raise XferError(e.errno, "cannot size %s to %d bytes: %s" % (self.path, offset + length, e.strerror)) from None
        except BaseException:
            os.close(self.fd)
            raise
        self.offset = offset
        self.nbytes = length
        self._regions = {}  # connector serial -> (weakref to connector, region)
        self._arrays = {}
        self._finalizer = weakref.finalize(self, File._release, self.fd, self._regions)

    def __len__(self):
        return self.nbytes

    def __repr__(self):
        return "File(%r, %r, offset=%d, length=%d%s)" % (
            self.path, self.mode, self.offset, self.nbytes, "" if self.fd >= 0 else ", closed")

    # -- what Descriptor offers to the connector --

    def register_memory(self, connector):
        """Registers the range with @connector (once: idempotent). Returns self."""
        self._desc_for(connector)
        return self

    def _desc_for(self, connector):
        entry = self._regions.get(connector._serial)
        if entry is not None and entry[1] in connector._live_regions:
            return entry[1], 0, self.nbytes
        if self.fd < 0:
            raise XferError(errno.EBADF, "%r is closed" % (self,))
        out = ctypes.c_uint64()
        connector._c_call(lib.xfer_region_register_file, self.fd, self.offset, self.nbytes,
                          _clib.XFER_FILE_SYNC if self.sync else 0,
                          os.path.basename(self.path).encode()[:64], ctypes.byref(out))
        connector._live_regions.add(out.value)
        self._regions[connector._serial] = (weakref.ref(connector), out.value)
        return out.value, 0, self.nbytes

    def _c_array(self, connector):
        region = self._desc_for(connector)[0]
        cached = self._arrays.get(connector._serial)
        if cached is None or cached[0] != region:
            arr = (XferDesc * 1)()
            arr[0].region, arr[0].offset, arr[0].length = region, 0, self.nbytes
            cached = self._arrays[connector._serial] = (region, arr)
        return cached[1]

    def _stage_in(self):
        pass

    def _stage_out(self):
        pass

    # -- closing --

    @staticmethod
    def _release(fd, regions):
        """Deregisters from every connector still open (later, if an operation still uses the
        range: the connector retries at its next call) and closes the fd."""
        for ref, region in list(regions.values()):
            conn = ref()
            if conn is not None and not conn._closed and region in conn._live_regions:
                conn._live_regions.discard(region)
                conn._dead_regions.append(region)
                if not conn._in_dispatch:
                    conn._flush_dead_regions()
        regions.clear()
        if fd >= 0:
            os.close(fd)

    def close(self):
        """Deregisters the range from every connector and closes the file. Idempotent."""
        if self.fd >= 0:
            self._finalizer()
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
