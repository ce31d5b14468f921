"""Step time, throughput and memory of the feature-steered convolution implementations.

In the spirit of tensorflow-graphics' graph-convolution benchmark: the demo network
(`MeshSegmentationNet`) runs on a batch of icospheres, once per configuration
(impl, jit, num_vertices, num_layers, mode, intra- and inter-op threads), and every
configuration runs in its own subprocess (`meshseg.tools.bench_worker`) so that its memory
peak and its thread pools are its own. A separate subprocess measures the machine's
float32 matmul peak, against which each configuration's GFLOP/s is reported.

    python -m meshseg.tools.bench --num_vertices 10242 --batch_size 8 --mode forward,train
    python -m meshseg.tools.bench --impl gather_matmul --jit false --mode train \
        --threads 1,2 --inter_op_threads 1,2

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
from meshseg.console import start_tensorflow_quietly
from meshseg.tools.bench_worker import ICOSPHERE_SIZES, conv_channels

MODES = ("forward", "backward", "train")
BACKWARD_FLOP_FACTOR = 2  # backward pass ~ 2x the forward FLOPs (dL/dx and dL/dW products)


def count_flops(num_vertices: int, num_edges: int, batch_size: int, channels: Sequence[int],
                num_classes: int, mode: str = "forward", num_weight_matrices: int = 8,
                input_channels: int = 16, hidden_channels: int = 256) -> int:
    """Floating-point operations (multiply and add counted separately) of one step.

    Counts the dense products of `MeshSegmentationNet`; per graph convolution C -> D with W
    weight matrices over N = B*V vertices and B*E edges: the projections s = x u, t = x v
    (2*N*C*W*2), the per-edge aggregation sum_j a_ij q_m x_j (2*E*W*C) and the W*C -> D
    matmul (2*N*W*C*D). Softmax, bias, ReLU and the optimizer update are left out (each
    O(N*D) or O(parameters)). `backward` and `train` add BACKWARD_FLOP_FACTOR x forward.

    Args:
      num_vertices: V per mesh; num_edges: E per mesh (directed, with self-edges).
      batch_size: B meshes per step.
      channels: output channels of the graph convolutions, in order.
      num_classes: K outputs of the last 1x1 convolution.
      mode: one of MODES.

    Returns:
      int FLOPs per step.

    Raises:
      ValueError: for an unknown mode.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {list(MODES)}")
    n, e, w = batch_size * num_vertices, batch_size * num_edges, num_weight_matrices
    flops = 2 * n * 3 * input_channels  # lin_in: xyz -> input_channels
    c = input_channels
    for d in channels:
        flops += 2 * n * c * w * 2 + 2 * e * w * c + 2 * n * w * c * d
        c = d
    flops += 2 * n * c * hidden_channels + 2 * n * hidden_channels * num_classes
    return flops * (1 + BACKWARD_FLOP_FACTOR) if mode != "forward" else flops


def _run_worker(job: Dict, timeout: float) -> Dict:
    """Runs `job` in `python -m meshseg.tools.bench_worker`; returns its result or
    {"error": ...}."""
    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "result.json")
        command = [sys.executable, "-m", "meshseg.tools.bench_worker", json.dumps(job),
                   result_path]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
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
    """The command line's parser (imports TensorFlow, without its native start-up lines,
    for the implementations' names)."""
    start_tensorflow_quietly()
    from meshseg.nn.ops import IMPLEMENTATIONS

    parser = argparse.ArgumentParser(
        prog="meshseg-bench", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--impl", type=_comma_list("impl", str, list(IMPLEMENTATIONS)),
                        default=list(IMPLEMENTATIONS), help="implementations, comma-separated")
    parser.add_argument("--jit", type=_comma_list("jit", str.lower, ["false", "true"]),
                        default=["false", "true"], help="XLA compilation of the step: false,true")
    parser.add_argument("--num_vertices", type=_comma_list("num_vertices", int, list(ICOSPHERE_SIZES)),
                        default=[10242], help="icosphere sizes (642, 2562, 10242, 40962 = s 3..6)")
    parser.add_argument("--batch_size", type=at_least(1), default=8, help="meshes per step")
    parser.add_argument("--num_layers", type=at_least(1), default=3,
                        help="graph convolutions, with 32 * 2**k output channels")
    parser.add_argument("--mode", type=_comma_list("mode", str, MODES), default=["forward"],
                        help="forward, backward (forward+backward), train (backward+Adam)")
    parser.add_argument("--backward", action="store_true",
                        help="also run the backward and train modes")
    parser.add_argument("--num_classes", type=at_least(1), default=16)
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
                        help="matrix size of the float32 matmul peak; 0 skips it")
    return parser


@command
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark, each configuration in `meshseg.tools.bench_worker`; returns 0.

    Every option is checked before the first configuration runs: an unknown choice, a
    count out of range or a `--timeout` <= 0 is argparse's usage error naming the option
    and the valid values (exit status 2); an `--out` that is a file ends the process with
    one line and exit status 2 (`ConfigError`).
    """
    from meshseg.tools import bench_report

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
    jits = [jit == "true" for jit in args.jit]
    modes = list(dict.fromkeys(args.mode + (["backward", "train"] if args.backward else [])))

    peak = None
    if args.peak_size > 0:
        peak = _run_worker({"kind": "matmul_peak", "size": args.peak_size}, args.timeout)
        print(f"float32 matmul peak ({args.peak_size}^2): "
              f"{peak.get('gflops', 0):.1f} GFLOP/s {peak.get('error', '')}", file=sys.stderr)
    rows = []
    configs = list(itertools.product(args.num_vertices, modes, args.threads,
                                     args.inter_op_threads, jits, args.impl))
    for index, (num_vertices, mode, threads, inter_op_threads, jit, impl) in enumerate(configs, 1):
        config = dict(impl=impl, jit=jit, num_vertices=num_vertices, batch_size=args.batch_size,
                      num_layers=args.num_layers, mode=mode, threads=threads,
                      inter_op_threads=inter_op_threads)
        job = dict(config, kind="step", num_classes=args.num_classes, warmup=args.warmup,
                   repeats=args.repeats)
        start = time.perf_counter()
        result = _run_worker(job, args.timeout)
        row = dict(config, **result)
        num_edges = row.get("num_edges")
        if num_edges:
            row["gflop"] = count_flops(num_vertices, num_edges, args.batch_size,
                                       conv_channels(args.num_layers), args.num_classes, mode) / 1e9
        rows.append(row)
        print(f"[{index}/{len(configs)}] {impl} jit={jit} V={num_vertices} {mode} "
              f"threads={threads}:{inter_op_threads}: "
              f"{row.get('step_ms', float('nan')):.1f} ms {row.get('error', '')} "
              f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    rows = bench_report.add_derived_columns(rows, peak.get("gflops") if peak else None)
    print(bench_report.format_table(rows, sort=args.sort))
    metadata = bench_report.metadata(args, peak)
    paths = bench_report.write_results(rows, metadata, args.out)
    print("wrote " + ", ".join(paths), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
