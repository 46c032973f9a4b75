"""``python -m tf_fbn_ops``: the command line (tf_fbn_ops/cli/)."""

import sys

from tf_fbn_ops.cli.main import main

sys.exit(main())
