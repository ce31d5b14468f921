"""The package layout: import direction (import-linter contracts in pyproject.toml) and the
exit status of each error class."""

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.runs import PROJECT
from meshseg import errors


def test_imports_point_one_way_through_the_layers():
    lint_imports = Path(sys.executable).parent / "lint-imports"  # the test extra's script
    result = subprocess.run([str(lint_imports)], cwd=PROJECT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("error, status", [
    (errors.ConfigError("x"), 2), (errors.RunDirError("x"), 2), (errors.NonFiniteError("x"), 3),
    (errors.DataError("x"), 4), (errors.ClusterError("x"), 5), (errors.OutputError("x"), 6),
    (errors.Interrupted("x", 15), 143),
])
def test_each_error_class_has_its_documented_exit_status(error, status):
    assert error.exit_code == status
    assert f"| `{type(error).__name__}` |" in errors.__doc__
