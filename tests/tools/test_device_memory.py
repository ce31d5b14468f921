"""The benchmark's GPU memory columns (`meshseg.tools.bench.device_memory`, `bench_worker`,
`bench_report`), with fake devices: the allocator's and the driver's peaks over the same
span as the RSS increase, and a CPU's output as before."""

import csv
import sys
import time
import types

import pytest
import tensorflow as tf

from meshseg.tools.bench import device_memory, report as bench_report, worker as bench_worker

# The table's headers before the GPU columns existed: a CPU's output keeps exactly these.
CPU_HEADERS = ["model", "precision", "impl", "jit", "V", "B", "layers", "mode", "intra",
               "inter", "step_ms", "min", "max", "compile_s", "GFLOP/s", "bound_ms",
               "%roofline", "peak_rss_mib", "step_peak_inc_mib", "speedup", "vs_ref_nojit",
               "mem_ratio"]


class FakeMemory:
    """A `DeviceMemory` that records its calls and reports fixed peaks."""

    def __init__(self, allocator, driver):
        self.calls, self.allocator, self.driver = [], allocator, driver

    def reset(self):
        self.calls.append("reset")

    def peaks_mib(self):
        self.calls.append("peaks")
        return {"gpu_alloc_peak_mib": self.allocator, "gpu_nvml_peak_mib": self.driver}


def _row(impl, step_ms, rss, gpu=None):
    row = dict(model="demo", precision="float32", impl=impl, jit=False, num_vertices=642,
               batch_size=1, num_layers=3, mode="train", step_ms=step_ms, gflop=1.0,
               gbyte=0.1, step_peak_increase_mib=rss)
    if gpu:
        row.update(gpu_alloc_peak_mib=gpu[0], gpu_nvml_peak_mib=gpu[1])
    return row


JOB = dict(model="demo", num_vertices=42, batch_size=1, num_classes=4, num_layers=1,
           impl="gather_matmul", jit=False, mode="train", precision="float32", warmup=0,
           repeats=1)


def test_a_step_measured_with_a_device_reports_its_peaks_and_without_none():
    fake = FakeMemory(123.0, 456.0)
    row = bench_worker.measure(JOB, fake)
    assert fake.calls == ["reset", "peaks"]
    assert row["gpu_alloc_peak_mib"] == 123.0 and row["gpu_nvml_peak_mib"] == 456.0
    assert row["step_ms"] > 0
    assert not set(bench_report.GPU_COLUMNS) & set(bench_worker.measure(JOB))


def test_on_a_cpu_the_table_and_csv_are_as_before(tmp_path):
    rows = bench_report.add_derived_columns([_row("gather_sum", 10.0, 200.0),
                                             _row("gather_matmul", 5.0, 50.0)], {})
    assert bench_report.format_table(rows).splitlines()[0].split() == CPU_HEADERS
    assert rows[1]["memory_ratio"] == pytest.approx(0.25)
    bench_report.write_results(rows, {}, str(tmp_path))
    with open(tmp_path / "bench.csv") as f:
        header = next(csv.reader(line for line in f if not line.startswith("#")))
    assert not set(bench_report.GPU_COLUMNS) & set(header)


def test_with_a_gpu_the_table_shows_both_peaks_and_compares_the_allocators(tmp_path):
    rows = bench_report.add_derived_columns([
        _row("gather_sum", 10.0, 200.0, gpu=(800.0, 1300.0)),
        _row("gather_matmul", 5.0, 200.0, gpu=(200.0, 700.0))], {})
    lines = bench_report.format_table(rows).splitlines()
    headers = lines[0].split()
    assert headers[headers.index("step_peak_inc_mib") + 1:][:2] == ["gpu_alloc_peak_mib",
                                                                     "gpu_nvml_peak_mib"]
    cells = lines[3].split()
    assert cells[headers.index("gpu_alloc_peak_mib")] == "200"
    assert cells[headers.index("gpu_nvml_peak_mib")] == "700"
    assert rows[1]["memory_ratio"] == pytest.approx(0.25)  # the allocator's, not the RSS
    bench_report.write_results(rows, {}, str(tmp_path))
    with open(tmp_path / "bench.csv") as f:
        header = next(csv.reader(line for line in f if not line.startswith("#")))
    assert set(bench_report.GPU_COLUMNS) <= set(header)


@pytest.fixture
def fake_nvml(monkeypatch):
    """A `pynvml` whose used memory rises by 100 MiB per read from 1000 MiB."""
    reads = []

    def memory_info(handle):
        reads.append(handle)
        return types.SimpleNamespace(used=(1000 + 100 * len(reads)) * device_memory.MIB)

    module = types.SimpleNamespace(nvmlInit=lambda: None,
                                   nvmlDeviceGetHandleByIndex=lambda index: f"gpu{index}",
                                   nvmlDeviceGetMemoryInfo=memory_info)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return reads


def test_the_gpu_memory_of_a_span_is_the_allocators_peak_and_the_largest_driver_sample(
        fake_nvml, monkeypatch):
    resets = []
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", resets.append)
    monkeypatch.setattr(tf.config.experimental, "get_memory_info",
                        lambda device: {"current": 0, "peak": 64 * device_memory.MIB})
    memory = device_memory.GpuMemory("GPU:0", nvml_index=1)
    memory.reset()
    time.sleep(0.05)
    peaks = memory.peaks_mib()
    assert resets == ["GPU:0"] and set(fake_nvml) == {"gpu1"}
    assert peaks["gpu_alloc_peak_mib"] == 64.0
    assert peaks["gpu_nvml_peak_mib"] == 1000 + 100 * len(fake_nvml)  # the last, largest read


def test_without_nvml_the_driver_column_is_empty(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", lambda device: None)
    monkeypatch.setattr(tf.config.experimental, "get_memory_info",
                        lambda device: {"current": 0, "peak": device_memory.MIB})
    memory = device_memory.GpuMemory()
    memory.reset()
    assert memory.peaks_mib() == {"gpu_alloc_peak_mib": 1.0, "gpu_nvml_peak_mib": None}


@pytest.mark.parametrize("visible, index", [(None, 0), ("2,3", 2), ("GPU-5a1c", None),
                                            ("", None)])
def test_nvml_numbers_tensorflows_first_gpu_by_cuda_visible_devices(visible, index):
    assert device_memory.nvml_index(visible) == index


def test_on_a_cpu_there_is_no_gpu_memory_provider():
    assert device_memory.gpu_memory() is None
