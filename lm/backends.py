"""What runs a NeuralLM's graph functions (`BACKENDS`); all but "tf" run on the CPU without a
strategy or XLA, held to TF's numbers by tests/test_backends.py (docs/DESIGN.md §4.4).
"""

import contextlib
import importlib.util

import numpy as np
import tensorflow as tf

from lm import onnx_backend

BACKENDS = ("tf", "openvino", "openvino_bf16", "onnxruntime")
# The Python packages each non-TF backend runs on.
_BACKEND_PACKAGES = {
  "openvino": ("openvino",),
  "openvino_bf16": ("openvino",),
  "onnxruntime": onnx_backend.PACKAGES,
}
# OpenVINO's inference precision per backend. float32 reproduces TF within float rounding;
# bfloat16 (AMX / AVX512-BF16 CPUs only) halves the weight bytes and runs the matmuls on AMX,
# within a documented tolerance (docs/runtime.md; tests/test_backends.py).
OPENVINO_PRECISION = {"openvino": "f32", "openvino_bf16": "bf16"}


def scope(strategy):
  return strategy.scope() if strategy else contextlib.nullcontext()


class ReplicaRunner(object):
  """Runs a row-wise graph method with a batch's rows split over a strategy's replicas: parts
  concatenated in replica order give the one-device answer. A part may be empty.
  """

  def __init__(self, strategy, method):
    self.strategy = strategy
    # reduce_retracing: shapes differ per call and per replica; one trace per rank suffices.
    self._step = tf.function(
      lambda *args: strategy.run(method, args=args), autograph=False, reduce_retracing=True
    )

  def __call__(self, *arrays):
    """numpy arrays [R, ...] -> the method's outputs over all R rows, as eager tensors."""
    replicas = self.strategy.num_replicas_in_sync
    parts = [np.array_split(np.asarray(a), replicas) for a in arrays]
    values = self.strategy.experimental_distribute_values_from_function(
      lambda context: tuple(p[context.replica_id_in_sync_group] for p in parts)
    )
    outputs = self._step(*values)
    return tf.nest.map_structure(
      lambda v: tf.constant(
        np.concatenate([t.numpy() for t in self.strategy.experimental_local_results(v)])
      ),
      outputs,
    )


class OpenVINOFunction(object):
  """A ScoringGraph method converted by OpenVINO for the CPU at its first call (slow), NumPy out.

  OpenVINO fuses the small ops TF dispatches one by one in a batch-1 call. Precision is pinned:
  unset, OpenVINO picks bfloat16 on AMX / AVX512-BF16 CPUs.
  """

  def __init__(self, method, signature, precision="f32"):
    self._method = method
    self._signature = signature
    self._precision = precision
    self._request = None

  def _build(self):
    import openvino  # pylint: disable=g-import-not-at-top

    method = self._method
    structure = []

    def tagged(*args):
      outputs = method(*args)
      structure.append(tf.nest.map_structure(lambda _: None, outputs))
      # Named Identity ops: OpenVINO keeps tensor names, not the order of the outputs.
      return [
        tf.identity(t, name=f"{_OPENVINO_OUTPUT}{i}")
        for i, t in enumerate(tf.nest.flatten(outputs))
      ]

    concrete = tf.function(
      tagged, input_signature=self._signature, autograph=False
    ).get_concrete_function()
    self._structure = structure[0]
    model = openvino.convert_model(concrete)
    config = {"INFERENCE_PRECISION_HINT": self._precision, "PERFORMANCE_HINT": "LATENCY"}
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    if threads:  # the process's TensorFlow thread setting holds for OpenVINO too
      config["INFERENCE_NUM_THREADS"] = threads
    compiled = openvino.Core().compile_model(model, "CPU", config)
    self._request = compiled.create_infer_request()
    order = {}
    for port, output in enumerate(compiled.outputs):
      for name in output.get_names():
        if name.startswith(_OPENVINO_OUTPUT):
          order[int(name[len(_OPENVINO_OUTPUT) :].split(":")[0])] = port
    self._ports = [order[i] for i in range(len(order))]

  def __call__(self, *arrays):
    if self._request is None:
      self._build()
    results = self._request.infer([np.asarray(a) for a in arrays])
    flat = [results[port] for port in self._ports]
    return tf.nest.pack_sequence_as(self._structure, flat)


_OPENVINO_OUTPUT = "tta_output_"


def backend_dtype(backend):
  """ "float32" or "bfloat16", the element type of a backend's matmuls."""
  return "bfloat16" if OPENVINO_PRECISION.get(backend) == "bf16" else "float32"


def openvino_cpu_has_bf16():
  import openvino  # pylint: disable=g-import-not-at-top

  return "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def check_backend(backend, strategy=None, jit_compile=False):
  """ValueError / ImportError if `backend` is unknown, cannot take the strategy or XLA, or
  cannot run here (naming what is missing).
  """
  if backend not in BACKENDS:
    raise ValueError(f"backend {backend!r} is not one of {BACKENDS}")
  if backend == "tf":
    return
  if strategy or jit_compile:
    raise ValueError(f"backend {backend!r} runs on the CPU: no strategy, no jit_compile")
  missing = [p for p in _BACKEND_PACKAGES[backend] if importlib.util.find_spec(p) is None]
  if missing:
    raise ImportError(
      f"backend {backend!r} needs the {' and '.join(missing)} package"
      f"{'s' if len(missing) > 1 else ''} (pip install -r requirements.txt)"
    )
  if OPENVINO_PRECISION.get(backend) == "bf16" and not openvino_cpu_has_bf16():
    # OpenVINO would quietly run float32 instead: a user asking for bf16 speed must know.
    raise ValueError(
      f"backend {backend!r} needs a CPU with bfloat16 support (AMX or AVX512-BF16); this "
      "one has none: use backend 'openvino'"
    )
