"""Benchmark harness for the batch-norm gradient ops.

Times the shim against TensorFlow (oneDNN on and off), PyTorch and a streaming-limit kernel, with
the method of the performance research (docs PERF_NOTES section 0): one worker process per
implementation group and thread count, driven over pipes, round-robin in a freshly shuffled order
per round with a pause between workers, each round's per-call median being one sample.

It lives beside the package, not in it (users import tf_fbn_ops; ``python -m tf_fbn_ops bench``
is the package's own quick comparison). Run from a checkout with ``make bench`` or
``PYTHONPATH=benchmarks python -m harness [options]``; ``--help`` lists the options. The modules, in the order data flows through them:

* ``cases``: the case list and ``--filter``/``--quick`` selection;
* ``inputs``: the seeded input tensors every implementation receives;
* ``implementations``: how each implementation builds its inputs and runs one call;
* ``streaming``, ``native_build``, ``streaming_limit.cc``: the streaming-limit kernel;
* ``worker``, ``protocol``, ``pool``: the worker processes and the pipes to them;
* ``schedule``: warm-up, repetition counts and the shuffled timing rounds;
* ``stats``, ``contention``, ``traffic``, ``crosscheck``, ``targets``, ``rows``: what the
  samples mean;
* ``report``, ``plot``, ``machine``: the table, results.json, results.md and results.png.
"""
