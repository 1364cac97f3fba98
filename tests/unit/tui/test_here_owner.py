"""``here`` (the model on this machine) has one owner in tui/, ``tui/turn/machine.py``:
before, ``app.here`` was written in four handlers, each followed by its own hand-pushed
``set_layout``/``set_here`` calls, and a change that forgot one left a pane on the old
figures. The Decode pane keeps the copy it was handed (``set_here``)."""

import ast
from pathlib import Path

TUI = Path(__file__).resolve().parents[3] / "tui"
OWNER = TUI / "turn" / "machine.py"
HANDED = {TUI / "panes" / "decode.py"}  # a pane's copy of what it was handed


def _writes_of_here(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign | ast.AugAssign) else []
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and el.attr == "here":
                    lines.append(node.lineno)
    return lines


def test_only_the_machine_writes_here():
    found = {str(p.relative_to(TUI)): _writes_of_here(p) for p in TUI.rglob("*.py") if p not in HANDED}
    assert {k: v for k, v in found.items() if v} == {"turn/machine.py": _writes_of_here(OWNER)}
    assert _writes_of_here(OWNER)  # the check finds writes at all


def test_the_apps_here_cannot_be_written():
    from kvtop.tui.app import KvtopApp

    assert isinstance(KvtopApp.here, property) and KvtopApp.here.fset is None
