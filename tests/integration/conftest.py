"""Fixtures of the integration suite (the ones of tests/conftest.py apply here too)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.platform import PLATFORM


@pytest.fixture(scope="session")
def platform_name() -> str:
    """The platform docker/run-integration named; skips where the suite runs outside it."""
    if not PLATFORM:
        pytest.skip("LIVEUNWIND_PLATFORM is not set: these tests run under docker/run-integration")
    return PLATFORM


@pytest.fixture
def record_seen(
    request: pytest.FixtureRequest, record_testsuite_property: Callable[[str, object], None]
) -> Callable[[str, object], None]:
    """``record_seen(name, value)``: leaves what a test saw (a sampled stack) in the JUnit
    report the platform's run writes, as a property named after the test and ``name``."""

    def record(name: str, value: object) -> None:
        record_testsuite_property(f"{request.node.name} {name}", value)

    return record
