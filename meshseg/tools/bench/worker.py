"""One configuration of `meshseg.tools.bench`, measured in its own process:

    python -m meshseg.tools.bench.worker '<job as JSON>' <result.json>

The benchmark starts this module once per configuration (and once per precision for the
machine's peaks: the matmul peak in that precision and the memory bandwidth), so each has
its own memory peak and its own thread pools. TensorFlow's intra- and
inter-op threads (the job's `threads`, `inter_op_threads`; 0: TensorFlow's default, one
per core) are set before anything imports the model, because the first op fixes them
(tensorflow-graphics runs ops at import). The result (timings in ms and s, memory in MiB,
or `{"error": "Type: first line"}`) is written to the JSON file; nothing is raised.
"""

import json
import re
import sys
import time
from typing import Dict, Optional

from meshseg.tools.bench.device_memory import DeviceMemory, gpu_memory

ICOSPHERE_SIZES = {10 * 4 ** s + 2: s for s in range(9)}  # num_vertices -> subdivisions
MIB = 2 ** 20


def conv_channels(num_layers: int) -> tuple:
    """Output channels of `num_layers` graph convolutions: 32 * 2**k, so 3 -> (32, 64, 128)."""
    return tuple(32 * 2 ** k for k in range(num_layers))


def icosphere_batch(num_vertices: int, batch_size: int, num_classes: int, seed: int = 0):
    """A batch of B copies of the icosphere with V vertices, jittered, with random labels.

    Returns:
      (features, labels): the batch contract's features (`meshseg.batch.mesh_features` of
      each copy, stacked: "vertices" float32 [B, V, 3], "edges" int32 [B, E, 2], ...,
      "neighbors" int32 [B, V, K]) and labels int32 [B, V], as tensors.
    """
    import numpy as np
    import tensorflow as tf
    import trimesh

    from meshseg.batch import mesh_features
    from meshseg.data.mesh.adjacency import mesh_edges

    mesh = trimesh.creation.icosphere(subdivisions=ICOSPHERE_SIZES[num_vertices])
    edges, weights = mesh_edges(np.asarray(mesh.faces), num_vertices)
    rng = np.random.default_rng(seed)
    vertices = (np.asarray(mesh.vertices, np.float32)[None]
                + 0.01 * rng.standard_normal((batch_size, num_vertices, 3)).astype(np.float32))
    meshes = [mesh_features(copy, edges, weights) for copy in vertices]
    features = {key: tf.stack([m[key] for m in meshes]) for key in meshes[0]}
    labels = rng.integers(0, num_classes, (batch_size, num_vertices), dtype=np.int32)
    return features, tf.constant(labels)


def _rss_mib() -> float:
    import psutil
    return psutil.Process().memory_info().rss / MIB


def _reset_peak_rss() -> bool:
    """Resets the process' peak RSS (VmHWM, ru_maxrss) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_step(model, mode: str, jit: bool, precision: str):
    """One step `(features, labels) -> tensor to sync on`, built from the application's
    own functions: `forward` is the evaluation's predict step, `train` the run's
    `TrainStep` (default strategy, the run's Adam from `build_optimizer`, with its loss
    scaling under mixed_float16), `backward` its forward and backward pass without the
    update."""
    import tensorflow as tf

    from meshseg.batch import without_mesh_ids
    from meshseg.config import OptimizerConfig
    from meshseg.train.loop.evaluate import make_predict_step
    from meshseg.train.run import build_optimizer
    from meshseg.train.loop.step import TrainStep

    if mode == "forward":
        predict = make_predict_step(model, jit)
        return lambda features, labels: predict(without_mesh_ids(features))
    adam = OptimizerConfig(name="adam", learning_rate=1e-3, schedule="exponential",
                           warmup_steps=0, weight_decay=0.0)  # the demo's
    optimizer = build_optimizer(model, adam, precision, steps=1)
    train_step = TrainStep(model, optimizer, jit, tf.distribute.get_strategy())
    if mode == "train":
        return lambda features, labels: train_step(features, labels)[0]
    backward = tf.function(lambda features, labels: tf.add_n(  # keeps every gradient
        [tf.reduce_sum(g) for g in train_step.loss_and_gradients(features, labels)[2]]),
        jit_compile=jit)
    return lambda features, labels: backward(without_mesh_ids(features), labels)


def unet_batch(overrides: list, batch_size: int, jit: bool, model: str = "feastnet_unet"):
    """A multi-scale network's settings (`model=<model>`) and a batch of real meshes: the
    first training batch of the data `overrides` compose (train.py's; none: the default
    run's data, the bundled sample), with `batch_size` meshes, bucketed and padded as a run
    pads them (to its bucket's shape under XLA). Converts the data on first use, as a run
    does.

    Returns:
      (config, features, labels): the composed `TrainConfig`, the batch contract's
      features and labels int32 [B, V].
    """
    from meshseg.config import train_config
    from meshseg.data.pipeline.sources import build_datasets

    config = train_config([*overrides, f"model={model}", f"data.batch_size={batch_size}"])
    train_ds, _, _ = build_datasets(config.data, seed=0, jit=jit)
    features, labels = next(iter(train_ds))
    return config, features, labels


def model_and_batch(config: Dict):
    """(model, features, labels) of a step job: any network of the registry
    (`meshseg.registry.NETWORKS`), a single-level one (the demo, `MeshSegmentationNet`) on
    B jittered icospheres (`icosphere_batch`) with `num_layers` convolutions, a multi-scale
    one (`FeaStUNet`) on real meshes (`unet_batch`), built by the application's
    `build_network` in the job's precision, its variables created."""
    import dataclasses

    from meshseg.data.pipeline.inputs import MeshInputs
    from meshseg.nn.networks import build_network
    from meshseg.registry import NETWORKS

    precision = config.get("precision", "float32")
    name = config.get("model", "demo")
    if not NETWORKS[name].multi_scale:
        settings = dict(name=name, conv_channels=conv_channels(config["num_layers"]))
        features, labels = icosphere_batch(config["num_vertices"], config["batch_size"],
                                           config["num_classes"])
        num_classes, width = config["num_classes"], 3
    else:
        composed, features, labels = unet_batch(config.get("overrides", []),
                                                config["batch_size"], config["jit"], name)
        settings = dataclasses.asdict(composed.model)
        num_classes, width = composed.data.num_classes, MeshInputs.of(composed.data).width
    model = build_network(num_classes, config["impl"], settings, input_width=width,
                          xla=config["jit"], precision=precision)
    model.build_from_config({})
    return model, features, labels


def measure(config: Dict, memory: Optional[DeviceMemory] = None) -> Dict:
    """Runs one configuration in this process; returns its timings (ms, s), memory (MiB),
    shape (V, E of the finest level) and work (GFLOP, GB: `meshseg.tools.bench.roofline`).
    With a GPU's `memory` (`meshseg.tools.bench.device_memory`), also its allocator's and its
    driver's peak over the same span as the RSS increase ("gpu_alloc_peak_mib",
    "gpu_nvml_peak_mib"); without (a CPU), no GPU keys.

    The model's variables are created without a pass over data, so the process peak before
    the first step is that of TensorFlow and the inputs, not of an eager pass (the work is
    counted on an eager pass after the timed steps). The peak RSS
    is then reset, so `step_peak_increase_mib` is the peak during the first call (trace,
    compile, run), warmup and timed steps minus the RSS right before them; it includes
    XLA's compilation. (The peak of the later calls alone says little: they reuse the
    buffers the first call left allocated, so their RSS barely rises.)
    """
    import numpy as np

    from meshseg.tools.bench.roofline import step_work
    from meshseg.train.logs.summaries import peak_rss_mib

    model, features, labels = model_and_batch(config)
    step = make_step(model, config["mode"], config["jit"], config.get("precision", "float32"))

    pre_step_peak = peak_rss_mib()
    rss_before = _rss_mib()
    peak_reset = _reset_peak_rss()
    if memory is not None:
        memory.reset()
    start = time.perf_counter()
    step(features, labels).numpy()
    compile_s = time.perf_counter() - start
    for _ in range(config["warmup"]):
        step(features, labels).numpy()
    times_ms = []
    for _ in range(config["repeats"]):
        start = time.perf_counter()
        step(features, labels).numpy()
        times_ms.append(1e3 * (time.perf_counter() - start))
    step_peak = peak_rss_mib()
    device_peaks = memory.peaks_mib() if memory is not None else {}
    work = step_work(model, features, config["mode"])  # after the peaks: an eager pass
    return dict(
        step_ms=float(np.median(times_ms)), step_ms_min=min(times_ms), step_ms_max=max(times_ms),
        compile_s=compile_s, rss_before_mib=rss_before,
        peak_rss_mib=max(pre_step_peak, step_peak),
        step_peak_increase_mib=step_peak - rss_before if peak_reset else None,
        batch_vertices=int(features["vertices"].shape[1]),
        num_edges=int(features["edges"].shape[1]), gflop=work.flops / 1e9,
        gbyte=work.bytes / 1e9, peak_reset=peak_reset, **device_peaks)


def measure_matmul_peak(size: int, precision: str = "float32", repeats: int = 5) -> float:
    """Best GFLOP/s of a [size, size] x [size, size] tf.matmul in this process, in the
    compute dtype of the Keras policy `precision` (float32, bfloat16 or float16)."""
    import keras
    import tensorflow as tf

    dtype = keras.mixed_precision.Policy(precision).compute_dtype
    a = tf.cast(tf.random.normal([size, size]), dtype)
    b = tf.cast(tf.random.normal([size, size]), dtype)
    tf.matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


def measure_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """Best GB/s (1e9 bytes) of a copy of `mib` MiB of float32 (y = x * 1: every byte read
    once and written once) in this process: the memory bandwidth the roofline uses."""
    import tensorflow as tf

    x = tf.random.normal([mib * MIB // 4])
    scale = tf.function(lambda x: x * 1.0)
    scale(x).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        scale(x).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * mib * MIB / best / 1e9


def first_line(exc: Exception) -> str:
    """`Type: first non-empty line of the message`, without terminal colour codes."""
    message = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", message).splitlines()]
    return f"{type(exc).__name__}: {next((line for line in lines if line), '')}"


def run_job(job: Dict, result_path: str) -> None:
    """Sets the job's threads (and a GPU's memory growth), measures it (kind "peaks":
    `measure_matmul_peak` in the job's precision and `measure_bandwidth`; otherwise
    `measure`, with the GPU's memory figures when there is one) and writes the result, or
    its error's first line, as JSON."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(job.get("threads", 0))
    tf.config.threading.set_inter_op_parallelism_threads(job.get("inter_op_threads", 0))
    memory = gpu_memory()
    try:
        if job["kind"] == "peaks":
            result = {"gflops": measure_matmul_peak(job["size"], job["precision"]),
                      "bandwidth_gbs": measure_bandwidth()}
        else:
            result = measure(job, memory)
    except Exception as exc:  # reported as the row's error, never raised to the parent
        result = {"error": first_line(exc)}
    with open(result_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    run_job(json.loads(sys.argv[1]), sys.argv[2])
