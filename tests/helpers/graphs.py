"""Random graphs, convolution variables and small mesh batches shared by the op and layer tests.

A plain helper module (not a conftest): tests import what they need from here. Every builder
takes a seed and returns numpy arrays, so the same inputs can be fed to a float32 op under
test and a float64 reference.
"""

import dataclasses
import functools
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import trimesh

import meshseg.nn.ops

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


# --- Triangle meshes as the padded feature dicts of meshseg.data.pipeline -------------------

def one_ring(triangles: np.ndarray, num_vertices: int) -> Tuple[np.ndarray, np.ndarray]:
    """1-ring edges with self-edges, int32 [E, 2] sorted by (i, j), and weights 1/degree(i)."""
    sides = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    self_edges = np.repeat(np.arange(num_vertices)[:, None], 2, axis=1)
    edges = np.unique(np.concatenate([sides, sides[:, ::-1], self_edges]), axis=0)
    degree = np.bincount(edges[:, 0], minlength=num_vertices)
    return edges.astype(np.int32), (1.0 / degree[edges[:, 0]]).astype(np.float32)


def mesh_batch(meshes: Sequence[trimesh.Trimesh]) -> Dict[str, tf.Tensor]:
    """Pads meshes into the feature dict of `meshseg.data.pipeline`.

    Returns "vertices" float32 [B, V, 3], "edges" int32 [B, E, 2] (padded with (0, 0)),
    "edge_weights" float32 [B, E] (padded with 0), "num_vertices" int32 [B], and the same
    adjacency as neighbour tables "neighbors" int32 [B, V, K] (unused slots hold the
    vertex itself, padded vertices 0) and "neighbor_weights" float32 [B, V, K] (0 unused).
    """
    rings: List[Tuple[np.ndarray, np.ndarray]] = [
        one_ring(np.asarray(mesh.faces), len(mesh.vertices)) for mesh in meshes]
    max_vertices = max(len(mesh.vertices) for mesh in meshes)
    max_edges = max(len(edges) for edges, _ in rings)
    vertices = np.zeros((len(meshes), max_vertices, 3), np.float32)
    edges = np.zeros((len(meshes), max_edges, 2), np.int32)
    edge_weights = np.zeros((len(meshes), max_edges), np.float32)
    max_degree = max(np.bincount(edges[:, 0]).max() for edges, _ in rings)
    table = np.zeros((len(meshes), max_vertices, max_degree), np.int32)
    table_weights = np.zeros((len(meshes), max_vertices, max_degree), np.float32)
    for b, (mesh, (mesh_edges, weights)) in enumerate(zip(meshes, rings)):
        vertices[b, :len(mesh.vertices)] = mesh.vertices
        edges[b, :len(mesh_edges)] = mesh_edges
        edge_weights[b, :len(weights)] = weights
        table[b, :len(mesh.vertices)] = np.arange(len(mesh.vertices))[:, np.newaxis]
        for slot_edges in np.split(np.arange(len(mesh_edges)),
                                   np.cumsum(np.bincount(mesh_edges[:, 0]))[:-1]):
            row = mesh_edges[slot_edges[0], 0]
            table[b, row, :len(slot_edges)] = mesh_edges[slot_edges, 1]
            table_weights[b, row, :len(slot_edges)] = weights[slot_edges]
    return {"vertices": tf.constant(vertices), "edges": tf.constant(edges),
            "edge_weights": tf.constant(edge_weights),
            "neighbors": tf.constant(table), "neighbor_weights": tf.constant(table_weights),
            "num_vertices": tf.constant([len(mesh.vertices) for mesh in meshes], tf.int32)}


def two_spheres() -> Dict[str, tf.Tensor]:
    """A batch of an icosphere (42 vertices) and an icosahedron (12 vertices, padded)."""
    return mesh_batch([trimesh.creation.icosphere(subdivisions=1),
                       trimesh.creation.icosphere(subdivisions=0)])
