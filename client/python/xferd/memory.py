# SPDX-License-Identifier: MIT
"""
Memory xferd can move without a copy: sealed memfds mapped into this process (the daemon maps
the same pages). ``empty()`` makes one per array; a ``Pool`` is one memfd, registered once, that
arrays and tensors are carved from. ``Descriptor`` finds which memfd (and offset) any array,
tensor, buffer or ``(address, size)`` lies in, and refuses memory that is in none of them unless
told to stage it through a copy.
"""
import bisect
import ctypes
import errno
import fcntl
import itertools
import math
import mmap
import os
import threading
import warnings
import weakref

from ._clib import XferDesc, XferError

PAGE = mmap.PAGESIZE
_ALIGN = 256  # of tensors carved from a pool: cache lines, and every dtype's alignment


class XferStagingWarning(UserWarning):
    """A Descriptor with copy=True staged foreign memory through a copy."""


def _round_up(n, to):
    return (n + to - 1) // to * to


class _Block:
    """One sealed memfd and its mapping. Lives as long as its mmap object does."""

    _ids = itertools.count(1)

    def __init__(self, nbytes, name="xferd"):
        self.id = next(self._ids)
        self.length = max(_round_up(nbytes, PAGE), PAGE)
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, self.length)
            # Sealed before anyone maps it: the daemon's mapping can then never SIGBUS.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            mm = mmap.mmap(fd, self.length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        probe = ctypes.c_char.from_buffer(mm)
        self.addr = ctypes.addressof(probe)
        del probe  # (an exported buffer would keep mm from ever closing)
        self._mm = weakref.ref(mm)
        self.gone_callbacks = []  # connectors that registered it: told when it goes
        _registry.add(self)
        weakref.finalize(mm, _Block._gone, self)
        self.mm_once = mm  # handed to the caller, who keeps it alive; dropped below

    def take_mmap(self):
        mm, self.mm_once = self.mm_once, None
        return mm

    @staticmethod
    def _gone(block):
        _registry.remove(block)
        os.close(block.fd)
        block.fd = -1
        for cb in block.gone_callbacks:
            cb(block)
        block.gone_callbacks = []

    def alive(self):
        return self._mm() is not None


class _Registry:
    """Every live block by address, for Descriptor's lookup."""

    def __init__(self):
        self._lock = threading.Lock()
        self._starts = []
        self._blocks = []

    def add(self, block):
        with self._lock:
            i = bisect.bisect(self._starts, block.addr)
            self._starts.insert(i, block.addr)
            self._blocks.insert(i, block)

    def remove(self, block):
        with self._lock:
            i = self._blocks.index(block)
            del self._starts[i], self._blocks[i]

    def find(self, addr, nbytes):
        with self._lock:
            i = bisect.bisect(self._starts, addr) - 1
            if i < 0:
                return None
            b = self._blocks[i]
            return b if addr + nbytes <= b.addr + b.length else None


_registry = _Registry()


def _np():
    import numpy

    return numpy


def _torch_dtype(dtype):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    np = _np()
    return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype


def _itemsize(dtype, like):
    if like == "torch":
        import torch

        return torch.empty(0, dtype=_torch_dtype(dtype)).element_size()
    return _np().dtype(dtype).itemsize


def _shape_tuple(shape):
    return (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)


def _view(raw, shape, dtype, like):
    """An array or tensor of @shape/@dtype over uint8 ndarray @raw (which it keeps alive)."""
    if like == "numpy":
        return raw.view(_np().dtype(dtype)).reshape(shape)
    if like == "torch":
        import torch

        return torch.from_numpy(raw).view(_torch_dtype(dtype)).reshape(shape)
    raise XferError(errno.EINVAL, 'like must be "numpy" or "torch", not %r' % (like,))


def empty(shape, dtype="uint8", like="numpy"):
    """
    An uninitialised numpy array (like="numpy") or torch CPU tensor (like="torch") over a sealed
    memfd of its own: what a Descriptor moves without a copy. The memfd goes with the array.
    """
    shape = _shape_tuple(shape)
    nbytes = math.prod(shape) * _itemsize(dtype, like)
    block = _Block(nbytes)
    raw = _np().frombuffer(block.take_mmap(), dtype=_np().uint8, count=nbytes)
    return _view(raw, shape, dtype, like)


class Pool:
    """
    One memfd of ``nbytes``, registered with its connector as one region, from which arrays and
    tensors are carved (the KV-cache pattern: one registration, many tensors). A carved range
    returns to the pool when the last array or tensor over it is gone. Made by
    ``Connector.pool(nbytes)``.
    """

    def __init__(self, connector, nbytes):
        if nbytes <= 0:
            raise XferError(errno.EINVAL, "a pool needs a size > 0")
        self._block = _Block(nbytes, "xferd-pool")
        self._mm = self._block.take_mmap()  # the pool keeps its mapping
        self.nbytes = self._block.length
        self._lock = threading.Lock()
        self._free = [(0, self.nbytes)]  # (offset, length), sorted, coalesced
        self.region = connector._region_for(self._block)

    @property
    def used(self):
        with self._lock:
            return self.nbytes - sum(n for _, n in self._free)

    def _take(self, nbytes):
        need = _round_up(max(nbytes, 1), _ALIGN)
        with self._lock:
            for i, (off, n) in enumerate(self._free):
                if n >= need:
                    if n == need:
                        del self._free[i]
                    else:
                        self._free[i] = (off + need, n - need)
                    return off, need
        raise XferError(
            errno.ENOMEM,
            "pool of %d bytes has no free range of %d bytes (%d in use)"
            % (self.nbytes, need, self.used),
        )

    def _give_back(self, off, n):
        with self._lock:
            i = bisect.bisect(self._free, (off, n))
            self._free.insert(i, (off, n))
            merged = []
            for o, m in self._free:
                if merged and merged[-1][0] + merged[-1][1] == o:
                    merged[-1] = (merged[-1][0], merged[-1][1] + m)
                else:
                    merged.append((o, m))
            self._free = merged

    def empty(self, shape, dtype="uint8", like="numpy"):
        """An array or tensor carved from the pool (uninitialised)."""
        shape = _shape_tuple(shape)
        nbytes = math.prod(shape) * _itemsize(dtype, like)
        off, n = self._take(nbytes)
        raw = _np().frombuffer(self._mm, dtype=_np().uint8, count=nbytes, offset=off)
        # Views and tensors over it keep @raw alive: its range is free once they are all gone.
        weakref.finalize(raw, self._give_back, off, n)
        return _view(raw, shape, dtype, like)


def _address_of(data):
    """(address, nbytes, writable, keepalive) of what a Descriptor may be built from."""
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(v, int) for v in data):
        return data[0], data[1], True, None
    mod = type(data).__module__
    if mod.startswith("torch"):
        if data.device.type != "cpu":
            raise XferError(
                errno.EINVAL,
                "tensor is on %s; xferd moves CPU memory (GPU memory needs dma-buf, not here yet)"
                % data.device,
            )
        if not data.is_contiguous():
            raise XferError(errno.EINVAL, "tensor is not contiguous; call .contiguous() first")
        return data.data_ptr(), data.numel() * data.element_size(), True, data
    np = _np()
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise XferError(errno.EINVAL, "array is not C-contiguous; use numpy.ascontiguousarray")
        return data.__array_interface__["data"][0], data.nbytes, data.flags.writeable, data
    try:
        raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    except (TypeError, ValueError) as e:
        raise XferError(
            errno.EINVAL,
            "a Descriptor takes a numpy array, a torch CPU tensor, a contiguous bytes-like object "
            "or (address, size), not %s (%s)" % (type(data).__name__, e),
        ) from None
    return raw.__array_interface__["data"][0], raw.nbytes, raw.flags.writeable, data


class Descriptor:
    """
    A contiguous range of memory for an operation: from a numpy array, a torch CPU tensor, a
    bytes-like object or ``(address, size)``. It must lie inside memory from ``xferd.empty()`` or
    a connector's pool, whose region and offset it then uses as they are. Other memory raises
    XferError saying how to allocate, unless ``copy=True``: then it is staged through a buffer
    of its own (``staged`` is True and an XferStagingWarning says so) and copied in before the
    operation (when it is the source) or back after COMPLETE (when it is the destination).
    """

    def __init__(self, data, copy=False):
        addr, nbytes, writable, keep = _address_of(data)
        if nbytes <= 0:
            raise XferError(errno.EINVAL, "a Descriptor needs at least one byte")
        self.data = keep  # alive as long as the descriptor is
        self.addr = addr
        self.nbytes = nbytes
        self.writable = writable
        self.staged = False
        self._staging = None
        block = _registry.find(addr, nbytes)
        if block is None and not copy:
            raise XferError(
                errno.EINVAL,
                "memory at %#x (%d bytes) is not memfd-backed, which xferd needs to move it "
                "without a copy: allocate it with xferd.empty(shape, dtype, like=...) or carve it "
                "from connector.pool(nbytes).empty(...), or pass copy=True to stage it through "
                "a copy" % (addr, nbytes),
            )
        if block is None:
            warnings.warn(
                "xferd: staging %d bytes of foreign memory through a copy (copy=True)" % nbytes,
                XferStagingWarning,
                stacklevel=2,
            )
            self._staging = _np().frombuffer(_Block(nbytes, "xferd-stage").take_mmap(), _np().uint8)
            block = _registry.find(self._staging.__array_interface__["data"][0], nbytes)
            self.staged = True
        self._block = block
        self.offset = (self._staging.__array_interface__["data"][0] if self.staged else addr) - (
            block.addr
        )
        self._regions = {}  # connector serial -> region
        self._arrays = {}  # connector serial -> (region, struct xfer_desc[1]) for the C calls

    def __len__(self):
        return self.nbytes

    def __repr__(self):
        return "Descriptor(%#x, %d bytes%s)" % (self.addr, self.nbytes, ", staged" if self.staged else "")

    def register_memory(self, connector):
        """Registers the memory this lies in with @connector (once: idempotent). Returns self."""
        self._regions[connector._serial] = connector._region_for(self._block)
        return self

    def _desc_for(self, connector):
        region = self._regions.get(connector._serial)
        if region is None or not connector._region_live(region):
            self.register_memory(connector)
            region = self._regions[connector._serial]
        return region, self.offset, self.nbytes

    def _c_array(self, connector):
        """A one-element struct xfer_desc array for @connector's calls, built once per region."""
        cached = self._arrays.get(connector._serial)
        if cached is not None and cached[0] in connector._live_regions:
            return cached[1]
        region = self._desc_for(connector)[0]
        if cached is None or cached[0] != region:
            arr = (XferDesc * 1)()
            arr[0].region, arr[0].offset, arr[0].length = region, self.offset, self.nbytes
            cached = self._arrays[connector._serial] = (region, arr)
        return cached[1]

    def _stage_in(self):
        if self.staged:
            ctypes.memmove(self._staging.__array_interface__["data"][0], self.addr, self.nbytes)

    def _stage_out(self):
        if self.staged:
            ctypes.memmove(self.addr, self._staging.__array_interface__["data"][0], self.nbytes)
