"""The typed configuration of a run: the schema of `conf/train.yaml` and its groups.

Registered in Hydra's ConfigStore as `train_schema`, the first entry of the defaults list,
so every key has a type and a default here and each `conf/<group>/<option>.yaml` states
only what differs. A wrong type (`steps=abc`), an unknown key (`data.batch_sise=2`) or an
unknown group option fails at composition with Hydra's one-line message. Values the types
cannot check (ranges, choices, combinations) are checked by `check` before a run writes
anything.

The run (`meshseg.train.run`) turns the composed DictConfig into these dataclasses with
`OmegaConf.to_object`; below the run, code receives them or plain values, never a
DictConfig.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from meshseg.errors import ConfigError

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
ROTATIONS = ("none", "up", "so3")
DATA_SOURCES = ("mesh_folder", "tfrecords")


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
    """A group whose options differ by name only (`loop`, `strategy`)."""

    name: str = MISSING


@dataclass
class CheckpointConfig:
    every: int = 100  # steps between checkpoints (model, optimizer, step, input position)
    keep: int = 3  # checkpoints kept in <run dir>/checkpoints


@dataclass
class TrainConfig:
    """Everything a run is configured by; `python train.py --cfg job` prints it."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    impl: ImplConfig = field(default_factory=ImplConfig)
    loop: NamedConfig = field(default_factory=NamedConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    strategy: NamedConfig = field(default_factory=NamedConfig)
    seed: int = 0
    jit: bool = False  # compile the train and eval steps with XLA (jit_compile=True)
    steps: int = 500  # training steps (batches)
    eval_every: int = 100  # evaluate on the test split every N steps and at the end
    deterministic: bool = False  # seed everything and enable TensorFlow's op determinism
    precision: str = "float32"  # float32 | mixed_float16 (with loss scaling) | mixed_bfloat16
    threads: int = 0  # TensorFlow intra-op threads (0: all cores); cap it for parallel sweeps
    resume: Optional[str] = None  # a run directory to continue from its latest checkpoint


def check(config: TrainConfig) -> None:
    """Checks what the types cannot: positive counts, choices and combinations.

    Raises:
      ConfigError: naming the setting.
    """
    counts = {"steps": config.steps, "eval_every": config.eval_every,
              "checkpoint.every": config.checkpoint.every,
              "checkpoint.keep": config.checkpoint.keep, "data.batch_size": config.data.batch_size}
    for key, value in counts.items():
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    if config.precision not in PRECISIONS:
        raise ConfigError(f"precision={config.precision}: choose one of {', '.join(PRECISIONS)}")
    if config.data.source not in DATA_SOURCES:
        raise ConfigError(f"data.source must be one of {DATA_SOURCES}, got {config.data.source!r}")
    config.data.augment.check()
    if config.strategy.name != "default" and config.jit:
        raise ConfigError(f"jit=true with strategy={config.strategy.name} is not supported; "
                          "use jit=false (replicas merge updates outside XLA)")
    if config.strategy.name == "multi_worker" and config.loop.name != "custom":
        raise ConfigError("strategy=multi_worker needs loop=custom (Keras 3 Model.fit does not "
                          "run MultiWorkerMirroredStrategy here)")


ConfigStore.instance().store(name="train_schema", node=TrainConfig)
