"""Shared test helpers: build the real app, wait for conditions instead of sleeping."""

from __future__ import annotations

import time

from runner.hardware import HardwareProfile
from runner.paths import Paths

# A fixed hardware profile: tests must not depend on what the CPU probe measures today.
FIXED_HW = HardwareProfile(bandwidth_gbs=30.0, tflops=0.25, source="test profile",
                           memory_free=16 * 2**30, memory_total=24 * 2**30)


def test_paths(root) -> Paths:
    return Paths(str(root / "config"), str(root / "data"), str(root / "cache"))


def make_app(settings, engine_factory, root, **kw):
    from tui.app import KvtopApp

    kw.setdefault("hardware", FIXED_HW)
    return KvtopApp(settings, engine_factory, test_paths(root), argv=["kvtop", settings.model], **kw)


async def wait_until(pilot, predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
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
    """What the terminal shows, line by line, as plain text (the composited screen)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text for strip in strips)
