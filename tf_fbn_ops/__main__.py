"""Command line: ``python -m tf_fbn_ops demo`` or ``python -m tf_fbn_ops bench [options]``."""

import importlib
import sys

# command -> (module with main(), whether main takes the remaining arguments)
COMMANDS = {"demo": ("tf_fbn_ops.demo", False), "bench": ("tf_fbn_ops.bench.main", True)}


def main(argv: list[str]) -> None:
    usage = f"usage: python -m tf_fbn_ops {{{','.join(COMMANDS)}}} [options]"
    if not argv or argv[0] not in COMMANDS:
        raise SystemExit(usage)
    module, takes_arguments = COMMANDS[argv[0]]
    if not takes_arguments and len(argv) != 1:
        raise SystemExit(f"usage: python -m tf_fbn_ops {argv[0]} (no options)")
    command = importlib.import_module(module).main
    # Commands that take arguments return an exit status.
    raise SystemExit(command(argv[1:]) if takes_arguments else command())


if __name__ == "__main__":
    main(sys.argv[1:])
