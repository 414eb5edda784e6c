"""The report: a table per program, examples of each kind of difference, everything as JSON.

``build/accuracy/report.md`` is for people: the table (the README and
docs/accuracy.md quote it) and, per program, a few threads of each kind with
the frames around the first difference on all three sides. ``report.json``
holds every thread's verdict and frames, for counting anew or reading one
thread in full.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.accuracy.classify import EU_STACK, GDB, Kind, Relation, Verdict
from tools.accuracy.compare import LIVEUNWIND, Shown, ThreadRecord

COLUMNS = (
    Verdict.EQUAL_BOTH,
    Verdict.EQUAL_EU_STACK,
    Verdict.EQUAL_GDB,
    Verdict.LONGER,
    Verdict.SHORTER,
    Verdict.INVENTED,
    Verdict.SKIPPED,
    Verdict.DIFFER,
    Verdict.UNMATCHED,
)
UNBACKED = frozenset(
    {Verdict.LONGER, Verdict.SHORTER, Verdict.INVENTED, Verdict.SKIPPED, Verdict.DIFFER}
)
"""Verdicts where our walk saying "complete" is a claim neither oracle backs."""
CONTEXT = 2
"""Frames shown before and after the first difference in an example."""


@dataclass(frozen=True)
class Looked:
    """One process at one instant: what it was, which tools failed, why it was dropped (or None)."""

    instant: int
    pid: int
    command: str
    errors: dict[str, str]
    moved: str | None


@dataclass
class ProgramResult:
    """One program's run: measured, skipped (a package missing) or failed, and its threads."""

    name: str
    what: str
    status: str = "measured"
    note: str = ""
    instants: int = 0
    looks: list[Looked] = field(default_factory=list)
    threads: list[ThreadRecord] = field(default_factory=list)

    def counts(self) -> Counter[Verdict]:
        return Counter(record.verdict.verdict for record in self.threads)

    def uncalled(self, side: str) -> int:
        """Threads where ``side`` has a return address that follows no call (calls.py)."""
        return sum(1 for record in self.threads if record.uncalled(side))

    def parting_methods(self) -> Counter[str]:
        """How our first frame the oracle lacks was found, over the threads equal to neither.

        Which table or guess made the frames where we part from the nearest oracle
        (invented callers, frames past its end, a different caller).
        """
        methods: Counter[str] = Counter()
        for record in self.threads:
            verdict = record.verdict
            if verdict.verdict not in UNBACKED or verdict.against not in verdict.relations:
                continue
            at = verdict.relations[verdict.against].at
            if record.ours is not None and at < len(record.ours):
                methods[record.ours[at].method or "?"] += 1
        return methods

    def called_complete(self) -> int:
        """Threads equal to neither oracle whose walk we called complete."""
        return sum(
            1 for record in self.threads if record.verdict.verdict in UNBACKED and record.complete
        )


def table(results: list[ProgramResult]) -> str:
    """The Markdown table: one row per program, one column per verdict."""
    header = ["program", "instants", "processes", "threads", *COLUMNS]
    header += ["equal to neither, called complete", "ours: a return address after no call"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for result in results:
        if result.status != "measured":
            cells = [result.name, f"{result.status}: {result.note}"] + [""] * (len(header) - 2)
        else:
            counts = result.counts()
            processes = sum(1 for look in result.looks if look.moved is None)
            cells = [result.name, str(result.instants), str(processes), str(len(result.threads))]
            cells += [str(counts.get(column, 0)) for column in COLUMNS]
            cells += [str(result.called_complete()), str(result.uncalled(LIVEUNWIND))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _window(frames: list[Shown] | None, at: int, extra: int) -> list[str]:
    """Frames ``at - CONTEXT`` to ``at + extra + CONTEXT``, numbered; the rest elided."""
    if frames is None:
        return ["  (did not see this thread)"]
    first = max(0, at - CONTEXT)
    last = min(len(frames), at + extra + CONTEXT)
    lines = [f"  #{index:<3} {frames[index]}" for index in range(first, last)]
    if first > 0:
        lines.insert(0, f"  ... {first} frames equal above")
    if last < len(frames):
        lines.append(f"  ... {len(frames) - last} more")
    if not frames:
        lines.append("  (no frames)")
    elif at >= len(frames):
        lines.append(f"  -- ends after #{len(frames) - 1}")
    return lines


def _relation_text(name: str, relation: Relation) -> str:
    parts = [f"{name}: {relation.kind} at #{relation.at}"]
    if relation.kind is Kind.INVENTED:
        parts.append(f"({len(relation.ours)} frame(s) of ours it does not have)")
    elif relation.kind is Kind.SKIPPED:
        parts.append(f"({len(relation.theirs)} frame(s) of its we do not have)")
    elif relation.kind is Kind.LONGER:
        parts.append(f"(we have {len(relation.ours)} more)")
    elif relation.kind is Kind.SHORTER:
        parts.append(f"(it has {len(relation.theirs)} more)")
    return " ".join(parts)


def example(record: ThreadRecord, command: str) -> str:
    """One thread as the examples show it: the verdict, both relations, the frames that matter."""
    verdict = record.verdict
    title = (
        f"- instant {record.instant}, pid {record.pid} (`{command}`), tid {record.tid}"
        f' "{record.name}": **{verdict.verdict}**'
        + (f" (against {verdict.against})" if verdict.against not in (None, "both") else "")
    )
    lines = [
        title,
        f"  - our walk: {record.stop} ({'complete' if record.complete else 'incomplete'})",
    ]
    for name, relation in verdict.relations.items():
        dropped = record.cut.get(name)
        note = f"; its last {dropped} frame(s) dropped: pcs outside code" if dropped else ""
        lines.append("  - " + _relation_text(name, relation) + note)
    shown = [
        (name, relation)
        for name, relation in verdict.relations.items()
        if relation.kind is not Kind.EQUAL
    ]
    if not shown:
        return "\n".join(lines)
    at = min(relation.at for _, relation in shown)
    extra = max(max(len(r.ours), len(r.theirs)) for _, r in shown)
    extra = min(extra, 6)
    block = ["  ```", "  liveunwind:", *_window(record.ours, at, extra)]
    for name, _ in shown:
        block += [f"  {name}:", *_window(record.oracles.get(name), at, extra)]
    block.append("  ```")
    return "\n".join(lines + block)


def examples(result: ProgramResult, per_verdict: int) -> str:
    """Up to ``per_verdict`` threads of each verdict but equal-to-both, for one program."""
    commands = {(look.instant, look.pid): look.command for look in result.looks}
    sections = []
    for column in COLUMNS[1:]:
        chosen = [record for record in result.threads if record.verdict.verdict is column]
        if not chosen:
            continue
        sections.append(f"#### {column} ({len(chosen)})\n")
        for record in chosen[:per_verdict]:
            sections.append(example(record, commands.get((record.instant, record.pid), "?")))
        sections.append("")
    return "\n".join(sections)


def markdown(results: list[ProgramResult], header: dict[str, object], per_verdict: int) -> str:
    """The whole report.md."""
    parts = ["# liveunwind against gdb and eu-stack on busy programs", ""]
    parts += [f"- {key}: {value}" for key, value in header.items()]
    parts += ["", table(results), ""]
    for result in results:
        parts += [f"## {result.name}: {result.what}", ""]
        if result.status != "measured":
            parts += [f"{result.status}: {result.note}", ""]
            continue
        walked_off = Counter(name for record in result.threads for name in record.cut)
        if walked_off:
            counted = ", ".join(f"{name} in {count}" for name, count in sorted(walked_off.items()))
            parts += [f"Oracle walks cut where their pcs left code: {counted} threads.", ""]
        methods = result.parting_methods()
        if methods:
            listed = ", ".join(f"{method} {count}" for method, count in methods.most_common())
            parts += [f"Our first frame past the nearest oracle's, by method: {listed}.", ""]
        uncalled = ", ".join(
            f"{side} {result.uncalled(side)}" for side in (LIVEUNWIND, GDB, EU_STACK)
        )
        parts += [f"Threads with a return address that follows no call: {uncalled}.", ""]
        for look in result.looks:
            trouble = [f"{tool} failed: {error}" for tool, error in look.errors.items()]
            if look.moved is not None:
                trouble.append(f"dropped: {look.moved}")
            if trouble:
                parts.append(f"- instant {look.instant}, pid {look.pid}: " + "; ".join(trouble))
        parts += ["", examples(result, per_verdict)]
    return "\n".join(parts) + "\n"


def _frames_json(frames: list[Shown] | None) -> list[dict[str, object]] | None:
    if frames is None:
        return None
    return [{"pc": f.pc, "name": f.name, "method": f.method} for f in frames]


def _relation_json(relation: Relation) -> dict[str, object]:
    return {
        "kind": str(relation.kind),
        "at": relation.at,
        "ours": list(relation.ours),
        "theirs": list(relation.theirs),
    }


def as_json(results: list[ProgramResult], header: dict[str, object]) -> dict[str, object]:
    """report.json: the header, and per program its status, counts, looks and every thread."""
    programs = []
    for result in results:
        counts = result.counts()
        programs.append(
            {
                "name": result.name,
                "what": result.what,
                "status": result.status,
                "note": result.note,
                "instants": result.instants,
                "counts": {str(column): counts.get(column, 0) for column in COLUMNS},
                "equal_to_neither_called_complete": result.called_complete(),
                "parting_methods": dict(result.parting_methods()),
                "after_no_call": {
                    side: result.uncalled(side) for side in (LIVEUNWIND, GDB, EU_STACK)
                },
                "looks": [asdict(look) for look in result.looks],
                "threads": [
                    {
                        "instant": r.instant,
                        "pid": r.pid,
                        "tid": r.tid,
                        "name": r.name,
                        "verdict": str(r.verdict.verdict),
                        "against": r.verdict.against,
                        "relations": {n: _relation_json(v) for n, v in r.verdict.relations.items()},
                        "complete": r.complete,
                        "stop": r.stop,
                        "cut": r.cut,
                        "after_no_call": {
                            side: r.uncalled(side) for side in (LIVEUNWIND, GDB, EU_STACK)
                        },
                        "liveunwind": _frames_json(r.ours),
                        GDB: _frames_json(r.oracles.get(GDB)),
                        EU_STACK: _frames_json(r.oracles.get(EU_STACK)),
                    }
                    for r in result.threads
                ],
            }
        )
    return {**header, "programs": programs}


def write(
    results: list[ProgramResult], header: dict[str, object], folder: Path, per_verdict: int
) -> Path:
    """Write report.md and report.json into ``folder``; returns the Markdown file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(as_json(results, header), indent=1) + "\n")
    path = folder / "report.md"
    path.write_text(markdown(results, header, per_verdict))
    return path
