"""``--python``: the CPython frames each native frame runs, read from the target's interpreter.

One room for the feature, in the order a backtrace uses it:

- ``layouts.py``, ``objects.py``: CPython's state as bytes (pure decoders);
- ``interpreter.py``: the interpreter among a target's modules, its version and layout;
- ``memory.py``, ``plan.py``: the reads of a walk in batches, and the plan it
  leaves: every range it read, one request for the next walk;
- ``walk.py``, ``collected.py``, ``codereader.py``, ``codecache.py``: the
  walk from ``_PyRuntime`` through thread states and frame chains to the
  code objects, what it read, and the code objects kept between backtraces;
- ``stop.py``: a live process's walk split around its stop;
- ``stacks.py``, ``placement.py``: what was read as Python frames, each
  run placed on the native frame of the eval call that runs it;
- ``reader.py``: ``PythonReader``, which a Backtracer keeps, and the order
  of the calls around a stop.

Reading the frames is split so that a live process need only be stopped for
the least of it: before the stop a walk of the running process reads the
code objects ahead and plans the stop's copy; the stop fetches that plan
with one system call and walks only the threads that moved since; the
others are walked after the process runs again, from the copy, and line
tables are decoded then.  Every structure read is checked before it is
believed (a thread state points back at its interpreter, a code object's
type is ``PyCode_Type``, a name's ``PyUnicode_Type``); every list and chain
is bounded and cycles are cut.  A frame that fails its check is left out
and noted, never shown wrong.
"""
