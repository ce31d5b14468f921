"""meshseg.tools.throughput: meshes/s and vertices/s of the input pipeline alone."""

from meshseg.tools.throughput import measure_throughput


def test_throughput_counts_meshes_and_vertices_per_pass(tiny_dataset):
    results = measure_throughput([tiny_dataset["train"]], batch_size=2, passes=2)
    assert [r["meshes"] for r in results] == [4, 4]
    assert results[0]["vertices"] == 2 * 162 + 2 * 42
    assert all(r["meshes_per_s"] > 0 and r["vertices_per_s"] > 0 for r in results)
