"""Sweep launchers compose: sequential (default), local parallel (joblib) and SLURM (submitit)."""

import pytest
from hydra import compose, initialize_config_dir

import meshseg.config  # noqa: F401  (registers the config schema)
from helpers.runs import CONFIG_DIR


def hydra_config(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True).hydra


def test_sweeps_run_jobs_one_after_another_by_default():
    assert hydra_config().launcher._target_ == "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def test_local_launcher_runs_capped_parallel_jobs():
    launcher = hydra_config("hydra/launcher=local").launcher
    assert launcher._target_ == "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert launcher.backend == "loky" and launcher.n_jobs == 2
    assert hydra_config("hydra/launcher=local", "hydra.launcher.n_jobs=1").launcher.n_jobs == 1


def test_slurm_launcher_sets_gpus_time_limit_and_array_parallelism():
    launcher = hydra_config("hydra/launcher=slurm", "hydra.launcher.partition=gpu").launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.gpus_per_node, launcher.timeout_min, launcher.array_parallelism) == (1, 240, 8)
    assert launcher.partition == "gpu"


def test_an_unknown_launcher_option_is_refused():
    with pytest.raises(Exception, match="no_such_option"):
        hydra_config("hydra/launcher=local", "hydra.launcher.no_such_option=1")
