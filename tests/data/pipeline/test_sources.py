"""Specification of `build_datasets` (meshseg.data.pipeline.sources) and the human_parts
experiment."""

import json

import numpy as np
import pytest
import tensorflow as tf
import trimesh
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.graphs import fan_grid
from helpers.records import copy_dataset
from helpers.runs import CONFIG_DIR
from helpers.shared_data import SHARED_DATA, needs_shared_data
from meshseg.batch import level_key
from meshseg.data.pipeline.sources import build_datasets, check_overlap
from meshseg.data.records.convert import convert_split
from meshseg.data.records.reader import shard_compression
from meshseg.errors import ConfigError, DataError

HUMAN_PARTS = SHARED_DATA / "human_parts"
NEEDS_HUMAN_PARTS = needs_shared_data("human_parts")


def _config(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def _tfrecords_config(train, test, num_classes, *overrides):
    data = _config("data=tfrecords", f"data.train_files={train}", f"data.test_files={test}",
                   f"data.num_classes={num_classes}", "data.batch_size=2", *overrides).data
    return OmegaConf.to_object(data)


def test_without_jit_batches_are_padded_to_their_maxima_and_histograms_come_from_a_scan(
        tiny_dataset, tmp_path):
    plain = copy_dataset(tiny_dataset, tmp_path / "plain")  # the shards, not their manifests
    cfg = _tfrecords_config(plain["train"], plain["test"], 6)
    train_ds, test_ds, info = build_datasets(cfg, seed=0, jit=False)
    assert info.sizes_from == "scan" and info.bucket_shapes is None
    assert info.num_meshes == {"train": 4, "test": 2}
    assert info.train_histogram.shape == (6,)
    assert info.train_histogram.sum() == 2 * 162 + 2 * 42
    assert info.extent[0] == 162
    widths = {features["vertices"].shape[1] for features, _ in test_ds}
    assert widths == {162}
    features, labels = next(iter(train_ds))
    assert labels.shape[0] == 2


def _converted_spheres(tmp_path) -> dict:
    """Converted train/test shards (with manifests) of icospheres of 42, 162 and 642 vertices."""
    paths = {}
    for split, subdivisions in {"train": [1, 2, 3, 1], "test": [2, 3]}.items():
        meshes, labels = [], []
        for index, level in enumerate(subdivisions):
            sphere = trimesh.creation.icosphere(subdivisions=level)
            meshes.append(tmp_path / f"{split}{index}.ply")
            sphere.export(meshes[-1])
            labels.append(tmp_path / f"{split}{index}.npy")
            np.save(labels[-1], (np.asarray(sphere.vertices)[:, 0] > 0).astype(np.int64))
        convert_split(meshes, labels, tmp_path / "out" / split, num_shards=2, num_classes=2,
                      adjacency="edges")
        paths[split] = str(tmp_path / "out" / f"{split}-*")
    return paths


def _sphere_buckets(paths: dict, sizes_from: str):
    """`build_datasets` of `_converted_spheres` under jit with boundaries [64, 256] (pad
    multiple 64), checked to take its sizes from `sizes_from` and to give the spheres'
    buckets and histogram; returns (train, test, info)."""
    cfg = _tfrecords_config(paths["train"], paths["test"], 2, "data.bucket_boundaries=[64,256]",
                            "data.pad_multiple=64")
    train_ds, test_ds, info = build_datasets(cfg, seed=0, jit=True)
    assert info.sizes_from == sizes_from
    assert [shape[0] for shape in info.bucket_shapes] == [64, 256, 704]
    assert info.train_histogram.sum() == 2 * 42 + 162 + 642
    return train_ds, test_ds, info


def test_under_jit_batches_take_bucket_shapes_chosen_from_the_manifests(tmp_path):
    train_ds, test_ds, info = _sphere_buckets(_converted_spheres(tmp_path), "manifest")
    shapes = {(f["vertices"].shape[1], f["edges"].shape[1], f["neighbors"].shape[2],
               f["overflow_centers"].shape[1]) for f, _ in list(train_ds.take(8)) + list(test_ds)}
    assert shapes <= set(info.bucket_shapes)


def test_automatic_boundaries_use_num_buckets_quantiles(tmp_path):
    paths = _converted_spheres(tmp_path)
    cfg = _tfrecords_config(paths["train"], paths["test"], 2, "data.num_buckets=3",
                            "data.pad_multiple=64")
    _, _, info = build_datasets(cfg, seed=0, jit=True)
    assert info.bucket_boundaries == [64, 192, 704]


@pytest.mark.parametrize("damage", ["list", "no_histogram", "meshes_not_entries", "cut"])
def test_a_damaged_manifest_is_passed_over_and_the_shards_scanned_for_the_same_buckets(
        tmp_path, damage):
    """A manifest that is valid JSON of another shape, or cut, is a damaged cache entry:
    the sizes come from scanning the shards, with the buckets an intact manifest gives."""
    paths = _converted_spheres(tmp_path)
    for split in ("train", "test"):
        manifest_file = tmp_path / "out" / f"{split}.manifest.json"
        manifest = json.loads(manifest_file.read_text())
        damaged = {"list": json.dumps(manifest["shards"]),
                   "no_histogram": json.dumps({k: v for k, v in manifest.items()
                                               if k != "class_histogram"}),
                   "meshes_not_entries": json.dumps({**manifest, "meshes": [1, 2, 3]}),
                   "cut": manifest_file.read_text()[:40]}[damage]
        manifest_file.write_text(damaged)
    _sphere_buckets(paths, "scan")


def _converted(tmp_path, subdivisions: dict) -> dict:
    """Converted train/test shards of icospheres of the given subdivisions per split."""
    paths = {}
    for split, levels in subdivisions.items():
        meshes, labels = [], []
        for index, level in enumerate(levels):
            sphere = trimesh.creation.icosphere(subdivisions=level)
            meshes.append(tmp_path / f"{split}{index}.ply")
            sphere.export(meshes[-1])
            labels.append(tmp_path / f"{split}{index}.npy")
            np.save(labels[-1], (np.asarray(sphere.vertices)[:, 0] > 0).astype(np.int64))
        convert_split(meshes, labels, tmp_path / "out" / split, num_shards=1, num_classes=2,
                      adjacency="edges")
        paths[split] = str(tmp_path / "out" / f"{split}-*")
    return paths


def test_under_jit_one_far_larger_mesh_runs_in_its_own_bucket_and_the_rest_stay_small(
        tmp_path, caplog):
    """With one automatic bucket every batch would be padded to the one 2562-vertex mesh
    (40x the others); the outlier gets a bucket of its own, the 42-vertex meshes' batches
    are padded to 64."""
    paths = _converted(tmp_path, {"train": [1, 1, 1, 1, 1, 4], "test": [1, 1]})
    cfg = _tfrecords_config(paths["train"], paths["test"], 2, "data.pad_multiple=64")
    with caplog.at_level("INFO", logger="meshseg.data.pipeline.sources"):
        train_ds, test_ds, info = build_datasets(cfg, seed=0, jit=True)
    assert info.bucket_boundaries == [64, 2624]
    assert "1 vertex-count quantile bucket(s) split into 2" in caplog.text
    assert "padding (above" not in caplog.text
    widths = [f["vertices"].shape[1] for f, _ in list(train_ds.take(6)) + list(test_ds)]
    assert set(widths) <= {64, 2624} and widths.count(64) >= 4


def test_under_jit_buckets_that_pad_more_than_max_padding_are_logged(tmp_path, caplog):
    paths = _converted(tmp_path, {"train": [1, 1, 1, 4], "test": [1]})
    cfg = _tfrecords_config(paths["train"], paths["test"], 2, "data.pad_multiple=64",
                            "data.bucket_boundaries=[2624]")
    with caplog.at_level("INFO", logger="meshseg.data.pipeline.sources"):
        _, _, info = build_datasets(cfg, seed=0, jit=True)
    assert info.bucket_boundaries == [2624]
    assert ("the bucket of 2624 vertices is 78% padding (above data.max_padding=0.5), so its "
            "steps do 4.6x the work of its meshes; set data.bucket_boundaries") in caplog.text
    cfg = _tfrecords_config(paths["train"], paths["test"], 2, "data.pad_multiple=64",
                            "data.max_buckets=1")
    caplog.clear()
    with caplog.at_level("INFO", logger="meshseg.data.pipeline.sources"):
        _, _, info = build_datasets(cfg, seed=0, jit=True)
    assert info.bucket_boundaries == [2624]
    assert "78% padding" in caplog.text and "raise data.max_buckets (now 1)" in caplog.text


def test_human_parts_experiment_composes_with_8_classes_and_24_by_override():
    cfg = _config("experiment=human_parts")
    assert (cfg.data.name, cfg.data.num_classes, cfg.jit) == ("human_parts", 8, True)
    assert (list(cfg.data.features), cfg.data.levels) == (["xyz", "normals", "hks"], 3)
    assert cfg.data.labels == "labels/coarse8"
    cfg = _config("experiment=human_parts", "data.label_set=smpl24", "data.num_classes=24")
    assert cfg.data.labels == "labels/smpl24"
    assert cfg.data.cache_dir == "data/cache/human_parts_smpl24_xyz-normals-hks_l3"


@pytest.mark.slow  # ~10 s: the converter and pipeline of the tests above, on 40 real meshes
@NEEDS_HUMAN_PARTS
def test_human_parts_converts_to_a_cache_and_yields_8_class_batches(tmp_path):
    # One coarser level, xyz only: the HKS of 40 meshes would take minutes without the
    # descriptor cache (tests/data/records/test_stored_features.py covers stored features).
    # Converted in this process: beside the suite's other worker, a pool's start costs more
    # than its second process gains.
    cfg = _config("experiment=human_parts", f"data.root={HUMAN_PARTS}",
                  f"data.cache_dir={tmp_path / 'cache'}", "data.features=[xyz]",
                  "data.levels=1", "data.descriptor_cache=null", "data.convert_workers=1").data
    cfg = OmegaConf.to_object(cfg)
    train_ds, test_ds, info = build_datasets(cfg, seed=0, jit=True)
    assert info.num_meshes == {"train": 20, "test": 20}
    assert info.sizes_from == "manifest"
    assert len(info.bucket_shapes) == 2
    assert np.all(info.train_histogram > 0) and info.train_histogram.shape == (8,)
    features, labels = next(iter(test_ds))
    assert labels.numpy().max() < 8
    # Each level padded to its bucket's (vertices, edges, table width, overflow rows).
    shape = tuple(features[level_key(level, key)].shape[axis] for level in (0, 1)
                  for key, axis in (("neighbors", 1), ("edges", 1), ("neighbors", 2),
                                    ("overflow_centers", 1)))
    assert shape in info.bucket_shapes


@pytest.mark.parametrize("split", ["train", "test"])
def test_a_split_that_holds_no_mesh_is_refused(tiny_dataset, tmp_path, split):
    empty = tmp_path / "empty.tfrecords"
    empty.write_bytes(b"")
    files = {**tiny_dataset, split: str(empty)}
    with pytest.raises(DataError, match=rf"the {split} split holds no mesh: .*empty\.tfrecords"):
        build_datasets(_tfrecords_config(files["train"], files["test"], 6), seed=0, jit=False)


def _compressed(source: str, path, compression: str) -> str:
    options = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(str(path), options) as writer:
        for record in tf.data.TFRecordDataset(source):
            writer.write(record.numpy())
    return str(path)


@pytest.fixture(scope="module")
def plain_info(tiny_dataset):
    """The `DataInfo` of `tiny_dataset`'s uncompressed shards (read-only)."""
    return build_datasets(_tfrecords_config(tiny_dataset["train"], tiny_dataset["test"], 6),
                          seed=0, jit=False)[2]


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_shards_are_detected_and_read_like_plain_ones(tiny_dataset, plain_info,
                                                                 tmp_path, compression):
    train = _compressed(tiny_dataset["train"], tmp_path / "train.tfrecords", compression)
    assert shard_compression(train) == compression
    assert shard_compression(tiny_dataset["train"]) == ""
    plain = plain_info
    train_ds, _, info = build_datasets(_tfrecords_config(train, tiny_dataset["test"], 6),
                                       seed=0, jit=False)
    assert info.num_meshes == plain.num_meshes
    np.testing.assert_array_equal(info.train_histogram, plain.train_histogram)
    assert next(iter(train_ds))[1].shape[0] == 2


def test_a_skipped_unreadable_shard_counts_as_a_shard_not_a_record(tiny_dataset, tmp_path, caplog):
    garbage = tmp_path / "garbage.tfrecords"
    garbage.write_bytes(b"\x00" * 64)
    cfg = _tfrecords_config(str(tmp_path / "*.tfrecords"), tiny_dataset["test"], 6,
                            "data.skip_bad_records=true")
    (tmp_path / "good.tfrecords").write_bytes(open(tiny_dataset["train"], "rb").read())
    _, _, info = build_datasets(cfg, seed=0, jit=False)
    assert info.num_meshes["train"] == 4 and info.bad_records["train"] == 0
    assert "skipped 0 bad record(s) and 1 unreadable shard(s)" in caplog.text


def test_a_train_shard_led_by_a_non_example_record_trains_on_the_rest(tiny_dataset, tmp_path,
                                                                     caplog):
    from meshseg.data.records.reader import open_shard

    train = tmp_path / "train.tfrecords"
    with tf.io.TFRecordWriter(str(train)) as writer:
        writer.write(b"this is not a tf.train.Example \xff\xfe")
        for record in open_shard(tiny_dataset["train"]):
            writer.write(record.numpy())
    cfg = _tfrecords_config(str(train), tiny_dataset["test"], 6, "data.skip_bad_records=true")
    _, _, info = build_datasets(cfg, seed=0, jit=False)
    assert info.num_meshes["train"] == 4 and info.bad_records["train"] == 1
    assert "train.tfrecords, record 0: " in caplog.text


def test_meshes_with_a_few_high_degree_vertices_get_overflow_rows_and_the_log_says_so(
        tmp_path, caplog):
    fan = fan_grid()
    fan.export(tmp_path / "fan.ply")
    np.save(tmp_path / "fan.npy", np.zeros(len(fan.vertices), np.int64))
    for split in ("train", "test"):
        convert_split([tmp_path / "fan.ply"], [tmp_path / "fan.npy"], tmp_path / split,
                      num_shards=1, adjacency="edges")
    entry = json.loads((tmp_path / "train.manifest.json").read_text())["meshes"][0]
    assert (entry["max_degree"], entry["table_width"], entry["overflow_rows"]) == (1003, 18, 55)
    cfg = _tfrecords_config(str(tmp_path / "train-*"), str(tmp_path / "test-*"), 1)
    caplog.set_level("INFO")
    _, test_ds, info = build_datasets(cfg, seed=0, jit=True)
    assert info.bucket_shapes == [(2816, -(-entry["num_edges"] // 256) * 256, 18, 56)]
    assert "2 mesh(es) with a few very high-degree vertices continue them on up to 55 " \
           "overflow rows" in caplog.text
    features, _ = next(iter(test_ds))
    assert features["neighbors"].shape == (1, 2816, 18)


def test_a_reconversion_replaces_its_earlier_shards_and_strays_are_refused(tmp_path):
    paths = _converted_spheres(tmp_path)  # 4 train meshes in 2 shards under out/train
    meshes = sorted((tmp_path).glob("train*.ply"))
    labels = [path.with_suffix(".npy") for path in meshes]
    convert_split(meshes, labels, tmp_path / "out" / "train", num_shards=1, num_classes=2)
    assert [p.name for p in (tmp_path / "out").glob("train-*")] == ["train-00000-of-00001.tfrecords"]
    cfg = _tfrecords_config(paths["train"], paths["test"], 2)
    _, _, info = build_datasets(cfg, seed=0, jit=False)
    assert info.num_meshes["train"] == 4

    stray = tmp_path / "out" / "train-00001-of-00002.tfrecords"
    stray.write_bytes((tmp_path / "out" / "train-00000-of-00001.tfrecords").read_bytes())
    with pytest.raises(DataError, match=r"matches shards no manifest of their conversion lists: "
                                        r".*train-00001-of-00002\.tfrecords"):
        build_datasets(cfg, seed=0, jit=False)


def test_test_meshes_that_are_training_meshes_are_counted_or_refused(tiny_dataset, tmp_path,
                                                                      caplog):
    copy = tmp_path / "copy.tfrecords"  # a byte copy of the training shard's first mesh
    with tf.io.TFRecordWriter(str(copy)) as writer:
        writer.write(next(iter(tf.data.TFRecordDataset(tiny_dataset["train"]))).numpy())
    test = str(tmp_path / "*.tfrecords")
    (tmp_path / "itself.tfrecords").write_bytes(copy.read_bytes())
    _, _, info = build_datasets(_tfrecords_config(tiny_dataset["train"], test, 6), seed=0,
                                jit=False)
    assert info.test_train_overlap == 2
    assert "2 of 2 test meshes are also in the training split" in caplog.text
    assert "1 test mesh(es) repeat another of the test split" in caplog.text
    with pytest.raises(DataError, match="2 of 2 test meshes are also in the training split"):
        build_datasets(_tfrecords_config(tiny_dataset["train"], test, 6, "data.overlap=refuse"),
                       seed=0, jit=False)



@NEEDS_HUMAN_PARTS
def test_entry_patterns_train_on_one_remeshing_and_test_on_the_other(tmp_path):
    cfg = _config("experiment=human_parts", f"data.root={HUMAN_PARTS}",
                  f"data.cache_dir={tmp_path / 'cache'}", "data.features=[xyz]",
                  "data.levels=0", "data.descriptor_cache=null", "data.convert_workers=1",
                  "data.train_entries=meshes/iso/*", "data.test_entries=meshes/qes/*").data
    _, test_ds, info = build_datasets(OmegaConf.to_object(cfg), seed=0, jit=False)
    assert info.num_meshes == {"train": 10, "test": 10}
    # qes remeshes have about twice the vertices of iso ones (~14k against ~7k).
    assert int(tf.reduce_min(next(iter(test_ds))[0]["num_vertices"])) > 10000


@NEEDS_HUMAN_PARTS
def test_an_entry_pattern_that_matches_nothing_is_a_config_error(tmp_path):
    cfg = _config("experiment=human_parts", f"data.root={HUMAN_PARTS}",
                  f"data.cache_dir={tmp_path / 'cache'}", "data.test_entries=meshes/nope/*").data
    with pytest.raises(ConfigError, match=r"data.test_entries='meshes/nope/\*' matches no entry"):
        build_datasets(OmegaConf.to_object(cfg), seed=0, jit=False)
    assert not (tmp_path / "cache").exists()


def test_validation_meshes_that_are_training_or_test_meshes_are_reported_or_refused(
        tiny_dataset, caplog):
    files = {"train": [tiny_dataset["train"]], "test": [tiny_dataset["test"]],
             "validation": [tiny_dataset["train"], tiny_dataset["test"]]}
    assert check_overlap(files, "warn", 2) == 0
    assert "4 validation mesh(es) are also in the training split" in caplog.text
    assert "2 validation mesh(es) are also in the test split" in caplog.text
    with pytest.raises(DataError, match="4 validation mesh.*also in the training split"):
        check_overlap(files, "refuse", 2)
    disjoint = {**files, "validation": [tiny_dataset["test"]]}
    with pytest.raises(DataError, match="2 validation mesh.*also in the test split"):
        check_overlap(disjoint, "refuse", 2)
    caplog.clear()
    assert check_overlap({"train": [tiny_dataset["train"]], "test": [tiny_dataset["test"]],
                          "validation": []}, "refuse", 2) == 0
