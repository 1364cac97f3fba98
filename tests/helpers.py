"""Shared test helpers: build the real app, wait for conditions instead of sleeping."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

from kvtop.runner.records.paths import Paths
from kvtop.runner.system.hardware import HardwareProfile

# A fixed hardware profile: tests must not depend on what the CPU probe measures today.
FIXED_HW = HardwareProfile(bandwidth_gbs=30.0, tflops=0.25, source="test profile",
                           memory_free=16 * 2**30, memory_total=24 * 2**30, cpu_name="Test CPU 9000")


# The CPU probe every unit test sees (tests/unit/conftest.py): no test measures this CPU.
FIXED_PROBE = dict(bandwidth_gbs=30.0, tflops=0.25, threads=2, seconds=0.0, measured_at=0.0,
                   machine="test-machine", busy=0.0, loadavg=0.0, f32_tflops=0.25,
                   kernel_tflops={"q4_1": 0.25}, batch_tflops={"1": 0.1, "512": 0.25})


class UnitTestRule(AssertionError):
    """A unit test started a process, loaded a model or ran the probe (tests/unit/conftest.py)."""


def test_paths(root) -> Paths:
    return Paths(str(root / "config"), str(root / "data"), str(root / "cache"))


def make_app(settings, engine_factory, root, **kw):
    """The real app; ``kw`` are ``AppOptions`` fields (test seams), hardware fixed."""
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base.options import AppOptions

    kw.setdefault("hardware", FIXED_HW)
    kw.setdefault("argv", ["kvtop", settings.model])
    if "resume_messages" in kw:
        from kvtop.runner.process.commands import as_messages

        kw["resume_messages"] = as_messages(kw["resume_messages"])
    return KvtopApp(settings, engine_factory, test_paths(root), AppOptions(**kw))


def scripted_app(tmp_path, model_path, pieces):
    """The real app on a scripted engine: SmolLM2's facts, one turn that writes ``pieces``."""
    from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

    from kvtop.runner.settings import Settings

    settings = Settings(model_path, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(model_path)
    turns = [scripted_turn(1, 1000.0, 30, 0, pieces)]
    return make_app(settings, lambda s: ScriptedEngine(s, loaded, turns), root=tmp_path,
                    live_system=False, write_transcript=False)


async def one_turn(pilot, text: str) -> None:
    """Wait for the model, send ``text``, wait for the turn to end."""
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    await send(pilot, text)
    await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")


def cores() -> int:
    """The cores this test may use: one per pytest-xdist worker (tests/conftest.py pins
    each worker), so a real engine or llama-server started with this many threads never
    has two threads waiting for one core."""
    return len(os.sched_getaffinity(0))


# A wait is a condition with a generous ceiling, never a timing assert: on a busy 2-core
# machine a pilot step that takes 0.1 s quiet can take seconds. A test's own ``timeout`` is
# what it expects on a quiet machine; no wait gives up before MIN_WAIT_S.
MIN_WAIT_S = 60.0


async def wait_until(pilot, predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + max(timeout, MIN_WAIT_S)
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)
    await pilot.pause()


async def send(pilot, text: str) -> None:
    """Type a message into the prompt and press Enter, as a user would."""
    pilot.app.query_one("#prompt").value = text
    await pilot.press("enter")


def screen_text(app) -> str:
    """What the terminal shows, line by line, as plain text (from the SVG screenshot,
    Textual's public export: no private compositor internals)."""
    import html
    import re

    svg = app.export_screenshot()
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(y), []).append((float(x), html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " ")))
    return "\n".join("".join(t for _x, t in sorted(parts)) for _y, parts in sorted(rows.items()))


def damaged(path, tmp_path, line: int, keys: str, value: str) -> str:
    """The trace at ``path`` with the field ``keys`` (dotted) of line ``line`` set to
    ``value``, written as raw JSON text (so NaN, 1e999 and 400-digit integers survive)."""
    lines = open(path, encoding="utf-8").read().splitlines()
    obj = json.loads(lines[line - 1])
    d = obj
    *parents, last = keys.split(".")
    for k in parents:
        d = d[int(k)] if isinstance(d, list) else d[k]
    d[last] = "@@VALUE@@"
    lines[line - 1] = json.dumps(obj).replace('"@@VALUE@@"', value)
    out = tmp_path / "damaged.jsonl"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(out)


@contextmanager
def tiny_context(path: str, n_ctx: int = 256, n_ubatch: int = 16):
    """(model, context) on a tiny random-weight llama, closed after: for the engine's own
    tests (tests/e2e/engine)."""
    import llama_cpp

    from kvtop.runner.engine.handles import Context, Model

    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = Model.load(path, mp)
    assert model is not None
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_ubatch, n_ubatch, 1
    cp.n_threads = cp.n_threads_batch = 1
    ctx = Context.create(model, cp)
    assert ctx is not None
    try:
        yield model, ctx
    finally:
        ctx.close()
        model.close()
