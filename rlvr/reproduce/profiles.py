"""Deprecated name: a reproduction profile is a grid now (``rlvr.reproduce.grid``); this module
keeps ``get_profile`` for code written against it, as ``--profile`` stays for ``--grid``."""

import warnings

from rlvr.reproduce.grid import get_grid as get_profile

warnings.warn(
    "rlvr.reproduce.profiles is deprecated: use rlvr.reproduce.grid (get_grid)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["get_profile"]
