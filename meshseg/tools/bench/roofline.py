"""The work of a network's step and its roofline bound: what the benchmark compares a
measured step time with.

A step's work is counted layer by layer on a real batch (`step_work`): one eager forward
call records the shapes every FeaSt convolution (`FeatureSteeredConvolution`) and every
per-vertex dense layer (`PointwiseConv1D`, `keras.layers.Dense`) sees, so the same count
serves the demo network and the multi-scale U-Net (whose levels have their own vertex and
edge counts). Per layer over N vertices (the batch's, padding included) and E edges (the
used adjacency entries, self-edges included):

- FLOPs (multiply and add counted apart): a FeaSt convolution C -> D with W weight
  matrices (FeaStNet, Verma et al., CVPR 2018) computes the projections x u and x v
  (2 N C W 2), the per-edge aggregation sum_j a_ij q_m(x_i, x_j) x_j (2 E W C) and the
  W C -> D product with the W_m (2 N W C D); a dense C -> D layer 2 N C D. Softmax, bias,
  ReLU, normalisation, pooling and the optimizer update are left out (each O(N D) or
  O(parameters)).
- Minimal bytes: each layer's input and output activations once (N (C + D) s bytes, s the
  compute dtype's size: 4 for float32, 2 for bfloat16 and float16), and for a convolution
  its adjacency once (E neighbour indices and weights, 8 bytes each): what no
  implementation can avoid moving between memory and the cores (the roofline model,
  Williams, Waterman and Patterson, CACM 2009).

A backward pass costs `BACKWARD_FACTOR` times the forward pass in both (the products and
the reads for dL/dx and dL/dW); `train` (backward + update) counts as backward. The bound
of a step, `roofline_ms`, is its FLOPs at the matmul peak plus its bytes at the memory
bandwidth, both measured on the same machine in the same precision: a step can only come
near it when every op runs at the peak of whichever resource it needs.
"""

import contextlib
from typing import Dict, List, NamedTuple, Tuple

BACKWARD_FACTOR = 2  # a backward pass ~ 2x the forward pass's FLOPs and bytes
INDEX_BYTES = 8  # one adjacency entry: an int32 neighbour index and a 32-bit weight
MODES = ("forward", "backward", "train")


class Work(NamedTuple):
    """FLOPs and minimal bytes of a step (or of one layer's forward pass)."""

    flops: float
    bytes: float

    def __add__(self, other: "Work") -> "Work":
        return Work(self.flops + other.flops, self.bytes + other.bytes)

    def scaled(self, factor: float) -> "Work":
        return Work(self.flops * factor, self.bytes * factor)


def conv_work(num_vertices: int, num_edges: int, in_channels: int, out_channels: int,
              num_weight_matrices: int, dtype_bytes: int) -> Work:
    """The forward `Work` of one FeaSt convolution C -> D with W weight matrices over N
    vertices and E edges (see the module docstring)."""
    n, e, c, d, w = num_vertices, num_edges, in_channels, out_channels, num_weight_matrices
    flops = 2 * n * c * w * 2 + 2 * e * w * c + 2 * n * w * c * d
    return Work(flops, n * (c + d) * dtype_bytes + e * INDEX_BYTES)


def dense_work(num_vertices: int, in_channels: int, out_channels: int,
               dtype_bytes: int) -> Work:
    """The forward `Work` of a per-vertex dense layer C -> D over N rows."""
    n, c, d = num_vertices, in_channels, out_channels
    return Work(2 * n * c * d, n * (c + d) * dtype_bytes)


def step_factor(mode: str) -> int:
    """How many forward passes' worth of work a step of `mode` is (1 or 1 + BACKWARD_FACTOR).

    Raises:
      ValueError: for a mode not in MODES.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {list(MODES)}")
    return 1 if mode == "forward" else 1 + BACKWARD_FACTOR


def _used_edges(neighbors) -> int:
    """E of a convolution's adjacency: the SparseTensor's entries, or the used (non-zero
    weight) slots of a `NeighborTable` and its overflow rows."""
    import numpy as np
    import tensorflow as tf

    if isinstance(neighbors, tf.SparseTensor):
        return int(neighbors.indices.shape[0])
    used = int(np.count_nonzero(np.asarray(neighbors.weights)))
    if neighbors.overflow_weights is not None:
        used += int(np.count_nonzero(np.asarray(neighbors.overflow_weights)))
    return used


@contextlib.contextmanager
def _recorded_calls(records: list):
    """Within the block, every call of a FeaSt convolution or a per-vertex dense layer
    appends (kind, layer, input, neighbours) to `records`."""
    import keras

    from meshseg.nn.layers import FeatureSteeredConvolution, PointwiseConv1D

    originals = {cls: cls.call for cls in (FeatureSteeredConvolution, PointwiseConv1D,
                                           keras.layers.Dense)}

    def recording(cls, kind):
        def call(self, data, *args, **kwargs):
            records.append((kind, self, data, args[0] if args else None))
            return originals[cls](self, data, *args, **kwargs)
        return call

    FeatureSteeredConvolution.call = recording(FeatureSteeredConvolution, "conv")
    PointwiseConv1D.call = recording(PointwiseConv1D, "dense")
    keras.layers.Dense.call = recording(keras.layers.Dense, "dense")
    try:
        yield
    finally:
        for cls, call in originals.items():
            cls.call = call


def layer_works(model, features: Dict) -> List[Tuple[str, int, Work]]:
    """(layer name, rows N, forward `Work`) of every FeaSt convolution and per-vertex dense
    layer `model` calls on the batch `features` (the batch contract, `meshseg.batch`), in
    call order: one eager forward call, in inference mode. The bytes use each layer's
    compute dtype."""
    import numpy as np
    import tensorflow as tf

    records = []
    with _recorded_calls(records):
        model(features, training=False)
    works = []
    for kind, layer, data, neighbors in records:
        shape = data.shape
        rows = int(np.prod(shape[:-1]))
        dtype_bytes = tf.as_dtype(layer.compute_dtype).size
        if kind == "conv":
            work = conv_work(rows, _used_edges(neighbors), int(shape[-1]),
                             layer.num_output_channels, layer.num_weight_matrices, dtype_bytes)
        else:
            out_channels = layer.filters if hasattr(layer, "filters") else layer.units
            work = dense_work(rows, int(shape[-1]), out_channels, dtype_bytes)
        works.append((layer.name, rows, work))
    return works


def step_work(model, features: Dict, mode: str) -> Work:
    """The `Work` of one step of `model` (a built network of `meshseg.nn.networks`, in the
    precision it is timed in) on the batch `features`: the sum of `layer_works`, times
    `step_factor(mode)`.

    Raises:
      ValueError: for a mode not in MODES.
    """
    factor = step_factor(mode)
    total = Work(0.0, 0.0)
    for _, _, work in layer_works(model, features):
        total += work
    return total.scaled(factor)


def roofline_ms(work: Work, peak_gflops: float, bandwidth_gbs: float) -> float:
    """The bound of a step in ms: its FLOPs at `peak_gflops` (GFLOP/s) plus its bytes at
    `bandwidth_gbs` (GB/s, 1e9 bytes)."""
    return 1e3 * (work.flops / (peak_gflops * 1e9) + work.bytes / (bandwidth_gbs * 1e9))
