"""The read-only data sets beside the project (`../shared/data`): their paths, and the skip
every test that needs one uses where they are absent. The skip's reason starts with
`SKIP_REASON`, which `tests/conftest.py` counts in one line at the end of the run and, with
MESHSEG_REQUIRE_SHARED_DATA=1 (set by `.ci/run` where `../shared` exists), turns into a
failure."""

from pathlib import Path

import pytest

from helpers.runs import PROJECT

SHARED_DATA = PROJECT.parent / "shared" / "data"
SKIP_REASON = "../shared/data not found"


def _reason(path: Path) -> str:
    return f"{SKIP_REASON}: {path} is absent"


def shared_data(relative: str) -> Path:
    """The path of `relative` under ../shared/data; skips the calling test where it is
    absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(_reason(path))
    return path


def needs_shared_data(relative: str):
    """A `skipif` mark for a test that reads `relative` under ../shared/data."""
    path = SHARED_DATA / relative
    return pytest.mark.skipif(not path.exists(), reason=_reason(path))
