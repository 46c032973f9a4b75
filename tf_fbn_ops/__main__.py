"""Command line: ``python -m tf_fbn_ops demo``."""

import sys


def main(argv: list[str]) -> None:
    commands = {"demo": "tf_fbn_ops.demo"}
    if len(argv) != 1 or argv[0] not in commands:
        raise SystemExit(f"usage: python -m tf_fbn_ops {{{','.join(commands)}}}")
    __import__(commands[argv[0]], fromlist=["main"]).main()


if __name__ == "__main__":
    main(sys.argv[1:])
