"""Is training input-bound, and how much does the app add to its step? Train steps fed by
the tf.data pipeline and the app's own loop against the same steps fed from batches held
in memory.

    python -m meshseg.tools.input_bound [config overrides, as for train.py]
    python -m meshseg.tools.input_bound impl=gather_sum data.batch_size=8 --steps 30

Prints three median times (ms): the train step fed from memory (the benchmark's pure
train step: the same `TrainStep`, model, shapes and classes), the same step fed by the
pipeline, and the app's whole loop iteration (`meshseg.train.run.run` on a temporary run
directory: input, step, loss, metrics, the non-finite guard, logging and summaries; no
evaluation or checkpoint inside the timed steps). The pipeline keeps up when
pipeline/memory is within 5% of 1; the app's overhead is within bounds when app/memory
is within 15% of 1.

The overrides are composed and checked (`meshseg.config`) before TensorFlow is imported: an
unknown key or option, a value of the wrong type or out of range ends the command with one
line naming the setting and exit status 2, as a missing data path or loop=keras (which
does not time its iterations) does; a bad mesh or record ends it with status 4.
"""

import argparse
import copy
import os
import statistics
import tempfile
from typing import Dict, List, Optional

from meshseg.cli import at_least, command
from meshseg.config import TrainConfig, train_config
from meshseg.console import start_tensorflow_quietly
from meshseg.errors import ConfigError

INPUT_BOUND_RATIO = 1.05
APP_OVERHEAD_RATIO = 1.15


def compare(overrides: List[str], steps: int, warmup: int = 3) -> Dict[str, Optional[float]]:
    """Median train-step time (ms) fed by the pipeline and fed from memory, and the app's
    median loop iteration (ms).

    The model, optimizer and data come from the `train` config with `overrides`. Both
    step measurements use the same step function after `warmup` steps (tracing, compiling,
    filling the pipeline's cache); the in-memory batches are the next `steps` batches.
    The app's figure is `app_iteration_ms` of the same config.

    Returns:
      dict with `pipeline_ms`, `memory_ms`, `ratio` (pipeline / memory), `app_ms` and
      `app_ratio` (app / memory); the last two are None when every app step traced.

    Raises:
      ConfigError: from `train_config` (before TensorFlow is imported), for loop=keras,
        an unknown implementation name, or a missing data path.
      DataError: for a mesh that does not convert or a bad record.
    """
    composed = train_config(overrides)
    if composed.loop.name != "custom":
        raise ConfigError(f"loop={composed.loop.name}: input_bound times the iterations of "
                          "loop=custom, the only loop that times them")
    start_tensorflow_quietly()
    import tensorflow as tf

    from meshseg.train.device.distribute import set_threads

    set_threads(composed.threads, composed.inter_op_threads)  # before tensorflow-graphics runs ops
    from meshseg.data.pipeline.inputs import MeshInputs
    from meshseg.train.run import (build_loss, build_model, build_optimizer, load_data,
                                   typed_config)
    from meshseg.train.loop.step import TrainStep, median_step_ms

    config = typed_config(composed)
    train_data, _, data_info = load_data(config)
    model = build_model(config.data.num_classes, config.impl.name, config.model,
                        config.precision, config.jit, MeshInputs.of(config.data))
    optimizer = build_optimizer(model, config.optimizer, config.precision, config.steps)
    step = TrainStep(model, optimizer, config.jit, tf.distribute.get_strategy(),
                     build_loss(config.loss, data_info.train_histogram))
    batches = iter(train_data)
    for _ in range(warmup):
        float(step(*next(batches))[0])
    in_memory = [next(batches) for _ in range(steps)]
    memory_ms = median_step_ms(step, in_memory)
    pipeline_ms = median_step_ms(step, (next(batches) for _ in range(steps)))
    app_ms = app_iteration_ms(composed, steps, warmup)
    return {"pipeline_ms": pipeline_ms, "memory_ms": memory_ms,
            "ratio": pipeline_ms / memory_ms, "app_ms": app_ms,
            "app_ratio": None if app_ms is None else app_ms / memory_ms}


def app_iteration_ms(composed: TrainConfig, steps: int, warmup: int) -> Optional[float]:
    """The median (ms) of the app's loop iterations (`iteration_time_ms`,
    `meshseg.train.loop.custom_loop`) after the first `warmup` steps of a run of `composed` on one
    device, in a temporary run directory, that trains `warmup + steps + 1` steps and
    evaluates and checkpoints only at its last one (which has no timed iteration), so
    `steps` iterations are timed; None when all of them traced.
    """
    import tensorflow as tf

    from meshseg.train.run import run
    from meshseg.train.logs.summaries import read_scalars

    config = copy.deepcopy(composed)
    config.steps = config.eval_every = config.checkpoint.every = warmup + steps + 1
    config.checkpoint.dir = config.resume = None  # a fresh run in the temporary directory
    with tempfile.TemporaryDirectory(prefix="meshseg-input-bound-") as run_dir:
        run(config, run_dir, tf.distribute.get_strategy())
        timed_steps, times = read_scalars(os.path.join(run_dir, "train")).get(
            "iteration_time_ms", ([], []))
    timed = [ms for step, ms in zip(timed_steps, times) if step > warmup]
    return float(statistics.median(timed)) if timed else None


def report(result: Dict[str, Optional[float]]) -> str:
    """The printed line: the three times, both ratios and both verdicts."""
    verdict = ("not input-bound" if result["ratio"] <= INPUT_BOUND_RATIO
               else "INPUT-BOUND: the pipeline slows training")
    line = (f"in-memory step {result['memory_ms']:.1f} ms, pipeline-fed step "
            f"{result['pipeline_ms']:.1f} ms, ratio {result['ratio']:.3f}: {verdict}; ")
    if result["app_ms"] is None:
        return line + "app iteration: none timed (every step traced)"
    app_verdict = ("app overhead within 15%" if result["app_ratio"] <= APP_OVERHEAD_RATIO
                   else "APP OVERHEAD: the app's loop adds more than 15% to the train step")
    return line + (f"app iteration {result['app_ms']:.1f} ms, app/memory "
                   f"{result['app_ratio']:.3f}: {app_verdict}")


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: train.py's overrides (positional) and `--steps`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, as for train.py")
    parser.add_argument("--steps", type=at_least(1), default=20, help="steps timed each way")
    return parser


@command
def main(argv=None) -> None:
    """Command-line entry point: prints the three times, their ratios and the verdicts
    (exit statuses: see the module docstring)."""
    args = build_parser().parse_args(argv)
    print(report(compare(args.overrides, args.steps)))


if __name__ == "__main__":
    main()
