"""notebooks/evaluate.ipynb runs headless, by the command it documents, on a tiny two-run
sweep and shows its results."""

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.runs import PROJECT, tiny_config, train_tiny
from meshseg.console import is_native_log_line
from meshseg.train.rundir.summary import RunSummary

NOTEBOOK = PROJECT / "notebooks" / "evaluate.ipynb"


def documented_command() -> str:
    """The headless command the notebook's first cell documents (in backquotes)."""
    first = "".join(nbformat.read(NOTEBOOK, as_version=4).cells[0].source)
    return re.findall(r"`([^`]*jupyter execute[^`]*)`", first)[-1]


@pytest.mark.slow
def test_notebook_run_by_its_documented_command_compares_the_sweep_and_evaluates_its_best_run(
        tiny_dataset, tmp_path):
    sweep = tmp_path / "sweep"
    for number, loop in enumerate(("custom", "keras")):
        run_dir = sweep / f"{number}_gather_matmul_{loop}_jit-False"
        cfg = tiny_config(tiny_dataset, f"loop={loop}", "steps=4")
        train_tiny(cfg, run_dir)
    # The command as documented, in a copy of the project's notebooks/ folder, with
    # $PWD/multirun/<date>_<time> standing for the sweep and .venv/bin for this Python's.
    (tmp_path / "notebooks").mkdir()
    shutil.copy(NOTEBOOK, tmp_path / "notebooks")
    command = documented_command().replace("$PWD/multirun/<date>_<time>", str(sweep))
    command = command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    result = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 0, result.stderr[-3000:]
    native = [line for line in (result.stdout + result.stderr).splitlines()
              if is_native_log_line(line)]
    assert native == []  # TensorFlow started quietly in the kernel
    notebook = nbformat.read(tmp_path / "notebooks" / "evaluate_run.ipynb", as_version=4)

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    text = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    printed = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    summary = RunSummary.load(printed["evaluated run"])
    assert float(printed["per-vertex accuracy"]) == pytest.approx(summary.eval_accuracy, abs=1e-9)
    assert printed["test meshes"] == "2"
    pngs = [base64.b64decode(output["data"]["image/png"]) for output in outputs
            if "image/png" in output.get("data", {})]
    # 3 sweep plots + the confusion matrix + 2 rendered meshes
    assert len(pngs) == 6
    assert all(png.startswith(b"\x89PNG") and len(png) > 5000 for png in pngs)
    markdown = [output["data"]["text/markdown"] for output in outputs
                if "text/markdown" in output.get("data", {})]
    assert any("| test mIoU |" in table for table in markdown)
    assert any("| IoU |" in table for table in markdown)
    # the tiny runs hold out no validation split, so the notebook ranks by test and says so
    assert any(line.startswith("Runs ranked by TEST accuracy") for line in text.splitlines())
    best = max((RunSummary.load(run) for run in sweep.iterdir()),
               key=lambda summary: summary.eval_accuracy)
    assert summary.eval_accuracy == best.eval_accuracy
