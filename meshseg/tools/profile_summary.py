"""Where the time of the profiled training steps went, without opening TensorBoard.

    python -m meshseg.tools.profile_summary <run dir or TensorBoard logdir>

Reads the newest profile under the folder (`plugins/profile/<timestamp>/*.xplane.pb`, as
`python train.py profile=true` writes it to `<run dir>/train`) through xprof's own
converters (`xprof.convert.raw_to_tool_data`: the `framework_op_stats` tool for the ops,
`input_pipeline_analyzer` for the steps) and prints:

- the profiled steps: how many, their mean wall time and how much of it the loop waited
  for its next batch;
- the self time of the profile's ops by `CATEGORIES`, in ms per step and % of all of it;
- the top ops by self time.

Self time is summed over every host thread (TensorFlow's inter-op threads and tf.data's
run side by side), so ms per step can add up to more than the step's wall time; the
percentages are shares of that sum. The input is counted as the time the loop spent
getting its batch: the whole time of tf.data's root iterator (`Iterator::Root`, the
loop's GetNext, on the loop's thread, waits included). The pipeline's own stages
(`Iterator::Root::...`) run on tf.data's threads, overlapped with the step, and their
self time is mostly waiting for each other; it is printed on a line of its own and left
out of the table. Under `jit=true` the step is one XLA cluster and most of it counts as
"other".

A folder that does not exist, or holds no profile, ends the command with one line and exit
status 2; a profile that cannot be read with status 4. xprof is imported only after that.
"""

import argparse
import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from meshseg.cli import at_least, command, existing_dir
from meshseg.errors import ConfigError, DataError

PROFILE_GLOB = os.path.join("plugins", "profile", "*", "*.xplane.pb")
# (name, what it holds), in the order a profile's op is matched; the first match counts.
# The step's parts are the `tf.name_scope`s of `meshseg.train.loop.step.TrainStep`; an op of a
# registered gradient is named `gradient_tape/<its forward op>` and counts with it.
CATEGORIES = (
    ("input", "the loop's wait for its batch (tf.data's Iterator::Root)"),
    ("conv", "feature-steered convolutions (layers feast*), forward + gradient"),
    ("classifier", "the logits' 1x1 conv (layer lin_out), forward + gradient"),
    ("layers", "the network's other layers and ops (lin_in, lin_hidden, ReLUs, ...)"),
    ("loss", "masked cross-entropy + gradient (scope loss; Keras: compile_loss)"),
    ("backward", "gradient ops without a layer name: custom gradients, gradient sums"),
    ("guard", "the check that loss and gradients are finite (scope guard)"),
    ("metrics", "the correct-vertex count (scope metrics)"),
    ("update", "the optimizer's update (scope update; Keras: adam, adamw)"),
    ("other", "the rest: ops of tf.data's map functions, vertex counts, summaries, ..."),
)
# Keras names a layer's ops after the layer, with "_<n>" appended when a name repeats. Any
# scope that starts with "feast" counts as conv: the FeaSt layers (feast_<channels>, the
# U-Net blocks' feast) and any scope a FeaSt implementation opens in its own gradient.
CONV_LAYER = re.compile(r"feast")  # FeatureSteeredConvolution (meshseg.nn)
CLASSIFIER_LAYER = re.compile(r"lin_out(_\d+)*$")
NETWORK = re.compile(r"(mesh_segmentation_net|fea_st_u_net)(_\d+)*$")  # the two networks
# The outermost scope of an op -> its category: TrainStep's scopes (loop=custom), and under
# loop=keras Keras' own (its compiled loss, the optimizer's name) and the network's.
STEP_SCOPES = {"forward": "layers", "loss": "loss", "backward": "backward", "guard": "guard",
               "metrics": "metrics", "update": "update", "compile_loss": "loss",
               "adam": "update", "adamw": "update", "loss_scale_optimizer": "update"}
# Scopes that say nothing of the op: a tf.function called from another, the tape's prefix.
WRAPPERS = ("StatefulPartitionedCall", "PartitionedCall", "gradient_tape")


@dataclass(frozen=True)
class OpTime:
    """One row of xprof's framework_op_stats: an op (by name) and its self time in µs (for
    the root iterator, its whole time)."""

    name: str
    type: str
    occurrences: int
    self_us: float


def category(op: OpTime) -> str:
    """The `CATEGORIES` name of `op`, from its name's scopes and its type."""
    if op.type == "Dataset" or op.name.startswith("Iterator::") or "IteratorGetNext" in op.type:
        return "input"
    scopes = op.name.split("/")
    if any(CONV_LAYER.match(scope) for scope in scopes):
        return "conv"
    if any(CLASSIFIER_LAYER.match(scope) for scope in scopes):
        return "classifier"
    outer = [scope for scope in scopes[:-1] if scope not in WRAPPERS][:1]
    if not outer:
        return "other"
    return "layers" if NETWORK.match(outer[0]) else STEP_SCOPES.get(outer[0], "other")


def newest_profile(folder: str) -> List[str]:
    """The `.xplane.pb` files (one per host) of the newest profile in or under `folder`
    (in `plugins/profile/` of `folder` or of any folder below it).

    Raises:
      ConfigError: if there is none.
    """
    found = glob.glob(os.path.join(glob.escape(folder), PROFILE_GLOB))
    found += glob.glob(os.path.join(glob.escape(folder), "**", PROFILE_GLOB), recursive=True)
    if not found:
        raise ConfigError(f"{folder}: no profile (plugins/profile/*/*.xplane.pb) in it; "
                          "write one with python train.py profile=true")
    # A profile's folder is named by its start time (2026_11_30_19_02_41); not by mtime,
    # since reading a profile with xprof writes a cache file into its folder.
    newest = max({os.path.dirname(path) for path in found},
                 key=lambda session: (os.path.basename(session), session))
    return sorted(path for path in set(found) if os.path.dirname(path) == newest)


def _tool(paths: Sequence[str], tool: str):
    """xprof's `tool` on the profile `paths`, parsed from its JSON (DataTable tables)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # xprof's native log lines
    from xprof.convert import raw_to_tool_data

    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data(list(paths), tool,
                                                       {"use_saved_result": False})
        if not data:
            raise ValueError("empty result")
        return json.loads(data)
    except (ValueError, RuntimeError) as error:
        raise DataError(f"{paths[0]}: xprof cannot read this profile ({tool}: "
                        f"{str(error).splitlines()[0] if str(error) else 'no data'})") from None


def _rows(table: Dict) -> List[Dict]:
    """The rows of a DataTable as {column id: value}."""
    columns = [column["id"] for column in table["cols"]]
    return [dict(zip(columns, (cell.get("v") if cell else None for cell in row["c"])))
            for row in table.get("rows", [])]


def op_times(paths: Sequence[str]) -> Tuple[List[OpTime], float]:
    """The host ops of the profile with their self time, idle time left out, and the self
    time (µs) of the tf.data pipeline's stages, which are left out of the ops.

    The root iterator (`Iterator::Root`) is counted with its whole time: it is the loop's
    GetNext, and its stages' self time was spent on other threads.
    """
    tables = _tool(paths, "framework_op_stats")
    # xprof gives the table with the idle time first, then the same without it.
    ops, stages_us = [], 0.0
    for row in _rows(tables[-1] if isinstance(tables, list) else tables):
        if row["type"] == "IDLE":
            continue
        if row["type"] == "Dataset" and row["operation"] != "Iterator::Root":
            stages_us += float(row["total_self_time"] or 0.0)
            continue
        time_us = row["total_time" if row["type"] == "Dataset" else "total_self_time"]
        ops.append(OpTime(row["operation"], row["type"], int(row["occurrences"] or 0),
                          float(time_us or 0.0)))
    if not ops:
        raise DataError(f"{paths[0]}: the profile holds no op (was it stopped before its "
                        "first step ran?)")
    return ops, stages_us


def step_times(paths: Sequence[str]) -> List[Tuple[str, float, float]]:
    """(step, wall time ms, time waiting for input ms) of each step the profile marks
    (`tf.profiler.experimental.Trace("train", step_num=...)`); empty without markers."""
    tables = _tool(paths, "input_pipeline_analyzer")
    for table in tables if isinstance(tables, list) else [tables]:
        columns = {column["id"] for column in table.get("cols", [])}
        if {"stepnum", "stepTimeMs", "infeedTimeMs"} <= columns:
            return [(row["stepnum"], float(row["stepTimeMs"]), float(row["infeedTimeMs"]))
                    for row in _rows(table)]
    return []


def summarize(ops: Sequence[OpTime], num_steps: int) -> Dict[str, float]:
    """{category: self time in ms per step}, for every category (0.0 when it has no op)."""
    totals = {name: 0.0 for name, _ in CATEGORIES}
    for op in ops:
        totals[category(op)] += op.self_us / 1e3 / max(num_steps, 1)
    return totals


def format_report(paths: Sequence[str], ops: Sequence[OpTime], stages_us: float,
                  steps: Sequence[Tuple[str, float, float]], top: int = 15) -> str:
    """The printed summary: steps, the category table, the tf.data stages' self time
    (`stages_us`, left out of the table) and the top `top` ops."""
    num_steps = len(steps)
    totals = summarize(ops, num_steps)
    total = sum(totals.values())
    lines = [f"profile: {os.path.dirname(paths[0])} ({len(paths)} host file(s))"]
    if steps:
        mean_ms = sum(ms for _, ms, _ in steps) / num_steps
        input_ms = sum(ms for _, _, ms in steps) / num_steps
        lines.append(f"steps: {num_steps} ({', '.join(name for name, _, _ in steps)}), "
                     f"mean wall time {mean_ms:.1f} ms, of which {input_ms:.1f} ms waiting "
                     "for input")
    else:
        lines.append("steps: not marked in this profile; the times below are per profile, "
                     "not per step")
    per = "ms/step" if steps else "ms"
    lines += ["", f"{'category':<11} {per:>9} {'%':>6}  what it holds"]
    for name, meaning in CATEGORIES:
        lines.append(f"{name:<11} {totals[name]:>9.2f} {_percent(totals[name], total):>6.1f}  "
                     f"{meaning}")
    lines.append(f"{'total':<11} {total:>9.2f} {100.0:>6.1f}  the rows' sum")
    lines.append(f"(not in the table: tf.data's pipeline stages, on its own threads, "
                 f"{stages_us / 1e3 / max(num_steps, 1):.2f} {per} of self time, "
                 "mostly waiting)")
    lines += ["", f"top {top} ops by self time", f"{per:>9} {'%':>6}  {'category':<11} "
              f"{'type':<24} op"]
    for op in sorted(ops, key=lambda op: op.self_us, reverse=True)[:top]:
        ms = op.self_us / 1e3 / max(num_steps, 1)
        lines.append(f"{ms:>9.2f} {_percent(ms, total):>6.1f}  {category(op):<11} "
                     f"{op.type[:24]:<24} {op.name}")
    return "\n".join(lines)


def _percent(part: float, total: float) -> float:
    return 100 * part / total if total else 0.0


@command
def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point: prints the summary of the newest profile (exit statuses:
    see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a run directory, or a TensorBoard logdir holding "
                                       "plugins/profile/")
    parser.add_argument("--top", type=at_least(1), default=15, help="ops listed (default 15)")
    args = parser.parse_args(argv)
    paths = newest_profile(existing_dir("folder", args.folder))
    ops, stages_us = op_times(paths)
    print(format_report(paths, ops, stages_us, step_times(paths), args.top))


if __name__ == "__main__":
    main()
