"""`precision=auto`: bfloat16 where the CPU computes it natively, float32 elsewhere.

Keras' `mixed_bfloat16` policy runs the layers in bfloat16 (variables, the FeaSt softmax,
the normalisations and the logits stay float32). On a CPU with native bfloat16 dot
products (the `avx512_bf16` or AMX `amx_bf16` flags) oneDNN's bfloat16 matmuls run about
twice as fast as float32's; elsewhere bfloat16 is emulated and slower. The choice reads
`/proc/cpuinfo` (Linux); where that cannot be read, or a GPU is visible (whose own
mixed-precision choice is the user's), `auto` means float32.
"""

from pathlib import Path
from typing import Optional, Tuple

AUTO = "auto"
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")


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


def resolved_precision(requested: str, gpus: int, cpuinfo: Path = CPUINFO
                       ) -> Tuple[str, str]:
    """(the Keras dtype policy a run uses, why) for the `precision` setting.

    Args:
      requested: `precision`: "auto", or a policy name, returned as it is.
      gpus: the GPUs TensorFlow sees.

    Returns:
      (policy, reason), e.g. ("mixed_bfloat16", "the CPU has avx512_bf16").
    """
    if requested != AUTO:
        return requested, "as set"
    if gpus:
        return "float32", f"{gpus} GPU(s) visible: choose their precision yourself"
    flag = native_bfloat16_flag(cpuinfo)
    if flag:
        return "mixed_bfloat16", f"the CPU has {flag}"
    return "float32", "the CPU has no native bfloat16 (avx512_bf16 or amx_bf16)"
