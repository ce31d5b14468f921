"""The composed configuration of `python train.py`, of the demo recipe and of every
`conf/experiment/*` preset stays as recorded in `tests/golden/composed_configs.json`: the
values pin published results, so moving a default between the schema (`meshseg/config/schema.py`)
and the YAMLs of `conf/` must not move any of them.

Regenerate the record only for an intended change of a composed value:
`MESHSEG_WRITE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_composed_configs.py`.
"""

import json
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import meshseg.config  # noqa: F401  (registers the schema)
from helpers.runs import CONFIG_DIR, PROJECT

GOLDEN = Path(__file__).parent / "golden" / "composed_configs.json"
COMMANDS = {"train.py": [],
            "train.py model=demo optimizer=adam": ["model=demo", "optimizer=adam"],
            **{f"train.py experiment={path.stem}": [f"experiment={path.stem}"]
               for path in sorted((PROJECT / "conf" / "experiment").glob("*.yaml"))}}


def composed(overrides: list) -> dict:
    """The composed `train` config with `overrides`, interpolations unresolved."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=False)


def test_the_record_covers_every_experiment():
    assert set(json.loads(GOLDEN.read_text())) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_composed_values_are_unchanged(command):
    if os.environ.get("MESHSEG_WRITE_GOLDEN"):
        record = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        record[command] = composed(COMMANDS[command])
        GOLDEN.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    assert composed(COMMANDS[command]) == json.loads(GOLDEN.read_text())[command]
