"""`impl=auto`: time the candidate implementations on the first batch and keep the fastest."""

import json
import logging
import os
from typing import Dict, Sequence

import keras
import tensorflow as tf

from meshseg.nn.networks import build_network
from meshseg.outputs import write_json
from meshseg.train.step import TrainStep, median_step_ms

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


def time_step(impl: str, features, labels, jit: bool, num_classes: int, model_kwargs: Dict,
              steps: int) -> float:
    """Median wall time (ms) of `steps` train steps of a fresh model after one warm-up step.

    The model is the network `model_kwargs` (the `model` group as a dict) names
    (`meshseg.nn.networks.build_network`), for the width of the batch's "inputs"."""
    model = build_network(num_classes, impl, model_kwargs,
                          input_width=int(features["inputs"].shape[-1]), xla=jit)
    step = TrainStep(model, keras.optimizers.Adam(1e-3), jit, tf.distribute.get_strategy())
    float(step(features, labels)[0])  # trace, compile, warm up
    return median_step_ms(step, [(features, labels)] * steps)


def choose_impl(features, labels, jit: bool, num_classes: int, model_kwargs: Dict,
                candidates: Sequence[str], steps: int, cache_file: str) -> str:
    """The fastest of `candidates` for this batch shape, from `cache_file` or measured now.

    Measurements are stored in `cache_file` (JSON: key -> {impl: median ms}) so a later run
    with the same shapes, jit, device and model sizes reuses them.
    """
    key = cache_key(features, jit, model_kwargs)
    cache = {}
    if os.path.exists(cache_file):
        with open(cache_file) as f:
            cache = json.load(f)
    timings = cache.get(key, {})
    if set(candidates) <= set(timings):
        log.info("impl=auto: cached step times %s", _format(timings, candidates))
    else:
        for impl in candidates:
            if impl not in timings:
                timings[impl] = time_step(impl, features, labels, jit, num_classes, model_kwargs, steps)
        cache[key] = timings
        write_json(cache_file, cache, "the impl=auto timing cache")
        log.info("impl=auto: measured step times %s", _format(timings, candidates))
    best = min(candidates, key=timings.__getitem__)
    log.info("impl=auto chose %s", best)
    return best


def _format(timings: Dict[str, float], candidates: Sequence[str]) -> str:
    return ", ".join(f"{impl} {timings[impl]:.0f} ms" for impl in candidates)
