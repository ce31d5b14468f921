"""Specification of the mesh hierarchy (meshseg.data.features.hierarchy) and the derived fields
(meshseg.data.features.derived)."""

from pathlib import Path

import numpy as np
import pytest
import trimesh

from helpers.runs import PROJECT
from helpers.shared_data import shared_data
from meshseg.config import feature_widths
from meshseg.data.features.derived import derive
from meshseg.data.features.hierarchy import decimate, jittered_hierarchy, mesh_hierarchy
from meshseg.data.features.stored import stored_features


def _sphere(subdivisions=4):
    sphere = trimesh.creation.icosphere(subdivisions=subdivisions)
    return np.asarray(sphere.vertices, np.float32), np.asarray(sphere.faces, np.int32)


def test_levels_shrink_by_about_the_coarsening_ratio():
    vertices, triangles = _sphere(4)  # 2562 vertices
    levels = mesh_hierarchy(vertices, triangles, 3, coarsening=4.0)
    counts = [len(vertices)] + [level.num_vertices for level in levels]
    for fine, coarse in zip(counts, counts[1:]):
        assert 3.0 < fine / coarse < 5.5, counts


def _parents(levels):
    return [level.parents for level in levels]


def test_jittered_hierarchies_are_seeded_draws_of_the_same_coarsening():
    """Seed 0 is the mesh's own hierarchy; another seed is a different hierarchy (else an
    average over them would be one prediction) that the same seed draws again, shrinking
    level by level as the mesh's own does."""
    vertices, triangles = _sphere(4)
    own = mesh_hierarchy(vertices, triangles, 3)
    for got, want in zip(_parents(jittered_hierarchy(vertices, triangles, 3, 4.0, 0, 1e-4)),
                         _parents(own)):
        np.testing.assert_array_equal(got, want)
    first, again, second = (jittered_hierarchy(vertices, triangles, 3, 4.0, seed, 1e-4)
                            for seed in (1, 1, 2))
    for got, want in zip(_parents(first), _parents(again)):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(first[0].parents, own[0].parents)
    assert not np.array_equal(first[0].parents, second[0].parents)
    for draw in (first, second):
        counts = np.array([level.num_vertices for level in draw])
        mesh_counts = np.array([level.num_vertices for level in own])
        assert np.all(np.abs(counts / mesh_counts - 1) < 0.1), (counts, mesh_counts)


def test_jittered_hierarchy_refuses_a_negative_seed_and_a_mesh_without_area(tetrahedron):
    vertices, triangles = _sphere(1)
    with pytest.raises(ValueError, match="seed and jitter must be >= 0"):
        jittered_hierarchy(vertices, triangles, 1, 4.0, -1, 1e-4)
    flat = np.zeros([5, 3], np.float32)
    with pytest.raises(ValueError, match="zero surface area"):
        jittered_hierarchy(flat, tetrahedron["triangles"], 1, 4.0, 1, 1e-4)


def test_level_edges_are_symmetric_with_self_edges_and_rows_summing_to_one():
    vertices, triangles = _sphere(3)
    for level in mesh_hierarchy(vertices, triangles, 2):
        pairs = {tuple(edge) for edge in level.edges.tolist()}
        assert all((j, i) in pairs for i, j in pairs)
        assert all((i, i) in pairs for i in range(level.num_vertices))
        rows = np.bincount(level.edges[:, 0], level.edge_weights, level.num_vertices)
        np.testing.assert_allclose(rows, 1.0, rtol=1e-6)


def test_parents_are_in_range_and_every_coarse_vertex_has_a_child():
    vertices, triangles = _sphere(3)
    below = len(vertices)
    for level in mesh_hierarchy(vertices, triangles, 3):
        assert level.parents.dtype == np.int32 and level.parents.shape == (below,)
        assert level.parents.min() >= 0 and level.parents.max() < level.num_vertices
        assert len(np.unique(level.parents)) == level.num_vertices
        below = level.num_vertices


def test_an_unreferenced_vertex_gets_the_nearest_coarse_vertex_as_parent():
    vertices, triangles = _sphere(3)
    stray = np.array([[10.0, 0.0, 0.0]], np.float32)
    coarse, _, parents = decimate(np.concatenate([vertices, stray]), triangles, 4.0)
    assert 0 <= parents[-1] < len(coarse)
    nearest = np.argmin(np.linalg.norm(coarse - stray, axis=1))
    assert parents[-1] == nearest
    assert len(np.unique(parents)) == len(coarse)


def test_tiny_and_triangle_free_meshes_still_give_valid_levels(tetrahedron):
    collapsed = mesh_hierarchy(tetrahedron["vertices"], tetrahedron["triangles"], 2)
    assert [level.num_vertices for level in collapsed] == [1, 1]
    np.testing.assert_array_equal(collapsed[0].parents, np.zeros(5))
    points = mesh_hierarchy(tetrahedron["vertices"], np.zeros([0, 3], np.int32), 1)
    np.testing.assert_array_equal(points[0].parents, np.arange(5))
    assert points[0].edges.tolist() == [[i, i] for i in range(5)]


def test_derive_gives_the_schema_widths_of_normals_and_hks():
    vertices, triangles = _sphere(2)
    derived = derive(vertices, triangles, ["xyz", "hks", "normals"], 1)
    assert {name: values.shape[1] for name, values in derived.features.items()} == {
        name: feature_widths()[name] for name in ("normals", "hks")}
    assert all(values.dtype == np.float32 and np.isfinite(values).all()
               for values in derived.features.values())
    assert len(derived.levels) == 1
    assert stored_features(["hks", "xyz", "normals"]) == ("normals", "hks")


def test_derive_refuses_hks_of_a_mesh_without_area(tetrahedron):
    flat = np.zeros_like(tetrahedron["vertices"])
    with pytest.raises(ValueError, match="area"):
        derive(flat, tetrahedron["triangles"], ["hks"])


REAL_MESHES = [(None, "data/rna_sample/ply/1VQ6_9.ply"),
               ("../shared/data", "rna/ply/3JBN_AB.ply"),  # 2561 unreferenced vertices
               ("../shared/data", "human_parts/meshes/iso/tr_reg_iso_080.ply")]


@pytest.mark.parametrize("where, path", REAL_MESHES,
                         ids=[Path(path).name for _, path in REAL_MESHES])
def test_real_messy_meshes_give_surjective_parents_at_every_level(where, path):
    path = PROJECT / path if where is None else shared_data(path)
    mesh = trimesh.load(path, process=False)
    vertices, triangles = np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces)
    below = len(vertices)
    for level in mesh_hierarchy(vertices, triangles, 3, 4.0):
        assert level.parents.shape == (below,)
        assert len(np.unique(level.parents)) == level.num_vertices
        assert 3.0 < below / level.num_vertices < 5.5
        below = level.num_vertices
