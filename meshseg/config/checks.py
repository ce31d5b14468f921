"""The checks of a configuration that its types cannot make: the range of every number
(`INTEGER_RANGES`, `POSITIVE`), choices (`CHOICES`, and the names of the registries,
`meshseg.registry`), combinations (`check`), the data paths (`check_data_paths`) and the
command line's overrides (`check_overrides`). Every check of the settings is here.
"""

import dataclasses
import difflib
import glob
import math
import typing
from functools import reduce
from pathlib import Path
from typing import List, Optional

from meshseg.config.schema import *  # noqa: F401,F403  (the schema and its choices)
from meshseg.config.schema import CONFIG_DIR, FEATURE_NAMES, TrainConfig
from meshseg.errors import ConfigError
from meshseg.registry import AUTO_IMPL, IMPLEMENTATIONS, NETWORKS, STRATEGIES

# The integer settings that count something: each must be >= 1 (each entry, for a list).
COUNTS = ("steps", "eval_every", "checkpoint.every", "checkpoint.keep", "data.num_classes",
          "data.train_shards", "data.test_shards", "data.validation_shards",
          "data.convert_workers", "data.batch_size",
          "data.shuffle_buffer", "data.num_buckets", "data.max_buckets", "data.pad_multiple",
          "data.bucket_boundaries", "model.num_weight_matrices", "model.input_channels",
          "model.conv_channels", "model.hidden_channels", "impl.timing_steps",
          "optimizer.decay_steps", "strategy.cpu_devices", "model.convs_per_level",
          "model.hidden_layers")
MAX_THREADS = 2**31 - 1  # TensorFlow's thread counts (threads, inter_op_threads) are int32
# The range [low, high] (high None: unbounded) of every integer setting but
# data.label_offset (any integer) and data.augment.up_axis (`AugmentConfig.check`).
INTEGER_RANGES = {"seed": (0, 2**32 - 1), "threads": (0, MAX_THREADS),
                  "inter_op_threads": (0, MAX_THREADS), "summaries.meshes": (0, None),
                  "strategy.port_base": (1, 65535), "data.levels": (0, 8),
                  "data.fourier_octaves": (1, 16),
                  "optimizer.warmup_steps": (0, None), "profile_steps": (0, None),
                  "model.output_level": (0, None), "model.fine_head_channels": (0, None),
                  "model.fine_head_convs": (0, None),
                  "data.validation_meshes": (0, None),
                  "data.validation_seed": (0, 2**32 - 1),
                  "data.eval_rotation_seed": (0, 2**63 - 1),
                  **{key: (1, None) for key in COUNTS}}
POSITIVE = ("optimizer.learning_rate", "optimizer.decay_rate", "optimizer.epsilon",
            "strategy.startup_timeout_s")
# The choices of every string setting that names an option (each entry, for a list); the
# names of networks, strategies and implementations are the registries' (`meshseg.registry`,
# read when checked, so an entry added there is a choice here).
CHOICES = {"precision": PRECISIONS, "data.source": DATA_SOURCES,
           "data.adjacency": ADJACENCY_LEVELS, "data.overlap": ("warn", "refuse"),
           "loop.name": LOOPS, "data.features": FEATURE_NAMES, "data.center": CENTERS,
           "data.scale": SCALES, "data.frame": FRAMES, "data.eval_rotation": ("none", "so3"),
           "optimizer.name": OPTIMIZERS,
           "optimizer.schedule": SCHEDULES, "loss.class_weights": CLASS_WEIGHTS,
           "eval.test": TEST_EVALUATIONS}


def schema_keys(node: type = TrainConfig, prefix: str = "") -> dict:
    """{dotted key: declared type} of every setting of the schema (groups walked)."""
    keys = {}
    for name, kind in typing.get_type_hints(node).items():
        if dataclasses.is_dataclass(kind):
            keys.update(schema_keys(kind, f"{prefix}{name}."))
        else:
            keys[prefix + name] = kind
    return keys


def _value(config: TrainConfig, key: str):
    """The value of a dotted key ("data.batch_size") of `config`."""
    return reduce(getattr, key.split("."), config)


def _check_integer(key: str, value, low: int, high: Optional[int]) -> None:
    """Raises ConfigError unless `value` (each entry of a non-empty list) is in [low, high]."""
    def inside(number: int) -> bool:
        return low <= number and (high is None or number <= high)

    bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
    if isinstance(value, list):
        if not value or not all(inside(entry) for entry in value):
            raise ConfigError(f"{key} must be a non-empty list of integers {bounds}, "
                              f"got {list(value)}")
    elif not inside(value):
        raise ConfigError(f"{key} must be {bounds}, got {value}")


def check(config: TrainConfig) -> None:
    """Checks what the types cannot: ranges (`INTEGER_RANGES`, `POSITIVE`), choices
    (`CHOICES`) and combinations.

    Raises:
      ConfigError: naming the setting.
    """
    for key, (low, high) in INTEGER_RANGES.items():
        value = _value(config, key)
        if value is not None:  # only data.bucket_boundaries may be null
            _check_integer(key, value, low, high)
    boundaries = config.data.bucket_boundaries
    if boundaries is not None and list(boundaries) != sorted(set(boundaries)):
        raise ConfigError(f"data.bucket_boundaries must be strictly increasing, "
                          f"got {list(boundaries)}")
    if not 0 <= config.data.max_padding <= 1:
        raise ConfigError(f"data.max_padding must be a fraction in [0, 1], "
                          f"got {config.data.max_padding}")
    if config.data.num_buckets > config.data.max_buckets:
        raise ConfigError(f"data.num_buckets={config.data.num_buckets} is more than "
                          f"data.max_buckets={config.data.max_buckets}; raise data.max_buckets")
    for key in POSITIVE:
        if not 0 < _value(config, key) < math.inf:
            raise ConfigError(f"{key} must be a finite number > 0, got {_value(config, key)}")
    if not 0 <= config.optimizer.beta_1 < 1:
        raise ConfigError(f"optimizer.beta_1 must be in [0, 1), got {config.optimizer.beta_1}")
    for key, choices in {**CHOICES, "model.name": tuple(NETWORKS),
                         "strategy.name": STRATEGIES}.items():
        value = _value(config, key)
        if any(entry not in choices for entry in (value if isinstance(value, list) else [value])):
            raise ConfigError(f"{key}={value}: choose one of {', '.join(choices)}")
    for key, names, allowed in (
            ("impl.name", [config.impl.name], (*IMPLEMENTATIONS, AUTO_IMPL)),
            ("impl.candidates", config.impl.candidates, tuple(IMPLEMENTATIONS))):
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise ConfigError(f"{key}: unknown implementation {', '.join(unknown)}; choose "
                              f"from {', '.join(IMPLEMENTATIONS)}")
    if not config.data.features:
        raise ConfigError(f"data.features must list at least one of {', '.join(FEATURE_NAMES)}")
    if len(set(config.data.features)) != len(config.data.features):
        raise ConfigError(f"data.features must list each of {', '.join(FEATURE_NAMES)} at most "
                          f"once, got {list(config.data.features)}")
    if not 1 < config.data.coarsening < math.inf:
        raise ConfigError(f"data.coarsening must be a finite number > 1, "
                          f"got {config.data.coarsening}")
    multi_scale = NETWORKS[config.model.name].multi_scale
    if multi_scale and len(config.model.conv_channels) - 1 > config.data.levels:
        needed = len(config.model.conv_channels) - 1
        raise ConfigError(f"model={config.model.name} with {len(config.model.conv_channels)} "
                          f"conv_channels needs data.levels >= {needed}, got "
                          f"{config.data.levels}: set data.levels={needed} (records made by "
                          f"meshseg.data.convert need --levels {needed}), or train model=demo")
    coarsest = len(config.model.conv_channels) - 1 if multi_scale else 0
    if not 0 <= config.model.output_level <= coarsest:
        raise ConfigError(f"model.output_level must be a level of model={config.model.name}, "
                          f"0 to {coarsest}, got {config.model.output_level}")
    if config.model.fine_head_channels and not config.model.output_level:
        raise ConfigError(f"model.fine_head_channels={config.model.fine_head_channels} corrects "
                          f"logits carried back from a coarser level: set model.output_level "
                          f">= 1, or model.fine_head_channels=0")
    if config.model.fine_head_convs and not config.model.fine_head_channels:
        raise ConfigError(f"model.fine_head_convs={config.model.fine_head_convs} are the fine "
                          f"head's convolutions: set model.fine_head_channels >= 1 (and "
                          f"model.output_level >= 1), or model.fine_head_convs=0")
    for key in ("model.dropout", "loss.label_smoothing", "optimizer.weight_decay"):
        if not 0 <= _value(config, key) < 1:
            raise ConfigError(f"{key} must be in [0, 1), got {_value(config, key)}")
    if len(config.profile_steps) != 2 or not config.profile_steps[0] < config.profile_steps[1]:
        raise ConfigError(f"profile_steps must be [start,stop] with 0 <= start < stop (steps "
                          f"start to stop - 1 are profiled), got {list(config.profile_steps)}")
    if config.impl.name == AUTO_IMPL and not config.impl.candidates:
        raise ConfigError("impl=auto needs impl.candidates, got []")
    config.data.augment.check()
    if config.data.eval_rotation != "none" and config.data.source != "mesh_folder":
        raise ConfigError("data.eval_rotation needs data.source=mesh_folder (the mesh files "
                          "are turned before anything is derived from them); convert turned "
                          "copies of your test meshes instead")
    if config.data.validation_meshes and config.data.source != "mesh_folder":
        raise ConfigError("data.validation_meshes needs data.source=mesh_folder (it holds out "
                          "entries of the training split file); give TFRecords of a "
                          "validation split as the test split instead")
    if config.strategy.name != "default" and config.jit and config.loop.name != "custom":
        raise ConfigError(f"jit=true with strategy={config.strategy.name} needs loop=custom "
                          "(it compiles each replica's step; Model.fit does not)")
    if config.strategy.name == "multi_worker" and config.loop.name != "custom":
        raise ConfigError("strategy=multi_worker needs loop=custom (Keras 3 Model.fit does not "
                          "run MultiWorkerMirroredStrategy here)")


def test_evaluations(config: TrainConfig) -> str:
    """When the run scores its test split: "never", "final" or "every" (`EvalConfig`,
    `auto` resolved by whether the run holds out a validation split)."""
    if config.eval.test != "auto":
        return config.eval.test
    return "never" if config.data.validation_meshes else "every"


def data_root(data) -> Path:
    """The mesh folder `data.root` of a `source: mesh_folder` data config, as an absolute
    path (relative ones are relative to the working directory).

    Raises:
      ConfigError: if it is not a folder (checked by train.py before TensorFlow starts).
    """
    root = Path(data.root).resolve()
    if not root.is_dir():
        raise ConfigError(f"data.root={str(root)!r} is not a folder; pass data.root=<path> "
                          "(python -m meshseg.data.download --list: the public data sets "
                          "meshseg fetches)")
    return root


def check_data_paths(data) -> None:
    """Refuses, before anything is read, data paths that do not exist: `data_root` for a
    mesh folder, and for TFRecords a `data.train_files` / `data.test_files` pattern that
    matches no file (`glob`, relative to the working directory).

    Raises:
      ConfigError: naming the setting and its value.
    """
    if data.source == "mesh_folder":
        data_root(data)
        return
    for split in ("train", "test"):
        pattern = getattr(data, f"{split}_files")
        if pattern is None or not glob.glob(pattern):
            raise ConfigError(f"data.{split}_files={pattern!r} matches no file")


def check_overrides(overrides: List[str]) -> None:
    """Checks the command line's `key=value` overrides (Hydra's `overrides.task`) for what
    composition lets through: a boolean setting takes only true or false (any case), where
    OmegaConf would also read "no", "off", "yes", "on", "0" and "1"; and a `+key=value` that
    Hydra's composition adds is refused unless `key` is a setting or a config group (the
    schema would drop or refuse it only later).

    Raises:
      ConfigError: naming the setting.
    """
    keys = schema_keys()
    booleans = {key for key, kind in keys.items() if kind is bool}
    groups = {path.name for path in CONFIG_DIR.iterdir() if path.is_dir()}
    for override in overrides:
        key, _, value = override.partition("=")
        added, key = key.startswith("+"), key.lstrip("+")
        group = key.split("/")[0] in groups  # `+experiment=rna`, `+hydra/launcher=...`
        if added and not group and key not in keys and not key.startswith("hydra."):
            close = difflib.get_close_matches(key, keys, n=1)
            raise ConfigError(f"{override}: {key} is not a setting"
                              + (f" (did you mean {close[0]}?)" if close else "")
                              + "; every setting: python train.py --cfg job")
        if key in booleans and value.lower() not in ("true", "false"):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
