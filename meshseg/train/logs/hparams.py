"""A run's hyperparameters and headline metrics for TensorBoard's HParams dashboard.

`log_hparams(run_dir, config, summary)` writes one event file into `run_dir` itself (not
into `train/` or `eval/`) holding

- the experiment config (`hp.hparams_config`): the hyperparameter columns of
  `HPARAM_KEYS` and the metric columns of `METRIC_KEYS`. Domains are not taken from the
  run's own values, so every job of a sweep writes the same config;
- the session (`hp.hparams`): this run's values (`run_hparams`), in a session group named
  by the run directory's absolute path (`trial_id`), so two sweeps' jobs of the same name
  (both `0`, say) are two rows of the table, not one row holding both sessions;
- one scalar per metric of `METRIC_KEYS`, at step `summary["steps"]`, so the table
  has a value for it (the HParams dashboard shows a run's last value of each tag).

`tensorboard --logdir <sweep dir>` then lists every job of a Hydra multirun as one row
of the HParams table, next to its `train/` and `eval/` charts.
"""

import dataclasses
import os
from typing import Dict, Union

import tensorflow as tf
from tensorboard.plugins.hparams import api as hp

from meshseg.config import TrainConfig
from meshseg.nn.ops import IMPLEMENTATIONS
from meshseg.train.rundir.summary import RunSummary

HParamValue = Union[bool, int, float, str]

# Hyperparameter -> HParams column title (see `run_hparams`).
HPARAM_KEYS = {
    "impl": "impl", "jit": "jit", "loop": "loop", "batch_size": "batch size",
    "learning_rate": "learning rate", "model": "model", "num_weight_matrices": "weight matrices W",
    "input_channels": "input channels", "conv_channels": "conv channels",
    "hidden_channels": "hidden channels", "hidden_layers": "hidden layers",
    "input_skip": "input skip", "global_skip": "global skip", "global_scale": "global scale",
    "dropout": "dropout", "data": "data set", "features": "features", "steps": "steps",
}
# RunSummary field -> metric column title; each is also the tag of a scalar in `run_dir`.
METRIC_KEYS = {
    "median_step_time_ms": "median step time (ms)",
    "compile_time_s": "compile time (s)",
    "peak_rss_mib": "peak memory (MiB)",
    "validation_accuracy": "validation accuracy",
    "validation_mean_iou": "validation mean IoU",
    "eval_accuracy": "test accuracy",
    "eval_mean_iou": "test mean IoU",
}


def hparam_value(value) -> HParamValue:
    """`value` as a type the HParams plugin stores: bool, int, float or str.

    Sequences (e.g. conv_channels [8, 8, 16]) become comma-joined strings ("8,8,16");
    numpy scalars become Python scalars; anything else becomes its `str`.
    """
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def run_hparams(config: TrainConfig, summary: RunSummary) -> Dict[str, HParamValue]:
    """The values of `HPARAM_KEYS` for one run, converted by `hparam_value`: the
    implementation that trained (`summary.impl`), jit, loop, batch size, learning rate, the
    network (`model.name`), its sizes and head settings (the demo's are the defaults it
    ignores), the data set's name, its input features and the steps."""
    values = {"impl": summary.impl, "jit": config.jit, "loop": config.loop.name,
              "batch_size": config.data.batch_size,
              "learning_rate": config.optimizer.learning_rate,
              **dataclasses.asdict(config.model), "model": config.model.name,
              "data": config.data.name, "features": config.data.features,
              "steps": config.steps}
    return {key: hparam_value(values[key]) for key in HPARAM_KEYS}


def experiment_config() -> tuple:
    """(hparams, metrics): the `hp.HParam` and `hp.Metric` columns of the dashboard."""
    domains = {"impl": hp.Discrete(sorted(IMPLEMENTATIONS)), "jit": hp.Discrete([False, True])}
    hparams = [hp.HParam(key, domains.get(key), display_name=title)
               for key, title in HPARAM_KEYS.items()]
    metrics = [hp.Metric(key, display_name=title) for key, title in METRIC_KEYS.items()]
    return hparams, metrics


def log_hparams(run_dir: str, config: TrainConfig, summary: RunSummary) -> Dict[str, HParamValue]:
    """Writes the HParams experiment, this run's session and its metrics into `run_dir`.

    Args:
      run_dir: the run's directory; the event file goes directly into it.
      config: the run's settings.
      summary: its results; metrics of `METRIC_KEYS` that are None are skipped. They are
        logged at step `summary.steps`.

    Returns:
      the logged hyperparameters {key: value}.
    """
    hparams = run_hparams(config, summary)
    columns, metrics = experiment_config()
    writer = tf.summary.create_file_writer(run_dir)
    with writer.as_default(step=summary.steps):
        hp.hparams_config(hparams=columns, metrics=metrics)
        hp.hparams(hparams, trial_id=os.path.abspath(run_dir))
        for key in METRIC_KEYS:
            value = getattr(summary, key)
            if value is not None:
                tf.summary.scalar(key, float(value))
    writer.close()
    return hparams
