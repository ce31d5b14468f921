"""The networks `model.name` chooses from, built from the `model` settings."""

from typing import Mapping

import keras

from meshseg.nn.model import MeshSegmentationNet
from meshseg.nn.unet import FeaStUNet

NETWORKS = {"demo": MeshSegmentationNet, "feastnet_unet": FeaStUNet}
# The `meshseg.config.ModelConfig` fields each network takes (the demo has no
# convs_per_level, dropout, output_level, the fine head, input_skip, hidden_layers or the
# global_ options).
NETWORK_SETTINGS = {
    "demo": ("num_weight_matrices", "input_channels", "conv_channels", "hidden_channels",
             "translation_invariant"),
    "feastnet_unet": ("num_weight_matrices", "input_channels", "conv_channels",
                      "hidden_channels", "translation_invariant", "convs_per_level", "dropout",
                      "output_level", "fine_head_channels", "fine_head_convs", "input_skip",
                      "hidden_layers", "global_skip", "global_scale"),
}


def build_network(num_classes: int, impl: str, settings: Mapping, input_width: int,
                  xla: bool, precision: str = "float32") -> keras.Model:
    """The network `settings["name"]` names, unbuilt.

    Args:
      num_classes, impl, xla, precision: as `MeshSegmentationNet`.
      settings: the `model` group as a dict (`dataclasses.asdict(ModelConfig)`); the
        fields of `NETWORK_SETTINGS[name]` are passed on, the others ignored.
      input_width: F of features["inputs"] (`meshseg.data.pipeline.inputs.MeshInputs.width`).

    Raises:
      ValueError: for a name not in `NETWORKS`.
    """
    name = settings.get("name", "demo")
    if name not in NETWORKS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(NETWORKS)}")
    kwargs = {key: settings[key] for key in NETWORK_SETTINGS[name] if key in settings}
    return NETWORKS[name](num_classes, impl=impl, xla=xla, precision=precision,
                          input_width=input_width, **kwargs)
