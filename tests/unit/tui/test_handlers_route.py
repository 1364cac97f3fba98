"""The engine messages' handlers only route (issue 24): no handler finds a pane with a
query of the DOM (they reach ``app.dash``'s typed references), and what a turn, a new
chat and the dashboard's pages do lives in composed objects, not in the App's mixins."""

import ast
import inspect
import pathlib

from kvtop.tui.app import KvtopApp
from kvtop.tui.events.routing import EngineRouting

TUI = pathlib.Path(__file__).resolve().parents[3] / "tui"
ROUTED = ("events/routing.py", "turn/turn_view.py", "turn/chat_undo.py", "events/bridge.py")


def test_no_query_of_the_dom_in_the_handlers_and_what_they_route_to():
    found = []
    for name in ROUTED:
        tree = ast.parse((TUI / name).read_text(encoding="utf-8"))
        found += [f"{name}:{n.lineno}" for n in ast.walk(tree)  # a pane may look among its own children
                  if isinstance(n, ast.Attribute) and (n.attr == "query_one" or n.attr == "query" and
                                                        ast.unparse(n.value) in ("self", "app", "self.app"))]
    assert found == []


def test_the_routing_mixin_holds_handlers_and_key_actions_only():
    methods = [k for k, v in vars(EngineRouting).items() if inspect.isfunction(v)]
    assert methods and all(k.startswith(("on_", "action_")) for k in methods), methods
    assert len(methods) <= 22
    names = {c.__name__ for c in KvtopApp.__mro__}
    assert not names & {"DashboardLayout", "ChatUndo"}  # composed: app.dash, app.chats
