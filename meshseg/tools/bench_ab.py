"""A one-process A/B of the training step: two variants of one network (precisions or
implementations) built side by side and timed alternately, step by step, on the same
batch, so that both see the same machine state (load, clocks, caches) and the comparison
does not depend on which process ran when.

    python -m meshseg.tools.bench_ab --model feastnet_unet --precision float32,mixed_bfloat16
    python -m meshseg.tools.bench_ab --model demo --num_vertices 10242 --batch_size 8 \\
        --impl gather_matmul,block_sparse

Exactly one of `--precision` and `--impl` lists two values; the other takes one. The
networks, batches and steps are the benchmark's own (`meshseg.tools.bench_worker`:
`model_and_batch`, `make_step`, the application's `TrainStep`). Prints each variant's
median and fastest step (ms) and the ratio B / A of the medians.
"""

import argparse
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from meshseg.cli import at_least, command
from meshseg.console import start_tensorflow_quietly
from meshseg.tools.bench import MODELS, PRECISIONS
from meshseg.tools.bench_worker import ICOSPHERE_SIZES


def alternate(steps: Dict[str, Callable], batch, rounds: int) -> Dict[str, List[float]]:
    """Per variant, the wall times (ms) of `rounds` steps on `batch` (features, labels),
    the variants alternated and their order reversed every other round."""
    times = {name: [] for name in steps}
    order = list(steps)
    for index in range(rounds):
        for name in (order if index % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            steps[name](*batch).numpy()
            times[name].append(1e3 * (time.perf_counter() - start))
    return times


@command
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns 0. A bad option is argparse's usage error (exit 2)."""
    start_tensorflow_quietly()
    from meshseg.nn.ops import IMPLEMENTATIONS
    from meshseg.tools.bench_worker import make_step, model_and_batch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=MODELS, default="feastnet_unet")
    parser.add_argument("--precision", default="float32,mixed_bfloat16",
                        help=f"one or two of {', '.join(PRECISIONS)}, comma-separated")
    parser.add_argument("--impl", default="gather_matmul",
                        help=f"one or two of {', '.join(IMPLEMENTATIONS)}, comma-separated")
    parser.add_argument("--jit", action="store_true", help="XLA-compile both steps")
    parser.add_argument("--batch_size", type=at_least(1), default=4)
    parser.add_argument("--num_vertices", type=int, choices=sorted(ICOSPHERE_SIZES),
                        default=10242, help="demo: the icosphere size")
    parser.add_argument("--num_layers", type=at_least(1), default=3, help="demo: convolutions")
    parser.add_argument("--num_classes", type=at_least(1), default=16, help="demo: classes")
    parser.add_argument("--rounds", type=at_least(1), default=12, help="timed steps each")
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="feastnet_unet: train.py overrides of its data and network")
    args = parser.parse_args(argv)
    precisions, impls = args.precision.split(","), args.impl.split(",")
    if sorted([len(precisions), len(impls)]) != [1, 2]:
        parser.error("give two values to exactly one of --precision and --impl")
    for name, values, choices in (("--precision", precisions, PRECISIONS),
                                  ("--impl", impls, IMPLEMENTATIONS)):
        unknown = [value for value in values if value not in choices]
        if unknown:
            parser.error(f"{name}: unknown {', '.join(unknown)}; choose from {', '.join(choices)}")

    steps, batch = {}, None
    for precision in precisions:
        for impl in impls:
            job = dict(model=args.model, precision=precision, impl=impl, jit=args.jit,
                       batch_size=args.batch_size, num_vertices=args.num_vertices,
                       num_layers=args.num_layers, num_classes=args.num_classes,
                       overrides=args.overrides)
            model, features, labels = model_and_batch(job)
            batch = batch or (features, labels)
            step = make_step(model, "train", args.jit, precision)
            for _ in range(2):  # trace (compile) and warm up
                step(*batch).numpy()
            steps[precision if len(precisions) == 2 else impl] = step
    times = alternate(steps, batch, args.rounds)
    (a, b) = [statistics.median(times[name]) for name in steps]
    print(f"{args.model}, batch {args.batch_size} x {int(batch[0]['vertices'].shape[1])} "
          f"vertices, {args.rounds} alternated train steps each:")
    for name, values in times.items():
        print(f"  {name}: median {statistics.median(values):.1f} ms, fastest {min(values):.1f} ms")
    print(f"  {' / '.join(reversed(list(steps)))}: {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
