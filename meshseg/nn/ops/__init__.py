"""Feature-steered convolution implementations, all with tensorflow-graphics' signature.

Every entry of `IMPLEMENTATIONS` is called as
`op(data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b, xla=False)` with the
shapes of `tensorflow_graphics.geometry.convolution.graph_convolution.feature_steered_convolution`
and returns the same values; `xla=True` selects a formulation that compiles under
`tf.function(jit_compile=True)`. Those in `NEIGHBOR_TABLE_IMPLS` also accept a
`meshseg.batch.NeighborTable` instead of the SparseTensor, and take `max_degree` (the static table
width a SparseTensor needs under XLA).
"""

from typing import Callable, Dict

from meshseg.nn.ops.block_sparse import block_sparse
from meshseg.nn.ops.gather_matmul import gather_matmul
from meshseg.nn.ops.gather_sum import gather_sum
from meshseg.nn.ops.sparse_matmul import sparse_matmul

IMPLEMENTATIONS: Dict[str, Callable] = {
    "gather_sum": gather_sum,
    "sparse_matmul": sparse_matmul,
    "block_sparse": block_sparse,
    "gather_matmul": gather_matmul,
}

# Implementations that also accept a `NeighborTable` and take `max_degree`.
NEIGHBOR_TABLE_IMPLS = frozenset({"gather_matmul"})

# Implementations computed in float32 under a mixed-precision policy (the library op, and
# the sparse-matmul kernels, whose softmax normalisation is spread over several ops).
FLOAT32_IMPLS = frozenset({"gather_sum", "sparse_matmul", "block_sparse"})

# How each implementation runs under XLA, for the run log.
XLA_FORMULATION = {
    "gather_sum": "library op on inputs flattened to 2-D (its batch flattening uses SparseReshape)",
    "sparse_matmul": "gather + unsorted_segment_sum instead of SparseTensorDenseMatMul",
    "block_sparse": "gather + unsorted_segment_sum instead of SparseTensorDenseMatMul",
    "gather_matmul": "the same ops (all have XLA kernels), with a static neighbour-table width; "
                     "the per-vertex [W, K] x [K, C] products as a product summed over K, and "
                     "the backward's reverse-slot sums as gather + sum, which XLA fuses",
}


def get_implementation(name: str) -> Callable:
    """Returns the implementation called `name`.

    Raises:
      ValueError: if `name` is not one of `IMPLEMENTATIONS`.
    """
    try:
        return IMPLEMENTATIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown feature-steered convolution impl {name!r}; "
            f"choose one of {sorted(IMPLEMENTATIONS)}") from None
