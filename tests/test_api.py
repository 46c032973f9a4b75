"""The public Python API: signatures, outputs, loading, and the three execution modes."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import tf_fbn_ops
from fresh_process import run_python

PAIRS = [(tf_fbn_ops.fused_batch_norm_grad, tf.raw_ops.FusedBatchNormGrad),
         (tf_fbn_ops.fused_batch_norm_grad_v2, tf.raw_ops.FusedBatchNormGradV2),
         (tf_fbn_ops.fused_batch_norm_grad_v3, tf.raw_ops.FusedBatchNormGradV3)]
IDS = ["v1", "v2", "v3"]


def _inputs(v3: bool) -> dict:
    rng = np.random.default_rng(5)
    kwargs = {"y_backprop": tf.constant(rng.standard_normal((2, 4, 5, 3)), tf.float32),
              "x": tf.constant(rng.standard_normal((2, 4, 5, 3)), tf.float32),
              "scale": tf.constant([1.0, 2.0, 0.5]), "reserve_space_1": tf.zeros([3]),
              "reserve_space_2": tf.ones([3])}
    if v3:
        kwargs["reserve_space_3"] = tf.zeros([0])
    return kwargs


@pytest.mark.parametrize("shim,builtin", PAIRS, ids=IDS)
def test_signature_matches_raw_ops(shim, builtin) -> None:
    ours = inspect.signature(shim)
    theirs = inspect.signature(builtin)
    assert list(ours.parameters) == list(theirs.parameters)
    for name, p in theirs.parameters.items():
        assert ours.parameters[name].default == p.default, name
    assert shim.__doc__


@pytest.mark.parametrize("shim,builtin", PAIRS, ids=IDS)
def test_outputs_are_namedtuples_with_tensorflow_field_names(shim, builtin) -> None:
    kwargs = _inputs(shim is tf_fbn_ops.fused_batch_norm_grad_v3)
    ours, theirs = shim(**kwargs), builtin(**kwargs)
    assert ours._fields == theirs._fields
    assert ours.x_backprop.shape == theirs.x_backprop.shape


def test_tf_function_and_load_op_library() -> None:
    """The README example: the library loaded by path, the op run inside a tf.function."""
    module = tf.load_op_library(tf_fbn_ops.library_path())
    kwargs = _inputs(True)

    @tf.function
    def grads(**kw):
        return module.fbn_fused_batch_norm_grad_v3(**kw, epsilon=1e-3, is_training=True)

    got = grads(**kwargs)
    expected = tf.raw_ops.FusedBatchNormGradV3(**kwargs, epsilon=1e-3, is_training=True)
    for g, e in zip(got[:3], expected[:3]):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    graph = grads.get_concrete_function(**kwargs).graph
    assert "FbnFusedBatchNormGradV3" in [op.type for op in graph.get_operations()]


def test_tf1_graph_and_session() -> None:
    graph = tf.Graph()
    with graph.as_default():
        names = ["y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2"]
        placeholders = {n: tf.compat.v1.placeholder(tf.float32, None if i < 2 else [None])
                        for i, n in enumerate(names)}
        out = tf_fbn_ops.fused_batch_norm_grad(**placeholders, data_format="NCHW")
        assert out.x_backprop.shape.rank == 4 and out.reserve_space_3.shape.as_list() == [0]
    kwargs = _inputs(False)
    nchw = {k: tf.transpose(v, [0, 3, 1, 2]).numpy() if k in ("y_backprop", "x") else v.numpy()
            for k, v in kwargs.items()}
    with tf.compat.v1.Session(graph=graph) as session:
        got = session.run(out, {placeholders[k]: v for k, v in nchw.items()})
    expected = tf.raw_ops.FusedBatchNormGrad(**{k: tf.constant(v) for k, v in nchw.items()},
                                             data_format="NCHW")
    for g, e in zip(got[:3], expected[:3]):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)



def test_import_is_lazy() -> None:
    """`import tf_fbn_ops` alone imports neither TensorFlow nor the library; importing
    TensorFlow afterwards loads it (so saved graphs with shim ops can be loaded at once)."""
    result = run_python("""
        import sys
        import tf_fbn_ops, tf_fbn_ops._loader as loader
        assert "tensorflow" not in sys.modules, "TensorFlow imported by tf_fbn_ops"
        assert loader._module is None, "library loaded at import"
        import tensorflow
        assert loader._module is not None, "library not loaded after importing TensorFlow"
        print("lazy ok")
    """)
    assert "lazy ok" in result.stdout, result.stderr


def test_version_mismatch_names_both_versions() -> None:
    # The automatic load when TensorFlow is imported warns; every use raises.
    result = run_python("""
        import tf_fbn_ops._build_info as info
        info.TF_VERSION = "2.12.0"
        import tensorflow as tf
        import tf_fbn_ops
        try:
            tf_fbn_ops.fused_batch_norm_grad(*[tf.zeros([1, 1, 1, 1])] * 2, *[tf.ones([1])] * 3)
        except tf_fbn_ops.LibraryVersionError as e:
            print("ERROR:", e)
    """)
    assert "ERROR:" in result.stdout, result.stderr
    message = result.stdout
    assert "2.12.0" in message and tf.__version__ in message and "Rebuild" in message


def test_version_mismatch_warns_at_import_in_either_order() -> None:
    for imports in ("import tensorflow as tf\nimport tf_fbn_ops",
                    "import tf_fbn_ops\nimport tensorflow as tf"):
        result = run_python(f"""
            import tf_fbn_ops._build_info as info
            info.TF_VERSION = "2.12.0"
            {imports.replace(chr(10), chr(10) + " " * 12)}
            print("imported")
        """)
        assert "imported" in result.stdout, result.stderr
        assert "LibraryVersionWarning" in result.stderr, result.stderr
        assert "2.12.0" in result.stderr and tf.__version__ in result.stderr
        assert "pip install --no-build-isolation --force-reinstall ." in result.stderr


def test_library_path_is_checked_once_tensorflow_is_imported() -> None:
    """The README's tf.load_op_library(tf_fbn_ops.library_path()) gets our error, not an
    undefined symbol, when the library was built for another TensorFlow."""
    result = run_python("""
        import warnings
        warnings.simplefilter("ignore")
        import tf_fbn_ops, tf_fbn_ops._build_info as info
        print("before TF:", tf_fbn_ops.library_path().endswith("_fbn_ops.so"))
        info.TF_VERSION = "2.12.0"
        import tensorflow as tf
        try:
            tf.load_op_library(tf_fbn_ops.library_path())
        except tf_fbn_ops.LibraryVersionError as e:
            print("ERROR:", e)
    """)
    assert "before TF: True" in result.stdout, result.stderr
    assert "ERROR:" in result.stdout and "2.12.0" in result.stdout, result.stderr


def test_matching_library_loads_without_warning() -> None:
    result = run_python("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import tensorflow as tf
            import tf_fbn_ops
            tf.load_op_library(tf_fbn_ops.library_path())
        ours = [w for w in caught if issubclass(w.category, tf_fbn_ops.LibraryVersionWarning)]
        print("loaded, warnings of ours:", len(ours))
    """)
    assert "loaded, warnings of ours: 0" in result.stdout, result.stderr
