"""A toy convolution implementation and a toy network for tests/test_extending.py: what
docs/extending.md adds, each registered in one place (`meshseg.registry`)."""

import keras

from meshseg.nn.model import MeshSegmentationNet
from meshseg.nn.ops.sparse_matmul import sparse_matmul

CALLS = []  # the names of the toy implementation's calls (traced or eager)


def toy_convolution(data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b, xla=False):
    """The feature-steered convolution with tensorflow-graphics' signature, computed by
    `sparse_matmul` (a new implementation must give the same values as the others)."""
    CALLS.append("toy_convolution")
    return sparse_matmul(data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b, xla=xla)


@keras.saving.register_keras_serializable(package="meshseg_tests")
class ToyNet(MeshSegmentationNet):
    """The demo network with one graph convolution of 8 channels."""

    def __init__(self, num_classes: int, impl: str, **kwargs):
        kwargs["conv_channels"] = (8,)
        super().__init__(num_classes, impl, **kwargs)
