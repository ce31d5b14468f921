"""The registries: every network (`model.name`), feature-steered convolution
implementation (`impl.name`) and distribution strategy (`strategy.name`) meshseg knows,
each listed once, here.

Everything else derives from these tables: the configuration's checks
(`meshseg.config.check`, before TensorFlow starts), `meshseg.nn.networks.build_network`,
`meshseg.nn.ops.IMPLEMENTATIONS`, `meshseg.train.device.distribute.make_strategy`, the
benchmark's choices, and the tests that compare `conf/impl/*.yaml` and `conf/model/*.yaml`
with them. An entry names its code by import path ("module:name"), loaded on first use, so
this module imports no TensorFlow. How to add one: docs/extending.md.
"""

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Tuple


@dataclass(frozen=True)
class Implementation:
    """A feature-steered convolution implementation (`meshseg.nn.ops`).

    Attributes:
      op: "module:function", called as tensorflow-graphics'
        `feature_steered_convolution(data, neighbors, sizes, var_u, var_v, var_c, var_w,
        var_b, xla=False)`; `xla=True` selects a formulation that compiles under
        `tf.function(jit_compile=True)`.
      xla_formulation: how it runs under XLA, for the run log (`jit=true`).
      neighbor_table: it also accepts a `meshseg.batch.NeighborTable` instead of the
        SparseTensor, and takes `max_degree` (the static table width a SparseTensor needs
        under XLA).
      float32: it computes in float32 under a mixed-precision policy.
    """

    op: str
    xla_formulation: str
    neighbor_table: bool = False
    float32: bool = False


@dataclass(frozen=True)
class Network:
    """A network `model.name` chooses (`meshseg.nn.networks`).

    Attributes:
      builder: "module:Class", called as `Class(num_classes, impl=, xla=, precision=,
        input_width=, **{setting: value})`, a `keras.Model`.
      settings: the `meshseg.config.ModelConfig` fields it takes (the others are ignored).
      multi_scale: it runs on the records' mesh hierarchy, level l with conv_channels[l]
        channels, so it needs `data.levels >= len(model.conv_channels) - 1` (and the
        benchmark times it on real meshes, not icospheres).
    """

    builder: str
    settings: Tuple[str, ...]
    multi_scale: bool = False


_NETWORK_SETTINGS = ("num_weight_matrices", "input_channels", "conv_channels",
                     "hidden_channels", "translation_invariant")

NETWORKS: Dict[str, Network] = {
    "demo": Network("meshseg.nn.model:MeshSegmentationNet", _NETWORK_SETTINGS),
    "feastnet_unet": Network(
        "meshseg.nn.unet:FeaStUNet",
        _NETWORK_SETTINGS + ("convs_per_level", "dropout", "output_level",
                             "fine_head_channels", "fine_head_convs", "input_skip",
                             "hidden_layers", "global_skip", "global_scale"),
        multi_scale=True),
}

IMPLEMENTATIONS: Dict[str, Implementation] = {
    "gather_sum": Implementation(
        "meshseg.nn.ops.gather_sum:gather_sum",
        "library op on inputs flattened to 2-D (its batch flattening uses SparseReshape)",
        float32=True),
    "sparse_matmul": Implementation(
        "meshseg.nn.ops.sparse_matmul:sparse_matmul",
        "gather + unsorted_segment_sum instead of SparseTensorDenseMatMul", float32=True),
    "block_sparse": Implementation(
        "meshseg.nn.ops.block_sparse:block_sparse",
        "gather + unsorted_segment_sum instead of SparseTensorDenseMatMul", float32=True),
    "gather_matmul": Implementation(
        "meshseg.nn.ops.gather_matmul:gather_matmul",
        "the same ops (all have XLA kernels), with a static neighbour-table width; the "
        "per-vertex [W, K] x [K, C] products as a product summed over K, and the backward's "
        "reverse-slot sums as gather + sum, which XLA fuses",
        neighbor_table=True),
}
AUTO_IMPL = "auto"  # impl=auto: the fastest of impl.candidates (`meshseg.train.loop.autotune`)

# tf.distribute data parallelism (`meshseg.train.device.distribute.make_strategy`).
STRATEGIES: Tuple[str, ...] = ("default", "mirrored", "multi_worker")


def load(path: str) -> Any:
    """The object an entry's "module:name" path names (its module imported)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
