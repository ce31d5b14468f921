"""Every op of every implementation's train step has a GPU kernel for its dtypes, and the
step compiles with XLA as a whole: checked on a CPU from TensorFlow's kernel registry
(`meshseg.train.device.gpu_kernels`), for both networks and the three precisions.

The networks are shrunk (one graph convolution; the U-Net with one coarser level and one
block per level, the default run's head options on) on a one-triangle batch: the step's op
types and dtypes do not depend on the sizes, and a trace costs seconds per thousand ops.

`-m "not slow"` checks every implementation in float32 and the default one (gather_matmul)
in every precision and under XLA; the mixed precisions and XLA compilations of the other
implementations, the same checks of other dtypes, run in the full suite.
"""

import pytest
import tensorflow as tf

from helpers.graphs import DEFAULT_IMPL, slow_unless
from meshseg.config import OptimizerConfig
from meshseg.nn.model import one_triangle
from meshseg.nn.networks import build_network
from meshseg.nn.ops import IMPLEMENTATIONS
from meshseg.train.device import gpu_kernels
from meshseg.train.device.gpu_kernels import (HOST_OPS, crossing_ops, has_gpu_kernel,
                                              ops_without_gpu_kernel, step_graph_def)
from meshseg.train.run import build_optimizer
from meshseg.train.loop.step import TrainStep

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")

# (settings, coarser levels of the batch) per network.
NETWORKS = {
    "demo": (dict(name="demo", input_channels=8, conv_channels=[8], hidden_channels=8), 0),
    "feastnet_unet": (dict(name="feastnet_unet", input_channels=8, conv_channels=[8, 8],
                           hidden_channels=8, hidden_layers=2, convs_per_level=1,
                           input_skip=True, global_skip=True, global_scale=True), 1),
}


def tiny_step(network: str, impl: str, precision: str, jit: bool):
    """(TrainStep, features, labels): the shrunk `network` with the run's optimizer (loss
    scaling under mixed_float16) on a one-triangle batch with 4 classes."""
    settings, levels = NETWORKS[network]
    model = build_network(4, impl, settings, input_width=3, xla=jit, precision=precision)
    model.build_from_config({})
    optimizer = build_optimizer(model, OptimizerConfig(name="adam", learning_rate=1e-3,
                                                schedule="exponential", weight_decay=0.0), precision, 10)
    step = TrainStep(model, optimizer, jit, tf.distribute.get_strategy())
    return step, one_triangle(3, levels), tf.zeros([1, 3], tf.int32)


def test_finds_ops_without_a_gpu_kernel_for_their_dtypes_also_inside_called_functions():
    @tf.function
    def inner(x):
        return tf.matmul(tf.cast(x, tf.int32), tf.cast(x, tf.int32))  # no int32 GPU MatMul

    @tf.function
    def outer(x):
        tf.print(x)  # PrintV2, StringFormat: host only
        return inner(x), tf.matmul(x, x)

    graph_def = outer.get_concrete_function(tf.TensorSpec([2, 2])).graph.as_graph_def()
    missing = {(m.op_type, m.dtypes) for m in ops_without_gpu_kernel(graph_def)}
    assert {("MatMul", ("T=int32",)), ("PrintV2", ())} <= missing
    assert ("MatMul", ("T=float32",)) not in missing
    inner_matmul = next(m for m in ops_without_gpu_kernel(graph_def) if m.op_type == "MatMul")
    assert inner_matmul.where.startswith("__inference_inner")


def test_a_kernel_matches_only_the_dtypes_its_constraints_allow():
    assert has_gpu_kernel("UnsortedSegmentSum", {"T": (tf.bfloat16.as_datatype_enum,),
                                                 "Tindices": (tf.int32.as_datatype_enum,)})
    assert not has_gpu_kernel("SparseTensorDenseMatMul",
                              {"T": (tf.bfloat16.as_datatype_enum,),
                               "Tindices": (tf.int64.as_datatype_enum,)})
    assert not has_gpu_kernel("NoSuchOp", {})


def test_a_listed_host_op_crosses_only_when_its_entry_says_so(monkeypatch):
    missing = [gpu_kernels.Missing("PrintV2", (), "p"), gpu_kernels.Missing("AsString", (), "a")]
    monkeypatch.setattr(gpu_kernels, "HOST_OPS", {
        "PrintV2": gpu_kernels.HostOp("a debug print", "none: traced away", False)})
    assert [m.op_type for m in crossing_ops(missing)] == ["AsString"]


def test_the_host_op_table_gives_a_reason_and_a_cost_for_ops_with_no_gpu_kernel():
    for op_type, entry in HOST_OPS.items():
        assert entry.reason and entry.cost, op_type
        assert not has_gpu_kernel(op_type, {}), f"{op_type} has a GPU kernel: drop its entry"


@pytest.mark.parametrize("impl, network, precision", [
    slow_unless(impl == DEFAULT_IMPL or precision == "float32", impl, network, precision)
    for impl in sorted(IMPLEMENTATIONS) for network in sorted(NETWORKS)
    for precision in PRECISIONS])
def test_every_op_of_the_train_step_has_a_gpu_kernel_or_a_host_op_entry(impl, network,
                                                                        precision):
    step, features, labels = tiny_step(network, impl, precision, jit=False)
    graph_def = step_graph_def(step, features, labels)
    op_types = {node.op for node in graph_def.node} | {
        node.op for function in graph_def.library.function for node in function.node_def}
    assert {"AssignVariableOp", "MatMul"} <= op_types  # the update and the layers were walked
    missing = ops_without_gpu_kernel(graph_def)
    assert [m for m in missing if m.op_type not in HOST_OPS] == []
    assert crossing_ops(missing) == []


@pytest.mark.parametrize("impl, network", [
    slow_unless(impl == DEFAULT_IMPL, impl, network)
    for impl in sorted(IMPLEMENTATIONS) for network in sorted(NETWORKS)])
def test_the_jit_train_step_compiles_with_xla_as_a_whole(impl, network):
    step, features, labels = tiny_step(network, impl, "float32", jit=True)
    hlo = step.compiler_ir(features, labels)
    assert "ENTRY" in hlo
