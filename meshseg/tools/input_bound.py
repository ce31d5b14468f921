"""Is training input-bound? Train steps fed by the tf.data pipeline against the same
steps fed from batches held in memory.

    python -m meshseg.tools.input_bound [config overrides, as for train.py]
    python -m meshseg.tools.input_bound impl=gather_sum data.batch_size=8 --steps 30

Prints the median step time (ms) of both and their ratio; the pipeline keeps up when
the ratio is within 5% of 1.
"""

import argparse
from pathlib import Path
from typing import Dict, List

from hydra import compose, initialize_config_dir

import meshseg.config  # noqa: F401  (registers the config schema)

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")
INPUT_BOUND_RATIO = 1.05


def compare(overrides: List[str], steps: int, warmup: int = 3) -> Dict[str, float]:
    """Median train-step time (ms) fed by the pipeline and fed from memory.

    The model, optimizer and data come from the `train` config with `overrides`. Both
    measurements use the same step function after `warmup` steps (tracing, compiling,
    filling the pipeline's cache); the in-memory batches are the next `steps` batches.

    Returns:
      dict with `pipeline_ms`, `memory_ms` and `ratio` (pipeline / memory).
    """
    import tensorflow as tf

    from meshseg.train.run import build_model, build_optimizer, load_data, typed_config
    from meshseg.train.step import TrainStep, median_step_ms

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        config = typed_config(compose(config_name="train", overrides=overrides))
    train_data, _, _ = load_data(config)
    model = build_model(config.data.num_classes, config.impl.name, config.model,
                        config.precision, config.jit)
    optimizer = build_optimizer(model, config.optimizer, config.precision)
    step = TrainStep(model, optimizer, config.jit, tf.distribute.get_strategy())
    batches = iter(train_data)
    for _ in range(warmup):
        float(step(*next(batches))[0])
    in_memory = [next(batches) for _ in range(steps)]
    memory_ms = median_step_ms(step, in_memory)
    pipeline_ms = median_step_ms(step, (next(batches) for _ in range(steps)))
    return {"pipeline_ms": pipeline_ms, "memory_ms": memory_ms, "ratio": pipeline_ms / memory_ms}


def main(argv=None) -> Dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, as for train.py")
    parser.add_argument("--steps", type=int, default=20, help="steps timed each way")
    args = parser.parse_args(argv)
    result = compare(args.overrides, args.steps)
    verdict = ("not input-bound" if result["ratio"] <= INPUT_BOUND_RATIO
               else "INPUT-BOUND: the pipeline slows training")
    print(f"pipeline-fed step {result['pipeline_ms']:.1f} ms, in-memory step "
          f"{result['memory_ms']:.1f} ms, ratio {result['ratio']:.3f}: {verdict}")
    return result


if __name__ == "__main__":
    main()
