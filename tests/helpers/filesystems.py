"""Real filesystem faults for the tests: a small tmpfs (that a test fills, or mounts
read-only) and a command run as another user."""

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

NOBODY = 65534  # the uid and gid of `nobody` / `nogroup`


@contextlib.contextmanager
def tmpfs(size: str = "16m", read_only: bool = False, prepare=None):
    """A fresh tmpfs of `size` mounted on a temporary folder (mode 0755, so another user
    can read it); yields its path and unmounts it afterwards. `prepare(path)` fills it
    before a read-only remount. Skips the test where mounting is not allowed (not root)."""
    mount_point = Path(tempfile.mkdtemp(prefix="meshseg-tmpfs-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                              str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        mount_point.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        if prepare is not None:
            prepare(mount_point)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
        mount_point.rmdir()


def fill(folder: Path, leave: int = 0) -> Path:
    """Fills the filesystem of `folder` with one file until it holds no free byte, then
    gives `leave` bytes back (whole 4 KiB pages on a tmpfs); returns that file (remove it
    to free the space)."""
    filler = folder / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for block in (1 << 16, 1):  # big blocks, then the last bytes one by one
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\0" * block)
        if leave:
            os.ftruncate(descriptor, os.fstat(descriptor).st_size - leave)
    finally:
        os.close(descriptor)
    return filler


def run_as_nobody(module: str, args: list, cwd, timeout: float = 120):
    """`python -m <module> <args>` as the user nobody: the interpreter and `module` (with
    what it imports at the top) are loaded as this user, who can read them, then the
    process drops to nobody's uid and gid and runs the module's `main(args)`. Returns the
    `subprocess.CompletedProcess` (text output)."""
    script = (f"import importlib, os, sys; tool = importlib.import_module({module!r}); "
              f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY}); "
              f"sys.argv = [{module!r}, *{list(args)!r}]; tool.main({list(args)!r})")
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ})
