"""Run and sweep directories: each run or sweep claims its own before Hydra writes into it,
even when they start in the same second; a directory given with hydra.run.dir keeps its name,
and a given hydra.sweep.dir that is not empty is refused without a change to it."""

import copy
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from meshseg.config import checked_config
from helpers.runs import CONFIG_DIR, PROJECT, communicate_all, default_dir_train_command
from meshseg.errors import RunDirError
from meshseg.tools.hydra_callbacks import RunDirCheck, claim_sweep_dir
from meshseg.train.rundir.claim import claim_run_dir, new_run_dir
from meshseg.train.rundir.summary import RunSummary

# `python -c TOGETHER <barrier dir> <runs> <hook> train.py <overrides>`: train.py, whose
# run-directory callback's <hook> (on_run_start, or on_multirun_start for a sweep) first waits
# until all <runs> processes have reached it; so runs launched together read the clock (the
# default directory's name) and claim their directory at the same moment.
TOGETHER = """\
import os, runpy, sys, time
from meshseg.tools.hydra_callbacks import RunDirCheck
barrier, runs, hook = sys.argv.pop(1), int(sys.argv.pop(1)), sys.argv.pop(1)
claim = getattr(RunDirCheck, hook)
def together(self, config, **kwargs):
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    while len(os.listdir(barrier)) < runs:
        time.sleep(0.001)
    claim(self, config, **kwargs)
setattr(RunDirCheck, hook, together)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def hydra_config(*overrides: str, with_hydra: bool = True):
    """The `train` config with its `hydra` node, as the RunDirCheck callback receives it
    (without it, as the run receives it, if not `with_hydra`). The bundled data's folder
    is given as an absolute path: the tests run in their own working directories."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="train",
                       overrides=[f"data.root={PROJECT / 'data' / 'rna_sample'}", *overrides],
                       return_hydra_config=with_hydra)


def launch(config) -> str:
    """Runs the callback on `config` as Hydra does before the run; returns the run dir."""
    RunDirCheck().on_run_start(config=config)
    return config.hydra.run.dir


def test_two_claims_of_the_same_name_get_two_new_directories(tmp_path):
    name = str(tmp_path / "outputs" / "2024-05-01_12-00-00_gather_matmul_custom_jit-False")
    assert new_run_dir(name) == name
    assert new_run_dir(name) == f"{name}-1"
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == [
        "2024-05-01_12-00-00_gather_matmul_custom_jit-False",
        "2024-05-01_12-00-00_gather_matmul_custom_jit-False-1"]


def test_simultaneous_claims_of_one_name_each_get_their_own_directory(tmp_path):
    name = str(tmp_path / "run")
    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(new_run_dir, [name] * 8))
    assert sorted(claimed) == sorted([name] + [f"{name}-{n}" for n in range(1, 8)])


def test_runs_started_in_the_same_second_get_the_default_name_and_a_numbered_one(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = hydra_config("seed=0")
    config.hydra.run.dir = config.hydra.run.dir  # the timestamp both runs resolve
    default = config.hydra.run.dir
    assert default.startswith("outputs/") and default.endswith("_gather_matmul_custom_jit-False")
    assert [launch(copy.deepcopy(config)) for _ in range(2)] == [default, f"{default}-1"]
    # Claimed empty but for its lock (`meshseg.train.rundir.runlock`), for Hydra to fill.
    assert [p.name for p in (tmp_path / default).iterdir()] == [".lock"]


def test_a_given_run_dir_is_never_renamed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = hydra_config("seed=0", f"hydra.run.dir={tmp_path / 'run'}")
    assert launch(copy.deepcopy(config)) == str(tmp_path / "run")  # a new run
    claim_run_dir(str(tmp_path / "run"), checked_config(hydra_config("seed=0", with_hydra=False)))
    assert launch(copy.deepcopy(config)) == str(tmp_path / "run")  # resumes it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_given_run_dir_that_holds_another_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    claim_run_dir(str(tmp_path / "run"), checked_config(hydra_config("seed=0", with_hydra=False)))
    with pytest.raises(SystemExit) as exit_info:
        launch(hydra_config("seed=1", f"hydra.run.dir={tmp_path / 'run'}"))
    assert exit_info.value.code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("slurm_job, job", [(None, "cluster-"), ("4242", "slurm-4242")])
def test_the_workers_of_a_multi_worker_job_share_one_directory_named_after_the_job(
        slurm_job, job, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if slurm_job is None:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    else:
        monkeypatch.setenv("SLURM_JOB_ID", slurm_job)
    cluster = {"worker": ["hostA:12345", "hostB:12345"]}
    run_dirs = []
    for index in range(2):
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        run_dirs.append(launch(hydra_config("strategy=multi_worker")))
    assert run_dirs[0] == run_dirs[1]
    assert run_dirs[0].startswith(f"outputs/job-{job}")
    assert run_dirs[0].endswith("_gather_matmul_custom_jit-False")


def test_the_tasks_of_an_srun_step_share_one_directory_named_after_the_job(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name, value in {"SLURM_JOB_ID": "515", "SLURM_STEP_ID": "0",
                        "SLURM_STEP_NUM_TASKS": "2"}.items():
        monkeypatch.setenv(name, value)
    run_dirs = []
    for rank in range(2):
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        run_dirs.append(launch(hydra_config("strategy=multi_worker")))
    assert run_dirs[0] == run_dirs[1]
    assert run_dirs[0].startswith("outputs/job-slurm-515_")
    monkeypatch.delenv("SLURM_STEP_ID")  # the batch script's own shell: a single process
    assert not launch(hydra_config("strategy=multi_worker")).startswith("outputs/job-")


@pytest.mark.slow
def test_two_runs_started_together_each_train_in_their_own_directory(tiny_dataset, tmp_path):
    (tmp_path / "barrier").mkdir()
    commands = [default_dir_train_command(tiny_dataset, "steps=2", f"seed={seed}")
                for seed in (0, 1)]
    runs = [subprocess.Popen([python, "-c", TOGETHER, str(tmp_path / "barrier"), "2",
                              "on_run_start", *args],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
            for python, *args in commands]
    outputs = communicate_all(runs, timeout=240)
    assert [run.returncode for run in runs] == [0, 0], [output[-3000:] for output in outputs]

    run_dirs = sorted((tmp_path / "outputs").iterdir())
    assert len(run_dirs) == 2
    seed_of = {}
    for run_dir in run_dirs:
        overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
        log = (run_dir / "train.log").read_text()
        seeds = [seed for seed in (0, 1) if f"seed={seed}" in overrides]
        assert len(seeds) == 1, overrides
        assert [seed for seed in (0, 1) if f"seed={seed}" in log] == seeds, log
        assert f"run directory: {run_dir}\n" in log, log
        seed_of[run_dir.name] = seeds[0]
    assert sorted(seed_of.values()) == [0, 1]


def test_sweeps_started_in_the_same_second_each_claim_their_own_directory(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = hydra_config("seed=0")
    config.hydra.sweep.dir = config.hydra.sweep.dir  # the timestamp both sweeps resolve
    default = config.hydra.sweep.dir
    configs = [copy.deepcopy(config) for _ in range(2)]
    assert [claim_sweep_dir(c) for c in configs] == [default, f"{default}-1"]
    for claimed, c in zip([default, f"{default}-1"], configs):
        assert c.hydra.sweep.dir == claimed  # where the sweeper writes multirun.yaml
        # every job's config is composed from these overrides: its run dir is inside
        assert list(c.hydra.overrides.hydra)[-1] == f"hydra.sweep.dir={claimed}"  # plain
        assert not any((tmp_path / claimed).iterdir())


def test_a_given_sweep_dir_is_claimed_once_and_one_that_is_not_empty_is_left_as_it_was(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    given = tmp_path / "sweep"
    config = hydra_config("seed=0", f"hydra.sweep.dir={given}")
    assert claim_sweep_dir(copy.deepcopy(config)) == str(given)
    assert [p.name for p in given.iterdir()] == ["multirun.yaml"]
    with pytest.raises(RunDirError, match="hydra.sweep.dir=.*sweep is not empty .*multirun.yaml"):
        claim_sweep_dir(copy.deepcopy(config))
    # the neighbour: a folder that holds a run, not a sweep
    claim_run_dir(str(tmp_path / "run" / "0_job"),
                  checked_config(hydra_config("seed=0", with_hydra=False)))
    with pytest.raises(SystemExit) as exit_info:
        RunDirCheck().on_multirun_start(
            config=hydra_config("seed=0", f"hydra.sweep.dir={tmp_path / 'run'}"))
    assert exit_info.value.code == 2
    assert sorted(p.name for p in (tmp_path / "run").rglob("*")) == [
        ".lock", "0_job", "run_config.yaml"]


def tree_bytes(root) -> dict:
    """{relative path: bytes} of every file under `root`."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_two_sweeps_started_together_each_train_in_their_own_and_a_reused_dir_is_refused(
        tiny_dataset, tmp_path):
    (tmp_path / "barrier").mkdir()
    rates = ("0.001", "0.003")
    commands = [default_dir_train_command(tiny_dataset, "steps=2", f"optimizer.learning_rate={rate}")
                for rate in rates]
    sweeps = [subprocess.Popen([python, "-c", TOGETHER, str(tmp_path / "barrier"), "2",
                                "on_multirun_start", args[0], "-m", *args[1:]],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
              for python, *args in commands]
    outputs = communicate_all(sweeps, timeout=300)
    assert [sweep.returncode for sweep in sweeps] == [0, 0], [out[-3000:] for out in outputs]

    sweep_dirs = sorted((tmp_path / "multirun").iterdir())
    assert len(sweep_dirs) == 2 and sweep_dirs[1].name == f"{sweep_dirs[0].name}-1"
    rate_of = []
    for sweep_dir in sweep_dirs:
        [job_dir] = [p for p in sweep_dir.iterdir() if p.is_dir()]
        overrides = (job_dir / ".hydra" / "overrides.yaml").read_text()
        [rate] = [rate for rate in rates if f"learning_rate={rate}" in overrides]
        run_config = OmegaConf.load(job_dir / "run_config.yaml")
        assert run_config.optimizer.learning_rate == float(rate)
        log = (job_dir / "train.log").read_text()
        assert [r for r in rates if f"learning_rate={r}" in log] == [rate], log
        assert RunSummary.load(job_dir).steps == 2
        rate_of.append(rate)
    assert sorted(rate_of) == list(rates)

    before = tree_bytes(sweep_dirs[0])
    held = sorted(p.name for p in sweep_dirs[0].iterdir())
    reuse = subprocess.run([*commands[0][:2], "-m", *commands[0][2:],
                            f"hydra.sweep.dir={sweep_dirs[0]}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert reuse.returncode == 2
    assert reuse.stderr.strip().splitlines() == [
        f"error: hydra.sweep.dir={sweep_dirs[0]} is not empty (it holds "
        f"{', '.join(held[:3])}{', ...' if len(held) > 3 else ''}); give a new "
        "directory, or leave hydra.sweep.dir out for a new dated one"]
    assert tree_bytes(sweep_dirs[0]) == before


@pytest.mark.parametrize("hook, overrides, folder", [
    # the run's default, dated directory in an existing outputs/ on a read-only filesystem
    ("on_run_start", (), "outputs/"),
    # a sweep's default, dated one, and the neighbour: a given sweep directory
    ("on_multirun_start", (), "multirun/"),
    ("on_multirun_start", ("hydra.sweep.dir={mount}/sweep",), "{mount}/sweep"),
])
def test_a_run_or_sweep_directory_that_cannot_be_created_ends_in_one_line(
        tmp_path, monkeypatch, capsys, hook, overrides, folder):
    """The filesystem turns read-only after the up-front check (`check_output_dir`, made a
    no-op here): the directory's creation fails for real, and is one line, exit 6."""
    from helpers.filesystems import tmpfs
    import meshseg.tools.hydra_callbacks as callbacks

    prepare = lambda mount: [(mount / name).mkdir() for name in ("outputs", "multirun")]
    with tmpfs("1m", read_only=True, prepare=prepare) as mount:
        monkeypatch.chdir(mount)
        monkeypatch.setattr(callbacks, "check_output_dir", lambda path, name="": path)
        config = hydra_config("seed=0", *(o.format(mount=mount) for o in overrides))
        with pytest.raises(SystemExit) as exit_info:
            getattr(RunDirCheck(), hook)(config=config)
        err = capsys.readouterr().err
        assert exit_info.value.code == 6, err
        assert err.startswith(f"error: {folder.format(mount=mount)}") and err.count("\n") == 1
        assert "cannot write" in err and err.endswith(": Read-only file system\n")
        assert sorted(p.name for p in mount.rglob("*")) == ["multirun", "outputs"]
