"""Shared fixtures of the data tests: a small hand-made mesh and record builders; the
suite's rules (the opt-in `slurm` marker, the ../shared/data skips) are the plugin
`helpers.suite_rules`."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers.meshes import write_labelled_mesh
from meshseg.data.records.convert import convert_split
from meshseg.data.records.schema import mesh_to_example

pytest_plugins = ["helpers.suite_rules"]


@pytest.fixture
def tetrahedron():
    """A tetrahedron (vertices 0-3) plus vertex 4, which no triangle references.

    Returns a dict with vertices float32 [5, 3], triangles int32 [4, 3] and
    labels int32 [5].
    """
    return {
        "vertices": np.array(
            [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [2, 2, 2]], np.float32
        ),
        "triangles": np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], np.int32),
        "labels": np.array([0, 1, 1, 2, 3], np.int32),
    }


@pytest.fixture
def demo_style_example():
    """Returns `build(vertices, triangles, labels, num_vertices=None) -> bytes`: a
    record built field by field as the tensorflow-graphics demo writes meshes,
    keeping the arrays' dtypes (so a test can also build wrong ones)."""

    def tensor_bytes(array):
        serialized = tf.io.serialize_tensor(array).numpy()
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[serialized]))

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def build(vertices, triangles, labels, num_vertices=None) -> bytes:
        feature = {
            "num_vertices": int64(len(vertices) if num_vertices is None else num_vertices),
            "num_triangles": int64(len(triangles)),
            "vertices": tensor_bytes(vertices),
            "triangles": tensor_bytes(triangles),
            "labels": tensor_bytes(labels),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        return example.SerializeToString()

    return build


@pytest.fixture
def write_records(tmp_path):
    """Returns `write(name, meshes) -> path`, writing meshes (dicts as from
    `tetrahedron`) as one TFRecord shard under tmp_path."""

    def write(name: str, meshes: list[dict]) -> str:
        path = str(Path(tmp_path) / name)
        with tf.io.TFRecordWriter(path) as writer:
            for mesh in meshes:
                writer.write(
                    mesh_to_example(mesh["vertices"], mesh["triangles"], mesh["labels"])
                )
        return path

    return write


def _octant_mesh(subdivisions: int, seed: int) -> dict:
    """A randomly stretched icosphere labelled by the axis and sign of each vertex's largest
    coordinate (6 classes), so the labels are learnable from positions."""
    import trimesh

    rng = np.random.default_rng(seed)
    sphere = trimesh.creation.icosphere(subdivisions=subdivisions)
    vertices = np.asarray(sphere.vertices) * rng.uniform(0.5, 2.0, size=3)
    axis = np.argmax(np.abs(vertices), axis=1)
    positive = vertices[np.arange(len(vertices)), axis] > 0
    return {
        "vertices": vertices.astype(np.float32),
        "triangles": np.asarray(sphere.faces, np.int32),
        "labels": (2 * axis + positive).astype(np.int32),
    }


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """Train and test shards of small labelled meshes (42 and 162 vertices, 6 classes),
    converted from PLY and label files by the product's converter, so each split has a
    manifest and a run reads its sizes from it rather than scanning the records (the scan
    is tested on records written without one, e.g. `write_records`).

    Returns dict(train=path, test=path, num_classes=6): one shard path per split.
    """
    root = tmp_path_factory.mktemp("tiny_dataset")
    (root / "meshes").mkdir()
    splits = {"train": [(2, 0), (1, 1), (2, 2), (1, 3)], "test": [(2, 4), (1, 5)]}
    paths = {}
    for split, meshes in splits.items():
        mesh_paths = [root / "meshes" / f"{split}_{seed}.ply" for _, seed in meshes]
        label_paths = [path.with_suffix(".txt") for path in mesh_paths]
        for (subdivisions, seed), mesh_path, label_path in zip(meshes, mesh_paths, label_paths):
            write_labelled_mesh(_octant_mesh(subdivisions, seed), mesh_path, label_path)
        [paths[split]] = convert_split(mesh_paths, label_paths, root / split, num_shards=1)
    return {**paths, "num_classes": 6}
