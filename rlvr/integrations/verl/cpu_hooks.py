"""Import-system hooks that let ``rlvr.integrations.verl.cpu`` adjust verl and vLLM without
touching their files: a patch that runs when a module is first imported, and the ``vllm``
distribution name for vLLM's CPU build.

Both are ``sys.meta_path`` finders (the standard import hooks, PEP 302 / PEP 451, and the
``find_distributions`` protocol of ``importlib.metadata``), installed only by
``cpu.activate()``. Nothing here imports verl, vLLM or torch: the main test suite tests it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata as metadata
import importlib.util
import re
import sys
import types
from typing import Callable, Optional

Patch = Callable[[types.ModuleType], None]


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the patches registered for it."""

    def __init__(self, loader, patches: list[Patch]):
        self._loader, self._patches = loader, patches

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for patch in self._patches:
            patch(module)


class PostImportHooks(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``module`` is first executed (``when_imported``)."""

    def __init__(self) -> None:
        self.patches: dict[str, list[Patch]] = {}
        self._busy: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        patches = self.patches.get(fullname)
        if not patches or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:  # the spec the rest of sys.meta_path finds
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, patches)
        return spec


_HOOKS = PostImportHooks()


def when_imported(name: str, patch: Patch) -> None:
    """Run ``patch(module)`` once module ``name`` is imported: now when it already is, else
    right after its first import. Installs the finder at the front of ``sys.meta_path``."""
    if _HOOKS not in sys.meta_path:
        sys.meta_path.insert(0, _HOOKS)
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return
    _HOOKS.patches.setdefault(name, []).append(patch)


def _normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


class AliasDistribution(metadata.Distribution):
    """Distribution ``target`` (installed) seen under the name ``alias``, its version given the
    local label ``+local`` (``0.32.0`` -> ``0.32.0+cpu``)."""

    def __init__(self, target: metadata.Distribution, alias: str, local: str):
        self._target, self._alias, self._local = target, alias, local

    def read_text(self, filename) -> Optional[str]:
        text = self._target.read_text(filename)
        if text is None or filename not in ("METADATA", "PKG-INFO"):
            return text
        version = self._target.version
        if self._local and "+" not in version:
            version = f"{version}+{self._local}"
        text = re.sub(r"(?m)^Name: .*$", f"Name: {self._alias}", text, count=1)
        return re.sub(r"(?m)^Version: .*$", f"Version: {version}", text, count=1)

    def locate_file(self, path):
        return self._target.locate_file(path)


class DistributionAlias(importlib.abc.MetaPathFinder):
    """``importlib.metadata`` finds distribution ``target`` under the name ``alias`` as well,
    when no distribution of that name is installed (asked for by name only: listings of all
    distributions are left as they are)."""

    def __init__(self, alias: str, target: str, local: str = ""):
        self.alias, self.target, self.local = alias, target, local

    def find_spec(self, fullname, path=None, target=None):
        return None  # finds distributions, not modules

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is None or _normalized(name) != _normalized(self.alias):
            return iter(())
        finder = importlib.machinery.PathFinder
        if any(True for _ in finder.find_distributions(context)):
            return iter(())  # a real distribution of that name exists
        found = list(
            finder.find_distributions(metadata.DistributionFinder.Context(name=self.target))
        )
        return iter([AliasDistribution(found[0], self.alias, self.local)] if found else [])


def alias_distribution(alias: str, target: str, local: str = "") -> DistributionAlias:
    """Install (once) a ``DistributionAlias`` at the end of ``sys.meta_path``."""
    for finder in sys.meta_path:
        if isinstance(finder, DistributionAlias) and (finder.alias, finder.target) == (
            alias,
            target,
        ):
            return finder
    finder = DistributionAlias(alias, target, local)
    sys.meta_path.append(finder)
    return finder
