"""End-to-end training-step benchmark: ``python -m harness --training``.

The op harness (the parent package) times the batch-norm gradient op alone; this times what a
Keras user sees: ``model.train_on_batch`` of two small models on CPU (a ResNet-style CNN, NHWC,
and a 3-D CNN, NDHWC) with Keras 3 and Keras 2, each with TensorFlow's batch-norm backward and
with the shim's, and estimates the batch-norm backward's share of the step from the ops timed
alone. The modules, in the order data flows through them:

* ``main``: options, one worker per thread count, the outputs;
* ``spawn``: starting a worker and reading its one JSON result;
* ``worker``: the worker process: builds, traces and times every variant in shuffled rounds;
* ``models``: the two models (one builder each, for any Keras and batch-norm layer) and data;
* ``variants``: keras3, keras3_shim, keras2, keras2_shim, keras3_jit, keras3_shim_jit, and
  each one's backward;
* ``isolated``: the batch-norm backward of a model, timed op by op outside the step;
* ``results``, ``report``: rows, ratios and shares; the table, training.md and training.json.
"""
