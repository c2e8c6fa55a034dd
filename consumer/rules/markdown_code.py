"""An answer's prose: its Markdown code, fenced blocks and inline spans, blanked out (pure).

A marker inside code is code (``items[1]``, a JSON array in a fenced block), not a citation.
What counts as code follows CommonMark closely enough for model output:

- a fenced block opens at a line of three or more backticks or tildes (indented at most three
  spaces; a backtick fence's info string holds no backtick) and closes at a line of the same
  character, at least as long, and nothing else; an unclosed block runs to the end of the
  answer, as in CommonMark, and as a model cut off inside a block wrote it;
- an inline span opens at a run of backticks and closes at the next run of the same length
  within its paragraph; a run without one is a literal backtick.

Indented code blocks (four spaces) are not recognised: in model output such indentation is far
more often a nested list item, whose citations count. HTML ``<code>`` is prose.

Code becomes one space, so the text either side of it never joins into one token. The work is
linear in the answer's length whatever it holds: a line loop and one pass over backtick runs,
no regular expression that could backtrack across the answer.
"""

from __future__ import annotations

import re

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_BACKTICKS = re.compile(r"`+")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def prose(text: str) -> str:
    """The text with its fenced code blocks and inline code spans replaced by a space."""
    if "`" not in text and "~~~" not in text:
        return text
    return " ".join(_without_inline_code(part) for part in _outside_fences(text))


def _outside_fences(text: str) -> list[str]:
    """The stretches of text between fenced code blocks."""
    if "```" not in text and "~~~" not in text:
        return [text]
    stretches: list[str] = []
    current: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None:
            opening = _FENCE_OPEN.match(line)
            if opening is None or (opening.group(1)[0] == "`"
                                   and "`" in line[opening.end():]):
                current.append(line)
                continue
            fence = opening.group(1)
            stretches.append("\n".join(current))
            current = []
        elif _closes(line, fence):
            fence = None
    stretches.append("\n".join(current))
    return stretches


def _closes(line: str, fence: str) -> bool:
    body = line.rstrip()
    mark = body.lstrip(" ")
    return (len(body) - len(mark) <= 3 and len(mark) >= len(fence)
            and mark == fence[0] * len(mark))


def _without_inline_code(text: str) -> str:
    if "`" not in text:
        return text
    return "\n\n".join(_blank_spans(paragraph) for paragraph in _PARAGRAPH_BREAK.split(text))


def _blank_spans(paragraph: str) -> str:
    runs = [match.span() for match in _BACKTICKS.finditer(paragraph)]
    if len(runs) < 2:
        return paragraph
    # For each run, the next run of the same length: one pass from the end, so the whole
    # paragraph is walked once however many unmatched backticks it holds.
    partner: list[int | None] = [None] * len(runs)
    latest: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1] - runs[index][0]
        partner[index] = latest.get(length)
        latest[length] = index
    pieces, kept_from, index = [], 0, 0
    while index < len(runs):
        closing = partner[index]
        if closing is None:
            index += 1
            continue
        pieces += [paragraph[kept_from:runs[index][0]], " "]
        kept_from, index = runs[closing][1], closing + 1
    pieces.append(paragraph[kept_from:])
    return "".join(pieces)
