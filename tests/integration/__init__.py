"""The integration suite: the installed command on each platform, run by docker/run-integration.

x86_64 and arm64 containers, an arm64 VM and a riscv64 VM (``make integration``; the
riscv64 VM runs test_riscv64_vm.py alone); every test is marked ``integration``,
which ``make test`` leaves out.  Tests of this machine's processes, compilers and
oracles are tests/system/ (tests/README.md).
"""
