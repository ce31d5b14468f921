"""Ship a trained run as a pretrained model: `predict --pretrained NAME` then runs it.

Command line (a maintainer's step, after a benchmark run):

    python -m meshseg.tools.pretrained outputs/<run> --name rna \\
        [--sample data/rna_sample] [--max-mib 10]

copies the run's model.keras, run_config.yaml and summary.json (its test shards named
relative to the project root) into
`meshseg/pretrained/<name>/` (`meshseg.tools.predict.PRETRAINED_DIR`), predicts the
sample's test meshes (`<sample>/test.txt`, meshes in a subfolder such as `<sample>/ply`,
labels in `<sample>/labels`) with `meshseg.tools.predict.predict_files` and writes
`results.json`:
the run's results row (test and validation accuracy and mean IoU, steps, the command
that trained it) and the per-vertex accuracy on those sample meshes, pooled over their
vertices, which the tests reproduce from the shipped files. Every sample test mesh
must be a test mesh of the run's own split (never a training mesh of it).

A run without a finished model, a model above `--max-mib` (MiB), a sample test mesh
the run trained on, or a `meshseg/pretrained/` this user may not write end the command
with one line and exit status 2, and so does a `--name` that is not a plain folder name
(a path such as `../x` or `/abs/dir`, `.`, `..`, or a hidden name). The package is built aside and then put in place, so a
failure leaves an earlier package with that name as it was and no half-built one.
"""

import argparse
import copy
import dataclasses
import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from meshseg.cli import command, distinct_from_inputs, existing_dir, output_dir
from meshseg.console import shell_command, start_tensorflow_quietly
from meshseg.data.mesh.foreign import list_file_lines, read_yaml
from meshseg.data.mesh.meshfiles import load_label_file
from meshseg.errors import ConfigError
from meshseg.outputs import make_dirs, replace_dir, temporary_dir, write_atomically, write_json
from meshseg.config import TrainConfig, load_run_config, save_run_config, train_config
from meshseg.tools.predict import PRETRAINED_DIR, predict_files
from meshseg.train.rundir.claim import MODEL_FILE, RUN_CONFIG, SUMMARY_FILE
from meshseg.train.rundir.summary import RunSummary

RESULTS_FILE = "results.json"
SHIPPED_FILES = (MODEL_FILE, RUN_CONFIG, SUMMARY_FILE)


def sample_meshes(sample: Path) -> List[Path]:
    """The mesh files of `<sample>/test.txt` (one file name per line, each in a subfolder
    of `sample` such as `ply/` or `off/`).

    Raises:
      ConfigError: naming a listed mesh no subfolder holds.
    """
    meshes = []
    for name in " ".join(list_file_lines(sample / "test.txt")).split():
        found = sorted(sample.glob(f"*/{name}"))
        if not found:
            raise ConfigError(f"{sample / 'test.txt'}: {name} is in no subfolder of {sample}")
        meshes.append(found[0])
    return meshes


def check_held_out(run_dir: str, config: TrainConfig, meshes: List[Path]) -> None:
    """Refuses sample meshes the run trained on: each stem must not be listed in the run's
    training split file (`data.root` / `data.train_split` of its settings `config`), when
    the run has one.

    Raises:
      ConfigError: naming the meshes found in the training split.
    """
    split = Path(config.data.root) / config.data.train_split if config.data.root else None
    if split is None or not split.is_file():
        return
    trained = {Path(name).stem for name in " ".join(list_file_lines(split)).split()}
    seen = sorted(mesh.stem for mesh in meshes if mesh.stem in trained)
    if seen:
        raise ConfigError(f"sample test meshes {', '.join(seen)} are training meshes of "
                          f"{run_dir} ({split}); choose held-out meshes")


def sample_accuracy(run_dir: str, sample: Path) -> Dict:
    """Per-vertex accuracy of the run on the sample's test meshes.

    Returns:
      {"meshes": {stem: {"vertices": V, "correct": n}}, "accuracy": pooled correct / all
      vertices (float)}.
    """
    meshes = sample_meshes(sample)
    with tempfile.TemporaryDirectory() as out:
        result = predict_files(run_dir, [str(m) for m in meshes], out,
                               labels_dir=str(sample / "labels"))
    if result.failures:
        raise ConfigError(f"sample meshes failed: {result.failures}")
    counts = {}
    for mesh in meshes:
        vertices = len(load_label_file(sample / "labels" / f"{mesh.stem}.txt"))
        counts[mesh.stem] = {"vertices": vertices,
                             "correct": round(result.accuracies[str(mesh)] * vertices)}
    correct = sum(c["correct"] for c in counts.values())
    return {"meshes": counts, "accuracy": correct / sum(c["vertices"] for c in counts.values())}


# Overrides that say where files are kept, not what is trained: left out of a shipped
# model's command, which then runs on any machine (the caches are rebuilt where the
# defaults put them).
PLACE_KEYS = ("data.cache_dir", "data.descriptor_cache")


def training_command(run_dir: str) -> str:
    """`python train.py <overrides>` as the run's `.hydra/overrides.yaml` records it,
    without Hydra's own overrides and the `PLACE_KEYS`.

    Raises:
      ConfigError: "<path> is not Hydra's list of a run's overrides (damaged: <why>)" for
        a file cut short, not UTF-8, not YAML or not a list of overrides.
    """
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    recorded = (read_yaml(path, "Hydra's list of a run's overrides", ConfigError,
                          (list, type(None))) or []) if path.exists() else []
    overrides = [str(o) for o in recorded if not str(o).startswith("hydra.")
                 and str(o).split("=", 1)[0].lstrip("+~") not in PLACE_KEYS]
    return shell_command(["python", "train.py", *overrides])


def shipped_config(trained: TrainConfig, command: str) -> TrainConfig:
    """The run's settings `trained` as shipped (a copy): every setting the run's, but the
    `PLACE_KEYS` as the shipped `command` composes them (where a user's checkout keeps
    the caches).

    Raises:
      ConfigError: from `train_config`.
    """
    config, composed = copy.deepcopy(trained), train_config(shlex.split(command)[2:])
    for key in PLACE_KEYS:
        section, name = key.split(".")
        setattr(getattr(config, section), name, getattr(getattr(composed, section), name))
    return config


def shipped_summary(summary: RunSummary, cache_dirs: tuple = ()) -> RunSummary:
    """The run's summary as shipped: its test shards named relative to the working
    directory (the project root, as the run's `data.cache_dir` is), not by the absolute
    paths of the machine that trained it, so `predict --pretrained NAME --test-split`
    finds them in a user's checkout once the preset's data is converted there. With
    `cache_dirs` = (the run's `data.cache_dir`, the shipped one), a shard in the run's
    cache folder is named in the shipped one (the shipped command converts it there).
    Other shards outside the working directory keep their paths."""
    test_files = list(summary.test_files)
    if cache_dirs and cache_dirs[0] and cache_dirs[1]:
        run_cache = os.path.abspath(cache_dirs[0])
        test_files = [os.path.join(cache_dirs[1], os.path.relpath(path, run_cache))
                      if os.path.abspath(path).startswith(run_cache + os.sep) else path
                      for path in test_files]
    summary = dataclasses.replace(summary, test_files=test_files)
    inside = [os.path.relpath(path) for path in summary.test_files]
    return dataclasses.replace(summary, test_files=[
        rel if not rel.startswith(os.pardir) else path
        for rel, path in zip(inside, summary.test_files)])


def check_name(name: str) -> str:
    """`name` if it is a plain folder name, the folder `meshseg/pretrained/<name>/` and
    nothing outside it: no path separator, not `.` or `..`, not hidden (a build folder
    is hidden), not empty.

    Raises:
      ConfigError: "--name <name>: not a plain folder name (...)".
    """
    separators = [sep for sep in (os.sep, os.altsep, "\0") if sep]
    if not name or any(sep in name for sep in separators) or name.startswith("."):
        raise ConfigError(f"--name {name!r}: not a plain folder name (a name such as rna: "
                          f"no path separator, not . or .., not hidden); the package is "
                          f"written to {PRETRAINED_DIR}/<name>")
    return name


def package(run_dir: str, name: str, sample: Path, max_mib: float = 10.0,
            into: Path = PRETRAINED_DIR) -> Path:
    """Copies the run into `into / name` (default: the package's shipped models) and
    writes its `results.json`.

    Returns:
      the folder written.

    Raises:
      ConfigError: no finished run, a model above `max_mib` MiB, a sample mesh the
        run trained on, a `name` that is not a plain folder name (`check_name`), or a
        target folder whose files are the run's own (packaging a
        shipped model onto itself; `meshseg.cli.distinct_from_inputs`).
    """
    check_name(name)
    summary = RunSummary.load(run_dir)
    model = Path(run_dir) / MODEL_FILE
    if summary is None or not model.is_file():
        raise ConfigError(f"{run_dir} holds no finished run with {MODEL_FILE}")
    mib = model.stat().st_size / 2**20
    if mib > max_mib:
        raise ConfigError(f"{model} is {mib:.1f} MiB, above --max-mib {max_mib:g}")
    target = into / name
    run_files = {os.path.join(folder, file): "run file"
                 for folder, _, files in os.walk(run_dir) for file in files}
    distinct_from_inputs("--name", [str(target / file) for file in
                                    (*SHIPPED_FILES, RESULTS_FILE)], run_files)
    trained = load_run_config(run_dir)
    check_held_out(run_dir, trained, sample_meshes(sample))
    command = training_command(run_dir)  # a damaged record is refused before any work
    # Built aside, then put in the place of an earlier package: a sample mesh that fails,
    # a full disk or a stop signal leaves no half-built package (`meshseg.outputs`).
    build = Path(temporary_dir(make_dirs(str(target.parent)), f".{target.name}.build-"))
    try:
        write_atomically(str(build / MODEL_FILE),
                         lambda path: shutil.copy(Path(run_dir) / MODEL_FILE, path))
        config = shipped_config(trained, command)
        write_atomically(str(build / RUN_CONFIG), lambda path: save_run_config(config, path),
                         "the run's settings")
        shipped_summary(summary, (trained.data.cache_dir,
                                  config.data.cache_dir)).save(str(build))
        results = {
            "command": command, "steps": summary.steps,
            "test_accuracy": summary.eval_accuracy, "test_mean_iou": summary.eval_mean_iou,
            "validation_accuracy": summary.validation_accuracy,
            "validation_mean_iou": summary.validation_mean_iou,
            "model_mib": round(mib, 2),
            "sample": {"folder": os.path.relpath(sample),
                       **sample_accuracy(str(build), sample)},
        }
        write_json(str(build / RESULTS_FILE), results, indent=2)
        replace_dir(str(build), str(target))
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return target


@command
def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished run directory (model.keras)")
    parser.add_argument("--name", required=True, help="the name predict --pretrained takes")
    parser.add_argument("--sample", default="data/rna_sample",
                        help="a folder with ply/ (or off/), labels/ and test.txt of held-out meshes")
    parser.add_argument("--max-mib", type=float, default=10.0, help="largest model (MiB)")
    args = parser.parse_args(argv)
    check_name(args.name)
    existing_dir("run_dir", args.run_dir)
    existing_dir("--sample", args.sample)
    output_dir("--name", str(PRETRAINED_DIR / args.name))
    start_tensorflow_quietly()
    target = package(args.run_dir, args.name, Path(args.sample), args.max_mib)
    results = json.loads((target / RESULTS_FILE).read_text())
    print(f"wrote {target}: test accuracy {results['test_accuracy']:.4f}, "
          f"sample accuracy {results['sample']['accuracy']:.4f}")


if __name__ == "__main__":
    main()
