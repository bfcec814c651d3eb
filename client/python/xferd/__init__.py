# SPDX-License-Identifier: MIT
"""
xferd: move numpy arrays and torch CPU tensors between processes and nodes through the node's
xferd daemon, in the shape of Dynamo's nixl_connect, on asyncio (completion is pushed, never
polled). See client/python/README.md.
"""
from ._clib import XferError
from .connector import (
    Connector,
    GetOperation,
    PutOperation,
    Operation,
    OperationStatus,
    ReadableOperation,
    ReadOperation,
    WritableOperation,
    WriteOperation,
)
from .files import File
from .memory import Descriptor, Pool, XferStagingWarning, empty
from .window import Notification, RemoteWindow, Window, XferNotificationsDropped

__all__ = [
    "Connector",
    "Descriptor",
    "File",
    "GetOperation",
    "Notification",
    "Operation",
    "OperationStatus",
    "Pool",
    "PutOperation",
    "RemoteWindow",
    "ReadOperation",
    "ReadableOperation",
    "Window",
    "WritableOperation",
    "WriteOperation",
    "XferError",
    "XferNotificationsDropped",
    "XferStagingWarning",
    "empty",
]
__version__ = "0.1.0"
