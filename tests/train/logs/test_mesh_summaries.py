"""Test meshes in TensorBoard's Mesh dashboard: what a run writes, read back from its
event files."""

import numpy as np
import pytest
import tensorflow as tf
from helpers.runs import tiny_config, train_tiny
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.plugins.mesh import plugin_data_pb2

from meshseg.data.pipeline.dataset import sample_meshes
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.records.parse import parse_mesh_record
from meshseg.data.records.reader import open_shard
from meshseg.train.logs.mesh_summaries import label_colors


def mesh_summaries(event_dir) -> dict:
    """{tag: {step: {component name: numpy array}}} of the mesh-plugin summaries in
    `event_dir` (the plugin stores each component, vertices, faces and colours, under
    `<name>_<COMPONENT>`)."""
    events = EventAccumulator(str(event_dir), size_guidance={"tensors": 0})
    events.Reload()
    found = {}
    for tag in events.Tags()["tensors"]:
        plugin = events.SummaryMetadata(tag).plugin_data
        if plugin.plugin_name != "mesh":
            continue
        data = plugin_data_pb2.MeshPluginData.FromString(plugin.content)
        component = plugin_data_pb2.MeshPluginData.ContentType.Name(data.content_type)
        for point in events.Tensors(tag):
            found.setdefault(data.name, {}).setdefault(point.step, {})[component] = (
                tf.make_ndarray(point.tensor_proto))
    return found


def test_sample_meshes_are_the_first_test_meshes_normalised(tiny_dataset):
    samples = sample_meshes([tiny_dataset["test"]], 1)
    first = parse_mesh_record(next(iter(open_shard(tiny_dataset["test"]))), source="test")
    assert len(samples) == 1
    features, labels, triangles = samples[0]
    np.testing.assert_array_equal(labels, first["labels"])
    np.testing.assert_array_equal(triangles, first["triangles"])
    vertices = features["vertices"].numpy()
    np.testing.assert_allclose(vertices.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(np.sqrt((vertices**2).sum(axis=1).mean()), 1, rtol=1e-5)
    assert len(sample_meshes([tiny_dataset["test"]], 5)) == 2  # all there are
    assert sample_meshes([tiny_dataset["test"]], 0) == []


@pytest.mark.slow
def test_each_evaluation_writes_prediction_and_ground_truth_meshes(tiny_dataset, tmp_path):
    train_tiny(tiny_config(tiny_dataset, "summaries.meshes=2"), tmp_path)
    meshes = mesh_summaries(tmp_path / "eval")
    assert set(meshes) == {"test_mesh_0/prediction", "test_mesh_0/ground_truth",
                           "test_mesh_1/prediction", "test_mesh_1/ground_truth"}
    assert set(meshes["test_mesh_0/prediction"]) == {2, 3}  # eval_every=2, steps=3
    assert set(meshes["test_mesh_0/ground_truth"]) == {2}  # written once
    shown = sample_meshes([tiny_dataset["test"]], 2, MeshInputs(scale="none"))  # data=tfrecords
    for index, (features, labels, triangles) in enumerate(shown):
        truth = meshes[f"test_mesh_{index}/ground_truth"][2]
        np.testing.assert_allclose(truth["VERTEX"][0], features["vertices"], rtol=1e-6)
        np.testing.assert_array_equal(truth["FACE"][0], triangles)
        np.testing.assert_array_equal(truth["COLOR"][0], label_colors(labels.numpy())[:, :3])
        predicted = meshes[f"test_mesh_{index}/prediction"][3]["COLOR"][0]
        assert predicted.shape == (len(labels), 3)
        # every colour is the colour of one of the 6 classes
        palette = {tuple(color) for color in label_colors(np.arange(6))[:, :3]}
        assert {tuple(color) for color in predicted} <= palette


@pytest.mark.slow
def test_summaries_meshes_0_writes_no_mesh(tiny_dataset, tmp_path):
    train_tiny(tiny_config(tiny_dataset, "summaries.meshes=0", "steps=2"), tmp_path)
    assert mesh_summaries(tmp_path / "eval") == {}


@pytest.mark.slow
def test_a_run_skips_a_corrupt_test_record_and_shows_and_scores_the_other_three(
        tiny_dataset, tmp_path, caplog):
    from meshseg.data.records.framing import HEADER_BYTES, frames
    from meshseg.tools.predict import evaluate_test_split

    records = [r.numpy() for r in open_shard(tiny_dataset["test"])] * 2  # 4 test meshes
    test = tmp_path / "test.tfrecords"
    with tf.io.TFRecordWriter(str(test)) as writer:
        for record in records:
            writer.write(record)
    damaged = next(f for f in frames(str(test)) if f.index == 1)
    data = bytearray(test.read_bytes())
    data[damaged.offset + HEADER_BYTES + damaged.length // 2] ^= 0x01  # framing intact
    test.write_bytes(bytes(data))
    dataset = dict(tiny_dataset, test=str(test))
    summary = train_tiny(tiny_config(dataset, "summaries.meshes=4", "data.skip_bad_records=true"),
                         tmp_path / "run")
    assert "test split: skipped 1 bad record(s) and 0 unreadable shard(s)" in caplog.text
    assert sorted(mesh_summaries(tmp_path / "run" / "eval")) == sorted(
        f"test_mesh_{i}/{kind}" for i in range(3) for kind in ("prediction", "ground_truth"))
    scored = evaluate_test_split(str(tmp_path / "run"))
    assert scored["num_meshes"] == 3 and scored["confusion"].sum() == sum(
        len(labels) for _, labels, _ in sample_meshes([str(test)], 4))
    assert scored["accuracy"] == pytest.approx(summary.eval_accuracy, abs=1e-6)
