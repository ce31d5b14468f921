"""The project's documentation pages as text: where they are and how to tell their code
(fenced blocks, inline spans) from their prose. Read by `test_docs` and
`test_documented_commands`."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))

FENCED_CODE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`([^`\n]*)`")  # group 1: the span's text
