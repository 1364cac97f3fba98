"""Textual's private API, kept in tui/base/textual_private.py: each wrapper works on the
Textual installed (an upgrade that breaks one fails here, by name), and no other
module in tui/ reaches past Textual's public API."""

import ast
import functools
import io
import os

from ast_cache import parsed
from rich.console import Console
from textual.app import App
from textual.containers import Vertical
from textual.geometry import Size
from textual.widgets import Static

from kvtop.tui.base import textual_private as tp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class _Box(App):
    def compose(self):
        with Vertical(id="outer"):
            yield Static("hello from the box", id="text")


async def test_the_whole_dashboard_shot_wrappers_lay_out_and_render_at_a_size_asked_for():
    app = _Box()
    async with app.run_test(size=(40, 10)) as pilot:
        text = app.query_one("#text")
        assert text.size.width == 40
        with app.batch_update():
            for widget in app.screen.walk_children(with_self=True):
                tp.forget_arrangement(widget)
            tp.reflow_now(app.screen, Size(70, 12))
            assert text.size.width == 70  # told its new size at once, no Resize waited for
            console = Console(width=70, height=12, file=io.StringIO(), force_terminal=True,
                              color_system="truecolor", record=True, legacy_windows=False)
            console.print(tp.whole_frame(app))
            assert "hello from the box" in console.export_text()
            tp.reflow_now(app.screen, Size(40, 10))
        tp.refresh_layout(app.screen)
        await pilot.pause()
        assert text.size.width == 40


def test_the_styles_cache_memo_is_still_there_to_clear():
    """False would mean this Textual has no ``StylesCache.get_inner_outer`` memo: the leak
    it held is gone or has moved (check bench/soak.py before dropping the wrapper)."""
    assert tp.release_removed_widget_caches() is True


async def test_drop_notices_takes_down_the_notices_named_and_leaves_the_others():
    app = _Box()
    async with app.run_test(size=(40, 10), notifications=True) as pilot:
        app.notify("New chat.")
        app.notify("an error", severity="error")
        await pilot.pause()
        tp.drop_notices(app, {"New chat."})
        await pilot.pause()
        assert [n.message for n in app._notifications] == ["an error"]


@functools.lru_cache(maxsize=1)
def _textual_private_names() -> frozenset[str]:
    """The underscore names Textual defines anywhere (methods, attributes its classes set
    on themselves): kvtop's code may not reach them."""
    import textual

    names = set()
    for dirpath, _dirs, files in os.walk(os.path.dirname(textual.__file__)):
        for name in files:
            if name.endswith(".py"):
                tree = parsed(os.path.join(dirpath, name))
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(node.name)
                    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                        names.add(node.attr)
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


def private_uses(root: str = ROOT) -> list[str]:
    textual_names = _textual_private_names()
    files = {}
    for dirpath, _dirs, names in os.walk(os.path.join(root, "tui")):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                files[os.path.relpath(path, root)] = parsed(path)
    # kvtop's own underscore attributes (assigned or defined somewhere in tui/) are its own
    own = set()
    for tree in files.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
    out = []
    for rel, tree in sorted(files.items()):
        if rel == os.path.join("tui", "base", "textual_private.py"):
            continue
        # modules other than Textual's (``os._exit``) are not Textual objects
        other_modules = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                         for a in node.names if not a.name.startswith("textual")}
        for node in ast.walk(tree):
            module = None
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module
            elif isinstance(node, ast.Import):
                module = next((a.name for a in node.names if a.name.startswith("textual")), None)
            if module and module.startswith("textual") and any(p.startswith("_") for p in module.split(".")):
                out.append(f"{rel}:{node.lineno}: imports {module}")
            if (isinstance(node, ast.Attribute) and node.attr in textual_names and node.attr not in own
                    and not (isinstance(node.value, ast.Name) and node.value.id in other_modules)):
                out.append(f"{rel}:{node.lineno}: .{node.attr}")
    return out


def test_no_module_but_textual_private_uses_textual_private_api():
    assert private_uses() == []


def test_the_check_finds_a_private_import_and_a_private_attribute(tmp_path):
    (tmp_path / "tui").mkdir()
    (tmp_path / "tui" / "shot.py").write_text(
        "from textual._styles_cache import StylesCache\n\n\ndef f(screen):\n    return screen._compositor\n")
    assert private_uses(str(tmp_path)) == ["tui/shot.py:1: imports textual._styles_cache",
                                           "tui/shot.py:5: ._compositor"]
