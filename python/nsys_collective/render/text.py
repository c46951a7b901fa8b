"""Text for a fixed-width console: prose wrapped between words with each figure kept beside its unit,
and names (kernels, hosts, jobs) broken only between their parts, never inside a word."""

from __future__ import annotations

import re

# The space between a figure and its unit ('0 ms', '7.44 ms'): never a line break there.
_FIGURE_UNIT = re.compile(r"(?<=\d) (?=(?:ns|µs|us|ms|s|MB|GB|GB/s)\b)")
# The parts of a name a line may end between: a host's labels ('ault43', '.cscs'), a job's or a
# kernel's words ('fs24-', 'ring-', 'sm90_', 'xmma_').
_PARTS = re.compile(r"\.?[^.\-_/ ]+[\-_/ ]*|[.\-_/ ]+")


def break_name(name: str, width: int) -> str:
    """A name on lines of at most `width` characters (a part longer than that gets a line of its
    own), broken only between its parts, as evenly as that many lines allow ('ault43' /
    '.cscs.ch', not 'ault43.cscs' / '.ch')."""
    if len(name) <= width or width < 1:
        return name
    parts = [p for p in _PARTS.findall(name.replace("\n", " ")) if p]

    def lines(w: int) -> list[str]:
        out: list[str] = []
        for part in parts:
            if out and len(out[-1]) + len(part.rstrip()) <= w:
                out[-1] += part
            else:
                out.append(part)
        return [line.rstrip() for line in out]

    fewest = len(lines(width))
    while width > 1 and len(lines(width - 1)) == fewest:
        width -= 1
    return "\n".join(lines(width))


def longest_part(name: str) -> int:
    """The width below which break_name would have to cut a word."""
    return max((len(p.rstrip()) for p in _PARTS.findall(name)), default=0)


def wrap(text: str, width: int) -> str:
    """Prose wrapped between words to `width` columns, never between a figure and its unit; a word
    longer than a line (a kernel name) is broken between its parts."""
    lines: list[str] = []
    line = ""
    for word in _FIGURE_UNIT.sub("\0", text).split():
        pieces = break_name(word, width).split("\n") if len(word) > width else [word]
        for k, piece in enumerate(pieces):
            joiner = "" if k or not line else " "
            if line and len(line) + len(joiner) + len(piece) <= width:
                line += joiner + piece
            else:
                if line:
                    lines.append(line)
                line = piece
    if line:
        lines.append(line)
    return "\n".join(lines).replace("\0", " ")
