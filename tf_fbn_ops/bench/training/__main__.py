"""``python -m tf_fbn_ops.bench.training [options]``: the same as ``python -m tf_fbn_ops bench
--training``."""

import sys

from tf_fbn_ops.bench.training.main import main

if __name__ == "__main__":
    sys.exit(main(["--training", *sys.argv[1:]]))
