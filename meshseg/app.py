"""The training application: builds data, model and optimizer from the Hydra config and trains."""

import glob
import logging
import os
import time
from typing import Dict, List, Tuple

import keras
import numpy as np
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from meshseg.data.pipeline import make_dataset
from meshseg.data.prepare import prepare_rna_sample
from meshseg.evaluate import evaluate, label_histogram, make_predict_step
from meshseg.loops.custom import train_custom
from meshseg.loops.keras_fit import train_keras
from meshseg.model import MeshSegmentationNet
from meshseg.ops import XLA_FORMULATION

log = logging.getLogger(__name__)
PAD_MULTIPLE = 256


def resolve_files(data_cfg: DictConfig) -> Dict[str, List[str]]:
    """Train and test shard paths for the `data` config group.

    `source: rna_sample` converts the bundled sample on first use (cached in `cache_dir`);
    `source: tfrecords` globs `train_files` and `test_files`.

    Raises:
      FileNotFoundError: if a glob matches no file.
    """
    if data_cfg.source == "rna_sample":
        prepared = prepare_rna_sample(to_absolute_path(data_cfg.root),
                                      to_absolute_path(data_cfg.cache_dir))
        return {"train": prepared["train"], "test": prepared["test"]}
    files = {}
    for split in ("train", "test"):
        pattern = to_absolute_path(data_cfg[f"{split}_files"])
        files[split] = sorted(glob.glob(pattern))
        if not files[split]:
            raise FileNotFoundError(f"data.{split}_files={pattern!r} matches no file")
    return files


def scan_split(files: List[str], data_cfg: DictConfig) -> Tuple[np.ndarray, Tuple[int, int, int]]:
    """One deterministic pass: (label histogram [K], (max vertex count, max edge count,
    max vertex degree))."""
    dataset = make_dataset(files, data_cfg.batch_size, training=False)
    extent = np.zeros(3, np.int64)
    for features, _ in dataset:
        extent = np.maximum(extent, [features["vertices"].shape[1], features["edges"].shape[1],
                                     features["neighbors"].shape[2]])
    return label_histogram(dataset, data_cfg.num_classes), tuple(int(n) for n in extent)


def round_up(value: int, multiple: int = PAD_MULTIPLE) -> int:
    return -(-value // multiple) * multiple


def run(cfg: DictConfig, run_dir: str) -> Dict:
    """Trains and evaluates as configured; writes event files, `summary.json` and
    `model.keras` under `run_dir`. Returns the run summary (see `RunLogger.summary`)."""
    start = time.perf_counter()
    keras.utils.set_random_seed(cfg.seed)
    files = resolve_files(cfg.data)
    train_histogram, train_extent = scan_split(files["train"], cfg.data)
    _, test_extent = scan_split(files["test"], cfg.data)
    pad_to = None
    if cfg.jit:
        # One padded shape for every batch: XLA compiles once per distinct shape.
        num_vertices, num_edges, max_degree = np.maximum(train_extent, test_extent)
        pad_to = (round_up(num_vertices), round_up(num_edges), int(max_degree))
        log.info("jit=true: padding every batch to %d vertices, %d edges, %d neighbours", *pad_to)
        log.info("impl=%s under XLA uses %s", cfg.impl.name, XLA_FORMULATION[cfg.impl.name])
    dataset_args = dict(batch_size=cfg.data.batch_size, mean_center=cfg.data.mean_center,
                        unit_scale=cfg.data.unit_scale, pad_to=pad_to)
    train_data = make_dataset(files["train"], training=True, seed=cfg.seed, repeat=True,
                              shuffle_buffer=cfg.data.shuffle_buffer, **dataset_args)
    test_data = make_dataset(files["test"], training=False, **dataset_args)

    model = MeshSegmentationNet(cfg.data.num_classes, impl=cfg.impl.name, xla=cfg.jit,
                                **OmegaConf.to_container(cfg.model))
    schedule = keras.optimizers.schedules.ExponentialDecay(
        cfg.optimizer.learning_rate, cfg.optimizer.decay_steps, cfg.optimizer.decay_rate)
    optimizer = keras.optimizers.Adam(schedule, beta_1=cfg.optimizer.beta_1,
                                      epsilon=cfg.optimizer.epsilon)
    hparams = {"impl": cfg.impl.name, "jit": bool(cfg.jit), "loop": cfg.loop.name,
               "batch_size": cfg.data.batch_size, "data": cfg.data.name}
    from meshseg.summaries import RunLogger  # tqdm bar starts here, after data preparation

    logger = RunLogger(run_dir, cfg.steps, hparams)
    predict = make_predict_step(model, cfg.jit)

    def run_eval():
        return evaluate(predict, test_data, cfg.data.num_classes, train_histogram)

    loop_args = dict(steps=cfg.steps, eval_every=cfg.eval_every, jit=cfg.jit, logger=logger,
                     run_eval=run_eval)
    if cfg.loop.name == "custom":
        train_custom(model, optimizer, iter(train_data), **loop_args)
    else:
        train_keras(model, optimizer, train_data, **loop_args)
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
