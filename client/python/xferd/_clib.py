# SPDX-License-Identifier: MIT
"""
The ctypes side of the package: where libxferclient is found, the C structs this package
mirrors (tests/python/layout.c prints the header's sizeof/offsetof and test_layout.py compares),
the prototypes, and the one exception type.
"""
import ctypes
import errno as _errno
import os
from pathlib import Path

# Opaque client handle and the structs of client/xferclient.h that cross the boundary.


class XferDesc(ctypes.Structure):
    _fields_ = [
        ("region", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
    ]


class XferOpInfo(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_uint64),
        ("kind", ctypes.c_int),  # enum xfer_kind
        ("state", ctypes.c_int),  # enum xfer_state
        ("length", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("client", ctypes.c_uint64),
        ("timeout_ms", ctypes.c_uint64),
        ("age_ms", ctypes.c_uint64),
        ("error", ctypes.c_int),
        ("cause", ctypes.c_char * 256),
        ("transport", ctypes.c_char * 16),
        ("peer", ctypes.c_char * 64),
    ]


class XferOpOpts(ctypes.Structure):
    _fields_ = [
        ("timeout_ms", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class XferWindowEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),  # enum xfer_window_event_type
        ("window", ctypes.c_uint64),
        ("tag", ctypes.c_char * 257),
        ("kind", ctypes.c_int),  # enum xfer_kind
        ("offset", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("peer", ctypes.c_char * 64),
        ("handle", ctypes.c_uint64),
        ("error", ctypes.c_int),
        ("cause", ctypes.c_char * 256),
    ]


class XferBatchOp(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),  # enum xfer_kind
        ("handle", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("descs", ctypes.POINTER(XferDesc)),
        ("n", ctypes.c_size_t),
        ("tag", ctypes.c_char_p),
        ("op", ctypes.c_uint64),
    ]


class XferReply(ctypes.Structure):
    _fields_ = [
        ("request", ctypes.c_uint64),
        ("error", ctypes.c_int),
        ("op", ctypes.c_uint64),
        ("metadata", ctypes.c_char_p),  # (read as bytes: a copy, as the callback must take)
        ("message", ctypes.c_char_p),
    ]


# The structs test_layout.py checks against the header, by C name.
MIRRORED = {
    "xfer_desc": XferDesc,
    "xfer_op_info": XferOpInfo,
    "xfer_op_opts": XferOpOpts,
    "xfer_window_event": XferWindowEvent,
    "xfer_batch_op": XferBatchOp,
    "xfer_reply": XferReply,
}

XFER_OP_RELEASE_ON_END = 0x1
XFER_OP_NOWAIT = 0x4
XFER_OP_END_ONLY = 0x8
XFER_WINDOW_ONE_OPENER = 0x1
XFER_FILE_SYNC = 0x1
WINDOW_NOTIFIED, WINDOW_CLOSED = 0, 1  # enum xfer_window_event_type

# enum xfer_kind
KIND_READABLE, KIND_WRITABLE, KIND_READ, KIND_WRITE, KIND_GET, KIND_PUT = range(6)

EVENT_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(XferOpInfo), ctypes.c_void_p)
WINDOW_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(XferWindowEvent), ctypes.c_void_p)
REPLY_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(XferReply), ctypes.c_void_p)


class XferError(Exception):
    """
    Every failure of this package: ``errno`` (positive number), ``errno_name`` ("EMSGSIZE")
    and ``message``, the daemon's sentence naming the rule that was broken (or this package's).
    ``op`` is the operation id when the error is an operation's end.
    """

    def __init__(self, err, message, op=None):
        err = abs(int(err))
        self.errno = err
        self.errno_name = _errno.errorcode.get(err, "E%d" % err)
        self.message = message or os.strerror(err)
        self.op = op
        super().__init__("%s (%s)" % (self.message, self.errno_name))


def _library_candidates():
    env = os.environ.get("XFERD_LIBRARY")
    if env:
        return [env]
    here = Path(__file__).resolve()
    out = []
    # In the source tree (client/python/xferd/): the build next to it.
    if len(here.parents) > 3 and (here.parents[3] / "client" / "xferclient.h").exists():
        out.append(str(here.parents[3] / "build" / "libxferclient.so.1"))
    out.append("libxferclient.so.1")  # installed: the dynamic loader finds it
    return out


def _load():
    errors = []
    for cand in _library_candidates():
        if os.sep in cand and not os.path.exists(cand):
            errors.append("%s: no such file" % cand)
            continue
        try:
            return ctypes.CDLL(cand)
        except OSError as e:
            errors.append(str(e))
    raise ImportError(
        "xferd: cannot load libxferclient (set XFERD_LIBRARY to its path, or run make "
        "install): " + "; ".join(errors)
    )


def _prototypes(lib):
    P, U64, I, S = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p
    U64P = ctypes.POINTER(ctypes.c_uint64)
    DESCP, OPTSP, INFOP = ctypes.POINTER(XferDesc), ctypes.POINTER(XferOpOpts), ctypes.POINTER(
        XferOpInfo
    )
    table = {
        "xfer_connect": (I, [S, S, ctypes.POINTER(P)]),
        "xfer_close": (None, [P]),
        "xfer_strerror": (S, [I]),
        "xfer_last_error": (S, [P]),
        "xfer_client_id": (U64, [P]),
        "xfer_region_register": (I, [P, I, U64, U64, S, U64P]),
        "xfer_region_deregister": (I, [P, U64, I]),
        "xfer_region_register_file": (I, [P, I, U64, U64, ctypes.c_uint, S, U64P]),
        "xfer_set_window_cb": (None, [P, WINDOW_CB, P]),
        "xfer_window_create": (
            I, [P, U64, U64, U64, I, ctypes.c_uint, U64P, ctypes.POINTER(P)]),
        "xfer_window_open": (I, [P, S, U64P, U64P, ctypes.POINTER(I)]),
        "xfer_window_close": (I, [P, U64]),
        "xfer_put": (I, [P, U64, U64, DESCP, ctypes.c_size_t, S, OPTSP, U64P]),
        "xfer_get": (I, [P, U64, U64, DESCP, ctypes.c_size_t, S, OPTSP, U64P]),
        "xfer_batch": (I, [P, ctypes.POINTER(XferBatchOp), ctypes.c_size_t, OPTSP,
                           ctypes.POINTER(ctypes.c_size_t), U64P]),
        "xfer_readable": (I, [P, DESCP, ctypes.c_size_t, OPTSP, U64P, ctypes.POINTER(P)]),
        "xfer_writable": (I, [P, DESCP, ctypes.c_size_t, OPTSP, U64P, ctypes.POINTER(P)]),
        "xfer_read": (I, [P, S, DESCP, ctypes.c_size_t, OPTSP, U64P]),
        "xfer_write": (I, [P, S, DESCP, ctypes.c_size_t, OPTSP, U64P]),
        "xfer_post_op": (I, [P, I, S, DESCP, ctypes.c_size_t, OPTSP, U64P]),
        "xfer_set_reply_cb": (None, [P, REPLY_CB, P]),
        "xfer_wait": (I, [P, U64, I, INFOP]),
        "xfer_status": (I, [P, U64, INFOP]),
        "xfer_cancel": (I, [P, U64]),
        "xfer_release": (I, [P, U64]),
        "xfer_set_event_cb": (None, [P, EVENT_CB, P]),
        "xfer_get_fd": (I, [P]),
        "xfer_dispatch": (I, [P]),
        "xfer_dispatch_end": (I, [P, INFOP]),
        "xfer_call": (I, [P, S, S, ctypes.POINTER(P)]),
    }
    for name, (res, args) in table.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


lib = _load()
_prototypes(lib)
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def op_flags(active, end_only):
    """The struct xfer_op_opts flags of a pairing operation: always released at its end; an
    active one submitted without waiting for the claim; end_only: no IN_PROGRESS event."""
    return (XFER_OP_RELEASE_ON_END | (XFER_OP_NOWAIT if active else 0)
            | (XFER_OP_END_ONLY if end_only else 0))


def take_string(ptr):
    """A malloc'd NUL-terminated string from the library, as str; frees it."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _libc.free(ptr)


def strerror(rc):
    return lib.xfer_strerror(rc).decode("utf-8", "replace")
