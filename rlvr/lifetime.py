"""A child process that ends with its parent (``die_with_parent``): the math-verify workers and
the reproduction pool's workers."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: ``prctl`` option: the signal the kernel sends this process when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, signum: int = signal.SIGKILL) -> None:
    """End this process when ``parent`` dies, also in the middle of a long computation.

    On Linux the kernel delivers ``signum`` (``PR_SET_PDEATHSIG``, tied to the thread that forked
    this process): it works while a C call holds the GIL for minutes, where no Python-level check
    could run. Elsewhere a daemon thread polls the parent id. Either way, a parent that died
    before this point is caught by the first ``getppid`` check.
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if parent and os.getppid() != parent:
        os._exit(1)
    if not armed and parent:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
