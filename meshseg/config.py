"""The typed schema of `conf/train.yaml`, registered in Hydra's ConfigStore as `train_schema`.

A wrong type in an override (`steps=abc`) or an unknown top-level key fails at start-up
with Hydra's one-line message, before anything runs.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class ModelConfig:
    num_weight_matrices: int = 8
    input_channels: int = 16
    conv_channels: List[int] = field(default_factory=lambda: [32, 64, 128])
    hidden_channels: int = 256
    translation_invariant: bool = True


@dataclass
class OptimizerConfig:
    learning_rate: float = 1e-3
    decay_steps: int = 10000
    decay_rate: float = 0.95
    beta_1: float = 0.9
    epsilon: float = 1e-8


@dataclass
class NamedConfig:
    name: str = "???"


@dataclass
class ImplConfig:
    name: str = "???"
    # impl=auto only: implementations timed, steps timed each, and the timing cache.
    candidates: List[str] = field(default_factory=list)
    timing_steps: int = 2
    cache_file: Optional[str] = None


@dataclass
class CheckpointConfig:
    every: int = 100  # steps between checkpoints
    keep: int = 3  # checkpoints kept


@dataclass
class TrainConfig:
    data: Dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    impl: ImplConfig = field(default_factory=ImplConfig)
    loop: NamedConfig = field(default_factory=NamedConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    strategy: NamedConfig = field(default_factory=NamedConfig)
    seed: int = 0
    jit: bool = False
    deterministic: bool = False
    precision: str = "float32"  # float32 | mixed_float16 | mixed_bfloat16
    threads: int = 0  # TensorFlow intra-op threads; 0: TensorFlow's default (all cores)
    steps: int = 500
    eval_every: int = 100
    resume: Optional[str] = None


ConfigStore.instance().store(name="train_schema", node=TrainConfig)
