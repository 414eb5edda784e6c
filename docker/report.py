"""Merges docker/run-integration's JUnit parts per platform and prints the table.

Usage: report.py RESULTS PLATFORM...  Reads RESULTS/parts/PLATFORM*.xml (the
x86_64 platform has three: the container with CAP_SYS_PTRACE, the one
without, and the host looking into a container; the VMs one each,
RESULTS/PLATFORM.xml itself), writes RESULTS/PLATFORM.xml
(one <testsuites> of all its parts) and prints ran / passed / skipped (with
the reasons) / failed and the minutes of each platform's build and run, from
RESULTS/times.tsv. Exits 1 if a platform has no report or a failure.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def suites_of(path: Path) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    return [root] if root.tag == "testsuite" else list(root.iter("testsuite"))


def merge(results: Path, platform: str) -> Path | None:
    """RESULTS/PLATFORM.xml from its parts; None when no run left a report."""
    target = results / f"{platform}.xml"
    parts = sorted((results / "parts").glob(f"{platform}-*.xml"))
    parts += [path for path in [results / "parts" / f"{platform}.xml"] if path.exists()]
    if not parts:
        return target if target.exists() else None
    merged = ET.Element("testsuites")
    for part in parts:
        for suite in suites_of(part):
            suite.set("name", f"{platform}: {part.stem}")
            merged.append(suite)
    ET.ElementTree(merged).write(target, encoding="utf-8", xml_declaration=True)
    return target


def outcome(case: ET.Element) -> tuple[str, str]:
    for kind in ("failure", "error"):
        found = case.find(kind)
        if found is not None:
            message = (found.get("message") or kind).splitlines() or [kind]
            return "failed", message[0][:160]
    skipped = case.find("skipped")
    if skipped is not None:
        return "skipped", skipped.get("message") or ""
    return "passed", ""


def minutes(times: dict[str, int], *names: str) -> str:
    seconds = sum(times.get(name, 0) for name in names)
    return f"{seconds / 60:.1f}"


def main(results: Path, platforms: list[str]) -> int:
    times: dict[str, int] = {}
    if (results / "times.tsv").exists():
        for line in (results / "times.tsv").read_text().splitlines():
            name, _, seconds = line.partition("\t")
            times[name] = times.get(name, 0) + int(seconds)
    build_of = {
        "x86_64": "image x86_64 (all)",
        "arm64": "image arm64 (all)",
        "arm64-vm": "",
        "riscv64-vm": "image riscv64-vm (all)",
    }
    rows: list[tuple[object, ...]] = []
    notes: list[str] = []
    bad = False
    for platform in platforms:
        report = merge(results, platform)
        run = minutes(times, f"run {platform}")
        build = minutes(times, build_of[platform]) if build_of[platform] else "-"
        if report is None:
            rows.append((platform, "-", "-", "-", "-", build, run))
            notes.append(f"{platform}: no report (see docker/results/)")
            bad = True
            continue
        counts: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        for suite in suites_of(report):
            for case in suite.iter("testcase"):
                kind, detail = outcome(case)
                counts[kind] += 1
                if kind == "skipped":
                    reasons[detail] += 1
                elif kind == "failed":
                    notes.append(f"{platform}: FAILED {case.get('name')}: {detail}")
        bad = bad or counts["failed"] > 0
        ran = counts["passed"] + counts["failed"]
        rows.append(
            (platform, ran, counts["passed"], counts["skipped"], counts["failed"], build, run)
        )
        notes += [f"{platform}: skipped {n}x: {reason}" for reason, n in sorted(reasons.items())]
    header = ("platform", "ran", "passed", "skipped", "failed", "build min", "run min")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    print(f"total {minutes(times, 'total')} min")
    for note in notes:
        print(note)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
