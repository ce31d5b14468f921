"""notebooks/evaluate.ipynb runs headless on a tiny two-run sweep and shows its results."""

import base64
import json
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.runs import PROJECT, tiny_config, train_tiny
from meshseg.train.summary import RunSummary

NOTEBOOK = PROJECT / "notebooks" / "evaluate.ipynb"


@pytest.fixture
def venv_kernel(tmp_path, monkeypatch):
    """Makes the kernel name `python3` resolve to this interpreter (the venv's python)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "meshseg venv", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "python3"


@pytest.mark.slow
def test_notebook_compares_the_sweep_and_evaluates_its_best_run(tiny_dataset, tmp_path, monkeypatch,
                                                                venv_kernel):
    sweep = tmp_path / "sweep"
    for number, loop in enumerate(("custom", "keras")):
        run_dir = sweep / f"{number}_gather_matmul_{loop}_jit-False"
        cfg = tiny_config(tiny_dataset, f"loop={loop}", "steps=4")
        train_tiny(cfg, run_dir)
    monkeypatch.setenv("MESHSEG_RUN_DIR", str(sweep))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name=venv_kernel,
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()

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
    assert any("| mIoU |" in table for table in markdown) and any("| IoU |" in table for table in markdown)
