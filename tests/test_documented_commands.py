"""Every `python train.py ...` command that the README, docs/ and the comments of conf/
show composes with today's presets and passes the config checks (`composed_config`), so
a preset or key that moves fails here until each page that shows it follows.

Composition only (Hydra and the config checks): no TensorFlow, no data read.
"""

import re
import shlex

import pytest

from helpers.docs import FENCED_CODE, INLINE_CODE, PAGES, ROOT
from meshseg.config import composed_config

CONF_FILES = sorted((ROOT / "conf").rglob("*.yaml"))
TRAIN = re.compile(r"(?:^|\s)(?:\.venv/bin/)?python train\.py(?=\s|$)")
OPTIONAL_GROUP = re.compile(r"(?<=\s)\[[^\]]*\]")  # `[data.root=<root>/x]`, not `k=[1,2]`
PLACEHOLDER = re.compile(r"<|\.\.\.|\$")             # `<overrides>`, `-m ...`, `"$@"`
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p"}


def train_arguments(text, yaml_comments=False):
    """The argument strings of the `python train.py` commands in `text`: Markdown's fenced
    blocks (backslash continuations joined, runs of spaces made one) and inline code spans, or with
    `yaml_comments` the comment lines of a YAML file."""
    if yaml_comments:
        blocks = ["\n".join(line.lstrip()[1:] for line in text.splitlines()
                            if line.lstrip().startswith("#"))]
        spans = []
    else:
        blocks = FENCED_CODE.findall(text)
        spans = INLINE_CODE.findall(FENCED_CODE.sub("", text))
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    arguments = []
    for line in lines + spans:
        match = TRAIN.search(line)
        if match:
            arguments.append(" ".join(line[match.end():].split()))
    return arguments


def compositions(arguments):
    """The override lists that check `arguments`: optional `[...]` groups dropped, flags
    dropped, and for a multirun (`-m`) one list per value of its longest sweep, the i-th
    taking the i-th value of every sweep (so each value composes once). None for a usage
    line with placeholders."""
    arguments = OPTIONAL_GROUP.sub("", arguments)
    if PLACEHOLDER.search(arguments):
        return None
    tokens = shlex.split(arguments, comments=True)
    multirun = any(token in ("-m", "--multirun") for token in tokens)
    overrides, skip_value = [], False
    for token in tokens:
        if skip_value or token.startswith("-"):
            skip_value = token in FLAGS_WITH_VALUE
            continue
        overrides.append(token)
    if not multirun:
        return [overrides]
    sweeps = [override.split("=", 1) for override in overrides]
    values = [value.split(",") if not value.startswith("[") else [value]
              for _, value in sweeps]
    return [[f"{key}={choices[i % len(choices)]}" for (key, _), choices in zip(sweeps, values)]
            for i in range(max((len(v) for v in values), default=1))]


def documented_commands():
    found = {}
    for page in PAGES + CONF_FILES:
        for arguments in train_arguments(page.read_text(), yaml_comments=page.suffix == ".yaml"):
            for overrides in compositions(arguments) or []:
                found.setdefault(tuple(overrides), f"{page.relative_to(ROOT)}: {arguments}")
    return sorted(found.items(), key=lambda item: item[1])


def test_train_arguments_come_from_code_only_with_continuations_joined():
    text = ("Run `python train.py impl=sparse_matmul jit=true` or python train.py steps=1.\n"
            "```bash\n.venv/bin/python train.py data=tfrecords \\\n    data.num_classes=16\n"
            "python -m meshseg.tools.bench\n```\n")
    assert train_arguments(text) == ["data=tfrecords data.num_classes=16",
                                     "impl=sparse_matmul jit=true"]
    yaml = "# preset\n#   python train.py experiment=x steps=2\nsteps: 1  # python train.py y=1\n"
    assert train_arguments(yaml, yaml_comments=True) == ["experiment=x steps=2"]


def test_compositions_drop_optional_groups_and_flags_and_expand_every_sweep_value():
    assert compositions("experiment=x [data.root=<root>/x] 'm.c=[1,2]'  # note") == [
        ["experiment=x", "m.c=[1,2]"]]
    assert compositions("--cfg job steps=3") == [["steps=3"]]
    assert compositions("-m impl=a,b,c jit=false,true steps=[1,2]") == [
        ["impl=a", "jit=false", "steps=[1,2]"], ["impl=b", "jit=true", "steps=[1,2]"],
        ["impl=c", "jit=false", "steps=[1,2]"]]
    assert compositions("<overrides>") is None
    assert compositions("-m ...") is None


COMMANDS = documented_commands()


@pytest.mark.parametrize("overrides,where", COMMANDS, ids=[where for _, where in COMMANDS])
def test_a_documented_train_command_composes_and_passes_the_config_checks(overrides, where):
    composed_config(list(overrides))


def test_the_readme_commands_are_among_the_documented_ones():
    checked = {overrides for overrides, _ in COMMANDS}
    assert {("impl=sparse_matmul", "jit=true"), ("experiment=rna_full",)} <= checked
