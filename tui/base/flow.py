"""Word-wrapping that never breaks a line inside a short phrase (pure).

Textual wraps a widget's text at any space: a trial read "inside the forecast 383 ms–1.10"
above "s", "measured 0.66x of" above "it", and "each verify pass of 49" above "costs". The
panes give their lines to ``flow`` first, which breaks only where a reader would:

* never between a number and the word after it (its unit: "1.10 s", "0.66x of", "49 tok");
* never after a word that leads the next one ("of", "the", "at", "per", …, "CPU", "-t");
* never before a short word that ends a clause ("of it", "a plain step,"), nor before
  a paragraph's last word ("lower bounds").

Every line it returns fits the width, so Textual never wraps it again. A run of words so
joined that is wider than the line is broken at its spaces after all, and a word wider
than the line is cut into pieces: nothing is lost.
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from textual.content import Content

_WORD = re.compile(r"\S+")
_NUMBER_END = re.compile(r"\d[x%]?$")  # "49", "1.10", "0.66x", "15.6%" (no punctuation after it)
_LEADS = frozenset("a an the of at in to per by on vs for from with than into over under not no".split())
_ACRONYM = re.compile(r"^[A-Z]{2,4}$")  # "CPU probe", "KV cache", "GPU 0"
_FLAG = re.compile(r"^\(?--?[a-z][\w-]*$")  # "-t N", "(-ngl 99", "--ctx-size 8192"
_CLAUSE_END = re.compile(r"^[^\W\d_]{1,4}[,;:.!?)]*$")  # "it", "step,", "tok;"


def joined(a: str, b: str, b_last: bool) -> bool:
    """Whether the single space between words ``a`` and ``b`` must not break."""
    if _NUMBER_END.search(a):
        return True
    if b.startswith("("):  # an aside may start a line: "no NVIDIA GPU" above "(NVML … not found)"
        return False
    if a.lower() in _LEADS or _ACRONYM.match(a) or _FLAG.match(a):
        return True
    if b_last and len(b) <= 8:  # no word alone on a paragraph's last line ("lower" above "bounds")
        return True
    return bool(_CLAUSE_END.match(b)) and (b_last or not b[-1].isalnum())


def units(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of words that stays on one line: words apart by one space
    that ``joined`` keeps together (two spaces or more always part: they separate fields)."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    out: list[tuple[int, int]] = []
    for k, (s, e) in enumerate(words):
        if out and s - out[-1][1] == 1 and joined(text[words[k - 1][0]:words[k - 1][1]], text[s:e],
                                                    k == len(words) - 1):
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _pieces(text: str, start: int, end: int, width: int) -> list[tuple[int, int]]:
    """A unit wider than ``width`` as spans that fit: broken at its spaces, a word wider
    than the line cut."""
    out: list[tuple[int, int]] = []
    for m in _WORD.finditer(text, start, end):
        s, e = m.start(), m.end()
        if out and cell_len(text[out[-1][0]:e]) <= width:
            out[-1] = (out[-1][0], e)
            continue
        while cell_len(text[s:e]) > width:  # one word wider than the line: cut
            cut = s + 1
            while cut < e and cell_len(text[s:cut + 1]) <= width:
                cut += 1
            out.append((s, cut))
            s = cut
        out.append((s, e))
    return out


def spans(text: str, width: int) -> list[tuple[int, int]]:
    """(start, end) of each line of one paragraph (no newline) at ``width`` cells."""
    if width <= 0 or cell_len(text) <= width:
        return [(0, len(text))]
    lines: list[tuple[int, int]] = []
    for s, e in units(text):
        for ps, pe in ([(s, e)] if cell_len(text[s:e]) <= width else _pieces(text, s, e, width)):
            if lines and cell_len(text[lines[-1][0]:pe]) <= width:
                lines[-1] = (lines[-1][0], pe)
            else:
                lines.append((ps, pe))
    if lines and cell_len(text[:lines[0][1]]) <= width:
        lines[0] = (0, lines[0][1])  # a line's indent stays
    return lines or [(0, 0)]


def flow(content: Content | str, width: int) -> list[Content]:
    """``content`` as lines of at most ``width`` cells, broken only between phrases
    (see the module's docstring); each paragraph (``\\n``) starts a line. No width yet
    (0, -1): its paragraphs as they are."""
    content = content if isinstance(content, Content) else Content(content)
    out: list[Content] = []
    for para in content.split("\n", allow_blank=True) if "\n" in content.plain else [content]:
        if width <= 0 or para.cell_length <= width:
            out.append(para)
        else:
            out += [para[s:e] for s, e in spans(para.plain, width)]
    return out


def flowed_lines(content: Content | str, width: int) -> int:
    """How many lines ``flow`` makes of ``content`` at ``width`` (-1: no width)."""
    if width <= 0:
        return -1
    plain = content.plain if isinstance(content, Content) else content
    return sum(len(spans(p, width)) for p in plain.split("\n"))
