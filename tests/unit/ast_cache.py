"""One parse per source file per test process: the shape, layering and private-API checks
walk every module of runner/ and tui/ (and Textual's), several times each; a file that
changed since (its mtime or size) is parsed again. The trees are only read."""

import ast
import functools
import os


@functools.cache
def _parse(path: str, _mtime_ns: int, _size: int) -> ast.Module:
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


def parsed(path: str) -> ast.Module:
    st = os.stat(path)
    return _parse(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _calls(path: str, _mtime_ns: int, _size: int) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for node in ast.walk(_parse(path, _mtime_ns, _size)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name is not None:
                out.setdefault(name, []).append(node.lineno)
    return {k: tuple(v) for k, v in out.items()}


def calls(path: str) -> dict[str, tuple[int, ...]]:
    """name → the lines of every call ``<x>.name(...)`` or ``name(...)`` in the file, in
    the order ``ast.walk`` meets them: one walk per file, however many names are asked for."""
    st = os.stat(path)
    return _calls(path, st.st_mtime_ns, st.st_size)
