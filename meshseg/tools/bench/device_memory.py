"""A GPU's memory during a benchmark step, seen by TensorFlow's allocator and by the driver.

The allocator's peak (`tf.config.experimental.get_memory_info(...)["peak"]`, from
`reset_memory_stats`) counts the bytes TensorFlow's BFC allocator handed out; buffers XLA
or cuDNN take beside it are not all in it. The driver's figure is NVML's used memory of
the whole device (`nvmlDeviceGetMemoryInfo(...).used`: the CUDA context, every allocator,
other processes), sampled by a thread every few ms, so its peak can miss a spike shorter
than the interval. The benchmark reports both side by side (`meshseg.tools.bench.worker`),
with TensorFlow's memory growth on, so the allocator takes device memory as it needs it
rather than all of it at start.

`DeviceMemory` is the interface the worker calls; `gpu_memory()` gives the real one, or
None on a machine without a GPU (where the benchmark keeps the host's peak RSS).
NVML comes from `nvidia-ml-py` (the `gpu` extra); without it the driver column is empty.
"""

import os
import threading
from typing import Dict, Optional, Protocol

MIB = 2 ** 20


class DeviceMemory(Protocol):
    """The memory figures of one device over a measured span."""

    def reset(self) -> None:
        """Starts a span: resets the allocator's peak and starts sampling the driver."""

    def peaks_mib(self) -> Dict[str, Optional[float]]:
        """Ends the span: {"gpu_alloc_peak_mib": allocator peak, "gpu_nvml_peak_mib":
        largest sampled driver figure (None without NVML)}, in MiB."""


class NvmlSampler:
    """NVML's used memory of GPU `index` (the driver's numbering), sampled every
    `interval_s` seconds on a thread between `start` and `stop`."""

    def __init__(self, index: int, interval_s: float = 0.005):
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = None
        self.peak_bytes = 0

    def used_bytes(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self.used_bytes())
            self._stop.wait(self._interval_s)

    def start(self) -> None:
        self.stop()
        self.peak_bytes = self.used_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        """Stops sampling; returns the peak in bytes."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.peak_bytes = max(self.peak_bytes, self.used_bytes())
        return self.peak_bytes


class GpuMemory:
    """`DeviceMemory` of TensorFlow's device `device` ("GPU:0") and NVML's GPU `nvml_index`
    (None: no driver figures)."""

    def __init__(self, device: str = "GPU:0", nvml_index: Optional[int] = 0):
        self.device = device
        self.sampler = None
        if nvml_index is not None:
            try:
                self.sampler = NvmlSampler(nvml_index)
            except Exception:  # no nvidia-ml-py or no driver library: allocator only
                self.sampler = None

    def reset(self) -> None:
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats(self.device)
        if self.sampler is not None:
            self.sampler.start()

    def peaks_mib(self) -> Dict[str, Optional[float]]:
        import tensorflow as tf

        allocator = tf.config.experimental.get_memory_info(self.device)["peak"] / MIB
        driver = self.sampler.stop() / MIB if self.sampler is not None else None
        return {"gpu_alloc_peak_mib": allocator, "gpu_nvml_peak_mib": driver}


def nvml_index(visible_devices: Optional[str]) -> Optional[int]:
    """NVML's index of TensorFlow's GPU:0 from `CUDA_VISIBLE_DEVICES` (its first entry, when
    a number; 0 when unset; None for a UUID or an empty list)."""
    if visible_devices is None:
        return 0
    first = visible_devices.split(",")[0].strip()
    return int(first) if first.isdigit() else None


def gpu_memory() -> Optional[DeviceMemory]:
    """The first GPU's `GpuMemory`, with memory growth turned on (call before any op runs);
    None without a GPU. Imports TensorFlow."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    return GpuMemory("GPU:0", nvml_index(os.environ.get("CUDA_VISIBLE_DEVICES")))
