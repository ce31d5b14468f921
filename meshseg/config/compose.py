"""The configuration as Hydra composes it, turned into the typed `TrainConfig` and checked
(`checked_config`), composed for a tool as `train.py` composes it (`composed_config`,
`train_config`), and a run's settings file, `run_config.yaml` (`load_run_config`,
`save_run_config`: its one reader and writer).
"""

import dataclasses
import io
from pathlib import Path
from typing import List, Optional

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
import yaml
from omegaconf import DictConfig, MissingMandatoryValue, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from meshseg.config.checks import check, check_overrides
from meshseg.config.schema import CONFIG_DIR, RUN_CONFIG, TrainConfig
from meshseg.errors import ConfigError

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


def train_config(overrides: List[str]) -> TrainConfig:
    """`composed_config(overrides)` as the typed, checked `TrainConfig`: what a tool that
    takes train.py's overrides receives.

    Raises:
      ConfigError: as `composed_config`.
    """
    return checked_config(composed_config(overrides))


def load_run_config(run_dir: str) -> Optional[TrainConfig]:
    """The typed settings a run stored in `<run_dir>/run_config.yaml` (`RUN_CONFIG`,
    written by `save_run_config`), or None without one: the one reader of that file.

    Raises:
      ConfigError: "<path> is not a meshseg run's settings (<why>)" for a damaged file:
        not UTF-8, not YAML, or keys and values the settings do not have.
    """
    path = Path(run_dir) / RUN_CONFIG
    if not path.exists():
        return None
    try:
        stored = OmegaConf.load(io.StringIO(path.read_bytes().decode("utf-8-sig")))
        if not isinstance(stored, DictConfig) or not stored:
            raise ValueError("it holds no settings")
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), stored))
    except (yaml.YAMLError, OmegaConfBaseException, ValueError) as error:
        raise ConfigError(f"{path} is not a meshseg run's settings "
                          f"({_damage(error)})") from None


def _damage(error: Exception) -> str:
    """What is wrong with a damaged settings file, in one line."""
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 text: byte 0x{error.object[error.start]:02x} at offset {error.start}"
    mark = getattr(error, "problem_mark", None)
    if mark is not None:
        return f"not YAML: line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def save_run_config(config: TrainConfig, path: str) -> None:
    """Writes `config` as YAML to `path` (`run_config.yaml`: a run's settings)."""
    OmegaConf.save(OmegaConf.structured(config), path)


def flat_settings(config: TrainConfig) -> dict:
    """{dotted key: value} of every setting of `config` ("data.batch_size": 4)."""
    def flatten(tree, prefix=""):
        if not isinstance(tree, dict):
            return {prefix[:-1]: tree}
        return {key: value for name, child in tree.items()
                for key, value in flatten(child, f"{prefix}{name}.").items()}

    return flatten(dataclasses.asdict(config))


ConfigStore.instance().store(name="train_schema", node=TrainConfig)
