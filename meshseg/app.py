"""The training application: validates the config, claims the run directory, builds data,
model and optimizer, and trains with the configured loop."""

import glob
import json
import logging
import os
import time
from typing import Dict, List, Tuple

import keras
import numpy as np
import tensorflow as tf
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from meshseg.data.pipeline import make_dataset
from meshseg.data.prepare import prepare_rna_sample
from meshseg.autotune import choose_impl
from meshseg.checkpoints import latest_step
from meshseg.errors import ConfigError
from meshseg.evaluate import evaluate, label_histogram, make_predict_step
from meshseg.loops.custom import train_custom
from meshseg.loops.keras_fit import train_keras
from meshseg.model import MeshSegmentationNet
from meshseg.ops import XLA_FORMULATION
from meshseg.summaries import RunLogger
from meshseg.workdir import claim_run_dir

log = logging.getLogger(__name__)
PAD_MULTIPLE = 256
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def validate(cfg: DictConfig) -> None:
    """Checks values the schema cannot: positive counts and existing paths.

    Raises:
      ConfigError: naming the setting.
    """
    for key in ("steps", "eval_every", "checkpoint.every", "checkpoint.keep", "data.batch_size"):
        if OmegaConf.select(cfg, key) < 1:
            raise ConfigError(f"{key} must be >= 1, got {OmegaConf.select(cfg, key)}")
    if cfg.precision not in PRECISIONS:
        raise ConfigError(f"precision={cfg.precision}: choose one of {', '.join(PRECISIONS)}")
    if cfg.resume is not None and not os.path.isdir(to_absolute_path(cfg.resume)):
        raise ConfigError(f"resume={cfg.resume}: no such run directory")
    if cfg.data.source == "rna_sample":
        root = to_absolute_path(cfg.data.root)
        if not os.path.isdir(root):
            raise ConfigError(f"data.root={cfg.data.root}: no such directory ({root})")
        return
    for split in ("train", "test"):
        pattern = to_absolute_path(cfg.data[f"{split}_files"])
        if not glob.glob(pattern):
            raise ConfigError(f"data.{split}_files={cfg.data[f'{split}_files']}: matches no file")


def resolve_files(data_cfg: DictConfig) -> Dict[str, List[str]]:
    """Train and test shard paths: the bundled sample (converted on first use, cached in
    `cache_dir`) for `source: rna_sample`, else the `train_files`/`test_files` globs."""
    if data_cfg.source == "rna_sample":
        prepared = prepare_rna_sample(to_absolute_path(data_cfg.root),
                                      to_absolute_path(data_cfg.cache_dir))
        return {"train": prepared["train"], "test": prepared["test"]}
    return {split: sorted(glob.glob(to_absolute_path(data_cfg[f"{split}_files"])))
            for split in ("train", "test")}


def scan_split(files: List[str], data_cfg: DictConfig) -> Tuple[np.ndarray, Tuple[int, int, int]]:
    """One deterministic pass: (label histogram [K], (max vertex count, max edge count,
    max vertex degree)).

    Raises:
      ConfigError: if a label is >= data.num_classes.
    """
    dataset = make_dataset(files, data_cfg.batch_size, training=False)
    extent = np.zeros(3, np.int64)
    for features, _ in dataset:
        extent = np.maximum(extent, [features["vertices"].shape[1], features["edges"].shape[1],
                                     features["neighbors"].shape[2]])
    try:
        histogram = label_histogram(dataset, data_cfg.num_classes)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return histogram, tuple(int(n) for n in extent)


def round_up(value: int, multiple: int = PAD_MULTIPLE) -> int:
    return -(-value // multiple) * multiple


def run(cfg: DictConfig, run_dir: str) -> Dict:
    """Trains and evaluates as configured.

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
    if cfg.threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    files = resolve_files(cfg.data)
    train_histogram, train_extent = scan_split(files["train"], cfg.data)
    _, test_extent = scan_split(files["test"], cfg.data)
    if claim_run_dir(run_dir, cfg):
        done = latest_step(run_dir)
        log.info("continuing the run in %s from step %d", run_dir, done)
        if done >= cfg.steps:
            log.info("%s already completed %d steps; nothing to do", run_dir, done)
            with open(os.path.join(run_dir, "summary.json")) as f:
                return json.load(f)
    pad_to = None
    if cfg.jit:
        # One padded shape for every batch: XLA compiles once per distinct shape.
        num_vertices, num_edges, max_degree = np.maximum(train_extent, test_extent)
        pad_to = (round_up(num_vertices), round_up(num_edges), int(max_degree))
        log.info("jit=true: padding every batch to %d vertices, %d edges, %d neighbours", *pad_to)
    dataset_args = dict(batch_size=cfg.data.batch_size, mean_center=cfg.data.mean_center,
                        unit_scale=cfg.data.unit_scale, pad_to=pad_to)
    train_data = make_dataset(files["train"], training=True, seed=cfg.seed, repeat=True,
                              shuffle_buffer=cfg.data.shuffle_buffer, **dataset_args)
    test_data = make_dataset(files["test"], training=False, **dataset_args)

    model_kwargs = OmegaConf.to_container(cfg.model)
    impl = cfg.impl.name
    if impl == "auto":
        features, labels = next(iter(train_data))
        impl = choose_impl(features, labels, cfg.jit, cfg.data.num_classes, model_kwargs,
                           cfg.impl.candidates, cfg.impl.timing_steps, cfg.impl.cache_file)
    if cfg.jit:
        log.info("impl=%s under XLA uses %s", impl, XLA_FORMULATION[impl])
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
    hparams = {"impl": impl, "jit": bool(cfg.jit), "loop": cfg.loop.name,
               "batch_size": cfg.data.batch_size, "data": cfg.data.name,
               "precision": cfg.precision,
               "learning_rate": cfg.optimizer.learning_rate, **model_kwargs,
               "num_classes": cfg.data.num_classes, "mean_center": cfg.data.mean_center,
               "unit_scale": cfg.data.unit_scale, "test_files": files["test"]}
    predict = make_predict_step(model, cfg.jit)

    def run_eval():
        return evaluate(predict, test_data, cfg.data.num_classes, train_histogram)

    logger = RunLogger(run_dir, cfg.steps, hparams)
    train = train_custom if cfg.loop.name == "custom" else train_keras
    try:
        train(model, optimizer, train_data, steps=cfg.steps, eval_every=cfg.eval_every,
              jit=cfg.jit, logger=logger, run_eval=run_eval, run_dir=run_dir,
              checkpoint_every=cfg.checkpoint.every, checkpoints_kept=cfg.checkpoint.keep)
    finally:
        summary = logger.close(time.perf_counter() - start)
    model.save(os.path.join(run_dir, "model.keras"), include_optimizer=False)
    log.info("run directory: %s", run_dir)
    log.info("median step time %.1f ms, compile time %.1f s, wall time %.0f s",
             summary["median_step_time_ms"] or float("nan"), summary["compile_time_s"],
             summary["wall_time_s"])
    log.info("test accuracy %.4f (majority-class baseline %.4f), mean IoU %.4f",
             summary["eval_accuracy"], summary["eval_majority_baseline_accuracy"],
             summary["eval_mean_iou"])
    return summary
