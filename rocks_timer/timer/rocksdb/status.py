"""RocksDB status texts that are the disk's answer rather than the store's state.

rocksdict raises a plain ``Exception`` carrying RocksDB's status text. A full disk, a refused
permission or a read-only file system shows there as "IO error: No space left on device: While
appending to file: .../MANIFEST-000014", which names the MANIFEST like damage does: telling
the two apart keeps a full disk from being "repaired".
"""
from __future__ import annotations

import errno

from rocks_timer.errors import StoreIOError

# the statuses naming an errno of the disk (a missing file, also an "IO error", is damage:
# left to the caller)
_DISK_ERRORS = (("No space left on device", errno.ENOSPC, "no space left on device"),
                ("Disk quota exceeded", errno.EDQUOT, "disk quota exceeded"),
                ("Permission denied", errno.EACCES, "permission denied"),
                ("Operation not permitted", errno.EPERM, "operation not permitted"),
                ("Read-only file system", errno.EROFS, "read-only file system"),
                ("Input/output error", errno.EIO, "input/output error"))


def storage_io_error(text: str, what: str) -> StoreIOError | None:
    """The StoreIOError a RocksDB status ``text`` stands for, if the disk refused (ENOSPC,
    EDQUOT, EACCES, EPERM, EROFS, EIO); None for anything else."""
    for marker, code, reason in _DISK_ERRORS:
        if marker in text:
            return StoreIOError(f"{what}: {reason} (RocksDB: {text}); the store is not damaged "
                                f"by this: fix the cause and try again (do not run "
                                f"`rtimer repair` for it)", errno=code)
    return None
