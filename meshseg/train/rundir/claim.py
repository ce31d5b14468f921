"""Run directories: a fresh run claims an empty one; a second run in it must be the same
run (then it resumes); another run's outputs are never mixed with or overwritten. Runs
started at once under the default, timestamped name each claim their own directory, and
so do sweeps."""

import hashlib
import json
import os
import shutil
import socket
from itertools import count
from typing import List

import google_crc32c

from meshseg.config import RUN_CONFIG, TrainConfig, flat_settings, load_run_config, save_run_config
from meshseg.data.mesh.foreign import read_json
from meshseg.errors import ConfigError, Interrupted, RunDirError
from meshseg.outputs import make_dirs, write_atomically, write_json, writing
from meshseg.signals import Stop
from meshseg.train.rundir.runlock import hold_run_dir

# What a run directory holds, besides Hydra's `.hydra/` and `train.log`.
SUMMARY_FILE = "summary.json"  # its results (`meshseg.train.rundir.summary.RunSummary`)
MODEL_FILE = "model.keras"  # the trained model
CHECKPOINT_DIR = "checkpoints"  # `meshseg.train.rundir.checkpoints.TrainingCheckpoint`
DATA_FILES = "data_files.json"  # the shards it started on (`record_or_check_data`)
MULTIRUN_FILE = "multirun.yaml"  # Hydra's record of a sweep, in its directory
HYDRA_DIR = ".hydra"  # Hydra's record of the launch (`hydra.output_subdir`)
OUTPUTS = (CHECKPOINT_DIR, "train", "eval", SUMMARY_FILE, MODEL_FILE)
# Settings a resumed run may change: how long it trains, how often it evaluates, what
# it resumes, whether it profiles.
RESUMABLE_CHANGES = ("steps", "eval_every", "eval", "resume", "checkpoint", "profile",
                     "profile_steps")
_READ_CHUNK = 1 << 24  # bytes read at once for a shard's checksum


def differing_settings(previous: TrainConfig, current: TrainConfig) -> List[str]:
    """Dotted keys whose values differ between two configs (ignoring RESUMABLE_CHANGES)."""
    flat = [{k: v for k, v in flat_settings(c).items()
             if k.split(".")[0] not in RESUMABLE_CHANGES} for c in (previous, current)]
    return sorted(k for k in flat[0].keys() | flat[1].keys() if flat[0].get(k) != flat[1].get(k))


def check_run_dir(run_dir: str, config: TrainConfig) -> bool:
    """Whether `run_dir` holds an earlier run of `config` (True) or none (False); writes
    nothing.

    Raises:
      RunDirError: if `run_dir` holds outputs but no `run_config.yaml` (not a meshseg run),
        or a run with different settings (up to RESUMABLE_CHANGES).
    """
    saved = load_run_config(run_dir)
    if saved is not None:
        differences = differing_settings(saved, config)
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


def check_resume(run_dir: str, given: str) -> None:
    """Checks that `run_dir` (given on the command line as `resume=<given>`) holds a run.

    Raises:
      ConfigError: if it is not a directory, or holds no `run_config.yaml`.
    """
    if not os.path.isdir(run_dir):
        raise ConfigError(f"resume={given}: no such run directory")
    if not os.path.exists(os.path.join(run_dir, RUN_CONFIG)):
        raise ConfigError(f"resume={given}: there is no run to resume there (no {RUN_CONFIG})")


def claim_run_dir(run_dir: str, config: TrainConfig) -> bool:
    """Makes `run_dir` this run's directory; returns True if it continues an earlier run.

    A directory without our outputs is claimed: `run_config.yaml` records `config` (the
    settings as composed: data paths as given, `precision` unresolved). It appears
    whole (written aside, then renamed), as the workers of a multi-worker job that share the
    directory may read it while another writes it. A directory whose `run_config.yaml`
    matches `config` is resumed. Either way this process then holds the directory's lock
    (`meshseg.train.rundir.runlock`) if it did not already.

    Raises:
      RunDirError: see `check_run_dir`, or if another live process holds the lock; nothing
        is written then.
      OutputError: if `run_config.yaml` cannot be written.
    """
    resumed = check_run_dir(run_dir, config)
    hold_run_dir(run_dir)
    if resumed:
        return True
    write_atomically(os.path.join(run_dir, RUN_CONFIG),
                     lambda path: save_run_config(config, path), "the run's settings")
    return False


def data_fingerprint(files: dict[str, list[str]]) -> dict[str, list[dict]]:
    """{split: [{"file": absolute path, "bytes": size, "crc32c": hex CRC-32C of the whole
    file}]} of a run's shards (`DataInfo.files`), in split order. Reading them costs about
    a second per GiB here."""
    fingerprint = {}
    for split, paths in files.items():
        entries = []
        for path in paths:
            checksum = google_crc32c.Checksum()
            with open(path, "rb") as stream:
                for chunk in iter(lambda: stream.read(_READ_CHUNK), b""):
                    checksum.update(chunk)
            entries.append({"file": os.path.abspath(path), "bytes": os.path.getsize(path),
                            "crc32c": checksum.hexdigest().decode()})
        fingerprint[split] = entries
    return fingerprint


def changed_data(recorded: dict[str, list[dict]], current: dict[str, list[dict]]) -> List[str]:
    """What differs between two `data_fingerprint`s, one phrase per shard or split, e.g.
    "train: /data/train-00000-of-00002.tfrecords changed"; [] when they agree."""
    changes = []
    for split in sorted(recorded.keys() | current.keys()):
        before = {entry["file"]: entry for entry in recorded.get(split, [])}
        after = {entry["file"]: entry for entry in current.get(split, [])}
        changes += [f"{split}: {name} is gone" for name in sorted(before.keys() - after.keys())]
        changes += [f"{split}: {name} is new" for name in sorted(after.keys() - before.keys())]
        changes += [f"{split}: {name} changed" for name in sorted(before.keys() & after.keys())
                    if before[name] != after[name]]
    return changes


def record_or_check_data(run_dir: str, files: dict[str, list[str]], resumed: bool,
                         write: bool = True) -> None:
    """Records the shards a run starts on in `<run_dir>/data_files.json`, or, when it
    resumes, checks that they are the ones it started on, so a resumed run never continues
    on other data without a word (its checkpoint's input position would point into another
    stream). A resumed run without the record (stopped before writing it) writes it.

    Args:
      run_dir: the run directory.
      files: {split: [shard paths]} (`DataInfo.files`).
      resumed: whether the run continues an earlier one in `run_dir`.
      write: whether this process writes the record (the chief of a multi-worker job).

    Raises:
      RunDirError: on a resume whose shards differ from the recorded ones, naming each
        changed, new or missing shard; nothing is written then.
      OutputError: if the record cannot be written.
    """
    path = os.path.join(run_dir, DATA_FILES)
    current = data_fingerprint(files)
    if resumed and os.path.exists(path):
        changes = changed_data(_data_record(path), current)
        if changes:
            raise RunDirError(f"{run_dir}: the data changed since the run started "
                              f"({'; '.join(changes)}); resume it on the data it started on "
                              "(see its run_config.yaml and data_files.json), or start a new "
                              "run (hydra.run.dir=...)")
        return
    if write:
        write_json(path, current, "the run's data record")


def _data_record(path: str) -> dict[str, list[dict]]:
    """The `data_fingerprint` recorded in `path` (`data_files.json`).

    Raises:
      ConfigError: "<path> is not a meshseg run's data record (damaged: <why>)": cut
        short, not UTF-8, not JSON or not {split: [{"file": ...}, ...]}; the resumed run
        cannot be checked against its data.
    """
    what = "a meshseg run's data record"
    record = read_json(path, what, ConfigError)
    for split, entries in record.items():
        if not isinstance(entries, list) or not all(
                isinstance(entry, dict) and isinstance(entry.get("file"), str)
                for entry in entries):
            raise ConfigError(f"{path} is not {what} (damaged: {split!r} is not a list "
                              "of shards with their file)")
    return record


def new_run_dir(name: str) -> str:
    """Creates a directory that no other run has and returns its path: `name`, or else the
    first of `name-1`, `name-2`, ... that does not exist. Creating it (`os.mkdir`) is the
    claim and is atomic, so runs that claim the same name at once each get their own.

    Raises:
      OutputError: "<folder>: cannot write the run directory: <cause>" if it cannot be
        created (other than because it exists): a read-only or full filesystem, no inodes
        left, no permission (`meshseg.outputs.writing`).
    """
    make_dirs(os.path.dirname(name) or ".")
    for attempt in count():
        candidate = f"{name}-{attempt}" if attempt else name
        with writing(candidate, "the run directory"):
            try:  # (inside `writing`, which would take "File exists" for a failure)
                os.mkdir(candidate)
                return candidate
            except FileExistsError:
                continue


def job_id() -> str:
    """What the workers of this multi-worker job share: the scheduler's job id
    (`slurm-<SLURM_JOB_ID>`), or else `cluster-<hash>` of the cluster in TF_CONFIG.

    Raises:
      ConfigError: if TF_CONFIG is not a JSON object.
    """
    if os.environ.get("SLURM_JOB_ID"):
        return f"slurm-{os.environ['SLURM_JOB_ID']}"
    try:
        cluster = json.loads(os.environ["TF_CONFIG"]).get("cluster")
    except (ValueError, AttributeError):
        raise ConfigError("TF_CONFIG is not a JSON object with the cluster and task; "
                          "see docs/scaling.md") from None
    return "cluster-" + hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:8]


def pending_hydra_record(run_dir: str) -> str:
    """Where Hydra writes its record of a launch (`config.yaml`, `hydra.yaml`,
    `overrides.yaml`) into a run directory that already holds a run: aside, so that the
    record of the run there stays as it was until this launch is accepted
    (`accept_hydra_record`) or refused (`drop_hydra_record`)."""
    return os.path.join(run_dir, f"{HYDRA_DIR}.pending-{socket.gethostname()}-{os.getpid()}")


def accept_hydra_record(run_dir: str) -> None:
    """Moves this launch's Hydra record, kept aside (`pending_hydra_record`), into
    `<run_dir>/.hydra/`; nothing to do when there is none (a new run, a run started in
    this process without Hydra)."""
    pending = pending_hydra_record(run_dir)
    if not os.path.isdir(pending):
        return
    os.makedirs(os.path.join(run_dir, HYDRA_DIR), exist_ok=True)
    for name in os.listdir(pending):
        os.replace(os.path.join(pending, name), os.path.join(run_dir, HYDRA_DIR, name))
    shutil.rmtree(pending, ignore_errors=True)


def drop_hydra_record(run_dir: str) -> None:
    """Removes this launch's Hydra record kept aside, if it was not accepted."""
    shutil.rmtree(pending_hydra_record(run_dir), ignore_errors=True)


def interrupted_run(stop: Stop, run_dir: str) -> Interrupted:
    """The `Interrupted` error of a run stopped by `stop` outside its training steps
    (converting its data, building the pipeline, tracing, saving): resumable when
    `run_dir` holds the run (its `run_config.yaml`)."""
    if os.path.isfile(os.path.join(run_dir, RUN_CONFIG)):
        return Interrupted(f"stopped by {stop.name}; the run in {run_dir} continues from "
                           "its last checkpoint (or its start)", stop.signum)
    return Interrupted(f"stopped by {stop.name} before the run started; nothing to resume, "
                       "run the same command again", stop.signum, resumable=False)
