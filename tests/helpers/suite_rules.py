"""The suite's own rules, a pytest plugin loaded by `tests/conftest.py`:

- Tests marked `slurm` need a running SLURM cluster (found through SLURM_CONF) and run
  only when asked for: `-m slurm` (or any `-m` expression that names `slurm`). Without
  that they are deselected, so `pytest -q` submits no job and touches no scheduler.
- Tests skipped because ../shared/data is absent (`helpers.shared_data`) are counted in
  one line at the end of the run; with MESHSEG_REQUIRE_SHARED_DATA=1 each such skip is a
  failure instead.
- `-n auto` (pyproject's addopts) starts one worker per core, at most `MAX_WORKERS`: each
  worker holds TensorFlow and starts trainings of its own, so more would trade memory
  for little.
- No test leaves a program running (Linux): the pytest process is made a child subreaper
  (prctl PR_SET_CHILD_SUBREAPER), so every process a test starts, and every process those
  start, stays a descendant of pytest even when its parent dies. After each test, one still
  running is killed and the test fails with its command line (`helpers.leftovers`).
"""

import os

import pytest

from helpers import leftovers

from helpers.shared_data import SKIP_REASON

REQUIRE_SHARED_DATA = "MESHSEG_REQUIRE_SHARED_DATA"
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core the process may use, at most `MAX_WORKERS`."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


def pytest_collection_modifyitems(config, items):
    """Deselects the `slurm` tests unless the -m expression names the marker."""
    if "slurm" in (config.option.markexpr or ""):
        return
    slurm = [item for item in items if item.get_closest_marker("slurm")]
    if slurm:
        config.hook.pytest_deselected(items=slurm)
        items[:] = [item for item in items if not item.get_closest_marker("slurm")]
        config.stash[_DESELECTED_SLURM] = len(slurm)


_DESELECTED_SLURM = pytest.StashKey[int]()


def _shared_data_skip(report) -> bool:
    """Whether `report` is a skip for want of ../shared/data."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return False
    return report.longrepr[2].removeprefix("Skipped: ").startswith(SKIP_REASON)


def pytest_configure(config):
    leftovers.become_subreaper()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Fails the test that left a program running, after killing it."""
    result = yield
    left = leftovers.kill_leftovers()
    if left:
        pytest.fail("left running after the test (killed now): " + "; ".join(left),
                    pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Under MESHSEG_REQUIRE_SHARED_DATA=1, a skip for want of ../shared/data fails."""
    report = yield
    if os.environ.get(REQUIRE_SHARED_DATA) == "1" and _shared_data_skip(report):
        report.outcome = "failed"
        report.longrepr = (f"{report.longrepr[2].removeprefix('Skipped: ')} "
                           f"({REQUIRE_SHARED_DATA}=1)")
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, config):
    """One line each, after the short test summary, for the tests skipped for want of
    ../shared/data and the `slurm` tests left out."""
    yield
    skipped = sum(_shared_data_skip(report) for report in terminalreporter.stats.get("skipped", []))
    if skipped:
        terminalreporter.write_line(f"{skipped} tests skipped: {SKIP_REASON}", yellow=True)
    deselected = config.stash.get(_DESELECTED_SLURM, 0)
    if deselected:
        terminalreporter.write_line(
            f"{deselected} slurm tests deselected: run them with -m slurm on a running cluster "
            "(SLURM_CONF; scripts/slurm/start-local-cluster.sh starts one)")
