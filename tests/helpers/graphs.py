"""Random graphs, convolution variables and small mesh batches shared by the op and layer tests.

A plain helper module (not a conftest): tests import what they need from here. Every builder
takes a seed and returns numpy arrays, so the same inputs can be fed to a float32 op under
test and a float64 reference.
"""

import dataclasses
import functools
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import pytest
import tensorflow as tf
import trimesh

import meshseg.nn.ops
from meshseg.batch import PADDING_VALUES, mesh_features
from meshseg.config.schema import ImplConfig
from meshseg.data.mesh.adjacency import mesh_edges

# The implementation a run uses unless told otherwise: the one `-m "not slow"` checks
# wherever a test repeats a check for every implementation.
DEFAULT_IMPL = ImplConfig().name


def slow_unless(fast: bool, *values):
    """pytest.param(*values), marked slow unless `fast`."""
    return pytest.param(*values, marks=() if fast else pytest.mark.slow)


VARIABLE_NAMES = ("var_u", "var_v", "var_c", "var_w", "var_b")


@dataclasses.dataclass(frozen=True)
class GraphCase:
    """Shape of one random feature-steered convolution problem.

    Attributes:
      name: test id.
      batch_shape: [A1, ..., An]; () for a 2-D problem.
      num_vertices: V, rows of `data` (padded size when `padded`).
      num_channels: C. num_output_channels: D. num_weight_matrices: W.
      num_neighbor_columns: V' <= V, the column count of `neighbors`; None for V' = V.
      padded: pass `sizes`; the first graph has V vertices, the others 2 to V-1.
      weighted: random positive adjacency values in [0.1, 2] instead of 1 / degree.
    """

    name: str
    batch_shape: Tuple[int, ...] = ()
    num_vertices: int = 9
    num_channels: int = 3
    num_output_channels: int = 4
    num_weight_matrices: int = 4
    num_neighbor_columns: Optional[int] = None
    padded: bool = False
    weighted: bool = False


class Graph(NamedTuple):
    """A random problem: data [A.., V, C], neighbors indices [E, n+2] int64 (canonical
    order) with values [E] and dense shape [A.., V, V'], sizes [A..] int32 or None."""

    data: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dense_shape: Tuple[int, ...]
    sizes: Optional[np.ndarray]

    @property
    def max_degree(self) -> int:
        """The largest number of stored entries in one row of `neighbors`."""
        return int(np.max(np.unique(self.indices[:, :-1], axis=0, return_counts=True)[1]))

    def neighbors(self, dtype=tf.float32, values=None, dense_shape=None) -> tf.SparseTensor:
        """The adjacency as a SparseTensor; `values` may be a (watched) tensor to
        differentiate through, `dense_shape` overrides the shape (e.g. padded to square)."""
        values = tf.cast(self.values, dtype) if values is None else values
        return tf.SparseTensor(self.indices, values, dense_shape or self.dense_shape)


def implementation(name: str, max_degree: int):
    """`meshseg.nn.ops.IMPLEMENTATIONS[name]`, with the static neighbour-table width bound for
    the implementations in `meshseg.nn.ops.NEIGHBOR_TABLE_IMPLS` (which need it under XLA)."""
    op = meshseg.nn.ops.IMPLEMENTATIONS[name]
    if name in getattr(meshseg.nn.ops, "NEIGHBOR_TABLE_IMPLS", frozenset()):
        return functools.partial(op, max_degree=max_degree)
    return op


def random_neighbors(rng: np.random.Generator, num_rows: int, num_columns: int,
                     edge_probability: float = 0.3) -> np.ndarray:
    """Random edges (i, j) with i < num_rows, j < num_columns, sorted by (i, j).

    Self-edges (i, i) are always present for i < num_columns; a row with no possible
    self-edge (i >= num_columns) gets one random neighbour, so every row has an edge.
    Returns int64 [E, 2].
    """
    mask = rng.random((num_rows, num_columns)) < edge_probability
    diagonal = np.arange(min(num_rows, num_columns))
    mask[diagonal, diagonal] = True
    for row in range(num_columns, num_rows):
        mask[row, rng.integers(num_columns)] = True
    return np.argwhere(mask).astype(np.int64)


def random_graph(case: GraphCase, seed: int = 0, data_scale: float = 1.0) -> Graph:
    """Builds `case` with data ~ N(0, data_scale^2); padded rows of data are non-zero noise,
    so a padded vertex leaking into the output would show."""
    rng = np.random.default_rng(seed)
    num_rows = case.num_vertices
    num_columns = case.num_neighbor_columns or num_rows
    data = (data_scale * rng.normal(size=case.batch_shape + (num_rows, case.num_channels))
            ).astype(np.float32)
    num_graphs = int(np.prod(case.batch_shape, dtype=np.int64))
    sizes = np.full(num_graphs, num_rows, np.int32)
    if case.padded:  # the first graph fills all V rows, the others are padded
        sizes[1:] = rng.integers(2, num_rows, size=num_graphs - 1)
    all_indices, all_values = [], []
    for graph, size in enumerate(sizes):
        rows_cols = random_neighbors(rng, int(size), min(int(size), num_columns))
        if case.weighted:
            values = rng.uniform(0.1, 2.0, size=len(rows_cols))
        else:
            degree = np.bincount(rows_cols[:, 0], minlength=int(size))
            values = 1.0 / degree[rows_cols[:, 0]]
        batch_index = np.unravel_index(graph, case.batch_shape) if case.batch_shape else ()
        prefix = np.broadcast_to(np.array(batch_index, np.int64), (len(rows_cols), len(batch_index)))
        all_indices.append(np.concatenate([prefix, rows_cols], axis=1))
        all_values.append(values)
    dense_shape = case.batch_shape + (num_rows, num_columns)
    return Graph(data, np.concatenate(all_indices), np.concatenate(all_values).astype(np.float32),
                 dense_shape,
                 sizes.reshape(case.batch_shape) if case.padded and case.batch_shape else None)


def random_variables(num_channels: int, num_weight_matrices: int, num_output_channels: int,
                     seed: int = 0, stddev: float = 0.5) -> Dict[str, np.ndarray]:
    """float32 u, v [C, W], c [W], w [W, C, D], b [D] ~ N(0, stddev^2)."""
    rng = np.random.default_rng(seed + 1000)
    shapes = {"var_u": (num_channels, num_weight_matrices),
              "var_v": (num_channels, num_weight_matrices),
              "var_c": (num_weight_matrices,),
              "var_w": (num_weight_matrices, num_channels, num_output_channels),
              "var_b": (num_output_channels,)}
    return {name: (stddev * rng.normal(size=shape)).astype(np.float32)
            for name, shape in shapes.items()}


def output_and_gradients(op, graph: Graph, variables: Dict[str, np.ndarray], dtype, xla: bool,
                         tie: bool = False, seed: int = 7):
    """Runs `op` (a `meshseg.nn.ops` signature) on `graph` in `dtype` and differentiates
    sum(output * g) for a fixed random cotangent g.

    With `xla` the whole computation runs inside `tf.function(jit_compile=True)`. With `tie`,
    var_v = -var_u inside the differentiated function, so there is no var_v gradient.

    Returns:
      output as float64 numpy [A.., V, D], and a dict of float64 numpy gradients keyed
      "data", "values" (the adjacency values) and the variable names.
    """
    rng = np.random.default_rng(seed)
    cotangent = tf.constant(rng.normal(size=graph.data.shape[:-1] + variables["var_b"].shape),
                            dtype)
    sizes = None if graph.sizes is None else tf.constant(graph.sizes)
    sources = {"data": graph.data, "values": graph.values, **variables}
    if tie:
        del sources["var_v"]
    sources = {name: tf.constant(value, dtype) for name, value in sources.items()}

    def forward(sources):
        with tf.GradientTape() as tape:
            tape.watch(sources)
            var_v = -sources["var_u"] if tie else sources["var_v"]
            output = op(sources["data"], graph.neighbors(values=sources["values"]), sizes,
                        sources["var_u"], var_v, sources["var_c"], sources["var_w"],
                        sources["var_b"], xla=xla)
            loss = tf.reduce_sum(output * cotangent)
        gradients = tape.gradient(loss, sources)
        return output, {name: tf.convert_to_tensor(g) for name, g in gradients.items()}

    if xla:
        forward = tf.function(forward, jit_compile=True, autograph=False)
    output, gradients = forward(sources)
    return (output.numpy().astype(np.float64),
            {name: g.numpy().astype(np.float64) for name, g in gradients.items()})


def feast_numpy(data: np.ndarray, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray,
                var_u, var_v, var_c, var_w, var_b) -> np.ndarray:
    """float64 FeaStNet convolution of a 2-D graph with a max-shifted softmax.

    data [V, C]; rows, cols, weights [E]; returns [V, D]. Finite for any finite input.
    """
    data, var_u, var_v, var_c, var_w, var_b = (
        np.asarray(a, np.float64) for a in (data, var_u, var_v, var_c, var_w, var_b))
    logits = data[rows] @ var_u + data[cols] @ var_v + var_c  # [E, W]
    q = np.exp(logits - logits.max(axis=-1, keepdims=True))
    q /= q.sum(axis=-1, keepdims=True)
    edge_terms = np.einsum("e,ew,ec,wcd->ed", np.asarray(weights, np.float64), q, data[cols], var_w)
    out = np.zeros((data.shape[0], var_w.shape[-1]))
    np.add.at(out, rows, edge_terms)
    return out + var_b


def assert_close_to_max(actual, expected, rtol: float, name: str = "") -> None:
    """max |actual - expected| <= rtol * max |expected|, both arrays finite.

    Errors are measured against the largest reference magnitude because an element that
    is a cancelling sum of O(1) terms has an O(eps) absolute error but no meaningful
    elementwise relative error.
    """
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    assert np.all(np.isfinite(actual)), f"{name}: non-finite values"
    scale = np.max(np.abs(expected))
    error = np.max(np.abs(actual - expected))
    assert error <= rtol * scale, f"{name}: max error {error:.3g} > {rtol:g} * {scale:.3g}"


# --- Triangle meshes as the padded feature dicts of meshseg.data.pipeline.dataset ---------

def mesh_batch(meshes: Sequence[trimesh.Trimesh]) -> Dict[str, tf.Tensor]:
    """A padded batch of meshes in the batch contract (`meshseg.batch`): each mesh's
    `mesh_features` of its 1-ring (`mesh_edges`), padded as the pipeline pads them."""
    features = [mesh_features(np.asarray(mesh.vertices, np.float32),
                              *mesh_edges(np.asarray(mesh.faces), len(mesh.vertices)))
                for mesh in meshes]
    signature = {key: tf.TensorSpec([None] * value.shape.rank, value.dtype)
                 for key, value in features[0].items()}
    dataset = tf.data.Dataset.from_generator(lambda: iter(features), output_signature=signature)
    padding = {key: PADDING_VALUES[0][key] for key in signature}
    return next(iter(dataset.padded_batch(len(features), padding_values=padding)))


def two_spheres() -> Dict[str, tf.Tensor]:
    """A batch of an icosphere (42 vertices) and an icosahedron (12 vertices, padded)."""
    return mesh_batch([trimesh.creation.icosphere(subdivisions=1),
                       trimesh.creation.icosphere(subdivisions=0)])


def fan_grid(num_fan: int = 1000) -> trimesh.Trimesh:
    """A 51 x 51 grid (2,601 vertices, degree <= 7 with the self-edge) whose corner vertex 0
    also has `num_fan` fan triangles to the grid's other vertices: one vertex of degree
    num_fan + 3, as a bad remesh leaves it."""
    n = 51
    rows, cols = np.divmod(np.arange(n * n), n)
    vertices = np.stack([cols, rows, np.zeros(n * n)], axis=1).astype(np.float64)
    quads = [(r * n + c, r * n + c + 1, (r + 1) * n + c, (r + 1) * n + c + 1)
             for r in range(n - 1) for c in range(n - 1)]
    faces = [(a, b, d) for a, b, _, d in quads] + [(a, d, c) for a, _, c, d in quads]
    faces += [(0, 2 + k, 3 + k) for k in range(num_fan)]
    return trimesh.Trimesh(vertices, np.asarray(faces), process=False)

