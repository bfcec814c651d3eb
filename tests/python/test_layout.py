# SPDX-License-Identifier: MIT
"""The ctypes mirrors in xferd._clib against xferclient.h, as the C compiler lays it out."""
import ctypes
import json
import subprocess

from conftest import BUILD


def test_structs_match_the_header():
    from xferd import _clib

    c = json.loads(subprocess.check_output([str(BUILD / "tests" / "python" / "layout")]))
    for name, cls in _clib.MIRRORED.items():
        fields = dict(c[name])
        assert fields.pop("sizeof")[1] == ctypes.sizeof(cls), name
        py = {f[0]: (getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_}
        assert py == {k: tuple(v) for k, v in fields.items()}, name


def test_constants_match_the_header():
    from xferd import _clib, OperationStatus

    e = json.loads(subprocess.check_output([str(BUILD / "tests" / "python" / "layout")]))["enums"]
    assert OperationStatus.COMPLETE == e["XFER_COMPLETE"]
    assert OperationStatus.ERRORED == e["XFER_ERRORED"]
    assert _clib.KIND_WRITE == e["XFER_WRITE"]
    assert _clib.XFER_OP_RELEASE_ON_END == e["XFER_OP_RELEASE_ON_END"]
    assert _clib.XFER_OP_NOWAIT == e["XFER_OP_NOWAIT"]
    assert (_clib.KIND_GET, _clib.KIND_PUT) == (e["XFER_GET"], e["XFER_PUT"])
    assert _clib.XFER_WINDOW_ONE_OPENER == e["XFER_WINDOW_ONE_OPENER"]
    assert _clib.XFER_FILE_SYNC == e["XFER_FILE_SYNC"]
    assert _clib.WINDOW_CLOSED == e["XFER_WINDOW_CLOSED"]

    from xferd.window import ACCESS

    assert ACCESS["readwrite"] == e["XFER_ACCESS_READWRITE"]
