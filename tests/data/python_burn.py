"""Burns a core in named Python functions: the target of test_oncpu.py's Python cases.

``outer_caller`` calls ``burn_python_cpu`` until SIGUSR1, then
``late_python_burner``, a function never called before (under ``-X perf``
its trampoline is written to the perf map only then, while the profiler
runs); "ready" is printed once the first one runs.
"""

import signal

switched = False


def burn_python_cpu(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def late_python_burner(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 11
    return total


def switch(signum: int, frame: object) -> None:
    global switched
    switched = True


def outer_caller() -> None:
    while True:
        (late_python_burner if switched else burn_python_cpu)(100_000)


signal.signal(signal.SIGUSR1, switch)
print("ready", flush=True)
outer_caller()
