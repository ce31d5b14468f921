"""Cache entries, read through `meshseg.data.features.cache_entries` and written through the
one write path (`meshseg.outputs.write_atomically`): processes writing one entry at once never let a
reader see part of it, and a damaged entry is named and read as missing."""

import json
import logging
import multiprocessing
import subprocess

import pytest

from meshseg.data.features.cache_entries import read_entry
from meshseg.errors import OutputError
from meshseg.outputs import write_atomically

WRITES = 150


def _payload(writer: int, index: int) -> bytes:
    """About 300 kB of JSON naming its writer and write; long enough that a write takes
    many system calls."""
    return json.dumps({"writer": writer, "index": index, "fill": [writer] * 100_000}).encode()


def _write(path, payload: bytes) -> None:
    def write(temporary: str) -> None:
        with open(temporary, "wb") as stream:
            stream.write(payload)

    write_atomically(str(path), write, "the test cache")


def _write_many(path: str, writer: int) -> None:
    for index in range(WRITES):
        _write(path, _payload(writer, index))


def _parse(path) -> dict:
    entry = json.loads(path.read_bytes())
    if entry["fill"] != [entry["writer"]] * 100_000:
        raise ValueError("a mixed entry")
    return entry


def test_concurrent_writers_of_one_entry_never_show_a_reader_a_partial_entry(tmp_path, caplog):
    path = tmp_path / "cache" / "entry.json"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(str(path), writer))
               for writer in (1, 2)]
    for process in writers:
        process.start()
    reads = []
    with caplog.at_level(logging.WARNING):
        while any(process.is_alive() for process in writers):
            entry = read_entry(path, _parse, "test cache")
            if entry is not None:
                reads.append((entry["writer"], entry["index"]))
    for process in writers:
        process.join()
        assert process.exitcode == 0
    assert "is damaged" not in caplog.text  # every read saw a whole entry
    assert len(reads) > 10 and {writer for writer, _ in reads} == {1, 2}
    assert read_entry(path, _parse, "test cache")["index"] == WRITES - 1
    assert [p.name for p in path.parent.iterdir()] == ["entry.json"]  # no temporary left


@pytest.mark.parametrize("content", [b"", b'{"writer": 1, "ind', b"\xff\xfe not text"])
def test_a_damaged_entry_is_named_once_and_read_as_missing(tmp_path, caplog, content):
    path = tmp_path / "entry.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert read_entry(path, _parse, "test cache") is None
    (record,) = caplog.records
    assert f"test cache {path} is damaged" in record.getMessage()
    assert read_entry(tmp_path / "missing.json", _parse, "test cache") is None


@pytest.fixture
def small_filesystem(tmp_path):
    """A real 1 MiB tmpfs mounted at tmp_path/small (root only), unmounted afterwards."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_write_that_fills_the_disk_keeps_the_last_entry_and_no_temporary(small_filesystem):
    path = small_filesystem / "entry.json"
    _write(path, _payload(1, 0))
    (small_filesystem / "filler").write_bytes(b"\0" * 600_000)
    with pytest.raises(OutputError, match="No space left on device"):
        _write(path, _payload(2, 1))
    assert read_entry(path, _parse, "test cache")["writer"] == 1
    assert sorted(p.name for p in small_filesystem.iterdir()) == ["entry.json", "filler"]
