"""`impl=auto`: time the candidate implementations on the first batch and keep the fastest.

On a GPU without XLA, a candidate whose step has an op without a GPU kernel (one that would
copy its tensors to the host and back every step; `meshseg.train.device.gpu_kernels`) is not
timed and never chosen. Under XLA the whole step is one compiled cluster on the device.
"""

import json
import logging
from typing import Dict, List, Optional, Sequence

import keras
import tensorflow as tf

from meshseg.data.features.cache_entries import read_entry
from meshseg.errors import ConfigError
from meshseg.nn.networks import build_network
from meshseg.outputs import write_json
from meshseg.train.device.gpu_kernels import (Missing, crossing_ops, ops_without_gpu_kernel,
                                              step_graph_def)
from meshseg.train.loop.step import TrainStep, median_step_ms

log = logging.getLogger(__name__)


def device_name() -> str:
    """The accelerator the steps run on: the first GPU's name, else "cpu"."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu"
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", gpus[0].name)


def cache_key(features: Dict[str, tf.Tensor], jit: bool, model_kwargs: Dict) -> str:
    """Identifies a timing: batch shapes, jit, device, TensorFlow version and model sizes."""
    shapes = ",".join(f"{name}{list(features[name].shape)}"
                      for name in ("vertices", "edges", "neighbors"))
    sizes = json.dumps(model_kwargs, sort_keys=True)
    return f"{shapes}|jit={jit}|{device_name()}|tf{tf.__version__}|{sizes}"


def host_crossings(step: TrainStep, features, labels) -> List[Missing]:
    """The ops of `step`'s graph for this batch that would run on the host of a GPU
    (`meshseg.train.device.gpu_kernels.crossing_ops`); traces the step, does not run it."""
    return crossing_ops(ops_without_gpu_kernel(step_graph_def(step, features, labels)))


def time_step(impl: str, features, labels, jit: bool, num_classes: int, model_kwargs: Dict,
              steps: int, on_gpu: bool = False) -> Optional[float]:
    """Median wall time (ms) of `steps` train steps of a fresh model after one warm-up step.

    The model is the network `model_kwargs` (the `model` group as a dict) names
    (`meshseg.nn.networks.build_network`), for the width of the batch's "inputs". With
    `on_gpu` and without `jit`, None (and a log line naming the ops) when the step has an
    op that would run on the host (`host_crossings`)."""
    model = build_network(num_classes, impl, model_kwargs,
                          input_width=int(features["inputs"].shape[-1]), xla=jit)
    step = TrainStep(model, keras.optimizers.Adam(1e-3), jit, tf.distribute.get_strategy())
    if on_gpu and not jit:
        crossings = host_crossings(step, features, labels)
        if crossings:
            log.info("impl=auto skips %s on the GPU: its step runs %s on the host", impl,
                     ", ".join(f"{m.op_type}({', '.join(m.dtypes)})" for m in crossings))
            return None
    float(step(features, labels)[0])  # trace, compile, warm up
    return median_step_ms(step, [(features, labels)] * steps)


def choose_impl(features, labels, jit: bool, num_classes: int, model_kwargs: Dict,
                candidates: Sequence[str], steps: int, cache_file: str) -> str:
    """The fastest of `candidates` for this batch shape, from `cache_file` or measured now.

    Measurements are stored in `cache_file` (JSON: key -> {impl: median ms, or null for
    one whose step would cross to a GPU's host}) so a later run with the same shapes, jit,
    device and model sizes reuses them. The file is read and written as every cache is
    (`meshseg.data.features.cache_entries`): a damaged one is named in a warning and measured again,
    and it is replaced atomically.

    Raises:
      ConfigError: on a GPU, when every candidate's step would cross to the host.
    """
    key = cache_key(features, jit, model_kwargs)
    cache = read_entry(cache_file, _read_timings, "impl=auto timing cache") or {}
    timings = cache.get(key, {})
    if set(candidates) <= set(timings):
        log.info("impl=auto: cached step times %s", _format(timings, candidates))
    else:
        for impl in candidates:
            if impl not in timings:
                timings[impl] = time_step(impl, features, labels, jit, num_classes,
                                          model_kwargs, steps, device_name() != "cpu")
        cache[key] = timings
        write_json(cache_file, cache, "the impl=auto timing cache")
        log.info("impl=auto: measured step times %s", _format(timings, candidates))
    timed = [impl for impl in candidates if timings[impl] is not None]
    if not timed:
        raise ConfigError(f"impl=auto: the step of every candidate ({', '.join(candidates)}) "
                          "runs ops on the host of this GPU; set impl= or jit=true")
    best = min(timed, key=timings.__getitem__)
    log.info("impl=auto chose %s", best)
    return best


def _read_timings(path) -> Dict[str, Dict[str, Optional[float]]]:
    """The timing cache of `path`: {key: {impl: median ms, or None for a candidate skipped
    on a GPU}}.

    Raises:
      ValueError: if the file is not UTF-8 JSON; TypeError if it does not hold that shape.
    """
    cache = json.loads(path.read_bytes().decode())
    if not isinstance(cache, dict) or not all(
            isinstance(timings, dict) and all(ms is None or (isinstance(ms, (int, float)) and
                                                             not isinstance(ms, bool))
                                              for ms in timings.values())
            for timings in cache.values()):
        raise TypeError("not a {key: {impl: milliseconds or null}} table")
    return cache


def _format(timings: Dict[str, float], candidates: Sequence[str]) -> str:
    return ", ".join(f"{impl} {timings[impl]:.0f} ms" if timings[impl] is not None
                     else f"{impl} skipped (host ops)" for impl in candidates)
