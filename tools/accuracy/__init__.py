"""`make accuracy`: liveunwind against gdb and eu-stack on busy programs nobody here wrote.

Real programs from Debian packages (a JIT runtime, hand-written assembly, a
database's LLVM JIT, a browser) are started, stopped at random instants with
SIGSTOP, and every thread's frames from liveunwind, gdb and eu-stack for that
instant are compared and classified (docs/accuracy.md).

    programs.py  which programs, how each starts busy and is put away
    instant.py   one instant: stop, the three tools in turn, a check that nothing moved
    classify.py  pure: our pcs against each oracle's, one verdict per thread
    compare.py   an instant's threads matched by tid and classified
    report.py    the table, the examples, report.md and report.json
    __main__.py  the run: `python -m tools.accuracy --help`
"""
