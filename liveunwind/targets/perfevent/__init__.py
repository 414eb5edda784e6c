"""A process sampled by the kernel (``profile --on-cpu``), never stopped.

``perf_event_open(2)`` on the CPU clock copies, at each sample, the running
thread's user registers and a slice of its stack into a ring buffer we map;
the stacks are unwound afterwards, outside the target's time.
``events.py`` opens the events (every thread, on every CPU, inherited by new
threads), ``ring.py`` reads one ring buffer, ``recorder.py`` drains them all
until the time is up, the process exits or we are asked to stop.
"""
