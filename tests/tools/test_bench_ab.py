"""`meshseg.tools.bench_ab`: alternated steps in one process."""

import re

import pytest

from meshseg.tools import bench_ab


class FakeStep:
    """A step that records the order it was called in and returns something `.numpy()`."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __call__(self, features, labels):
        self.calls.append(self.name)
        return self

    def numpy(self):
        return 0.0


def test_the_variants_alternate_and_swap_their_order_every_other_round():
    calls = []
    times = bench_ab.alternate({"a": FakeStep("a", calls), "b": FakeStep("b", calls)},
                               (None, None), rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert [len(values) for values in times.values()] == [3, 3]
    assert all(value >= 0 for values in times.values() for value in values)


def test_two_implementations_of_the_demo_are_timed_on_one_batch(capsys):
    assert bench_ab.main(["--model", "demo", "--num_vertices", "642", "--batch_size", "1",
                          "--impl", "gather_matmul,gather_sum", "--precision", "float32",
                          "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "demo, batch 1 x 642 vertices, 2 alternated train steps each:"
    assert re.fullmatch(r"  gather_matmul: median [\d.]+ ms, fastest [\d.]+ ms", lines[1])
    assert re.fullmatch(r"  gather_sum / gather_matmul: [\d.]+", lines[3])


@pytest.mark.parametrize("options, message", [
    (["--precision", "float32", "--impl", "gather_matmul"], "exactly one"),
    (["--precision", "float32,mixed_bfloat16", "--impl", "gather_matmul,gather_sum"],
     "exactly one"),
    (["--precision", "float32,bfloat16"], "unknown bfloat16"),
])
def test_a_comparison_of_other_than_two_variants_is_a_usage_error(options, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_ab.main(options)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
