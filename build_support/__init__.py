"""What setup.py and the wheel tools need beyond compiling: where the CUDA compiler comes from,
the package's version and TensorFlow pins, and the glibc floor of the linked library. Nothing
here imports TensorFlow or ships in the wheel."""
