"""tf.distribute strategies by name, the cluster of a multi-worker run, how its input is
sharded, and which worker writes outputs."""

import contextlib
import logging
import os
import socket
import time
from typing import List, Tuple

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib

from meshseg.config import StrategyConfig
from meshseg.errors import ClusterError, ConfigError, Interrupted
from meshseg.registry import STRATEGIES
from meshseg.train.rundir.checkpoints import StopSignals
from meshseg.train.rundir.slurm import slurm_step

log = logging.getLogger(__name__)
POLL_S = 0.5  # how often a starting worker looks for the others
REPORT_EVERY_S = 10.0  # how often it logs whom it still waits for


def configure_runtime(threads: int, settings: StrategyConfig,
                      inter_op_threads: int = 0) -> tf.distribute.Strategy:
    """Sets TensorFlow's intra-op threads (`threads`) and the number of ops it runs at
    once (`inter_op_threads`; 0: TensorFlow's default for either), splits the CPU into
    `settings.cpu_devices` logical devices, and creates the strategy (`make_strategy`).

    All three must happen before TensorFlow initialises its runtime, i.e. before the first
    op: call this before importing modules that run ops at import (tensorflow-graphics does).

    Raises:
      ConfigError, ClusterError, Interrupted: see `make_strategy`.
    """
    set_threads(threads, inter_op_threads)
    if settings.cpu_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * settings.cpu_devices)
    return make_strategy(settings)


def set_threads(threads: int, inter_op_threads: int) -> None:
    """Sets TensorFlow's intra-op threads and the number of ops it runs at once (0 keeps
    TensorFlow's default, one per core). Call before TensorFlow's first op."""
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    if inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)


def make_strategy(settings: StrategyConfig) -> tf.distribute.Strategy:
    """The strategy called `settings.name`, one of the registry's `STRATEGIES` (checked by
    `meshseg.config.check`).

    - default: one device, no replication.
    - mirrored: `MirroredStrategy` over all local GPUs, or on a host without GPUs over its
      logical CPU devices (`strategy.cpu_devices`; one replica by default).
    - multi_worker: `MultiWorkerMirroredStrategy` over the cluster of `cluster_resolver`,
      created once every worker is reachable (`wait_for_workers`). It must be created
      before any other TensorFlow op runs (see `configure_runtime`).

    Raises:
      ConfigError: for an unknown name, or multi_worker without a cluster.
      ClusterError: if a worker is not reachable within `settings.startup_timeout_s`.
      Interrupted: on SIGINT or SIGTERM while waiting for the workers.
    """
    if settings.name == "default":
        return tf.distribute.get_strategy()
    if settings.name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if settings.name == "multi_worker":
        resolver = cluster_resolver(settings.port_base)
        wait_for_workers(resolver, settings.startup_timeout_s)
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    raise ConfigError(f"strategy={settings.name}: choose one of {', '.join(STRATEGIES)}")


def cluster_resolver(port_base: int) -> tf.distribute.cluster_resolver.ClusterResolver:
    """The cluster of this multi-worker process, one worker per task, the worker index
    being the global rank (0, the chief, writes):
    - from the `TF_CONFIG` environment variable, when it is set;
    - inside a submitit job (`hydra/launcher=slurm` or `submitit_local`), from
      `submitit.JobEnvironment`: task k of a node listens on its host at `port_base + k`;
    - inside a SLURM job step (`srun python train.py ...`, `meshseg.train.rundir.slurm`), from
      SLURM's variables through TensorFlow's `SlurmClusterResolver`: task k of a node
      listens at the first port SLURM reserved for the step (`srun --resv-ports`) + k, or
      at `port_base + k` when it reserved none. GPUs are left as SLURM binds them
      (`--gpus-per-task=1` gives each task its own).

    Raises:
      ConfigError: outside all three.
    """
    if "TF_CONFIG" in os.environ:
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if "SUBMITIT_EXECUTOR" not in os.environ:
        step = slurm_step()
        if step is None:
            raise ConfigError("strategy=multi_worker needs the TF_CONFIG environment variable "
                              "(cluster and task), a SLURM job step (srun python train.py "
                              "...) or a submitit launcher (hydra/launcher=slurm); see "
                              "docs/scaling.md")
        # gpus_per_node=num_tasks, gpus_per_task=1: one port per task and no GPU query
        # (the resolver would run nvidia-smi); auto_set_gpu=False keeps SLURM's binding.
        return tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=step.reserved_port or port_base, gpus_per_node=step.num_tasks,
            gpus_per_task=1, auto_set_gpu=False, rpc_layer="grpc")
    import submitit

    job = submitit.JobEnvironment()
    per_node = job.num_tasks // job.num_nodes
    workers = [f"{job.hostnames[rank // per_node]}:{port_base + rank % per_node}"
               for rank in range(job.num_tasks)]
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": workers}), task_type="worker",
        task_id=job.global_rank, rpc_layer="grpc")


def _reachable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        return True
    except OSError:
        return False


def wait_for_workers(resolver: tf.distribute.cluster_resolver.ClusterResolver,
                     timeout_s: float) -> None:
    """Waits until every other task of the cluster accepts connections at its address,
    logging whom it waits for (every `REPORT_EVERY_S` s), with SIGINT and SIGTERM ending
    the wait at once. Meanwhile this task listens at its own port, so that the others see
    it; TensorFlow's server takes the port over afterwards. (TensorFlow's own start-up
    waits for the cluster without a log line, a time limit or a way to interrupt it.)

    Raises:
      ClusterError: naming the tasks still unreachable after `timeout_s` seconds, or if
        this task's port is taken.
      Interrupted: on SIGINT or SIGTERM (exit status 128 + signal).
    """
    spec = resolver.cluster_spec()
    me = (resolver.task_type, resolver.task_id)
    others = [(job, index, spec.task_address(job, index)) for job in spec.jobs
              for index in spec.task_indices(job) if (job, index) != me]
    own_port = int(spec.task_address(*me).rsplit(":", 1)[1])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    with StopSignals() as signals, contextlib.closing(listener):
        try:
            listener.bind(("", own_port))
        except OSError as error:
            raise ClusterError(f"{me[0]} {me[1]} cannot listen at port {own_port} "
                               f"({error.strerror}); is an earlier worker still running?") from None
        listener.listen()
        start = time.monotonic()
        reported = -REPORT_EVERY_S
        while True:
            if signals.received:
                raise Interrupted(f"stopped by signal {signals.received} while waiting for "
                                  "the workers", signals.received)
            missing = [f"{job} {index} ({address})" for job, index, address in others
                       if not _reachable(address)]
            if not missing:
                break
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise ClusterError(f"{', '.join(missing)} did not start within {timeout_s:g} s "
                                   f"(strategy.startup_timeout_s); start every worker of "
                                   f"the cluster with the same command")
            if waited - reported >= REPORT_EVERY_S:
                log.info("%s %d waits for %s (%.0f s of %g s)", *me, ", ".join(missing),
                         waited, timeout_s)
                reported = waited
            time.sleep(POLL_S)
    log.info("%s %d: all %d workers are up", *me, len(others) + 1)


def is_replicated(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` replicates: every strategy but TensorFlow's default one, whose
    updates merge across replicas (even a one-replica MirroredStrategy does)."""
    return strategy is not distribute_lib._get_default_strategy()


def worker_position(strategy: tf.distribute.Strategy) -> Tuple[int, int]:
    """(index of this worker, number of workers): (0, 1) unless multi-worker."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 0, 1
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec()
    jobs = [job for job in ("chief", "worker") if job in spec.jobs]
    order = [(job, index) for job in jobs for index in spec.task_indices(job)]
    return order.index((resolver.task_type, resolver.task_id)), len(order)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes summaries, checkpoints and the summary: the only
    process of a single-worker strategy, or the "chief" task (else worker 0) of the cluster."""
    return worker_position(strategy)[0] == 0


def shard_input(dataset: tf.data.Dataset, files: List[str], num_workers: int) -> tf.data.Dataset:
    """Shards the training input over the workers: by file (`AutoShardPolicy.FILE`, each
    worker reads its own shards) when there are at least as many shard files as workers,
    else element-wise (`AutoShardPolicy.DATA`: every worker reads all, keeps its part)."""
    by_file = len(files) >= num_workers
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.FILE if by_file
        else tf.data.experimental.AutoShardPolicy.DATA)
    if num_workers > 1:
        log.info("training input sharded by %s (%d shard files, %d workers)",
                 "file" if by_file else "element", len(files), num_workers)
    return dataset.with_options(options)


def on_every_replica(strategy: tf.distribute.Strategy, value: int) -> List[int]:
    """`value` as every replica of every worker passed it (an all-gather), in replica order."""
    per_replica = strategy.run(lambda: tf.constant([value], tf.int64))
    return [int(v) for v in strategy.gather(per_replica, axis=0).numpy()]


def barrier(strategy: tf.distribute.Strategy) -> None:
    """Waits until every worker gets here (an all-reduce), so no worker exits while another
    still runs: the cluster's coordination service reports an exited worker as crashed."""
    strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)


def check_same_start(strategy: tf.distribute.Strategy, step: int, directory: str) -> None:
    """Checks that every worker restored the checkpoint of the same `step` (from the chief's
    checkpoint `directory`, which they must all read).

    Raises:
      ClusterError: naming each worker's step, on every worker.
    """
    if worker_position(strategy)[1] == 1:
        return
    steps = on_every_replica(strategy, step)
    if len(set(steps)) > 1:
        per_worker = ", ".join(f"replica {i}: step {s}" for i, s in enumerate(steps))
        raise ClusterError(f"the workers restored different checkpoints ({per_worker}); every "
                           f"worker must read the chief's checkpoints in {directory}: put them "
                           f"on shared storage (checkpoint.dir=...)")
