"""The batch contract: what one mesh and one batch of meshes look like as model inputs.

Every other part of meshseg imports this module and nothing here imports them: the data
pipeline produces these dicts, the network (`meshseg.nn`) and the training code consume
them, and the tools (prediction, benchmark) build them with `mesh_features`, the one
mesh -> features builder.

A batch is `(features, labels)` with B meshes, V = the largest vertex count and
E = the largest edge count in the batch (or the bucket shape, under XLA):

- features["vertices"]: float32 [B, V, 3], padded with 0.
- features["num_vertices"]: int32 [B].
- features["edges"]: int32 [B, E, 2], local vertex indices (row i, neighbour j) of each
  mesh's 1-ring with self-edges, sorted by row, padded with 0.
- features["edge_weights"]: float32 [B, E], the adjacency values a_ij (1 / degree(i)),
  padded with 0, so padded edges contribute nothing.
- features["num_edges"]: int32 [B].
- features["neighbors"]: int32 [B, V, K], the same adjacency as a neighbour table
  (`NeighborTable`): row i lists the neighbours of vertex i (K = `table_width`, the
  largest degree unless a few vertices have far more neighbours than the rest), unused
  slots hold i itself (0 in padded rows).
- features["neighbor_weights"]: float32 [B, V, K], the edge weights, 0 in unused slots.
- features["overflow_neighbors"], features["overflow_weights"]: int32 / float32 [B, O, K],
  the neighbours of the vertices with more than K, K to a row (O = 0 for most meshes);
  features["overflow_centers"]: int32 [B, O], the vertex of each overflow row. Padded
  with 0 (weight 0: padded rows contribute nothing).
- features["reverse_slots"]: int32 [B, V, K], for each used slot (i, k) holding j the slot
  of row j that holds i (`reverse_slots`), 0 in unused slots and padding;
  features["paired"]: bool [B], whether those pair every used slot of the mesh's table.
- features["inputs"]: float32 [B, V, F], the per-vertex input features of `data.features`
  concatenated in that order (`meshseg.config.feature_widths`: xyz 3, xyz_fourier 6 per
  octave, normals 3, hks 16); just the normalised positions (F = 3) by default. Padded
  with 0.
- The mesh hierarchy, when the records store one (`data.levels` = L > 0), for each coarser
  level l = 1..L the keys above of its own adjacency under `level_key(l, name)`
  ("level<l>/num_vertices", "level<l>/edges", ..., "level<l>/overflow_centers"; V_l
  vertices, E_l edges), and "level<l>/parents": int32 [B, V_{l-1}], the level-l vertex that
  each vertex of level l-1 is merged into (pooling: fine -> coarse; unpooling gathers
  back), padded with -1 (`PARENT_PADDING`). `level_features(features, l)` returns one
  level's keys under the level-0 names.
- features["mesh_id"]: string [B], where each mesh came from ("<shard>, record <i>"), for
  messages; `without_mesh_ids` drops it before XLA-compiled steps, which take no strings.
- labels: int32 [B, V] per-vertex classes >= 0, padded with `LABEL_PADDING`.
"""

from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

LABEL_PADDING = -1
PARENT_PADDING = -1
MESH_ID = "mesh_id"
# The keys of one level's adjacency (level 0: the mesh itself, under these names).
ADJACENCY_KEYS = ("num_vertices", "edges", "edge_weights", "num_edges", "neighbors",
                  "neighbor_weights", "overflow_neighbors", "overflow_weights",
                  "overflow_centers", "reverse_slots", "paired")

# Padding value of every feature and of the labels, as `tf.data` `padded_batch` takes them.
PADDING_VALUES = (
    {
        "vertices": tf.constant(0.0, tf.float32),
        "inputs": tf.constant(0.0, tf.float32),
        "num_vertices": tf.constant(0, tf.int32),
        "edges": tf.constant(0, tf.int32),
        "edge_weights": tf.constant(0.0, tf.float32),
        "num_edges": tf.constant(0, tf.int32),
        "neighbors": tf.constant(0, tf.int32),
        "neighbor_weights": tf.constant(0.0, tf.float32),
        "overflow_neighbors": tf.constant(0, tf.int32),
        "overflow_weights": tf.constant(0.0, tf.float32),
        "overflow_centers": tf.constant(0, tf.int32),
        "reverse_slots": tf.constant(0, tf.int32),
        "paired": tf.constant(False),
        MESH_ID: tf.constant("", tf.string),
    },
    tf.constant(LABEL_PADDING, tf.int32),
)



def level_key(level: int, name: str) -> str:
    """The feature key of `name` (one of `ADJACENCY_KEYS`, or "parents") at hierarchy
    level `level`: `name` itself at level 0, "level<l>/<name>" above."""
    return name if level == 0 else f"level{level}/{name}"


def num_levels(features: Dict[str, tf.Tensor]) -> int:
    """L, the coarser levels a feature dict (unbatched or batched) holds (0: none)."""
    level = 0
    while level_key(level + 1, "parents") in features:
        level += 1
    return level


def level_features(features: Dict[str, tf.Tensor], level: int) -> Dict[str, tf.Tensor]:
    """Level `level`'s adjacency keys of a feature dict under the level-0 names
    (`ADJACENCY_KEYS`; plus "parents" for l > 0), so `table_features` and the networks'
    adjacency builders read any level as they read the mesh."""
    names = ADJACENCY_KEYS + (("parents",) if level else ())
    return {name: features[level_key(level, name)] for name in names}


def padding_values(levels: int = 0):
    """The `tf.data` padding values of a `(features, labels)` element with `levels`
    coarser levels: `PADDING_VALUES`, each level's adjacency padded as the mesh's and its
    parents with `PARENT_PADDING`."""
    features, labels = PADDING_VALUES
    features = dict(features)
    for level in range(1, levels + 1):
        features |= {level_key(level, name): features[name] for name in ADJACENCY_KEYS}
        features[level_key(level, "parents")] = tf.constant(PARENT_PADDING, tf.int32)
    return features, labels


class Level(NamedTuple):
    """One coarser level of a mesh hierarchy, as the converter stores it.

    Attributes:
      edges: int32 [E_l, 2] the level's 1-ring with self-edges (as `mesh_edges`).
      edge_weights: float32 [E_l] their adjacency values.
      parents: int32 [V_{l-1}] the vertex of this level each vertex of the level below is
        merged into, in [0, V_l).
      num_vertices: V_l (int or int32 scalar).
    """

    edges: tf.Tensor
    edge_weights: tf.Tensor
    parents: tf.Tensor
    num_vertices: tf.Tensor


# Rows wider than this many times the mean degree (rounded up), plus 2, are split
# (`table_width`); mesh 1-rings (mean degree 7 with the self-edge, largest 9 to 13) never are.
SPLIT_FACTOR = 2


class NeighborTable(NamedTuple):
    """The adjacency in the ELL layout: row i lists the neighbours j of vertex i and a_ij.

    A vertex with more neighbours than the table is wide continues on overflow rows:
    overflow row r lists further neighbours of vertex `overflow_centers[r]`. So the table
    costs (V + O) x K cells, which grows with the edges, not with V x the largest degree.

    Attributes:
      neighbors: int32 [V, K], K = the table width. Unused slots may hold any valid vertex
        index.
      weights: float [V, K] adjacency values a_ij; 0 in unused slots.
      overflow_neighbors: int32 [O, K] further neighbours, or None (no overflow rows).
      overflow_weights: float [O, K] their adjacency values, 0 in unused slots, or None.
      overflow_centers: int32 [O] the vertex i each overflow row belongs to, or None.
      reverse: int32 [V, K] the flat index of each slot's reverse (`flat_reverse`), or
        None (not computed yet).
      paired: bool scalar, whether `reverse` pairs every used slot, or None.
    """

    neighbors: tf.Tensor
    weights: tf.Tensor
    overflow_neighbors: Optional[tf.Tensor] = None
    overflow_weights: Optional[tf.Tensor] = None
    overflow_centers: Optional[tf.Tensor] = None
    reverse: Optional[tf.Tensor] = None
    paired: Optional[tf.Tensor] = None


def reverse_slots(neighbors: tf.Tensor, weights: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Where each edge of a neighbour table is stored the other way round.

    For the used slot (i, k) of row i (a_ik != 0) holding neighbour j: the slot k' of row
    j that is used and holds i. Mesh 1-rings are symmetric, so this pairs the slots, and a
    sum over the slots that point at vertex j (a scatter) becomes a sum over the reverse
    slots of j's own row (a gather): the backward of `meshseg.nn.ops.gather_matmul` forms
    dL/dx and dL/dt that way, at the flat indices `flat_reverse`. It depends only on the
    mesh, so `mesh_features` computes it once per mesh (the pipeline caches it), not the
    train step (docs/experiments/2026-12-05-backward-sums-bias-gradient-reverse-slots.md).

    Args:
      neighbors: int32 [V, K] neighbour table (`NeighborTable.neighbors`).
      weights: float [V, K] adjacency values a_ik, 0 in unused slots.

    Returns:
      (slots int32 [V, K], paired bool scalar): k' of each used slot, 0 in unused slots
      and where row j holds no used i. `paired` is True when the reverse is a bijection of
      the used slots (every used slot has a used reverse, and the reverse of the reverse is
      the slot itself). It is False for an asymmetric table, a duplicate edge, or an edge
      whose reverse sits on an overflow row; users of the slots must then scatter instead.
    """
    num_vertices = tf.shape(neighbors)[0]
    used = weights != 0
    # back[i, k, k']: slot k' of row j = neighbors[i, k] is used and holds i.
    back = tf.gather(neighbors, neighbors) == tf.range(num_vertices)[:, tf.newaxis, tf.newaxis]
    back = back & tf.gather(used, neighbors)  # [V, K, K]
    found = used & tf.reduce_any(back, axis=-1)
    slots = tf.where(found, tf.argmax(tf.cast(back, tf.int32), axis=-1, output_type=tf.int32),
                     0)
    reverse = flat_reverse(neighbors, weights, slots)
    round_trip = tf.gather(tf.reshape(reverse, [-1]), reverse)
    paired = tf.reduce_all(~used | (found & (round_trip == _flat_slots(neighbors))))
    return slots, paired


def flat_reverse(neighbors: tf.Tensor, weights: tf.Tensor, slots: tf.Tensor) -> tf.Tensor:
    """int32 [V, K]: the flat index j*K + k' in the table's [V*K] flattening of each used
    slot's reverse (`reverse_slots`: `slots` holds k'), and an unused slot's own index
    (whose per-slot values are 0). `neighbors` [V, K] may be a batch's table flattened over
    its meshes (global row indices, K the batch's width)."""
    width = tf.shape(neighbors)[1]
    return tf.where(weights != 0, neighbors * width + slots, _flat_slots(neighbors))


def _flat_slots(neighbors: tf.Tensor) -> tf.Tensor:
    """int32 [V, K]: each slot's own index i*K + k in the table's [V*K] flattening."""
    shape = tf.shape(neighbors)
    return tf.reshape(tf.range(shape[0] * shape[1]), shape)


def with_reverse_slots(table: NeighborTable) -> NeighborTable:
    """`table` with its reverse slots (fields `reverse`: `flat_reverse`, and `paired`)."""
    slots, paired = reverse_slots(table.neighbors, table.weights)
    return table._replace(reverse=flat_reverse(table.neighbors, table.weights, slots),
                          paired=paired)


def table_width(degree: tf.Tensor) -> tf.Tensor:
    """K for a mesh with vertex degrees `degree` (int32 [V], self-edges counted): the
    largest degree, capped at `SPLIT_FACTOR` x the mean degree (rounded up) + 2, so that
    a few very high-degree vertices continue on overflow rows instead of widening every
    row (int32 scalar)."""
    mean = tf.math.ceil(tf.reduce_mean(tf.cast(degree, tf.float32)))
    return tf.minimum(tf.reduce_max(degree), SPLIT_FACTOR * tf.cast(mean, tf.int32) + 2)


def table_from_edges(rows: tf.Tensor, cols: tf.Tensor, weights: tf.Tensor, num_vertices,
                     width: Optional[int] = None) -> Tuple[NeighborTable, tf.Tensor]:
    """Packs COO edges, in any order, into a `NeighborTable` (TF ops, usable in graphs).

    Args:
      rows, cols: int32 [E] vertex i and neighbour j of each edge.
      weights: float [E] adjacency values.
      num_vertices: V (int or int32 scalar).
      width: a fixed table width K, without overflow rows: edges past slot K-1 of their
        row are dropped, and callers compare the returned degree with K. Default:
        `table_width` of the degrees, with overflow rows for the edges past it.

    Returns:
      (table, degree int32 [V]); edges keep their order within a row (continuing on the
      row's overflow rows, in order), unused slots point at the row's vertex with weight 0.
    """
    rows, cols = tf.convert_to_tensor(rows, tf.int32), tf.convert_to_tensor(cols, tf.int32)
    order = tf.argsort(rows, stable=True)
    rows, cols, weights = (tf.gather(a, order) for a in (rows, cols, weights))
    degree = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, num_vertices)
    slot = tf.range(tf.shape(rows)[0]) - tf.gather(tf.cumsum(degree, exclusive=True), rows)
    fixed = width is not None
    width = width if fixed else table_width(degree)
    # Edges past the table width land in one extra scratch column, sliced off below.
    index = tf.stack([rows, tf.minimum(slot, width)], axis=-1)
    own = tf.tile(tf.range(num_vertices)[:, tf.newaxis], [1, width + 1])
    neighbors = tf.tensor_scatter_nd_update(own, index, cols)[:, :width]
    table_weights = tf.scatter_nd(index, weights, tf.stack([num_vertices, width + 1]))[:, :width]
    if fixed:
        return NeighborTable(neighbors, table_weights), degree
    extra = tf.maximum((degree + width - 1) // width - 1, 0)  # overflow rows of each vertex
    centers = tf.repeat(tf.range(num_vertices), extra)
    over = slot >= width
    over_rows = tf.gather(tf.cumsum(extra, exclusive=True), rows) + slot // width - 1
    over_index = tf.boolean_mask(tf.stack([over_rows, slot % width], axis=-1), over)
    over_shape = tf.stack([tf.size(centers), width])
    overflow_neighbors = tf.tensor_scatter_nd_update(
        tf.tile(centers[:, tf.newaxis], [1, width]), over_index, tf.boolean_mask(cols, over))
    overflow_weights = tf.scatter_nd(over_index, tf.boolean_mask(weights, over), over_shape)
    return NeighborTable(neighbors, table_weights, overflow_neighbors, overflow_weights,
                         centers), degree


def _adjacency(edges, edge_weights, num_vertices, table: Optional[NeighborTable] = None
               ) -> Dict[str, tf.Tensor]:
    """The `ADJACENCY_KEYS` of one mesh or level, the table built when not given."""
    edges = tf.convert_to_tensor(edges, tf.int32)
    edge_weights = tf.convert_to_tensor(edge_weights, tf.float32)
    num_vertices = tf.convert_to_tensor(num_vertices, tf.int32)
    if table is None:
        table, _ = table_from_edges(edges[:, 0], edges[:, 1], edge_weights, num_vertices)
    slots, paired = reverse_slots(tf.convert_to_tensor(table.neighbors, tf.int32),
                                  tf.convert_to_tensor(table.weights, tf.float32))
    return {
        "num_vertices": num_vertices,
        "edges": edges,
        "edge_weights": edge_weights,
        "num_edges": tf.shape(edges, out_type=tf.int32)[0],
        "neighbors": tf.convert_to_tensor(table.neighbors, tf.int32),
        "neighbor_weights": tf.convert_to_tensor(table.weights, tf.float32),
        "overflow_neighbors": tf.convert_to_tensor(table.overflow_neighbors, tf.int32),
        "overflow_weights": tf.convert_to_tensor(table.overflow_weights, tf.float32),
        "overflow_centers": tf.convert_to_tensor(table.overflow_centers, tf.int32),
        "reverse_slots": slots,
        "paired": paired,
    }


def mesh_features(vertices, edges, edge_weights, table: Optional[NeighborTable] = None,
                  mesh_id=None, inputs=None, levels: Sequence[Level] = ()
                  ) -> Dict[str, tf.Tensor]:
    """The model inputs of one mesh (unbatched), from its vertices and 1-ring adjacency.

    The one builder of the feature dict: the pipeline maps it over parsed records, and
    prediction and the benchmark call it on arrays. Works eagerly and inside `tf.data`.

    Args:
      vertices: float32 [V, 3] positions, already normalised as the run normalises them.
      edges: int32 [E, 2] (row i, neighbour j), with self-edges.
      edge_weights: float32 [E] adjacency values a_ij.
      table: optional stored `NeighborTable` with its overflow rows; built from the edges
        (`table_from_edges`) when None.
      mesh_id: optional string naming the mesh's source, kept for messages.
      inputs: float32 [V, F] per-vertex input features; default: `vertices` (F = 3).
      levels: the coarser levels of the mesh's hierarchy, finest first (`Level`).

    Returns:
      dict with the unbatched shapes of the module docstring: "vertices" [V, 3],
      "inputs" [V, F], "num_vertices" [], "edges" [E, 2], "edge_weights" [E],
      "num_edges" [], "neighbors" and "neighbor_weights" [V, K], "overflow_neighbors" and
      "overflow_weights" [O, K], "overflow_centers" [O], "reverse_slots" [V, K] and
      "paired" [], each level's keys (`level_key`), and "mesh_id" [] when given.
    """
    vertices = tf.convert_to_tensor(vertices, tf.float32)
    num_vertices = tf.shape(vertices, out_type=tf.int32)[0]
    inputs = vertices if inputs is None else tf.convert_to_tensor(inputs, tf.float32)
    features = {"vertices": vertices, "inputs": inputs,
                **_adjacency(edges, edge_weights, num_vertices, table)}
    for index, level in enumerate(levels, start=1):
        adjacency = _adjacency(level.edges, level.edge_weights, level.num_vertices)
        adjacency["parents"] = tf.convert_to_tensor(level.parents, tf.int32)
        features |= {level_key(index, name): value for name, value in adjacency.items()}
    if mesh_id is not None:
        features[MESH_ID] = tf.convert_to_tensor(mesh_id, tf.string)
    return features


def table_features(features: Dict[str, tf.Tensor]) -> NeighborTable:
    """The `NeighborTable` held in a feature dict (unbatched or batched alike)."""
    return NeighborTable(features["neighbors"], features["neighbor_weights"],
                         features["overflow_neighbors"], features["overflow_weights"],
                         features["overflow_centers"])


def as_batch(features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """A batch of one: every feature of `mesh_features` with a leading axis of size 1."""
    return {key: value[tf.newaxis] for key, value in features.items()}


def without_mesh_ids(features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """`features` without the string "mesh_id" (XLA-compiled functions take no strings)."""
    return {key: value for key, value in features.items() if key != MESH_ID}


def real_vertices(labels: tf.Tensor) -> tf.Tensor:
    """float32 mask [B, V]: 1 for real vertices, 0 for padding (labels == LABEL_PADDING)."""
    return tf.cast(labels != LABEL_PADDING, tf.float32)
