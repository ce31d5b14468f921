"""`python -m meshseg.data.download`, offline: a local HTTP server on 127.0.0.1 serves a
tiny archive each test builds (success and conversion, checksum and manifest mismatches
that leave nothing behind, an interrupted download that resumes), and the registry."""

import hashlib
import io
import tarfile
import threading
import zipfile
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import trimesh
from helpers.records import count_records
from helpers.runs import PROJECT

from meshseg.config import CONFIG_DIR, composed_config
from meshseg.data.datasets.download import check_manifest, download, extract, list_datasets
from meshseg.data.datasets.meshcnn import meshcnn_edges, vertex_labels, write_vertex_labels
from meshseg.data.datasets.registry import DATASETS, Archive
from meshseg.data.download import main
from meshseg.errors import ConfigError, DataError



class ArchiveServer(ThreadingHTTPServer):
    """Serves `files` {name: bytes} at /<name>, honouring `Range: bytes=N-`; with
    `cut_after` set, the next response stops after that many bytes of its body (the
    connection is closed, as when a download is interrupted)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), RangeHandler)
        self.files: dict = {}
        self.cut_after = None
        self.ranges: list = []

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{name}"


class RangeHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        data = self.server.files[self.path.lstrip("/")]
        requested = self.headers.get("Range")
        self.server.ranges.append(requested)
        start = int(requested.split("=")[1].split("-")[0]) if requested else 0
        if start >= len(data) and requested:
            self.send_response(416)
            self.end_headers()
            return
        self.send_response(206 if requested else 200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.server.cut_after is not None:
            body, self.server.cut_after = body[:self.server.cut_after], None
            self.close_connection = True
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ArchiveServer()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def tiny_rna_archive() -> tuple[bytes, str]:
    """A zip in the RNA data set's layout (one top folder; off/, labels/, train.txt,
    test.txt; 3 + 1 small meshes, labels -1..1) and its per-file manifest text."""
    files = {}
    for index, stem in enumerate(["a", "b", "c", "d"]):
        mesh = trimesh.creation.icosphere(subdivisions=1)
        mesh.vertices = mesh.vertices * (1 + index)
        off = io.StringIO()
        off.write(trimesh.exchange.off.export_off(mesh))
        files[f"off/{stem}.off"] = off.getvalue().encode()
        labels = (np.arange(len(mesh.vertices)) % 3) - 1
        files[f"labels/{stem}.txt"] = "".join(f"{label}\n" for label in labels).encode()
    files["train.txt"] = b"a.off\nb.off\nc.off\n"
    files["test.txt"] = b"d.off\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for name, data in files.items():
            zipped.writestr(f"tiny-rna-0123abc/{name}", data)
    manifest = "# test manifest\n" + "".join(
        f"{hashlib.sha256(data).hexdigest()}  {len(data)}  {name}\n" for name, data in files.items())
    return buffer.getvalue(), manifest


@pytest.fixture
def tiny_rna(server, tmp_path):
    """The registry's `rna` entry pointed at the local server's tiny archive."""
    archive, manifest = tiny_rna_archive()
    server.files["tiny.zip"] = archive
    (tmp_path / "rna.sha256").write_text(manifest)
    # 3 training meshes: hold out 1 of them (as experiment=rna_full data.validation_meshes=55)
    return replace(DATASETS["rna"], archives=(Archive(server.url("tiny.zip"), "tiny.zip"),),
                   manifest=tmp_path / "rna.sha256",
                   overrides=(*DATASETS["rna"].overrides, "data.validation_meshes=1"))


def left_in(root: Path) -> list:
    """Every path under `root` (relative, sorted)."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_download_checks_extracts_converts_and_prints_the_train_command(
        tiny_rna, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(DATASETS, "rna", tiny_rna)
    monkeypatch.chdir(tmp_path)  # the experiment's cache_dir is relative to it
    main(["rna", "--root", "datasets"])
    out = capsys.readouterr().out
    folder = tmp_path / "datasets" / "rna"
    assert (folder / "off" / "d.off").is_file() and (folder / "download.json").is_file()
    assert "licence: MIT" in out
    assert out.strip().endswith(
        "train: python train.py experiment=rna_full data.root=datasets/rna data.meshes=off"
        " data.validation_meshes=1")
    cache_dir = composed_config(["experiment=rna_full"]).data.cache_dir  # the preset's
    shards = sorted((tmp_path / cache_dir).glob("train-*"))
    assert count_records(shards) == 2  # and 1 validation mesh
    # a second run finds the download and leaves it as it is
    main(["rna", "--root", "datasets", "--no-convert"])
    assert "already downloaded" in capsys.readouterr().out


def test_a_checksum_mismatch_leaves_nothing_behind(tiny_rna, tmp_path):
    pinned = replace(tiny_rna.archives[0], sha256="0" * 64)
    with pytest.raises(DataError, match="differs from the pinned 0000"):
        download(replace(tiny_rna, archives=(pinned,)), tmp_path / "root", progress=False)
    assert left_in(tmp_path / "root") == [".downloads"]


def test_a_file_that_differs_from_the_manifest_leaves_nothing_behind(tiny_rna, tmp_path):
    manifest = tiny_rna.manifest.read_text().replace("  a.off", "  x.off")
    changed = tmp_path / "changed.sha256"
    lines = tiny_rna.manifest.read_text().splitlines()
    lines[1] = "f" * 64 + lines[1][64:]  # the first file's sha256
    changed.write_text("\n".join(lines) + "\n")
    del manifest
    with pytest.raises(DataError, match=r"1 of 10 files missing or changed, e.g. off/a.off"):
        download(replace(tiny_rna, manifest=changed), tmp_path / "root", progress=False)
    assert left_in(tmp_path / "root") == [".downloads"]  # the bad archive is deleted too


def test_an_interrupted_download_resumes_where_it_stopped(tiny_rna, server, tmp_path):
    size = len(server.files["tiny.zip"])
    server.cut_after = 1000
    with pytest.raises(DataError, match=f"interrupted after 1000 of {size} bytes; run the "
                                        "same command again to resume"):
        download(tiny_rna, tmp_path / "root", progress=False)
    assert left_in(tmp_path / "root") == [".downloads", ".downloads/tiny.zip.part"]
    folder = download(tiny_rna, tmp_path / "root", progress=False)
    assert server.ranges == [None, "bytes=1000-"]
    assert check_manifest(folder, tiny_rna.manifest) == 10


def closed_port_url(name: str) -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused, as with no network)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"


def test_no_network_ends_in_one_line_naming_the_url(tiny_rna, tmp_path, monkeypatch, capsys):
    url = closed_port_url("tiny.zip")
    offline = replace(tiny_rna, archives=(Archive(url, "tiny.zip"),))
    monkeypatch.setitem(DATASETS, "rna", offline)
    with pytest.raises(SystemExit) as exit_info:
        main(["rna", "--root", str(tmp_path / "datasets")])
    assert exit_info.value.code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {url}: could not download (URLError") and "network" in err
    assert left_in(tmp_path / "datasets") in ([], [".downloads"])  # no .part, nothing half-made


def test_a_connection_closed_before_any_byte_is_an_interruption_to_resume(tiny_rna, server,
                                                                          tmp_path):
    size = len(server.files["tiny.zip"])
    server.cut_after = 0
    with pytest.raises(DataError, match=f"interrupted after 0 of {size} bytes; run the same"):
        download(tiny_rna, tmp_path / "root", progress=False)
    assert download(tiny_rna, tmp_path / "root", progress=False).is_dir()


def test_research_only_terms_need_accept_license(tiny_rna, tmp_path):
    restricted = replace(tiny_rna, terms="Research use only.")
    with pytest.raises(ConfigError, match="Research use only. Rerun with --accept-license"):
        download(restricted, tmp_path / "root", progress=False)
    assert not (tmp_path / "root").exists()
    assert download(restricted, tmp_path / "root", accept_license=True,
                    progress=False).is_dir()


def test_an_archive_member_outside_the_folder_is_refused(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("../evil.txt", "x")
    (tmp_path / "into").mkdir()
    with pytest.raises(DataError, match="lies outside the archive"):
        extract(archive, tmp_path / "into")
    assert not (tmp_path / "evil.txt").exists() and left_in(tmp_path / "into") == []


def test_the_list_names_every_data_set_with_size_licence_and_an_existing_experiment():
    listing = list_datasets()
    for dataset in DATASETS.values():
        line = next(row for row in listing.splitlines() if row.startswith(dataset.name + " "))
        assert dataset.license in line and f"experiment={dataset.experiment}" in line
        assert (PROJECT / "conf" / "experiment" / f"{dataset.experiment}.yaml").is_file()
    assert "656 MB" in listing  # the RNA set's size from its manifest
    # the command that trains on the download as the list shows it, overrides included
    rna = next(row for row in listing.splitlines() if row.startswith("rna "))
    assert rna.endswith("python train.py experiment=rna_full data.root=datasets/rna "
                        "data.meshes=off")
    assert CONFIG_DIR == PROJECT / "conf"  # the experiments the downloader composes


def test_the_rna_manifest_lists_every_mesh_and_label_file():
    entries = DATASETS["rna"].manifest.read_text().splitlines()
    meshes = [line for line in entries if line.endswith(".off")]
    labels = [line for line in entries if "  labels/" in line]
    assert len(meshes) == len(labels) == 683
    total = sum(int(line.split()[1]) for line in entries if not line.startswith("#"))
    assert round(total / 1e6, 1) == DATASETS["rna"].extracted_mb


def test_meshcnn_edge_order_and_vertex_labels():
    # two triangles sharing edge (1, 2): MeshCNN meets (0,1), (1,2), (0,2) in the first,
    # then (2,1) again, (1,3) and (3,2) in the second
    triangles = np.array([[0, 1, 2], [2, 1, 3]])
    np.testing.assert_array_equal(meshcnn_edges(triangles),
                                  [[0, 1], [1, 2], [0, 2], [1, 3], [2, 3]])
    # vertex 0: labels 5, 7 (a tie: the smallest); 1: 5, 6, 7 (tie); 2: 6, 7, 7; 3: 7, 7
    labels = vertex_labels(5, triangles, np.array([5, 6, 7, 7, 7]))
    np.testing.assert_array_equal(labels, [5, 5, 7, 7, -1])  # vertex 4 is on no edge
    with pytest.raises(ValueError, match="4 edge labels for 5 edges"):
        vertex_labels(4, triangles, np.array([1, 2, 3, 4]))


def test_meshcnn_folder_becomes_a_mesh_folder(tmp_path):
    mesh = trimesh.creation.icosphere(subdivisions=0)
    edges = meshcnn_edges(mesh.faces)
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        mesh.export(tmp_path / split / f"{split}_0.obj")
    (tmp_path / "seg").mkdir()
    for split in ("train", "test"):  # MeshCNN's labels start at 1
        np.savetxt(tmp_path / "seg" / f"{split}_0.eseg", 1 + (edges[:, 0] % 2), fmt="%d")
    write_vertex_labels(tmp_path, num_classes=2)
    assert (tmp_path / "train.txt").read_text() == "train/train_0.obj\n"
    labels = np.loadtxt(tmp_path / "vertex_labels" / "test_0.txt", dtype=int)
    assert len(labels) == len(mesh.vertices) and set(labels) <= {0, 1}
    with pytest.raises(DataError, match=r"seg/test_0.eseg: label 4 is beyond the 2 classes"):
        np.savetxt(tmp_path / "seg" / "test_0.eseg", np.full(len(edges), 4), fmt="%d")
        write_vertex_labels(tmp_path, num_classes=2)


def test_a_tar_archive_with_one_top_folder_is_extracted_without_it(tmp_path):
    source = tmp_path / "human_seg"
    (source / "train").mkdir(parents=True)
    (source / "train" / "a.obj").write_text("v 0 0 0\n")
    archive = tmp_path / "human_seg.tar.gz"
    with tarfile.open(archive, "w:gz") as tarred:
        tarred.add(source, arcname="human_seg")
    (tmp_path / "into").mkdir()
    extract(archive, tmp_path / "into")
    assert left_in(tmp_path / "into") == ["train", "train/a.obj"]
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tarred:
        tarred.add(source / "train" / "a.obj", arcname="../evil.obj")
    with pytest.raises(DataError, match="evil.tar: .*outside"):
        extract(evil, tmp_path / "into")
    assert not (tmp_path / "evil.obj").exists()


def test_a_full_disk_while_downloading_is_a_write_failure_and_the_part_resumes(
        tiny_rna, server, tmp_path, monkeypatch, capsys):
    """A real full filesystem (a small tmpfs, filled to its last page): one line naming the
    .part file and the cause, exit 6 (not "interrupted"), the bytes written kept; with
    space again the same command resumes from them."""
    from helpers.filesystems import fill, tmpfs

    size = len(server.files["tiny.zip"])
    monkeypatch.setitem(DATASETS, "rna", tiny_rna)
    with tmpfs("1m") as mount:
        root = mount / "datasets"
        (root / ".downloads").mkdir(parents=True)
        filler = fill(mount, leave=4096)  # one page left free, less than the archive
        assert size > 4096
        with pytest.raises(SystemExit) as exit_info:
            main(["rna", "--root", str(root)])
        err = capsys.readouterr().err
        part = root / ".downloads" / "tiny.zip.part"
        assert exit_info.value.code == 6, err
        assert err.splitlines()[-1] == (  # after the progress bar
            f"error: {part}: cannot write the download: No space left on device; what was "
            "downloaded is kept; run the same command again to resume")
        assert err.count("error: ") == 1 and "Traceback" not in err
        kept = part.stat().st_size
        assert 0 < kept < size
        assert part.read_bytes() == server.files["tiny.zip"][:kept]
        filler.unlink()
        folder = download(tiny_rna, root, progress=False)
        assert server.ranges == [None, f"bytes={kept}-"]
        assert check_manifest(folder, tiny_rna.manifest) == 10


def test_a_full_disk_while_extracting_is_a_write_failure_and_the_archive_is_kept(
        tiny_rna, server, tmp_path, monkeypatch, capsys):
    """The archive fits on a real small tmpfs, its extracted files do not: one line naming
    the staging folder and the cause, exit 6, nothing left but the downloaded archive; with
    space again the same command extracts it without downloading it again."""
    import re

    from helpers.filesystems import fill, tmpfs

    size = len(server.files["tiny.zip"])
    monkeypatch.setitem(DATASETS, "rna", tiny_rna)
    with tmpfs("1m") as mount:
        root = mount / "datasets"
        (root / ".downloads").mkdir(parents=True)
        pages = -(-size // 4096) + 1  # the archive and a page to spare, not its 10 files
        filler = fill(mount, leave=pages * 4096)
        with pytest.raises(SystemExit) as exit_info:
            main(["rna", "--root", str(root)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 6, err
        assert re.fullmatch(
            rf"error: {re.escape(str(root))}/\.rna\.partial-\w+: cannot write the files of "
            r"tiny\.zip: No space left on device; the download is kept; run the same "
            r"command again", err.splitlines()[-1]), err
        assert err.count("error: ") == 1 and "Traceback" not in err
        assert left_in(root) == [".downloads", ".downloads/tiny.zip"]
        filler.unlink()
        folder = download(tiny_rna, root, progress=False)
        assert server.ranges == [None]  # extracted from the kept archive
        assert check_manifest(folder, tiny_rna.manifest) == 10
