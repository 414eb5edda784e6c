"""The classification of `make accuracy` (tools/accuracy/classify.py) and its table.

The run itself (real programs, gdb, eu-stack) is `make accuracy`, not a
test; what it concludes from three lists of pcs is pure and checked here on
the shapes the run meets: equal walks, one side stopping first, a caller one
side has and the other not, walks that part for good, oracle walks that go
on into addresses that are not code.
"""

from __future__ import annotations

from tests.support.paths import ROOT
from tools.accuracy.calls import return_address_indexes
from tools.accuracy.classify import (
    EU_STACK,
    GDB,
    Kind,
    Relation,
    Verdict,
    classify,
    in_code,
    relate,
)
from tools.accuracy.compare import Shown, ThreadRecord
from tools.accuracy.programs import PACKAGES, PROGRAMS
from tools.accuracy.report import Looked, ProgramResult, example, table

MAIN, CALLER, CALLEE, STALE, OTHER = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000


def test_equal_walks() -> None:
    assert relate([1, 2, 3], [1, 2, 3]) == Relation(Kind.EQUAL, 3)


def test_we_go_on_after_the_oracle_stops() -> None:
    assert relate([1, 2, 3, 4], [1, 2]) == Relation(Kind.LONGER, 2, ours=(3, 4))


def test_we_stop_before_the_oracle() -> None:
    assert relate([1, 2], [1, 2, 3]) == Relation(Kind.SHORTER, 2, theirs=(3,))


def test_a_caller_only_we_have_is_invented() -> None:
    ours = [CALLEE, STALE, CALLER, MAIN]
    assert relate(ours, [CALLEE, CALLER, MAIN]) == Relation(Kind.INVENTED, 1, ours=(STALE,))


def test_a_caller_only_the_oracle_has_is_skipped() -> None:
    theirs = [CALLEE, CALLER, OTHER, MAIN]
    assert relate([CALLEE, MAIN], theirs) == Relation(Kind.SKIPPED, 1, theirs=(CALLER, OTHER))


def test_walks_that_never_meet_again_differ() -> None:
    parted = Relation(Kind.DIFFER, 1, ours=(2, 3, 4), theirs=(5, 6))
    assert relate([1, 2, 3, 4], [1, 5, 6]) == parted


def test_a_meeting_beyond_the_window_is_a_difference() -> None:
    ours = [1, *range(100, 100 + 10), 2]
    assert relate(ours, [1, 2], window=8).kind is Kind.DIFFER
    assert relate(ours, [1, 2], window=11) == Relation(Kind.INVENTED, 1, ours=tuple(ours[1:-1]))


def test_the_shorter_detour_wins() -> None:
    """Ours has the oracle's next frame 2 later; the oracle has ours 1 later: we skipped one."""
    assert relate([1, 7, 8, 2], [1, 2, 7]).kind is Kind.SKIPPED


def test_a_different_frame_0_is_a_difference_not_a_caller() -> None:
    assert relate([9, 1, 2], [1, 2]).kind is Kind.DIFFER


def test_oracle_walks_end_at_the_first_pc_outside_code() -> None:
    code = [(0x1000, 0x2000), (0x7000, 0x8000)]
    assert in_code([0x1500, 0x7FFF, 0x4, 0x1500], code) == 2
    assert in_code([0x2000], code) == 1  # a return address just past the mapping's last call
    assert in_code([], code) == 0


def test_frame_0_and_the_frames_around_a_signal_trampoline_hold_exact_pcs() -> None:
    """Only return addresses are checked for a call before them."""
    assert return_address_indexes([None, None, "signal", None, None]) == [1, 4]
    assert return_address_indexes([None]) == []


def test_equal_to_both_and_to_one() -> None:
    both = classify([1, 2], {GDB: [1, 2], EU_STACK: [1, 2]}, 256)
    assert (both.verdict, both.against) == (Verdict.EQUAL_BOTH, "both")
    eu_only = classify([1, 2], {GDB: [1], EU_STACK: [1, 2]}, 256)
    assert (eu_only.verdict, eu_only.against) == (Verdict.EQUAL_EU_STACK, EU_STACK)
    assert eu_only.relations[GDB].kind is Kind.LONGER
    gdb_only = classify([1, 2], {GDB: [1, 2], EU_STACK: [1, 3]}, 256)
    assert gdb_only.verdict is Verdict.EQUAL_GDB


def test_the_verdict_follows_the_nearest_oracle() -> None:
    """gdb agrees with us for longer; eu-stack stopped at frame 0: we invented a caller of gdb's."""
    verdict = classify([1, 2, STALE, 3], {GDB: [1, 2, 3], EU_STACK: [1]}, 256)
    assert (verdict.verdict, verdict.against) == (Verdict.INVENTED, GDB)


def test_on_a_tie_the_oracle_that_went_further_counts() -> None:
    verdict = classify([1, 2, 3], {GDB: [1, 5, 6, 7], EU_STACK: [1]}, 256)
    assert (verdict.verdict, verdict.against) == (Verdict.DIFFER, GDB)
    verdict = classify([1, 2, 3], {GDB: [1], EU_STACK: [1]}, 256)
    assert (verdict.verdict, verdict.against) == (Verdict.LONGER, EU_STACK)


def test_walks_compare_within_the_frame_limit() -> None:
    """We stop at the limit of 3; gdb ran with more: equal on the frames both had."""
    verdict = classify([1, 2, 3], {GDB: [1, 2, 3, 4, 5], EU_STACK: [1, 2, 3]}, 3)
    assert verdict.verdict is Verdict.EQUAL_BOTH


def test_a_thread_one_side_did_not_see_is_unmatched() -> None:
    assert classify(None, {GDB: [1], EU_STACK: [1]}, 256).verdict is Verdict.UNMATCHED
    missing = classify([1], {GDB: None, EU_STACK: [1]}, 256)
    assert missing.verdict is Verdict.UNMATCHED
    assert missing.relations[EU_STACK].kind is Kind.EQUAL


def _record(ours: list[int], gdb: list[int], eu_stack: list[int], complete: bool) -> ThreadRecord:
    def shown(pcs: list[int]) -> list[Shown]:
        return [Shown(pc, f"f{pc:x}") for pc in pcs]

    return ThreadRecord(
        program="demo",
        instant=0,
        pid=10,
        tid=11,
        name="worker",
        verdict=classify(ours, {GDB: gdb, EU_STACK: eu_stack}, 256),
        ours=[
            Shown(pc, f"f{pc:x}", "scan", pc != STALE if i else None) for i, pc in enumerate(ours)
        ],
        oracles={GDB: shown(gdb), EU_STACK: shown(eu_stack)},
        complete=complete,
        stop="end of stack",
        cut={},
    )


def test_the_table_counts_verdicts_and_the_unbacked_walks_called_complete() -> None:
    measured = ProgramResult("demo", "a demo", instants=1)
    measured.looks.append(Looked(0, 10, "demo", {}, None))
    measured.threads = [
        _record([1, 2], [1, 2], [1, 2], complete=True),
        _record([1, STALE, 2], [1, 2], [1, 2], complete=True),
        _record([1], [1, 2], [1, 2], complete=False),
    ]
    skipped = ProgramResult("other", "not here", status="skipped", note="install x")
    rows = table([measured, skipped]).splitlines()
    assert rows[0].startswith("| program | instants | processes | threads | equal to both |")
    assert rows[2] == "| demo | 1 | 1 | 3 | 1 | 0 | 0 | 0 | 1 | 1 | 0 | 0 | 0 | 1 | 1 |"
    assert rows[3].startswith("| other | skipped: install x |")
    assert measured.parting_methods() == {"scan": 1}  # the invented frame; none for the shorter


def test_an_example_shows_the_frames_where_the_walks_part() -> None:
    text = example(_record([1, STALE, 2], [1, 2], [1, 2], complete=True), "demo --busy")
    assert "**invented caller**" in text
    assert "gdb: invented caller at #1 (1 frame(s) of ours it does not have)" in text
    assert "#1   0x4000 f4000 [scan]  (no call before it)" in text
    assert "#1   0x2 f2" in text


def test_make_accuracy_installs_and_runs_every_program() -> None:
    """The Makefile's package list and default program list name every program of programs.py."""
    makefile = (ROOT / "Makefile").read_text()
    variables = dict(
        line.split(" := " if " := " in line else " ?= ", 1)
        for line in makefile.splitlines()
        if line.startswith(("ACCURACY_PACKAGES", "ACCURACY_PROGRAMS"))
    )
    assert set(PACKAGES) <= set(variables["ACCURACY_PACKAGES"].split())
    assert variables["ACCURACY_PROGRAMS"].split(",") == [program.name for program in PROGRAMS]
