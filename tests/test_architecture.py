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


MAX_MODULE_LINES = 400  # a module a reader can hold in their head (meshseg/data aside)


def test_no_module_outside_the_data_package_is_over_400_lines():
    package = Path(PROJECT) / "meshseg"
    long = {str(path.relative_to(package)): len(path.read_text().splitlines())
            for path in package.rglob("*.py") if path.relative_to(package).parts[0] != "data"}
    assert {name: lines for name, lines in long.items() if lines > MAX_MODULE_LINES} == {}
