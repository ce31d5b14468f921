"""meshseg.cli.command: what every command-line tool does with an error and with Ctrl-C."""

import signal
import subprocess
import sys
import time

import pytest

from meshseg.cli import command
from meshseg.errors import DataError

# The child restores Python's Ctrl-C handler: a job started in the background (nohup, CI)
# inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
SLEEPING_TOOL = """
import signal
import time
from meshseg.cli import command

signal.signal(signal.SIGINT, signal.default_int_handler)

@command
def main(argv=None):
    print("started", flush=True)
    time.sleep(60)

main()
"""


def test_a_meshseg_error_is_one_line_and_its_exit_status(capsys):
    @command
    def main(argv=None):
        raise DataError("shard.tfrecords, record 3: bad vertices\n  second line")

    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 4
    assert capsys.readouterr().err == "error: shard.tfrecords, record 3: bad vertices; second line\n"


def test_ctrl_c_ends_a_tool_with_one_line_and_status_130():
    tool = subprocess.Popen([sys.executable, "-c", SLEEPING_TOOL], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert tool.stdout.readline() == "started\n"
    time.sleep(0.2)
    tool.send_signal(signal.SIGINT)
    _, err = tool.communicate(timeout=30)
    assert tool.returncode == 130 and err == "interrupted by SIGINT\n"


def test_sigterm_ends_a_tool_with_one_line_and_status_143():
    tool = subprocess.Popen([sys.executable, "-c", SLEEPING_TOOL], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert tool.stdout.readline() == "started\n"
    tool.send_signal(signal.SIGTERM)
    _, err = tool.communicate(timeout=30)
    assert tool.returncode == 128 + signal.SIGTERM and err == "interrupted by SIGTERM\n"
