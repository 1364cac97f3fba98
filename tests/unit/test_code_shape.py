"""The shape the redesign promised, kept: no module in runner/ or tui/ over 400 lines,
no class over 300, no function over 80 (README lists any exception and why)."""

import ast
import os

from ast_cache import calls, parsed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMITS = {"module": 400, "class": 300, "function": 80}
ALLOWED: dict[str, str] = {}  # "path:name": why (also in README's "How it is built")


def sources():
    for top in ("runner", "tui"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py"):
                    yield os.path.join(dirpath, f)


def statements(tree: ast.AST):
    """Every statement in ``tree``, nested ones too (a def or class is always a statement:
    no need to walk each expression's nodes)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo.extend(getattr(node, field, ()))


def oversized() -> list[str]:
    out = []
    for path in sources():
        rel = os.path.relpath(path, ROOT)
        text = open(path, encoding="utf-8").read()
        n = text.count("\n")
        if n > LIMITS["module"] and rel not in ALLOWED:
            out.append(f"{rel}: {n} lines")
        for node in statements(parsed(path)):
            kind = "class" if isinstance(node, ast.ClassDef) else \
                "function" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if kind is None:
                continue
            length = node.end_lineno - node.lineno + 1
            if length > LIMITS[kind] and f"{rel}:{node.name}" not in ALLOWED:
                out.append(f"{rel}:{node.name}: {kind} of {length} lines")
    return out


def test_no_module_class_or_function_over_its_limit():
    assert oversized() == []


def test_the_check_finds_an_oversized_function(tmp_path, monkeypatch):
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "big.py").write_text(f"def big():\n{body}\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    assert oversized() == ["runner/big.py:big: function of 91 lines"]


# ------------------------------------------------------------------ issue 24's counts
# The App only routes: what it does is counted with every mixin it is assembled from
# (a method moved into a mixin still counts), and the counts that described the tangle
# before the second structural step are held at what that step left. Each limit is the
# measured figure, so a new method, DOM query or engine built elsewhere fails here.
APP_METHODS_MAX = 60  # measured 56 (before: 133 over 13 classes)
QUERY_ONE_MAX = 19  # `.query_one(` in tui/ (before: 113); handlers use app.dash
ENGINE_CLASSES = ("EngineProcess", "InProcessEngine", "ReplayEngine", "ServerEngine")
ENGINE_SOURCE = os.path.join("runner", "session", "source.py")


def app_methods(app_class) -> dict[str, list[str]]:
    """class name → methods (functions, static/class methods, properties) defined in each
    of ``app_class``'s own classes: the App and its mixins, not Textual's."""
    import inspect

    out = {}
    for c in app_class.__mro__:
        if c.__module__.startswith(("kvtop.tui", "tests")) or c is app_class:
            out[f"{c.__module__}.{c.__name__}"] = [
                k for k, v in vars(c).items()
                if inspect.isfunction(v) or isinstance(v, (staticmethod, classmethod, property))]
    return out


def calls_to(attr: str, top: str = "tui") -> list[str]:
    """file:line of every call ``<x>.attr(...)`` or ``attr(...)`` in ``top``'s sources."""
    out = []
    for path in sources():
        rel = os.path.relpath(path, ROOT)
        if not rel.startswith(top + os.sep):
            continue
        out.extend(f"{rel}:{line}" for line in calls(path).get(attr, ()))
    return out


def test_the_app_with_its_mixins_has_at_most_60_methods():
    from kvtop.tui.app import KvtopApp

    counts = app_methods(KvtopApp)
    total = sum(len(v) for v in counts.values())
    assert total <= APP_METHODS_MAX, {k: len(v) for k, v in counts.items()}


def test_panes_are_reached_through_the_dashboard_not_queried():
    found = calls_to("query_one")
    assert len(found) <= QUERY_ONE_MAX, found


def test_every_engine_is_built_in_one_place():
    sites = {cls: [s for s in calls_to(cls, "runner") + calls_to(cls, "tui")] for cls in ENGINE_CLASSES}
    for cls, where in sites.items():
        assert [s.rsplit(":", 1)[0] for s in where] == [ENGINE_SOURCE], (cls, where)


def test_the_counts_see_a_mixin_method_and_a_second_engine_site(tmp_path, monkeypatch):
    class Mixin:
        def a(self): ...

        @property
        def b(self): ...

    class App(Mixin):
        def c(self): ...

    Mixin.__module__ = App.__module__ = "tests.fake"
    assert sum(len(v) for v in app_methods(App).values()) == 3
    (tmp_path / "tui").mkdir()
    (tmp_path / "tui" / "x.py").write_text("e = ServerEngine(s, url)\nself.query_one(X)\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    assert calls_to("ServerEngine") == ["tui/x.py:1"] and calls_to("query_one") == ["tui/x.py:2"]


def untyped_app_parameters(root: str = ROOT) -> list[str]:
    """Every function in tui/ that takes an ``app`` parameter without a type: a collaborator
    the App composes names what it reaches (``app: KvtopApp`` under TYPE_CHECKING)."""
    out = []
    for dirpath, _dirs, files in os.walk(os.path.join(root, "tui")):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            for node in ast.walk(parsed(path)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for a in node.args.args:
                        if a.arg == "app" and a.annotation is None:
                            out.append(f"{os.path.relpath(path, root)}:{node.lineno} {node.name}")
    return out


def test_the_app_s_collaborators_are_typed():
    assert untyped_app_parameters() == []


def test_an_untyped_app_parameter_is_found(tmp_path):
    (tmp_path / "tui").mkdir()
    (tmp_path / "tui" / "x.py").write_text("class A:\n    def __init__(self, app):\n        self.app = app\n")
    assert untyped_app_parameters(str(tmp_path)) == ["tui/x.py:2 __init__"]
