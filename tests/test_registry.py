"""The registries (`meshseg.registry`) are the one list of networks, implementations and
strategies: every option of `conf/impl`, `conf/model` and `conf/strategy` is registered,
every registered one has its option, and every registered entry's code loads."""

from pathlib import Path

import pytest
import yaml

from meshseg import config, registry
from meshseg.errors import ConfigError

CONF = Path(__file__).resolve().parents[1] / "conf"


def option_names(group: str) -> dict:
    """{file stem: its `name`} of every `conf/<group>/*.yaml`."""
    return {path.stem: yaml.safe_load(path.read_text())["name"]
            for path in sorted((CONF / group).glob("*.yaml"))}


@pytest.mark.parametrize("group, registered, extra", [
    ("impl", registry.IMPLEMENTATIONS, {registry.AUTO_IMPL}),
    ("model", registry.NETWORKS, set()),
    ("strategy", registry.STRATEGIES, set()),
])
def test_every_option_of_a_group_is_registered_and_every_entry_has_one(group, registered, extra):
    names = option_names(group)
    assert all(stem == name for stem, name in names.items())  # impl=x sets impl.name=x
    assert set(names) == set(registered) | extra


def test_every_implementation_states_its_xla_formulation_and_its_op_loads():
    for name, entry in registry.IMPLEMENTATIONS.items():
        assert entry.xla_formulation.strip(), name
        assert callable(registry.load(entry.op)), name


def test_every_network_loads_and_takes_only_model_settings():
    fields = set(config.schema_keys(config.ModelConfig))
    for name, entry in registry.NETWORKS.items():
        assert callable(registry.load(entry.builder)), name
        assert set(entry.settings) <= fields, name


def test_auto_candidates_are_the_registered_implementations():
    candidates = yaml.safe_load((CONF / "impl" / "auto.yaml").read_text())["candidates"]
    assert sorted(candidates) == sorted(registry.IMPLEMENTATIONS)


@pytest.mark.parametrize("override, message", [
    ("model.name=pointnet", "model.name=pointnet: choose one of demo, feastnet_unet"),
    ("strategy.name=horovod", "strategy.name=horovod: choose one of default, mirrored, "
                              "multi_worker"),
    ("impl.name=dense", "impl.name: unknown implementation dense; choose from gather_sum"),
])
def test_names_outside_the_registries_are_refused_by_the_one_check(override, message):
    with pytest.raises(ConfigError, match=message):
        config.composed_config([override])
