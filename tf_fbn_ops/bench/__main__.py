"""``python -m tf_fbn_ops.bench [options]``: the same as ``python -m tf_fbn_ops bench``."""

import sys

from tf_fbn_ops.bench.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
