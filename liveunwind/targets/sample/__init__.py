"""Sampled processes: the address space of one perf sample, and the process it belongs to.

The public API (what ``profile --on-cpu`` and ``liveunwind perf`` build on):
``liveunwind.formats.perfevents`` decodes kernel perf records — ``EventAttr``
(``from_bytes`` or the fields), ``decode(attr, data, offset) -> (record,
size)`` giving ``Sample`` (ip, pid, tid, time, cpu, period, ``abi``,
``registers`` in mask order, ``stack`` of ``dyn_size`` bytes), ``Mmap``
(MMAP/MMAP2, ``build_id`` or ``inode``, ``prot``), ``Comm``, ``Task``
(FORK/EXIT), ``Lost``, ``Other``, and ``record_time`` to order them;
``Arch.perf_registers`` (``PerfRegisters``: ``unwind_mask`` to ask for,
``registers(mask, values)`` → DWARF-numbered registers).  Here,
``process.SampledProcess(arch, pid, files)`` keeps one process's mappings
(``map(start, end, offset, path, prot=, inode=, build_id=)``,
``forget_mappings()`` on exec, ``copy(pid)`` on fork, ``vdso`` bytes if
known) with its files from ``RecordedFiles(FileFinder, problems)`` or
``RootFiles("/proc/PID/root", problems)``; ``space.SampleSpace(process, tid,
name, registers, stack)`` is one sample's AddressSpace; ``perfdata.PerfDataFile``
reads a perf.data.  Above them, ``liveunwind.backtrace.samples``:
``SampleReplay(arch, attr, files, options, build_ids=, vdso=, perf_maps=)``
(``perf_maps``: the root ``/tmp/perf-PID.map`` is read under), whose
``feed(record)`` takes records in time order (mmap, comm, fork, lost) and
returns each sample walked (``Unwound``: sample, name, backtrace, modules),
over ``SampleUnwinder`` (a warm module map and caches per process, remade only
when its mappings' ``generation`` moves).  ``Profile.add(backtrace, modules,
some_threads=True)`` counts a one-thread sample (``Profile.source`` says
``perf_event`` or ``perf.data``), and ``cli.profile.deliver`` writes and prints it.
"""
