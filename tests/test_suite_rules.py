"""The suite's own rules (tests/helpers/suite_rules.py): a program a test leaves running is
found, even when its parent has ended, and killed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import leftovers

# A parent that starts a sleeping child in its own session and ends at once, as a killed
# tool or a daemonising program leaves one.
ORPHANING = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)  # orphan"],
                 start_new_session=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper is Linux's")
def test_an_orphaned_grandchild_is_found_killed_and_named():
    subprocess.run([sys.executable, "-c", ORPHANING], check=True)
    left = leftovers.kill_leftovers(grace_s=0.5)
    assert len(left) == 1 and "time.sleep(600)  # orphan" in left[0]
    assert leftovers.kill_leftovers(grace_s=0) == []  # killed and reaped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper is Linux's")
def test_a_child_that_ends_within_the_grace_is_no_leftover():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert leftovers.kill_leftovers(grace_s=10) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper is Linux's")
def test_a_test_that_leaves_a_program_running_fails_with_its_command_line(tmp_path):
    # The inner run's conftest shortens the grace the rule gives a leftover from
    # leftovers.GRACE_S to 0.5 s (the orphan sleeps for 600 s, so it is still a leftover).
    (tmp_path / "conftest.py").write_text(
        "import functools\n"
        "from helpers import leftovers\n"
        "leftovers.kill_leftovers = functools.partial(leftovers.kill_leftovers, grace_s=0.5)\n")
    (tmp_path / "test_leaving.py").write_text(
        "import subprocess, sys\n"
        f"ORPHANING = {ORPHANING!r}\n"
        "def test_leaves():\n"
        "    subprocess.run([sys.executable, '-c', ORPHANING], check=True)\n"
        "def test_after_it():\n"
        "    pass\n")
    tests = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "helpers.suite_rules", "-c", "/dev/null",
         "--rootdir", str(tmp_path), str(tmp_path / "test_leaving.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": tests})
    assert done.returncode == 1, done.stdout + done.stderr
    # the error is test_leaves' teardown; test_after_it is not blamed
    assert "2 passed, 1 error" in done.stdout
    assert "ERROR test_leaving.py::test_leaves" in done.stdout
    assert "left running after the test (killed now): pid" in done.stdout
    assert "# orphan" in done.stdout
