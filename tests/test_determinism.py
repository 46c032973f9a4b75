"""Results are bit-identical for any intra-op thread count, any CPU instruction set and from
run to run."""

import os
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "determinism_worker.py")


def _digest(threads: int, isa: str | None = None) -> str:
    env = dict(os.environ)
    if isa is not None:
        env["TF_FBN_OPS_CPU_ISA"] = isa  # a narrower copy of the CPU loops (cc/core/cpu/cpu_loops.h)
    result = subprocess.run([sys.executable, WORKER, str(threads)], capture_output=True,
                            text=True, check=True, timeout=600, env=env)
    return result.stdout.strip().splitlines()[-1]


def test_bit_identical_for_1_2_and_4_threads() -> None:
    digests = {n: _digest(n) for n in (1, 2, 4)}
    assert len(digests[1]) == 64
    assert digests[1] == digests[2] == digests[4], digests


def test_bit_identical_for_every_cpu_instruction_set() -> None:
    # Copies this CPU cannot run fall back to the widest it can, which still compares equal.
    digests = {isa: _digest(2, isa) for isa in ("baseline", "avx2", "avx512")}
    assert digests["baseline"] == digests["avx2"] == digests["avx512"] == _digest(2), digests


def test_bit_identical_run_to_run_in_one_process() -> None:
    import numpy as np
    import tensorflow as tf

    import tf_fbn_ops

    rng = np.random.default_rng(3)
    x = tf.constant(rng.standard_normal((8, 64, 32, 32)), tf.float32)
    dy = tf.constant(rng.standard_normal((8, 64, 32, 32)), tf.float32)
    stats = [tf.constant(rng.uniform(0.5, 1.5, 64), tf.float32) for _ in range(3)]
    first = [t.numpy() for t in tf_fbn_ops.fused_batch_norm_grad_v2(dy, x, *stats,
                                                                    data_format="NCHW")]
    for _ in range(5):
        again = tf_fbn_ops.fused_batch_norm_grad_v2(dy, x, *stats, data_format="NCHW")
        for a, b in zip(first, again):
            assert a.tobytes() == b.numpy().tobytes()
