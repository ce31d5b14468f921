"""A one-process A/B of the training step: two variants of one network (precisions,
implementations or settings) built side by side and timed alternately, step by step, on
the same batch, so that both see the same machine state (load, clocks, caches) and the
comparison does not depend on which process ran when.

    python -m meshseg.tools.bench_ab --model feastnet_unet --precision float32,mixed_bfloat16
    python -m meshseg.tools.bench_ab --model demo --num_vertices 10242 --batch_size 8 \\
        --impl gather_matmul,block_sparse
    python -m meshseg.tools.bench_ab --model feastnet_unet --precision float32 \\
        --overrides experiment=rna_full --overrides_b model.output_level=1

B differs from A in one or more of: the second of two `--precision` values, the second of
two `--impl` values, and `--overrides_b` (feastnet_unet: train.py overrides added to B's,
e.g. a network setting; overrides that change the data give B its own batch). The
networks, batches and steps are the benchmark's own (`meshseg.tools.bench.worker`:
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
from meshseg.registry import IMPLEMENTATIONS, NETWORKS
from meshseg.tools.bench.command import PRECISIONS
from meshseg.tools.bench.worker import ICOSPHERE_SIZES


def alternate(steps: Dict[str, Callable], batches: Dict[str, tuple], rounds: int
              ) -> Dict[str, List[float]]:
    """Per variant, the wall times (ms) of `rounds` steps on its batch (features, labels)
    in `batches`, the variants alternated and their order reversed every other round."""
    times = {name: [] for name in steps}
    order = list(steps)
    for index in range(rounds):
        for name in (order if index % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            steps[name](*batches[name]).numpy()
            times[name].append(1e3 * (time.perf_counter() - start))
    return times


def variant_name(letter: str, variants: Dict[str, tuple]) -> str:
    """What sets variant `letter` ("A" or "B") of {letter: (precision, impl, overrides)}
    apart: its precision and implementation where they differ, and for B its own
    overrides, e.g. "mixed_bfloat16 model.output_level=1"; "A" or "B" alone where nothing
    but the other's overrides differ."""
    own, other = variants[letter], variants["B" if letter == "A" else "A"]
    parts = [own[index] for index in (0, 1) if own[index] != other[index]]
    parts += [item for item in own[2] if item not in other[2]]
    return " ".join(parts) or letter


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (the implementations' names from the registry: no
    TensorFlow)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(NETWORKS), default="feastnet_unet")
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
    parser.add_argument("--overrides_b", nargs="*", default=[],
                        help="feastnet_unet: overrides added to variant B's")
    return parser


@command
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns 0. A bad option is argparse's usage error (exit 2)."""
    from meshseg.tools.bench.worker import make_step, model_and_batch

    parser = build_parser()
    args = parser.parse_args(argv)
    precisions, impls = args.precision.split(","), args.impl.split(",")
    if max(len(precisions), len(impls)) > 2:
        parser.error("--precision and --impl take one or two values each")
    if args.overrides_b and not NETWORKS[args.model].multi_scale:
        parser.error("--overrides_b: only a multi-scale network (model=feastnet_unet) takes "
                     "overrides")
    variants = {"A": (precisions[0], impls[0], args.overrides),
                "B": (precisions[-1], impls[-1], args.overrides + args.overrides_b)}
    if variants["A"] == variants["B"]:
        parser.error("B must differ from A: give two --precision or --impl values, or "
                     "--overrides_b")
    for name, values, choices in (("--precision", precisions, PRECISIONS),
                                  ("--impl", impls, IMPLEMENTATIONS)):
        unknown = [value for value in values if value not in choices]
        if unknown:
            parser.error(f"{name}: unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
    start_tensorflow_quietly()  # every option is checked by now

    steps, batches = {}, {}
    for letter, (precision, impl, overrides) in variants.items():
        job = dict(model=args.model, precision=precision, impl=impl, jit=args.jit,
                   batch_size=args.batch_size, num_vertices=args.num_vertices,
                   num_layers=args.num_layers, num_classes=args.num_classes,
                   overrides=overrides)
        model, features, labels = model_and_batch(job)
        name = variant_name(letter, variants)
        batches[name] = (features, labels)
        steps[name] = make_step(model, "train", args.jit, precision)
        for _ in range(2):  # trace (compile) and warm up
            steps[name](*batches[name]).numpy()
    times = alternate(steps, batches, args.rounds)
    (a, b) = [statistics.median(times[name]) for name in steps]
    vertices = int(next(iter(batches.values()))[0]["vertices"].shape[1])
    print(f"{args.model}, batch {args.batch_size} x {vertices} vertices, "
          f"{args.rounds} alternated train steps each:")
    for name, values in times.items():
        print(f"  {name}: median {statistics.median(values):.1f} ms, fastest {min(values):.1f} ms")
    print(f"  {' / '.join(reversed(list(steps)))}: {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
