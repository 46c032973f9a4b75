"""Command line: ``python -m tf_fbn_ops {demo,bench,info}``, ``--help``, ``--version``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tf_fbn_ops import __version__, _loader


def _build_summary() -> str:
    """What the library next to the package was built for, without importing TensorFlow."""
    built = _loader.built_tensorflow_version()
    if built is None:
        return "library not built"
    from tf_fbn_ops import _build_info  # noqa: PLC0415 - exists once built

    device = "CPU and CUDA" if getattr(_build_info, "CUDA", False) else "CPU only"
    return f"library built for TensorFlow {built}, {device}"


def _info() -> int:
    """Prints what is installed and whether the library loads; 0 if it does."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(f"tf-fbn-ops {__version__}")
    print(f"python: {sys.version.split()[0]}")
    print(f"build: {_build_summary()}")
    try:
        import tensorflow as tf  # noqa: PLC0415
    except ImportError as e:
        print(f"TensorFlow: not importable ({e})")
        return 1
    print(f"TensorFlow installed: {tf.__version__}")
    try:
        print(f"library: {_loader.library_path()}")
        _loader.load_library()
    except ImportError as e:  # LibraryVersionError included
        print(f"loads: no\n{e}")
        return 1
    print("loads: yes")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tf_fbn_ops",
        description="tf-fbn-ops: TensorFlow's batch-norm gradient ops, faster, deterministic and "
                    "exact.")
    parser.add_argument("--version", action="version",
                        version=f"tf-fbn-ops {__version__} ({_build_summary()})")
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.add_parser(
        "demo", help="run every op, dtype, layout and mode next to tf.raw_ops and print each "
                     "one's error against a float64 oracle",
        description="Loads the library, runs every op, dtype, layout and mode inside a "
                    "tf.function graph next to tf.raw_ops, and prints each one's error against a "
                    "float64 oracle.")
    commands.add_parser(
        "bench", add_help=False,
        help="the CPU benchmark harness: the shim against TensorFlow (Eigen and oneDNN), "
             "PyTorch and a streaming kernel ('bench --help' for its options)")
    commands.add_parser(
        "info", help="print the package, TensorFlow and build versions and whether the library "
                     "loads (exit status 1 if it does not)",
        description="Prints the package version, the TensorFlow the library was built for and "
                    "the installed one, whether CUDA is in the build, and whether it loads.")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    # The benchmark parses its own options: everything after "bench" goes to it untouched.
    if argv and argv[0] == "bench":
        return importlib.import_module("tf_fbn_ops.bench.main").main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        importlib.import_module("tf_fbn_ops.demo").main()
        return 0
    if args.command == "info":
        return _info()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
