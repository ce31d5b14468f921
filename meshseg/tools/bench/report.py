"""Output of `meshseg.tools.bench`: derived columns, the text table, CSV, JSON and a PNG plot.

A row is a dict with the configuration (model, precision, impl, jit, num_vertices (the
batch's padded V for the U-Net), batch_size, num_layers (demo), mode, threads and
inter_op_threads: 0 is TensorFlow's default), the worker's measurements (step_ms,
step_ms_min, step_ms_max in ms; compile_s in s; peak_rss_mib, step_peak_increase_mib,
rss_before_mib in MiB; gflop and gbyte, the step's work, `meshseg.tools.bench.roofline`) or its
`error`, and the columns added here. The peak RSS increases are measured from a reset of
the process' peak (see `meshseg.tools.bench.worker.measure`). With a GPU, a row also has
its allocator's and its driver's (NVML) peak device memory over the same span
(gpu_alloc_peak_mib, gpu_nvml_peak_mib; `meshseg.tools.bench.device_memory`); the table, CSV
and JSON have those columns only when some row has them, so a CPU's output is as before.
"""

import csv
import datetime
import io
import os
import platform
from typing import Dict, List, Optional, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from meshseg.outputs import write_atomically, write_json, write_text
from meshseg.tools.bench.roofline import Work, roofline_ms

REFERENCE_IMPL = "gather_sum"

# (row key, table header, format) in table order; every key is also a CSV column.
COLUMNS = [
    ("model", "model", "{}"), ("precision", "precision", "{}"),
    ("impl", "impl", "{}"), ("jit", "jit", "{}"), ("num_vertices", "V", "{}"),
    ("batch_size", "B", "{}"), ("num_layers", "layers", "{}"), ("mode", "mode", "{}"),
    ("threads", "intra", "{}"), ("inter_op_threads", "inter", "{}"),
    ("step_ms", "step_ms", "{:.1f}"), ("step_ms_min", "min", "{:.1f}"),
    ("step_ms_max", "max", "{:.1f}"), ("compile_s", "compile_s", "{:.2f}"),
    ("gflop_per_s", "GFLOP/s", "{:.1f}"), ("bound_ms", "bound_ms", "{:.1f}"),
    ("pct_roofline", "%roofline", "{:.1f}"),
    ("peak_rss_mib", "peak_rss_mib", "{:.0f}"),
    ("step_peak_increase_mib", "step_peak_inc_mib", "{:.0f}"),
    ("gpu_alloc_peak_mib", "gpu_alloc_peak_mib", "{:.0f}"),
    ("gpu_nvml_peak_mib", "gpu_nvml_peak_mib", "{:.0f}"),
    ("speedup", "speedup", "{:.2f}x"), ("speedup_vs_nojit_ref", "vs_ref_nojit", "{:.2f}x"),
    ("memory_ratio", "mem_ratio", "{:.2f}"), ("error", "error", "{}"),
]
TEXT_COLUMNS = ("model", "precision", "impl", "jit", "mode", "error")
GPU_COLUMNS = ("gpu_alloc_peak_mib", "gpu_nvml_peak_mib")  # only with a GPU
EXTRA_CSV_COLUMNS = ["gflop", "gbyte", "num_edges", "rss_before_mib", "peak_reset"]
SIZE_KEYS = ("model", "precision", "num_vertices", "batch_size", "num_layers", "mode",
             "threads", "inter_op_threads")


def add_derived_columns(rows: List[Dict], peaks: Dict[str, Dict]) -> List[Dict]:
    """Adds throughput, the roofline and the comparisons with the reference implementation.

    `peaks`: per precision, the worker's {"gflops": matmul peak in GFLOP/s,
    "bandwidth_gbs": memory bandwidth in GB/s} (or {"error": ...}; missing: not measured).
    gflop_per_s = gflop / step time; bound_ms = `meshseg.tools.bench.roofline.roofline_ms` of the
    row's work at its precision's peaks; pct_roofline = 100 * bound_ms / step_ms;
    speedup = reference step_ms / step_ms with the reference at the same model, precision,
    jit, size, layers and mode; speedup_vs_nojit_ref the same against the reference with
    jit=false;
    memory_ratio = `memory_key(row)` / the reference's at the same jit (lower is better). A
    value is None where either side failed.
    """
    def find(impl, jit, row):
        for other in rows:
            if (other["impl"] == impl and other["jit"] == jit and "error" not in other
                    and all(other.get(k) == row.get(k) for k in SIZE_KEYS)):
                return other
        return None

    for row in rows:
        ok = "error" not in row
        row["gflop_per_s"] = row["gflop"] / (row["step_ms"] / 1e3) if ok and row.get("gflop") else None
        peak = peaks.get(row.get("precision", "float32")) or {}
        measured = ok and row.get("gflop") and peak.get("gflops") and peak.get("bandwidth_gbs")
        row["bound_ms"] = (roofline_ms(Work(row["gflop"] * 1e9, row.get("gbyte", 0) * 1e9),
                                       peak["gflops"], peak["bandwidth_gbs"])
                           if measured else None)
        row["pct_roofline"] = 100 * row["bound_ms"] / row["step_ms"] if measured else None
        same = find(REFERENCE_IMPL, row["jit"], row) if ok else None
        nojit = find(REFERENCE_IMPL, False, row) if ok else None
        row["speedup"] = same["step_ms"] / row["step_ms"] if same else None
        row["speedup_vs_nojit_ref"] = nojit["step_ms"] / row["step_ms"] if nojit else None
        key = memory_key(row)
        mine, theirs = row.get(key), same and same.get(key)
        row["memory_ratio"] = mine / theirs if mine is not None and theirs else None
    return rows


def memory_key(row: Dict) -> str:
    """The row's step memory: its GPU allocator's peak where measured, else its peak RSS
    increase (a CPU)."""
    return "gpu_alloc_peak_mib" if row.get("gpu_alloc_peak_mib") is not None else \
        "step_peak_increase_mib"


def present_columns(rows: Sequence[Dict]) -> List[tuple]:
    """`COLUMNS` without the GPU ones when no row has a GPU figure, and without error when
    no row failed."""
    def shown(key):
        if key in GPU_COLUMNS:
            return any(r.get(key) is not None for r in rows)
        return key != "error" or any("error" in r for r in rows)

    return [column for column in COLUMNS if shown(column[0])]


def _cell(row: Dict, key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    if key == "jit":
        return "true" if value else "false"
    text = fmt.format(value)
    return text if key != "error" or len(text) <= 70 else text[:67] + "..."


def _sort_key(key: str):
    key = next((k for k, header, _ in COLUMNS if key in (k, header)), key)

    def sort_key(row):
        value = row.get(key)
        return (value is None, value if value is not None else 0)

    return sort_key


def format_table(rows: List[Dict], sort: Optional[str] = None) -> str:
    """Plain aligned text, one line per row; `sort` is a column key or header."""
    if sort:
        rows = sorted(rows, key=_sort_key(sort))
    columns = present_columns(rows)
    cells = [[h for _, h, _ in columns]] + [[_cell(r, k, f) for k, _, f in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    left = [k in TEXT_COLUMNS for k, _, _ in columns]
    lines = ["  ".join(c.ljust(w) if is_left else c.rjust(w)
                       for c, w, is_left in zip(line, widths, left)).rstrip()
             for line in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def metadata(args, peaks: Dict[str, Dict]) -> Dict:
    """Run metadata for the JSON file and the CSV header comment: per precision, the matmul
    peak (GFLOP/s) and memory bandwidth (GB/s) measured."""
    import tensorflow as tf

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "tensorflow_version": tf.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "load_average": list(os.getloadavg()),
        "matmul_peak_gflops": {p: peak.get("gflops") for p, peak in peaks.items()},
        "bandwidth_gbs": {p: peak.get("bandwidth_gbs") for p, peak in peaks.items()},
        "matmul_peak_size": args.peak_size,
        "peak_errors": {p: peak["error"] for p, peak in peaks.items() if "error" in peak},
        "warmup": args.warmup, "repeats": args.repeats, "num_classes": args.num_classes,
        "reference_impl": REFERENCE_IMPL,
    }


def write_results(rows: List[Dict], meta: Dict, out_dir: str) -> List[str]:
    """Writes bench.csv, bench.json and bench.png under `out_dir`, each whole; returns the
    paths.

    Raises:
      OutputError: if a file cannot be written, naming it (`meshseg.outputs`).
    """
    keys = [k for k, _, _ in COLUMNS
            if k not in GPU_COLUMNS or any(r.get(k) is not None for r in rows)] + EXTRA_CSV_COLUMNS
    table = io.StringIO()
    for name, value in meta.items():
        table.write(f"# {name}: {value}\n")
    writer = csv.DictWriter(table, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    csv_path = write_text(os.path.join(out_dir, "bench.csv"), table.getvalue())
    json_path = write_json(os.path.join(out_dir, "bench.json"), {
        "metadata": meta, "rows": [{k: r.get(k) for k in keys} for r in rows]}, indent=2)
    png_path = write_atomically(os.path.join(out_dir, "bench.png"),
                                lambda path: plot(rows, path))
    return [csv_path, json_path, png_path]


def bench_figure(rows: Sequence[Dict]) -> Figure:
    """Bar charts of median step time (ms, log scale) and step peak memory (MiB: the GPU
    allocator's peak where measured, else the peak RSS increase), one bar
    per row, each labelled with its value. The time axis starts at half the fastest
    step, so every bar shows; the legend names the implementations that ran and the XLA
    hatching only when some row ran under XLA. Drawn on `matplotlib.figure.Figure` (the
    Agg canvas), never through pyplot's global state."""
    rows = sorted(rows, key=lambda r: tuple(str(r.get(k)) for k in SIZE_KEYS) + (r["jit"],))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    colors = {impl: f"C{i}" for i, impl in enumerate(impls)}
    labels = [f"{r['impl']}\n{'xla' if r['jit'] else 'no jit'}\n{r['mode']} V={r['num_vertices']}"
              + (f"\n{r['model']}" if r.get("model", "demo") != "demo" else "")
              + (f"\n{r['precision']}" if r.get("precision", "float32") != "float32" else "")
              + (f"\nthreads {r.get('threads', 0)}:{r.get('inter_op_threads', 0)}"
                 if r.get("threads") or r.get("inter_op_threads") else "")
              for r in rows]
    fig = Figure(figsize=(max(6, 1.1 * len(rows)), 8))
    axes = fig.subplots(2, 1, sharex=True)
    gpu = any(r.get("gpu_alloc_peak_mib") is not None for r in rows)
    memory = (("gpu_alloc_peak_mib", "GPU allocator peak [MiB]") if gpu
              else ("step_peak_increase_mib", "step peak RSS increase [MiB]"))
    for ax, key, ylabel, unit in [(axes[0], "step_ms", "median step time [ms]", "ms"),
                                  (axes[1], *memory, "MiB")]:
        for x, row in enumerate(rows):
            value = row.get(key)
            if value is None:
                ax.text(x, 0.5, "failed", rotation=90, ha="center", va="bottom",
                        transform=ax.get_xaxis_transform())
                continue
            ax.bar(x, value, color=colors[row["impl"]], hatch="//" if row["jit"] else None,
                   edgecolor="black", linewidth=0.5)
            ax.annotate(f"{value:.0f} {unit}", (x, value), ha="center", va="bottom", fontsize=7)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    times = [r["step_ms"] for r in rows if r.get("step_ms")]
    if times:
        axes[0].set_yscale("log")
        axes[0].set_ylim(min(times) / 2, max(times) * 2)
    axes[1].set_xticks(range(len(rows)), labels, fontsize=7)
    handles = [Rectangle((0, 0), 1, 1, color=colors[impl]) for impl in impls]
    names = list(impls)
    if any(r["jit"] for r in rows):
        handles.append(Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch="//"))
        names.append("jit (XLA)")
    axes[0].legend(handles, names, fontsize=8)
    axes[0].set_title(f"meshseg FeaStNet step, batch {rows[0]['batch_size']}"
                      if rows else "meshseg bench")
    fig.tight_layout()
    return fig


def plot(rows: Sequence[Dict], path: str) -> None:
    """Writes `bench_figure(rows)` as a PNG to `path`."""
    bench_figure(rows).savefig(path, dpi=100)
