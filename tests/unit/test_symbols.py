"""Rust v0 demangling of names that break the grammar: each comes back as it was.

Demangling against c++filt, and live Rust frames, are tests/system/test_symbols.py.
"""

from __future__ import annotations

import pytest

from liveunwind.modules.rust_demangle import demangle_v0


@pytest.mark.parametrize(
    "name",
    ["_R", "_RNvC", "_RB_", "_RNvCs_3std" + "B0_" * 3, "_RIC3fooB6_E", "_RNvC999999999999x"],
)
def test_malformed_v0_names_come_back_unchanged(name: str) -> None:
    assert demangle_v0(name) == name
