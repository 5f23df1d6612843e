"""Running candidates: compile in a pool, check and time in an isolated session, peers,
ceilings and the interleaved comparison.

* :mod:`superopt.run.records`: the typed records (candidate, results, timings, comparison);
* :mod:`superopt.run.protocol`: the worker messages over :mod:`multiprocessing.connection`;
* :mod:`superopt.run.process`: one worker process (isolation, timeout, kill);
* :mod:`superopt.run.pool`: the compile pool (compiling, and the dry run's lowering);
* :mod:`superopt.run.session`: the GPU session of one graph;
* :mod:`superopt.run.engine`: the engine interface the search runs candidates through, and
  the local engine (:func:`run_candidates`, the two phases under a budget);
* :mod:`superopt.run.cluster`: the Ray engine (every GPU of a node or cluster; Ray is
  imported only there, lazily), :mod:`superopt.run.dispatch`, how one stream is handed to its
  actors, and :mod:`superopt.run.remote`, what its tasks and actors run;
* :mod:`superopt.run.worker`: what runs inside a worker;
* :mod:`superopt.run.timing`: CUDA-event and CUDA-graph timing, ceilings, :func:`compare`;
* :mod:`superopt.run.peers`: eager PyTorch, ``torch.compile`` and vendor paths of a graph;
* :mod:`superopt.run.environment`: where a measurement was made.

The stage after :mod:`superopt.lower`; nothing in it decides what to run (the search does).
This face imports no torch: the modules that need it import it themselves.
"""
