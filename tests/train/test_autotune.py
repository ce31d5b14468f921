"""impl=auto times the candidates once per batch shape and keeps the fastest."""

import json

import keras

from helpers.runs import tiny_config, train_tiny
from meshseg.train import autotune
from meshseg.data.pipeline import make_dataset

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
