"""meshseg.cli.command: what every command-line tool does with an error and with Ctrl-C."""

import os
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
import os
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


# A tool that runs a child through `meshseg.signals.run_child`; the child counts the SIGINTs
# it receives in a file and stops a second after the first.
PARENT_TOOL = """
import signal, sys
from meshseg.cli import command
from meshseg.signals import run_child

signal.signal(signal.SIGINT, signal.default_int_handler)
CHILD = '''
import os, signal, sys, time
def count(signum, frame):
    open(sys.argv[1], "a").write("SIGINT\\\\n")
signal.signal(signal.SIGINT, count)
print("started", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
time.sleep(1)  # a second SIGINT would be counted meanwhile
sys.exit(130)
'''

@command
def main(argv=None):
    run_child([sys.executable, "-c", CHILD, sys.argv[1]])

main()
"""


def test_ctrl_c_in_a_terminal_reaches_a_child_once_and_the_tool_ends_after_it(tmp_path):
    received = tmp_path / "received"
    tool = subprocess.Popen([sys.executable, "-c", PARENT_TOOL, str(received)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert tool.stdout.readline() == "started\n"
    os.killpg(tool.pid, signal.SIGINT)  # as a terminal does: to the foreground group
    _, err = tool.communicate(timeout=30)
    assert tool.returncode == 130 and err == "interrupted by SIGINT\n"
    assert received.read_text() == "SIGINT\n"  # once, passed on by the tool
