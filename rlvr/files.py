"""Files rlvr writes and later reads back: written whole or not at all, read only when sane.

Writing (``atomic_write``, ``write_text_atomic``, ``write_json_atomic``): the content goes to a
temporary file in the same folder (``.<name>.tmp-<pid>-<random>``), is flushed and fsynced, and is
renamed over the target, then the folder is fsynced. A kill or a full disk at any moment leaves
the old file or the new one, never a torn one (a torn ``run.json`` used to pass for a finished
run: docs/reliability.md). Every record the project reads back goes through here.

Reading (``read_bytes``, ``read_text``, ``read_json``): a record of a result folder may be
anything a user or an attacker put there. It is refused in one line (``RecordError``) unless it is
a regular file (``stat`` follows a link, so a link to ``/dev/zero`` is a device; a FIFO is opened
without blocking and refused), of at most ``limit`` bytes (checked before reading and again while
reading), valid UTF-8 and, for JSON, parseable (nesting and 5,000-digit integers included).

Leftovers (``remove_dead_temporaries``): a folder written under a temporary name by a process
that was killed (``.<name>.tmp-<pid>``, a vLLM model copy ``rlvr-vllm-<pid>-...``) is removed by
the next process that writes the same name, once the pid that made it is dead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import IO, Any, Iterator

from rlvr.errors import UserError

#: Default cap of a JSON record read back (``run.json``, ``<name>.meta.json``, ...): the largest
#: the project writes is tens of kilobytes.
MAX_RECORD_BYTES = 16 * 1024 * 1024


class RecordError(UserError):
    """A file that is not the record rlvr wrote there; the message is one line naming it."""


# -- writing -------------------------------------------------------------------------------------
def fsync_file(path: str | Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8", newline=None
) -> Iterator[IO]:
    """A file object whose content replaces ``path`` when the ``with`` block ends without an
    exception (module docstring); on an exception the temporary file is removed and ``path`` is
    untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
    try:
        binary = "b" in mode
        with os.fdopen(
            fd, mode, encoding=None if binary else encoding, newline=None if binary else newline
        ) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_write(path) as f:
        f.write(text)
    return Path(path)


def write_json_atomic(path: str | Path, obj: Any, **dumps: Any) -> Path:
    """``json.dumps(obj, **dumps)`` written with ``write_text_atomic``."""
    return write_text_atomic(path, json.dumps(obj, **dumps))


# -- reading -------------------------------------------------------------------------------------
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: str | Path, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else ``RecordError``."""
    path = Path(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path} is {_kind(st.st_mode)}, not a regular file; refused unread")
        if st.st_size > limit:
            raise RecordError(
                f"{path} holds {st.st_size} bytes, more than the {limit} such a record may; "
                "refused unread"
            )
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise RecordError(f"{path} cannot be read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)  # what was opened, should the name have been swapped since the stat
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path} is {_kind(st.st_mode)}, not a regular file; refused unread")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise RecordError(f"{path} cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if total > limit:
        raise RecordError(f"{path} grew past {limit} bytes while it was read; refused")
    return b"".join(chunks)


def read_text(path: str | Path, limit: int = MAX_RECORD_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8 (``RecordError`` naming the first bad byte's offset)."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"{path} is not UTF-8 text (byte {e.start}); refused") from None


def parse_json(text: str, where: str, what: str = "record", error: type = RecordError) -> Any:
    """``json.loads(text)``, or ``error`` naming ``where`` in one line when it does not parse:
    bad JSON, nesting past the recursion limit (100,000 ``[``), an integer past Python's
    int-string limit (5,000 digits)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{where}: not a JSON {what} (nested too deeply)") from None
    except ValueError as e:
        raise error(f"{where}: not a JSON {what} ({str(e)[:160]})") from None


def read_json(path: str | Path, limit: int = MAX_RECORD_BYTES) -> Any:
    """The JSON value of a record (``read_text``), ``RecordError`` when it does not parse."""
    return parse_json(read_text(path, limit), str(path))


def read_json_object(path: str | Path, limit: int = MAX_RECORD_BYTES) -> dict[str, Any]:
    """``read_json`` of a record that must be a JSON object."""
    value = read_json(path, limit)
    if not isinstance(value, dict):
        raise RecordError(f"{path} holds a JSON {type(value).__name__}, not an object; refused")
    return value


def complete_record(path: str | Path, **fields: type) -> dict[str, Any] | None:
    """The JSON object at ``path`` when it holds each of ``fields`` with its type (``steps=int``:
    a bool is no int); None when it is missing, torn, empty or anything else. What says that a
    piece of work is done (``run.json``, ``build.json``...): an incomplete one is rebuilt, never
    trusted."""
    try:
        record = read_json_object(path)
    except RecordError:
        return None
    for name, kind in fields.items():
        value = record.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return None
    return record


# -- leftovers of killed processes --------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts: it cannot be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_temporaries(folder: str | Path, prefix: str) -> list[Path]:
    """Remove what ``folder`` holds named ``<prefix><pid>`` or ``<prefix><pid>-...`` (a file or a
    folder) that this user owns and whose ``pid`` is no longer alive; returns what was removed.

    Callers pass the prefix of one thing they are about to write (``.<key>.tmp-``), under that
    thing's lock, so a live writer of it cannot be another process."""
    folder = Path(folder)
    pattern = re.compile(re.escape(prefix) + r"([0-9]{1,10})(?:-.*)?")
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or int(m[1]) == os.getpid() or pid_alive(int(m[1])):
            continue
        try:
            if entry.lstat().st_uid != os.getuid():
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed


__all__ = [
    "MAX_RECORD_BYTES",
    "RecordError",
    "atomic_write",
    "complete_record",
    "fsync_dir",
    "fsync_file",
    "parse_json",
    "pid_alive",
    "read_bytes",
    "read_json",
    "read_json_object",
    "read_text",
    "remove_dead_temporaries",
    "write_json_atomic",
    "write_text_atomic",
]
