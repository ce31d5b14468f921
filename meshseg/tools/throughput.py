"""Throughput of the input pipeline alone: meshes/s and vertices/s.

    python -m meshseg.tools.throughput 'data/cache/rna_sample/train-*' --batch-size 4

Times `passes` full passes over `make_dataset(files, ...)` (evaluation order, no
model). With `cache=True` the first pass reads, parses and builds adjacency and
later passes come from memory, so pass 1 is the cold and pass 2+ the warm rate.

The command line checks its arguments before it imports TensorFlow: a pattern that
matches no file ends it with one line and exit status 2, a count below 1 is argparse's
usage error (status 2); shards that hold no mesh or a bad record end it with status 4.
"""

import argparse
import glob
import time

from meshseg.cli import at_least, command
from meshseg.console import start_tensorflow_quietly
from meshseg.errors import ConfigError, DataError


def measure_throughput(files: list[str], batch_size: int = 4, passes: int = 2,
                       cache: bool = True) -> list[dict]:
    """Times passes over the dataset of `files`.

    Args:
      files: TFRecord shards.
      batch_size: meshes per batch.
      passes: full passes to time (>= 1).
      cache: cache parsed meshes after the first pass (as in training).

    Returns:
      One dict per pass: 'pass' (1-based), 'meshes', 'vertices', 'seconds',
      'meshes_per_s', 'vertices_per_s'.

    Raises:
      ValueError: if `files` is empty or `passes` < 1.
      DataError: if the shards hold no mesh, or for a bad record (the message names the
        shard and the record).
    """
    start_tensorflow_quietly()
    import tensorflow as tf

    from meshseg.data.pipeline.dataset import make_dataset

    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    dataset = make_dataset(files, batch_size, training=False, cache=cache)
    results = []
    for index in range(passes):
        meshes = vertices = 0
        start = time.perf_counter()
        try:
            for features, _ in dataset:
                meshes += int(features["num_vertices"].shape[0])
                vertices += int(features["num_vertices"].numpy().sum())
        except tf.errors.OpError as error:
            raise DataError(error.message) from None
        seconds = time.perf_counter() - start
        if meshes == 0:
            raise DataError(f"{', '.join(files)}: no mesh read; give TFRecord shards written "
                            "by python -m meshseg.data.convert")
        results.append({"pass": index + 1, "meshes": meshes, "vertices": vertices,
                        "seconds": seconds, "meshes_per_s": meshes / seconds,
                        "vertices_per_s": vertices / seconds})
    return results


@command
def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: prints one line per pass (exit statuses: see the module
    docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="shard paths or glob patterns")
    parser.add_argument("--batch-size", type=at_least(1), default=4)
    parser.add_argument("--passes", type=at_least(1), default=2)
    parser.add_argument("--no-cache", action="store_true")
    args = parser.parse_args(argv)
    files = set()
    for pattern in args.files:
        matches = glob.glob(pattern)
        if not matches:
            raise ConfigError(f"files {pattern}: no file matches; give TFRecord shards "
                              "(quote a glob pattern)")
        files.update(matches)
    results = measure_throughput(sorted(files), args.batch_size, args.passes,
                                 cache=not args.no_cache)
    for result in results:
        print(f"pass {result['pass']}: {result['meshes']} meshes in {result['seconds']:.2f} s: "
              f"{result['meshes_per_s']:.1f} meshes/s, {result['vertices_per_s']:.0f} vertices/s")


if __name__ == "__main__":
    main()
