"""Specification of size bucketing for XLA (meshseg.data.pipeline.buckets)."""

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from meshseg.batch import without_mesh_ids
from meshseg.data.pipeline.buckets import (auto_boundaries, bucket_shapes, padding_fractions,
                                           split_outlier_buckets)
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.data.records.schema import mesh_to_example


def test_auto_boundaries_are_rounded_quantiles_ending_at_the_maximum():
    counts = np.array([100, 110, 120, 500, 510, 900])
    assert auto_boundaries(counts, 3, multiple=64) == [128, 512, 960]
    assert auto_boundaries(counts, 1, multiple=64) == [960]
    assert auto_boundaries([10, 10, 10], 4, multiple=1) == [10]


def test_bucket_shapes_take_each_buckets_largest_edges_width_and_overflow_rows():
    sizes = np.array([[10, 50, 5, 0], [12, 70, 7, 0], [30, 100, 6, 3], [40, 90, 9, 0]])
    assert bucket_shapes(sizes, [16, 32], multiple=8) == [
        (16, 72, 7, 0), (32, 104, 7, 8), (40, 104, 9, 8)]
    assert bucket_shapes(sizes, [16, 32, 64, 128], multiple=1) == [
        (16, 70, 7, 0), (32, 100, 7, 8), (64, 100, 9, 8)]


def test_bucket_boundaries_must_increase():
    with pytest.raises(ValueError, match="strictly increasing"):
        bucket_shapes(np.array([[10, 50, 5, 0]]), [32, 16], multiple=1)


def test_padding_fraction_counts_only_padding_beyond_the_rounding():
    assert padding_fractions([100, 200, 2000], [256, 2048], multiple=256) == [0.0, 0.0]
    assert padding_fractions([100, 2000], [2048], multiple=256) == pytest.approx(
        [1 - (256 + 2048) / (2 * 2048)])
    assert padding_fractions([100], [256, 512], multiple=256) == [0.0, 0.0]


def test_one_far_larger_mesh_gets_its_own_bucket_instead_of_padding_every_batch():
    """Under one automatic bucket, 15 meshes of ~300 vertices and one of 20000 would all be
    padded to 20224 (a 67x slower step); the outlier gets a bucket of its own and the
    others' batches are padded to 512."""
    counts = [300 + 7 * i for i in range(15)] + [20000]
    quantiles = auto_boundaries(counts, 1, multiple=256)
    assert quantiles == [20224]
    assert split_outlier_buckets(counts, quantiles, 256, max_padding=0.5,
                                 max_buckets=8) == [512, 20224]


def test_several_outliers_are_split_off_until_no_bucket_pads_more_than_the_limit():
    counts = [100] * 20 + [1000, 1100] + [9000]
    boundaries = split_outlier_buckets(counts, [9216], 256, max_padding=0.5, max_buckets=8)
    assert boundaries[0] == 256 and boundaries[-1] == 9216
    assert max(padding_fractions(counts, boundaries, 256)) <= 0.5
    assert split_outlier_buckets(counts, [9216], 256, max_padding=0.0,
                                 max_buckets=8) == [256, 1024, 1280, 9216]


def test_buckets_within_the_limit_and_the_bucket_cap_are_kept():
    rna_like = [681] + list(range(14000, 18700, 50))  # one small mesh pads nothing extra
    assert split_outlier_buckets(rna_like, [18944], 256, 0.5, 8) == [18944]
    counts = [100] * 20 + [1000] + [9000]
    assert split_outlier_buckets(counts, [9216], 256, 0.5, max_buckets=1) == [9216]
    assert split_outlier_buckets(counts, [9216], 256, max_padding=1.0, max_buckets=8) == [9216]


@pytest.fixture
def five_sizes(tmp_path):
    """A shard of 10 meshes with 5 different vertex counts (12 to 642 vertices)."""
    path = str(tmp_path / "sizes.tfrecords")
    meshes = [trimesh.creation.icosphere(subdivisions=s) for s in range(4)]
    meshes.append(trimesh.creation.box())
    with tf.io.TFRecordWriter(path) as writer:
        for mesh in meshes * 2:
            writer.write(mesh_to_example(mesh.vertices, mesh.faces,
                                         np.zeros(len(mesh.vertices), np.int32)))
    return path


def test_bucketed_batches_have_only_the_bucket_shapes_and_jit_compiles_once_per_bucket(
        five_sizes):
    shapes = [(64, 512, 7, 0), (256, 2048, 7, 0), (768, 4608, 7, 0)]
    dataset = make_dataset([five_sizes], batch_size=2, training=True, seed=0, repeat=True,
                           bucket_shapes=shapes)
    traces = []

    @tf.function(jit_compile=True)
    def step(features, labels):
        traces.append(features["vertices"].shape)
        return tf.reduce_sum(features["vertices"]) + tf.cast(tf.reduce_sum(labels), tf.float32)

    seen = set()
    for features, labels in dataset.take(12):
        shape = (features["vertices"].shape[1], features["edges"].shape[1],
                 features["neighbors"].shape[2], features["overflow_centers"].shape[1])
        assert shape in shapes and labels.shape == (2, shape[0])
        assert features["num_vertices"].shape == (2,)
        seen.add(shape)
        step(without_mesh_ids(features), labels)
    assert seen == set(shapes)
    assert len(traces) == len(shapes)


def test_evaluation_keeps_every_mesh_with_bucket_shapes(five_sizes):
    shapes = [(64, 512, 7, 0), (768, 4608, 7, 0)]
    dataset = make_dataset([five_sizes], batch_size=3, training=False, bucket_shapes=shapes)
    counts = sorted(int(n) for features, _ in dataset for n in features["num_vertices"])
    assert counts == sorted([8, 12, 42, 162, 642] * 2)


def test_mesh_larger_than_every_bucket_fails_with_its_sizes(five_sizes):
    dataset = make_dataset([five_sizes], batch_size=1, training=False,
                           bucket_shapes=[(16, 128, 7, 0), (64, 512, 7, 0)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="fits no bucket"):
        list(dataset)
