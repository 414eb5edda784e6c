"""``--speedscope FILE``: a profile in speedscope's JSON file format.

The format is speedscope's own (``https://www.speedscope.app/file-format-schema.json``,
published in the ``speedscope`` npm package; tests/data/speedscope holds the
copy the tests validate against).  One "sampled" profile per entry of the
profile — per thread name, or per thread with ``--per-thread`` — the busiest
first (the one speedscope opens), all sharing one table of frames: one frame
per frame name, its function, and its file and line when known (``--lines``,
``--python``).  The profile counts stacks, not a timeline: each distinct
stack is one sample weighted by how many samples it was seen in (unit
``none``), so speedscope's "Left Heavy" and "Sandwich" views are exact and
its "Time Order" view shows the stacks in sorted order, not in time.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from liveunwind.backtrace.profile import Profile, ThreadProfile

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"


class _Frames:
    """The shared frames: each frame name once, by index."""

    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        self.index: dict[str, int] = {}
        self.frames: list[dict[str, Any]] = []

    def __call__(self, name: str) -> int:
        found = self.index.get(name)
        if found is not None:
            return found
        site = self._profile.sites.get(name)  # none for OVERFLOW's name
        frame: dict[str, Any] = {"name": site.function if site is not None else name}
        if site is not None and site.file:
            frame["file"] = site.file
            if site.line:
                frame["line"] = site.line
        self.frames.append(frame)
        number = self.index[name] = len(self.frames) - 1
        return number


def _sampled(thread: ThreadProfile, frames: _Frames) -> dict[str, Any]:
    stacks = sorted(thread.stacks.items())
    count = "" if thread.thread_count <= 1 else f" ({thread.thread_count} threads)"
    return {
        "type": "sampled",
        "name": f"{thread.label}{count}",
        "unit": "none",
        "startValue": 0,
        "endValue": sum(weight for _, weight in stacks),
        "samples": [[frames(name) for name in stack] for stack, _ in stacks],
        "weights": [weight for _, weight in stacks],
    }


def to_document(profile: Profile, *, title: str, exporter: str) -> dict[str, Any]:
    """The speedscope document of ``profile``."""
    frames = _Frames(profile)
    profiles = [_sampled(thread, frames) for thread in profile.by_cpu()]
    return {
        "$schema": SCHEMA_URL,
        "name": title,
        "exporter": exporter,
        "activeProfileIndex": 0,
        "shared": {"frames": frames.frames},
        "profiles": profiles,
    }


def render(profile: Profile, *, title: str, exporter: str) -> str:
    """The file ``--speedscope`` writes."""
    import json

    document = to_document(profile, title=title, exporter=exporter)
    return json.dumps(document, separators=(",", ":")) + "\n"
