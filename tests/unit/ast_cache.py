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
