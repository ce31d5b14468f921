"""Is training input-bound? Train steps fed by the tf.data pipeline against the same
steps fed from batches held in memory.

    python -m meshseg.tools.input_bound [config overrides, as for train.py]
    python -m meshseg.tools.input_bound impl=gather_sum data.batch_size=8 --steps 30

Prints the median step time (ms) of both and their ratio; the pipeline keeps up when
the ratio is within 5% of 1.

The overrides are composed and checked (`meshseg.config`) before TensorFlow is imported: an
unknown key or option, a value of the wrong type or out of range ends the command with one
line naming the setting and exit status 2, as a missing data path does once the data are
opened; a bad mesh or record ends it with status 4.
"""

import argparse
from typing import Dict, List

from meshseg.cli import at_least, command
from meshseg.config import composed_config
from meshseg.errors import ConfigError

INPUT_BOUND_RATIO = 1.05


def compare(overrides: List[str], steps: int, warmup: int = 3) -> Dict[str, float]:
    """Median train-step time (ms) fed by the pipeline and fed from memory.

    The model, optimizer and data come from the `train` config with `overrides`. Both
    measurements use the same step function after `warmup` steps (tracing, compiling,
    filling the pipeline's cache); the in-memory batches are the next `steps` batches.

    Returns:
      dict with `pipeline_ms`, `memory_ms` and `ratio` (pipeline / memory).

    Raises:
      ConfigError: from `composed_config` (before TensorFlow is imported), for an unknown
        implementation name, or a missing data path.
      DataError: for a mesh that does not convert or a bad record.
    """
    cfg = composed_config(overrides)
    import tensorflow as tf

    from meshseg.train.run import (build_loss, build_model, build_optimizer, load_data,
                                   typed_config)
    from meshseg.train.step import TrainStep, median_step_ms

    config = typed_config(cfg)
    train_data, _, data_info = load_data(config)
    model = build_model(config.data.num_classes, config.impl.name, config.model,
                        config.precision, config.jit, config.data.features)
    optimizer = build_optimizer(model, config.optimizer, config.precision, config.steps)
    step = TrainStep(model, optimizer, config.jit, tf.distribute.get_strategy(),
                     build_loss(config.loss, data_info.train_histogram))
    batches = iter(train_data)
    for _ in range(warmup):
        float(step(*next(batches))[0])
    in_memory = [next(batches) for _ in range(steps)]
    memory_ms = median_step_ms(step, in_memory)
    pipeline_ms = median_step_ms(step, (next(batches) for _ in range(steps)))
    return {"pipeline_ms": pipeline_ms, "memory_ms": memory_ms, "ratio": pipeline_ms / memory_ms}


@command
def main(argv=None) -> None:
    """Command-line entry point: prints both step times, their ratio and the verdict (exit
    statuses: see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, as for train.py")
    parser.add_argument("--steps", type=at_least(1), default=20, help="steps timed each way")
    args = parser.parse_args(argv)
    result = compare(args.overrides, args.steps)
    verdict = ("not input-bound" if result["ratio"] <= INPUT_BOUND_RATIO
               else "INPUT-BOUND: the pipeline slows training")
    print(f"pipeline-fed step {result['pipeline_ms']:.1f} ms, in-memory step "
          f"{result['memory_ms']:.1f} ms, ratio {result['ratio']:.3f}: {verdict}")


if __name__ == "__main__":
    main()
