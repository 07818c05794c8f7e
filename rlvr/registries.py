"""What every registry of rlvr does when something registers (environments, algorithms,
advantage estimators, figures): one entry per name, the same entry again a no-op."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def add(registry: dict[str, T], name: str, entry: T, what: str) -> T:
    """``registry[name] = entry``; ``ValueError`` naming ``what`` when another entry holds the
    name."""
    known = registry.get(name)
    if known is not None and known != entry:
        raise ValueError(f"{what}: {name!r} is already registered")
    registry[name] = entry
    return entry
