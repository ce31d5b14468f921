"""impl=auto times the candidates once per batch shape and keeps the fastest; a run survives
every damaged cache it reads."""

import json
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

from helpers.meshes import write_sphere_folder
from helpers.runs import PROJECT, tiny_config, train_tiny
from meshseg.data.features import descriptor_cache
from meshseg.data.mesh.meshfiles import file_sha256, load_geometry
from meshseg.train.loop import autotune
from meshseg.data.pipeline.dataset import make_dataset

MODEL = {"conv_channels": [8, 8], "hidden_channels": 16, "num_weight_matrices": 4}


def first_batch(dataset):
    return next(iter(make_dataset([dataset["train"]], batch_size=2, training=False)))


def test_choose_impl_measures_picks_the_fastest_and_caches(tiny_dataset, tmp_path, monkeypatch):
    features, labels = first_batch(tiny_dataset)
    cache_file = str(tmp_path / "autotune.json")
    fake_ms = {"gather_sum": 30.0, "block_sparse": 10.0, "gather_matmul": 20.0}
    measured = []

    def fake_time_step(impl, *args):
        measured.append(impl)
        return fake_ms[impl]

    monkeypatch.setattr(autotune, "time_step", fake_time_step)
    candidates = sorted(fake_ms)
    assert autotune.choose_impl(features, labels, False, 6, MODEL, candidates, 1, cache_file) == "block_sparse"
    assert measured == candidates
    (entry,) = json.load(open(cache_file)).values()
    assert entry == fake_ms
    assert autotune.choose_impl(features, labels, False, 6, MODEL, candidates, 1, cache_file) == "block_sparse"
    assert measured == candidates  # second call: from the cache
    autotune.choose_impl(features, labels, True, 6, MODEL, candidates, 1, cache_file)
    assert len(json.load(open(cache_file))) == 2  # jit is part of the key


def test_time_step_returns_a_positive_median_in_ms(tiny_dataset):
    features, labels = first_batch(tiny_dataset)
    assert autotune.time_step("gather_matmul", features, labels, False, 6, MODEL, 2) > 0


def test_a_run_with_impl_auto_trains_with_the_chosen_impl(tiny_dataset, tmp_path, monkeypatch):
    # block_sparse made the fastest, so the choice differs from the default gather_matmul
    fake_ms = {"gather_matmul": 20.0, "block_sparse": 10.0}
    monkeypatch.setattr(autotune, "time_step", lambda impl, *args: fake_ms[impl])
    cache_file = tmp_path / "autotune.json"
    cfg = tiny_config(tiny_dataset, "impl=auto", "impl.candidates=[gather_matmul,block_sparse]",
                      "impl.timing_steps=1", f"impl.cache_file={cache_file}")
    summary = train_tiny(cfg, str(tmp_path / "run"))
    assert list(json.load(open(cache_file)).values()) == [fake_ms]
    assert summary.impl == "block_sparse" and summary.steps == 3
    model = keras.models.load_model(tmp_path / "run" / "model.keras")
    impls = [layer.impl for layer in model._flatten_layers() if hasattr(layer, "impl")]
    assert impls and set(impls) == {"block_sparse"}  # every FeaSt convolution trained with it


def test_on_a_gpu_auto_never_picks_an_impl_whose_step_crosses_to_the_host(tiny_dataset, tmp_path,
                                                                         monkeypatch):
    """A fake GPU on which gather_sum's step would run an op on the host: it is not timed
    (null in the cache) though it would be the fastest; on the CPU it is timed and chosen."""
    features, labels = first_batch(tiny_dataset)
    host_op = autotune.Missing("SparseReshape", (), "feast/SparseReshape")
    monkeypatch.setattr(autotune, "host_crossings", lambda step, features, labels:
                        [host_op] if step.model.impl == "gather_sum" else [])
    fake_ms = {"gather_sum": 1.0, "gather_matmul": 5.0}
    monkeypatch.setattr(autotune, "median_step_ms",
                        lambda step, batches: fake_ms[step.model.impl])
    candidates = sorted(fake_ms)
    on_gpu = {"gather_sum": None, "gather_matmul": 5.0}
    for device, chosen, cached in [("Fake GPU", "gather_matmul", on_gpu),
                                   ("cpu", "gather_sum", fake_ms)]:
        monkeypatch.setattr(autotune, "device_name", lambda: device)
        cache_file = str(tmp_path / f"{device}.json")
        assert autotune.choose_impl(features, labels, False, 6, MODEL, candidates, 1,
                                    cache_file) == chosen
        (entry,) = json.load(open(cache_file)).values()
        assert entry == cached


def test_on_a_gpu_auto_refuses_when_every_candidate_crosses_to_the_host(tiny_dataset, tmp_path,
                                                                       monkeypatch):
    features, labels = first_batch(tiny_dataset)
    monkeypatch.setattr(autotune, "device_name", lambda: "Fake GPU")
    monkeypatch.setattr(autotune, "host_crossings", lambda step, features, labels: [
        autotune.Missing("PrintV2", (), "print")])
    with pytest.raises(autotune.ConfigError, match="runs ops on the host of this GPU"):
        autotune.choose_impl(features, labels, False, 6, MODEL, ["gather_matmul"], 1,
                             str(tmp_path / "autotune.json"))


@pytest.mark.slow
def test_train_py_names_each_damaged_cache_and_rebuilds_it(tmp_path):
    """Every cache a run reads, damaged as a crash or a full disk leaves it: the impl=auto
    timing cache cut mid-write, descriptor cache entries cut in half, not a zip, and
    missing an array, and the conversion cache's stamp cut. train.py warns once per
    damaged file, naming it, rebuilds each, and trains."""
    meshes = write_sphere_folder(tmp_path / "spheres")
    descriptors = tmp_path / "descriptors"
    entries = []
    for path in meshes[:3]:
        geometry = load_geometry(path)
        descriptor_cache.mesh_descriptors(geometry.vertices, geometry.triangles,
                                          file_sha256(path), descriptors)
        entries.append(descriptor_cache.cache_file(descriptors, file_sha256(path)))
    entries[0].write_bytes(entries[0].read_bytes()[:len(entries[0].read_bytes()) // 2])
    entries[1].write_text("not an archive")
    with np.load(entries[2]) as stored:
        np.savez(entries[2], xyz=stored["xyz"], normals=stored["normals"])  # no "hks"
    timing_cache = tmp_path / "autotune.json"
    timing_cache.write_text(json.dumps({"shapes|jit=False": {"gather_matmul": 12.5,
                                                             "block_sparse": 9.0}})[:30])
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "stamp.json").write_text('{"files": {"s0.ply": "ab')
    result = subprocess.run(
        [sys.executable, "train.py", "data=rna_sample", f"data.root={tmp_path / 'spheres'}",
         "data.meshes=.", "data.label_offset=0", "data.num_classes=2",
         "data.features=[xyz,hks]", "data.levels=0", f"data.cache_dir={tmp_path / 'cache'}",
         f"data.descriptor_cache={descriptors}", "data.convert_workers=2", "data.batch_size=2",
         "model=demo", "model.conv_channels=[8,8]", "model.hidden_channels=16", "steps=2",
         "eval_every=2", "impl=auto", "impl.candidates=[gather_matmul,block_sparse]",
         "impl.timing_steps=1", f"impl.cache_file={timing_cache}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "Traceback" not in output
    for damaged in (timing_cache, *entries, tmp_path / "cache" / "stamp.json"):
        assert len(re.findall(f"{re.escape(str(damaged))} is damaged .*computing it again",
                              output)) == 1, (damaged, output[-3000:])
    (timings,) = json.loads(timing_cache.read_text()).values()
    assert set(timings) == {"gather_matmul", "block_sparse"}
    for entry, path in zip(entries, meshes):
        with np.load(entry) as stored:
            assert stored["hks"].shape == (len(load_geometry(path).vertices), 16)
    assert json.loads((tmp_path / "cache" / "stamp.json").read_text())["files"]
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary left beside any entry
