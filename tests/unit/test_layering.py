"""One-way layering, kept: every import in runner/ and tui/ (module level or inside a
function) runs down the layer order below or stays in its layer, and no modules import
each other in a circle (docs/architecture.md draws the same picture).

A module's layer is the one naming the longest prefix of its dotted name; a new module
falls in its folder's layer (a new module at tui/'s top: the app's layer).
"""

import ast
import os

from ast_cache import parsed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# lowest first; an import may point at its own layer or any layer before it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # plain data and text that everything uses: no llama.cpp, no files of kvtop's own.
    # redact.py imports nothing of runner: its secret scrubbing is what
    # sanitize's clean_line and every writer pass text through, so it sits here.
    ("base", ("kvtop", "kvtop.runner", "kvtop.runner.units", "kvtop.runner.pacing", "kvtop.runner.sanitize", "kvtop.runner.cli_types",
              "kvtop.runner.events", "kvtop.runner.llama_buffers", "kvtop.runner.demo", "kvtop.runner.redact")),
    # pure decisions from sizes (which turns a prompt keeps): no llama.cpp
    # and KL-divergence arithmetic (numpy only), which the engine's live measurement uses
    ("policy", ("kvtop.runner.policy", "kvtop.runner.physics.kld")),
    ("model", ("kvtop.runner.model",)),
    ("settings", ("kvtop.runner.settings",)),
    ("engine", ("kvtop.runner.engine",)),
    ("process", ("kvtop.runner.process",)),
    ("system", ("kvtop.runner.system",)),
    ("physics", ("kvtop.runner.physics",)),
    ("calibration", ("kvtop.runner.calibration",)),
    ("records", ("kvtop.runner.records",)),
    ("server/session", ("kvtop.runner.server", "kvtop.runner.session")),
    ("commands", ("kvtop.runner.commands",)),
    # tui/: above all of runner/; each layer is folders
    ("tui base", ("kvtop.tui.base",)),
    ("panes", ("kvtop.tui.panes",)),
    # the App (tui/app.py, dashboard.py, looks.py) and its features: events/, turn/, server/, sharing/
    ("app", ("kvtop.tui",)),
    ("entry", ("kvtop.tui.start", "kvtop.__main__")),
]


def module_files(root: str = None) -> dict[str, str]:
    root = root or ROOT
    out = {}
    for top in ("runner", "tui"):
        for dirpath, _dirs, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    name = "kvtop." + os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    # tui/kvtop_package/ is installed as the kvtop package itself
                    name = name.replace("kvtop.tui.kvtop_package", "kvtop", 1)
                    out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def _resolve(name: str, modules) -> str | None:
    """The project module ``name`` is, or is inside of (``runner.events.Loaded`` → ``runner.events``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_only(tree: ast.AST) -> set[int]:
    """The import nodes inside ``if TYPE_CHECKING:`` (annotations only: never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph(root: str = None, type_only: bool = True) -> dict[str, dict[str, int]]:
    """module → {imported project module: line of the first such import}. ``type_only``:
    also the imports under ``if TYPE_CHECKING:`` (a type may not point up the layers, but
    a collaborator typed with the App that holds it is no circle: nothing runs it)."""
    modules = module_files(root)
    graph: dict[str, dict[str, int]] = {}
    for mod, path in modules.items():
        package = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
        edges: dict[str, int] = {}
        tree = parsed(path)
        skip = set() if type_only else _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                # ``from runner import events``: the name may be a module itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                target = _resolve(t, modules)
                if target and target != mod:
                    edges.setdefault(target, node.lineno)
        graph[mod] = edges
    return graph


def layer_of(mod: str) -> int:
    best, rank = -1, None
    for i, (_name, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    if rank is None:
        raise AssertionError(f"{mod} is in no layer of tests/unit/test_layering.py")
    return rank


def back_arrows(graph) -> list[str]:
    out = []
    for mod, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            if layer_of(target) > layer_of(mod):
                out.append(f"{mod} ({LAYERS[layer_of(mod)][0]}) imports {target} "
                           f"({LAYERS[layer_of(target)][0]}) at line {line}: runs back up")
    return out


def cycles(graph) -> list[list[str]]:
    """Every set of modules that import each other in a circle (Tarjan's strongly
    connected components, iteratively), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def test_no_import_runs_back_up_the_layers():
    assert back_arrows(import_graph()) == []


def test_no_modules_import_each_other_in_a_circle():
    assert [" <-> ".join(c) for c in cycles(import_graph(type_only=False))] == []


def _write(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_find_a_back_arrow_and_a_circle(tmp_path):
    _write(tmp_path, {
        "runner/__init__.py": "",
        "runner/events.py": "def f():\n    from kvtop.runner.engine.llama_log import X\n",  # lazy: still an arrow
        "runner/engine/__init__.py": "",
        "runner/engine/llama_log.py": "from kvtop.runner import events\n",
        "tui/__init__.py": "",
        "tui/start/launch.py": "from .launch_server import y\n",
        "tui/start/launch_server.py": "from . import launch\n",
    })
    graph = import_graph(str(tmp_path))
    assert back_arrows(graph) == [
        "kvtop.runner.events (base) imports kvtop.runner.engine.llama_log (engine) at line 2: runs back up"]
    assert cycles(graph) == [["kvtop.runner.engine.llama_log", "kvtop.runner.events"], ["kvtop.tui.start.launch", "kvtop.tui.start.launch_server"]]
