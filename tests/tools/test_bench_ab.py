"""`meshseg.tools.bench_ab`: alternated steps in one process."""

import re

import pytest

from meshseg.tools import bench_ab


class FakeClock:
    """A `time.perf_counter` stand-in (seconds) that only the fake steps advance."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class FakeStep:
    """A step that records the order it was called in, takes `ms` on `clock` and returns
    something `.numpy()`."""

    def __init__(self, name, calls, clock, ms):
        self.name, self.calls, self.clock, self.ms = name, calls, clock, ms

    def __call__(self, features, labels):
        self.calls.append(self.name)
        self.clock.now += self.ms / 1e3
        return self

    def numpy(self):
        return 0.0


def test_the_variants_alternate_and_swap_their_order_every_other_round(monkeypatch):
    calls, clock = [], FakeClock()
    monkeypatch.setattr(bench_ab, "time", clock)
    steps = {"a": FakeStep("a", calls, clock, ms=25.0), "b": FakeStep("b", calls, clock, ms=4.0)}
    times = bench_ab.alternate(steps, {"a": (None, None), "b": (None, None)}, rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert list(times) == ["a", "b"]
    assert times["a"] == pytest.approx([25.0] * 3) and times["b"] == pytest.approx([4.0] * 3)


def test_two_implementations_of_the_demo_are_timed_on_one_batch(capsys):
    assert bench_ab.main(["--model", "demo", "--num_vertices", "642", "--batch_size", "1",
                          "--impl", "gather_matmul,gather_sum", "--precision", "float32",
                          "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "demo, batch 1 x 642 vertices, 2 alternated train steps each:"
    assert re.fullmatch(r"  gather_matmul: median [\d.]+ ms, fastest [\d.]+ ms", lines[1])
    assert re.fullmatch(r"  gather_sum / gather_matmul: [\d.]+", lines[3])


def test_variants_are_named_by_what_sets_them_apart():
    variants = {"A": ("float32", "gather_matmul", ["experiment=rna_full"]),
                "B": ("mixed_bfloat16", "gather_matmul",
                      ["experiment=rna_full", "model.output_level=1"])}
    assert bench_ab.variant_name("A", variants) == "float32"
    assert bench_ab.variant_name("B", variants) == "mixed_bfloat16 model.output_level=1"
    variants["B"] = ("float32", "gather_matmul", ["experiment=rna_full", "model.dropout=0.1"])
    assert bench_ab.variant_name("A", variants) == "A"
    assert bench_ab.variant_name("B", variants) == "model.dropout=0.1"


@pytest.mark.parametrize("options, message", [
    (["--precision", "float32", "--impl", "gather_matmul"], "B must differ from A"),
    (["--precision", "float32,float32"], "B must differ from A"),
    (["--precision", "float32,mixed_bfloat16,mixed_float16"], "one or two values"),
    (["--precision", "float32,bfloat16"], "unknown bfloat16"),
    (["--model", "demo", "--overrides_b", "model.output_level=1"], "only a multi-scale network"),
])
def test_a_comparison_of_other_than_two_variants_is_a_usage_error(options, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_ab.main(options)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
