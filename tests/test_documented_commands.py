"""Every `python train.py ...` command that the README, docs/, the comments of conf/ and
the module docstrings show composes with today's presets and passes the config checks
(`composed_config`), and so do the train.py overrides of every documented command of the
tools that take them (`python -m meshseg.tools.baseline`, `input_bound`, `bench`,
`bench_ab`), once the tool's own parser (`build_parser`) has read the whole command: a
preset, key or option that moves fails here until each page that shows it follows.

The experiment log (docs/experiments/) is left out: each entry's commands ran at the
commit it names, with the presets of then.

Composition and parsing only: nothing trains, no data is read (the bench tools' parsers
import TensorFlow for the implementations' names).
"""

import ast
import importlib
import re
import shlex

import pytest

from helpers.docs import EXPERIMENTS, FENCED_CODE, INLINE_CODE, PAGES, ROOT
from meshseg.config import composed_config

CONF_FILES = sorted((ROOT / "conf").rglob("*.yaml"))
MODULES = [ROOT / "train.py"] + sorted((ROOT / "meshseg").rglob("*.py"))
TOOLS = ("baseline", "input_bound", "bench", "bench_ab")
COMMAND = re.compile(r"(?:^|\s)(?:\.venv/bin/)?python (?:(train\.py)|-m meshseg\.tools\.("
                     + "|".join(sorted(TOOLS, key=len, reverse=True)) + r"))(?=\s|$)")
OPTIONAL_GROUP = re.compile(r"(?:(?<=\s)|^)\[[^\]]*\]")  # `[data.root=<root>/x]`, not `k=[1,2]`
PLACEHOLDER = re.compile(r"<|\$")  # `<overrides>`, `"$@"`; `...` anywhere: a usage line
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p"}


def code_lines(text, kind="markdown"):
    """The lines of code in `text`: a Markdown page's fenced blocks and inline code spans,
    a YAML file's comment lines (`kind="yaml"`) or a Python module's docstring
    (`kind="python"`); backslash continuations joined."""
    if kind == "yaml":
        blocks = ["\n".join(line.lstrip()[1:] for line in text.splitlines()
                            if line.lstrip().startswith("#"))]
        spans = []
    elif kind == "python":
        blocks, spans = [ast.get_docstring(ast.parse(text)) or ""], []
    else:
        blocks = FENCED_CODE.findall(text)
        spans = INLINE_CODE.findall(FENCED_CODE.sub("", text))
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()] + spans


def commands(lines):
    """(program, arguments) of each command in `lines`: program "train.py" or a tool's
    module name ("baseline"), arguments its argument string with runs of spaces made one."""
    found = []
    for line in lines:
        match = COMMAND.search(line)
        if match:
            program = match.group(1) or match.group(2)
            found.append((program, " ".join(line[match.end():].split())))
    return found


def usable(arguments):
    """`arguments` with its optional `[...]` groups dropped, or None for a usage line (an
    ellipsis anywhere, or a placeholder outside the optional groups)."""
    if "..." in arguments:
        return None
    arguments = OPTIONAL_GROUP.sub("", arguments)
    return None if PLACEHOLDER.search(arguments) else arguments


def compositions(arguments):
    """The override lists that check `arguments`: optional `[...]` groups dropped, flags
    dropped, and for a multirun (`-m`) one list per value of its longest sweep, the i-th
    taking the i-th value of every sweep (so each value composes once). None for a usage
    line with placeholders."""
    arguments = usable(arguments)
    if arguments is None:
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


def page_kind(path):
    return {".yaml": "yaml", ".py": "python"}.get(path.suffix, "markdown")


def documented_commands():
    """({overrides: where} of the train.py commands, one entry per composition, and
    {(tool, arguments): where} of the tools' commands), where = "page: program arguments"."""
    train, tools = {}, {}
    for path in PAGES + CONF_FILES + MODULES:
        for program, arguments in commands(code_lines(path.read_text(), page_kind(path))):
            where = f"{path.relative_to(ROOT)}: {program} {arguments}"
            if program == "train.py":
                for overrides in compositions(arguments) or []:
                    train.setdefault(tuple(overrides), where)
            elif (kept := usable(arguments)) is not None:
                tools.setdefault((program, kept), where)
    return (sorted(train.items(), key=lambda item: item[1]),
            sorted(tools.items(), key=lambda item: item[1]))


def test_code_lines_and_commands_come_from_code_only_with_continuations_joined():
    text = ("Run `python train.py impl=sparse_matmul jit=true` or python train.py steps=1.\n"
            "```bash\n.venv/bin/python train.py data=tfrecords \\\n    data.num_classes=16\n"
            "python -m meshseg.tools.bench_ab --model demo\npython -m meshseg.tools.predict x\n"
            "```\n")
    assert commands(code_lines(text)) == [("train.py", "data=tfrecords data.num_classes=16"),
                                          ("bench_ab", "--model demo"),
                                          ("train.py", "impl=sparse_matmul jit=true")]
    yaml = "# preset\n#   python train.py experiment=x steps=2\nsteps: 1  # python train.py y=1\n"
    assert commands(code_lines(yaml, "yaml")) == [("train.py", "experiment=x steps=2")]
    module = '"""Usage:\n\n    python -m meshseg.tools.baseline data=x \\\n        --meshes 3\n"""\n'
    assert commands(code_lines(module, "python")) == [("baseline", "data=x --meshes 3")]


def test_compositions_drop_optional_groups_and_flags_and_expand_every_sweep_value():
    assert compositions("experiment=x [data.root=<root>/x] 'm.c=[1,2]'  # note") == [
        ["experiment=x", "m.c=[1,2]"]]
    assert compositions("--cfg job steps=3") == [["steps=3"]]
    assert compositions("-m impl=a,b,c jit=false,true steps=[1,2]") == [
        ["impl=a", "jit=false", "steps=[1,2]"], ["impl=b", "jit=true", "steps=[1,2]"],
        ["impl=c", "jit=false", "steps=[1,2]"]]
    assert compositions("<overrides>") is None
    assert compositions("-m ...") is None
    assert compositions("[group=option ...] [key=value ...]; see the groups.") is None


TRAIN_COMMANDS, TOOL_COMMANDS = documented_commands()


@pytest.mark.parametrize("overrides,where", TRAIN_COMMANDS,
                         ids=[where for _, where in TRAIN_COMMANDS])
def test_a_documented_train_command_composes_and_passes_the_config_checks(overrides, where):
    composed_config(list(overrides))


def command_module(tool: str):
    """The module holding the parser of `python -m meshseg.tools.<tool>`: the tool's own, or
    for a package that keeps its command apart from its other modules (bench), `command`."""
    module = importlib.import_module(f"meshseg.tools.{tool}")
    if hasattr(module, "build_parser"):
        return module
    return importlib.import_module(f"meshseg.tools.{tool}.command")


@pytest.mark.parametrize("command,where", TOOL_COMMANDS,
                         ids=[where for _, where in TOOL_COMMANDS])
def test_a_documented_tool_command_parses_and_its_overrides_compose(command, where):
    """The tool's parser reads the whole command (an unknown option or value fails), and
    train.py's overrides it carries compose: the positional ones (baseline, input_bound),
    `--overrides` (bench, bench_ab) and bench_ab's variant B, `--overrides` +
    `--overrides_b`."""
    tool, arguments = command
    parser = command_module(tool).build_parser()
    try:
        args = parser.parse_intermixed_args(shlex.split(arguments, comments=True))
    except SystemExit:
        pytest.fail(f"{where}: the tool's parser refuses it")
    composed_config(args.overrides)
    if getattr(args, "overrides_b", None):
        composed_config(args.overrides + args.overrides_b)


def test_the_readme_commands_and_every_tools_are_among_the_documented_ones():
    checked = {overrides for overrides, _ in TRAIN_COMMANDS}
    assert {("impl=sparse_matmul", "jit=true"), ("experiment=rna_full",)} <= checked
    assert {tool for (tool, _), _ in TOOL_COMMANDS} == set(TOOLS)


def test_the_experiment_log_is_not_read_its_commands_ran_at_their_own_commit():
    read = {path for path, _ in ((ROOT / where.split(":", 1)[0], None)
                                 for _, where in TRAIN_COMMANDS + TOOL_COMMANDS)}
    assert EXPERIMENTS and not set(EXPERIMENTS) & (set(PAGES) | read)
