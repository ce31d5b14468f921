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
import difflib
import glob
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

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "auto")
ROTATIONS = ("none", "up", "so3")
# Per-vertex input features (`data.features`) and their widths: positions as normalised
# (`data.center`, `data.scale`) and augmented, their Fourier features (sin, cos at
# data.fourier_octaves octave frequencies: `meshseg.data.pipeline.positional`), unit vertex normals,
# and the heat kernel signature (`meshseg.data.features.descriptors`). The first two are computed
# from the positions when a mesh is read (POSITION_FEATURES), the others stored in the records.
FOURIER_OCTAVES = 6  # data.fourier_octaves' default: periods 2 .. 1/16 on a unit-area mesh


def feature_widths(fourier_octaves: int = FOURIER_OCTAVES) -> dict[str, int]:
    """{name: channels} of every per-vertex input feature (`FEATURE_NAMES`): xyz 3,
    xyz_fourier 6 per octave (sin and cos of x, y, z), normals 3, hks 16."""
    return {"xyz": 3, "xyz_fourier": 6 * fourier_octaves, "normals": 3, "hks": 16}


FEATURE_NAMES = tuple(feature_widths())  # data.features' choices, in the records' order
POSITION_FEATURES = ("xyz", "xyz_fourier")
CENTERS = ("mean", "area_centroid", "none")  # data.center
SCALES = ("rms", "unit_area", "none")  # data.scale
FRAMES = ("none", "pca")  # data.frame
MODELS = ("demo", "feastnet_unet")  # model.name
OPTIMIZERS = ("adam", "adamw")  # optimizer.name
SCHEDULES = ("exponential", "cosine")  # optimizer.schedule
CLASS_WEIGHTS = ("none", "inverse_sqrt_frequency")  # loss.class_weights
DATA_SOURCES = ("mesh_folder", "tfrecords")
# How much adjacency a converted record stores, from least to most (`data.adjacency`; the
# record fields of each: `meshseg.data.mesh.adjacency.ADJACENCY_FIELDS`): "none" (computed when
# read), "edges" (the 1-ring edge list), "table" (also the neighbour table).
ADJACENCY_LEVELS = ("none", "edges", "table")
LOOPS = ("custom", "keras")
CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"  # conf/train.yaml and its groups


@dataclass
class AugmentConfig:
    """Training-only augmentation of the vertex positions (`meshseg.data.pipeline.augment`).

    Attributes:
      rotation: "none", "up" (uniform angle about `up_axis`) or "so3" (uniform over all
        rotations).
      up_axis: 0, 1 or 2 (x, y, z), used by "up".
      scale: [low, high], one isotropic factor drawn uniformly per mesh ([1, 1]: off).
      tilt_degrees: after the rotation, a tilt of the up axis by an angle drawn uniformly
        in [0, tilt_degrees] degrees, towards a uniformly drawn horizontal direction (0: off).
      jitter: standard deviation of independent Gaussian noise added to every vertex
        position, in the units of the normalised positions (0: off).
    Normals, when among `data.features`, turn with the positions (and ignore scale, jitter).
    """

    rotation: str = "none"
    up_axis: int = 1
    scale: List[float] = field(default_factory=lambda: [1.0, 1.0])
    tilt_degrees: float = 0.0
    jitter: float = 0.0

    @property
    def active(self) -> bool:
        return (self.rotation != "none" or tuple(self.scale) != (1.0, 1.0)
                or self.tilt_degrees > 0 or self.jitter > 0)

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
        if not 0 <= self.tilt_degrees <= 90:
            raise ConfigError(f"data.augment.tilt_degrees must be in [0, 90], "
                              f"got {self.tilt_degrees}")
        if not 0 <= self.jitter < math.inf:
            raise ConfigError(f"data.augment.jitter must be a finite number >= 0, "
                              f"got {self.jitter}")


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
    # Only the split file entries matching these fnmatch patterns are used, e.g. train on
    # one remeshing and test on another: train_entries=meshes/iso/* test_entries=meshes/qes/*
    train_entries: str = "*"
    test_entries: str = "*"
    # The split files, relative to root (lines: mesh paths relative to <root>/<meshes>).
    train_split: str = "train.txt"
    test_split: str = "test.txt"
    # Meshes of the training split held out for validation (0: none): a fixed choice drawn
    # with validation_seed (`meshseg.data.records.prepare.validation_entries`). With a validation
    # split, the run evaluates on it every eval_every steps and on the test split once, at
    # its last step, so no setting is chosen by the test score.
    validation_meshes: int = 0
    validation_seed: int = 0
    validation_shards: int = 1
    # Evaluation (validation and test) on meshes turned by a seeded rotation uniform over
    # SO(3), moved and scaled, one motion per mesh file, applied before the converter
    # derives anything (`meshseg.data.features.pose.turned`): none | so3. Training augmentation is
    # `augment`.
    eval_rotation: str = "none"
    eval_rotation_seed: int = 0
    train_shards: int = 4
    test_shards: int = 1
    adjacency: str = "edges"  # stored in the converted records: none | edges | table
    convert_workers: int = 2  # processes converting meshes on a cache miss
    # batching, both sources
    batch_size: int = 4  # meshes per step
    shuffle_buffer: int = 64  # meshes
    # Per-vertex inputs, concatenated in the order listed here (choices and widths:
    # `feature_widths`, xyz 3 | xyz_fourier 6 per octave | normals 3 | hks 16). normals and
    # hks are computed by the converter and stored in the records (a mesh-folder cache
    # reconverts when they change); xyz_fourier is computed from the positions when a mesh
    # is read, at this many octave frequencies (periods 2 .. 2 / 2**(octaves-1)).
    features: List[str] = field(default_factory=lambda: ["xyz"])
    fourier_octaves: int = FOURIER_OCTAVES
    # Mesh hierarchy stored in the records for multi-scale models: this many levels beyond
    # the mesh itself, each about `coarsening` times fewer vertices (quadric decimation).
    levels: int = 0
    coarsening: float = 4.0
    # Per-mesh descriptor cache (normals, HKS), shared with `meshseg.tools.baseline`; null: none.
    descriptor_cache: Optional[str] = "data/cache/descriptors"
    center: str = "mean"  # mean (vertex mean, the demo's) | area_centroid | none
    scale: str = "rms"  # rms (RMS radius 1, the demo's) | unit_area (surface area 1) | none
    # none | pca: each mesh turned into its principal frame (area-weighted second moment's
    # axes, signs by the third moment) after any rotation, so a turned mesh reads the same
    # (`meshseg.data.pipeline.principal_frame`)
    frame: str = "none"
    skip_bad_records: bool = False  # log, count and skip bad records instead of failing
    overlap: str = "warn"  # a mesh in both splits or twice in one: warn | refuse
    # Under jit=true batches are padded to per-bucket shapes; the step compiles once per bucket.
    bucket_boundaries: Optional[List[int]] = None  # vertex-count upper bounds; null: automatic
    num_buckets: int = 1  # automatic boundaries: this many vertex-count quantiles, then
    # split while a bucket's padding is above max_padding of its vertices (beyond the
    # rounding to pad_multiple), so a few far larger meshes get their own bucket, up to
    # max_buckets buckets; a bucket still above max_padding is logged as a warning.
    max_padding: float = 0.5
    max_buckets: int = 8
    pad_multiple: int = 256  # bucket vertex/edge counts are rounded up to this
    augment: AugmentConfig = field(default_factory=AugmentConfig)


@dataclass
class ModelConfig:
    """The network and its sizes; values: conf/model/.

    `demo`: the tensorflow-graphics demo (`meshseg.nn.model.MeshSegmentationNet`).
    `feastnet_unet`: the multi-scale encoder-decoder over the records' mesh hierarchy
    (`meshseg.nn.unet.FeaStUNet`); level l has conv_channels[l] channels, so it uses
    len(conv_channels) - 1 coarser levels (`data.levels` must store at least as many).
    """

    name: str = "demo"  # demo | feastnet_unet
    num_weight_matrices: int = MISSING  # W in every feature-steered convolution
    input_channels: int = MISSING  # first 1x1 convolution
    conv_channels: List[int] = MISSING  # output channels D of the graph convolutions
    hidden_channels: int = MISSING  # last hidden 1x1 convolution
    translation_invariant: bool = MISSING  # v = -u
    convs_per_level: int = 2  # feastnet_unet: FeaSt convolutions per level and direction
    dropout: float = 0.0  # feastnet_unet: dropout rate before the classifier
    output_level: int = 0  # feastnet_unet: the level the classifier runs on, carried back to 0
    fine_head_channels: int = 0  # feastnet_unet, output_level > 0: the fine head's width (0: none)
    fine_head_convs: int = 0  # feastnet_unet, fine_head_channels > 0: its FeaSt blocks on the mesh
    input_skip: bool = False  # feastnet_unet: the inputs also feed the classifier head
    hidden_layers: int = 1  # feastnet_unet: hidden 1x1 convolutions in the classifier head
    global_skip: bool = False  # feastnet_unet: the global mesh feature also feeds the head
    global_scale: bool = False  # feastnet_unet: ... and scales its first hidden layer (FiLM)


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
    """The optimizer and its learning-rate schedule; values: conf/optimizer/.

    `exponential`: learning_rate * decay_rate ** (step / decay_steps) (the demo's).
    `cosine`: linear warm-up from 0 over `warmup_steps`, then cosine decay to 0 at `steps`.
    """

    name: str = "adam"  # adam | adamw (decoupled weight decay)
    learning_rate: float = MISSING
    schedule: str = "exponential"  # exponential | cosine
    decay_steps: int = 10000  # exponential
    decay_rate: float = 0.95  # exponential
    warmup_steps: int = 0  # cosine
    weight_decay: float = 0.0  # adamw
    beta_1: float = 0.9
    epsilon: float = 1.0e-8


@dataclass
class LossConfig:
    """The per-vertex training loss (`meshseg.train.metrics`)."""

    label_smoothing: float = 0.0  # in [0, 1)
    # inverse_sqrt_frequency: class c weighs 1 / sqrt(its share of the training vertices),
    # normalised so the average vertex weighs 1.
    class_weights: str = "none"


@dataclass
class NamedConfig:
    """A group whose options differ by name only (`loop`)."""

    name: str = MISSING


# When a run scores the test split (`eval.test`, `test_evaluations`).
TEST_EVALUATIONS = ("auto", "never", "final", "every")


@dataclass
class EvalConfig:
    """When a run scores its test split.

    `auto`: `never` with a validation split (`data.validation_meshes` > 0), so a run that
    chooses settings never reads the test split; `every` without one. `final`: once, at the
    last step (a benchmark's final run). `every`: at every evaluation (`eval_every`).
    `never`: not at all (`meshseg.tools.predict --test-split` scores a run later).
    """

    test: str = "auto"


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
    loss: LossConfig = field(default_factory=LossConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    summaries: SummariesConfig = field(default_factory=SummariesConfig)
    seed: int = 0
    jit: bool = False  # compile the train and eval steps with XLA (jit_compile=True)
    steps: int = 500  # training steps (batches)
    # evaluate every N steps and at the end: the validation split, and the test split as
    # eval.test says
    eval_every: int = 100
    deterministic: bool = False  # seed everything and enable TensorFlow's op determinism
    # float32 | mixed_float16 (with loss scaling) | mixed_bfloat16 | auto (mixed_bfloat16 on
    # a CPU with native bfloat16, float32 elsewhere: meshseg.train.precision)
    precision: str = "float32"
    threads: int = 0  # TensorFlow intra-op threads (0: all cores); cap it for parallel sweeps
    inter_op_threads: int = 0  # ops run at once (0: TensorFlow's default, one per core)
    resume: Optional[str] = None  # a run directory to continue from its latest checkpoint
    # Write a TensorBoard profile (<run dir>/train/plugins/profile/) of the global training
    # steps [start, stop) of profile_steps (`meshseg.train.profiling`;
    # docs/implementations.md, "Profiling").
    profile: bool = False
    profile_steps: List[int] = field(default_factory=lambda: [10, 15])


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
# The choices of every string setting that names an option (each entry, for a list);
# strategy.name is checked where the strategy is made (`meshseg.train.distribute`), impl
# names against the implementations' registry (`meshseg.train.run.typed_config`).
CHOICES = {"precision": PRECISIONS, "data.source": DATA_SOURCES,
           "data.adjacency": ADJACENCY_LEVELS, "data.overlap": ("warn", "refuse"),
           "loop.name": LOOPS, "data.features": FEATURE_NAMES, "data.center": CENTERS,
           "data.scale": SCALES, "data.frame": FRAMES, "data.eval_rotation": ("none", "so3"),
           "model.name": MODELS, "optimizer.name": OPTIMIZERS,
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
    for key, choices in CHOICES.items():
        value = _value(config, key)
        if any(entry not in choices for entry in (value if isinstance(value, list) else [value])):
            raise ConfigError(f"{key}={value}: choose one of {', '.join(choices)}")
    if not config.data.features:
        raise ConfigError(f"data.features must list at least one of {', '.join(FEATURE_NAMES)}")
    if len(set(config.data.features)) != len(config.data.features):
        raise ConfigError(f"data.features must list each of {', '.join(FEATURE_NAMES)} at most "
                          f"once, got {list(config.data.features)}")
    if not 1 < config.data.coarsening < math.inf:
        raise ConfigError(f"data.coarsening must be a finite number > 1, "
                          f"got {config.data.coarsening}")
    if config.model.name == "feastnet_unet" and len(config.model.conv_channels) - 1 > config.data.levels:
        needed = len(config.model.conv_channels) - 1
        raise ConfigError(f"model=feastnet_unet with {len(config.model.conv_channels)} "
                          f"conv_channels needs data.levels >= {needed}, got "
                          f"{config.data.levels}: set data.levels={needed} (records made by "
                          f"meshseg.data.convert need --levels {needed}), or train model=demo")
    coarsest = len(config.model.conv_channels) - 1 if config.model.name == "feastnet_unet" else 0
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
    if config.impl.name == "auto" and not config.impl.candidates:
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
