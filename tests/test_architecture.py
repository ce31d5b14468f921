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
    assert "5 kept, 0 broken" in result.stdout


def _modules_loaded_by(statement: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after `statement`."""
    code = f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {name.split(".")[0] for name in result.stdout.split()}


# meshseg's own mesh-processing libraries. SciPy is one of the descriptor libraries too, but
# TensorFlow 2.21 loads it itself (tensorflow.python.keras -> scipy.sparse), so on the
# TensorFlow side its absence from meshseg's imports is the import-linter contract's.
DESCRIPTOR_LIBRARIES = {"robust_laplacian", "fast_simplification"}


TRAINING_AND_PIPELINE = ("meshseg.train.run", "meshseg.data.pipeline.dataset",
                         "meshseg.data.pipeline.sources")


@pytest.fixture(scope="module")
def loaded_by_training_and_pipeline() -> dict:
    """{module: the top-level packages loaded after importing it} for each module of
    TRAINING_AND_PIPELINE, each imported alone in its own process: one interpreter imports
    TensorFlow (which all of them load, and which loads no descriptor library), then forks
    a child per module."""
    code = ("import importlib, os, sys\nimport tensorflow\n"
            f"for module in {TRAINING_AND_PIPELINE!r}:\n"
            "    child = os.fork()\n"
            "    if child == 0:\n"
            "        importlib.import_module(module)\n"
            "        print(module, *sorted(sys.modules), flush=True)\n"
            "        os._exit(0)\n"
            "    if os.waitpid(child, 0)[1] != 0:\n"
            "        sys.exit(f'importing {module} failed')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = {}
    for line in result.stdout.splitlines():
        module, *names = line.split()
        loaded[module] = {name.split(".")[0] for name in names}
    assert sorted(loaded) == sorted(TRAINING_AND_PIPELINE)
    return loaded


@pytest.mark.parametrize("module", TRAINING_AND_PIPELINE)
def test_training_and_the_pipeline_load_no_descriptor_library(module,
                                                               loaded_by_training_and_pipeline):
    assert not loaded_by_training_and_pipeline[module] & DESCRIPTOR_LIBRARIES


def test_the_stored_feature_names_load_neither_scipy_nor_tensorflow():
    loaded = _modules_loaded_by("import meshseg.data.features.stored")
    assert not loaded & (DESCRIPTOR_LIBRARIES | {"scipy", "tensorflow"})


def test_deriving_features_loads_the_descriptor_libraries():
    # the counterpart of the test above: the check sees these libraries when they load
    assert DESCRIPTOR_LIBRARIES <= _modules_loaded_by("import meshseg.data.records.job")


def test_reading_a_mesh_loads_no_tensorflow():
    assert "tensorflow" not in _modules_loaded_by("import meshseg.data.mesh.meshfiles")


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
