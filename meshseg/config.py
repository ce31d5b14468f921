"""The typed configuration of a run: the schema of `conf/train.yaml` and its groups.

Registered in Hydra's ConfigStore as `train_schema`, the first entry of the defaults list,
so every key has a type and a default here and each `conf/<group>/<option>.yaml` states
only what differs. A wrong type (`steps=abc`), an unknown key (`data.batch_sise=2`) or an
unknown group option fails at composition with Hydra's one-line message. What the types
cannot check is checked before a run writes anything: the range of every number
(`INTEGER_RANGES`, `POSITIVE`), choices (`CHOICES`) and combinations by `check`, and by
`check_overrides` that a boolean is set only to true or false (OmegaConf would also read
"no", "off", "yes", "on", "0" and "1" as booleans).

The Hydra callback that claims the run directory (`meshseg.train.rundir.RunDirCheck`)
checks the settings before Hydra writes anything, and the run (`meshseg.train.run`) turns
the composed DictConfig into these dataclasses with `checked_config`; below the run, code
receives them or plain values, never a DictConfig.
"""

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from functools import reduce
from typing import List, Optional

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import MISSING, DictConfig, MissingMandatoryValue, OmegaConf

from meshseg.errors import ConfigError

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
ROTATIONS = ("none", "up", "so3")
DATA_SOURCES = ("mesh_folder", "tfrecords")
# How much adjacency a converted record stores, from least to most (`data.adjacency`; the
# record fields of each: `meshseg.data.adjacency.ADJACENCY_FIELDS`): "none" (computed when
# read), "edges" (the 1-ring edge list), "table" (also the neighbour table).
ADJACENCY_LEVELS = ("none", "edges", "table")
LOOPS = ("custom", "keras")
CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"  # conf/train.yaml and its groups


@dataclass
class AugmentConfig:
    """Training-only augmentation of the vertex positions (`meshseg.data.augment`).

    Attributes:
      rotation: "none", "up" (uniform angle about `up_axis`) or "so3" (uniform over all
        rotations).
      up_axis: 0, 1 or 2 (x, y, z), used by "up".
      scale: [low, high], one isotropic factor drawn uniformly per mesh ([1, 1]: off).
    """

    rotation: str = "none"
    up_axis: int = 1
    scale: List[float] = field(default_factory=lambda: [1.0, 1.0])

    @property
    def active(self) -> bool:
        return self.rotation != "none" or tuple(self.scale) != (1.0, 1.0)

    def check(self) -> None:
        """Raises ConfigError for a value outside its choices or range."""
        if self.rotation not in ROTATIONS:
            raise ConfigError(f"data.augment.rotation must be one of {ROTATIONS}, "
                              f"got {self.rotation!r}")
        if self.up_axis not in (0, 1, 2):
            raise ConfigError(f"data.augment.up_axis must be 0, 1 or 2, got {self.up_axis}")
        if len(self.scale) != 2 or not 0 < self.scale[0] <= self.scale[1]:
            raise ConfigError("data.augment.scale must be [low, high] with 0 < low <= high, "
                              f"got {list(self.scale)}")


@dataclass
class DataConfig:
    """The `data` group: where the meshes are and how they are batched.

    Sources: `mesh_folder` converts a folder of meshes, label files and split files
    (`train.txt`, `test.txt`) once into TFRecord shards in `cache_dir`; `tfrecords` reads
    shards in the demo schema matched by `train_files` / `test_files`.
    """

    name: str = MISSING
    source: str = MISSING  # mesh_folder | tfrecords
    num_classes: int = MISSING  # per-vertex classes K; labels must lie in [0, K)
    # source: tfrecords
    train_files: Optional[str] = None  # glob of the training shards
    test_files: Optional[str] = None  # glob of the test shards
    # source: mesh_folder
    root: Optional[str] = None  # the folder holding meshes, labels and split files
    meshes: str = "."  # split entries are relative to <root>/<meshes>
    labels: str = "labels"  # <stem>.txt / .npy label files are found under <root>/<labels>
    label_set: Optional[str] = None  # data sets with several label sets name one here
    label_offset: int = 0  # added to every label (1 maps the RNA data's -1 to class 0)
    cache_dir: Optional[str] = None  # converted shards + manifests, built on first use
    train_shards: int = 4
    test_shards: int = 1
    adjacency: str = "edges"  # stored in the converted records: none | edges | table
    convert_workers: int = 2  # processes converting meshes on a cache miss
    # batching, both sources
    batch_size: int = 4  # meshes per step
    shuffle_buffer: int = 64  # meshes
    mean_center: bool = True  # subtract each mesh's mean vertex position
    unit_scale: bool = True  # scale each mesh to RMS radius 1
    skip_bad_records: bool = False  # log, count and skip bad records instead of failing
    overlap: str = "warn"  # a mesh in both splits or twice in one: warn | refuse
    # Under jit=true batches are padded to per-bucket shapes; the step compiles once per bucket.
    bucket_boundaries: Optional[List[int]] = None  # vertex-count upper bounds; null: automatic
    num_buckets: int = 1  # automatic boundaries: this many vertex-count quantiles
    pad_multiple: int = 256  # bucket vertex/edge counts are rounded up to this
    augment: AugmentConfig = field(default_factory=AugmentConfig)


@dataclass
class ModelConfig:
    """The network's sizes (`meshseg.nn.model.MeshSegmentationNet`); values: conf/model/."""

    num_weight_matrices: int = MISSING  # W in every feature-steered convolution
    input_channels: int = MISSING  # first 1x1 convolution
    conv_channels: List[int] = MISSING  # output channels D of the graph convolutions
    hidden_channels: int = MISSING  # last hidden 1x1 convolution
    translation_invariant: bool = MISSING  # v = -u


@dataclass
class ImplConfig:
    """The feature-steered convolution implementation (`meshseg.nn.ops`), or `auto`."""

    name: str = MISSING
    # impl=auto only: implementations timed, steps timed each, and the timing cache.
    candidates: List[str] = field(default_factory=list)
    timing_steps: int = 2
    cache_file: Optional[str] = None


@dataclass
class OptimizerConfig:
    """Adam with exponential learning-rate decay; values: conf/optimizer/."""

    learning_rate: float = MISSING
    decay_steps: int = MISSING
    decay_rate: float = MISSING
    beta_1: float = MISSING
    epsilon: float = MISSING


@dataclass
class NamedConfig:
    """A group whose options differ by name only (`loop`)."""

    name: str = MISSING


@dataclass
class CheckpointConfig:
    every: int = 100  # steps between checkpoints (model, optimizer, step, input position)
    keep: int = 3  # checkpoints kept in <run dir>/checkpoints
    # Where checkpoints go (null: <run dir>/checkpoints). Multi-worker runs: storage every
    # worker reads; the chief writes, every worker restores from it.
    dir: Optional[str] = None


@dataclass
class StrategyConfig:
    """The `strategy` group: data parallelism (`meshseg.train.distribute`, docs/scaling.md)."""

    name: str = MISSING  # default | mirrored | multi_worker
    # Split the CPU into this many logical devices; strategy=mirrored on a host without
    # GPUs replicates over them (tests and CPU-only trials of replication).
    cpu_devices: int = 1
    # multi_worker: seconds to wait at start-up for every worker to be reachable.
    startup_timeout_s: float = 600.0
    # multi_worker launched by submitit (hydra/launcher=slurm or submitit_local) without
    # TF_CONFIG: task k of a node listens on port_base + k.
    port_base: int = 8888


@dataclass
class SummariesConfig:
    """What the run writes to TensorBoard besides its scalars."""

    meshes: int = 2  # test meshes shown in the Mesh dashboard at each evaluation (0: none)


@dataclass
class TrainConfig:
    """Everything a run is configured by; `python train.py --cfg job` prints it."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    impl: ImplConfig = field(default_factory=ImplConfig)
    loop: NamedConfig = field(default_factory=NamedConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    summaries: SummariesConfig = field(default_factory=SummariesConfig)
    seed: int = 0
    jit: bool = False  # compile the train and eval steps with XLA (jit_compile=True)
    steps: int = 500  # training steps (batches)
    eval_every: int = 100  # evaluate on the test split every N steps and at the end
    deterministic: bool = False  # seed everything and enable TensorFlow's op determinism
    precision: str = "float32"  # float32 | mixed_float16 (with loss scaling) | mixed_bfloat16
    threads: int = 0  # TensorFlow intra-op threads (0: all cores); cap it for parallel sweeps
    resume: Optional[str] = None  # a run directory to continue from its latest checkpoint


# The integer settings that count something: each must be >= 1 (each entry, for a list).
COUNTS = ("steps", "eval_every", "checkpoint.every", "checkpoint.keep", "data.num_classes",
          "data.train_shards", "data.test_shards", "data.convert_workers", "data.batch_size",
          "data.shuffle_buffer", "data.num_buckets", "data.pad_multiple",
          "data.bucket_boundaries", "model.num_weight_matrices", "model.input_channels",
          "model.conv_channels", "model.hidden_channels", "impl.timing_steps",
          "optimizer.decay_steps", "strategy.cpu_devices")
# The range [low, high] (high None: unbounded) of every integer setting but
# data.label_offset (any integer) and data.augment.up_axis (`AugmentConfig.check`).
INTEGER_RANGES = {"seed": (0, 2**32 - 1), "threads": (0, None), "summaries.meshes": (0, None),
                  "strategy.port_base": (1, 65535),
                  **{key: (1, None) for key in COUNTS}}
POSITIVE = ("optimizer.learning_rate", "optimizer.decay_rate", "optimizer.epsilon",
            "strategy.startup_timeout_s")
# The choices of every string setting that names an option (each entry, for a list);
# strategy.name is checked where the strategy is made (`meshseg.train.distribute`), impl
# names against the implementations' registry (`meshseg.train.run.typed_config`).
CHOICES = {"precision": PRECISIONS, "data.source": DATA_SOURCES,
           "data.adjacency": ADJACENCY_LEVELS, "data.overlap": ("warn", "refuse"),
           "loop.name": LOOPS}


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
    for key in POSITIVE:
        if not 0 < _value(config, key) < math.inf:
            raise ConfigError(f"{key} must be a finite number > 0, got {_value(config, key)}")
    if not 0 <= config.optimizer.beta_1 < 1:
        raise ConfigError(f"optimizer.beta_1 must be in [0, 1), got {config.optimizer.beta_1}")
    for key, choices in CHOICES.items():
        value = _value(config, key)
        if any(entry not in choices for entry in (value if isinstance(value, list) else [value])):
            raise ConfigError(f"{key}={value}: choose one of {', '.join(choices)}")
    if config.impl.name == "auto" and not config.impl.candidates:
        raise ConfigError("impl=auto needs impl.candidates, got []")
    config.data.augment.check()
    if config.strategy.name != "default" and config.jit and config.loop.name != "custom":
        raise ConfigError(f"jit=true with strategy={config.strategy.name} needs loop=custom "
                          "(it compiles each replica's step; Model.fit does not)")
    if config.strategy.name == "multi_worker" and config.loop.name != "custom":
        raise ConfigError("strategy=multi_worker needs loop=custom (Keras 3 Model.fit does not "
                          "run MultiWorkerMirroredStrategy here)")


def checked_config(cfg: DictConfig) -> TrainConfig:
    """The composed config as a `TrainConfig` (`OmegaConf.to_object`), checked (`check`).

    Raises:
      ConfigError: for a key left without a value (`???`) or a value `check` refuses.
    """
    try:
        config = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as error:
        raise ConfigError(f"{error.full_key} has no value; set it, e.g. "
                          f"{error.full_key}=...") from None
    check(config)
    return config


def check_overrides(overrides: List[str]) -> None:
    """Checks the command line's `key=value` overrides (Hydra's `overrides.task`) for what
    composition lets through: a boolean setting takes only true or false (any case), where
    OmegaConf would also read "no", "off", "yes", "on", "0" and "1".

    Raises:
      ConfigError: naming the setting.
    """
    booleans = {key for key, kind in schema_keys().items() if kind is bool}
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+")
        if key in booleans and value.lower() not in ("true", "false"):
            raise ConfigError(f"{key} must be true or false, got {value!r}")


def composed_config(overrides: List[str]) -> DictConfig:
    """The `train` config of `conf/` (`CONFIG_DIR`) with `overrides`, composed by Hydra as
    `train.py` composes it, and checked (`check_overrides`, `checked_config`), without
    importing TensorFlow. The tools that take train.py's overrides, and the downloader,
    compose through this function.

    Raises:
      ConfigError: naming the setting, for an override Hydra cannot parse or apply (an
        unknown key or option, a wrong type; with the options of a config group) or a value
        the checks refuse.
    """
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
    except HydraException as error:
        lines = [str(error).splitlines()[0].rstrip(".")]
        if error.__cause__ is not None:
            lines.append(str(error.__cause__).splitlines()[0])
        if getattr(error, "options", None):
            lines.append(f"choose one of {', '.join(error.options)}")
        raise ConfigError("; ".join(lines)) from None
    check_overrides(overrides)
    checked_config(cfg)
    return cfg


ConfigStore.instance().store(name="train_schema", node=TrainConfig)
