"""The README and docs/ pages: the README stays short, every relative link resolves, and
every documented `python -m meshseg...` module exists.

Reads the Markdown files as text; imports nothing of meshseg, so no TensorFlow.
"""

import re

import pytest

from helpers.docs import FENCED_CODE, INLINE_CODE, PAGES, README, ROOT

README_MAX_BYTES = 8192

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MODULE = re.compile(r"python -m (meshseg\.(?:tools|data)\.[A-Za-z_]\w*)")


def page_id(path):
    return str(path.relative_to(ROOT))


def relative_links(text):
    """The link targets of `text` that name a file of this repository, anchors stripped."""
    prose = INLINE_CODE.sub("", FENCED_CODE.sub("", text))
    targets = []
    for target in LINK.findall(prose):
        if re.match(r"(?i)(https?:|mailto:)", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_readme_is_at_most_8_kib():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes, more than {README_MAX_BYTES}"


def test_readme_holds_the_test_command_that_ci_runs():
    command = ".venv/bin/python -m pytest -q"
    assert command in (ROOT / ".ci" / "run").read_text()
    assert command in README.read_text()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_points_to_an_existing_file(page):
    missing = [target for target in relative_links(page.read_text())
               if not (page.parent / target).exists()]
    assert missing == [], f"{page_id(page)} links to missing files: {missing}"


def test_relative_links_skip_web_addresses_anchors_and_code():
    text = ("[a](docs/a.md#part) [b](https://example.org/x.md) [c](mailto:x@y.z) [d](#top)\n"
            "![e](screenshots/e.png) `[f](not/a/link.md)`\n```\n[g](in/code.md)\n```\n")
    assert relative_links(text) == ["docs/a.md", "screenshots/e.png"]


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
