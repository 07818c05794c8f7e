"""One writer per folder: an OS file lock (``flock``) that the kernel releases when its holder
dies, however it dies (SIGKILL included), so a stale lock never needs cleaning up.

``hold(lock_file, wait=...)`` takes the exclusive lock on ``lock_file`` (created if missing; its
text is the holder's pid, for the message a second writer gets). With ``wait=False`` a second
writer is refused at once with ``FolderInUse`` (one line naming the folder and the holder); with
``wait=True`` it says once that it waits, then waits as long as the holder holds the lock (a
training run can take hours), or ``timeout_s`` (default ``$RLVR_LOCK_TIMEOUT_S``; none) before a
``FolderInUse``. A holder that is stopped (SIGSTOP, Ctrl-Z) holds its lock until it is continued
or killed: the waiter says so once. The lock is re-entrant within a process (a trainer started by
the run cache takes the run folder's lock its caller already holds).

The lock file is opened without following a symbolic link (``O_NOFOLLOW``) and must be a regular
file with one link holding nothing but a pid (``UnsafeLockFile`` otherwise): a ``.lock`` planted
as a link to, or a hard link of, another file is refused, never written (the pid used to be
written through such a link, over the file it named).

What is locked (``docs/reliability.md``): a run folder (``out=``, ``<out>/.lock``: refused), a
``rlvr reproduce --out`` folder (refused), an entry of the run cache (``runs/<key>/.lock``,
``evals/<key>/.lock``, ``sft/<key>.lock``: waited for, then found finished), a model being built
into the model cache (``models/<key>.lock``: waited for) and an index folder being written
(``<index>/.lock``: refused).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from rlvr.errors import UserError

#: The lock file inside a locked folder.
LOCK_FILE = ".lock"
#: The default deadline of a waiting ``hold`` in seconds (unset: no deadline).
TIMEOUT_VAR = "RLVR_LOCK_TIMEOUT_S"
#: Lock files this process holds -> how many times (re-entrancy).
_HELD: dict[str, int] = {}
#: What a lock file may hold: the pid of its last holder.
_PID_TEXT = re.compile(rb"[0-9]{0,10}\n?")
#: A waiter polls the lock at most this far apart (seconds).
_POLL_S = 0.5


class FolderInUse(UserError, RuntimeError):
    """Another process holds the folder's lock; the message is one line."""


class UnsafeLockFile(UserError, RuntimeError):
    """A lock file that is a link, not a regular file, or holds something other than a pid."""


def _holder_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None


def _describe(pid: int | None) -> str:
    return "another process" if pid is None else f"pid {pid}"


def is_stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` or ``t`` in ``/proc/<pid>/stat``)."""
    if pid is None:
        return False
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :][:1] in ("T", "t")


def default_timeout() -> float | None:
    """``$RLVR_LOCK_TIMEOUT_S`` as seconds (None when unset or empty)."""
    raw = os.environ.get(TIMEOUT_VAR, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise UserError(f"{TIMEOUT_VAR} must be a number of seconds > 0, got {raw[:40]!r}")
    return value


def _open_lock_file(path: Path) -> int:
    """A descriptor of ``path``, created if missing, never through a link (module docstring)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if os.path.islink(path) or os.path.isdir(path):
            what = "a symbolic link" if os.path.islink(path) else "a folder"
            raise UnsafeLockFile(
                f"lock file {path} is {what}; refused, nothing written (remove it)"
            ) from None
        raise UserError(f"cannot open the lock file {path} ({e.strerror or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a hard link"
        raise UnsafeLockFile(f"lock file {path} is {what}; refused, nothing written (remove it)")
    return fd


def _check_content(fd: int, path: Path) -> None:
    if not _PID_TEXT.fullmatch(os.pread(fd, 64, 0)):
        raise UnsafeLockFile(
            f"{path} holds something other than a pid, so it is not an rlvr lock file; "
            "refused, nothing written (move it away)"
        )


def _wait(fd: int, path: Path, name: str, say, timeout_s: float | None) -> None:
    """Poll the lock until it is free (``FolderInUse`` past ``timeout_s``), saying once that it
    waits and once if the holder is stopped."""
    pid = _holder_pid(fd)
    limit = "" if timeout_s is None else f" (at most {timeout_s:g} s)"
    say(f"[rlvr] waiting for {_describe(pid)}, which is writing {name}{limit}")
    start, said_stopped, pause = time.monotonic(), False, 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        pid = _holder_pid(fd)
        stopped = is_stopped(pid)
        if stopped and not said_stopped:
            say(
                f"[rlvr] {_describe(pid)}, which holds {name}, is stopped: waiting until it is "
                f"continued (kill -CONT {pid}) or killed"
                + ("" if timeout_s is None else f", or {timeout_s:g} s have passed")
            )
            said_stopped = True
        waited = time.monotonic() - start
        if timeout_s is not None and waited >= timeout_s:
            raise FolderInUse(
                f"{name} is still in use by {_describe(pid)}{' (stopped)' if stopped else ''} "
                f"after {waited:.1f} s (lock {path}); wait for it to finish or choose another "
                "folder"
            )
        left = math.inf if timeout_s is None else timeout_s - waited
        time.sleep(max(0.0, min(pause, left)))
        pause = min(_POLL_S, pause * 2)


@contextlib.contextmanager
def hold(
    lock_file: str | Path,
    *,
    wait: bool,
    what: str | None = None,
    say: Callable[[str], None] | None = None,
    timeout_s: float | None = None,
) -> Iterator[Path]:
    """Hold the exclusive lock on ``lock_file`` for the ``with`` block (see the module
    docstring). ``what`` names the folder in messages (default: the lock file's folder);
    ``say`` reports the wait (default: one line on stderr); ``timeout_s`` bounds a wait
    (default ``$RLVR_LOCK_TIMEOUT_S``, else none)."""
    path = Path(lock_file)
    key = os.path.join(os.path.realpath(path.parent), path.name)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield path
        finally:
            _HELD[key] -= 1
        return
    name = what or str(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise FolderInUse(
                    f"{name} is in use by {_describe(_holder_pid(fd))} (lock {path}); wait for "
                    "it to finish or choose another folder"
                ) from None
            timeout = default_timeout() if timeout_s is None else timeout_s
            _wait(fd, path, name, say or _stderr, timeout)
        _check_content(fd, path)  # only now: a holder may be between its two writes
        os.ftruncate(fd, 0)  # the descriptor is this lock file's, checked above
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
