"""The fuzz campaign: every reader of untrusted bytes, fed edits of real inputs for a while.

``make test`` gives each target FUZZ_SECONDS=5 (the default); ``make fuzz``
several minutes.  Its inputs come from the system tests' programs and cores,
so it builds and runs them too.  Findings, once fixed, are pinned by
tests/system/test_fuzz_findings.py.
"""
