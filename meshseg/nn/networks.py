"""The networks `model.name` chooses from, built from the `model` settings.

The networks are those of the registry, `meshseg.registry.NETWORKS` (the one list; what
each entry declares: `meshseg.registry.Network`).
"""

from typing import Mapping

import keras

from meshseg import registry


def build_network(num_classes: int, impl: str, settings: Mapping, input_width: int,
                  xla: bool, precision: str = "float32") -> keras.Model:
    """The network `settings["name"]` names, unbuilt.

    Args:
      num_classes, impl, xla, precision: as `MeshSegmentationNet`.
      settings: the `model` group as a dict (`dataclasses.asdict(ModelConfig)`); the
        fields of the network's `Network.settings` are passed on, the others ignored.
      input_width: F of features["inputs"] (`meshseg.data.pipeline.inputs.MeshInputs.width`).

    Raises:
      ValueError: for a name not in `NETWORKS`.
    """
    name = settings.get("name", "demo")
    if name not in registry.NETWORKS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(registry.NETWORKS)}")
    network = registry.NETWORKS[name]
    kwargs = {key: settings[key] for key in network.settings if key in settings}
    return registry.load(network.builder)(num_classes, impl=impl, xla=xla, precision=precision,
                                          input_width=input_width, **kwargs)
