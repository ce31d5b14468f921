"""impl=auto times the candidates once per batch shape and keeps the fastest."""

import json

import pytest

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


def test_a_run_with_impl_auto_trains_with_the_chosen_impl(tiny_dataset, tmp_path):
    cache_file = tmp_path / "autotune.json"
    cfg = tiny_config(tiny_dataset, "impl=auto", "impl.candidates=[gather_matmul,block_sparse]",
                      "impl.timing_steps=1", f"impl.cache_file={cache_file}")
    summary = train_tiny(cfg, str(tmp_path / "run"))
    (timings,) = json.load(open(cache_file)).values()
    assert summary.impl == min(timings, key=timings.get)
    assert summary.eval_accuracy >= 0


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
