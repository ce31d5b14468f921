"""One configuration of `meshseg.tools.bench`, measured in its own process:

    python -m meshseg.tools.bench_worker '<job as JSON>' <result.json>

The benchmark starts this module once per configuration (and once for the matmul peak),
so each has its own memory peak and its own thread pools. TensorFlow's intra- and
inter-op threads (the job's `threads`, `inter_op_threads`; 0: TensorFlow's default, one
per core) are set before anything imports the model, because the first op fixes them
(tensorflow-graphics runs ops at import). The result (timings in ms and s, memory in MiB,
or `{"error": "Type: first line"}`) is written to the JSON file; nothing is raised.
"""

import json
import re
import sys
import time
from typing import Dict

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
    from meshseg.data.adjacency import mesh_edges

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


def _make_step(model, mode: str, jit: bool):
    """One step `(features, labels) -> tensor to sync on`, built from the application's
    own functions: `forward` is the evaluation's predict step, `train` the run's
    `TrainStep` (default strategy, Adam), `backward` its forward and backward pass without
    the update."""
    import keras
    import tensorflow as tf

    from meshseg.train.evaluate import make_predict_step
    from meshseg.train.step import TrainStep

    if mode == "forward":
        predict = make_predict_step(model, jit)
        return lambda features, labels: predict(features)
    train_step = TrainStep(model, keras.optimizers.Adam(1e-3), jit, tf.distribute.get_strategy())
    if mode == "train":
        return lambda features, labels: train_step(features, labels)[0]
    backward = tf.function(lambda features, labels: tf.add_n(  # keeps every gradient
        [tf.reduce_sum(g) for g in train_step.loss_and_gradients(features, labels)[2]]),
        jit_compile=jit)
    return backward


def measure(config: Dict) -> Dict:
    """Runs one configuration in this process; returns its timings (ms, s) and memory (MiB).

    The model is built on a 12-vertex icosphere, so the process peak before the first step is
    that of TensorFlow and the inputs, not of an eager pass. The peak RSS is then reset, so
    `step_peak_increase_mib` is the peak during the first call (trace, compile, run), warmup
    and timed steps minus the RSS right before them; it includes XLA's compilation. (The
    peak of the later calls alone says little: they reuse the buffers the first call left
    allocated, so their RSS barely rises.)
    """
    import numpy as np

    from meshseg.nn.model import MeshSegmentationNet
    from meshseg.train.summaries import peak_rss_mib

    model = MeshSegmentationNet(config["num_classes"], impl=config["impl"], xla=config["jit"],
                                conv_channels=conv_channels(config["num_layers"]))
    model(icosphere_batch(12, 1, config["num_classes"])[0])
    features, labels = icosphere_batch(config["num_vertices"], config["batch_size"],
                                       config["num_classes"])
    step = _make_step(model, config["mode"], config["jit"])

    pre_step_peak = peak_rss_mib()
    rss_before = _rss_mib()
    peak_reset = _reset_peak_rss()
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
    return dict(
        step_ms=float(np.median(times_ms)), step_ms_min=min(times_ms), step_ms_max=max(times_ms),
        compile_s=compile_s, rss_before_mib=rss_before,
        peak_rss_mib=max(pre_step_peak, step_peak),
        step_peak_increase_mib=step_peak - rss_before if peak_reset else None,
        num_edges=int(features["edges"].shape[1]), peak_reset=peak_reset)


def measure_matmul_peak(size: int, repeats: int = 5) -> float:
    """Best float32 GFLOP/s of a [size, size] x [size, size] tf.matmul in this process."""
    import tensorflow as tf

    a = tf.random.normal([size, size])
    b = tf.random.normal([size, size])
    tf.matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


def first_line(exc: Exception) -> str:
    """`Type: first non-empty line of the message`, without terminal colour codes."""
    message = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", message).splitlines()]
    return f"{type(exc).__name__}: {next((line for line in lines if line), '')}"


def run_job(job: Dict, result_path: str) -> None:
    """Sets the job's threads, measures it (`measure_matmul_peak` for kind "matmul_peak",
    `measure` otherwise) and writes the result, or its error's first line, as JSON."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(job.get("threads", 0))
    tf.config.threading.set_inter_op_parallelism_threads(job.get("inter_op_threads", 0))
    try:
        if job["kind"] == "matmul_peak":
            result = {"gflops": measure_matmul_peak(job["size"])}
        else:
            result = measure(job)
    except Exception as exc:  # reported as the row's error, never raised to the parent
        result = {"error": first_line(exc)}
    with open(result_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    run_job(json.loads(sys.argv[1]), sys.argv[2])
