"""Burns a core in two named Python functions: the target of test_oncpu.py's Python cases.

``burn_python_cpu`` does the arithmetic, ``outer_caller`` calls it forever;
"ready" is printed once they run.
"""


def burn_python_cpu(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def outer_caller() -> None:
    while True:
        burn_python_cpu(100_000)


print("ready", flush=True)
outer_caller()
