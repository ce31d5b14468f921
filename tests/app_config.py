"""Composes the application's Hydra config for tests, shrunk to the tiny dataset."""

from pathlib import Path

from hydra import compose, initialize_config_dir

import meshseg.config  # noqa: F401  (registers the config schema)

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def tiny_config(dataset: dict, *overrides: str):
    """The `train` config on `dataset` (the `tiny_dataset` fixture) with a small network,
    3 steps and evaluation every 2, plus `overrides`."""
    base = [
        "data=tfrecords",
        f"data.train_files={dataset['train']}",
        f"data.test_files={dataset['test']}",
        f"data.num_classes={dataset['num_classes']}",
        "data.batch_size=2",
        "model.input_channels=8",
        "model.conv_channels=[8,8,16]",
        "model.hidden_channels=16",
        "model.num_weight_matrices=4",
        "steps=3",
        "eval_every=2",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=base + list(overrides))
