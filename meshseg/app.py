"""The training application: validates the config, claims the run directory, builds data,
model and optimizer, and trains with the configured loop."""

import json
import logging
import os
import shutil
import tempfile
import time
from typing import Dict, Optional

import keras
import tensorflow as tf
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from meshseg.autotune import choose_impl
from meshseg.checkpoints import latest_step
from meshseg.data.sources import build_datasets
from meshseg.distribute import barrier, configure_runtime, is_chief
from meshseg.errors import ConfigError, DataError
from meshseg.evaluate import evaluate, make_predict_step
from meshseg.loops.custom import train_custom
from meshseg.loops.keras_fit import train_keras
from meshseg.model import MeshSegmentationNet
from meshseg.ops import XLA_FORMULATION
from meshseg.summaries import RunLogger
from meshseg.workdir import claim_run_dir

log = logging.getLogger(__name__)
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def validate(cfg: DictConfig) -> None:
    """Checks values the schema cannot: positive counts, choices, combinations, paths.

    Raises:
      ConfigError: naming the setting.
    """
    for key in ("steps", "eval_every", "checkpoint.every", "checkpoint.keep", "data.batch_size"):
        if OmegaConf.select(cfg, key) < 1:
            raise ConfigError(f"{key} must be >= 1, got {OmegaConf.select(cfg, key)}")
    if cfg.precision not in PRECISIONS:
        raise ConfigError(f"precision={cfg.precision}: choose one of {', '.join(PRECISIONS)}")
    if cfg.strategy.name != "default" and cfg.jit:
        raise ConfigError(f"jit=true with strategy={cfg.strategy.name} is not supported; "
                          "use jit=false (replicas merge updates outside XLA)")
    if cfg.strategy.name == "multi_worker" and cfg.loop.name != "custom":
        raise ConfigError("strategy=multi_worker needs loop=custom (Keras 3 Model.fit does not "
                          "run MultiWorkerMirroredStrategy here)")
    if cfg.resume is not None and not os.path.isdir(to_absolute_path(cfg.resume)):
        raise ConfigError(f"resume={cfg.resume}: no such run directory")


def load_data(cfg: DictConfig):
    """`meshseg.data.sources.build_datasets`, with its errors as one-line MeshsegErrors.

    Raises:
      ConfigError: for a missing path or glob, or labels that do not fit num_classes.
      DataError: for a bad record (the message names shard and record).
    """
    try:
        return build_datasets(cfg.data, seed=cfg.seed, jit=cfg.jit)
    except (FileNotFoundError, ValueError) as error:
        raise ConfigError(str(error)) from None
    except tf.errors.OpError as error:
        raise DataError(error.message) from None


def shard_by_data(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Shards batches over workers element-wise (there may be fewer shards than workers)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def build_model_and_optimizer(cfg: DictConfig, impl: str, model_kwargs: Dict):
    """The demo network (layers in the `precision` policy) and Adam with exponential decay,
    wrapped in a LossScaleOptimizer for mixed_float16. Call inside the strategy's scope."""
    keras.mixed_precision.set_global_policy(cfg.precision)
    try:
        model = MeshSegmentationNet(cfg.data.num_classes, impl=impl, xla=cfg.jit, **model_kwargs)
    finally:  # the policy applies to layers built above only; other code keeps float32
        keras.mixed_precision.set_global_policy("float32")
    model.build_from_config({})
    schedule = keras.optimizers.schedules.ExponentialDecay(
        cfg.optimizer.learning_rate, cfg.optimizer.decay_steps, cfg.optimizer.decay_rate)
    optimizer = keras.optimizers.Adam(schedule, beta_1=cfg.optimizer.beta_1,
                                      epsilon=cfg.optimizer.epsilon)
    if cfg.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def run(cfg: DictConfig, run_dir: str, strategy: Optional[tf.distribute.Strategy] = None) -> Dict:
    """Trains and evaluates as configured.

    `strategy` is the one `meshseg.distribute.configure_runtime` made before TensorFlow's
    runtime started (train.py does this); None: made here, which works for every strategy
    but multi_worker.

    Writes event files, checkpoints, `summary.json` and `model.keras` under `run_dir`, or
    under `cfg.resume` when set. A run directory that already holds this run (same
    settings) is resumed from its latest checkpoint.

    Returns:
      the run summary (see `RunLogger.summary`).

    Raises:
      ConfigError, RunDirError: before any output is written.
      NonFiniteError, Interrupted: from the training loop (a checkpoint is kept).
    """
    start = time.perf_counter()
    validate(cfg)
    if cfg.resume is not None:
        run_dir = to_absolute_path(cfg.resume)
    if strategy is None:
        strategy = configure_runtime(cfg.threads, cfg.strategy.name)
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    train_data, test_data, data_info = load_data(cfg)
    if cfg.strategy.name != "default":
        train_data = shard_by_data(train_data)
    done = 0
    if claim_run_dir(run_dir, cfg):
        done = latest_step(run_dir)
        log.info("continuing the run in %s from step %d", run_dir, done)
        if done >= cfg.steps:
            log.info("%s already completed %d steps; nothing to do", run_dir, done)
            with open(os.path.join(run_dir, "summary.json")) as f:
                return json.load(f)
    train_histogram = data_info["train_histogram"]

    model_kwargs = OmegaConf.to_container(cfg.model)
    impl = cfg.impl.name
    if impl == "auto":
        features, labels = next(iter(train_data))
        impl = choose_impl(features, labels, cfg.jit, cfg.data.num_classes, model_kwargs,
                           cfg.impl.candidates, cfg.impl.timing_steps, cfg.impl.cache_file)
    if cfg.jit:
        log.info("impl=%s under XLA uses %s", impl, XLA_FORMULATION[impl])
    with strategy.scope():
        model, optimizer = build_model_and_optimizer(cfg, impl, model_kwargs)
    hparams = {"impl": impl, "jit": bool(cfg.jit), "loop": cfg.loop.name,
               "batch_size": cfg.data.batch_size, "data": cfg.data.name,
               "precision": cfg.precision,
               "learning_rate": cfg.optimizer.learning_rate, **model_kwargs,
               "num_classes": cfg.data.num_classes, "mean_center": cfg.data.mean_center,
               "unit_scale": cfg.data.unit_scale, "test_files": data_info["files"]["test"],
               "strategy": cfg.strategy.name, "replicas": strategy.num_replicas_in_sync}
    predict = make_predict_step(model, cfg.jit)

    def run_eval():
        return evaluate(predict, test_data, cfg.data.num_classes, train_histogram)

    # Only the chief writes summaries and checkpoints; other workers write theirs (needed
    # by the collective ops) to a scratch directory that is removed afterwards.
    output_dir = run_dir if is_chief(strategy) else tempfile.mkdtemp(prefix="meshseg-worker-")
    logger = RunLogger(output_dir, cfg.steps, hparams, initial_step=done if output_dir == run_dir else 0)
    loop_args = dict(steps=cfg.steps, eval_every=cfg.eval_every, jit=cfg.jit, logger=logger,
                     run_eval=run_eval, run_dir=output_dir, checkpoint_every=cfg.checkpoint.every,
                     checkpoints_kept=cfg.checkpoint.keep)
    try:
        if cfg.loop.name == "custom":
            distributed = strategy if cfg.strategy.name != "default" else None
            train_custom(model, optimizer, train_data, strategy=distributed, **loop_args)
        else:
            train_keras(model, optimizer, train_data, **loop_args)
    finally:
        summary = logger.close(time.perf_counter() - start)
        if output_dir != run_dir:
            shutil.rmtree(output_dir, ignore_errors=True)
    model.save(os.path.join(run_dir, "model.keras"), include_optimizer=False)
    barrier(strategy)
    log.info("run directory: %s", run_dir)
    log.info("median step time %.1f ms, compile time %.1f s, wall time %.0f s",
             summary["median_step_time_ms"] or float("nan"), summary["compile_time_s"],
             summary["wall_time_s"])
    log.info("test accuracy %.4f (majority-class baseline %.4f), mean IoU %.4f",
             summary["eval_accuracy"], summary["eval_majority_baseline_accuracy"],
             summary["eval_mean_iou"])
    return summary
