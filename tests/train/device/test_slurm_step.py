"""The cluster of an `srun` job step, from SLURM's variables alone (no scheduler here; the
real one runs in tests/train/device/test_slurm.py): every task finds the same cluster, one
worker per task, on the ports SLURM reserved for the step."""

import pytest

from meshseg.errors import ConfigError
from meshseg.train.device.distribute import cluster_resolver
from meshseg.train.rundir.slurm import slurm_step

STEP = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_NODELIST": "node[07-08]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_RESV_PORTS": "12004-12005"}


@pytest.fixture
def in_step(monkeypatch):
    """Sets the variables of task `rank` of a 2-node, 4-task step (outside any TF_CONFIG
    or submitit job); returns a function of the rank."""
    for name in ("TF_CONFIG", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(name, raising=False)

    def enter(rank: int, **changes: str | None):
        for name, value in {**STEP, "SLURM_PROCID": str(rank), **changes}.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
    return enter


def test_every_task_of_a_step_finds_the_same_cluster_on_the_reserved_ports(in_step):
    specs = []
    for rank in range(4):
        in_step(rank)
        resolver = cluster_resolver(port_base=8888)
        specs.append(resolver.cluster_spec().as_dict())
        assert (resolver.task_type, resolver.task_id) == ("worker", rank)
    assert specs == [{"worker": ["node07:12004", "node07:12005", "node08:12004",
                                 "node08:12005"]}] * 4


def test_without_reserved_ports_the_workers_listen_at_strategy_port_base(in_step):
    in_step(1, SLURM_STEP_RESV_PORTS=None)
    assert slurm_step().reserved_port is None
    spec = cluster_resolver(port_base=9100).cluster_spec().as_dict()
    assert spec["worker"][:2] == ["node07:9100", "node07:9101"]


def test_an_sbatch_scripts_own_shell_is_no_step_and_multi_worker_says_what_it_needs(in_step):
    in_step(0, SLURM_STEP_ID=None)
    assert slurm_step() is None
    with pytest.raises(ConfigError, match=r"needs the TF_CONFIG .*, a SLURM job step \(srun"):
        cluster_resolver(port_base=8888)
