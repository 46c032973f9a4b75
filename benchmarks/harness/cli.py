"""Command-line pieces both benchmarks (the op harness and the training benchmark) and their
workers share: progress lines on stderr and the argparse types of their list options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


def progress(message: str) -> None:
    """One progress line on stderr (stdout carries the report, or a worker's result)."""
    print(message, file=sys.stderr, flush=True)


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated thread counts, each at least 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text}") from error
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"thread counts must be >= 1: {text}")
    return values


def name_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names from ``choices``, returned in the order of
    ``choices``; ``what`` names them in the error (e.g. "implementation")."""
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = sorted(set(names) - set(choices))
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {unknown}; choose from {','.join(choices)}")
        return [n for n in choices if n in names]
    return parse
