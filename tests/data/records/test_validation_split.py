"""Specification of the validation split (`data.validation_meshes`) and of evaluation on
rotated meshes (`data.eval_rotation`)."""

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.meshes import write_octant_folder
from helpers.runs import CONFIG_DIR, scalars, tiny_config, train_tiny
from helpers.shared_data import shared_data
from meshseg.config import DataConfig
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.records import prepare
from meshseg.data.records.prepare import MeshFolder, prepare_mesh_folder, validation_entries
from meshseg.errors import ConfigError
from meshseg.nn.unet import FeaStUNet


@pytest.fixture(scope="module")
def mesh_folder(tmp_path_factory):
    """A mesh folder of 8 training and 2 test meshes (42 and 162 vertices, 6 classes)."""
    return write_octant_folder(tmp_path_factory.mktemp("mesh_folder"), 8, 2)


def _sources(shards: list) -> list:
    """The source mesh names of converted shards, from their manifests."""
    manifest = Path(shards[0]).parent / (Path(shards[0]).name.split("-")[0] + ".manifest.json")
    return sorted(Path(entry["source"]).name
                  for entry in json.loads(manifest.read_text())["meshes"])


def test_validation_entries_are_a_fixed_sorted_seeded_choice():
    chosen = validation_entries(547, 55, seed=0)
    assert chosen.shape == (55,) and len(set(chosen.tolist())) == 55
    assert np.all(np.diff(chosen) > 0) and 0 <= chosen.min() and chosen.max() < 547
    np.testing.assert_array_equal(chosen, validation_entries(547, 55, seed=0))
    assert not np.array_equal(chosen, validation_entries(547, 55, seed=1))
    assert validation_entries(10, 0, seed=0).size == 0


# The 55 training meshes experiment=rna_full held out to choose its settings
# (data.validation_meshes=55, seed 0, of the 547 in ../shared/data/rna/train.txt;
# docs/results.md), in split-file order: the figures chosen on them stay comparable only
# while the same meshes are drawn.
RNA_FULL_VALIDATION = """
5T62_B 4WCE_Y 5E81_16 4TUE_RB 4U4O_3 5MDY_3 4U4O_7 4W4G_RB 4U6F_7 1VY7_BB 5ADY_A 4V8U_BB
4V65_BA 5EL4_16 3CME_9 4YPB_YB 6ENU_B 4U20_BB 6CFK_1B 5AFI_B 1JJ2_9 4V5A_BB 4U26_DB 4V7Z_BB
5JVG_Y 1VVJ_YB 4ZER_1B 1K9M_B 4V7W_BB 5MYJ_BB 4V5D_DB 4V9P_AB 4UY8_B 5LZV_7 4U4R_3 4V4R_BB
5WIT_2B 4V51_BB 4V9I_BB 5NDW_3 4V5P_BB 4Z3S_1B 5TBW_3 4U1U_BB 4WSD_1J 4V4X_BB 5DOY_1B 1NJI_B
5DOY_2B 5J4C_2B 4WQF_CB 4U51_7 5KPX_28 4WFA_Y 6FXC_AB""".split()


def test_the_rna_benchmarks_validation_meshes_are_the_55_it_was_tuned_on():
    root = shared_data("rna")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            "experiment=rna_full", "data.validation_meshes=55", f"data.root={root}"])
    pairs = prepare.split_pairs(prepare.mesh_folder(OmegaConf.to_object(cfg.data)))
    assert [path.stem for path in pairs["validation"][0]] == RNA_FULL_VALIDATION
    assert (len(pairs["train"][0]), len(pairs["test"][0])) == (492, 136)


@pytest.mark.parametrize("count", [8, 9, -1])
def test_a_validation_split_that_leaves_no_training_mesh_is_refused(count):
    with pytest.raises(ConfigError, match="validation_meshes"):
        validation_entries(8, count, seed=0)


def test_the_validation_split_is_disjoint_from_test_and_training_and_stable(
        mesh_folder, tmp_path):
    source = MeshFolder(str(mesh_folder), "meshes", "labels", 6,
                        shards={"train": 2, "test": 1, "validation": 1}, validation=3)
    first = prepare_mesh_folder(source, tmp_path / "cache")
    train, validation, test = (_sources(first[split]) for split in ("train", "validation",
                                                                     "test"))
    assert len(validation) == 3 and len(train) == 5
    assert sorted(train + validation) == [f"train{i}.ply" for i in range(8)]
    assert not set(validation) & set(test) and not set(validation) & set(train)
    again = prepare_mesh_folder(source, tmp_path / "other_cache")
    assert _sources(again["validation"]) == validation
    plain = prepare_mesh_folder(MeshFolder(str(mesh_folder), "meshes", "labels", 6),
                                tmp_path / "plain")
    assert "validation" not in plain and len(_sources(plain["train"])) == 8


def test_split_files_other_than_train_txt_and_test_txt_are_read(mesh_folder, tmp_path):
    source = MeshFolder(str(mesh_folder), "meshes", "labels", 6,
                        split_files={"train": "test.txt", "test": "train.txt"})
    shards = prepare_mesh_folder(source, tmp_path / "cache")
    assert _sources(shards["train"]) == ["test0.ply", "test1.ply"]
    assert len(_sources(shards["test"])) == 8


def test_validation_needs_a_mesh_folder(tiny_dataset, tmp_path):
    with pytest.raises(ConfigError, match="validation_meshes needs data.source=mesh_folder"):
        train_tiny(tiny_config(tiny_dataset, "data.validation_meshes=1"), tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize("test_setting, test_steps", [(None, []), ("final", [4]),
                                                      ("every", [2, 4])])
def test_a_run_with_validation_scores_the_test_split_only_when_its_command_asks(
        mesh_folder, tmp_path, test_setting, test_steps):
    """The test split is sealed in a choosing run: with a validation split it is scored
    never (eval.test=auto), once at the last step (final), or at every evaluation (every),
    and no test figure reaches the summary, the event files or the log otherwise."""
    overrides = [] if test_setting is None else [f"eval.test={test_setting}"]
    cfg = tiny_config({"train": "unused", "test": "unused", "num_classes": 6},
                      "data.source=mesh_folder", f"data.root={mesh_folder}",
                      "data.meshes=meshes", "data.validation_meshes=3",
                      f"data.cache_dir={tmp_path / 'cache'}", "data.convert_workers=1",
                      "steps=4", "eval_every=2", *overrides)
    summary = train_tiny(cfg, tmp_path / "run")
    validation = scalars(tmp_path / "run", "validation")
    test = scalars(tmp_path / "run", "eval")
    assert [step for step, _ in validation["accuracy"]] == [2, 4]
    assert [step for step, _ in test.get("accuracy", [])] == test_steps
    assert summary.validation_accuracy == pytest.approx(validation["accuracy"][-1][1])
    assert summary.choosing_accuracy == summary.validation_accuracy
    if test_steps:
        assert summary.eval_accuracy == pytest.approx(test["accuracy"][-1][1])
    else:
        assert summary.eval_accuracy is None and summary.eval_mean_iou is None


def test_eval_rotation_converts_turned_moved_and_scaled_evaluation_meshes(mesh_folder, tmp_path):
    """data.eval_rotation=so3 turns each validation and test mesh file's mesh before the
    converter derives anything (normals and HKS of the turned mesh), one motion per mesh,
    the same in every conversion; training meshes stay as they are."""
    def splits(turn_seed, cache):
        source = MeshFolder(str(mesh_folder), "meshes", "labels", 6, features=("normals", "hks"),
                            validation=2, eval_turn_seed=turn_seed)
        shards = prepare_mesh_folder(source, tmp_path / cache)
        return {split: list(read_meshes_np(shards[split])) for split in
                ("train", "validation", "test")}

    upright, turned, again = splits(None, "a"), splits(7, "b"), splits(7, "c")
    for plain, moved in zip(upright["train"], turned["train"]):
        np.testing.assert_array_equal(plain["vertices"], moved["vertices"])
    motions = []
    for split in ("validation", "test"):
        for plain, moved, repeat in zip(upright[split], turned[split], again[split]):
            np.testing.assert_array_equal(moved["vertices"], repeat["vertices"])
            np.testing.assert_array_equal(plain["labels"], moved["labels"])
            # moved = s p R^T + t: fit the affine map by least squares, then split it
            p = np.c_[plain["vertices"], np.ones(len(plain["vertices"]))]
            affine = np.linalg.lstsq(p, moved["vertices"], rcond=None)[0]
            linear = affine[:3].T
            scale = np.cbrt(np.linalg.det(linear))
            rotation = linear / scale
            np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-4)
            np.testing.assert_allclose(moved["normals"], plain["normals"] @ rotation.T,
                                       atol=1e-4)
            np.testing.assert_allclose(moved["hks"], plain["hks"], atol=1e-3)
            assert not np.allclose(rotation, np.eye(3), atol=1e-2)
            motions.append(rotation)
    assert not np.allclose(motions[0], motions[1], atol=1e-2)  # one per mesh


def read_meshes_np(files) -> list:
    """The meshes of converted shards as NumPy dicts: vertices as stored (no centring or
    scaling), labels, and the stored normals and HKS."""
    inputs = MeshInputs.of(DataConfig(name="t", source="tfrecords", num_classes=6,
                                      features=["xyz", "normals", "hks"], center="none",
                                      scale="none"))
    for features, labels in make_dataset(files, batch_size=1, training=False, inputs=inputs):
        values = features["inputs"][0].numpy()
        yield {"vertices": values[:, :3], "normals": values[:, 3:6], "hks": values[:, 6:],
               "labels": labels[0].numpy()}


def test_eval_rotation_accepts_none_and_so3_only(tiny_dataset, tmp_path):
    with pytest.raises(ConfigError, match="data.eval_rotation"):
        train_tiny(tiny_config(tiny_dataset, "data.eval_rotation=up"), tmp_path / "run")


def test_runs_started_together_convert_a_cache_once_and_all_read_it(mesh_folder, tmp_path,
                                                                    monkeypatch):
    """Two runs that change a cache's settings at once (here: both add the validation
    split) used to convert side by side, the later rename removing the shards the other
    run had started to read (FileNotFoundError). The conversion is now locked."""
    import threading
    import time

    import meshseg.data.records.prepare as prepare

    cache = tmp_path / "cache"
    prepare_mesh_folder(MeshFolder(str(mesh_folder), "meshes", "labels", 6), cache)
    source = MeshFolder(str(mesh_folder), "meshes", "labels", 6, validation=3)
    builds, convert = [], prepare.convert_split

    def slow_convert(*args, **kwargs):
        builds.append(args[2].name)
        time.sleep(0.2)  # wide enough for the other thread to arrive while this builds
        return convert(*args, **kwargs)

    monkeypatch.setattr(prepare, "convert_split", slow_convert)
    results = []
    threads = [threading.Thread(target=lambda: results.append(prepare_mesh_folder(source, cache)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(builds) == ["test", "train", "validation"]  # one build, not two
    assert results[0] == results[1]
    assert all(Path(path).is_file() for split in ("train", "validation", "test")
               for path in results[0][split])
