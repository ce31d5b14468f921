"""Step time, throughput, memory and roofline share of the feature-steered convolution
implementations, per network and precision.

In the spirit of tensorflow-graphics' graph-convolution benchmark: a network runs once per
configuration (model, precision, impl, jit, num_vertices, num_layers, mode, intra- and
inter-op threads), each in its own subprocess (`meshseg.tools.bench.worker`) so that its
memory peak and its thread pools are its own. `--model demo` is the demo network
(`MeshSegmentationNet`) on a batch of icospheres; `--model feastnet_unet` the multi-scale
network on the first training batch of real meshes a run would draw (default: the default
run's U-Net and bundled sample, bucketed as a run buckets them; `--overrides` takes
train.py's overrides for other data or sizes). Once per precision a subprocess measures
the machine's matmul peak in that precision and its memory bandwidth (a copy); each row's
roofline bound is its FLOPs at that peak plus its minimal bytes at that bandwidth
(`meshseg.tools.bench.roofline`), and `%roofline` is the share of the measured step the bound
is: 100% would be a step at the machine's limit.

    python -m meshseg.tools.bench --num_vertices 10242 --batch_size 8 --mode forward,train
    python -m meshseg.tools.bench --impl gather_matmul --jit false --mode train \
        --precision float32,mixed_bfloat16 --threads 1,2
    python -m meshseg.tools.bench --model feastnet_unet --batch_size 4 --impl gather_matmul \
        --mode train --precision float32,mixed_bfloat16

Modes: `forward` (logits), `backward` (forward + gradients of the masked cross-entropy),
`train` (backward + an Adam update). Rows that fail (XLA cannot compile, out of memory,
timeout) are reported with the error's first line; the run goes on.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from meshseg.cli import at_least, command, output_dir
from meshseg.config import MAX_THREADS
from meshseg.config import PRECISIONS as RUN_PRECISIONS
from meshseg.console import start_tensorflow_quietly
from meshseg.registry import IMPLEMENTATIONS, NETWORKS
from meshseg.signals import run_child
from meshseg.tools.bench.worker import ICOSPHERE_SIZES
from meshseg.tools.bench.roofline import MODES

PRECISIONS = tuple(name for name in RUN_PRECISIONS if name != "auto")  # policies, not a choice


def _run_worker(job: Dict, timeout: float) -> Dict:
    """Runs `job` in `python -m meshseg.tools.bench.worker`; returns its result or
    {"error": ...}."""
    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "result.json")
        command = [sys.executable, "-m", "meshseg.tools.bench.worker", json.dumps(job),
                   result_path]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        try:
            proc = run_child(command, timeout=timeout, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {timeout:g} s"}
        if os.path.exists(result_path):
            with open(result_path) as f:
                return json.load(f)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        killed = " (killed: out of memory?)" if proc.returncode == -9 else ""
        return {"error": f"worker exited with code {proc.returncode}{killed}: "
                         f"{lines[-1] if lines else 'no output'}"}


def _comma_list(kind: str, parse, choices: Optional[Sequence]):
    """argparse type: a comma-separated list, each item parsed and checked against choices
    (None: a thread count, a whole number in [0, MAX_THREADS])."""

    def convert(text: str) -> List:
        items = []
        for item in (t.strip() for t in text.split(",") if t.strip()):
            try:
                value = parse(item)
            except ValueError:
                value = None
            if choices is None and (value is None or not 0 <= value <= MAX_THREADS):
                raise argparse.ArgumentTypeError(
                    f"{kind}: {item!r} is not a whole number in [0, {MAX_THREADS}]")
            if choices is not None and (value is None or value not in choices):
                raise argparse.ArgumentTypeError(
                    f"unknown {kind} {item!r}; choose from {', '.join(map(str, choices))}")
            items.append(value)
        if not items:
            raise argparse.ArgumentTypeError(f"empty {kind} list")
        return items

    return convert


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (the implementations' names from the registry: no
    TensorFlow)."""
    parser = argparse.ArgumentParser(
        prog="meshseg-bench", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--impl", type=_comma_list("impl", str, list(IMPLEMENTATIONS)),
                        default=list(IMPLEMENTATIONS), help="implementations, comma-separated")
    parser.add_argument("--model", type=_comma_list("model", str, list(NETWORKS)),
                        default=["demo"],
                        help="networks: demo (icospheres), feastnet_unet (real meshes)")
    parser.add_argument("--precision", type=_comma_list("precision", str, PRECISIONS),
                        default=["float32"], help="Keras dtype policies (train.py's precision)")
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="feastnet_unet: train.py overrides of its data and network "
                             "(default: the default run's)")
    parser.add_argument("--jit", type=_comma_list("jit", str.lower, ["false", "true"]),
                        default=["false", "true"], help="XLA compilation of the step: false,true")
    parser.add_argument("--num_vertices", type=_comma_list("num_vertices", int, list(ICOSPHERE_SIZES)),
                        default=[10242], help="demo: icosphere sizes (642, 2562, 10242, 40962 = "
                        "s 3..6); feastnet_unet's meshes are real")
    parser.add_argument("--batch_size", type=at_least(1), default=8, help="meshes per step")
    parser.add_argument("--num_layers", type=at_least(1), default=3,
                        help="demo: graph convolutions, with 32 * 2**k output channels")
    parser.add_argument("--mode", type=_comma_list("mode", str, MODES), default=["forward"],
                        help="forward, backward (forward+backward), train (backward+Adam)")
    parser.add_argument("--backward", action="store_true",
                        help="also run the backward and train modes")
    parser.add_argument("--num_classes", type=at_least(1), default=16,
                        help="demo: classes (feastnet_unet: its data's)")
    parser.add_argument("--threads", type=_comma_list("threads", int, None),
                        default=[0], help="TensorFlow intra-op threads (train.py's `threads`; "
                        "0: one per core)")
    parser.add_argument("--inter_op_threads",
                        type=_comma_list("inter_op_threads", int, None), default=[0],
                        help="ops run at once (train.py's `inter_op_threads`; 0: one per core)")
    parser.add_argument("--warmup", type=at_least(0), default=2,
                        help="untimed calls after the first")
    parser.add_argument("--repeats", type=at_least(1), default=5, help="timed calls")
    parser.add_argument("--sort", default=None, help="sort the table by this column, e.g. step_ms")
    parser.add_argument("--out", default="bench_results", help="directory for CSV, JSON and PNG")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per configuration")
    parser.add_argument("--peak_size", type=at_least(0), default=4096,
                        help="matrix size of the matmul peak (per precision, with the "
                        "memory bandwidth); 0 skips both and the roofline")
    return parser


@command
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark, each configuration in `meshseg.tools.bench.worker`; returns 0.

    Every option is checked before the first configuration runs: an unknown choice, a
    count out of range or a `--timeout` <= 0 is argparse's usage error naming the option
    and the valid values (exit status 2); an `--out` that is a file ends the process with
    one line and exit status 2 (`ConfigError`).
    """
    from meshseg.tools.bench import report as bench_report

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"argument --timeout: must be a number of seconds > 0, "
                     f"got {args.timeout:g}")
    sortable = [key for key, header, _ in bench_report.COLUMNS] + [
        header for _, header, _ in bench_report.COLUMNS]
    if args.sort and args.sort not in sortable:
        parser.error(f"--sort: unknown column {args.sort!r}; choose from "
                     f"{', '.join(dict.fromkeys(sortable))}")
    output_dir("--out", args.out)
    start_tensorflow_quietly()  # for the results' metadata; every option is checked by now
    jits = [jit == "true" for jit in args.jit]
    modes = list(dict.fromkeys(args.mode + (["backward", "train"] if args.backward else [])))

    peaks = {}
    for precision in (args.precision if args.peak_size > 0 else []):
        peaks[precision] = _run_worker({"kind": "peaks", "size": args.peak_size,
                                        "precision": precision}, args.timeout)
        print(f"{precision}: matmul peak ({args.peak_size}^2) "
              f"{peaks[precision].get('gflops', 0):.1f} GFLOP/s, memory bandwidth "
              f"{peaks[precision].get('bandwidth_gbs', 0):.1f} GB/s "
              f"{peaks[precision].get('error', '')}", file=sys.stderr)
    rows = []
    # The U-Net's meshes are real: its V is its batch's (the worker's batch_vertices).
    configs = [dict(model=model, precision=precision, num_vertices=num_vertices, mode=mode,
                    threads=threads, inter_op_threads=inter_op_threads, jit=jit, impl=impl,
                    batch_size=args.batch_size,
                    num_layers=None if NETWORKS[model].multi_scale else args.num_layers)
               for model in args.model
               for precision, num_vertices, mode, threads, inter_op_threads, jit, impl
               in itertools.product(args.precision,
                                    [None] if NETWORKS[model].multi_scale
                                    else args.num_vertices, modes,
                                    args.threads, args.inter_op_threads, jits, args.impl)]
    for index, config in enumerate(configs, 1):
        job = dict(config, kind="step", num_classes=args.num_classes, warmup=args.warmup,
                   repeats=args.repeats, overrides=args.overrides)
        start = time.perf_counter()
        row = dict(config, **_run_worker(job, args.timeout))
        row["num_vertices"] = row.get("num_vertices") or row.get("batch_vertices")
        rows.append(row)
        print(f"[{index}/{len(configs)}] {config['model']} {config['precision']} "
              f"{config['impl']} jit={config['jit']} V={row['num_vertices']} "
              f"{config['mode']} threads={config['threads']}:{config['inter_op_threads']}: "
              f"{row.get('step_ms', float('nan')):.1f} ms {row.get('error', '')} "
              f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    rows = bench_report.add_derived_columns(rows, peaks)
    print(bench_report.format_table(rows, sort=args.sort))
    metadata = bench_report.metadata(args, peaks)
    paths = bench_report.write_results(rows, metadata, args.out)
    print("wrote " + ", ".join(paths), file=sys.stderr)
    return 0

