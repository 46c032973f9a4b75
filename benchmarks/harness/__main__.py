"""``python -m harness [options]``: the same as ``python -m harness``."""

import sys

from harness.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
