"""The command line and diagnostics, apart from the library's API: ``python -m tf_fbn_ops``
(main.py) and what it runs: the demo, the quick comparison with TensorFlow's op, the self-check
for bug reports. Nothing here is imported by ``import tf_fbn_ops``."""
