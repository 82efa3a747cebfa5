"""Durable writes: after a crash *or a power loss*, a file or directory cdcflow keeps is its old or its new
content, whole, under its name.

A rename alone is crash-safe (a killed process leaves the old name or the new one) but not power-safe: the
kernel may write the rename to disk before the data it names, or lose both. So, as PostgreSQL and SQLite do:
the data is fsynced before the rename, and the directory after it.

* :func:`write_file` -- a small file (state, lease, checkpoint records): a temporary file beside it, written and
  fsynced, renamed over it, the directory fsynced.
* :func:`sync_tree` -- every file and directory under a path (a bronze window's parts, written by pyarrow or
  Spark, which do not fsync), before that path is renamed into place.
* :func:`replace_dir` -- a directory put in place of another with no moment where neither is there: the two are
  swapped in one step (Linux's ``renameat2(RENAME_EXCHANGE)``), then the old one is removed.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h


def fsync_dir(path: str | Path) -> None:
    """fsync a directory: what makes a rename, create or delete in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str | Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data``, durably: the old or the new content is there after any failure."""
    p = Path(path)
    tmp = p.parent / f".{p.name}.{uuid.uuid4().hex}.tmp"
    raw = data.encode() if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(p.parent)


def sync_tree(path: str | Path) -> None:
    """fsync every file under ``path``, then every directory, deepest first."""
    dirs: list[str] = []
    for root, _subdirs, files in os.walk(path):
        dirs.append(root)
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for d in reversed(dirs):
        fsync_dir(d)


@functools.cache
def _renameat2() -> Any:
    """glibc's ``renameat2`` (>= 2.28), from the symbols already loaded (no library search, no subprocess), or
    None."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one step; False when the system cannot (no renameat2, or a file system without
    RENAME_EXCHANGE)."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(src: str | Path, dst: str | Path) -> None:
    """Put the directory ``src`` at ``dst`` (same file system), durably, ``src``'s content synced first. An
    existing ``dst`` is swapped with it in one step and then removed, so a reader of ``dst`` always finds one
    whole copy. Where the system cannot swap, the old copy is renamed aside first (both copies stay on disk
    throughout; for an instant ``dst`` names neither)."""
    s, d = Path(src), Path(dst)
    sync_tree(s)
    if not d.exists():
        os.replace(s, d)
    elif _exchange(s, d):
        shutil.rmtree(s)
    else:
        aside = d.parent / f".old-{d.name}-{uuid.uuid4().hex}"
        os.replace(d, aside)
        os.replace(s, d)
        shutil.rmtree(aside)
    fsync_dir(d.parent)
