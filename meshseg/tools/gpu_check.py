"""Check a GPU machine for meshseg and write one Markdown table to paste into an issue.

    python -m meshseg.tools.gpu_check --out gpu_check            # with a GPU, <= 10 min
    python -m meshseg.tools.gpu_check --smoke --out gpu_check    # CPU: tiny shapes, CI

In order: the device (GPU name, compute capability, what `precision=auto` picks, the
TensorFlow build's CUDA and cuDNN, the driver); per implementation, the ops of its train
step without a GPU kernel for their dtypes (`meshseg.train.device.gpu_kernels`, TensorFlow's
kernel registry) and, after one step on the device, the ops the runtime placed on the
host and the tensors copied between host and GPU (the step's partition graphs from
TensorFlow's run metadata); the benchmark (`meshseg.tools.bench`: train mode, every
implementation with and without XLA, the demo's shapes, batch 8 x 10,242 vertices, each
variant in its own process, with the GPU allocator's and the driver's peak memory); and
100 steps of the default run (`python train.py steps=100`, from a checkout). The table
goes to stdout and `<out>/gpu_check.md`.

`--smoke` runs the same code on tiny shapes (batch 1 x 642 vertices, one graph
convolution, one timed step, each variant in this process; 2 training steps of the
default run's data as positions only, on the demo network) so a machine without a GPU
checks the script itself; its figures mean nothing.
"""

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from meshseg.cli import command, output_dir
from meshseg.console import start_tensorflow_quietly
from meshseg.outputs import write_text
from meshseg.signals import run_child
from meshseg.tools.bench.device_memory import DeviceMemory, gpu_memory

# Partition-graph nodes that are plumbing, not ops of the step.
PLUMBING = frozenset({"_Arg", "_Retval", "_Send", "_Recv", "_HostSend", "_HostRecv", "NoOp"})
FULL = dict(num_vertices=10242, batch_size=8, num_layers=3, warmup=2, repeats=5,
            train_steps=100)
SMOKE = dict(num_vertices=642, batch_size=1, num_layers=1, warmup=0, repeats=1,
             train_steps=2)
# The smoke mode's training: the default run's data read as positions only, without the
# coarser levels (no heat kernel signatures, no decimation), on the demo network; the
# converted meshes cached under --out.
SMOKE_TRAIN_OVERRIDES = ("model=demo", "data.features=[xyz]", "data.levels=0",
                         "data.batch_size=2")


def device_lines() -> List[str]:
    """Markdown bullet lines: TensorFlow and its CUDA build, the GPUs with their compute
    capability and `precision=auto`'s choice, the NVIDIA driver (NVML)."""
    import tensorflow as tf

    from meshseg.train.device.precision import resolved_precision, visible_gpus

    build = tf.sysconfig.get_build_info()
    gpus = visible_gpus()
    lines = [f"- TensorFlow {tf.__version__}, built with CUDA {build.get('cuda_version', '-')}"
             f", cuDNN {build.get('cudnn_version', '-')}"]
    for gpu in gpus:
        capability = ".".join(map(str, gpu.compute_capability or ())) or "unknown"
        lines.append(f"- GPU: {gpu.name}, compute capability {capability}")
    if not gpus:
        lines.append("- GPU: none visible (CPU only)")
    precision, why = resolved_precision("auto", gpus)
    lines.append(f"- precision=auto: {precision} ({why})")
    lines.append(f"- NVIDIA driver: {driver_version() or '- (no NVML)'}")
    return lines


def driver_version() -> Optional[str]:
    """The NVIDIA driver's version through NVML (`nvidia-ml-py`), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # no nvidia-ml-py, no driver
        return None


def placement(run_metadata) -> Dict[str, int]:
    """From TensorFlow's `RunMetadata` of one step: "ops" (the step's ops, plumbing
    excluded), "host_ops" (those the runtime placed on a CPU while a GPU partition
    exists) and "copies" (send nodes between a CPU and a GPU: tensors crossing per step)."""
    ops, host, copies, gpu = 0, Counter(), 0, False
    for function in run_metadata.function_graphs:
        for partition in function.partition_graphs:
            for node in partition.node:
                gpu = gpu or "GPU" in node.device.upper()
                if node.op in ("_Send", "_HostSend"):
                    send, recv = (node.attr[k].s.decode().upper()
                                  for k in ("send_device", "recv_device"))
                    copies += ("GPU" in send) != ("GPU" in recv)
                if node.op in PLUMBING:
                    continue
                ops += 1
                if "CPU" in node.device.upper():
                    host[node.op] += 1
    return {"ops": ops, "host_ops": sum(host.values()) if gpu else None,
            "copies": copies if gpu else None,
            "host_op_types": ", ".join(sorted(host)) if gpu else ""}


def host_check(impl: str, sizes: Dict) -> Dict:
    """The registry's and the runtime's view of `impl`'s train step (no XLA): ops without
    a GPU kernel, and `placement` after one step."""
    import keras
    import tensorflow as tf
    from tensorflow.python.eager import context

    from meshseg.train.device.gpu_kernels import ops_without_gpu_kernel, step_graph_def
    from meshseg.train.loop.step import TrainStep
    from meshseg.tools.bench.worker import model_and_batch

    model, features, labels = model_and_batch(dict(
        model="demo", impl=impl, jit=False, precision="float32",
        num_vertices=sizes["num_vertices"], batch_size=sizes["batch_size"],
        num_layers=sizes["num_layers"], num_classes=16))
    step = TrainStep(model, keras.optimizers.Adam(1e-3), False, tf.distribute.get_strategy())
    missing = ops_without_gpu_kernel(step_graph_def(step, features, labels))
    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        float(step(features, labels)[0])
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    return dict(placement(metadata), no_gpu_kernel=len(missing),
                no_gpu_kernel_types=", ".join(m.op_type for m in missing))


def benchmark(impls: Sequence[str], sizes: Dict, smoke: bool, timeout: float,
              memory: Optional[DeviceMemory] = None) -> List[Dict]:
    """Train-mode rows of `meshseg.tools.bench` for impls x jit (false, true): each in its
    own process (`bench._run_worker`), or with `smoke` in this one (with this process'
    GPU `memory`, if any)."""
    from meshseg.tools.bench import command as bench
    from meshseg.tools.bench import report as bench_report
    from meshseg.tools.bench import worker as bench_worker

    rows = []
    for impl in impls:
        for jit in (False, True):
            job = dict(kind="step", model="demo", precision="float32", impl=impl, jit=jit,
                       mode="train", num_classes=16, threads=0, inter_op_threads=0,
                       overrides=[], **{k: sizes[k] for k in ("num_vertices", "batch_size",
                                                              "num_layers", "warmup",
                                                              "repeats")})
            if smoke:
                try:
                    result = bench_worker.measure(job, memory)
                except Exception as exc:  # reported in the row, as the benchmark does
                    result = {"error": bench_worker.first_line(exc)}
            else:
                result = bench._run_worker(job, timeout)
            rows.append(dict(job, **result))
    return bench_report.add_derived_columns(rows, {})


def train_default_run(steps: int, out: str, overrides: Sequence[str],
                      timeout: float) -> Dict:
    """`python train.py steps=<steps> <overrides>` of the checkout this package is in, in
    `<out>/train`; its summary.json as a dict, or {"error": ...}."""
    from meshseg.train.rundir.summary import RunSummary

    script = Path(__file__).resolve().parents[2] / "train.py"
    if not script.is_file():
        return {"error": f"no {script}: run the check from a meshseg checkout"}
    run_dir = os.path.abspath(os.path.join(out, "train"))
    command = [sys.executable, str(script), f"steps={steps}", f"eval_every={steps}",
               *overrides, f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    try:
        proc = run_child(command, timeout=timeout, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=script.parent)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    summary = RunSummary.load(run_dir)
    if proc.returncode != 0 or summary is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return {"error": f"exit {proc.returncode}: {lines[-1] if lines else 'no output'}"}
    return dict(dataclasses.asdict(summary), process_s=time.perf_counter() - start)


def _fmt(value, spec: str = "{:.1f}") -> str:
    return "-" if value is None else spec.format(value) if not isinstance(value, str) else value


def markdown(device: List[str], checks: Dict[str, Dict], rows: List[Dict], train: Dict,
             sizes: Dict, smoke: bool) -> str:
    """The report: device lines, one table (a row per implementation and jit), the
    training line."""
    title = "meshseg GPU check" + (" (smoke mode: tiny shapes, figures mean nothing)"
                                   if smoke else "")
    lines = [f"## {title}", "", *device, "",
             f"Train step of the demo network, batch {sizes['batch_size']} x "
             f"{sizes['num_vertices']:,} vertices, graph convolutions: {sizes['num_layers']}, "
             f"timed steps: {sizes['repeats']} (median) after {sizes['warmup']} warm-up.", "",
             "| impl | jit | ops | no GPU kernel | ops on host | host-GPU copies | step ms "
             "| compile s | GPU alloc peak MiB | GPU driver peak MiB | RSS increase MiB "
             "| error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        check = checks.get(row["impl"], {}) if not row["jit"] else {}
        no_kernel = check.get("no_gpu_kernel")
        if no_kernel:
            no_kernel = f"{no_kernel} ({check['no_gpu_kernel_types']})"
        host = check.get("host_ops")
        if host:
            host = f"{host} ({check['host_op_types']})"
        lines.append(
            f"| {row['impl']} | {'true' if row['jit'] else 'false'} "
            f"| {_fmt(check.get('ops'), '{}')} | {_fmt(no_kernel, '{}')} "
            f"| {_fmt(host, '{}')} | {_fmt(check.get('copies'), '{}')} "
            f"| {_fmt(row.get('step_ms'))} | {_fmt(row.get('compile_s'), '{:.2f}')} "
            f"| {_fmt(row.get('gpu_alloc_peak_mib'), '{:.0f}')} "
            f"| {_fmt(row.get('gpu_nvml_peak_mib'), '{:.0f}')} "
            f"| {_fmt(row.get('step_peak_increase_mib'), '{:.0f}')} "
            f"| {row.get('error', '')} |")
    lines.append("")
    what = "Default run" if not smoke else f"Smoke run ({' '.join(SMOKE_TRAIN_OVERRIDES)})"
    if "error" in train:
        lines.append(f"{what}, {sizes['train_steps']} steps: {train['error']}")
    else:
        lines.append(
            f"{what}, `python train.py steps={sizes['train_steps']}`: impl "
            f"{train['impl']}, median step {_fmt(train.get('median_step_time_ms'))} ms, "
            f"compile {_fmt(train.get('compile_time_s'))} s, wall "
            f"{_fmt(train.get('wall_time_s'), '{:.0f}')} s, test accuracy "
            f"{_fmt(train.get('eval_accuracy'), '{:.3f}')}, peak RSS "
            f"{_fmt(train.get('peak_rss_mib'), '{:.0f}')} MiB.")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    parser = argparse.ArgumentParser(
        prog="meshseg-gpu-check", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, in this process: checks the script on a CPU")
    parser.add_argument("--out", default="gpu_check", help="directory for gpu_check.md and "
                        "the training run")
    parser.add_argument("--train_overrides", nargs="*", default=[],
                        help="train.py overrides added to the default run's")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds per benchmark variant")
    parser.add_argument("--train_timeout", type=float, default=900,
                        help="seconds for the training, the data's first conversion included")
    return parser


@command
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the check; prints the Markdown table and writes it to `<out>/gpu_check.md`;
    returns 0. An `--out` that is a file ends the process with one line and exit status 2
    (`ConfigError`); a table that cannot be written (a full disk) with one line naming it
    and exit status 6 (`OutputError`, `meshseg.outputs`)."""
    args = build_parser().parse_args(argv)
    output_dir("--out", args.out)
    start_tensorflow_quietly()
    from meshseg.nn.ops import IMPLEMENTATIONS

    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # one retracing warning per model built, expected
    sizes = SMOKE if args.smoke else FULL
    memory = gpu_memory()  # memory growth on, before the first op
    device = device_lines()
    checks = {}
    for impl in IMPLEMENTATIONS:
        print(f"host check: {impl}", file=sys.stderr, flush=True)
        try:
            checks[impl] = host_check(impl, sizes)
        except Exception as exc:  # in the table, not raised: the other checks still run
            checks[impl] = {"no_gpu_kernel_types": f"{type(exc).__name__}: {exc}"}
    print("benchmark", file=sys.stderr, flush=True)
    rows = benchmark(list(IMPLEMENTATIONS), sizes, args.smoke, args.timeout, memory)
    print(f"training {sizes['train_steps']} steps", file=sys.stderr, flush=True)
    overrides = args.train_overrides
    if args.smoke:
        overrides = [*SMOKE_TRAIN_OVERRIDES,
                     f"data.cache_dir={os.path.abspath(os.path.join(args.out, 'data_cache'))}",
                     *overrides]
    train = train_default_run(sizes["train_steps"], args.out, overrides, args.train_timeout)
    report = markdown(device, checks, rows, train, sizes, args.smoke)
    print(report)
    write_text(os.path.join(args.out, "gpu_check.md"), report, "the check's table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
