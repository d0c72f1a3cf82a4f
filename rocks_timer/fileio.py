"""Writing a large buffer into the page cache without paying for fresh 2 MiB folios.

A single multi-megabyte ``pwrite`` makes the kernel's page cache (Linux 6.x, ext4 with large
folios) allocate 2 MiB folios, which come from high-order free blocks. On a VM with free page
reporting (virtio-balloon, as on these machines) such blocks have often been handed back to the
host, and every 4 KiB of them costs a host fault to touch again; smaller writes get smaller
folios from recycled memory: writes of 256 KiB or less into a fresh file run several times
faster than multi-megabyte ones (``python -m bench.page_cache``; figures in docs/BENCHMARKS.md,
"Figures the code's comments rest on"). So the CommitLog writes a group in ``SLICE``-sized
pieces, in one native call that releases the GIL once (each ``os.pwrite`` would release and
re-take it).
"""
from __future__ import annotations

import os

try:
    from rocks_timer._native.codec import pwrite_all as _native_pwrite_all
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_pwrite_all = None

SLICE = 256 << 10


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``, ``SLICE`` bytes at a time; OSError on failure."""
    if _native_pwrite_all is not None:
        _native_pwrite_all(fd, data, offset, SLICE)
        return
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:done + SLICE], offset + done)


def create_durably(path, flags: int = os.O_RDWR, mode: int = 0o600) -> int:
    """Open ``path`` (with ``flags``), creating it when missing; returns the descriptor.

    Durability by name (ARCHITECTURE §4, DECISIONS.md "Durability by name"): a file's fsync makes
    its bytes durable, not its name; the name is durable once its directory has been fsynced
    after the create. So when this call creates the file, it fsyncs the directory before
    returning: every later fsync of the file's data then keeps a file that is found again after
    a power cut. Once per name, never per write: opening an existing file costs nothing more."""
    flags |= os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        fd = -1
    if fd < 0:  # opened outside the handler: an error here carries no context (whose frames
        return os.open(path, flags)  # would keep a failed open's RocksDB handles alive)
    try:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    except BaseException:
        os.close(fd)
        raise
    return fd


def mkdir_durably(path, mode: int = 0o700) -> bool:
    """Create directory ``path`` and its missing parents, each made durable by name (its parent
    fsynced after the ``mkdir``) and given ``mode`` exactly (``mkdir``'s mode is filtered by the
    umask). An existing directory is left as it is. Returns True when it created any."""
    path = os.path.abspath(path)
    missing = []
    here = path
    while not os.path.isdir(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue  # made meanwhile by another caller, which makes it durable
        os.chmod(directory, mode)
        fsync_dir(os.path.dirname(directory))
    return bool(missing)


def replace_durably(path, data: bytes) -> None:
    """Replace a small state file crash-safely: temp file in the same directory, fsync,
    ``os.replace``, fsync of the directory (a power cut leaves the old file or the new one)."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def fsync_dir(directory) -> None:
    """fsync a directory, so names created or replaced in it survive a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
