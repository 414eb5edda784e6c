"""The oracles' own parsers, on text the tools print: nothing run.

The oracles against live programs are tests/system/test_oracles.py.
"""

from __future__ import annotations

import pytest

from tests.support.oracles import OracleError, OracleFrame, parse_eu_stack


def test_parse_eu_stack_keeps_printed_addresses() -> None:
    """Return addresses are kept as printed; a missing name is None, threads stay apart."""
    text = (
        "PID 10 - process\n"
        "TID 10:\n"
        "#0  0x00007f87a3bd7503     clock_nanosleep@GLIBC_2.2.5\n"
        "#1  0x00007f87a3bdbe53 - 1 __nanosleep\n"
        "#2  0x000056278e7401d7 - 1\n"
        "TID 11:\n"
        "#0  0x0000000000001000     f\n"
    )
    assert parse_eu_stack(text) == {
        10: [
            OracleFrame(0x7F87A3BD7503, "clock_nanosleep@GLIBC_2.2.5"),
            OracleFrame(0x7F87A3BDBE53, "__nanosleep"),
            OracleFrame(0x56278E7401D7, None),
        ],
        11: [OracleFrame(0x1000, "f")],
    }
    with pytest.raises(OracleError):
        parse_eu_stack("TID 1:\n#1  0x1000 - 1 f\n")
