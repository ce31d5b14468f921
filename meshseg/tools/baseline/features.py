"""The baseline's per-vertex features of a run's mesh-folder splits: the converter's
split files and descriptors, in the principal frame under `data.frame=pca`
(`meshseg.tools.baseline`)."""

from pathlib import Path

import numpy as np

from meshseg.config import data_root
from meshseg.console import start_tensorflow_quietly
from meshseg.data.records.prepare import mesh_folder
from meshseg.data.records.prepare import split_pairs as prepare_split_pairs
from meshseg.data.features.descriptor_cache import DESCRIPTORS
from meshseg.data.features.descriptor_cache import mesh_descriptors as cached_descriptors
from meshseg.data.mesh.meshfiles import file_sha256, load_geometry, load_label_file
from meshseg.data.mesh.validate import InvalidMeshError, validate_labels
from meshseg.errors import ConfigError, DataError


FEATURES = DESCRIPTORS + ("xyz_fourier",)
CLASSIFIERS = ("hist_gradient_boosting", "mlp", "nearest_mesh")
SPLITS = ("train", "test")
SCORED_SPLITS = ("auto", "validation", "test")


def scored_split(data, split: str) -> str:
    """"validation" or "test": the split `--split` (`SCORED_SPLITS`) scores for the composed
    `data` config; "auto" is the validation split when `data.validation_meshes` holds one
    out, as a choosing run scores (`eval.test=auto`), else the test split.

    Raises:
      ConfigError: for "validation" without `data.validation_meshes`.
    """
    if split == "validation" and not data.validation_meshes:
        raise ConfigError("--split validation: the config holds out no validation split; "
                          "add data.validation_meshes=N")
    if split == "auto":
        return "validation" if data.validation_meshes else "test"
    return split


def split_pairs(data) -> dict[str, tuple[list[Path], list[Path]]]:
    """{split: (mesh paths, label paths)} of the composed `data` config's mesh folder,
    resolved by the converter's own `meshseg.data.records.prepare.split_pairs` (its split files;
    with `data.validation_meshes`, the training split without the validation meshes, so
    the baseline learns from the network's training meshes, and the "validation" split).

    Raises:
      ConfigError: if `data.source` is not `mesh_folder`, `data.root` is not a folder, or
        a split lists no mesh.
      DataError: if a split file, a mesh or its label file is missing.
    """
    if data.source != "mesh_folder":
        raise ConfigError(f"data.source={data.source}: the baseline reads mesh files; choose "
                          "a data config with source mesh_folder")
    root = data_root(data)
    pairs = prepare_split_pairs(mesh_folder(data))
    for split in SPLITS:
        if not pairs[split][0]:
            raise ConfigError(f"{root / getattr(data, f'{split}_split')} lists no mesh")
    return pairs


def mesh_descriptors(mesh_path: Path, cache_dir: Path | None, frame: str = "none"
                     ) -> dict[str, np.ndarray]:
    """{"xyz", "hks", "normals"} of one mesh file (`meshseg.data.features.descriptor_cache`), read
    from `cache_dir` when computed before (by the baseline or the converter); with `frame`
    "pca" (`data.frame`), xyz and normals turned into the mesh's principal frame.

    Raises:
      DataError: naming the file, if the mesh is unreadable or invalid.
    """
    try:
        geometry = load_geometry(mesh_path)
        descriptors = cached_descriptors(geometry.vertices, geometry.triangles,
                                         file_sha256(mesh_path), cache_dir)
    except (InvalidMeshError, ValueError) as error:
        raise DataError(f"{mesh_path}: {error}") from error
    if frame == "pca":
        descriptors = in_principal_frame(descriptors, geometry.triangles)
    return descriptors


def in_principal_frame(descriptors: dict[str, np.ndarray], triangles: np.ndarray
                       ) -> dict[str, np.ndarray]:
    """`descriptors` with xyz and normals (float32 [V, 3]) turned into the principal frame
    of the mesh (int [T, 3] `triangles`), by the function a run uses
    (`meshseg.data.pipeline.principal_frame.to_principal_frame`)."""
    start_tensorflow_quietly()
    import tensorflow as tf

    from meshseg.data.pipeline.principal_frame import to_principal_frame, vertex_areas
    xyz = tf.constant(descriptors["xyz"], tf.float32)
    areas = vertex_areas(xyz, tf.constant(triangles, tf.int32))
    turned, normals = to_principal_frame(xyz, areas, tf.constant(descriptors["normals"],
                                                                 tf.float32))
    return {**descriptors, "xyz": turned.numpy(), "normals": normals.numpy()}


def fourier_features_np(xyz: np.ndarray, octaves: int) -> np.ndarray:
    """float32 [V, 6 * octaves] `meshseg.data.pipeline.positional.fourier_features` of float32
    [V, 3] xyz."""
    start_tensorflow_quietly()
    from meshseg.data.pipeline.positional import fourier_features
    return fourier_features(xyz, octaves).numpy()


def split_arrays(mesh_paths: list[Path], label_paths: list[Path], features: list[str],
                 data, cache_dir: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per mesh: the feature matrix float32 [V, C] (the `features` side by side, in order)
    and the classes int64 [V] (label file + `data.label_offset`).

    Raises:
      DataError: naming the file, for an invalid mesh or label file, or labels that do
        not fit the mesh or lie outside [0, data.num_classes).
    """
    inputs, classes = [], []
    for mesh_path, label_path in zip(mesh_paths, label_paths):
        descriptors = mesh_descriptors(mesh_path, cache_dir, data.frame)
        try:
            labels = load_label_file(label_path) + data.label_offset
            validate_labels(labels, len(descriptors["xyz"]), data.num_classes)
        except InvalidMeshError as error:
            raise DataError(f"{label_path}: {error}") from error
        if "xyz_fourier" in features:
            fourier = fourier_features_np(descriptors["xyz"], data.fourier_octaves)
            descriptors = {**descriptors, "xyz_fourier": fourier}
        inputs.append(np.concatenate([descriptors[name] for name in features], axis=1))
        classes.append(labels)
    return inputs, classes
