"""The project's documentation pages as text: where they are, how to tell their code
(fenced blocks, inline spans) from their prose, and the anchors their headings get. Read
by `test_docs` and `test_documented_commands`.

`PAGES` (README.md and docs/*.md) are the current pages: their commands must compose at
HEAD. `LINKED_PAGES` adds CHANGELOG.md and the experiment log (docs/experiments/), whose
commands ran at the commit each entry names and are not checked against today's presets;
their links and anchors are."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))
EXPERIMENTS = sorted((ROOT / "docs" / "experiments").glob("*.md"))
LINKED_PAGES = PAGES + [CHANGELOG] + EXPERIMENTS

FENCED_CODE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`([^`\n]*)`")  # group 1: the span's text
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
MARKDOWN_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")  # group 1: the link's text


def slug(heading):
    """The anchor GitHub gives a heading's text: links reduced to their text, lowercase,
    every character but letters, digits, spaces, '-' and '_' dropped, spaces made '-'."""
    text = MARKDOWN_LINK.sub(r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def heading_anchors(text):
    """The anchors of the headings of a Markdown page `text` (code blocks left out), a
    repeated one numbered as GitHub does: `x`, `x-1`, `x-2`."""
    anchors, seen = set(), {}
    for heading in HEADING.findall(FENCED_CODE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        anchors.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return anchors
