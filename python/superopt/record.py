"""The typed record of a run: each candidate as planned and as run, the peers, the
comparison, the ceilings; what the report presents, the bridge sends and ``record.json``
holds (:meth:`RunRecord.to_json`), and the form the tuning-result cache stores
(:meth:`RunRecord.to_cache` / :meth:`RunRecord.from_cache`: typed again on the way back,
each candidate's derivation replayed and matched).

Owns: the record and its JSON forms. Imports the records of the earlier stages only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from .derive.derivation import Derived
from .derive.enumerator import replay
from .derive.rules import RULES
from .ir.dag import Graph
from .ir.facts import flops as graph_flops, min_bytes as graph_min_bytes
from .lower.lowering import PlanMatch
from .lower.match import match_plan
from .run.protocol import LowerOutcome
from .run.records import Candidate, CandidateResult, Ceilings, Comparison, PeerResult
from .wire import derivation_from_wire, derivation_to_wire

#: The version of :meth:`RunRecord.to_cache`'s layout (a cache entry of another is a miss).
CACHE_FORMAT = 1


def _typed(cls, d: dict | None):
    """``cls(**d)`` on ``cls``'s own fields (derived keys of ``to_dict`` left out)."""
    if d is None:
        return None
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class PlannedCandidate:
    """A candidate before it runs: derivation, matched plan, configuration, module, estimate."""

    id: str
    derived: Derived
    match: PlanMatch
    config: dict
    module_path: str
    source_hash: str
    estimate_us: float

    def candidate(self) -> Candidate:
        """The record the run stage takes."""
        return Candidate(self.id, self.derived.derivation.id, dict(self.config),
                         self.module_path, self.source_hash)


@dataclass
class CandidateRecord:
    """One candidate as the report shows it: its plan and, once run, its result."""

    planned: PlannedCandidate
    result: CandidateResult | None = None
    lowered: LowerOutcome | None = None
    search_us: float | None = None

    @property
    def id(self) -> str:
        return self.planned.id

    @property
    def status(self) -> str:
        if self.result is not None:
            return self.result.status
        if self.lowered is not None:
            return "lowered" if self.lowered.status == "ok" else self.lowered.status
        return "planned"

    @property
    def time_us(self) -> float | None:
        return self.result.time_us if self.result is not None else None

    def to_json(self, flops: int | None) -> dict:
        p = self.planned
        d: dict[str, Any] = {"id": p.id, "derivation_id": p.derived.derivation.id,
                             "config": p.config, "status": self.status,
                             "steps": [s.rule for s in p.derived.derivation.steps],
                             "kernels": len(p.match.kernels), "families": list(p.match.families),
                             "estimate_us": round(p.estimate_us, 2),
                             "module_path": p.module_path, "source_hash": p.source_hash}
        if self.result is not None:
            r = self.result.to_dict()
            d.update({k: r[k] for k in ("call_us", "graph_us", "relerr", "error", "compile_s",
                                        "done_s", "timed_on")})
            if self.search_us is not None:
                d["search_graph_us"] = self.search_us
            t = self.time_us
            d["tflops"] = flops / (t * 1e-6) / 1e12 if flops and t else None
        if self.lowered is not None:
            d["lowering"] = {"status": self.lowered.status, "error": self.lowered.error,
                             "seconds": self.lowered.seconds, "launch": self.lowered.launch,
                             "cuda": self.lowered.cuda}
        return d


@dataclass(repr=False)
class RunRecord:
    """Everything a run found, typed; :meth:`to_json` is ``record.json``.

    ``mode`` is ``"timed"`` (:func:`tune`) or ``"dry-run"`` (:func:`dry_run`). Its ``repr``
    is one line (graph, mode, counts, the top-1 and its time); the candidates' CUDA C and
    every field stay on the object and in :meth:`to_json`.
    """

    def __repr__(self) -> str:
        top = self.top1 if self.mode == "timed" else self.estimated_top1
        if top is None:
            lead = "no candidate passed" if self.mode == "timed" else "none lowered"
        elif self.mode == "timed":
            lead = f"top1={top.id} {top.time_us:.1f} us"
            best = self.best_peer()
            if best is not None:
                lead += f", best peer {best.name!r} {best.time_us:.1f} us"
        else:
            lead = f"estimated_top1={top.id} {top.planned.estimate_us:.1f} us (not timed)"
        return (f"<RunRecord {self.graph.name!r} {self.dtype} {self.mode}: "
                f"{len(self.candidates)} candidates of {self.lowerable} lowerable plans, "
                f"{lead}>")

    graph: Graph
    dtype: str
    mode: str
    command: str
    environment: dict
    derivations: int
    lowerable: int
    candidates: list[CandidateRecord]
    peers: list[PeerResult] = field(default_factory=list)
    comparison: Comparison | None = None
    ceilings: Ceilings | None = None
    search_cost: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Set when the record was answered from the tuning-result cache: ``{"key", "stored"}``.
    cache: dict | None = None
    #: How the run timed (:class:`~superopt.run.records.TimingConfig` as a dict; timed
    #: runs only): the preheat, replays and rotation that its times depend on.
    timing: dict | None = None
    #: A dry run's peers: the names a timed run of this graph would compare against
    #: (:func:`superopt.run.peers.peer_names`), none of them run.
    peers_planned: list[str] = field(default_factory=list)

    @property
    def flops(self) -> int:
        return graph_flops(self.graph)

    @property
    def min_bytes(self) -> int:
        return graph_min_bytes(self.graph, self.dtype)

    @property
    def floor_us(self) -> float | None:
        return None if self.ceilings is None else self.ceilings.floor_us(self.flops,
                                                                          self.min_bytes)

    @property
    def top1(self) -> CandidateRecord | None:
        ok = [c for c in self.candidates if c.status == "ok" and c.time_us is not None]
        return ok[0] if ok else None

    @property
    def estimated_top1(self) -> CandidateRecord | None:
        """The first candidate of the estimated ranking that lowered (a dry run's best
        guess; ``None`` if none did)."""
        ok = [c for c in self.candidates if c.status in ("lowered", "ok")]
        return min(ok, key=lambda c: c.planned.estimate_us) if ok else None

    def best_peer(self) -> PeerResult | None:
        good = [p for p in self.peers if p.status == "ok" and p.time_us is not None]
        return min(good, key=lambda p: p.time_us) if good else None

    def peer_ratios(self) -> dict[str, dict]:
        """peer name → the summary of peer/top-1 over the comparison's rounds."""
        if self.comparison is None or self.top1 is None:
            return {}
        return {p: self.comparison.summary(p, self.top1.id) for p in self.comparison.peers}

    def certificate(self) -> list[str]:
        """The Lean theorem names that justify the top-1's derivation, step by step."""
        top = self.top1
        if top is None:
            return []
        steps = top.planned.derived.derivation.steps
        return [RULES[s.rule].theorem for s in steps] + ["Superopt.derive_sound"]

    def to_json(self) -> dict:
        g = self.graph
        fl = self.flops
        out: dict[str, Any] = {
            "workload": g.name, "case": g.sizes, "dtype": self.dtype, "mode": self.mode,
            "command": self.command, "environment": self.environment,
            "derivations": self.derivations, "lowerable": self.lowerable,
            "flops": fl, "min_bytes": self.min_bytes,
            "candidates": [c.to_json(fl) for c in self.candidates],
            "peers": [p.to_dict() for p in self.peers],
            "search_cost": self.search_cost, "notes": self.notes,
        }
        if self.ceilings is not None:
            out["ceilings"] = self.ceilings.to_dict()
            out["floor_us"] = self.floor_us
        if self.comparison is not None:
            out["comparison"] = self.comparison.to_dict()
        if self.cache is not None:
            out["cache"] = dict(self.cache)
        if self.timing is not None:
            out["timing"] = dict(self.timing)
        if self.mode == "dry-run" and self.estimated_top1 is not None:
            out["estimated_top1"] = self.estimated_top1.id
        if self.mode == "dry-run":
            out["peers_planned"] = list(self.peers_planned)
        top = self.top1
        if top is not None:
            out["top1"] = top.id
            out["certificate"] = self.certificate()
            best = self.best_peer()
            ratios = self.peer_ratios()
            if best is not None:
                out["best_peer"], out["best_peer_us"] = best.name, best.time_us
                # the median of the interleaved rounds' ratios when there is a comparison;
                # else the ratio of separately measured medians, and the record says which
                med = (ratios.get(best.name) or {}).get("median")
                out["speedup_vs_best_peer"] = med if med is not None else \
                    best.time_us / top.time_us
                out["speedup_from"] = ("median of the interleaved rounds' ratios"
                                       if med is not None else
                                       "ratio of medians timed apart (no interleaved rounds)")
            if ratios:
                out["ratios"] = ratios
            if self.floor_us:
                out["fraction_of_floor"] = top.time_us / self.floor_us
        return out

    # -- the cached form ----------------------------------------------------------------

    def to_cache(self) -> dict:
        """What the tuning-result cache stores (JSON-ready): every typed field, each
        candidate's derivation as its wire map, without the graph (the cache's key names
        it; :meth:`from_cache` takes it back)."""
        derivations = {}
        cands = []
        for c in self.candidates:
            p = c.planned
            d = p.derived.derivation
            derivations.setdefault(d.id, derivation_to_wire(d))
            cands.append({"id": p.id, "derivation": d.id, "config": p.config,
                          "module_path": p.module_path, "source_hash": p.source_hash,
                          "estimate_us": p.estimate_us,
                          "result": c.result.to_dict() if c.result is not None else None,
                          "search_us": c.search_us})
        return {"format": CACHE_FORMAT, "dtype": self.dtype, "mode": self.mode,
                "command": self.command, "environment": self.environment,
                "derivations": self.derivations, "lowerable": self.lowerable,
                "derivation_maps": derivations, "candidates": cands,
                "peers": [p.to_dict() for p in self.peers],
                "comparison": (None if self.comparison is None else
                               {f.name: getattr(self.comparison, f.name)
                                for f in fields(Comparison)}),
                "ceilings": self.ceilings.to_dict() if self.ceilings is not None else None,
                "search_cost": self.search_cost, "notes": self.notes,
                "timing": self.timing}

    @classmethod
    def from_cache(cls, doc: dict, graph: Graph) -> "RunRecord":
        """The record :meth:`to_cache` stored, for ``graph``: each derivation replayed
        (:func:`~superopt.derive.replay`) and matched again (:func:`~superopt.lower.match_plan`).

        Raises:
            ValueError: a document of another :data:`CACHE_FORMAT`.
            SuperoptError: a derivation that no longer replays or matches (the rules or the
                families changed); KeyError/TypeError: a malformed document.
        """
        if doc.get("format") != CACHE_FORMAT:
            raise ValueError(f"cache format {doc.get('format')!r}, expected {CACHE_FORMAT}")
        dtype = doc["dtype"]
        derived: dict[str, tuple[Derived, PlanMatch]] = {}
        for ident, wire_map in doc["derivation_maps"].items():
            d = derivation_from_wire(wire_map)
            dv = Derived(d, replay(graph, d.steps))
            derived[ident] = (dv, match_plan(dv.plan, dtype))
        recs = []
        for c in doc["candidates"]:
            dv, m = derived[c["derivation"]]
            planned = PlannedCandidate(c["id"], dv, m, dict(c["config"]), c["module_path"],
                                       c["source_hash"], float(c["estimate_us"]))
            recs.append(CandidateRecord(planned, _typed(CandidateResult, c["result"]),
                                        search_us=c.get("search_us")))
        return cls(graph, dtype, doc["mode"], doc["command"], dict(doc["environment"]),
                   doc["derivations"], doc["lowerable"], recs,
                   [_typed(PeerResult, p) for p in doc["peers"]],
                   _typed(Comparison, doc["comparison"]), _typed(Ceilings, doc["ceilings"]),
                   dict(doc["search_cost"]), list(doc["notes"]),
                   timing=doc.get("timing"))
