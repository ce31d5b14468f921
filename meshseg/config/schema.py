"""The schema of `conf/train.yaml` and its groups: every setting, its type and its
default (the default run's), and the choices of the settings that name an option.

Registered in Hydra's ConfigStore as `train_schema` (`meshseg.config.compose`), the first
entry of the defaults list, so each `conf/<group>/<option>.yaml` states only what differs.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from omegaconf import MISSING

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
OPTIMIZERS = ("adam", "adamw")  # optimizer.name
SCHEDULES = ("exponential", "cosine")  # optimizer.schedule
CLASS_WEIGHTS = ("none", "inverse_sqrt_frequency")  # loss.class_weights
DATA_SOURCES = ("mesh_folder", "tfrecords")
# How much adjacency a converted record stores, from least to most (`data.adjacency`; the
# record fields of each: `meshseg.data.mesh.adjacency.ADJACENCY_FIELDS`): "none" (computed when
# read), "edges" (the 1-ring edge list), "table" (also the neighbour table).
ADJACENCY_LEVELS = ("none", "edges", "table")
LOOPS = ("custom", "keras")
CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"  # conf/train.yaml and its groups
RUN_CONFIG = "run_config.yaml"  # a run's settings, in its run directory (`save_run_config`)


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
    """The network and its sizes; the defaults are the default run's (`feastnet_unet`),
    conf/model/ states what each network changes.

    `demo`: the tensorflow-graphics demo (`meshseg.nn.model.MeshSegmentationNet`).
    `feastnet_unet`: the multi-scale encoder-decoder over the records' mesh hierarchy
    (`meshseg.nn.unet.FeaStUNet`); level l has conv_channels[l] channels, so it uses
    len(conv_channels) - 1 coarser levels (`data.levels` must store at least as many).
    The names: the networks' registry (`meshseg.registry.NETWORKS`).
    """

    name: str = "feastnet_unet"
    num_weight_matrices: int = 8  # W in every feature-steered convolution
    input_channels: int = 16  # first 1x1 convolution
    # output channels D of the graph convolutions (feastnet_unet: of level 0, 1, 2, 3)
    conv_channels: List[int] = field(default_factory=lambda: [16, 32, 64, 128])
    hidden_channels: int = 256  # hidden 1x1 convolutions of the classifier head
    translation_invariant: bool = True  # v = -u
    convs_per_level: int = 2  # feastnet_unet: FeaSt convolutions per level and direction
    dropout: float = 0.0  # feastnet_unet: dropout rate before the classifier
    output_level: int = 0  # feastnet_unet: the level the classifier runs on, carried back to 0
    fine_head_channels: int = 0  # feastnet_unet, output_level > 0: the fine head's width (0: none)
    fine_head_convs: int = 0  # feastnet_unet, fine_head_channels > 0: its FeaSt blocks on the mesh
    input_skip: bool = True  # feastnet_unet: the inputs also feed the classifier head
    hidden_layers: int = 2  # feastnet_unet: hidden 1x1 convolutions in the classifier head
    global_skip: bool = True  # feastnet_unet: the global mesh feature also feeds the head
    global_scale: bool = True  # feastnet_unet: ... and scales its first hidden layer (FiLM)


@dataclass
class ImplConfig:
    """The feature-steered convolution implementation (`meshseg.registry.IMPLEMENTATIONS`),
    or `auto`."""

    name: str = "gather_matmul"
    # impl=auto only: implementations timed, steps timed each, and the timing cache.
    candidates: List[str] = field(default_factory=list)
    timing_steps: int = 2
    cache_file: Optional[str] = None


@dataclass
class OptimizerConfig:
    """The optimizer and its learning-rate schedule; the defaults are the default run's
    (`adamw`), conf/optimizer/adam.yaml states what the demo's recipe changes.

    `exponential`: learning_rate * decay_rate ** (step / decay_steps) (the demo's).
    `cosine`: linear warm-up from 0 over `warmup_steps`, then cosine decay to 0 at `steps`.
    """

    name: str = "adamw"  # adam | adamw (decoupled weight decay)
    learning_rate: float = 2.0e-3
    schedule: str = "cosine"  # exponential | cosine
    decay_steps: int = 10000  # exponential
    decay_rate: float = 0.95  # exponential
    warmup_steps: int = 100  # cosine
    # adamw: Keras AdamW, each step shrinks weights by learning rate x this
    weight_decay: float = 1.0e-2
    beta_1: float = 0.9
    epsilon: float = 1.0e-8


@dataclass
class LossConfig:
    """The per-vertex training loss (`meshseg.train.loop.metrics`)."""

    label_smoothing: float = 0.1  # in [0, 1); the default run's recipe
    # inverse_sqrt_frequency: class c weighs 1 / sqrt(its share of the training vertices),
    # normalised so the average vertex weighs 1.
    class_weights: str = "none"


@dataclass
class NamedConfig:
    """A group whose options differ by name only (`loop`)."""

    name: str = "custom"


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
    """The `strategy` group: data parallelism (`meshseg.train.device.distribute`,
    docs/scaling.md)."""

    name: str = "default"  # default | mirrored | multi_worker (`meshseg.registry.STRATEGIES`)
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
    # a CPU with native bfloat16, float32 elsewhere: meshseg.train.device.precision)
    precision: str = "float32"
    threads: int = 0  # TensorFlow intra-op threads (0: all cores); cap it for parallel sweeps
    inter_op_threads: int = 0  # ops run at once (0: TensorFlow's default, one per core)
    resume: Optional[str] = None  # a run directory to continue from its latest checkpoint
    # Write a TensorBoard profile (<run dir>/train/plugins/profile/) of the global training
    # steps [start, stop) of profile_steps (`meshseg.train.logs.profiling`;
    # docs/implementations.md, "Profiling").
    profile: bool = False
    profile_steps: List[int] = field(default_factory=lambda: [10, 15])
