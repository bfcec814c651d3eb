# SPDX-License-Identifier: MIT
"""
xferd: move numpy arrays and torch CPU tensors between processes and nodes through the node's
xferd daemon, in the shape of Dynamo's nixl_connect, on asyncio (completion is pushed, never
polled). See client/python/README.md.
"""
from ._clib import XferError
from .connector import (
    Connector,
    Operation,
    OperationStatus,
    ReadableOperation,
    ReadOperation,
    WritableOperation,
    WriteOperation,
)
from .memory import Descriptor, Pool, XferStagingWarning, empty

__all__ = [
    "Connector",
    "Descriptor",
    "Operation",
    "OperationStatus",
    "Pool",
    "ReadOperation",
    "ReadableOperation",
    "WritableOperation",
    "WriteOperation",
    "XferError",
    "XferStagingWarning",
    "empty",
]
__version__ = "0.1.0"
