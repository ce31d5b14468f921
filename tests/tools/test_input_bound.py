"""The input-bound check times the same step fed by the pipeline and from memory."""

from meshseg.tools.input_bound import compare


def test_compare_times_both_feeds_on_tiny_data(tiny_dataset):
    overrides = ["data=tfrecords", f"data.train_files={tiny_dataset['train']}",
                 f"data.test_files={tiny_dataset['test']}", "data.num_classes=6",
                 "data.batch_size=2", "model.conv_channels=[8,8]", "model.hidden_channels=16"]
    result = compare(overrides, steps=3, warmup=2)
    assert result["pipeline_ms"] > 0 and result["memory_ms"] > 0
    assert result["ratio"] == result["pipeline_ms"] / result["memory_ms"]
