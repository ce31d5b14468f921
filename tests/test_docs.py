"""The README and docs/ pages: the README stays short, every relative link resolves to a
file and every `#anchor` to a heading of its page (the experiment log and the changelog
included), every documented `python -m meshseg...` module exists, and the headline
figures of the shipped models are the ones their results.json records.

Reads the Markdown files and results.json as text; imports nothing of meshseg, so no
TensorFlow.
"""

import json
import re
import shlex

import pytest

from helpers.docs import (CHANGELOG, EXPERIMENTS, FENCED_CODE, INLINE_CODE, LINKED_PAGES,
                          PAGES, README, ROOT, heading_anchors, slug)

README_MAX_BYTES = 8192
RESULTS = ROOT / "docs" / "results.md"
PRETRAINED = sorted(path.parent
                    for path in (ROOT / "meshseg" / "pretrained").glob("*/results.json"))

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MODULE = re.compile(r"python -m (meshseg\.(?:tools|data)\.[A-Za-z_]\w*)")


def page_id(path):
    return str(path.relative_to(ROOT))


def link_targets(text):
    """(file, anchor) of each link of `text` that points into this repository: file ""
    for an anchor of the page itself, anchor "" for none. Web and mail addresses, and
    links inside code, are left out."""
    prose = INLINE_CODE.sub("", FENCED_CODE.sub("", text))
    targets = []
    for target in LINK.findall(prose):
        if re.match(r"(?i)(https?:|mailto:)", target):
            continue
        file, _, anchor = target.partition("#")
        targets.append((file, anchor))
    return targets


def table_rows(text):
    """The cells of every Markdown table row of `text`, stripped."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.lstrip().startswith("|")]


def test_readme_is_at_most_8_kib():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes, more than {README_MAX_BYTES}"


def test_readme_holds_the_test_command_that_ci_runs():
    command = ".venv/bin/python -m pytest -q"
    assert command in (ROOT / ".ci" / "run").read_text()
    assert command in README.read_text()


def test_the_results_and_performance_pages_stay_at_most_15_kb():
    for name in ("results.md", "performance.md"):
        size = len((ROOT / "docs" / name).read_bytes())
        assert size <= 15_000, f"docs/{name} is {size} bytes: history belongs in docs/experiments/"


def test_the_link_check_covers_the_experiment_log_and_the_changelog():
    assert CHANGELOG.is_file() and len(EXPERIMENTS) > 1
    assert {CHANGELOG, *EXPERIMENTS, *PAGES} == set(LINKED_PAGES)
    assert ROOT / "docs" / "experiments" / "README.md" in EXPERIMENTS


@pytest.mark.parametrize("page", LINKED_PAGES, ids=page_id)
def test_no_page_refers_to_the_issue_tracker_which_the_repository_lacks(page):
    references = re.findall(r"(?i)\bissues?\s+#?\d+", page.read_text())
    assert references == [], f"{page_id(page)} refers to tracker issues: {references}"


@pytest.mark.parametrize("page", LINKED_PAGES, ids=page_id)
def test_every_relative_link_points_to_an_existing_file(page):
    missing = [file for file, _ in link_targets(page.read_text())
               if file and not (page.parent / file).exists()]
    assert missing == [], f"{page_id(page)} links to missing files: {missing}"


@pytest.mark.parametrize("page", LINKED_PAGES, ids=page_id)
def test_every_anchor_names_a_heading_of_the_page_it_points_to(page):
    dead = []
    for file, anchor in link_targets(page.read_text()):
        target = (page.parent / file) if file else page
        if not anchor or not target.is_file():
            continue
        if target.suffix != ".md" or anchor not in heading_anchors(target.read_text()):
            dead.append(f"{file}#{anchor}")
    assert dead == [], f"{page_id(page)} links to anchors that no heading has: {dead}"


def test_link_targets_skip_web_addresses_and_code_and_keep_anchors():
    text = ("[a](docs/a.md#part) [b](https://example.org/x.md) [c](mailto:x@y.z) [d](#top)\n"
            "![e](screenshots/e.png) `[f](not/a/link.md)`\n```\n[g](in/code.md)\n```\n")
    assert link_targets(text) == [("docs/a.md", "part"), ("", "top"),
                                  ("screenshots/e.png", "")]


def test_heading_anchors_follow_githubs_rules():
    assert slug("The RNA benchmark (complete set, published split)") == \
        "the-rna-benchmark-complete-set-published-split"
    assert slug("rna_250 repeats its training meshes") == "rna_250-repeats-its-training-meshes"
    assert slug("The preset's run in the set's frame: 6000 steps (2026-12-05)") == \
        "the-presets-run-in-the-sets-frame-6000-steps-2026-12-05"
    assert slug("Feature-steered convolution implementations (`impl=`)") == \
        "feature-steered-convolution-implementations-impl"
    assert slug("A 4.5x faster [matmul](https://x.org) / A/B") == "a-45x-faster-matmul--ab"
    text = "# Top\n## Part\n```bash\n# not a heading\n```\n### Part\n## Part ##\n"
    assert heading_anchors(text) == {"top", "part", "part-1", "part-2"}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_documented_module_exists_under_meshseg(page):
    modules = sorted(set(MODULE.findall(page.read_text())))
    missing = [name for name in modules
               if not (ROOT / (name.replace(".", "/") + ".py")).is_file()
               and not (ROOT / name.replace(".", "/") / "__init__.py").is_file()]
    assert missing == [], f"{page_id(page)} names modules that do not exist: {missing}"


def test_the_readme_documents_the_tools_it_shows():
    modules = set(MODULE.findall(README.read_text()))
    assert {"meshseg.tools.predict", "meshseg.data.convert"} <= modules


def recorded(package):
    """(accuracy, mean IoU, sample accuracy) of a shipped model's results.json, each as
    the pages print it: three decimals."""
    results = json.loads((package / "results.json").read_text())
    return tuple(f"{results[key]:.3f}" for key in ("test_accuracy", "test_mean_iou")) + (
        f"{results['sample']['accuracy']:.3f}",)


def bold_free(cell):
    return cell.replace("*", "")


@pytest.mark.parametrize("package", PRETRAINED, ids=lambda path: path.name)
def test_the_readme_headline_row_of_a_shipped_model_equals_its_results_json(package):
    """The README row naming `--pretrained <name>` gives the model's test accuracy and
    mean IoU."""
    accuracy, mean_iou, _ = recorded(package)
    rows = [row for row in table_rows(README.read_text())
            if re.search(rf"--pretrained {package.name}`", row[1])]
    assert len(rows) == 1, f"README.md: {len(rows)} table rows name --pretrained {package.name}"
    assert [bold_free(cell) for cell in rows[0][2:4]] == [accuracy, mean_iou]


@pytest.mark.parametrize("package", PRETRAINED, ids=lambda path: path.name)
def test_the_results_row_of_a_shipped_model_equals_its_results_json(package):
    """The results.md row shipped as `<name>` whose command is the model's own gives its
    test accuracy and mean IoU; the page's note gives its accuracy on the sample."""
    accuracy, mean_iou, sample = recorded(package)
    command = shlex.split(json.loads((package / "results.json").read_text())["command"])
    text = RESULTS.read_text()
    rows = [row for row in table_rows(text)
            if row[-1] == f"`{package.name}`" and row[3].startswith("`")
            and shlex.split(row[3].strip("`")) == command]
    assert len(rows) == 1, f"docs/results.md: {len(rows)} rows ship {package.name} with {command}"
    assert [bold_free(cell) for cell in rows[0][1:3]] == [accuracy, mean_iou]
    assert re.search(rf"`{package.name}`\s+{re.escape(sample)}\b", text), \
        f"docs/results.md does not give {package.name}'s sample accuracy {sample}"
