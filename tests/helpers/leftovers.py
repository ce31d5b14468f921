"""Programs a test leaves running, found through Linux's child subreaper: once pytest is a
subreaper (prctl(2) PR_SET_CHILD_SUBREAPER), an orphaned descendant is re-parented to
pytest instead of to init, so "still running and a child of pytest" is exactly "started,
directly or not, by a test and not ended". Elsewhere than on Linux both functions do
nothing.
"""

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# Children of pytest that live for the whole session on purpose: multiprocessing's helper
# processes, started on first use and ended when pytest ends.
SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
GRACE_S = 10.0  # a program that is already ending (killed parent, grace period) may finish


def become_subreaper() -> bool:
    """Makes this process the subreaper of its descendants; whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _children() -> dict[int, tuple[str, str]]:
    """This process's children: pid -> (state letter, command line)."""
    me = os.getpid()
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            if int(ppid) != me:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue  # ended meanwhile
        children[int(entry.name)] = (state, command.strip())
    return children


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # reaped by its subprocess.Popen


def _running() -> dict[int, str]:
    """Running children (zombies are reaped), session helpers aside: pid -> command line."""
    running = {}
    for pid, (state, command) in _children().items():
        if state == "Z":
            _reap(pid)
        elif not any(helper in command for helper in SESSION_HELPERS):
            running[pid] = command
    return running


def kill_leftovers(grace_s: float = GRACE_S) -> list[str]:
    """Kills the children still running `grace_s` after this call and returns their
    command lines (empty when none is left); a no-op where /proc is absent."""
    if not Path("/proc/self/stat").exists():
        return []
    deadline = time.monotonic() + grace_s
    running = _running()
    while running and time.monotonic() < deadline:
        time.sleep(0.1)
        running = _running()
    if not running:
        return []
    left = dict(running)
    for _ in range(10):  # a killed child's own children come to this process next
        for pid in running:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
        running = _running()
        if not running:
            break
        left.update(running)
    return [f"pid {pid}: {command[:200]}" for pid, command in left.items()]
