"""Feature-steered convolution implementations, all with tensorflow-graphics' signature.

The implementations are those of the registry, `meshseg.registry.IMPLEMENTATIONS` (the one
list; what each entry declares: `meshseg.registry.Implementation`). Every one is called as
`op(data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b, xla=False)` with the
shapes of `tensorflow_graphics.geometry.convolution.graph_convolution.feature_steered_convolution`
and returns the same values; `xla=True` selects a formulation that compiles under
`tf.function(jit_compile=True)`. Those in `NEIGHBOR_TABLE_IMPLS` also accept a
`meshseg.batch.NeighborTable` instead of the SparseTensor, and take `max_degree` (the static table
width a SparseTensor needs under XLA).
"""

from typing import Callable, Iterator, Mapping

from meshseg import registry


class _Implementations(Mapping):
    """{name: op} of the registry's implementations, each imported on first use."""

    def __getitem__(self, name: str) -> Callable:
        return registry.load(registry.IMPLEMENTATIONS[name].op)

    def __iter__(self) -> Iterator[str]:
        return iter(registry.IMPLEMENTATIONS)

    def __len__(self) -> int:
        return len(registry.IMPLEMENTATIONS)


class _Flagged(Mapping):
    """The names of the registry's implementations whose `flag` is set (a set-like view)."""

    def __init__(self, flag: str):
        self._flag = flag

    def _names(self) -> list:
        return [name for name, entry in registry.IMPLEMENTATIONS.items()
                if getattr(entry, self._flag)]

    def __getitem__(self, name: str) -> bool:
        if name not in self._names():
            raise KeyError(name)
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


IMPLEMENTATIONS: Mapping[str, Callable] = _Implementations()
# Implementations that also accept a `NeighborTable` and take `max_degree`.
NEIGHBOR_TABLE_IMPLS = _Flagged("neighbor_table")
# Implementations computed in float32 under a mixed-precision policy (the library op, and
# the sparse-matmul kernels, whose softmax normalisation is spread over several ops).
FLOAT32_IMPLS = _Flagged("float32")


def xla_formulation(name: str) -> str:
    """How implementation `name` runs under XLA, for the run log."""
    return registry.IMPLEMENTATIONS[name].xla_formulation


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
