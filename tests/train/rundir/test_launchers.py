"""Sweep launchers: sequential by default, an unknown launcher option refused, and
submitit's local executor running a multi-worker sweep, one worker per task. The SLURM
launcher (hydra/launcher=slurm) runs a job through sbatch in tests/train/device/test_slurm.py
(opt-in: -m slurm)."""

import subprocess

import pytest
from hydra import compose, initialize_config_dir

import meshseg.config  # noqa: F401  (registers the config schema)
from helpers.runs import CONFIG_DIR, PROJECT, free_ports, train_command
from meshseg.train.rundir.summary import RunSummary


def hydra_config(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True).hydra


def test_sweeps_run_jobs_one_after_another_by_default():
    assert hydra_config().launcher._target_ == "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def test_an_unknown_launcher_option_is_refused():
    with pytest.raises(Exception, match="no_such_option"):
        hydra_config("hydra/launcher=local", "hydra.launcher.no_such_option=1")


@pytest.mark.slow
def test_a_submitit_multirun_starts_one_worker_per_task_and_writes_each_jobs_run_directory(
        tiny_dataset, tmp_path):
    # Two jobs (one per port base), each of two tasks: worker 0 and worker 1 of its cluster.
    bases = [free_ports(2, consecutive=True)[0] for _ in range(2)]
    command = [arg for arg in train_command(tiny_dataset, None, "steps=2", "eval_every=2")
               if not arg.startswith("hydra.run.dir=")]
    result = subprocess.run(
        [*command[:2], "-m", *command[2:], "hydra/launcher=submitit_local",
         "hydra.launcher.tasks_per_node=2",
         "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={tmp_path}",
         "strategy=multi_worker", f"strategy.port_base={bases[0]},{bases[1]}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    run_dirs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name.split("_")[0] for p in run_dirs] == ["0", "1"]
    for run_dir in run_dirs:
        summary = RunSummary.load(run_dir)
        assert summary.steps == 2 and summary.replicas == 2
        assert (run_dir / "model.keras").exists()
        log = (run_dir / "train.log").read_text()
        assert "worker 0 of 2:" in log and "worker 1 of 2:" in log
