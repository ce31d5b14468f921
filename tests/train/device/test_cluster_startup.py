"""Start-up of a multi-worker run whose cluster does not come up: the log names the
workers it waits for, the wait ends after `strategy.startup_timeout_s` with a one-line
error (exit 5) naming them, and SIGTERM ends it within seconds (exit 128 + 15)."""

import re
import signal
import subprocess
import time
from datetime import datetime

import pytest

from helpers.runs import (PROJECT, communicate_all, free_ports, start_workers, train_command,
                          worker_env)

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def logged_at(line: str) -> datetime:
    return datetime.strptime(STAMP.match(line)[1], "%Y-%m-%d %H:%M:%S,%f")


def read_until(process, text: str, timeout: float) -> str:
    """The lines `process` printed up to the first one holding `text`."""
    lines = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = process.stdout.readline()
        assert line, "".join(lines)[-3000:]  # ended before printing `text`
        lines.append(line)
        if text in line:
            return "".join(lines)
    raise AssertionError(f"no {text!r} within {timeout} s: {''.join(lines)[-3000:]}")


@pytest.mark.slow
def test_a_worker_whose_peer_never_starts_fails_in_time_naming_it_and_sigterm_ends_the_wait(
        tiny_dataset, tmp_path):
    ports = free_ports(2)
    # Only worker 0 of two starts (with a 6 s limit); a second job's worker 1 of two
    # (with the default limit) waits for a worker 0 that never comes, until SIGTERM.
    timed_out = start_workers(tiny_dataset, [tmp_path / "a"], ports,
                              "strategy.startup_timeout_s=6")[0]
    other_ports = free_ports(2)
    terminated = subprocess.Popen(
        train_command(tiny_dataset, tmp_path / "b", "strategy=multi_worker"), cwd=PROJECT,
        env=worker_env(other_ports, 1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        waiting = read_until(terminated, "waits for worker 0", timeout=240)
        assert f"worker 1 waits for worker 0 (127.0.0.1:{other_ports[0]})" in waiting
        sent = time.time()
        terminated.send_signal(signal.SIGTERM)
        rest = terminated.communicate(timeout=30)[0]
        assert time.time() - sent < 5
        assert terminated.returncode == 128 + signal.SIGTERM
        assert "stopped by signal 15 while waiting for the workers" in rest

        output = timed_out.communicate(timeout=240)[0]
    finally:
        communicate_all([timed_out, terminated], timeout=1)
    assert timed_out.returncode == 5, output[-3000:]
    lines = output.splitlines()
    first_wait = next(line for line in lines if "worker 0 waits for worker 1" in line)
    error = next(line for line in lines if "did not start within" in line)
    assert error.endswith(f"worker 1 (127.0.0.1:{ports[1]}) did not start within 6 s "
                          "(strategy.startup_timeout_s); start every worker of the cluster "
                          "with the same command")
    assert (logged_at(error) - logged_at(first_wait)).total_seconds() < 6 + 3
    assert "Traceback" not in output
