"""Many threads at once give the serial results bit for bit, and calls from inside TensorFlow's
own thread pools (tf.data, nested tf.function) do not deadlock."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf

import tf_fbn_ops
from tf_fbn_ops import _loader

SHIM = [tf_fbn_ops.fused_batch_norm_grad, tf_fbn_ops.fused_batch_norm_grad_v2,
        tf_fbn_ops.fused_batch_norm_grad_v3]
THREADS = 16
CALLS_PER_THREAD = 200


def _case(i: int) -> tuple:
    """Distinct inputs for call i: op, dtype, layout and mode vary with i."""
    rng = np.random.default_rng(i)
    op = i % 3
    dtype = [tf.float32, tf.float16, tf.bfloat16][(i // 3) % 3] if op else tf.float32
    data_format = ["NHWC", "NCHW"][(i // 9) % 2]
    shape = (2, 6, 5, 4) if data_format == "NHWC" else (2, 4, 6, 5)
    if i % 7 == 0:
        shape = (8, 16, 16, 32) if data_format == "NHWC" else (8, 32, 16, 16)  # pool-sized
    c = shape[-1] if data_format == "NHWC" else shape[1]
    args = [tf.cast(rng.standard_normal(shape), dtype), tf.cast(rng.standard_normal(shape), dtype),
            *(tf.constant(rng.uniform(0.5, 1.5, c), tf.float32) for _ in range(3))]
    if op == 2:
        args.append(tf.zeros([0]))
    return op, args, dict(data_format=data_format, is_training=bool(i % 2), epsilon=1e-3)


def _bytes(i: int) -> bytes:
    op, args, attrs = _case(i)
    out = SHIM[op](*args, **attrs)
    return b"".join(t.numpy().tobytes() for t in out[:3])


def test_threads_give_the_serial_results_bit_for_bit() -> None:
    total = THREADS * CALLS_PER_THREAD
    distinct = 64  # inputs repeat every 64 calls; each thread mixes all of them
    serial = [_bytes(i) for i in range(distinct)]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda i: (i % distinct, _bytes(i % distinct)), range(total),
                                chunksize=CALLS_PER_THREAD // 4))
    assert len(results) == total
    mismatches = [i for i, value in results if value != serial[i]]
    assert not mismatches, f"{len(mismatches)} results differ from the serial ones"


def test_threads_calling_compiled_functions_give_the_kernels_bits() -> None:
    """16 threads at once calling functions compiled by XLA (custom calls of the kernels, or the
    HLO lowering in builds without them): each result the same bits every time, and where the
    ops compile to custom calls, the non-jit kernel's bits."""
    distinct = 32
    compiled = []
    for i in range(distinct):
        op, args, attrs = _case(i)
        function = tf.function(lambda *a, op=op, attrs=attrs: SHIM[op](*a, **attrs)[:3],
                               jit_compile=True)
        compiled.append((function, args))

    def run(i: int) -> bytes:
        function, args = compiled[i]
        return b"".join(t.numpy().tobytes() for t in function(*args))

    serial = [run(i) for i in range(distinct)]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda i: (i % distinct, run(i % distinct)),
                                range(THREADS * 40), chunksize=10))
    assert not [i for i, value in results if value != serial[i]]
    if _loader.xla_ffi_missing_reason() is None:
        assert serial == [_bytes(i) for i in range(distinct)]


def test_no_deadlock_inside_tensorflow_thread_pools() -> None:
    """tf.data map functions and nested tf.functions run the op on TensorFlow's own threads;
    run in a subprocess with a time limit so a deadlock fails instead of hanging."""
    code = textwrap.dedent("""
        import numpy as np, tensorflow as tf, tf_fbn_ops
        x = tf.random.stateless_normal([64, 16, 16, 32], seed=[1, 2])

        def grads(x):
            return tf_fbn_ops.fused_batch_norm_grad_v2(x, x, tf.ones([32]), tf.zeros([32]),
                                                       tf.ones([32]))[0]

        data = tf.data.Dataset.from_tensors(x).repeat(16).map(grads, num_parallel_calls=8)
        total = sum(float(tf.reduce_sum(d)) for d in data)

        @tf.function
        def inner(x):
            return grads(x)

        @tf.function
        def outer(x):
            return tf.map_fn(inner, tf.stack([x, x, x]), parallel_iterations=3)

        print("OK", np.isfinite(total), outer(x).shape)
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=240)
    assert "OK True (3, 64, 16, 16, 32)" in result.stdout, result.stderr[-2000:]


def test_leak_free_over_ten_thousand_calls() -> None:
    """Resident memory after 10,000 calls is within 5% of that after 1,000."""
    code = textwrap.dedent("""
        import tensorflow as tf, tf_fbn_ops

        def rss_kib():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))

        x = tf.random.stateless_normal([4, 16, 16, 16], seed=[3, 4])  # C = 16 in NHWC and NCHW
        c = tf.ones([16])
        def call(i):
            out = tf_fbn_ops.fused_batch_norm_grad_v3(x, x, c, c, c, tf.zeros([0]),
                                                      is_training=bool(i % 2),
                                                      data_format="NHWC" if i % 3 else "NCHW")
            return out[0]
        for i in range(1000):
            call(i)
        after_1000 = rss_kib()
        for i in range(9000):
            call(i)
        print("RSS", after_1000, rss_kib())
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=300)
    line = [l for l in result.stdout.splitlines() if l.startswith("RSS")]
    assert line, result.stderr[-2000:]
    after_1000, after_10000 = map(int, line[0].split()[1:])
    assert after_10000 <= after_1000 * 1.05, (after_1000, after_10000)
