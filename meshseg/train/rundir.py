"""Run directories: a fresh run claims an empty one; a second run in it must be the same
run (then it resumes); another run's outputs are never mixed with or overwritten."""

import os
import sys
from typing import List

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from meshseg.errors import RunDirError

# What a run directory holds, besides Hydra's `.hydra/` and `train.log`.
RUN_CONFIG = "run_config.yaml"  # the run's settings (`claim_run_dir`)
SUMMARY_FILE = "summary.json"  # its results (`meshseg.train.summary.RunSummary`)
MODEL_FILE = "model.keras"  # the trained model
CHECKPOINT_DIR = "checkpoints"  # `meshseg.train.checkpoints.TrainingCheckpoint`
OUTPUTS = (CHECKPOINT_DIR, "train", "eval", SUMMARY_FILE, MODEL_FILE)
# Settings a resumed run may change: how long it trains, how often it evaluates, what
# it resumes.
RESUMABLE_CHANGES = ("steps", "eval_every", "resume", "checkpoint")


def differing_settings(previous: DictConfig, current: DictConfig) -> List[str]:
    """Dotted keys whose values differ between two configs (ignoring RESUMABLE_CHANGES)."""
    flat = [{k: v for k, v in _flatten(OmegaConf.to_container(c, resolve=True)).items()
             if k.split(".")[0] not in RESUMABLE_CHANGES} for c in (previous, current)]
    return sorted(k for k in flat[0].keys() | flat[1].keys() if flat[0].get(k) != flat[1].get(k))


def _flatten(tree, prefix=""):
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    out = {}
    for key, value in tree.items():
        out.update(_flatten(value, f"{prefix}{key}."))
    return out


def check_run_dir(run_dir: str, cfg: DictConfig) -> bool:
    """Whether `run_dir` holds an earlier run of `cfg` (True) or none (False); writes nothing.

    Raises:
      RunDirError: if `run_dir` holds outputs but no `run_config.yaml` (not a meshseg run),
        or a run with different settings (up to RESUMABLE_CHANGES).
    """
    saved = os.path.join(run_dir, RUN_CONFIG)
    if os.path.exists(saved):
        differences = differing_settings(OmegaConf.load(saved), cfg)
        if differences:
            raise RunDirError(
                f"{run_dir} holds a run with different settings ({', '.join(differences)}); "
                "choose a new directory (hydra.run.dir=...) or run with the same settings to resume")
        return True
    existing = [name for name in OUTPUTS if os.path.exists(os.path.join(run_dir, name))]
    if existing:
        raise RunDirError(f"{run_dir} already holds outputs ({', '.join(existing)}) of a run "
                          "that is not resumable; choose a new directory (hydra.run.dir=...)")
    return False


def claim_run_dir(run_dir: str, cfg: DictConfig) -> bool:
    """Makes `run_dir` this run's directory; returns True if it continues an earlier run.

    A directory without our outputs is claimed: `run_config.yaml` records `cfg`. A directory
    whose `run_config.yaml` matches `cfg` is resumed.

    Raises:
      RunDirError: see `check_run_dir`; nothing is written then.
    """
    if check_run_dir(run_dir, cfg):
        return True
    os.makedirs(run_dir, exist_ok=True)
    OmegaConf.save(cfg, os.path.join(run_dir, RUN_CONFIG), resolve=True)
    return False


class RunDirCheck(Callback):
    """Hydra callback: checks the run directory before Hydra writes `.hydra/` and its log
    into it, so a refused directory keeps the other run's files exactly as they were."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        task = OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])
        if task.get("resume") is not None:
            return  # a resumed run writes to `resume`, not to the new hydra.run.dir
        try:
            check_run_dir(config.hydra.run.dir, task)
        except RunDirError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(error.exit_code)
