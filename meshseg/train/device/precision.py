"""`precision=auto`: the Keras dtype policy the device computes fastest without losing
the run.

On a GPU, by its compute capability (the lowest of the visible GPUs, which all run the
same policy): 8.0 and newer (Ampere, Hopper, Ada) compute bfloat16 on their tensor cores,
so `mixed_bfloat16` (float32's range, no loss scaling); 7.x (Volta, Turing) has float16
tensor cores only, so `mixed_float16` (with Keras' dynamic loss scaling,
`meshseg.train.run.build_optimizer`); older GPUs have no tensor cores and compute float16
slowly or not at all, so float32 (NVIDIA's CUDA C++ Programming Guide, "Compute
Capabilities"; TensorFlow's mixed-precision guide gives the same split).

On a CPU, Keras' `mixed_bfloat16` runs the layers in bfloat16 (variables, the FeaSt
softmax, the normalisations and the logits stay float32). On a CPU with native bfloat16
dot products (the `avx512_bf16` or AMX `amx_bf16` flags) oneDNN's bfloat16 matmuls run
about twice as fast as float32's; elsewhere bfloat16 is emulated and slower. The choice
reads `/proc/cpuinfo` (Linux); where that cannot be read, `auto` means float32.
"""

from pathlib import Path
from typing import NamedTuple, Optional, Sequence, Tuple

AUTO = "auto"
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")
BFLOAT16_CAPABILITY = (8, 0)  # tensor cores with bfloat16 from here on
FLOAT16_CAPABILITY = (7, 0)  # tensor cores with float16 from here on


class Gpu(NamedTuple):
    """A GPU TensorFlow sees: its name and compute capability (major, minor), or None
    where TensorFlow does not report it."""

    name: str
    compute_capability: Optional[Tuple[int, int]]


def visible_gpus() -> Tuple[Gpu, ...]:
    """The GPUs TensorFlow sees (`tf.config.experimental.get_device_details`); () on a
    machine without one. Imports TensorFlow."""
    import tensorflow as tf

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        gpus.append(Gpu(details.get("device_name", device.name),
                        tuple(capability) if capability else None))
    return tuple(gpus)


def native_bfloat16_flag(cpuinfo: Path = CPUINFO) -> Optional[str]:
    """The first of `NATIVE_BFLOAT16_FLAGS` the CPU's flags list, or None (also when
    `cpuinfo` cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return next((flag for flag in NATIVE_BFLOAT16_FLAGS if flag in flags), None)


def gpu_precision(gpus: Sequence[Gpu]) -> Tuple[str, str]:
    """(policy, why) for `gpus` (at least one) by the lowest compute capability."""
    unknown = [gpu.name for gpu in gpus if gpu.compute_capability is None]
    if unknown:
        return "float32", f"the compute capability of {unknown[0]} is unknown"
    gpu = min(gpus, key=lambda g: g.compute_capability)
    capability = ".".join(map(str, gpu.compute_capability))
    if gpu.compute_capability >= BFLOAT16_CAPABILITY:
        return "mixed_bfloat16", f"{gpu.name} has compute capability {capability} (>= 8.0)"
    if gpu.compute_capability >= FLOAT16_CAPABILITY:
        return "mixed_float16", f"{gpu.name} has compute capability {capability} (7.x)"
    return "float32", (f"{gpu.name} has compute capability {capability}, "
                       "without tensor cores (< 7.0)")


def resolved_precision(requested: str, gpus: Sequence[Gpu] = (), cpuinfo: Path = CPUINFO
                       ) -> Tuple[str, str]:
    """(the Keras dtype policy a run uses, why) for the `precision` setting.

    Args:
      requested: `precision`: "auto", or a policy name, returned as it is.
      gpus: the GPUs the run uses (`visible_gpus()`); () for a CPU.

    Returns:
      (policy, reason), e.g. ("mixed_bfloat16", "the CPU has avx512_bf16") or
      ("mixed_float16", "Tesla T4 has compute capability 7.5 (7.x)").
    """
    if requested != AUTO:
        return requested, "as set"
    if gpus:
        return gpu_precision(gpus)
    flag = native_bfloat16_flag(cpuinfo)
    if flag:
        return "mixed_bfloat16", f"the CPU has {flag}"
    return "float32", "the CPU has no native bfloat16 (avx512_bf16 or amx_bf16)"
