"""One line naming the extra when an integration's library is missing.

Each adapter imports its library (``openenv``, ``datasets``, ``verifiers``...) where it needs it;
``require_extra`` turns the ``ImportError`` into ``MissingExtra``, an ``ImportError`` of one line
that names the ``pip install 'rlvr[<extra>]'`` to run. Under ``python -m`` (the module runs as
``__main__``) it prints that line and exits 2 instead of a traceback.
"""

from __future__ import annotations

import sys
from typing import NoReturn


class MissingExtra(ImportError):
    """An optional library an adapter needs is not installed (one line, the extra named)."""


def require_extra(error: ImportError, extra: str, what: str, module: str = "") -> NoReturn:
    """Raise ``MissingExtra`` for ``what`` (an adapter or function) whose import failed with
    ``error``; exit 2 with the line when ``module`` is ``"__main__"``."""
    missing = getattr(error, "name", None) or str(error)
    line = f"{what} needs the {extra} extra ({missing} is not installed): "
    line += f"pip install 'rlvr[{extra}]'"
    if module == "__main__":
        print(line, file=sys.stderr)
        raise SystemExit(2)
    raise MissingExtra(line) from None


__all__ = ["MissingExtra", "require_extra"]
