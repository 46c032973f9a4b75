"""``python -m harness.training [options]``: the same as ``python -m harness
--training``."""

import sys

from harness.training.main import main

if __name__ == "__main__":
    sys.exit(main(["--training", *sys.argv[1:]]))
