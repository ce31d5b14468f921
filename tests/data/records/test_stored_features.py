"""Specification of stored features and mesh hierarchies from records to batches: record
round trip, the reader's checks, normalisation, augmentation of normals, per-level
batches and bucket shapes."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from helpers.records import derived_record
from meshseg.batch import level_key, padding_values
from meshseg.config import AugmentConfig
from meshseg.data.features.derived import derive
from meshseg.data.features.descriptors import normalized_positions
from meshseg.data.pipeline.augment import augment_mesh
from meshseg.data.pipeline.buckets import bucket_shapes
from meshseg.data.pipeline.dataset import make_dataset, normalize_vertices
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.records.decode import decode_mesh_record
from meshseg.data.records.parse import parse_features, parse_levels, parse_mesh_record
from meshseg.data.records.reader import BadRecordError, check_shard
from meshseg.data.records.schema import level_field
from meshseg.errors import DataError

FEATURES = ("normals", "hks")


def _sphere(subdivisions: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    sphere = trimesh.creation.icosphere(subdivisions=subdivisions)
    vertices = (np.asarray(sphere.vertices) * rng.uniform(0.5, 2.0, 3)).astype(np.float32)
    return {"vertices": vertices, "triangles": np.asarray(sphere.faces, np.int32),
            "labels": (vertices[:, 0] > 0).astype(np.int32)}


def _record(mesh: dict, levels: int = 2, features=FEATURES) -> bytes:
    return derived_record(mesh["vertices"], mesh["triangles"], mesh["labels"], features, levels)


def _write(path, records) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return str(path)


@pytest.fixture(scope="module")
def spheres():
    return [_sphere(2, 0), _sphere(3, 1), _sphere(2, 2)]


def test_features_and_levels_round_trip_and_stay_invisible_to_the_demo_reader(spheres):
    mesh = spheres[1]
    derived = derive(mesh["vertices"], mesh["triangles"], FEATURES, 2)
    record = _record(mesh)
    decoded = decode_mesh_record(record, features=FEATURES, levels=2)
    for name in FEATURES:
        np.testing.assert_array_equal(decoded[name], derived.features[name])
        np.testing.assert_array_equal(parse_features(tf.constant(record), [name])[name],
                                      derived.features[name])
    for index, (level, parsed) in enumerate(zip(derived.levels,
                                                parse_levels(tf.constant(record), 2)), 1):
        assert int(parsed["num_vertices"]) == level.num_vertices
        np.testing.assert_array_equal(parsed["parents"], level.parents)
        np.testing.assert_array_equal(parsed["edges"], level.edges)
        np.testing.assert_array_equal(decoded[level_field(index, "edge_weights")],
                                      level.edge_weights)
    demo = parse_mesh_record(tf.constant(record))
    assert sorted(demo) == ["labels", "num_triangles", "num_vertices", "triangles", "vertices"]


@pytest.mark.parametrize("field, value, message", [
    ("level1_parents", np.array([0, 99, 0], np.int32), "'level1_parents' has shape"),
    ("level1_parents", None, "'level1_parents' has a parent outside"),
    ("level2_edges", np.array([[0, 500]], np.int32), "'level2_edges' has shape|outside"),
    ("hks", np.full([642, 16], np.nan, np.float32), "'hks' has 10272 non-finite values"),
])
def test_a_corrupt_feature_or_level_field_is_one_line_naming_shard_record_and_field(
        tmp_path, spheres, field, value, message):
    example = tf.train.Example.FromString(_record(spheres[1]))
    if value is None:  # parents in shape but pointing past the level
        count = example.features.feature["level1_num_vertices"].int64_list.value[0]
        value = np.full([642], count, np.int32)
    if field == "level2_edges":  # right rank, an index outside the level
        value = np.array([[0, 10_000]], np.int32)
        example.features.feature["level2_edge_weights"].bytes_list.value[:] = [
            tf.io.serialize_tensor(np.ones(1, np.float32)).numpy()]
        message = "'level2_edges' has a vertex index outside"
    example.features.feature[field].bytes_list.value[:] = [
        tf.io.serialize_tensor(value).numpy()]
    shard = _write(tmp_path / "bad.tfrecords", [_record(spheres[0]), example.SerializeToString()])
    with pytest.raises(BadRecordError, match=message) as error:
        check_shard(shard, features=FEATURES, levels=2)
    assert str(error.value).startswith(f"{shard}, record 1: ")
    assert "\n" not in str(error.value)


def test_batches_with_levels_hold_the_contract_keys_and_shapes(tmp_path, spheres):
    shard = _write(tmp_path / "a.tfrecords", [_record(mesh) for mesh in spheres])
    inputs = MeshInputs(features=("hks", "xyz", "normals"), levels=2)
    features, labels = next(iter(make_dataset([shard], 3, training=False, inputs=inputs)))
    assert set(features) == set(padding_values(2)[0]) | {"mesh_id"}
    num_vertices = features["num_vertices"].numpy()
    assert features["inputs"].shape == (3, num_vertices.max(), 16 + 3 + 3)
    # inputs in the order listed: hks, then the normalised positions, then the normals
    np.testing.assert_array_equal(features["inputs"][..., 16:19], features["vertices"])
    below = num_vertices
    for level in (1, 2):
        parents = features[level_key(level, "parents")].numpy()
        counts = features[level_key(level, "num_vertices")].numpy()
        assert parents.shape == (3, below.max())
        for mesh in range(3):
            real = parents[mesh, :below[mesh]]
            assert real.min() >= 0 and real.max() < counts[mesh]
            assert (parents[mesh, below[mesh]:] == -1).all()
        assert features[level_key(level, "neighbors")].shape[1] == counts.max()
        below = counts


def test_missing_stored_features_fail_with_one_line_saying_how_to_convert(tmp_path, spheres):
    shard = _write(tmp_path / "plain.tfrecords", [_record(spheres[0], 0, ())])
    with pytest.raises(DataError, match=r"lack 'hks'.*--features hks --levels 1"):
        make_dataset([shard], 1, training=False, inputs=MeshInputs(("xyz", "hks"), 1))


def test_jit_bucket_shapes_cover_every_level_and_fix_every_batch_shape(tmp_path, spheres):
    shard = _write(tmp_path / "a.tfrecords", [_record(mesh) for mesh in spheres])
    inputs = MeshInputs(features=("xyz", "hks"), levels=2)
    scanned = []
    for features, _ in make_dataset([shard], 1, training=False, inputs=inputs):
        scanned.append([int(features[level_key(level, name)].shape[1]) if name == "neighbors"
                        else int(features[level_key(level, name)][0]) if name.startswith("num")
                        else int(features[level_key(level, name)].shape[1])
                        for level in range(3) for name in
                        ("num_vertices", "num_edges", "neighbors", "overflow_centers")])
    shapes = bucket_shapes(np.array(scanned), [200, 700], 8)
    assert len(shapes) == 2 and all(len(shape) == 12 for shape in shapes)
    batches = make_dataset([shard], 2, training=True, seed=0, repeat=True, inputs=inputs,
                           bucket_shapes=shapes)
    seen = set()
    for features, _ in batches.take(4):
        shape = tuple(dim for level in range(3) for dim in (
            features[level_key(level, "neighbors")].shape[1],
            features[level_key(level, "edges")].shape[1],
            features[level_key(level, "neighbors")].shape[2],
            features[level_key(level, "overflow_centers")].shape[1]))
        assert shape in shapes
        assert features["inputs"].shape[1:] == (shape[0], 19)
        assert features[level_key(2, "parents")].shape[1] == shape[4]
        seen.add(shape)
    assert seen


def test_area_centroid_and_unit_area_match_the_descriptors(spheres):
    mesh = spheres[1]
    expected = normalized_positions(mesh["vertices"], mesh["triangles"])
    got = normalize_vertices(tf.constant(mesh["vertices"] + 5.0),
                             tf.constant(mesh["triangles"]), "area_centroid", "unit_area")
    np.testing.assert_allclose(got, expected, atol=2e-6)


def test_normals_turn_with_the_positions_and_ignore_scale_and_jitter(spheres):
    mesh = spheres[0]
    normals = derive(mesh["vertices"], mesh["triangles"], ["normals"]).features["normals"]
    config = AugmentConfig(rotation="so3", tilt_degrees=30, scale=[2.0, 2.0], jitter=0.0)
    seed = tf.constant([3, 4], tf.int64)
    vertices, turned = augment_mesh(tf.constant(mesh["vertices"]), seed, config,
                                    tf.constant(normals))
    # the normals of the augmented mesh are the augmented normals
    np.testing.assert_allclose(
        derive(vertices.numpy(), mesh["triangles"], ["normals"]).features["normals"],
        turned, atol=1e-5)
    jittered, same = augment_mesh(tf.constant(mesh["vertices"]), seed,
                                  AugmentConfig(rotation="so3", tilt_degrees=30, jitter=0.1),
                                  tf.constant(normals))
    np.testing.assert_allclose(same, turned, atol=1e-6)
    assert 0.05 < np.std(jittered.numpy() - vertices.numpy() / 2.0) < 0.15


def test_tilt_leans_the_up_axis_by_at_most_the_angle():
    up = tf.constant([[0.0, 1.0, 0.0]])
    config = AugmentConfig(tilt_degrees=20)
    angles = [np.degrees(np.arccos(augment_mesh(up, tf.constant([s, 1], tf.int64),
                                                config)[0].numpy()[0, 1]))
              for s in range(20)]
    assert max(angles) <= 20.0 + 1e-3 and max(angles) > 5.0


def write_mesh_folder(source: Path, spheres) -> Path:
    """`spheres` as a mesh folder (meshes/m<i>.ply, labels/m<i>.txt, m0 and m1 to train,
    m2 to test), as `data.source=mesh_folder` reads it."""
    (source / "meshes").mkdir(parents=True)
    (source / "labels").mkdir()
    for index, mesh in enumerate(spheres):
        trimesh.Trimesh(mesh["vertices"], mesh["triangles"], process=False).export(
            source / "meshes" / f"m{index}.ply")
        np.savetxt(source / "labels" / f"m{index}.txt", mesh["labels"], fmt="%d")
    (source / "train.txt").write_text("m0.ply\nm1.ply\n")
    (source / "test.txt").write_text("m2.ply\n")
    return source


def test_changing_features_or_levels_reconverts_the_cache_and_the_manifest_sizes_levels(
        tmp_path, spheres):
    from meshseg.data.records.manifest import manifest_sizes
    from meshseg.data.records.prepare import STAMP_NAME, MeshFolder, prepare_mesh_folder
    from meshseg.data.records.reader import open_shard

    source = write_mesh_folder(tmp_path / "source", spheres)
    cache = tmp_path / "cache"
    plain = MeshFolder(str(source), "meshes", "labels", 2, shards={"train": 1, "test": 1})
    first = prepare_mesh_folder(plain, cache)
    assert "features" not in (cache / STAMP_NAME).read_text()  # older caches stay valid
    built_at = Path(first["train"][0]).stat().st_mtime_ns
    richer = MeshFolder(str(source), "meshes", "labels", 2, shards={"train": 1, "test": 1},
                        features=("hks",), levels=2)
    shards = prepare_mesh_folder(richer, cache)
    assert Path(shards["train"][0]).stat().st_mtime_ns != built_at  # reconverted
    record = next(iter(open_shard(shards["train"][0]))).numpy()
    decoded = decode_mesh_record(record, features=("hks",), levels=2)
    assert decoded["hks"].shape == (162, 16)
    sizes, _ = manifest_sizes(shards["train"], levels=2)
    assert sizes.shape == (2, 12)
    assert sizes[0, 4] == decoded["level1_num_vertices"]
    assert manifest_sizes(shards["train"], levels=3) is None  # not stored: the scan decides
    rebuilt_at = Path(shards["train"][0]).stat().st_mtime_ns
    assert prepare_mesh_folder(richer, cache) == shards  # same settings: reused
    assert Path(shards["train"][0]).stat().st_mtime_ns == rebuilt_at


def test_build_datasets_with_hks_and_levels_pads_every_level_to_its_bucket(tmp_path, spheres):
    from meshseg.config import DataConfig
    from meshseg.data.pipeline.sources import build_datasets

    source = write_mesh_folder(tmp_path / "source", spheres)
    data = DataConfig(source="mesh_folder", root=str(source), meshes="meshes", labels="labels",
                      num_classes=2, cache_dir=str(tmp_path / "cache"), batch_size=2,
                      features=["normals", "xyz", "hks"], levels=2, center="area_centroid",
                      scale="unit_area", num_buckets=2, convert_workers=1)
    train, test, info = build_datasets(data, seed=0, jit=True)
    assert info.sizes_from == "manifest"
    assert all(len(shape) == 12 for shape in info.bucket_shapes)
    features, _ = next(iter(test))
    shape = next(s for s in info.bucket_shapes if s[0] == features["vertices"].shape[1])
    assert features["inputs"].shape[1:] == (shape[0], 22)
    for level in range(3):
        assert features[level_key(level, "neighbors")].shape[1:] == (shape[4 * level],
                                                                      shape[4 * level + 2])
        assert features[level_key(level, "edges")].shape[1] == shape[4 * level + 1]
    assert features[level_key(2, "parents")].shape[1] == shape[4]
    np.testing.assert_allclose(features["inputs"][0, :, 3:6], features["vertices"][0])
