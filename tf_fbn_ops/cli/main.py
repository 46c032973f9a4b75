"""Command line: ``python -m tf_fbn_ops {demo,bench,info,check,cc-flags}``, ``--help``,
``--version``."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys

from tf_fbn_ops import __version__, _loader


def _info() -> int:
    """Prints what is installed and whether the library loads; 0 if it does."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(f"tf-fbn-ops {__version__}")
    print(f"python: {sys.version.split()[0]}")
    print(f"build: {_loader.build_summary()}")
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
    print(f"GPU: {_loader.gpu_kernel_status()}")
    glibc = getattr(importlib.import_module("tf_fbn_ops._build_info"), "GLIBC", None)
    print(f"needs glibc: {glibc.split('_')[-1] if glibc else 'unknown'} or newer")
    return 0


def _cc_flags(cflags: bool, libs: bool) -> int:
    """Prints the flags of a C++ graph-API program on one line, for $(...) in a shell."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tf_fbn_ops import cc_flags  # noqa: PLC0415 - imports TensorFlow

    flags = (cc_flags.compile_flags() if cflags else []) + (cc_flags.link_flags() if libs else [])
    print(" ".join(shlex.quote(f) for f in flags))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tf_fbn_ops",
        description="tf-fbn-ops: TensorFlow's batch-norm gradient ops, faster, deterministic and "
                    "exact.")
    parser.add_argument("--version", action="version",
                        version=f"tf-fbn-ops {__version__} ({_loader.build_summary()})")
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.add_parser(
        "demo", help="run every op, dtype, layout and mode next to tf.raw_ops and print each "
                     "one's error against a float64 oracle",
        description="Loads the library, runs every op, dtype, layout and mode inside a "
                    "tf.function graph next to tf.raw_ops, and prints each one's error against a "
                    "float64 oracle.")
    commands.add_parser(
        "bench", add_help=False,
        help="the shim against TensorFlow's own op on this machine, interleaved "
             "('bench --help' for its options; the research harness is the repository's "
             "benchmarks/harness/)")
    cc_flags = commands.add_parser(
        "cc-flags", help="print the compiler and linker flags of a C++ program that builds "
                         "graphs with the shim's ops (#include \"tf_fbn_ops/ops.h\")",
        description="Prints TensorFlow's compile flags plus the shim's include folder "
                    "(--cflags), TensorFlow's C++ libraries plus the op library (--libs), or "
                    "both.")
    cc_flags.add_argument("--cflags", action="store_true", help="compile flags only")
    cc_flags.add_argument("--libs", action="store_true", help="link flags only")
    commands.add_parser(
        "check", help="the self-check for bug reports: devices, GPU kernels and driver, then on "
                      "every device parity with TensorFlow's op, determinism, in place, XLA and "
                      "the Keras 3 layer (exit status 1 if anything fails)",
        description="Says what is installed and what TensorFlow sees, then checks the shim on "
                    "every device TensorFlow sees against TensorFlow's own op and a float64 "
                    "oracle, run to run, in place and under XLA, and the Keras 3 layer's "
                    "training step against Keras' own.")
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
        return importlib.import_module("tf_fbn_ops.cli.quick_bench").main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        importlib.import_module("tf_fbn_ops.cli.demo").main()
        return 0
    if args.command == "info":
        return _info()
    if args.command == "check":
        return importlib.import_module("tf_fbn_ops.cli.self_check").main()
    if args.command == "cc-flags":
        return _cc_flags(cflags=args.cflags or not args.libs, libs=args.libs or not args.cflags)
    parser.print_help()
    return 2

