"""docs/extending.md, proven: an implementation, a network and a data set, each registered
in one place (an entry of `meshseg.registry`, a `conf/data/*.yaml`), train for a few steps
with nothing else changed."""

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from helpers import toys
from helpers.meshes import write_octant_folder
from helpers.runs import CONFIG_DIR, tiny_config, train_tiny
from meshseg import registry


def test_a_registered_implementation_trains(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setitem(registry.IMPLEMENTATIONS, "toy", registry.Implementation(
        "helpers.toys:toy_convolution", "as sparse_matmul", float32=True))
    toys.CALLS.clear()
    summary = train_tiny(tiny_config(tiny_dataset, "impl.name=toy", "jit=true"), tmp_path / "run")
    assert (summary.impl, summary.steps) == ("toy", 3)
    assert toys.CALLS and np.isfinite(summary.eval_accuracy)


def test_a_registered_network_trains(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setitem(registry.NETWORKS, "toy", registry.Network(
        "helpers.toys:ToyNet", ("num_weight_matrices", "input_channels", "hidden_channels")))
    summary = train_tiny(tiny_config(tiny_dataset, "model.name=toy"), tmp_path / "run")
    assert summary.steps == 3 and np.isfinite(summary.eval_accuracy)
    assert (tmp_path / "run" / "model.keras").is_file()


TOY_DATA = """\
name: toy
source: mesh_folder
root: {root}
meshes: meshes
labels: labels
num_classes: 6
cache_dir: {cache}
"""


def test_a_data_set_named_by_its_yaml_trains(tmp_path):
    root = write_octant_folder(tmp_path / "toy_meshes", num_train=4, num_test=2)
    conf = tmp_path / "conf" / "data"
    conf.mkdir(parents=True)
    (conf / "toy.yaml").write_text(TOY_DATA.format(root=root, cache=tmp_path / "cache"))
    # the tiny meshes are converted in this process (a worker pool's start costs more)
    overrides = ["data=toy", f"hydra.searchpath=[file://{conf.parent}]", "data.batch_size=2",
                 "data.convert_workers=1",
                 "model=demo", "optimizer=adam", "loss.label_smoothing=0",
                 "model.input_channels=8", "model.conv_channels=[8]", "model.hidden_channels=16",
                 "model.num_weight_matrices=4", "steps=3", "eval_every=2"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    assert cfg.data.name == "toy"
    summary = train_tiny(cfg, tmp_path / "run")
    assert summary.steps == 3 and np.isfinite(summary.eval_accuracy)
    assert any(Path(tmp_path / "cache").iterdir())
