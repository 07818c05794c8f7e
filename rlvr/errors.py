"""The project's one error type for input a user can fix.

``UserError`` is what a command reports as one line and exit status 2 (``rlvr.cli.main`` catches
it for every sub-command): a bad configuration value (``rlvr.config.ConfigError``), a folder
another process writes (``rlvr.locks.FolderInUse``), a checkpoint that cannot be resumed from, a
record in a result folder that is not what rlvr writes (``rlvr.files.RecordError``). Anything
else that escapes a command is a programming error and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input, a busy folder or a damaged record: the message is one line a user can act on."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = ["UserError", "first_line"]
