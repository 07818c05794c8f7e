"""Shared test fixtures. Evaluation data is read from ``../shared/data`` (never copied into the
repository); tests that need it skip cleanly when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RLVR_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared evaluation data not found at {SHARED_DATA}")
    return SHARED_DATA
