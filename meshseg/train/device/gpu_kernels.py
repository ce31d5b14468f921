"""Which ops of a train step have no GPU kernel, read from TensorFlow's kernel registry.

TensorFlow places an op without a kernel for the GPU (for its dtypes) on the host and
copies its inputs and outputs across each step, silently. The kernel registry
(`tensorflow.python.framework.kernels`) lists the GPU kernels and their dtype constraints
also on a machine without a GPU, so the check runs on a CPU: trace the step, walk every
op of its graph and of every function in the graph's function library (the model's
layers, the gradients, `tf.cond` branches), and look each op up with the dtypes its
attributes give ("T", "dtype", "Tindices", ...).

`HOST_OPS` is the table of the ops a step may contain that have no GPU kernel: why they
are there and what they cost per step. `impl=auto` on a GPU skips an implementation whose
step has an op without a GPU kernel outside that table, or one whose entry crosses to the
host every step (`crosses_each_step`).
"""

import functools
from typing import Dict, Iterable, List, NamedTuple, Set, Tuple

import tensorflow as tf
from tensorflow.python.framework import kernels

# Device types whose kernels run on a GPU ("DEFAULT": registered for every device, e.g.
# the function-call ops PartitionedCall and StatefulPartitionedCall).
GPU_DEVICE_TYPES = ("GPU", "DEFAULT")


class HostOp(NamedTuple):
    """An op a step may hold that has no GPU kernel.

    Attributes:
      reason: why the step holds it.
      cost: which tensors cross between host and GPU each step, or why none do.
      crosses_each_step: True when the op runs every step with tensors that must cross.
    """

    reason: str
    cost: str
    crosses_each_step: bool


# Empty: no op of any implementation's step (demo and feastnet_unet; float32,
# mixed_float16, mixed_bfloat16; eager graph and XLA) lacks a GPU kernel in TensorFlow
# 2.21 (tests/train/device/test_gpu_kernels.py). An entry names the op type.
HOST_OPS: Dict[str, HostOp] = {}


class Missing(NamedTuple):
    """An op type with no GPU kernel for the dtypes it uses.

    Attributes:
      op_type: the op's type, e.g. "SparseReshape".
      dtypes: its dtype attributes as "name=dtype" (lists as "name=[a,b]"), sorted.
      where: one node that holds it, as "function/node" ("" for the outer graph).
    """

    op_type: str
    dtypes: Tuple[str, ...]
    where: str


def dtype_attributes(node: tf.compat.v1.NodeDef) -> Dict[str, Tuple[int, ...]]:
    """The node's attributes that are dtypes or dtype lists: name -> DataType enums."""
    attrs = {}
    for name, value in node.attr.items():
        if value.HasField("type"):
            attrs[name] = (value.type,)
        elif value.HasField("list") and value.list.type:
            attrs[name] = tuple(value.list.type)
    return attrs


@functools.lru_cache(maxsize=None)
def gpu_kernel_constraints(op_type: str) -> Tuple[Dict[str, Set[int]], ...]:
    """The GPU kernels registered for `op_type`, each as its dtype constraints
    (attribute -> allowed DataType enums; {} for a kernel without constraints)."""
    registered = kernels.get_registered_kernels_for_op(op_type)
    return tuple({c.name: set(c.allowed_values.list.type) for c in kernel.constraint}
                 for kernel in registered.kernel if kernel.device_type in GPU_DEVICE_TYPES)


def has_gpu_kernel(op_type: str, attrs: Dict[str, Tuple[int, ...]]) -> bool:
    """Whether a GPU kernel of `op_type` accepts the dtypes `attrs` gives (each
    constrained attribute, every entry of a list, within the kernel's allowed dtypes)."""
    return any(all(set(attrs.get(name, ())) <= allowed for name, allowed in constraint.items())
               for constraint in gpu_kernel_constraints(op_type))


def _nodes(graph_def: tf.compat.v1.GraphDef) -> Iterable[Tuple[str, tf.compat.v1.NodeDef]]:
    yield from (("", node) for node in graph_def.node)
    for function in graph_def.library.function:
        yield from ((function.signature.name, node) for node in function.node_def)


def ops_without_gpu_kernel(graph_def: tf.compat.v1.GraphDef) -> List[Missing]:
    """Every op type of `graph_def` and its function library that has no GPU kernel for
    its dtypes, one entry per (op type, dtypes). Calls of library functions (op type = a
    function's name) are skipped: their bodies are walked as functions of the library."""
    functions = {function.signature.name for function in graph_def.library.function}
    found = {}
    for where, node in _nodes(graph_def):
        if node.op in functions:
            continue
        attrs = dtype_attributes(node)
        if has_gpu_kernel(node.op, attrs):
            continue
        dtypes = tuple(sorted(
            f"{name}={tf.dtypes.as_dtype(types[0]).name}" if len(types) == 1 else
            f"{name}=[{','.join(tf.dtypes.as_dtype(t).name for t in types)}]"
            for name, types in attrs.items()))
        found.setdefault((node.op, dtypes), Missing(node.op, dtypes,
                                                    f"{where}/{node.name}" if where else node.name))
    return sorted(found.values())


def step_graph_def(train_step, features, labels) -> tf.compat.v1.GraphDef:
    """The GraphDef (with its function library) of `train_step`'s whole step (forward,
    gradients, finiteness guard, optimizer update) traced for this batch, without running
    it. `train_step` is a `meshseg.train.loop.step.TrainStep`."""
    return train_step.concrete_function(features, labels).graph.as_graph_def()


def crossing_ops(missing: Iterable[Missing]) -> List[Missing]:
    """The entries of `missing` that make a step cross to the host: those `HOST_OPS` does
    not list, and those it lists as crossing every step."""
    return [m for m in missing
            if m.op_type not in HOST_OPS or HOST_OPS[m.op_type].crosses_each_step]
