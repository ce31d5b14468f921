"""tf.distribute strategies by name, and which worker writes outputs."""

import json
import os

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib

from meshseg.errors import ConfigError

STRATEGIES = ("default", "mirrored", "multi_worker")


def configure_runtime(threads: int, strategy_name: str) -> tf.distribute.Strategy:
    """Sets TensorFlow's intra-op threads (0: its default) and creates the strategy.

    Both must happen before TensorFlow initialises its runtime, i.e. before the first op:
    call this before importing modules that run ops at import (tensorflow-graphics does).
    """
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    return make_strategy(strategy_name)


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The strategy called `name`.

    - default: one device, no replication.
    - mirrored: `MirroredStrategy` over all local GPUs (one replica on a CPU-only host).
    - multi_worker: `MultiWorkerMirroredStrategy` over the cluster in the `TF_CONFIG`
      environment variable. It must be created before any other TensorFlow op runs (see
      `configure_runtime`).

    Raises:
      ConfigError: for an unknown name, or multi_worker without TF_CONFIG.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError("strategy=multi_worker needs the TF_CONFIG environment variable "
                              "(cluster and task); see docs/scaling.md")
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ConfigError(f"strategy={name}: choose one of {', '.join(STRATEGIES)}")


def is_replicated(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` replicates: every strategy but TensorFlow's default one, whose
    updates merge across replicas (even a one-replica MirroredStrategy does)."""
    return strategy is not distribute_lib._get_default_strategy()


def shard_by_data(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Shards batches over workers element-wise (there may be fewer shards than workers)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes summaries, checkpoints and the model: the only process
    of a single-worker strategy, or task 0 of type "worker"/"chief" in TF_CONFIG."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task = json.loads(os.environ["TF_CONFIG"]).get("task", {})
    return task.get("type") == "chief" or (task.get("type") == "worker" and task.get("index") == 0)


def barrier(strategy: tf.distribute.Strategy) -> None:
    """Waits until every worker gets here (an all-reduce), so no worker exits while another
    still runs: the cluster's coordination service reports an exited worker as crashed."""
    strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
