"""From what the three tools saw of one process to one record per thread, classified.

Threads are matched by tid; each side's frames are reduced to pcs the way
``tests/support/oracles.py`` defines them (``pcs`` drops gdb's inline and
tail-call frames) and handed to ``classify``, an oracle's cut where its pcs leave executable
memory (``in_code``). Each return address on each side is marked with whether
a call ends before it (``calls.py``). A record keeps the names and,
for our frames, the method, so that the report can show where a difference
lies and which source or guess made it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tests.support.oracles import Backtraces, OracleFrame, physical
from tools.accuracy.calls import return_address_indexes
from tools.accuracy.classify import EU_STACK, GDB, ThreadVerdict, classify, in_code
from tools.accuracy.instant import Look, OurThread

LIVEUNWIND = "liveunwind"


@dataclass(frozen=True)
class Shown:
    """One frame as the report shows it: pc, name, and (ours only) the method."""

    pc: int
    name: str | None
    method: str | None = None
    called: bool | None = None
    """Whether a call ends before this return address (calls.py); None: not a return address."""

    def __str__(self) -> str:
        method = f" [{self.method}]" if self.method else ""
        uncalled = "  (no call before it)" if self.called is False else ""
        return f"{self.pc:#x} {self.name or '??'}{method}{uncalled}"


@dataclass(frozen=True)
class ThreadRecord:
    """One thread at one instant: the three sides' frames and the verdict."""

    program: str
    instant: int
    pid: int
    tid: int
    name: str
    verdict: ThreadVerdict
    ours: list[Shown] | None
    oracles: dict[str, list[Shown] | None]
    complete: bool | None
    stop: str | None
    cut: dict[str, int]
    """Per oracle, the frames dropped from its walk because their pcs are not code."""

    def uncalled(self, side: str) -> list[int]:
        """Indexes of ``side``'s return addresses (LIVEUNWIND, GDB, EU_STACK) after no call."""
        frames = self.ours if side == LIVEUNWIND else self.oracles.get(side)
        return [index for index, frame in enumerate(frames or []) if frame.called is False]


def _judged(frames: list[Shown], kinds: list[str | None], calls: dict[int, bool]) -> list[Shown]:
    """``frames`` with ``called`` set on each return address (kinds: "signal" for a trampoline)."""
    judged = list(frames)
    for index in return_address_indexes(kinds):
        frame = judged[index]
        judged[index] = replace(frame, called=calls.get(frame.pc))
    return judged


def _shown_oracle(
    backtraces: Backtraces | None, tid: int, calls: dict[int, bool]
) -> list[Shown] | None:
    if backtraces is None or tid not in backtraces:
        return None
    frames: list[OracleFrame] = physical(backtraces[tid])
    # gdb calls the trampoline's frame "sigtramp"; eu-stack names it only.
    kinds = [
        "signal" if frame.kind == "sigtramp" or frame.name == "__restore_rt" else None
        for frame in frames
    ]
    return _judged([Shown(frame.pc, frame.name) for frame in frames], kinds, calls)


def _shown_ours(thread: OurThread | None, calls: dict[int, bool]) -> list[Shown] | None:
    if thread is None:
        return None
    kinds: list[str | None] = ["signal" if frame.signal_frame else None for frame in thread.frames]
    shown = [Shown(frame.pc, frame.function, frame.method) for frame in thread.frames]
    return _judged(shown, kinds, calls)


def _kept(frames: list[Shown] | None, code: list[tuple[int, int]]) -> int:
    """How many of an oracle's frames count: those before its first pc outside code."""
    if frames is None:
        return 0
    return in_code([frame.pc for frame in frames], code) if code else len(frames)


def records(look: Look, program: str, instant: int, limit: int) -> list[ThreadRecord]:
    """Every thread any side saw in ``look``, classified (``limit``: the frame limit of the run)."""
    ours = look.ours or {}
    tids = set(ours) | set(look.gdb or {}) | set(look.eu_stack or {})
    found = []
    for tid in sorted(tids):
        thread = ours.get(tid)
        mine = _shown_ours(thread, look.follows_call)
        oracles = {
            GDB: _shown_oracle(look.gdb, tid, look.follows_call),
            EU_STACK: _shown_oracle(look.eu_stack, tid, look.follows_call),
        }
        kept = {name: _kept(frames, look.code) for name, frames in oracles.items()}
        cut = {
            name: len(frames) - kept[name]
            for name, frames in oracles.items()
            if frames is not None and kept[name] < len(frames)
        }
        verdict = classify(
            None if mine is None else [frame.pc for frame in mine],
            {
                name: None if frames is None else [frame.pc for frame in frames[: kept[name]]]
                for name, frames in oracles.items()
            },
            limit,
        )
        found.append(
            ThreadRecord(
                program=program,
                instant=instant,
                pid=look.pid,
                tid=tid,
                name=thread.name if thread else "",
                verdict=verdict,
                ours=mine,
                oracles=oracles,
                complete=thread.complete if thread else None,
                cut=cut,
                stop=(
                    f"{thread.stop_reason}{': ' + thread.stop_detail if thread.stop_detail else ''}"
                    if thread
                    else None
                ),
            )
        )
    return found
