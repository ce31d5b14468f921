"""Run directories: a fresh run claims an empty one; a second run in it must be the same
run (then it resumes); another run's outputs are never mixed with or overwritten."""

import os
from typing import List

from omegaconf import DictConfig, OmegaConf

from meshseg.errors import RunDirError

RUN_CONFIG = "run_config.yaml"
OUTPUTS = ("checkpoints", "train", "eval", "summary.json", "model.keras")
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


def claim_run_dir(run_dir: str, cfg: DictConfig) -> bool:
    """Makes `run_dir` this run's directory; returns True if it continues an earlier run.

    A directory without our outputs is claimed: `run_config.yaml` records `cfg`. A directory
    whose `run_config.yaml` matches `cfg` (up to RESUMABLE_CHANGES) is resumed.

    Raises:
      RunDirError: if `run_dir` holds outputs but no `run_config.yaml` (not a meshseg run),
        or a run with different settings; nothing is written then.
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
    os.makedirs(run_dir, exist_ok=True)
    OmegaConf.save(cfg, saved, resolve=True)
    return False
