"""The training benchmark's worker: every variant of the selected models at one thread count.

Usage (the parent starts it): ``python -m harness.training.worker --threads N
--models resnet2d,conv3d --rounds R --steps S --bn-calls C --seed SEED [--quick]``. The whole
job is on the command line; the worker prints one JSON object on stdout when it is done, and
its progress (and TensorFlow's chatter) on stderr.

Thread counts are fixed before TensorFlow runs anything, as in the op harness's worker (whose
``setup_tensorflow`` this one calls), hence one process per thread count. All four variants
live in the same process and are timed side by side: per round, a freshly shuffled order of
the (model, variant) steps and of the isolated batch-norm backward timings (see isolated.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from harness import contention
from harness.batch_timer import time_batch
from harness.cli import name_list, progress
from harness.stats import median_ns
from harness.training import models, variants
from harness.training.isolated import LayerBackward
from harness.worker import _protocol_streams, setup_tensorflow

WARMUP_STEPS = 3  # untimed steps after the one that traces (1 with --quick)


@dataclass
class Trained:
    """One variant's model, ready to step, and its timings so far."""

    loaded: variants.Loaded
    model: Any
    x: Any
    y: Any
    trace_s: float
    traces: int | None  # tracing count of the train function after the warm-up
    backward_ops: list[str]
    bn_layers: list[tuple]  # (input shape, epsilon) per batch-norm layer
    samples_ns: list[float] = field(default_factory=list)  # per round: median step
    visits: list[dict] = field(default_factory=list)  # per round: contention evidence

    def step(self) -> None:
        self.model.train_on_batch(self.x, self.y)  # returns the loss as a number: synchronous


def _op_types(graph_def: Any) -> set[str]:
    types = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        types |= {node.op for node in function.node_def}
    return types


def backward_ops(loaded: variants.Loaded, model: Any, x: Any, y: Any) -> list[str]:
    """The batch-norm gradient op types in the variant's training step, traced afresh inside
    the variant's context (the timed trace is not reachable through a public API)."""
    import tensorflow as tf  # noqa: PLC0415

    data = (tf.TensorSpec(x.shape, tf.float32), tf.TensorSpec(y.shape, tf.int32))
    with loaded.trace_context():
        graph = tf.function(model.train_step).get_concrete_function(data).graph
    found = _op_types(graph.as_graph_def())
    return sorted(found & {variants.TF_GRAD_OP, variants.SHIM_GRAD_OP})


def check_backward(name: str, ops: list[str]) -> None:
    """Raises if the step's batch-norm backward is not the one the variant is about."""
    expected = variants.VARIANTS[name].expected_op
    if (expected is None and ops) or (expected is not None and ops != [expected]):
        raise RuntimeError(f"{name}: the training step's batch-norm gradient ops are {ops}, "
                           f"expected {[expected] if expected else 'none'}")


def tracing_count(model: Any) -> int | None:
    """How many times the model's train function (a tf.function in Keras 2) was traced; None
    where it is not a tf.function (Keras 3 wraps its own)."""
    count = getattr(model.train_function, "experimental_get_tracing_count", None)
    return count() if count is not None else None


def check_no_retrace(trained: Trained, name: str) -> None:
    """No trace after the warm-up: one outside the variant's context (keras2_shim's) would have
    timed TensorFlow's gradient. The first step may trace twice (variables are created)."""
    count = tracing_count(trained.model)
    if count != trained.traces:
        raise RuntimeError(f"{name}: the train function was traced again after the warm-up "
                           f"({trained.traces} -> {count} traces)")


def prepare(name: str, spec: models.ModelSpec, seed: int, warmup: int) -> Trained:
    """The variant's model built and compiled, traced and warmed up inside its context."""
    loaded = variants.load(name)
    model = models.build(loaded.keras, loaded.batch_norm, spec, seed, loaded.variant.jit_compile)
    x, y = models.batch(spec, seed)
    start = time.perf_counter()
    with loaded.trace_context():
        model.train_on_batch(x, y)
        trace_s = time.perf_counter() - start
        for _ in range(warmup):
            model.train_on_batch(x, y)
    traces = tracing_count(model)
    ops = backward_ops(loaded, model, x, y)
    check_backward(name, ops)
    bn_layers = models.bn_input_shapes(model, loaded.batch_norm_class, spec.batch)
    return Trained(loaded, model, x, y, trace_s, traces, ops, bn_layers)


@dataclass
class ModelBackward:
    """The isolated batch-norm backward of one model, for one backward kind."""

    kind: str
    layers: list[tuple[LayerBackward, dict]]  # distinct (shape, epsilon), with its record
    samples_ns: list[float] = field(default_factory=list)  # per round: sum over the layers

    def sample(self, calls: int) -> float:
        total = 0.0
        for layer, record in self.layers:
            per_call = layer.time_ns(calls)
            record["samples_ns"].append(per_call)
            total += per_call * record["count"]
        self.samples_ns.append(total)
        return total

    def to_json(self) -> dict:
        return {"kind": self.kind, "samples_ns": self.samples_ns,
                "layers": [record for _, record in self.layers]}


def prepare_backward(kind: str, bn_layers: list[tuple], data_format: str,
                     seed: int) -> ModelBackward:
    counts: dict[tuple, int] = {}
    for shape, epsilon in bn_layers:
        counts[(tuple(shape), epsilon)] = counts.get((tuple(shape), epsilon), 0) + 1
    layers = [(LayerBackward(kind, shape, epsilon, data_format, seed),
               {"shape": list(shape), "epsilon": epsilon, "count": count, "samples_ns": []})
              for (shape, epsilon), count in counts.items()]
    return ModelBackward(kind, layers)


def time_steps(trained: Trained, steps: int, threads: int) -> float:
    """One sample: the median of ``steps`` timed training steps, after one untimed step."""
    trained.step()
    batch = time_batch(trained.step, steps)
    trained.visits.append({
        "others_cores": batch.others_cores,
        "contended": contention.is_contended(batch.others_cores, threads,
                                             contention.usable_cores())})
    samples = batch.samples_ns
    sample = median_ns(samples)
    trained.samples_ns.append(sample)
    return sample


Key = tuple[str, str]  # (model, variant) or (model, backward kind)


def prepare_all(args: argparse.Namespace, specs: dict[str, models.ModelSpec]
                ) -> tuple[dict[Key, Trained], dict[Key, ModelBackward]]:
    """Every variant of every model traced and warmed up, and the isolated backward of each
    model for each backward kind the variants use."""
    warmup = 1 if args.quick else WARMUP_STEPS
    trained: dict[Key, Trained] = {}
    backward: dict[Key, ModelBackward] = {}
    for model_name, spec in specs.items():
        for name in args.variants:
            progress(f"[t{args.threads}] building and tracing {model_name}/{name}")
            trained[(model_name, name)] = prepare(name, spec, args.seed, warmup)
        bn_layers = trained[(model_name, args.variants[0])].bn_layers
        for name in args.variants:
            if trained[(model_name, name)].bn_layers != bn_layers:
                raise RuntimeError(f"{model_name}: {name}'s batch-norm layers differ from "
                                   f"{args.variants[0]}'s")
        for kind in dict.fromkeys(variants.VARIANTS[v].backward for v in args.variants):
            backward[(model_name, kind)] = prepare_backward(kind, bn_layers, spec.data_format,
                                                            args.seed)
    return trained, backward


def time_rounds(args: argparse.Namespace, trained: dict[Key, Trained],
                backward: dict[Key, ModelBackward]) -> None:
    """Per round, every step and isolated backward once, in a freshly shuffled order."""
    units = [("step", key) for key in trained] + [("bn", key) for key in backward]
    order = random.Random(args.seed + args.threads)
    for round_index in range(args.rounds):
        order.shuffle(units)
        parts = []
        for unit, key in units:
            if unit == "step":
                sample = time_steps(trained[key], args.steps, args.threads)
                parts.append(f"{key[0]}/{key[1]} {sample / 1e6:.1f}")
            else:
                sample = backward[key].sample(args.bn_calls)
                parts.append(f"{key[0]}/bn:{key[1]} {sample / 1e6:.1f}")
        progress(f"[t{args.threads}] round {round_index + 1}/{args.rounds} (ms): "
                 + ", ".join(parts))


def _model_json(spec: models.ModelSpec, trained: dict[Key, Trained],
                backward: dict[Key, ModelBackward]) -> dict:
    return {
        **spec.to_json(),
        "variants": {name: {"samples_ns": entry.samples_ns, "visits": entry.visits,
                            "trace_s": entry.trace_s, "traces": entry.traces,
                            "backward_ops": entry.backward_ops,
                            "bn_layers": len(entry.bn_layers),
                            "backward_kind": entry.loaded.variant.backward}
                     for (model_name, name), entry in trained.items()
                     if model_name == spec.name},
        "bn_backward": {kind: entry.to_json() for (model_name, kind), entry in backward.items()
                        if model_name == spec.name}}


def run(args: argparse.Namespace) -> dict:
    """Prepares everything, then times the shuffled rounds; the JSON-ready result."""
    unavailable: dict[str, str] = {}
    info = setup_tensorflow(args.threads, unavailable)
    import tensorflow as tf  # noqa: PLC0415 - imported by setup_tensorflow, threads set

    # Each isolated op is a tf.function of its own, traced once: TF's retracing warning about
    # them is noise.
    tf.get_logger().setLevel("ERROR")
    if "shim" in unavailable and any(variants.VARIANTS[v].backward == variants.SHIM
                                     for v in args.variants):
        raise RuntimeError(unavailable["shim"])
    specs = {name: models.spec(name, args.quick) for name in args.models}
    trained, backward = prepare_all(args, specs)
    time_rounds(args, trained, backward)
    for (_, name), entry in trained.items():
        check_no_retrace(entry, name)
        info[entry.loaded.variant.keras_module] = entry.loaded.keras.__version__
    return {"threads": args.threads, "info": info,
            "models": [_model_json(spec, trained, backward) for spec in specs.values()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--models", type=name_list(models.MODELS, "model"), required=True)
    parser.add_argument("--variants", type=name_list(variants.NAMES, "variant"),
                        default=list(variants.NAMES))
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--bn-calls", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    _, replies = _protocol_streams()  # library prints cannot reach the result's stdout
    replies.write((json.dumps(run(args)) + "\n").encode())
    replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
