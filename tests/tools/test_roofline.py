"""`meshseg.tools.bench.roofline`: the work of a step, counted by hand and on both networks."""

import numpy as np
import pytest

from helpers.hierarchy import grid_mesh_features, padded_batch
from meshseg.batch import level_key
from meshseg.nn.networks import build_network
from meshseg.tools.bench import roofline
from meshseg.tools.bench.worker import icosphere_batch

DEMO = dict(name="demo", num_weight_matrices=8, input_channels=16, conv_channels=(32, 64),
            hidden_channels=256)


def test_one_layers_work_by_hand():
    # conv 1 -> 2, W = 1, one vertex, one edge: x u and x v 2*1*1*1*2 = 4, aggregation
    # 2*1*1*1 = 2, W_m products 2*1*1*1*2 = 4; bytes 1 * (1 + 2) * 4 + one entry of 8
    assert roofline.conv_work(1, 1, 1, 2, 1, 4) == (10, 20)
    assert roofline.dense_work(3, 2, 5, 2) == (60, 42)  # 2*3*2*5; 3 rows * 7 values * 2 B
    assert roofline.step_factor("forward") == 1 and roofline.step_factor("train") == 3
    with pytest.raises(ValueError, match="forward"):
        roofline.step_factor("inference")


def demo_net(precision="float32", impl="gather_matmul", num_classes=6):
    net = build_network(num_classes, impl, DEMO, input_width=3, xla=False, precision=precision)
    net.build_from_config({})
    return net


@pytest.mark.parametrize("impl", ["gather_matmul", "sparse_matmul"])
def test_the_demo_networks_step_is_the_sum_of_its_layers_by_hand(impl):
    """Two icospheres of 42 vertices: N = 84 rows; E = 84 self-edges + 2 x 120 x 2 directed
    edges = 564 used adjacency entries, in the table and in the sparse matrix alike."""
    features, _ = icosphere_batch(42, 2, 6)
    n, e, w, k = 84, 564, 8, 6
    flops = (2 * n * 3 * 16
             + 2 * n * 16 * w * 2 + 2 * e * w * 16 + 2 * n * w * 16 * 32
             + 2 * n * 32 * w * 2 + 2 * e * w * 32 + 2 * n * w * 32 * 64
             + 2 * n * 64 * 256 + 2 * n * 256 * k)
    values = n * ((3 + 16) + (16 + 32) + (32 + 64) + (64 + 256) + (256 + k))
    work = roofline.step_work(demo_net(impl=impl), features, "forward")
    assert work.flops == flops
    assert work.bytes == values * 4 + 2 * e * roofline.INDEX_BYTES
    assert roofline.step_work(demo_net(impl=impl), features, "train") == work.scaled(3)


def test_bfloat16_moves_fewer_bytes_for_the_same_flops():
    features, _ = icosphere_batch(42, 2, 6)
    full = roofline.step_work(demo_net("float32"), features, "train")
    half = roofline.step_work(demo_net("mixed_bfloat16"), features, "train")
    assert half.flops == full.flops
    # N = 84, E = 564 (above): every layer's activations at 2 bytes but the logits layer's,
    # which computes in float32; the adjacency entries stay 8 bytes
    n, e = 84, 564
    forward = n * (19 + 48 + 96 + 320) * 2 + n * (256 + 6) * 4 + 2 * e * roofline.INDEX_BYTES
    assert half.bytes == 3 * forward < full.bytes


def test_the_multi_scale_networks_layers_run_on_their_levels_vertices():
    features = padded_batch([grid_mesh_features(9, 7, 2, 5), grid_mesh_features(5, 6, 2, 5, 1)],
                            2)
    net = build_network(4, "gather_matmul", dict(
        name="feastnet_unet", num_weight_matrices=3, input_channels=8, conv_channels=(8, 12, 16),
        hidden_channels=16, convs_per_level=1), input_width=5, xla=False)
    net.build_from_config({})
    works = roofline.layer_works(net, features)
    level_rows = [2 * int(features[level_key(level, "neighbors")].shape[1])
                  for level in range(3)]
    conv_rows = [rows for name, rows, _ in works if name == "feast"]
    assert sorted(set(conv_rows)) == sorted(set(level_rows))
    assert {rows for _, rows, _ in works} >= set(level_rows)  # and the dense layers
    total = roofline.step_work(net, features, "backward")
    assert total.flops == 3 * sum(work.flops for _, _, work in works)


def test_the_bound_adds_the_time_at_the_peak_and_at_the_bandwidth():
    # 4 GFLOP at 200 GFLOP/s = 20 ms; 1 GB at 10 GB/s = 100 ms
    assert roofline.roofline_ms(roofline.Work(4e9, 1e9), 200.0, 10.0) == pytest.approx(120.0)
    assert np.isclose(roofline.roofline_ms(roofline.Work(0, 0), 1.0, 1.0), 0.0)
