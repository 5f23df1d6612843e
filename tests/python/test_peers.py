"""How peers are timed: the output policy they share with the candidates."""


def test_fresh_outputs_keeps_the_last_n_results_alive():
    """A timed peer keeps its last n outputs alive (one per rotation set), so no call can be
    handed the block of one of the n - 1 calls before it; the oldest is released just before
    the (n + 1)-th call allocates, so n buffers rotate, as a candidate's do; the results
    are the peer's own."""
    import gc
    import weakref

    import torch

    from superopt.run.peers import fresh_outputs

    alive_at_call = []
    made = []

    def peer(x):
        gc.collect()
        alive_at_call.append(sum(r() is not None for r in made))
        out = torch.full((1024,), float(x))
        made.append(weakref.ref(out))
        return out

    timed = fresh_outputs(peer, 3)
    assert [float(timed(i)[0]) for i in range(5)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    # outputs alive while each call runs: 0, 1, 2, then 2 (the oldest of three released)
    assert alive_at_call == [0, 1, 2, 2, 2]
    gc.collect()
    assert [r() is not None for r in made] == [False, False, True, True, True]


def test_every_timed_peer_writes_fresh_outputs(monkeypatch):
    """run_peer hands the timer the peer wrapped by fresh_outputs, sized to the rotation
    sets (the harness's other door, the worker's comparison, is checked below)."""
    import gc

    import torch

    from superopt.ir.semantics import evaluate, random_inputs
    from superopt.run import peers
    from superopt.run.records import Timing
    from superopt.workloads import WORKLOADS

    g = WORKLOADS["matmul"].graph(m=4, d=8, n=8)
    sets = [random_inputs(g, s, dtype=torch.float32) for s in range(3)]
    seen = {}

    def fake_measure(fn, *, rotate, config=None, device=None):
        made = [fn(*args) for args in rotate * 2]
        gc.collect()
        seen["distinct_alive"] = len({id(o) for o in made[-3:]})
        seen["held"] = fn.__closure__ is not None and any(
            isinstance(c.cell_contents, list) and len(c.cell_contents) == 3
            for c in fn.__closure__)
        return Timing(1.0, None)

    monkeypatch.setattr(peers, "measure", fake_measure)
    ref = evaluate(g, {k: v.double() for k, v in sets[0].items()})
    r = peers.run_peer(g, "eager", sets[0], ref, tolerance=1e-3, rotate=sets)
    assert r.status == "ok", r
    assert seen == {"distinct_alive": 3, "held": True}


def test_the_comparison_harness_times_peers_with_fresh_outputs(monkeypatch):
    """The worker's comparison (every reported ratio) hands the interleaved timer each peer
    wrapped by fresh_outputs, sized to its rotation sets."""
    from superopt.run import protocol as P
    from superopt.run import timing
    from superopt.run.worker import Worker
    from superopt.workloads import WORKLOADS

    seen = {}

    def fake_compare(subjects, *, rounds, rng, config=None, device=None):
        fn, sets = subjects["eager"]
        outs = [fn(*args) for args in sets * 2]
        seen["sets"] = len(sets)
        seen["kept"] = [c.cell_contents for c in fn.__closure__
                        if isinstance(c.cell_contents, list)]
        seen["last"] = outs[-len(sets):]
        return timing.Comparison(candidates=[], peers=[], times_us={"eager": [1.0] * rounds})

    monkeypatch.setattr(timing, "compare", fake_compare)
    w = Worker("cpu", cuda_init=False)
    w.on_Setup(P.Setup(WORKLOADS["matmul"].graph(m=4, d=8, n=8), "float32"))
    w.on_Compare(P.Compare(candidates=(), peers=("eager",), rounds=2, seed=1, tolerance=1e-3))
    (kept,) = seen["kept"]
    assert len(kept) == seen["sets"] and all(a is b for a, b in zip(kept, seen["last"]))
