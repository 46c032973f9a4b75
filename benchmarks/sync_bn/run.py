"""`make bench-sync`: a synchronized training step on 2 workers (MultiWorkerMirroredStrategy,
127.0.0.1, the CPU), tf_fbn_ops' synchronized layer against Keras', on a small convnet and on
keras.applications' MobileNetV2: step time (median of alternating rounds in the same
processes, and the ratio) and collectives per step, read from the traced step.

Usage: python benchmarks/sync_bn/run.py [--rounds R] [--steps S] [--models convnet,mobilenet_v2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
from worker_processes import run_cluster  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--models", default="convnet,mobilenet_v2")
    args = parser.parse_args(argv)
    print("model         workers  collectives/step (ours, Keras')  step ms (ours, Keras')  "
          "Keras'/ours")
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "result.json"
            results = run_cluster([[sys.executable, str(HERE / "worker.py"), model,
                                    str(args.rounds), str(args.steps), str(out)]
                                   for _ in range(2)], timeout_s=1800)
            for status, stdout, stderr in results:
                if status != 0 or "WORKER DONE" not in stdout:
                    print(stderr[-3000:])
                    return 1
            result = json.loads(out.read_text())
        ours = statistics.median(result["times"]["ours"]) * 1e3
        theirs = statistics.median(result["times"]["keras"]) * 1e3
        counts = result["collectives"]
        print(f"{model:13s} {result['workers']:7d}  {counts['ours']:6d} {counts['keras']:6d}"
              f"                   {ours:8.1f} {theirs:8.1f}        {theirs / ours:5.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
