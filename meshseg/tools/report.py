"""Compare the runs of a directory (one run or a Hydra sweep) from their event files.

Command line:

    python -m meshseg.tools.report multirun/<date>_<time> [--out DIR]

prints one row per run (impl, jit, loop, median step time with its interquartile range
and min-max in ms, compile time in s, peak memory in MiB, the last validation and test
accuracy and mean IoU, and its status: done, unfinished, or for a failed sweep job its exit
status and log), best first (`rank_records`: by validation accuracy when the runs have a
validation split, so the test split is never what chooses; by test accuracy otherwise, and
the ranking line says which), and writes `report.md` with that table and three PNG plots
into DIR (default: the given directory): `step_time_vs_accuracy.png`, `loss_curves.png`,
`step_time_box.png`.

Every number comes from the event files: `train/` (step_time_ms, compile_time_s, loss),
`validation/` and `eval/` (the test split: accuracy, mean_iou) and the run directory's own
file (peak_rss_mib, written by `meshseg.train.logs.hparams`); they agree with `summary.json`. Figures are drawn on
`matplotlib.figure.Figure` (the Agg canvas), never through pyplot's global state.

A directory that does not exist or holds no run, and an `--out` that is a file, end the
command with one line and exit status 2 (`meshseg.errors.ConfigError`), before TensorFlow
(which reads the event files) is imported and before anything is written.
"""

import argparse
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
from matplotlib.figure import Figure

from meshseg.cli import command, existing_dir, output_dir
from meshseg.console import start_tensorflow_quietly
from meshseg.errors import ConfigError
from meshseg.outputs import make_dirs, write_atomically, write_text
from meshseg.train.rundir.claim import SUMMARY_FILE
from meshseg.train.rundir.sweep import FAILED_FILE, failed_job
from meshseg.train.rundir.summary import load_run

PLOTS = ("step_time_vs_accuracy.png", "loss_curves.png", "step_time_box.png")


def find_runs(root: str) -> List[str]:
    """Sorted run directories under `root` (itself included): directories holding
    `summary.json`, a `train/` folder with event files, or a failed sweep job's record
    (`meshseg.train.rundir.sweep.FAILED_FILE`). Hidden folders are skipped."""
    runs = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        train_dir = os.path.join(directory, "train")
        has_events = os.path.isdir(train_dir) and any(
            "tfevents" in name for name in os.listdir(train_dir))
        if SUMMARY_FILE in files or FAILED_FILE in files or has_events:
            runs.append(directory)
    return sorted(runs)


def _last(scalars: Dict, tag: str) -> Optional[float]:
    return float(scalars[tag][1][-1]) if tag in scalars else None


def run_record(run_dir: str) -> Dict:
    """One run's comparison numbers, read from its event files.

    Returns:
      dict with run_dir; status ("done"; "failed (exit N): <its log>" for a failed sweep
      job, `meshseg.train.rundir.sweep.failed_job`; "unfinished" without summary.json); failed
      (bool); impl, jit, loop (from the run's settings and summary,
      `meshseg.train.rundir.summary.load_run`; "?" if missing); label
      ("impl loop jit=..."); step_times_ms float64 [N] (steps after compilation);
      median_step_ms, q1_step_ms, q3_step_ms, min_step_ms, max_step_ms (ms, None without
      steps); compile_s (sum of compile_time_s, s); peak_mib (MiB or None); loss (steps
      [N], values [N]); accuracy, mean_iou, baseline (the last test-split values or
      None); validation_accuracy, validation_mean_iou (the last validation values or None).
    """
    run = load_run(run_dir)
    from meshseg.train.logs.summaries import read_scalars  # TensorFlow: see the module docstring

    train, evaluation, validation = (read_scalars(os.path.join(run_dir, split))
                                     for split in ("train", "eval", "validation"))
    own = read_scalars(run_dir)
    times = train.get("step_time_ms", (None, np.zeros(0)))[1]
    quantiles = np.percentile(times, [0, 25, 50, 75, 100]) if times.size else [None] * 5
    record = {"impl": run.summary.impl if run.summary else "?",
              "jit": run.config.jit if run.config else "?",
              "loop": run.config.loop.name if run.config else "?"}
    failure = failed_job(run_dir)
    record.update(
        failed=failure is not None,
        status=(f"failed (exit {failure['exit_status']}): {failure['log']}" if failure
                else "done" if run.summary else "unfinished"),
        run_dir=run_dir, label=f"{record['impl']} {record['loop']} jit={record['jit']}",
        step_times_ms=times,
        **{f"{name}_step_ms": None if q is None else float(q)
           for name, q in zip(("min", "q1", "median", "q3", "max"), quantiles)},
        compile_s=float(np.sum(train["compile_time_s"][1])) if "compile_time_s" in train else 0.0,
        peak_mib=_last(own, "peak_rss_mib"),
        loss=train.get("loss", (np.zeros(0, np.int64), np.zeros(0))),
        accuracy=_last(evaluation, "accuracy"), mean_iou=_last(evaluation, "mean_iou"),
        baseline=_last(evaluation, "majority_baseline_accuracy"),
        validation_accuracy=_last(validation, "accuracy"),
        validation_mean_iou=_last(validation, "mean_iou"))
    return record


def checked_runs(root: str) -> List[str]:
    """The runs under `root` (`find_runs`), each with readable settings and summary
    (`meshseg.train.rundir.summary.load_run`); TensorFlow is not needed.

    Raises:
      ConfigError: if `root` holds no run, or a run's summary.json is not a meshseg run
        summary.
    """
    run_dirs = find_runs(root)
    if not run_dirs:
        raise ConfigError(f"{root} holds no run (summary.json or train/ events); give a run "
                          "directory or a sweep directory of runs")
    for run_dir in run_dirs:
        load_run(run_dir)
    return run_dirs


def load_records(root: str) -> List[Dict]:
    """`run_record` of every run under `root`; labels shared by several runs get the run
    directory's name appended.

    Raises:
      ConfigError: if `root` holds no run.
    """
    records = [run_record(run_dir) for run_dir in checked_runs(root)]
    labels = [r["label"] for r in records]
    for record in records:
        if labels.count(record["label"]) > 1:
            record["label"] += f" ({os.path.basename(os.path.normpath(record['run_dir']))})"
    return records


def rank_records(records: List[Dict]) -> Tuple[List[Dict], str]:
    """The records best first, and one line saying by what.

    Runs are ranked by validation accuracy when any of them has a validation split (runs
    without one come last), so a choice among them never reads the test split; otherwise by
    test accuracy, which the line then says. Runs without the metric keep their order, last.
    """
    by_validation = any(r["validation_accuracy"] is not None for r in records)
    key = "validation_accuracy" if by_validation else "accuracy"
    ranked = sorted(records, key=lambda r: (r[key] is None, -(r[key] or 0.0)))
    if by_validation:
        return ranked, "Runs ranked by validation accuracy, best first."
    return ranked, ("Runs ranked by TEST accuracy, best first (no run has a validation split: "
                    "choose settings on one, data.validation_meshes=N).")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(records: List[Dict]) -> str:
    """A Markdown table, one row per record in the given order (see the module docstring
    for the columns)."""
    header = ["run", "impl", "jit", "loop", "step ms (median)", "IQR", "min-max",
              "compile s", "peak MiB", "validation accuracy", "validation mIoU",
              "test accuracy", "test mIoU", "status"]
    rows = [header, ["---"] * len(header)]
    for r in records:
        rows.append([
            os.path.basename(os.path.normpath(r["run_dir"])), str(r["impl"]), str(r["jit"]),
            str(r["loop"]), _fmt(r["median_step_ms"], ".1f"),
            f"{_fmt(r['q1_step_ms'], '.1f')}-{_fmt(r['q3_step_ms'], '.1f')}",
            f"{_fmt(r['min_step_ms'], '.1f')}-{_fmt(r['max_step_ms'], '.1f')}",
            _fmt(r["compile_s"], ".2f"), _fmt(r["peak_mib"], ".0f"),
            _fmt(r["validation_accuracy"], ".4f"), _fmt(r["validation_mean_iou"], ".4f"),
            _fmt(r["accuracy"], ".4f"), _fmt(r["mean_iou"], ".4f"), r["status"]])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def plot_step_time_vs_accuracy(records: List[Dict]) -> Figure:
    """Scatter of median step time (ms, x) against the last validation accuracy (y) when
    any run has a validation split, else the last test accuracy (the axis says which), one
    labelled point per run with its interquartile range as a horizontal error bar."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    by_validation = any(r["validation_accuracy"] is not None for r in records)
    key = "validation_accuracy" if by_validation else "accuracy"
    for r in records:
        if r["median_step_ms"] is None or r[key] is None:
            continue
        error = [[r["median_step_ms"] - r["q1_step_ms"]], [r["q3_step_ms"] - r["median_step_ms"]]]
        ax.errorbar(r["median_step_ms"], r[key], xerr=error, fmt="o", capsize=3,
                    label=r["label"])
    ax.set(xlabel="median step time (ms); bars: interquartile range",
           ylabel="validation accuracy" if by_validation else "test accuracy",
           title="step time vs accuracy")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return fig


def plot_loss_curves(records: List[Dict]) -> Figure:
    """Training loss against step, one line per run (that logged a step)."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for r in records:
        if len(r["loss"][0]):
            ax.plot(*r["loss"], label=r["label"])
    ax.set(xlabel="step", ylabel="training loss", title="training loss")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return fig


def plot_step_time_box(records: List[Dict]) -> Figure:
    """Box plot of the per-step times (ms) of each run, compilation steps excluded."""
    fig = Figure(figsize=(max(5, 1.4 * len(records)), 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.boxplot([r["step_times_ms"] for r in records], tick_labels=[r["label"] for r in records])
    ax.tick_params(axis="x", labelrotation=30, labelsize="small")
    ax.set(ylabel="step time (ms)", title="step-time distribution")
    return fig


def write_report(root: str, out_dir: Optional[str] = None) -> Dict[str, str]:
    """Writes `report.md` and the `PLOTS` of the runs under `root` into `out_dir`
    (default `root`).

    Returns:
      {"table": the Markdown table and its ranking line (`rank_records`), "report":
      report.md path, <plot name>: its path}.

    Raises:
      ConfigError: from `load_records`, before anything is written.
      OutputError: if a file cannot be written, naming it (`meshseg.outputs`).
    """
    out_dir = out_dir or root
    records, ranking = rank_records(load_records(root))
    make_dirs(out_dir)
    table = f"{format_table(records)}\n\n{ranking}"
    figures = (plot_step_time_vs_accuracy, plot_loss_curves, plot_step_time_box)
    paths = {"table": table, "report": os.path.join(out_dir, "report.md")}
    for name, plot in zip(PLOTS, figures):
        paths[name] = write_atomically(os.path.join(out_dir, name),
                                       lambda path: plot(records).savefig(path, dpi=100))
    write_text(paths["report"], f"# Runs under `{root}`\n\n{table}\n\n"
               + "".join(f"![{name[:-4]}]({name})\n\n" for name in PLOTS))
    return paths


@command
def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point: prints the table and writes the report (exit status 2
    for a mistake in the arguments, see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="a run directory or a sweep directory of runs")
    parser.add_argument("--out", help="output directory (default: root)")
    args = parser.parse_args(argv)
    existing_dir("root", args.root)
    output_dir("--out", args.out or args.root)
    checked_runs(args.root)  # its mistakes end the command before TensorFlow starts
    start_tensorflow_quietly()
    paths = write_report(args.root, args.out)
    print(paths["table"])
    print(f"wrote {paths['report']} and {', '.join(PLOTS)}")


if __name__ == "__main__":
    main()
