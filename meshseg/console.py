"""The console: TensorFlow started without its C++ start-up lines, and the commands
meshseg prints for the user to run.

Every printed command runs as printed: `shell_command` quotes each word for the shell
(`shlex.join`), and a value meshseg puts into a Hydra override (a run directory, a data
folder) goes through `hydra_override`, which quotes it for Hydra's override grammar
where it holds a character that grammar would read otherwise (`,` makes a sweep, `=`,
brackets, quotes, `~`, `#` ...).

TensorFlow's native code logs through absl before absl's logging is initialised, and such
lines go straight to file descriptor 2 whatever `TF_CPP_MIN_LOG_LEVEL` says: on a host
without CUDA, `cudart_stub.cc` ("Could not find cuda drivers") at import and
`cuda_platform.cc` ("failed call to cuInit") when the devices are first listed, each after
a "WARNING: All log messages before absl::InitializeLog() ..." line. Python cannot
filter them through `sys.stderr`, so `start_tensorflow_quietly` captures descriptor 2
while TensorFlow is imported and its devices listed, and writes back every line that is
not a native log line.
"""

import os
import re
import shlex
import shutil
import sys
import tempfile

# A line absl's C++ logging writes: its pre-initialisation notice, or a log line
# "<severity I|W|E|F><MMDD> <hh:mm:ss.us> <thread id> <file>:<line>] <message>" (before
# absl is initialised the date is 0000 and the seconds count from the epoch).
NATIVE_LOG_LINE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] )")


def is_native_log_line(line: str) -> bool:
    """Whether `line` is one of absl's C++ log lines (see `NATIVE_LOG_LINE`)."""
    return NATIVE_LOG_LINE.match(line) is not None


def start_tensorflow_quietly() -> None:
    """Imports TensorFlow and lists its physical devices (which initialises CUDA, or fails
    to) with its native start-up log lines left out of stderr.

    Everything else written to descriptor 2 meanwhile (Python warnings, errors) is written
    back to stderr afterwards, also when the import fails. With `TF_CPP_MIN_LOG_LEVEL=0`
    in the environment nothing is filtered. Does nothing if TensorFlow is already imported.
    The runtime itself is not started, so intra-op threads and logical devices can still
    be configured afterwards.
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    keep_native = os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            capture.seek(0)
            captured = capture.read().decode("utf-8", errors="replace")
            sys.stderr.write("".join(
                line for line in captured.splitlines(keepends=True)
                if keep_native or not is_native_log_line(line)))
            sys.stderr.flush()


def runnable_command(program: str) -> str:
    """How to run `program`, an entry point installed beside this Python (e.g.
    "tensorboard" in `.venv/bin/`), as a user would type it in the working directory: its
    bare name when the shell finds that same file on PATH, otherwise its path (relative
    to the working directory when inside it), so a printed command runs as printed."""
    installed = os.path.join(os.path.dirname(sys.executable), program)
    on_path = shutil.which(program)
    if not os.path.exists(installed) or (
            on_path and os.path.realpath(on_path) == os.path.realpath(installed)):
        return program
    relative = os.path.relpath(installed)
    return installed if relative.startswith("..") else relative


# A value Hydra's override grammar reads back unchanged without quotes.
_PLAIN_HYDRA_VALUE = re.compile(r"^[A-Za-z0-9_./:@%+-]+(?: +[A-Za-z0-9_./:@%+-]+)*$")


def hydra_quoted(value: str) -> str:
    """`value` (a string) as Hydra's override grammar reads it back as that same string:
    unchanged when it holds only letters, digits, `_./:@%+-` and inner spaces and does not
    read as a number, boolean or null; otherwise in single quotes, a `'` escaped as `\\'`
    and the backslashes before a quote doubled (Hydra's rule for quoted values)."""
    if _PLAIN_HYDRA_VALUE.match(value) and not _reads_as_other_type(value):
        return value
    escaped = re.sub(r"(\\+)(?='|$)", lambda run: run[1] * 2, value).replace("'", "\\'")
    return f"'{escaped}'"


def _reads_as_other_type(value: str) -> bool:
    if value.lower() in ("true", "false", "null"):
        return True
    try:
        float(value.replace("_", ""))
    except ValueError:
        return False
    return True


def hydra_override(key: str, value: str) -> str:
    """The override `key=<value>` that sets `key` to the string `value` (`hydra_quoted`)."""
    return f"{key}={hydra_quoted(str(value))}"


def shell_command(words) -> str:
    """The words of a command line as one line a POSIX shell splits back into exactly
    these words (`shlex.join`)."""
    return shlex.join(str(word) for word in words)


def train_py_command(overrides) -> str:
    """`<python> train.py <overrides>` as the user runs it in the project's folder (the
    working directory): this interpreter by its path relative to it, shell-quoted."""
    return shell_command([os.path.relpath(sys.executable), "train.py", *overrides])
