"""One writer per folder: an OS file lock (``flock``) that the kernel releases when its holder
dies, however it dies (SIGKILL included), so a stale lock never needs cleaning up.

``hold(lock_file, wait=...)`` takes the exclusive lock on ``lock_file`` (created if missing; its
text is the holder's pid, for the message a second writer gets). With ``wait=False`` a second
writer is refused at once with ``FolderInUse`` (one line naming the folder and the holder); with
``wait=True`` it says once that it waits, then waits. The lock is re-entrant within a process
(a trainer started by the run cache takes the run folder's lock its caller already holds).

What is locked (``docs/reliability.md``): a run folder (``out=``, ``<out>/.lock``: refused), an
entry of the run cache (``runs/<key>/.lock``, ``evals/<key>/.lock``, ``sft/<key>.lock``: waited
for, then found finished), a model being built into the model cache (``models/<key>.lock``:
waited for) and an index folder being written (``<index>/.lock``: refused).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

#: The lock file inside a locked folder.
LOCK_FILE = ".lock"
#: Lock files this process holds -> how many times (re-entrancy).
_HELD: dict[str, int] = {}


class FolderInUse(RuntimeError):
    """Another process holds the folder's lock; the message is one line."""


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "another process"
    return f"pid {text}" if text.isdigit() else "another process"


@contextlib.contextmanager
def hold(
    lock_file: str | Path,
    *,
    wait: bool,
    what: str | None = None,
    say: Callable[[str], None] | None = None,
) -> Iterator[Path]:
    """Hold the exclusive lock on ``lock_file`` for the ``with`` block (see the module
    docstring). ``what`` names the folder in messages (default: the lock file's folder);
    ``say`` reports the wait (default: one line on stderr)."""
    path = Path(lock_file)
    key = os.path.realpath(path)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield path
        finally:
            _HELD[key] -= 1
        return
    name = what or str(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if not wait:
                raise FolderInUse(
                    f"{name} is in use by {holder} (lock {path}); wait for it to finish or "
                    "choose another folder"
                ) from None
            (say or _stderr)(f"[rlvr] waiting for {holder}, which is writing {name}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[key] = 1
        try:
            yield path
        finally:
            del _HELD[key]
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
