"""Fixtures of the integration suite (the ones of tests/conftest.py apply here too)."""

from __future__ import annotations

import pytest

from tests.support.platform import PLATFORM


@pytest.fixture(scope="session")
def platform_name() -> str:
    """The platform docker/run-integration named; skips where the suite runs outside it."""
    if not PLATFORM:
        pytest.skip("LIVEUNWIND_PLATFORM is not set: these tests run under docker/run-integration")
    return PLATFORM
