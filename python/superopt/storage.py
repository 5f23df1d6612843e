"""Where superopt keeps its files, and how it writes them.

One root holds everything superopt caches (``superopt cache path`` prints it):

* ``kernels/``: the generated kernel modules (content-hashed, :mod:`superopt.lower.module`);
* ``results/``: the tuning-result cache (:mod:`superopt.cache`);
* ``logs/``: the log of each ``superopt run`` given no ``--out`` (:mod:`superopt.runlog`).

The root is ``$SUPEROPT_CACHE`` when set, else the platform's user cache directory from
``platformdirs`` (on Linux ``$XDG_CACHE_HOME/superopt``, by default ``~/.cache/superopt``).

Every file written here, and every output under ``--out``, goes through :func:`atomic_write`,
so that concurrent runs and interrupted ones never leave a partial file.

Owns: the cache root and atomic writes. Imports nothing of the package.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

#: The environment variable that moves the cache root.
CACHE_ENV = "SUPEROPT_CACHE"


def cache_root() -> Path:
    """The cache root (not created): ``$SUPEROPT_CACHE``, else ``platformdirs``' user cache
    directory for ``superopt`` (without platformdirs, as on a machine that only carries the
    package: ``$XDG_CACHE_HOME/superopt`` or ``~/.cache/superopt``, its Linux answer)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
        return base / "superopt"
    return Path(platformdirs.user_cache_dir("superopt", appauthor=False))


def cache_subdir(name: str) -> Path:
    """``<cache root>/<name>``, created if missing."""
    path = cache_root() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, flushed to
    disk, and a rename, so that a reader (or the next run, after a crash or a kill) sees the
    old file or the whole new one, never a part; on any failure the temporary file is
    removed and ``path`` is left as it was. Two writers of one path at once each rename a
    whole file: the last rename wins. The file gets the usual mode (0666 less the umask),
    not the 0600 of ``tempfile``. ``durable=False`` skips the flush to disk (content-hashed
    files that are cheap to write again, thousands per run).

    Raises:
        OSError: the directory cannot be written (callers type it, e.g. at ``--out``).
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
