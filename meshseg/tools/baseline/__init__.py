"""The per-vertex descriptor baseline: what a classifier with no convolution gets on a
data set's splits.

    python -m meshseg.tools.baseline [config overrides, as for train.py] [options]
    python -m meshseg.tools.baseline experiment=human_parts --features xyz,hks
    python -m meshseg.tools.baseline experiment=human_parts --features hks --out hks.json
    python -m meshseg.tools.baseline data=rna_250 --classifier mlp --max-train-vertices 500000
    python -m meshseg.tools.baseline data=rna_250 --features xyz --classifier nearest_mesh
    python -m meshseg.tools.baseline experiment=rna_full --features xyz --classifier nearest_mesh
    python -m meshseg.tools.baseline experiment=rna_full --features xyz --classifier nearest_mesh \
        --meshes 5
    python -m meshseg.tools.baseline experiment=rna_full data.validation_meshes=0 \
        --features xyz --classifier nearest_mesh

The overrides are composed into the `train` config exactly as `train.py` composes them, so
the baseline reads the same mesh folder, label files (`data.labels`, `data.label_offset`,
`data.num_classes`) and `train.txt` / `test.txt` splits as the run (`data.source` must be
`mesh_folder`). Which split is scored follows the run's rule (`eval.test`): with a
validation split (`data.validation_meshes`), the validation meshes, learning from the
training meshes without them, as a choosing run does; without one, the test split.
`--split test` scores the test split of a config with a validation split; `--split
validation` refuses a config without one. Each vertex gets the `--features` of its mesh (`meshseg.data.features.descriptors`):

- `xyz`: the position centred at the mesh's area-weighted centroid, the mesh scaled to
  unit area (3 channels; not `data.center` / `data.scale`), in the mesh's principal
  frame under `data.frame=pca` (as a run turns it; normals too);
- `hks`: the heat kernel signature at 16 log-spaced times in [0.01, 2] from 128 eigenpairs
  of the robust Laplacian, each channel as log minus its area-weighted mean (16 channels);
- `normals`: the area-weighted unit vertex normal (3 channels);
- `xyz_fourier`: sin and cos of that `xyz` at `data.fourier_octaves` octave frequencies,
  by the function a run uses (`meshseg.data.pipeline.positional`; 6 channels per octave; a run
  encodes its own `data.center` / `data.scale` positions, the same as these in the
  presets of `experiment=rna`).

Descriptors are cached per mesh in `--cache-dir` (default: `data.descriptor_cache`;
`meshseg.data.features.descriptor_cache`, shared with the converter), so a second run, or a
conversion of the same meshes with `data.features` hks, reads them back. A
classifier (`--classifier`: scikit-learn's HistGradientBoostingClassifier, or an
MLPClassifier on standardised features where trees are too slow for hundreds of classes)
is fitted on the training vertices (a seeded random subset of `--max-train-vertices`) and
scored on every vertex of the scored split with the run's own scoring
(`meshseg.train.loop.evaluate.scores`): per-vertex accuracy, mean IoU over the classes
present, and the majority baseline (always the most frequent training class, counted over
all training vertices). It prints those and a markdown results row; `--out` writes them
as JSON, `--predictions` writes each test mesh's predicted labels as `<stem>.txt` (minus
`data.label_offset`: the label files' convention).

`--classifier nearest_mesh` learns nothing: each test mesh takes the labels of the
training mesh closest to it in feature space (`NearestMeshTransfer`), vertex by vertex.
With `--features xyz` it is label transfer from a training mesh in the same coordinate
frame, and it shows how much a split's test meshes are near-copies of training meshes
(on `rna_250` most are: docs/results.md). `--meshes 5` takes each vertex's majority
class over the 5 closest training meshes instead: the consensus of the near-copies. It
also prints its scores on the test meshes that have no near-copy: the half farthest from
their nearest training mesh (`novel_half`, the median distance stated);
`--novel-split FILE` writes them as a split file, so a network is scored on the same
meshes with `python -m meshseg.tools.predict RUN --test-split --split-file FILE`.

A mistake ends with one line and its exit status (`meshseg.cli`): 2 for an override, option
or path, 4 for a mesh or label file that is missing or invalid (named).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from meshseg.cli import at_least, command, distinct_from_inputs, output_dir
from meshseg.config import data_root, train_config
from meshseg.console import shell_command, start_tensorflow_quietly
from meshseg.data.features.descriptor_cache import DESCRIPTORS
from meshseg.data.features.descriptor_cache import mesh_descriptors as cached_descriptors
from meshseg.data.mesh.meshfiles import file_sha256, load_geometry, load_label_file
from meshseg.data.mesh.validate import InvalidMeshError, validate_labels
from meshseg.data.records.prepare import mesh_folder
from meshseg.data.records.prepare import split_pairs as prepare_split_pairs
from meshseg.errors import ConfigError, DataError
from meshseg.outputs import write_atomically, write_json, write_text

from meshseg.tools.baseline.classifiers import *  # noqa: F401,F403
from meshseg.tools.baseline.features import *  # noqa: F401,F403
from meshseg.tools.baseline.features import (  # noqa: F401
    CLASSIFIERS, FEATURES, SCORED_SPLITS, SPLITS, scored_split)


def run_baseline(overrides: list[str], features: list[str], classifier: str,
                 max_train_vertices: int | None, max_iter: int, seed: int,
                 cache_dir: Path | None, predictions_dir: Path | None = None,
                 meshes: int = 1, out_file: Path | None = None, split: str = "auto") -> dict:
    """Fits the baseline on the training split of the composed config and scores it on the
    validation or test split, `scored_split(data, split)` (see the module docstring). Descriptors are cached in `cache_dir`, or in
    the config's `data.descriptor_cache` when None. `meshes`: the training meshes
    `nearest_mesh` takes a vote of (`NearestMeshTransfer`). The prediction files and
    `out_file` (the caller's JSON result) are checked, before anything is computed, not to
    be a mesh, label or split file the call reads (`meshseg.cli.distinct_from_inputs`).

    Returns:
      JSON-serialisable dict: `data` (name, root), `split` (the scored one), `features`,
      `classifier`, vertex and mesh counts (`scored_meshes`, `scored_vertices`), `accuracy`, `mean_iou`, `majority_baseline_accuracy`, and the seconds spent
      on descriptors, fitting and in all (`wall_s`).

    Raises:
      ConfigError, DataError: see `split_pairs`, `split_arrays`; ConfigError for
        `max_train_vertices` with `nearest_mesh` (it keeps whole meshes), or for an output
        that is an input.
    """
    if classifier == "nearest_mesh" and max_train_vertices is not None:
        raise ConfigError("--max-train-vertices: nearest_mesh keeps every training mesh whole")
    if classifier != "nearest_mesh" and meshes != 1:
        raise ConfigError(f"--meshes {meshes}: only nearest_mesh votes over training meshes")
    started = time.perf_counter()
    data = train_config(overrides).data
    cache_dir = cache_dir or (Path(data.descriptor_cache) if data.descriptor_cache else None)
    scored = scored_split(data, split)
    pairs = split_pairs(data)
    inputs = {str(path): kind for mesh_paths, label_paths in pairs.values()
              for kind, paths in (("label file", label_paths), ("mesh", mesh_paths))
              for path in paths}
    if predictions_dir is not None:
        distinct_from_inputs("--predictions", [str(predictions_dir / f"{path.stem}.txt")
                                               for path in pairs[scored][0]], inputs)
    if out_file is not None:
        distinct_from_inputs("--out", [str(out_file)], inputs)
    train_inputs, train_classes = split_arrays(*pairs["train"], features, data, cache_dir)
    test_inputs, test_classes = split_arrays(*pairs[scored], features, data, cache_dir)
    descriptor_s = time.perf_counter() - started
    inputs, classes = np.concatenate(train_inputs), np.concatenate(train_classes)
    if max_train_vertices is not None and max_train_vertices < len(classes):
        chosen = np.random.default_rng(seed).choice(len(classes), max_train_vertices,
                                                    replace=False)
        inputs, classes = inputs[chosen], classes[chosen]
    fit_started = time.perf_counter()
    if classifier == "nearest_mesh":
        model = NearestMeshTransfer(seed=seed, meshes=meshes)
        model.fit(train_inputs, train_classes)
    else:
        model = build_classifier(classifier, max_iter, seed)
        model.fit(inputs, classes)
    fit_s = time.perf_counter() - fit_started
    num_classes = data.num_classes
    confusion = np.zeros([num_classes, num_classes], np.int64)
    per_mesh, meshes_dir = [], data_root(data) / data.meshes
    for mesh_path, mesh_inputs, true in zip(pairs[scored][0], test_inputs, test_classes):
        predicted = model.predict(mesh_inputs).astype(np.int64)
        np.add.at(confusion, (true, predicted), 1)
        per_mesh.append({"mesh": Path(mesh_path).relative_to(meshes_dir).as_posix(),
                         "distance": getattr(model, "last_distance", None),
                         "true": true, "predicted": predicted})
        if predictions_dir is not None:
            write_atomically(str(predictions_dir / f"{mesh_path.stem}.txt"),
                             lambda path: np.savetxt(path, predicted - data.label_offset,
                                                     fmt="%d"), "the predicted labels")
    train_histogram = np.bincount(np.concatenate(train_classes), minlength=num_classes)
    start_tensorflow_quietly()
    from meshseg.train.loop.evaluate import scores
    novel = novel_half(per_mesh, num_classes, train_histogram) if classifier == "nearest_mesh" \
        else None
    return {"novel": novel, "data": data.name, "root": str(data.root), "split": scored,
            "features": features, "classifier": classifier, "meshes": meshes,
            "train_meshes": len(train_inputs), "scored_meshes": len(test_inputs),
            "train_vertices": len(classes), "all_train_vertices": int(train_histogram.sum()),
            "scored_vertices": int(confusion.sum()), "num_classes": num_classes,
            **scores(confusion, train_histogram), "descriptor_s": round(descriptor_s, 2),
            "fit_s": round(fit_s, 2), "wall_s": round(time.perf_counter() - started, 2)}


def novel_half(per_mesh: list[dict], num_classes: int, train_histogram: np.ndarray) -> dict:
    """The test meshes with no near-copy in training: the half farthest from their nearest
    training mesh (`NearestMeshTransfer.last_distance`; distances above the median), and
    the scores on them.

    Args:
      per_mesh: per test mesh, {"mesh": its split-file entry, "distance": float, "true":
        int [V], "predicted": int [V]}.

    Returns:
      {"cut": the median distance, "meshes": the far half's split-file entries (in
      test-split order), "accuracy", "mean_iou", "majority_baseline_accuracy" on them}.
    """
    from meshseg.train.loop.evaluate import scores

    cut = float(np.median([mesh["distance"] for mesh in per_mesh]))
    far = [mesh for mesh in per_mesh if mesh["distance"] > cut]
    confusion = np.zeros([num_classes, num_classes], np.int64)
    for mesh in far:
        np.add.at(confusion, (mesh["true"], mesh["predicted"]), 1)
    return {"cut": cut, "meshes": [mesh["mesh"] for mesh in far],
            **scores(confusion, train_histogram)}


def markdown_row(result: dict, command_line: str) -> str:
    """One row of a results table: data, features, classifier, training vertices used,
    accuracy, mean IoU, majority baseline, wall time (s), command."""
    classifier = result["classifier"]
    if result.get("meshes", 1) > 1:
        classifier += f", vote of {result['meshes']} meshes"
    return (f"| {result['data']} | {'+'.join(result['features'])} | {classifier} | "
            f"{result['train_vertices']} of {result['all_train_vertices']} | "
            f"{result['accuracy']:.3f} | {result['mean_iou']:.3f} | "
            f"{result['majority_baseline_accuracy']:.3f} | {result['wall_s']:.0f} | "
            f"`{command_line}` |")


def feature_list(text: str) -> list[str]:
    """argparse type: a comma-separated list of `FEATURES`, each at most once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in FEATURES]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"must be distinct names from {', '.join(FEATURES)}, comma-separated; got {text!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: train.py's overrides (positional) and the options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, as for train.py")
    parser.add_argument("--features", type=feature_list, default=["xyz", "hks"],
                        help=f"comma-separated, from {', '.join(FEATURES)} (default xyz,hks)")
    parser.add_argument("--classifier", choices=CLASSIFIERS, default=CLASSIFIERS[0])
    parser.add_argument("--max-train-vertices", type=at_least(1), default=None,
                        help="fit on a seeded random subset of this many training vertices")
    parser.add_argument("--max-iter", type=at_least(1), default=100,
                        help="boosting rounds (hist_gradient_boosting) or epochs (mlp)")
    parser.add_argument("--meshes", type=at_least(1), default=1,
                        help="nearest_mesh: a per-vertex vote of this many nearest training "
                             "meshes (default 1: copy the nearest)")
    parser.add_argument("--split", choices=SCORED_SPLITS, default="auto",
                        help="the split scored: auto is the validation split when the config "
                             "holds one out (data.validation_meshes), else the test split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None,
                        help="per-mesh descriptor cache (default: data.descriptor_cache)")
    parser.add_argument("--out", help="write the result as JSON to this file")
    parser.add_argument("--predictions", help="write <stem>.txt test predictions here")
    parser.add_argument("--novel-split", metavar="FILE",
                        help="nearest_mesh: write the far half of the test meshes (no near-copy "
                             "in training) as a split file, for predict --test-split "
                             "--split-file FILE")
    return parser


@command
def main(argv=None) -> None:
    """Command-line entry point: prints the scores and a markdown row (exit statuses: see
    the module docstring)."""
    args = build_parser().parse_intermixed_args(argv)
    if args.cache_dir:
        output_dir("--cache-dir", args.cache_dir)
    if args.out:
        output_dir("--out", args.out, folder=os.path.dirname(args.out) or ".")
        if os.path.isdir(args.out):
            raise ConfigError(f"--out {args.out}: is a folder, not a file")
    if args.predictions:
        output_dir("--predictions", args.predictions)
    if args.novel_split:
        if args.classifier != "nearest_mesh":
            raise ConfigError("--novel-split: only with --classifier nearest_mesh")
        output_dir("--novel-split", args.novel_split,
                   folder=os.path.dirname(args.novel_split) or ".")
    command_line = shell_command(["python", "-m", "meshseg.tools.baseline",
                                  *(sys.argv[1:] if argv is None else argv)])
    result = run_baseline(args.overrides, args.features, args.classifier,
                          args.max_train_vertices, args.max_iter, args.seed,
                          Path(args.cache_dir) if args.cache_dir else None,
                          Path(args.predictions) if args.predictions else None, args.meshes,
                          Path(args.out) if args.out else None, args.split)
    result["command"] = command_line
    print(f"{result['data']}: {result['split']} accuracy {result['accuracy']:.4f}, mean IoU "
          f"{result['mean_iou']:.4f}, majority baseline "
          f"{result['majority_baseline_accuracy']:.4f} ({'+'.join(args.features)}, "
          f"{args.classifier} on {result['train_vertices']} training vertices, "
          f"{result['wall_s']:.0f} s)")
    print(markdown_row(result, command_line))
    novel = result.pop("novel")
    if novel is not None:
        print(f"the {len(novel['meshes'])} {result['split']} meshes farther than {novel['cut']:.4f} (the "
              f"median) from their nearest training mesh: accuracy {novel['accuracy']:.4f}, "
              f"mean IoU {novel['mean_iou']:.4f}")
        if args.novel_split:
            write_text(args.novel_split, "".join(f"{mesh}\n" for mesh in novel["meshes"]),
                       "the novel split")
            print(f"wrote {args.novel_split}")
        result["novel"] = novel
    if args.out:
        write_json(args.out, result, indent=2)
