"""Where the time of the library's op under jit goes, beside its eager kernel (float32,
interleaved rounds in one process); the gradient FbnFusedBatchNormGradV3, or with --op forward
the forward FbnFusedBatchNormV3:

- launch: a trivial compiled program (`v * 2` on four floats) timed right after another call of
  it, and right after one eager call of the kernel, whose tensors have just gone through the
  caches. The difference is what TensorFlow's launch of any XLA program costs once a large
  kernel has evicted its code and data.
- per op: the op compiled alone (one launch per call), and CHAIN calls chained in one compiled
  program (one launch for all), per call, against one eager call; and the same chain run
  eagerly. The chains feed each call's x_backprop to the next as y_backprop (the forward's y
  as x), so each call reads what the one before wrote (from memory where it was streamed), where
  repeated eager calls reuse one cache-warm input: the custom call's own cost is the compiled
  chain against the eager chain.

    .venv/bin/python benchmarks/xla_launch_cost.py [--threads N] [--op forward] [CASE ...]

A case is SHAPE[:FORMAT[:MODE]]: the shape channels-last (NxHxWxC or NxDxHxWxC), FORMAT one
of TensorFlow's data formats (default NHWC), MODE T (training, the default) or I (inference);
by default 24x30x30x96, 32x28x28x128 and 48x14x14x320, at 2 intra-op threads.
"""

import argparse
import time

import numpy as np
import tensorflow as tf

import tf_fbn_ops

SHAPES = ("24x30x30x96", "32x28x28x128", "48x14x14x320")
CHAIN, ROUNDS, LAUNCH_SAMPLES = 10, 9, 200


def median_us(samples: list[float]) -> float:
    return float(np.median(samples)) * 1e6


def launch_cost(big_eager_call) -> tuple[float, float]:
    """The trivial program's time after itself, and after one eager call of the kernel."""
    tiny = tf.function(lambda v: v * 2, jit_compile=True)
    four = tf.ones([4])
    tiny(four)
    warm, cold = [], []
    for _ in range(LAUNCH_SAMPLES):
        tiny(four)
        start = time.perf_counter()
        tiny(four)
        warm.append(time.perf_counter() - start)
        big_eager_call()
        start = time.perf_counter()
        tiny(four)
        cold.append(time.perf_counter() - start)
    return median_us(warm), median_us(cold)


# --op -> the op, and the input each call of a chain takes from the call before.
OPS = {"gradient": (tf_fbn_ops.fused_batch_norm_grad_v3, "y_backprop"),
       "forward": (tf_fbn_ops.fused_batch_norm_forward_v3, "x")}


def per_op(op_name: str, first, kwargs: dict) -> dict[str, float]:
    """Median time per op call: eager, compiled alone, and in a compiled chain."""
    op, fed = OPS[op_name]

    def call(v):
        return op(**{fed: v}, **kwargs)

    def chain(v):
        outputs = []
        for _ in range(CHAIN):
            result = call(v)
            v = result[0]
            outputs += [result[1], result[2]]
        return [v, *outputs]

    alone = tf.function(call, jit_compile=True)
    chained = tf.function(chain, jit_compile=True)
    calls = {"eager": (lambda: call(first), 1),
             "compiled alone": (lambda: alone(first), 1),
             f"eager chain of {CHAIN}": (lambda: chain(first), CHAIN),
             f"compiled chain of {CHAIN}": (lambda: chained(first), CHAIN)}
    for fn, _ in calls.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, (fn, n) in calls.items():
            # CHAIN op calls per sample, however many invocations that takes.
            start = time.perf_counter()
            for _ in range(CHAIN // n):
                fn()
            samples[name].append((time.perf_counter() - start) / CHAIN)
    return {name: median_us(s) for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", default=list(SHAPES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--op", choices=sorted(OPS), default="gradient")
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    rng = np.random.default_rng(0)
    for case in args.cases:
        fields = case.split(":")
        text, data_format, mode = fields + ["NHWC", "T"][len(fields) - 1:]
        dims = [int(d) for d in text.split("x")]
        channels = dims[-1]
        shape = dims if data_format.endswith("C") else [dims[0], channels, *dims[1:-1]]
        first = tf.constant(rng.standard_normal(shape, dtype=np.float32))
        scale = tf.constant(rng.random(channels, dtype=np.float32) + 0.5)
        mean = tf.constant(rng.standard_normal(channels, dtype=np.float32))
        variance = tf.constant(rng.random(channels, dtype=np.float32) + 0.5)
        attrs = {"data_format": data_format, "is_training": mode == "T"}
        if args.op == "gradient":
            kwargs = {"x": tf.constant(rng.standard_normal(shape, dtype=np.float32)),
                      "scale": scale, "reserve_space_1": mean, "reserve_space_2": variance,
                      "reserve_space_3": tf.zeros([0]), **attrs}
        else:
            kwargs = {"scale": scale, "offset": mean, "mean": mean, "variance": variance,
                      **attrs}
        times = per_op(args.op, first, kwargs)
        op, fed = OPS[args.op]
        warm, cold = launch_cost(lambda: op(**{fed: first}, **kwargs))
        eager = times["eager"]
        cells = ", ".join(f"{name} {t:.0f} us ({t / eager:.2f}x)" for name, t in times.items())
        compiled_over_eager_chain = times[f"compiled chain of {CHAIN}"] / times[
            f"eager chain of {CHAIN}"]
        print(f"{args.op} {case}, {args.threads} thread(s): {cells}; compiled chain / eager chain "
              f"{compiled_over_eager_chain:.2f}; a trivial compiled program: "
              f"{warm:.0f} us after itself, {cold:.0f} us after the eager kernel")


if __name__ == "__main__":
    main()
