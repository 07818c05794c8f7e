"""Deprecated: a reproduction profile is a grid now (``rlvr.reproduce.grid``); ``get_profile``
stays for code written against this name, as ``--profile`` stays for ``--grid``."""

import warnings

from rlvr.reproduce.grid import get_grid as get_profile  # noqa: F401

warnings.warn("rlvr.reproduce.profiles: use rlvr.reproduce.grid", DeprecationWarning, stacklevel=2)
