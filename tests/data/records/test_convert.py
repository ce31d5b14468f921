"""Specification of mesh conversion (meshseg.data.convert) and the RNA sample
cache (meshseg.data.records.prepare)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.filesystems import tmpfs
from helpers.meshes import CUT_MESH_REASONS, ascii_ply_text, write_cut_meshes
from helpers.records import count_records
from helpers.runs import CONFIG_DIR, PROJECT
from meshseg.config import DataConfig
from meshseg.data.convert import main
from meshseg.data.pipeline.sources import resolve_files
from meshseg.data.records.convert import convert_split
from meshseg.data.records.manifest import manifest_path, read_manifest
from meshseg.data.records.parse import parse_mesh_record
from meshseg.errors import ConfigError, DataError

RNA_SAMPLE = PROJECT / "data" / "rna_sample"


def prepare_rna_sample(root: Path, cache_dir: Path) -> dict:
    """The shards of the `rna_sample` data config (conf/data/rna_sample.yaml) with its
    folder and cache moved to `root` and `cache_dir`, one shard per split."""
    overrides = ["data=rna_sample", f"data.root={root}", f"data.cache_dir={cache_dir}",
                 "data.train_shards=1", "data.convert_workers=1"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        data = OmegaConf.to_object(compose(config_name="train", overrides=overrides).data)
    return resolve_files(data)


def _write_ply(path: Path, vertices, triangles) -> Path:
    """Writes an ASCII PLY; unlike trimesh's OFF reader, trimesh's PLY reader
    keeps out-of-range face indices, so the converter's own check is tested."""
    header = [
        "ply", "format ascii 1.0", f"element vertex {len(vertices)}",
        "property float x", "property float y", "property float z",
        f"element face {len(triangles)}", "property list uchar int vertex_indices",
        "end_header",
    ]
    body = [" ".join(str(x) for x in vertex) for vertex in vertices]
    body += ["3 " + " ".join(str(i) for i in triangle) for triangle in triangles]
    path.write_text("\n".join(header + body) + "\n")
    return path


def _write_labelled_mesh(folder: Path, stem: str, mesh: dict, labels=None) -> tuple[Path, Path]:
    mesh_path = _write_ply(folder / f"{stem}.ply", mesh["vertices"].tolist(),
                           mesh["triangles"].tolist())
    label_path = folder / f"{stem}.txt"
    labels = mesh["labels"] if labels is None else labels
    label_path.write_text("".join(f"{label}\n" for label in labels))
    return mesh_path, label_path


def _read_meshes(files: list[str]) -> list[dict]:
    return [
        {name: value.numpy() for name, value in parse_mesh_record(record).items()}
        for record in tf.data.TFRecordDataset(files)
    ]


def test_converted_shards_round_trip_with_label_offset(tmp_path, tetrahedron):
    pairs = [_write_labelled_mesh(tmp_path, f"mesh{i}", tetrahedron) for i in range(3)]
    shards = convert_split(*zip(*pairs), tmp_path / "out" / "train", num_shards=2, label_offset=1)
    assert [Path(shard).name for shard in shards] == [
        "train-00000-of-00002.tfrecords", "train-00001-of-00002.tfrecords"
    ]
    assert [count_records([shard]) for shard in shards] == [2, 1]
    for mesh in _read_meshes(shards):
        np.testing.assert_array_equal(mesh["vertices"], tetrahedron["vertices"])
        np.testing.assert_array_equal(mesh["triangles"], tetrahedron["triangles"])
        np.testing.assert_array_equal(mesh["labels"], tetrahedron["labels"] + 1)


def _invalid_mesh_cases(tetrahedron):
    nan_vertices = tetrahedron["vertices"].copy()
    nan_vertices[1, 0] = np.nan
    bad_face = tetrahedron["triangles"].copy()
    bad_face[3, 2] = 9
    return {
        "label count": (tetrahedron, tetrahedron["labels"][:4], "4 labels for 5 vertices"),
        "face index": (dict(tetrahedron, triangles=bad_face), None,
                       r"face vertex indices span \[0, 9\], outside \[0, 5\)"),
        "nan vertex": (dict(tetrahedron, vertices=nan_vertices), None,
                       r"vertex coordinates contain NaN or infinity \(vertex 1 has x = nan\)"),
        "negative label": (tetrahedron, tetrahedron["labels"] - 2,
                           r"labels span \[-2, 1\], outside \[0, 3\) \(num_classes=3\)"),
        "label >= num_classes": (tetrahedron, None,
                                 r"labels span \[0, 3\], outside \[0, 3\) \(num_classes=3\)"),
        "empty": ({"vertices": np.zeros([0, 3]), "triangles": np.zeros([0, 3], int),
                   "labels": np.zeros(0, int)}, None, r"empty mesh \(0 vertices, 0 triangles\)"),
    }


def _good_and_bad_files(tmp_path, tetrahedron, case):
    """(good, bad, reason): (mesh, labels) paths of a valid mesh and of the invalid `case`,
    and the reason the converter gives for the bad one."""
    mesh, labels, reason = _invalid_mesh_cases(tetrahedron)[case]
    good = _write_labelled_mesh(tmp_path, "good", dict(tetrahedron, labels=np.zeros(5, int)))
    return good, _write_labelled_mesh(tmp_path, "bad", mesh, labels), reason


INVALID_CASES = ["label count", "face index", "nan vertex", "negative label",
                 "label >= num_classes", "empty"]


@pytest.mark.parametrize("case", INVALID_CASES)
def test_strict_conversion_raises_naming_the_file_and_reason_and_writes_nothing(
        tmp_path, tetrahedron, case):
    good, bad, reason = _good_and_bad_files(tmp_path, tetrahedron, case)
    out_prefix = tmp_path / "out" / "train"
    with pytest.raises(DataError, match=rf"bad\.ply: {reason}"):
        convert_split([good[0], bad[0]], [good[1], bad[1]], out_prefix, num_shards=2,
                      num_classes=3, strict=True)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("case", INVALID_CASES)
def test_bad_mesh_is_skipped_and_listed_in_the_manifest_with_its_reason(
        tmp_path, tetrahedron, case):
    good, bad, reason = _good_and_bad_files(tmp_path, tetrahedron, case)
    shards = convert_split([good[0], bad[0]], [good[1], bad[1]], tmp_path / "out" / "train",
                           num_shards=2, num_classes=3)
    assert [count_records([shard]) for shard in shards] == [1, 0]
    manifest = read_manifest(manifest_path(tmp_path / "out" / "train"))
    assert manifest["num_meshes"] == 1 and manifest["num_skipped"] == 1
    (skipped,) = manifest["skipped"]
    assert skipped["source"] == str(bad[0])
    assert re.fullmatch(reason, skipped["reason"])


def test_files_cut_short_are_skipped_with_both_counts_in_the_manifest(tmp_path, tetrahedron):
    cut = write_cut_meshes(tmp_path)
    good = _write_labelled_mesh(tmp_path, "good", tetrahedron)
    labels = [tmp_path / f"{path.name}.txt" for path in cut]
    for label_path in labels:
        label_path.write_text("0\n" * 42)
    shards = convert_split([good[0], *cut], [good[1], *labels], tmp_path / "out" / "train",
                           num_shards=1)
    assert count_records(shards) == 1
    manifest = read_manifest(manifest_path(tmp_path / "out" / "train"))
    assert manifest["num_meshes"] == 1
    reasons = {Path(entry["source"]).name: entry["reason"] for entry in manifest["skipped"]}
    assert reasons == CUT_MESH_REASONS


def test_conversion_with_only_bad_meshes_fails(tmp_path, tetrahedron):
    bad = _write_labelled_mesh(tmp_path, "bad", tetrahedron, tetrahedron["labels"][:2])
    with pytest.raises(DataError, match=r"no valid mesh among 1; .*bad\.ply: 2 labels"):
        convert_split([bad[0]], [bad[1]], tmp_path / "out" / "train", num_shards=1)
    assert not (tmp_path / "out").exists()  # nothing written, not even the shards' folder


def test_off_file_with_out_of_range_face_is_rejected_naming_the_file(tmp_path):
    mesh_path = tmp_path / "broken.off"
    mesh_path.write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n")
    label_path = tmp_path / "broken.txt"
    label_path.write_text("0\n0\n0\n")
    with pytest.raises(DataError, match=r"broken\.off: face 0 indexes vertex 7, outside \[0, 3\)"):
        convert_split([mesh_path], [label_path], tmp_path / "out", num_shards=1, strict=True)


def test_more_shards_than_meshes_is_rejected(tmp_path, tetrahedron):
    mesh_path, label_path = _write_labelled_mesh(tmp_path, "mesh", tetrahedron)
    with pytest.raises(ValueError, match="num_shards"):
        convert_split([mesh_path], [label_path], tmp_path / "out", num_shards=2)


def test_cli_converts_the_split_file_entries_matching_the_glob(tmp_path, tetrahedron, capsys):
    meshes, labels = tmp_path / "meshes" / "iso", tmp_path / "labels" / "iso"
    meshes.mkdir(parents=True)
    labels.mkdir(parents=True)
    for stem in ("a", "b"):
        mesh_path, label_path = _write_labelled_mesh(meshes, stem, tetrahedron)
        label_path.rename(labels / label_path.name)
    split_file = tmp_path / "train.txt"
    split_file.write_text("iso/a.ply\niso/b.ply\n")
    main([
        "--meshes", str(tmp_path / "meshes"), "--labels", str(tmp_path / "labels"),
        "--split-file", str(split_file), "--out", str(tmp_path / "out" / "train"),
        "--num-shards", "1", "--label-offset", "1", "--mesh-glob", "*/a.*",
    ])
    shard, manifest = capsys.readouterr().out.split()
    assert manifest == str(manifest_path(tmp_path / "out" / "train"))
    (mesh,) = _read_meshes([shard])
    np.testing.assert_array_equal(mesh["labels"], tetrahedron["labels"] + 1)


@pytest.fixture
def rna_subset(tmp_path) -> Path:
    """The RNA sample cut down to one training and one test mesh."""
    source = tmp_path / "rna"
    (source / "ply").mkdir(parents=True)
    (source / "labels").mkdir()
    train = (RNA_SAMPLE / "train.txt").read_text().split()[:1]
    test = (RNA_SAMPLE / "test.txt").read_text().split()[:1]
    for name in train + test:
        shutil.copy(RNA_SAMPLE / "ply" / name, source / "ply" / name)
        stem = Path(name).stem
        shutil.copy(RNA_SAMPLE / "labels" / f"{stem}.txt", source / "labels" / f"{stem}.txt")
    (source / "train.txt").write_text("\n".join(train) + "\n")
    (source / "test.txt").write_text("\n".join(test) + "\n")
    return source


def test_rna_sample_labels_are_shifted_to_260_classes(rna_subset, tmp_path):
    shards = prepare_rna_sample(rna_subset, tmp_path / "cache")
    (mesh,) = _read_meshes(shards["test"])
    stem = Path((rna_subset / "test.txt").read_text().split()[0]).stem
    raw_labels = np.loadtxt(rna_subset / "labels" / f"{stem}.txt", dtype=np.int64)
    np.testing.assert_array_equal(mesh["labels"], raw_labels + 1)
    assert mesh["labels"].min() >= 0 and mesh["labels"].max() < 260


def test_rna_cache_is_reused_and_rebuilt_when_the_source_changes(rna_subset, tmp_path):
    cache = tmp_path / "cache"
    first = prepare_rna_sample(rna_subset, cache)
    built_at = Path(first["train"][0]).stat().st_mtime_ns
    assert prepare_rna_sample(rna_subset, cache) == first
    assert Path(first["train"][0]).stat().st_mtime_ns == built_at
    # no build folder is left, only the cache and the lock runs convert it under
    assert sorted(path.name for path in tmp_path.iterdir()) == [".cache.lock", "cache", "rna"]

    test_name = (rna_subset / "test.txt").read_text().split()[0]
    (rna_subset / "train.txt").write_text(f"{(rna_subset / 'train.txt').read_text()}{test_name}\n")
    rebuilt = prepare_rna_sample(rna_subset, cache)
    assert count_records(rebuilt["train"]) == 2


def test_a_same_size_label_edit_rebuilds_the_cache_with_the_edited_labels(rna_subset, tmp_path):
    cache = tmp_path / "cache"
    prepare_rna_sample(rna_subset, cache)
    label_file = next((rna_subset / "labels").glob("*.txt"))
    stem = label_file.stem
    lines = label_file.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if 0 <= int(line) < 250)
    lines[index] = lines[index][:-1] + str((int(lines[index][-1]) + 1) % 10)  # one digit
    size = label_file.stat().st_size
    label_file.write_text("\n".join(lines) + "\n")
    assert label_file.stat().st_size == size
    shards = prepare_rna_sample(rna_subset, cache)
    split = "train" if stem in (rna_subset / "train.txt").read_text() else "test"
    (mesh,) = _read_meshes(shards[split])
    np.testing.assert_array_equal(mesh["labels"], np.loadtxt(label_file, dtype=np.int64) + 1)


def test_rna_cache_refuses_to_overwrite_a_foreign_folder(rna_subset, tmp_path):
    foreign = tmp_path / "cache"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a meshseg conversion cache"):
        prepare_rna_sample(rna_subset, foreign)


def test_an_interrupted_conversion_leaves_nothing_a_shard_glob_matches(tmp_path, tetrahedron):
    pairs = [_write_labelled_mesh(tmp_path, f"mesh{i}", tetrahedron) for i in range(3)]
    out = tmp_path / "rec"
    # What a conversion killed mid-write leaves: a temporary in the hidden folder, of a
    # process that no longer runs.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = out / ".partial" / f"train-00000-of-00002.tfrecords.{dead.pid}"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a shard")
    convert_split(*zip(*pairs), out / "train", num_shards=2)
    assert sorted(p.name for p in out.glob("train-*")) == [
        "train-00000-of-00002.tfrecords", "train-00001-of-00002.tfrecords"]
    assert not stale.exists()  # the re-run removed the killed one's temporary
    assert not (out / ".partial").exists()

    # A temporary an earlier version left beside the shards is refused, named, by the glob
    # that matches it (a neighbour: the manifest's).
    for leftover in ("train-00000-of-00002.tfrecords.tmp-4242", "train.manifest.json.tmp-7"):
        (out / leftover).write_bytes(b"partial")
        data = DataConfig(name="rec", source="tfrecords", num_classes=3,
                          train_files=str(out / "train*"), test_files=str(out / "train-*"))
        with pytest.raises(DataError, match=rf"data.train_files=.* matches leftovers of an "
                                            rf"interrupted conversion, not shards: .*{leftover}"):
            resolve_files(data)
        (out / leftover).unlink()


def _commented_files(vertices, faces) -> dict:
    """{file name: text} of one mesh written with every comment and layout construct its
    format allows: OFF with `#` lines after the count line, blank lines and
    comments after values; OFF with its counts on the keyword line; OBJ with comments and
    a backslash continuation; ASCII PLY with header comments."""
    vertex_lines = [f"{x} {y} {z}" for x, y, z in vertices]
    face_lines = [f"3 {a} {b} {c}" for a, b, c in faces]
    off = ["OFF", f"{len(vertices)} {len(faces)} 0", "# written by hand", "# the vertices",
           ""] + [f"{line}  # vertex {i}" for i, line in enumerate(vertex_lines)] + [
        "", "# the faces"] + face_lines + ["# end"]
    obj = ["# an OBJ", "o part"] + [f"v {line} # v" for line in vertex_lines[:-1]] + [
        "v " + vertex_lines[-1].replace(" ", " \\\n", 1)] + [
        f"f {a + 1} {b + 1} {c + 1}" for a, b, c in faces]
    ply = ascii_ply_text(vertices, faces).replace(
        "format ascii 1.0\n", "format ascii 1.0\ncomment made by hand\nobj_info demo\n")
    return {"off_comments.off": "\n".join(off) + "\n",
            "off_inline.off": f"OFF {len(vertices)} {len(faces)} 0\n" + "\n".join(
                vertex_lines + face_lines) + "\n",
            "obj_comments.obj": "\n".join(obj) + "\n", "ply_comments.ply": ply}


def test_comments_blank_lines_and_continuations_are_read_not_counted(tmp_path, capsys):
    sphere = trimesh.creation.icosphere(1)
    vertices, faces = np.round(sphere.vertices, 4), sphere.faces
    labels = (vertices[:, 0] > 0).astype(int)
    (tmp_path / "meshes").mkdir()
    (tmp_path / "labels").mkdir()
    files = _commented_files(vertices, faces)
    for name, text in files.items():
        (tmp_path / "meshes" / name).write_text(text)
        np.savetxt(tmp_path / "labels" / f"{Path(name).stem}.txt", labels, fmt="%d")
    (tmp_path / "train.txt").write_text("\n".join(files) + "\n")
    # A cut file stays refused with both counts when comments surround its lines.
    cut = files["off_comments.off"].replace(f"{len(vertices)} {len(faces)} 0",
                                        f"{len(vertices)} {len(faces) + 3} 0")
    (tmp_path / "meshes" / "cut.off").write_text(cut)
    np.savetxt(tmp_path / "labels" / "cut.txt", labels, fmt="%d")
    (tmp_path / "with_cut.txt").write_text("cut.off\n")
    main(["--meshes", str(tmp_path / "meshes"), "--labels", str(tmp_path / "labels"),
          "--split-file", str(tmp_path / "train.txt"), "--out", str(tmp_path / "out" / "train"),
          "--num-shards", "1", "--workers", "1"])
    shard = capsys.readouterr().out.split()[0]
    meshes = _read_meshes([shard])
    assert len(meshes) == len(files) == 4
    for mesh in meshes:
        np.testing.assert_allclose(mesh["vertices"], vertices, atol=1e-6)
        np.testing.assert_array_equal(np.sort(np.sort(mesh["triangles"], 1), 0),
                                      np.sort(np.sort(faces, 1), 0))
        np.testing.assert_array_equal(mesh["labels"], labels)
    with pytest.raises(SystemExit) as exit_info:
        main(["--meshes", str(tmp_path / "meshes"), "--labels", str(tmp_path / "labels"),
              "--split-file", str(tmp_path / "with_cut.txt"), "--out", str(tmp_path / "cut"),
              "--num-shards", "1", "--workers", "1", "--strict"])
    assert exit_info.value.code == DataError.exit_code
    assert f"{len(faces) + 3} faces declared, {len(faces)} read" in capsys.readouterr().err


def test_a_symlinked_cache_folder_is_followed_and_never_deleted(rna_subset, tmp_path):
    # data.cache_dir is a symlink to an empty folder: the cache is built in the folder it
    # points to, and the link stays. A rebuild (the source changed) replaces that folder's
    # content through the link again; a dangling link (a neighbour) gets its folder made.
    target = tmp_path / "elsewhere" / "cache"
    target.mkdir(parents=True)
    link = tmp_path / "cache"
    link.symlink_to(target)
    first = prepare_rna_sample(rna_subset, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert all(Path(path).parent == target for path in first["train"] + first["test"])
    assert count_records(first["train"]) == 1
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o777 & ~umask  # not the build folder's 0700

    test_name = (rna_subset / "test.txt").read_text().split()[0]
    (rna_subset / "train.txt").write_text(f"{(rna_subset / 'train.txt').read_text()}{test_name}\n")
    rebuilt = prepare_rna_sample(rna_subset, link)
    assert link.is_symlink() and count_records(rebuilt["train"]) == 2
    assert not list(target.parent.glob(".cache.build-*"))

    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "not_yet" / "cache")
    shards = prepare_rna_sample(rna_subset, dangling)
    assert dangling.is_symlink() and count_records(shards["train"]) == 2
    assert all(Path(path).parent == tmp_path / "not_yet" / "cache" and Path(path).is_file()
               for path in shards["train"])


def test_a_read_only_cache_folder_is_refused_before_any_mesh_is_converted(rna_subset):
    with tmpfs("1m", read_only=True) as read_only:
        with pytest.raises(ConfigError, match=rf"data.cache_dir={read_only}/cache: {read_only} "
                                              r"is not writable \(Read-only file system\)"):
            prepare_rna_sample(rna_subset, read_only / "cache")
