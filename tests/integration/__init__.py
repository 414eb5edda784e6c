"""The integration suite: the installed command on each platform, run by docker/run-integration.

x86_64 and arm64 containers and an arm64 VM (``make integration``); every
test is marked ``integration``, which ``make test`` leaves out.  Tests of this
machine's processes, compilers and oracles are tests/system/ (tests/README.md).
"""
