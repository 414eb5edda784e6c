"""What the tests share: helpers, never tests.

Every module here is imported as ``tests.support.NAME``; none holds a test
function or a fixture (the fixtures are in tests/conftest.py, which builds
and starts programs with these helpers).

- paths: where the checkout, the test programs and the test data are
- builds: the test program families under testprogs/, built with one policy
- programs: start a test program and wait until its threads are parked
- waits: ``wait_until`` a condition holds, and the /proc readings tests wait on
- oracles, assertions: gdb and eu-stack as ground truth, and comparing with them
- gdb_frames, gdb_lines, gdb_static_lines: scripts gdb runs (``gdb -x``)
- lines: ``--lines`` frames from liveunwind and from gdb
- cli: ``python -m liveunwind`` as a user runs it
- cores, macho, go, pythons: cores made on demand, the Mach-O binaries and
  their cores, Go's function table, the Python interpreters and their target
- stubs, ports, rsp_replies: GDB stubs (gdbserver, scripted ones), free ports,
  replies real stubs sent
- schema, sframe_objdump, startup, hostile: the JSON Schema, objdump's SFrame
  dump as ground truth, what a plain backtrace imports, hostile files
- spaces: a target made of byte buffers, for walks without a process
- fuzzing: the fuzz campaign's targets and mutator (``python -m tests.support.fuzzing``)
- debuginfod_probe, debuginfod_oracles_probe: scripts run in their own network
  namespace beside a real debuginfod (``--lines``; names against gdb and eu-stack)
- platform: the integration suite's platform (docker/run-integration)
- containers, processes: docker containers of our own programs (the engine
  started when none answers, a small imported image), and a many-process
  ``pid`` document's processes against gdb
"""
