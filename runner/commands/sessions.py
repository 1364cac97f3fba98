"""``kvtop sessions``: the saved chats, newest first, to pick one for ``kvtop --resume FILE``.

One line per transcript: its date, the model, the turns ``--resume`` would restore, the
first words of the first prompt ("(redacted)" when the session holds no text to show) and
the file's name. Headless: no Textual. Exit 0 (also when there is none), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys

from kvtop.runner.records.paths import default_paths
from kvtop.runner.records.sessions import SessionInfo, list_sessions, when
from kvtop.runner.sanitize import clean_line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvtop sessions", allow_abbrev=False,
                                description="List the saved chat sessions, newest first; "
                                            "reopen one with 'kvtop --resume FILE' (or the newest with turns: "
                                            "'kvtop --resume').")
    p.add_argument("--all", action="store_true", help="also list sessions without turns (a launch that quit "
                   "before its first turn, or a chat cleared by a new chat)")
    p.add_argument("--full-path", action="store_true", help="print each file's full path instead of its name")
    return p


def row(s: SessionInfo, full_path: bool = False) -> str:
    turns = f"{s.turns} turn{'' if s.turns == 1 else 's'}"
    name = clean_line(s.path if full_path else s.name, 400)
    return f"{when(s.started)}  {s.model}  {turns}  {s.first_words()}  {name}"


def sessions_main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    folder = default_paths().sessions_dir
    found = list_sessions(folder, with_turns=not a.all)
    if not found:
        some = "" if a.all else " with turns"
        print(f"kvtop sessions: no session{some} in {clean_line(folder, 400)}", file=sys.stderr)
        return 0
    print(f"sessions in {clean_line(folder, 400)}, newest first ('kvtop --resume FILE' reopens one):")
    for s in found:
        print("  " + row(s, a.full_path))
    return 0
