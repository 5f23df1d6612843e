"""The tuning-result cache: a repeated ``superopt run`` answers from the record of the last
search of the same question on the same machine, as Triton's and TileLang's autotuners do.

A :class:`RunKey` is everything the answer depends on: the graph's content (the SHA-256 of
its wire encoding, which holds its name, axes, sizes and every node), the storage dtype,
the GPU's name and driver (:func:`superopt.run.environment.gpu_identity`, read without
torch), the versions of superopt (and a digest of its source, so an edited checkout is a new
key), TileLang and torch, and the search's own limits (budget, time budget, enumerator
caps, peers). An entry is one JSON file ``results/<key digest>.json`` under the cache root
(:func:`superopt.storage.cache_root`) holding the key, the date and the typed record
(:meth:`superopt.record.RunRecord.to_cache`), plus the top-1's module source so ``top1.py``
can be written even after the kernel modules were cleared.

Entries are written with :func:`superopt.storage.atomic_write` (a temporary file and a
rename): runs storing at once each leave a whole entry (the last one wins) and a reader
sees a whole entry or none. An entry that does not parse, is of another format or no
longer replays is a miss (and is logged), never an error.

Owns: the key, the entries on disk, listing and clearing them. Imports the record, the
wire codec and the storage root.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from .ir.dag import Graph
from .lower.module import write_module
from .record import RunRecord
from .run.environment import dist_version
from .storage import atomic_write, cache_root
from .version import __version__
from .wire import encode, graph_to_wire

log = logging.getLogger("superopt.cache")

#: The layout of an entry file (another is a miss).
ENTRY_FORMAT = 1
#: What ``superopt cache clear`` removes under the root.
CACHE_PARTS = ("results", "kernels", "logs")


def graph_digest(graph: Graph) -> str:
    """SHA-256 (hex) of the graph's wire encoding: its name, axes and sizes, every node."""
    return hashlib.sha256(encode(graph_to_wire(graph))).hexdigest()


@lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 (first 16 hex digits) of the package's Python source, so that a changed
    checkout of the same version never answers from an older search."""
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        h.update(str(path.relative_to(pkg)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class RunKey:
    """What a tuning result depends on (see the module docstring).

    ``workload`` and ``case`` are also in the graph digest; they are kept apart to list
    entries legibly.
    """

    graph: str
    workload: str
    case: dict
    dtype: str
    gpu: str
    driver: str | None
    superopt: str
    superopt_source: str
    tilelang: str | None
    torch: str | None
    search: dict = field(default_factory=dict)

    def digest(self) -> str:
        """SHA-256 (hex) of the key's canonical JSON: the entry's file name."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def run_key(graph: Graph, dtype: str, gpu: dict, search: dict) -> RunKey:
    """The key of a ``superopt run`` of ``graph`` in storage ``dtype`` on ``gpu`` (a
    :func:`~superopt.run.environment.gpu_identity` answer) with the limits ``search``."""
    return RunKey(graph_digest(graph), graph.name, dict(graph.sizes), dtype, gpu["name"],
                  gpu.get("driver"), __version__, source_digest(), dist_version("tilelang"),
                  dist_version("torch"), dict(sorted(search.items())))


@dataclass(frozen=True)
class Entry:
    """One entry on disk, as ``superopt cache list`` shows it."""

    path: Path
    key: dict
    stored: str
    top1: str | None
    top1_us: float | None
    size_bytes: int


class ResultCache:
    """The entries under ``<root>/results`` (``root``: the cache root by default)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()
        self.dir = self.root / "results"

    def path(self, key: RunKey) -> Path:
        return self.dir / f"{key.digest()}.json"

    def load(self, key: RunKey, graph: Graph) -> RunRecord | None:
        """The stored record of ``key`` for ``graph`` (marked with :attr:`RunRecord.cache`),
        or ``None``: no entry, or one that cannot be read back (logged)."""
        path = self.path(key)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("ignoring the unreadable cache entry %s: %s", path, e)
            return None
        try:
            if doc.get("format") != ENTRY_FORMAT or doc.get("key") != _plain(key):
                log.warning("ignoring the cache entry %s: another format or key", path)
                return None
            record = RunRecord.from_cache(doc["record"], graph)
        except Exception as e:  # noqa: BLE001 - a stale entry is a miss, not an error
            log.warning("ignoring the cache entry %s, which no longer loads: %s: %s", path,
                        type(e).__name__, e)
            return None
        _restore_top1(record, doc.get("top1_source"))
        record.cache = {"key": key.digest(), "stored": doc.get("stored")}
        return record

    def store(self, key: RunKey, record: RunRecord) -> Path:
        """Write ``record`` as the entry of ``key`` (atomically; replaces an older one).

        Raises:
            OSError: the cache directory cannot be written.
        """
        top = record.top1
        source = None
        if top is not None:
            try:
                source = Path(top.planned.module_path).read_text(encoding="utf-8")
            except OSError:
                source = None
        doc = {"format": ENTRY_FORMAT, "key": _plain(key),
               "stored": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "record": record.to_cache(), "top1_source": source}
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        atomic_write(path, json.dumps(doc, default=str) + "\n")
        return path

    def entries(self) -> list[Entry]:
        """Every readable entry, newest first (unreadable ones are left out)."""
        out = []
        for path in self.dir.glob("*.json") if self.dir.is_dir() else ():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
                cands = doc["record"]["candidates"]
                ok = [c for c in cands if c["result"] and c["result"]["status"] == "ok"]
                best = min(ok, key=lambda c: _time_us(c["result"])) if ok else None
                out.append(Entry(path, doc["key"], doc.get("stored") or "",
                                 best["id"] if best else None,
                                 _time_us(best["result"]) if best else None,
                                 path.stat().st_size))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return sorted(out, key=lambda e: e.stored, reverse=True)

    def clear(self) -> tuple[int, int]:
        """Remove the results, the kernel modules and the logs under the root; returns
        (files removed, bytes freed). Leaves the root itself and anything else in it."""
        files = size = 0
        for part in CACHE_PARTS:
            d = self.root / part
            if not d.is_dir():
                continue
            for p in d.rglob("*"):
                if p.is_file():
                    files += 1
                    try:
                        size += p.stat().st_size
                    except OSError:
                        pass
            shutil.rmtree(d, ignore_errors=True)
        return files, size


def _plain(key: RunKey) -> dict:
    """The key as it reads back from JSON (tuples as lists)."""
    return json.loads(json.dumps(asdict(key)))


def _time_us(result: dict) -> float:
    t = result.get("graph_us")
    return t if t is not None else (result.get("call_us") or float("inf"))


def _restore_top1(record: RunRecord, source: Any) -> None:
    """Write the top-1's module again if the kernel modules were cleared since."""
    top = record.top1
    if top is None or not isinstance(source, str) or Path(top.planned.module_path).exists():
        return
    try:
        mod = write_module(source)
    except OSError as e:
        log.warning("could not restore the top-1's module: %s", e)
        return
    top.planned = replace(top.planned, module_path=str(mod.path))
