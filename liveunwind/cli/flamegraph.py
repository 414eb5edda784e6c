"""A flame graph as one self-contained, interactive SVG file.

Each box is a function; its width is the share of samples in which it was
on the stack, and the boxes above it are what it called.  The file needs
nothing at view time — no network, no fonts, no library: the script inside
it gives hover details (name, samples, percent; every box also has a
``<title>``, the browser's own tooltip), click to zoom (click the bottom
box, or press Escape, to zoom out), and search (the Search button, Ctrl-F
or ``/``: a regular expression; matching boxes turn purple and the share of
samples they cover is shown).  ``?s=REGEX`` in the address searches on
load, ``?zoom=NAME`` zooms into the widest box named NAME.

Boxes narrower than a tenth of a pixel at full width are left out (their
samples still count in their parent's width), which bounds the file size
the way flamegraph.pl does.  Names come from the target — symbol tables of
files we did not write — so every text is escaped, and characters XML does
not allow are replaced.
"""

from __future__ import annotations

import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

WIDTH = 1200
FRAME_HEIGHT = 16
FONT_SIZE = 12
#: The width of one character of the monospace font, for fitting names into boxes.
CHAR_WIDTH = FONT_SIZE * 0.6
PAD = 10
TOP = 60
BOTTOM = 40
#: Boxes narrower than this (pixels at full width) are not drawn.
MIN_WIDTH = 0.1
#: At most this many boxes are drawn, the widest first.
MAX_BOXES = 100_000

_XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})
#: Characters XML 1.0 does not allow (controls, lone surrogates from undecodable
#: bytes, U+FFFE/U+FFFF), each mapped to U+FFFD.
_XML_FORBIDDEN = dict.fromkeys(
    [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0xD800, 0xE000), 0xFFFE, 0xFFFF],
    "\ufffd",
)


class _Node:
    """A box: a function at one place in the call tree, and the samples under it."""

    __slots__ = ("children", "name", "samples")

    def __init__(self, name: str) -> None:
        self.name = name
        self.samples = 0
        self.children: dict[str, _Node] = {}


def render(
    stacks: Mapping[tuple[str, ...], int],
    *,
    title: str,
    subtitle: str = "",
    root: str = "all",
    threads: bool = False,
) -> str:
    """The SVG document of ``stacks`` (outermost name first → samples).

    ``threads``: the first name of each stack is its thread (one tower per
    thread), drawn in its own colour.
    """
    tree = _tree(stacks, root)
    boxes = _layout(tree)
    depth = max((box[3] for box in boxes), default=0) + 1
    height = TOP + depth * FRAME_HEIGHT + BOTTOM
    parts = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n',
        f'<svg version="1.1" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg" '
        f'data-total="{tree.samples}" data-depth="{depth}">\n',
        f"<style><![CDATA[{_STYLE}]]></style>\n",
        f'<rect class="background" x="0" y="0" width="{WIDTH}" height="{height}"/>\n',
        f'<text id="title" x="{WIDTH / 2}" y="24">{_text(title)}</text>\n',
        f'<text id="subtitle" x="{WIDTH / 2}" y="42">{_text(subtitle)}</text>\n',
        f'<text id="unzoom" class="button" x="{PAD}" y="24" visibility="hidden">'
        "Reset zoom</text>\n",
        f'<text id="search" class="button" x="{WIDTH - PAD}" y="24">Search</text>\n',
        f'<text id="details" x="{PAD}" y="{height - 14}"> </text>\n',
        f'<text id="matched" x="{WIDTH - PAD}" y="{height - 14}"> </text>\n',
        '<g id="frames">\n',
    ]
    total = tree.samples or 1
    scale = (WIDTH - 2 * PAD) / total
    for name, start, samples, level in boxes:
        x = PAD + start * scale
        width = samples * scale
        y = height - BOTTOM - (level + 1) * FRAME_HEIGHT
        percent = 100.0 * samples / total
        noun = "sample" if samples == 1 else "samples"
        parts.append(
            f'<g data-s="{start}" data-n="{samples}" data-d="{level}">'
            f"<title>{_text(name)} ({samples} {noun}, {percent:.2f}%)</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{FRAME_HEIGHT - 1}" '
            f'rx="2" fill="{_colour(name, level, threads)}"/>'
            f'<text x="{x + 3:.2f}" y="{y + FRAME_HEIGHT - 4}">{_text(_fit(name, width))}</text>'
            "</g>\n"
        )
    parts.append("</g>\n")
    parts.append(f"<script><![CDATA[{_SCRIPT}]]></script>\n</svg>\n")
    return "".join(parts)


def _tree(stacks: Mapping[tuple[str, ...], int], root: str) -> _Node:
    top = _Node(root)
    for stack, count in stacks.items():
        if count <= 0:
            continue
        node = top
        node.samples += count
        for name in stack:
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = _Node(name)
            child.samples += count
            node = child
    return top


def _layout(tree: _Node) -> list[tuple[str, int, int, int]]:
    """(name, first sample, samples, depth) of every box wide enough to draw, parents first.

    Children sit left to right by name, so the same profile always draws the
    same picture.  Iterative: a stack is as deep as the target's, not Python's.
    """
    minimum = MIN_WIDTH * (tree.samples or 1) / (WIDTH - 2 * PAD)
    boxes: list[tuple[str, int, int, int]] = []
    pending = [(tree, 0, 0)]
    while pending and len(boxes) < MAX_BOXES:
        node, start, level = pending.pop()
        boxes.append((node.name, start, node.samples, level))
        offset = start
        placed = []
        for name in sorted(node.children):
            child = node.children[name]
            if child.samples >= minimum:
                placed.append((child, offset, level + 1))
            offset += child.samples
        pending.extend(reversed(placed))
    return boxes


def _fit(name: str, width: float) -> str:
    """As much of ``name`` as fits in a box ``width`` pixels wide (the script does the same)."""
    room = int((width - 6) / CHAR_WIDTH)
    if room < 3:
        return ""
    return name if len(name) <= room else name[: room - 2] + ".."


def _text(value: str) -> str:
    return value.translate(_XML_FORBIDDEN).translate(_XML_ESCAPES)


def _colour(name: str, level: int, threads: bool) -> str:
    """Warm colours from a hash of the name (stable between runs).

    The root is grey, threads are blue, frames without a name blue-grey.
    """
    if level == 0:
        return "rgb(200,200,200)"
    if threads and level == 1:
        return "rgb(150,190,235)"
    if name.startswith(("0x", "??")) or "+0x" in name:
        return "rgb(170,180,200)"
    hashed = zlib.crc32(name.encode("utf-8", "replace"))
    red = 205 + hashed % 51
    green = (hashed >> 8) % 231
    blue = (hashed >> 16) % 56
    return f"rgb({red},{green},{blue})"


_STYLE = """
text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }
#title { text-anchor: middle; font-size: 17px; }
#subtitle { text-anchor: middle; fill: rgb(90,90,90); }
#search, #matched { text-anchor: end; }
.background { fill: rgb(245,245,238); }
.button { cursor: pointer; fill: rgb(60,60,160); }
.button:hover { text-decoration: underline; }
#frames > g { cursor: pointer; }
#frames > g:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }
#frames > g.hidden { display: none; }
#frames > g.parent { opacity: 0.5; }
#frames > g.match rect { fill: rgb(230,0,230); }
"""

_SCRIPT = """
(function () {
  "use strict";
  var svg = document.documentElement;
  var total = Number(svg.getAttribute("data-total")) || 1;
  var width = Number(svg.getAttribute("width"));
  var pad = 10, charWidth = 7.2;
  var frames = Array.prototype.slice.call(document.querySelectorAll("#frames > g"));
  var boxes = frames.map(function (g) {
    var title = g.querySelector("title").textContent;
    return {
      g: g, rect: g.querySelector("rect"), text: g.querySelector("text"),
      name: title.slice(0, title.lastIndexOf(" (")), title: title,
      s: Number(g.getAttribute("data-s")), n: Number(g.getAttribute("data-n")),
      d: Number(g.getAttribute("data-d"))
    };
  });
  var details = document.getElementById("details");
  var matched = document.getElementById("matched");
  var unzoom = document.getElementById("unzoom");
  var searchButton = document.getElementById("search");

  function fit(name, w) {
    var room = Math.floor((w - 6) / charWidth);
    if (room < 3) return "";
    return name.length <= room ? name : name.slice(0, room - 2) + "..";
  }

  function place(box, x, w) {
    box.rect.setAttribute("x", x.toFixed(2));
    box.rect.setAttribute("width", w.toFixed(2));
    box.text.setAttribute("x", (x + 3).toFixed(2));
    box.text.textContent = fit(box.name, w);
  }

  function zoom(target) {
    var scale = (width - 2 * pad) / target.n;
    boxes.forEach(function (box) {
      var inside = box.s >= target.s && box.s + box.n <= target.s + target.n;
      var below = box.d < target.d && box.s <= target.s && box.s + box.n >= target.s + target.n;
      box.g.classList.remove("hidden", "parent");
      if (below) {
        box.g.classList.add("parent");
        place(box, pad, width - 2 * pad);
      } else if (inside && box.d >= target.d) {
        place(box, pad + (box.s - target.s) * scale, box.n * scale);
      } else {
        box.g.classList.add("hidden");
      }
    });
    unzoom.setAttribute("visibility", target.d === 0 ? "hidden" : "visible");
  }

  function resetZoom() { zoom(boxes[0]); }

  function search(pattern) {
    var re;
    try {
      re = new RegExp(pattern);
    } catch (error) {
      matched.textContent = "Bad expression";
      return;
    }
    var spans = [];
    boxes.forEach(function (box) {
      var hit = box.d > 0 && re.test(box.name);
      box.g.classList.toggle("match", hit);
      if (hit) spans.push([box.s, box.s + box.n]);
    });
    spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
    var covered = 0, end = -1;
    spans.forEach(function (span) {
      if (span[0] >= end) { covered += span[1] - span[0]; end = span[1]; }
      else if (span[1] > end) { covered += span[1] - end; end = span[1]; }
    });
    matched.textContent = "Matched: " + (100 * covered / total).toFixed(2) + "% (" + pattern + ")";
    searchButton.textContent = "Reset search";
  }

  function resetSearch() {
    boxes.forEach(function (box) { box.g.classList.remove("match"); });
    matched.textContent = " ";
    searchButton.textContent = "Search";
  }

  function askSearch() {
    var pattern = window.prompt("Search for (a regular expression):", "");
    if (pattern) search(pattern);
  }

  boxes.forEach(function (box) {
    box.g.addEventListener("click", function () { zoom(box); });
    box.g.addEventListener("mouseover", function () { details.textContent = box.title; });
    box.g.addEventListener("mouseout", function () { details.textContent = " "; });
  });
  unzoom.addEventListener("click", resetZoom);
  searchButton.addEventListener("click", function () {
    if (searchButton.textContent === "Search") askSearch(); else resetSearch();
  });
  window.addEventListener("keydown", function (event) {
    if ((event.ctrlKey && event.key === "f") || event.key === "/") {
      event.preventDefault();
      askSearch();
    } else if (event.key === "Escape") {
      resetZoom();
      resetSearch();
    }
  });

  var query = new URLSearchParams(window.location.search);
  if (query.get("zoom")) {
    var widest = null;
    boxes.forEach(function (box) {
      if (box.name === query.get("zoom") && (!widest || box.n > widest.n)) widest = box;
    });
    if (widest) zoom(widest);
  }
  if (query.get("s")) search(query.get("s"));
})();
"""
