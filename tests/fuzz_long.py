"""The long differential fuzz run (`make fuzz`): N random cases (default 100000) against
tf.raw_ops, printing how many ended in each verdict. Exits non-zero on the first disagreement,
printing the case. With --xla (`make fuzz-xla`), each case is the shim under XLA against the
shim's own kernel instead (differential.check_jit: the same bits or both raise).

Usage: python tests/fuzz_long.py [--xla] [N] [SEED]
"""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from differential import cases, check, check_jit  # noqa: E402

if __name__ == "__main__":
    xla = "--xla" in sys.argv
    sys.argv = [a for a in sys.argv if a != "--xla"]
    judge = check_jit if xla else check
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    counts: collections.Counter = collections.Counter()
    start = time.time()

    @seed(int(sys.argv[2]) if len(sys.argv) > 2 else 2026)
    @settings(max_examples=total, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def run(case):
        counts[judge(case)] += 1
        done = sum(counts.values())
        if done % 10_000 == 0:
            print(f"  {done} cases, {time.time() - start:.0f} s", flush=True)

    run()
    print(f"{sum(counts.values())} cases in {time.time() - start:.0f} s, no disagreement:")
    for verdict, n in counts.most_common():
        print(f"  {n:8d}  {verdict}")
