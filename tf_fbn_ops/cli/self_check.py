"""`python -m tf_fbn_ops check`: the diagnostic to run on a machine (and paste into a bug report).

It says what is installed and what TensorFlow sees (devices, the library's GPU kernels and the
driver check's verdict, the CUDA versions), then on every device TensorFlow sees:
- parity: each op, dtype, layout and mode next to TensorFlow's own op on that device, both
  measured against a float64 oracle; the shim may be off by at most TensorFlow's error plus one
  unit of the output type (four units where TensorFlow has no kernel for the case);
- determinism: five runs of the shim give the same bits;
- in place: a graph whose y_backprop dies at the op (x_backprop may take over its buffer) gives
  the eager bits;
- XLA, where the library has its lowerings: TensorFlow's forward op and the shim's gradient
  compiled together (jit_compile=True), as a compiled training step pairs them, against
  TensorFlow's forward and gradient compiled together, with the same parity bound;
- the forward ops (on the CPU, where they have kernels): each version, dtype, layout and mode
  next to TensorFlow's forward op against a float64 oracle with the same bound, five runs with
  the same bits, and compiled by XLA with the eager bits (custom calls) or within the bound (the
  HLO lowering);
- the Keras 3 layer: one training step of a small model with tf_fbn_ops.keras.BatchNormalization
  against the same step with Keras' own layer (loss and weights to float32 rounding), as a
  graph and, where the library has its XLA lowerings, compiled by XLA (what Keras' `fit` does
  by default on a GPU); TensorFloat-32 off for this comparison.

The reserve spaces always come from TensorFlow's own forward op on the same device and, under
XLA, compiled in the same program: what reserve_space_2 holds differs between the CPU, the GPU
and XLA on a GPU, and each pair must agree within its own program.
Prints one line per check and "check: N passed, M failed"; exits 1 if anything failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np

EPSILON = 1e-3
UNIT = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
OPS = {"V1": ("float32",), "V2": ("float32", "float16", "bfloat16"),
       "V3": ("float32", "float16", "bfloat16")}
# The forward op whose reserve spaces each gradient op reads.
FORWARD_OPS = {"V1": "FusedBatchNorm", "V2": "FusedBatchNormV2", "V3": "FusedBatchNormV3"}
SHAPES = {"NHWC": (4, 6, 5, 8), "NCHW": (4, 8, 6, 5)}
RUNS = 5
# Where the GPU part has run: told on machines without a GPU, so the reader knows it was checked.
GPU_RUN_WHERE = ("the GPU part of this check passed on an NVIDIA H100 and an H200 (TensorFlow "
                 "2.21's CUDA build, driver 580) before it compiled the forward with the "
                 "gradient; in that form it has yet to run on a GPU")


class Report:
    """Check lines and their tally."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def info(self, text: str) -> None:
        print(text, flush=True)

    def check(self, ok: bool, text: str) -> None:
        self.passed += ok
        self.failed += not ok
        print(("PASS " if ok else "FAIL ") + text, flush=True)


def _environment(report: Report, tf, tf_fbn_ops) -> list[str]:
    """Versions, devices and the GPU verdict; returns the devices to check ("/CPU:0", ...)."""
    from tf_fbn_ops import __version__, _loader  # noqa: PLC0415

    build = tf.sysconfig.get_build_info()
    report.info(f"tf-fbn-ops {__version__}: {_loader.build_summary()}")
    report.info(f"TensorFlow {tf.__version__} ({'CUDA ' + build['cuda_version'] if build.get('is_cuda_build') else 'no CUDA'} build), "
                f"Python {sys.version.split()[0]}")
    report.info(f"library: {tf_fbn_ops.library_path()}")
    report.info(f"library's GPU kernels: {tf_fbn_ops.gpu_kernel_status()}")
    gpus = tf.config.list_physical_devices("GPU")
    names = [d.name for d in tf.config.list_logical_devices() if d.device_type in ("CPU", "GPU")]
    report.info("devices TensorFlow sees: " + ", ".join(names))
    if not gpus:
        report.info(f"GPU: none visible to TensorFlow, so only the CPU is checked; "
                    f"{GPU_RUN_WHERE}.")
    else:
        report.info(f"GPU: {len(gpus)} visible; the CPU and each GPU are checked.")
    return names


def _case_inputs(tf, dtype: str, data_format: str, training: bool, seed: int) -> dict:
    """dy, x, scale and the reserve spaces TensorFlow's forward op makes on this device."""
    rng = np.random.default_rng(seed)
    shape = SHAPES[data_format]
    channels = shape[-1] if data_format == "NHWC" else shape[1]
    x = tf.cast(rng.standard_normal(shape) * 2 + 0.5, dtype)
    scale = tf.constant(rng.uniform(0.5, 1.5, channels), tf.float32)
    if training:
        def forward(x):
            return tf.raw_ops.FusedBatchNormV3(
                x=x, scale=scale, offset=tf.zeros([channels]), mean=tf.zeros([0]),
                variance=tf.zeros([0]), epsilon=EPSILON, data_format=data_format,
                is_training=True)

        try:
            stats = forward(x)
        except tf.errors.InvalidArgumentError:
            # TensorFlow before 2.14 has no bfloat16 forward on the CPU. x's values are exact
            # in float32, and the saved statistics are float32 either way.
            stats = forward(tf.cast(x, tf.float32))
        saved = stats.reserve_space_1, stats.reserve_space_2
    else:
        saved = (tf.constant(rng.uniform(0.3, 0.7, channels), tf.float32),
                 tf.constant(rng.uniform(3.0, 5.0, channels), tf.float32))
    return {"y_backprop": tf.cast(rng.standard_normal(shape), dtype), "x": x, "scale": scale,
            "reserve_space_1": saved[0], "reserve_space_2": saved[1]}


def float64_gradients(tf, inputs: dict, data_format: str, training: bool) -> tuple:
    """The float64 gradients; in training from the batch's own float64 statistics."""
    from tf_fbn_ops import reference  # noqa: PLC0415

    as64 = lambda t: tf.cast(t, tf.float32).numpy().astype(np.float64)  # noqa: E731
    dy, x, scale = as64(inputs["y_backprop"]), as64(inputs["x"]), as64(inputs["scale"])
    if training:
        axes = tuple(a for a in range(x.ndim) if a != reference.channel_axis(x.ndim, data_format))
        mean, variance = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, variance = as64(inputs["reserve_space_1"]), as64(inputs["reserve_space_2"])
    return reference.batch_norm_grad(dy, x, scale, mean, variance, EPSILON, data_format, training)


def _bits(t) -> bytes:
    return t.numpy().tobytes()


def _within_bound(tf, ours, theirs, oracle, dtype: str) -> str | None:
    """None when every output of ours is within TensorFlow's error plus one unit, else why."""
    as64 = lambda t: tf.cast(t, tf.float32).numpy().astype(np.float64)  # noqa: E731
    for i in range(3):
        unit = UNIT[dtype if i == 0 else "float32"] * max(np.max(np.abs(oracle[i])), 1e-30)
        error = np.max(np.abs(as64(ours[i]) - oracle[i]))
        allowed = 4 * unit if theirs is None else np.max(np.abs(as64(theirs[i]) - oracle[i])) + unit
        if not error <= allowed:
            return f"output {i}: error {error:.3g} > {allowed:.3g}"
    return None


def run_op_cases(tf, tf_fbn_ops, device: str, xla: bool) -> dict[str, tuple[int, list[str]]]:
    """Every op, dtype, layout and mode on `device`: for each check (parity, deterministic, in
    place, and XLA parity when `xla`), the number of cases and the failures, one line each.
    Also the TensorFlow-matrix smoke test's body (tools/tf_matrix_smoke.py)."""
    shims = {"V1": tf_fbn_ops.fused_batch_norm_grad, "V2": tf_fbn_ops.fused_batch_norm_grad_v2,
             "V3": tf_fbn_ops.fused_batch_norm_grad_v3}
    builtins = {"V1": tf.raw_ops.FusedBatchNormGrad, "V2": tf.raw_ops.FusedBatchNormGradV2,
                "V3": tf.raw_ops.FusedBatchNormGradV3}
    totals: dict[str, int] = {}
    failures: dict[str, list[str]] = {}
    seed = 0
    for op, dtypes in OPS.items():
        for dtype in dtypes:
            for data_format in SHAPES:
                for training in (True, False):
                    seed += 1
                    case = f"{device} {op} {dtype} {data_format} training={training}"
                    with tf.device(device):
                        outcome = _one_case(tf, shims[op], builtins[op], op, dtype, data_format,
                                            training, seed, xla)
                    for name, problem in outcome.items():
                        totals[name] = totals.get(name, 0) + 1
                        failures.setdefault(name, [])
                        if problem is not None:
                            failures[name].append(f"{case}: {name}: {problem}")
    return {name: (totals[name], failures[name]) for name in totals}


def _op_checks(report: Report, tf, tf_fbn_ops, device: str, xla: bool) -> None:
    for name, (total, failed) in run_op_cases(tf, tf_fbn_ops, device, xla).items():
        for failure in failed:
            report.check(False, failure)
        report.check(not failed, f"{device}: {name} {total - len(failed)}/{total} cases")


def _one_case(tf, shim: Callable, builtin: Callable, op: str, dtype: str, data_format: str,
              training: bool, seed: int, xla: bool) -> dict[str, str | None]:
    inputs = _case_inputs(tf, dtype, data_format, training, seed)
    if op == "V3":
        inputs["reserve_space_3"] = tf.zeros([0])
    attrs = {"epsilon": EPSILON, "data_format": data_format, "is_training": training}
    oracle = float64_gradients(tf, inputs, data_format, training)
    ours = shim(**inputs, **attrs)
    try:
        theirs = builtin(**inputs, **attrs)
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, tf.errors.UnimplementedError):
        theirs = None  # e.g. channels-first inference on TensorFlow's CPU kernel
    outcome: dict[str, str | None] = {"parity": _within_bound(tf, ours, theirs, oracle, dtype)}
    repeats = [shim(**inputs, **attrs) for _ in range(RUNS - 1)]
    outcome["deterministic"] = next(
        (f"run {r + 2} output {i} differs" for r, again in enumerate(repeats) for i in range(3)
         if _bits(again[i]) != _bits(ours[i])), None)

    def in_graph(y_backprop, zeros):
        return shim(**dict(inputs, y_backprop=y_backprop + zeros), **attrs)
    graph = tf.function(in_graph)(inputs["y_backprop"], tf.zeros_like(inputs["y_backprop"]))
    outcome["in place"] = next((f"output {i} differs from eager" for i in range(3)
                                if _bits(graph[i]) != _bits(ours[i])), None)
    if xla:
        def compiled(gradient):
            program = with_forward(tf, gradient, FORWARD_OPS[op], inputs, attrs)
            return tf.function(program, jit_compile=True)()

        ours_jit = compiled(shim)
        try:
            theirs_jit = compiled(builtin)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
            theirs_jit = None
        outcome["XLA parity"] = _within_bound(tf, ours_jit, theirs_jit, oracle, dtype)
    return outcome


def with_forward(tf, gradient: Callable, forward_op: str, inputs: dict,
                 attrs: dict) -> Callable[[], tuple]:
    """A program of TensorFlow's training forward `forward_op` and `gradient` on what it saved,
    as a training step pairs them (in inference, `gradient` on `inputs`' statistics). Wrapped in
    tf.function(jit_compile=True) the two compile into one XLA program, where the gradient
    reads what the compiled forward wrote on that device (on a GPU not what the eager forward
    writes)."""
    def program():
        args = dict(inputs)
        if attrs["is_training"]:
            x = inputs["x"]
            channels = inputs["scale"].shape[0]
            stats = getattr(tf.raw_ops, forward_op)(
                x=x, scale=inputs["scale"], offset=tf.zeros([channels]), mean=tf.zeros([0]),
                variance=tf.zeros([0]), **attrs)
            args["reserve_space_1"], args["reserve_space_2"] = stats[3], stats[4]
            if "reserve_space_3" in args:
                args["reserve_space_3"] = stats[5]
        return tuple(gradient(**args, **attrs)[:3])

    return program


FORWARD_SHIMS = {"V1": "fused_batch_norm_forward", "V2": "fused_batch_norm_forward_v2",
                 "V3": "fused_batch_norm_forward_v3"}


def _forward_checks(report: Report, tf, tf_fbn_ops, xla: bool) -> None:
    from tf_fbn_ops import _loader, reference  # noqa: PLC0415

    same_bits_compiled = xla and _loader.xla_ffi_missing_reason() is None
    totals: dict[str, int] = {}
    failures: dict[str, list[str]] = {}
    seed = 100
    for op, dtypes in OPS.items():
        shim = getattr(tf_fbn_ops, FORWARD_SHIMS[op])
        builtin = getattr(tf.raw_ops, FORWARD_OPS[op])
        for dtype in dtypes:
            for data_format, shape in SHAPES.items():
                for training in (True, False):
                    seed += 1
                    rng = np.random.default_rng(seed)
                    channels = shape[-1] if data_format == "NHWC" else shape[1]
                    per_channel = lambda low, high: tf.constant(  # noqa: E731
                        rng.uniform(low, high, channels), tf.float32)
                    kwargs = dict(x=tf.cast(rng.standard_normal(shape) * 2 + 30.0, dtype),
                                  scale=per_channel(0.5, 1.5), offset=per_channel(-1.0, 1.0),
                                  mean=per_channel(29.0, 31.0), variance=per_channel(3.0, 5.0),
                                  epsilon=EPSILON, data_format=data_format,
                                  is_training=training)
                    with tf.device("CPU"):
                        ours = shim(**kwargs)
                        oracle = reference.batch_norm_forward(
                            *(tf.cast(kwargs[k], tf.float64).numpy()
                              for k in ("x", "scale", "offset", "mean", "variance")),
                            EPSILON, data_format, training)
                        checks = {
                            "forward parity": _within_bound(tf, ours, builtin(**kwargs), oracle,
                                                            dtype),
                            "forward deterministic": None if all(
                                _bits(shim(**kwargs)[0]) == _bits(ours[0])
                                for _ in range(RUNS - 1)) else "runs differ"}
                        if xla:
                            jit = tf.function(lambda: shim(**kwargs), jit_compile=True)()
                            checks["forward under XLA"] = (
                                (None if all(_bits(jit[i]) == _bits(ours[i]) for i in range(5))
                                 else "not the eager bits") if same_bits_compiled
                                else _within_bound(tf, jit, None, oracle, dtype))
                    case = f"CPU forward {op} {dtype} {data_format} training={training}"
                    for name, problem in checks.items():
                        totals[name] = totals.get(name, 0) + 1
                        if problem is not None:
                            failures.setdefault(name, []).append(f"{case}: {name}: {problem}")
    for name, total in totals.items():
        failed = failures.get(name, [])
        for failure in failed:
            report.check(False, failure)
        report.check(not failed, f"CPU: {name} {total - len(failed)}/{total} cases")


def _keras_check(report: Report, tf, device: str, jit_compile: bool) -> None:
    """One SGD step of Conv-BN-ReLU-Dense with each layer, from the same weights and data, as a
    graph or compiled by XLA. TensorFloat-32 is off meanwhile: two compiled models may pick
    different convolution algorithms, whose TF32 roundings would part them beyond float32's."""
    try:
        import keras  # noqa: PLC0415
    except ImportError:
        report.info(f"{device}: Keras 3 layer: skipped (no keras installed)")
        return
    if int(keras.__version__.split(".")[0]) < 3:
        report.info(f"{device}: Keras 3 layer: skipped (Keras {keras.__version__})")
        return
    import tf_fbn_ops.keras  # noqa: PLC0415

    rng = np.random.default_rng(7)
    images = rng.standard_normal((16, 8, 8, 3)).astype(np.float32)
    labels = rng.integers(0, 4, 16)

    def step(batch_norm: type) -> tuple[float, list[np.ndarray]]:
        keras.utils.set_random_seed(3)
        model = keras.Sequential([
            keras.Input((8, 8, 3)), keras.layers.Conv2D(6, 3, use_bias=False), batch_norm(),
            keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit_compile)
        loss = float(model.train_on_batch(images, labels))
        return loss, [np.asarray(w) for w in model.get_weights()]

    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        with tf.device(device):
            theirs = step(keras.layers.BatchNormalization)
            ours = step(tf_fbn_ops.keras.BatchNormalization)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    close = abs(ours[0] - theirs[0]) <= 1e-4 * max(1.0, abs(theirs[0])) and all(
        np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(ours[1], theirs[1]))
    compiled = "compiled by XLA" if jit_compile else "as a graph"
    report.check(close, f"{device}: Keras 3 layer training step {compiled} matches Keras' "
                        f"layer (loss {ours[0]:.6f} vs {theirs[0]:.6f})")


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: PLC0415

    import tf_fbn_ops  # noqa: PLC0415
    from tf_fbn_ops import _loader  # noqa: PLC0415

    report = Report()
    try:
        tf_fbn_ops.load_library()
    except ImportError as e:
        report.check(False, f"the library loads: {e}")
        print(f"check: {report.passed} passed, {report.failed} failed")
        return 1
    devices = _environment(report, tf, tf_fbn_ops)
    xla = _loader.xla_missing_reason() is None
    if not xla:
        report.info(f"XLA: not checked ({_loader.xla_missing_reason()})")
    # Each case traces its own small functions, on purpose: TensorFlow's retracing warning
    # would only be noise in the report.
    logger, level = tf.get_logger(), tf.get_logger().level
    logger.setLevel("ERROR")
    try:
        _forward_checks(report, tf, tf_fbn_ops, xla)
        for device in devices:
            _op_checks(report, tf, tf_fbn_ops, device, xla)
            for jit_compile in (False, True) if xla else (False,):
                _keras_check(report, tf, device, jit_compile)
    finally:
        logger.setLevel(level)
    print(f"check: {report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0
