"""`model.name` chooses the network; conf/model/*.yaml build, and the U-Net's .keras file loads."""

import dataclasses
from pathlib import Path

import keras
import numpy as np
import pytest
import yaml

from meshseg.config import ModelConfig
from meshseg.nn.model import MeshSegmentationNet, one_triangle
from meshseg.nn.networks import build_network
from meshseg.nn.unet import FeaStUNet

CONF = Path(__file__).parents[2] / "conf" / "model"


def settings(name: str) -> dict:
    """conf/model/<name>.yaml over the schema's defaults, as `dataclasses.asdict` gives it."""
    return dataclasses.asdict(ModelConfig(**yaml.safe_load((CONF / f"{name}.yaml").read_text())))


def test_demo_is_built_from_its_conf_and_ignores_the_unet_settings():
    model = settings("demo")
    assert (model["name"], model["convs_per_level"], model["dropout"]) == ("demo", 2, 0.0)
    net = build_network(8, "gather_matmul", {**model, "dropout": 0.5}, input_width=19, xla=False)
    assert isinstance(net, MeshSegmentationNet)
    config = net.get_config()
    assert (config["conv_channels"], config["hidden_channels"], config["input_width"]) == (
        [32, 64, 128], 256, 19)
    assert "dropout" not in config


def test_feastnet_unet_is_built_from_its_conf(tmp_path):
    model = settings("feastnet_unet")
    net = build_network(260, "gather_matmul", model, input_width=19, xla=False)
    assert isinstance(net, FeaStUNet)
    config = net.get_config()
    for key in ("num_weight_matrices", "input_channels", "conv_channels", "hidden_channels",
                "translation_invariant", "convs_per_level", "dropout", "output_level",
                "input_skip", "hidden_layers", "global_skip", "global_scale"):
        assert config[key] == model[key], key
    net.build_from_config({})
    net.save(tmp_path / "unet.keras")
    loaded = keras.models.load_model(tmp_path / "unet.keras")
    features = one_triangle(19, net.num_levels)
    np.testing.assert_array_equal(loaded(features), net(features))


def test_unknown_network_name_raises_naming_the_choices():
    with pytest.raises(ValueError, match="feastnet_unet"):
        build_network(4, "gather_matmul", {"name": "pointnet"}, input_width=3, xla=False)
