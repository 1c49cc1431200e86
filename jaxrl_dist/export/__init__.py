"""python -m jaxrl_dist.export RUN_DIR [-o policy.onnx] [--opset N] [--member K] [--step S]

A trained policy as an ONNX file any ONNX runtime can run, and its ``jax.export`` StableHLO
beside it, both proven at export time to act as :func:`jaxrl_dist.policy.load` does:

* input ``obs`` [batch, *obs_shape] (float32; uint8 for uint8 frames), with a symbolic batch
  dimension, and ``mask`` [batch, A] (bool) where the task has legal-action masks; output
  ``actions`` in the environment's units: int32 [batch] for discrete actions (the argmax,
  masked), float32 [batch, A] for continuous ones (the Gaussian mean, tanh-squashed if trained
  so, clipped to the bounds). Observation normalisation is inside the graph.
* a recurrent policy (e.g. a GRU or LSTM cell) is one step: also an input ``{name}_in`` and an
  output ``{name}_out`` per carry tensor (``h``; ``c``, ``h`` for an LSTM), float32
  [batch, size], the carry to feed to the next step; zeros at an episode's start.
* metadata_props: ``env_id``, ``algorithm``, ``config_hash``, ``jaxrl_dist_version``,
  ``checkpoint_step`` (and ``member``), ``observation_space`` and ``action_space`` (JSON);
  ``carry`` (JSON: names, shapes, initial value) for a recurrent policy;
  ``observation_indices`` where ``env_kwargs`` hid entries of the observation.
* parity: onnxruntime against the loaded policy at batch 1, 2 and 7 (the StableHLO at 7), on
  sampled observations and, for gymnax and Gymnasium tasks, real ones; discrete actions equal,
  continuous within 1e-5; a recurrent policy over 6-step sequences with a carry reset, carries
  within 1e-5. A mismatch ends with one line naming the largest difference, exit 1, and writes
  nothing.

Every algorithm whose registry record names an emitter (``Algorithm(export="module:function")``,
beside its networks) exports; one without is a one-line error naming what to implement.
Default opset 17 (``LayerNormalization``); 11 to 16 spell LayerNorm out in primitive ops. The
graph is written with the ``onnx`` package by the algorithm's emitter from the op builder
(:mod:`.graph`): jax2onnx 0.17.1 conflicts with our orbax pin, and tf2onnx does not convert
current jax2tf output.
Needs ``pip install 'jaxrl_dist[export]'`` (onnx, onnxruntime). The reference runs on the CPU
(``JAX_PLATFORMS=cpu`` unless set), so the StableHLO file is lowered for CPUs.

Without ``-o`` the files go to RUN_DIR/policy.onnx (``policy-memberK.onnx`` for a population
member) and RUN_DIR/policy.stablehlo, and an existing one is an error; ``-o`` names the ONNX
path (the StableHLO file takes its stem) and replaces what is there. Bad input is one line
and exit 2. Python: :func:`jaxrl_dist.export.exporter.export_run`.
"""
