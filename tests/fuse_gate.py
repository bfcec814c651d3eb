#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""
A FUSE file system that stops answering on demand: tests/test_fuse.sh mounts it to be the
file system a hostile (or merely dead: sshfs, rclone) mount is to xferd.

    fuse_gate.py MOUNTPOINT GATE SIZE

It holds one file, /data, of SIZE bytes (byte i is i % 251), readable and writable. While the
file GATE exists, the operations named in it (words among getattr read write statfs flush)
wait, each touching GATE.entered first, until GATE is removed; then they answer as usual.
Attributes are never cached by the kernel (attr_timeout=0), so every fstat(2) of an open fd
asks this process. Runs in the foreground, multithreaded; ends when unmounted.

fusepy (python3-fusepy) rather than a C helper against libfuse3: nothing to build, and the
blocking is a loop of sleeps a test drives with one file.
"""
import errno
import os
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations


class Gate(Operations):
    def __init__(self, gate, size):
        self.gate = gate
        self.data = bytearray(i % 251 for i in range(size))
        self.mu = threading.Lock()
        self.t0 = time.time()

    def _wait(self, op):
        try:
            with open(self.gate) as f:
                ops = f.read().split()
        except OSError:
            return
        if op not in ops:
            return
        with open(self.gate + ".entered", "a") as f:
            f.write(op + "\n")
        while os.path.exists(self.gate):
            time.sleep(0.02)

    def getattr(self, path, fh=None):
        if path == "/":
            return dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2, st_ctime=self.t0, st_mtime=self.t0,
                        st_atime=self.t0)
        if path != "/data":
            raise FuseOSError(errno.ENOENT)
        self._wait("getattr")
        return dict(st_mode=stat.S_IFREG | 0o666, st_nlink=1, st_size=len(self.data), st_ctime=self.t0,
                    st_mtime=self.t0, st_atime=self.t0)

    def readdir(self, path, fh):
        return [".", "..", "data"]

    def open(self, path, flags):
        if path != "/data":
            raise FuseOSError(errno.ENOENT)
        return 0

    def read(self, path, size, offset, fh):
        self._wait("read")
        with self.mu:
            return bytes(self.data[offset:offset + size])

    def write(self, path, buf, offset, fh):
        self._wait("write")
        with self.mu:
            end = offset + len(buf)
            if end > len(self.data):
                self.data.extend(bytes(end - len(self.data)))
            self.data[offset:end] = buf
        return len(buf)

    def truncate(self, path, length, fh=None):
        with self.mu:
            del self.data[length:]
            self.data.extend(bytes(length - len(self.data)))

    def statfs(self, path):
        self._wait("statfs")
        return dict(f_bsize=4096, f_frsize=4096, f_blocks=1024, f_bfree=512, f_bavail=512,
                    f_namemax=255)

    def flush(self, path, fh):
        self._wait("flush")
        return 0


if __name__ == "__main__":
    mnt, gate, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    FUSE(Gate(gate, size), mnt, foreground=True, nothreads=False, attr_timeout=0, entry_timeout=0,
         auto_cache=False)
