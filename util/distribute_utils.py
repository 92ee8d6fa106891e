# coding=utf-8
"""tf.distribute for pretraining (--strategy, docs/DESIGN.md §3). Under multi-worker only the chief
writes --output_dir, and a decision that changes the number of collective calls (stopping) is
agreed on by every worker first, so that none waits forever."""

import os
import tempfile

import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu")
# The help of the flags of get_strategy's arguments, which run_pretraining.py
# (training_job.JobParams) and score.py both take.
TPU_HELP = "TPU name or address for --strategy=tpu."
NUM_CPU_DEVICES_HELP = (
  "Split the CPU into this many logical devices (for --strategy=mirrored without GPUs; testing)."
)


def get_strategy(name, tpu=None, num_cpu_devices=0):
  """The tf.distribute strategy `name` (one of STRATEGIES); num_cpu_devices > 1 first splits the CPU
  into logical devices, so that "mirrored" has several replicas without GPUs."""
  if num_cpu_devices > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * num_cpu_devices
    )
  # Physical, not logical, devices: listing logical ones initialises the
  # runtime, after which MultiWorkerMirroredStrategy can no longer configure
  # its collectives ("must be configured at program startup").
  gpus = tf.config.list_physical_devices("GPU")
  if name == "one_device":
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
  if name == "mirrored":
    if gpus:
      return tf.distribute.MirroredStrategy()
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(
      devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
  if name == "multi_worker":
    # RING collectives work on CPU; NCCL is picked automatically on GPUs.
    options = tf.distribute.experimental.CommunicationOptions(
      implementation=(
        tf.distribute.experimental.CommunicationImplementation.AUTO
        if gpus
        else tf.distribute.experimental.CommunicationImplementation.RING
      )
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"unknown strategy {name!r}; expected one of {STRATEGIES}")


def is_chief(strategy):
  """True on the one worker that writes --output_dir."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  if task_type == "chief" or task_type is None:
    return True
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return task_type == "worker" and task_id == 0 and not has_chief


def worker_write_dir(output_dir, strategy):
  """Where this worker writes checkpoints: output_dir on the chief, else a
  temporary dir (all workers must save, for the collectives; one writes)."""
  if is_chief(strategy):
    return output_dir
  resolver = strategy.cluster_resolver
  return os.path.join(
    tempfile.gettempdir(),
    f"tta_worker_{resolver.task_type}_{resolver.task_id:d}_{os.getpid()}",
  )


def is_multi_worker(strategy):
  """True under MultiWorkerMirroredStrategy: collectives with other processes."""
  return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def any_worker_agreement(strategy):
  """Under multi-worker, every worker must stop at the same step: returns a
  function flag -> whether any worker set it (a tiny all-reduce)."""
  if not is_multi_worker(strategy):
    return lambda flag: flag

  @tf.function
  def any_worker(flag):
    per_replica = strategy.run(lambda f: tf.identity(f), args=(flag,))
    # ReduceOp has no MAX: the sum of 0/1 flags is > 0 when any is set.
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

  return lambda flag: bool(any_worker(tf.constant(float(flag))).numpy() > 0)


def sum_replicas(strategy, per_replica):
  """The cross-replica sum of each tensor of a per-replica structure."""
  return tf.nest.map_structure(
    lambda v: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None), per_replica
  )
