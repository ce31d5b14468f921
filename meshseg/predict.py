"""Per-vertex predictions of a trained run on mesh files, and on the run's test split.

Features are built exactly as `meshseg.data.pipeline` builds them: the 1-ring adjacency
with self-edges (`mesh_edges`), its neighbour table (`table_from_edges`) and the run's
vertex normalisation (`normalize_vertices` with its `mean_center` / `unit_scale`).

Command line:

    python -m meshseg.predict outputs/<run> my/mesh.off other.ply --out predictions \\
        [--labels-dir my/labels --label-offset 0]

writes `<out>/<stem>.ply` (the mesh, vertices coloured by predicted class) and
`<out>/<stem>.txt` (one predicted label per line); with `--labels-dir`, it also prints
each mesh's per-vertex accuracy against `<labels-dir>/<stem>.txt`.
"""

import argparse
import json
import os
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf
import trimesh
from omegaconf import OmegaConf

import meshseg.model  # noqa: F401  (registers the custom classes for load_model)
from meshseg.data.sources import resolve_files
from meshseg.data.adjacency import mesh_edges
from meshseg.data.pipeline import normalize_vertices
from meshseg.data.records import parse_mesh_record
from meshseg.ops.neighbor_table import table_from_edges

# Keys of the run settings, read from summary.json or else the Hydra config's data group.
SETTING_KEYS = ("num_classes", "mean_center", "unit_scale", "batch_size", "test_files")


def run_settings(run_dir: str) -> Dict:
    """The data settings a run was trained with, needed to rebuild its inputs.

    Read from `summary.json` where it has the keys of `SETTING_KEYS`, else from
    `.hydra/config.yaml` (`data.*`; relative paths are resolved against the directory
    Hydra was launched from, `.hydra/hydra.yaml` `hydra.runtime.cwd`, and the bundled RNA
    sample is converted if its cache is missing).

    Returns:
      dict: num_classes (int K), mean_center and unit_scale (bool), batch_size (int),
      test_files (list of absolute TFRecord paths).

    Raises:
      FileNotFoundError: if neither source has every key.
    """
    summary = _read_json(os.path.join(run_dir, "summary.json"))
    if all(key in summary for key in SETTING_KEYS):
        settings = {key: summary[key] for key in SETTING_KEYS}
        if isinstance(settings["test_files"], str):
            settings["test_files"] = [settings["test_files"]]
        return settings
    config_path = os.path.join(run_dir, ".hydra", "config.yaml")
    if not os.path.exists(config_path):
        missing = [key for key in SETTING_KEYS if key not in summary]
        raise FileNotFoundError(f"{run_dir}: summary.json lacks {missing} and there is no "
                                ".hydra/config.yaml to read the data settings from")
    data = OmegaConf.load(config_path).data
    launch_dir = _launch_dir(run_dir)
    for key in ("root", "cache_dir", "train_files", "test_files"):
        if key in data and not os.path.isabs(str(data[key])):
            data[key] = os.path.join(launch_dir, str(data[key]))
    return {"num_classes": int(data.num_classes), "mean_center": bool(data.mean_center),
            "unit_scale": bool(data.unit_scale), "batch_size": int(data.batch_size),
            "test_files": resolve_files(data)["test"]}


def _read_json(path: str) -> Dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _launch_dir(run_dir: str) -> str:
    """The directory Hydra ran in (hydra.runtime.cwd), else the current directory."""
    hydra_path = os.path.join(run_dir, ".hydra", "hydra.yaml")
    if os.path.exists(hydra_path):
        cwd = OmegaConf.select(OmegaConf.load(hydra_path), "hydra.runtime.cwd")
        if cwd:
            return str(cwd)
    return os.getcwd()


def load_model(run_dir: str) -> keras.Model:
    """The trained `MeshSegmentationNet` of `<run_dir>/model.keras`."""
    return keras.models.load_model(os.path.join(run_dir, "model.keras"), compile=False)


def mesh_features(vertices: np.ndarray, triangles: np.ndarray, mean_center: bool,
                  unit_scale: bool) -> Dict[str, tf.Tensor]:
    """The model inputs of one mesh, a batch of one, as `meshseg.data.pipeline` builds them.

    Args:
      vertices: float [V, 3] vertex positions (cast to float32 before normalising).
      triangles: int [T, 3] vertex indices.
      mean_center, unit_scale: the run's normalisation (see `normalize_vertices`).

    Returns:
      dict of "vertices" float32 [1, V, 3], "num_vertices" int32 [1], "edges" int32
      [1, E, 2], "edge_weights" float32 [1, E], "num_edges" int32 [1], "neighbors" int32
      [1, V, K], "neighbor_weights" float32 [1, V, K].

    Raises:
      ValueError: from `mesh_edges`, if a triangle references a vertex outside [0, V).
    """
    vertices = tf.constant(np.asarray(vertices, np.float32))
    num_vertices = int(vertices.shape[0])
    edges, edge_weights = mesh_edges(np.asarray(triangles), num_vertices)
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], edge_weights, num_vertices)
    features = {
        "vertices": normalize_vertices(vertices, mean_center, unit_scale),
        "num_vertices": tf.constant(num_vertices, tf.int32),
        "edges": tf.constant(edges), "edge_weights": tf.constant(edge_weights),
        "num_edges": tf.constant(len(edges), tf.int32),
        "neighbors": table.neighbors, "neighbor_weights": table.weights,
    }
    return {key: value[tf.newaxis] for key, value in features.items()}


def predict_labels(model: keras.Model, vertices: np.ndarray, triangles: np.ndarray,
                   mean_center: bool, unit_scale: bool) -> np.ndarray:
    """int32 [V] predicted class of every vertex of one mesh (argmax of the logits)."""
    logits = model(mesh_features(vertices, triangles, mean_center, unit_scale), training=False)
    return np.argmax(np.asarray(logits)[0], axis=-1).astype(np.int32)


def read_meshes(files: List[str]) -> Iterator[Dict[str, np.ndarray]]:
    """Yields the meshes of TFRecord shards in file order: vertices float32 [V, 3],
    triangles int32 [T, 3], labels int32 [V]."""
    for path in files:
        for serialized in tf.data.TFRecordDataset(path):
            mesh = parse_mesh_record(serialized, source=path)
            yield {key: mesh[key].numpy() for key in ("vertices", "triangles", "labels")}


def evaluate_test_split(run_dir: str, keep_meshes: int = 3) -> Dict:
    """Predicts every mesh of a run's test split, one mesh at a time.

    Returns:
      dict with accuracy (fraction of test vertices predicted right; equals the run's
      eval accuracy), confusion (int64 [K, K], rows true class, columns predicted),
      num_meshes, and meshes: the first `keep_meshes` meshes as dicts of vertices
      float32 [V, 3], triangles int32 [T, 3], labels and predictions int32 [V].
    """
    settings = run_settings(run_dir)
    model = load_model(run_dir)
    num_classes = settings["num_classes"]
    confusion = np.zeros((num_classes, num_classes), np.int64)
    meshes = []
    count = -1
    for count, mesh in enumerate(read_meshes(settings["test_files"])):
        predictions = predict_labels(model, mesh["vertices"], mesh["triangles"],
                                     settings["mean_center"], settings["unit_scale"])
        np.add.at(confusion, (mesh["labels"], predictions), 1)
        if count < keep_meshes:
            meshes.append({**mesh, "predictions": predictions})
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
            "confusion": confusion, "num_meshes": count + 1, "meshes": meshes}


def label_colors(labels: np.ndarray) -> np.ndarray:
    """uint8 [V, 4] RGBA colour of each label: matplotlib's tab20 palette, cycled."""
    from matplotlib import colormaps

    palette = (np.asarray(colormaps["tab20"].colors) * 255).round().astype(np.uint8)
    rgb = palette[np.asarray(labels) % len(palette)]
    return np.concatenate([rgb, np.full((len(rgb), 1), 255, np.uint8)], axis=1)


def write_prediction(out_dir: str, stem: str, vertices: np.ndarray, triangles: np.ndarray,
                     labels: np.ndarray) -> Tuple[str, str]:
    """Writes `<stem>.ply` (vertices coloured by `label_colors`) and `<stem>.txt` (one
    label per line) into `out_dir` (created if missing); returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    ply_path, txt_path = (os.path.join(out_dir, stem + ext) for ext in (".ply", ".txt"))
    mesh = trimesh.Trimesh(vertices, triangles, vertex_colors=label_colors(labels),
                           process=False)
    mesh.export(ply_path)
    np.savetxt(txt_path, labels, fmt="%d")
    return ply_path, txt_path


def predict_files(run_dir: str, mesh_paths: List[str], out_dir: str,
                  labels_dir: Optional[str] = None, label_offset: int = 0) -> Dict[str, float]:
    """Predicts and writes every mesh of `mesh_paths` (see the module docstring).

    Written labels are predicted classes - `label_offset`, i.e. in the label files'
    convention. With `labels_dir`, `<labels_dir>/<stem>.txt` + `label_offset` are the true
    classes.

    Returns:
      {mesh path: per-vertex accuracy} for the meshes with label files (empty without
      `labels_dir`).

    Raises:
      ValueError: if a mesh is not triangular or its label count differs from its
        vertex count.
    """
    settings = run_settings(run_dir)
    model = load_model(run_dir)
    accuracies = {}
    for path in mesh_paths:
        mesh = trimesh.load(path, process=False, force="mesh")
        vertices, triangles = np.asarray(mesh.vertices), np.asarray(mesh.faces)
        if triangles.ndim != 2 or triangles.shape[1] != 3:
            raise ValueError(f"{path}: faces must be triangles, got shape {triangles.shape}")
        predictions = predict_labels(model, vertices, triangles, settings["mean_center"],
                                     settings["unit_scale"])
        write_prediction(out_dir, Path(path).stem, vertices, triangles,
                         predictions - label_offset)
        if labels_dir:
            labels = np.loadtxt(Path(labels_dir) / f"{Path(path).stem}.txt", np.int64, ndmin=1)
            if len(labels) != len(predictions):
                raise ValueError(f"{path}: {len(labels)} labels for {len(predictions)} vertices")
            accuracies[path] = float(np.mean(labels + label_offset == predictions))
    return accuracies


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run directory with model.keras")
    parser.add_argument("meshes", nargs="+", help="mesh files trimesh reads (OFF, PLY, OBJ, ...)")
    parser.add_argument("--out", default="predictions", help="output directory")
    parser.add_argument("--labels-dir", help="folder of <stem>.txt true labels, one per vertex")
    parser.add_argument("--label-offset", type=int, default=0,
                        help="class = label + offset (1 for the RNA data's -1 = unlabelled)")
    args = parser.parse_args(argv)
    accuracies = predict_files(args.run_dir, args.meshes, args.out, args.labels_dir,
                               args.label_offset)
    print(f"wrote {len(args.meshes)} predictions to {args.out}")
    for path, accuracy in accuracies.items():
        print(f"{path}: accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
