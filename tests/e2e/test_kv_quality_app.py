"""F7 / the palette's "measure quality of the KV cache" on the real app and the demo model:
the chat's tokens through f16, q8_0 and q4_0 caches in contexts of their own; the KV pane
then carries a quality line with real numbers, the Estimate pane its advice, and the
measurement is kept (numbers only); Esc mid-measurement stops it (what it scored is
shown, marked) and the chat goes on; and the chat's next turn is exactly the turn a run
without the measurement has (same reply at --temp 0, same reused prefix)."""

import re

import pytest
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings

# long enough for three of the measurement's slices of 256 tokens (Esc lands in the second, and
# the cancel is seen before the third): about 560 tokens with the reply (40 repeats: 648 tokens)
FIRST = ("Here are some notes about the weather in a small town by the sea. " * 34
         + "Summarise the notes in one sentence.")
SECOND = "Now say it again in five words."


@pytest.fixture
def settings(smollm_path):
    return Settings(smollm_path, n_ctx=1024, temp=0, n_predict=8, n_threads=2, n_threads_batch=2)


async def _turn(pilot, text: str, n: int) -> None:
    app = pilot.app
    await send(pilot, text)
    await wait_until(pilot, lambda: len(app.turns) == n and not app.turn_running, timeout=180, what=f"turn {n}")


async def _chat(settings, root, measure: bool):
    """Two turns, and between them (``measure``) F7 stopped by Esc mid-way, then F7 to its end.
    Returns (the second turn's reply, its reused tokens, the KV pane's quality lines, the
    Estimate pane's advice, the screen)."""
    app = make_app(settings, EngineProcess, root, live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 60)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=120, what="model load")
        await _turn(pilot, FIRST, 1)
        if measure:
            pane = app.dash.prefill
            await pilot.press("f7")
            assert app.quality.running
            await wait_until(pilot, lambda: 0 < pane.done < pane.total or not app.quality.running, timeout=120,
                             what="the measurement's first slice")
            assert app.quality.running, "the measurement ended before Esc: the chat is too short"
            await pilot.press("escape")
            await wait_until(pilot, lambda: not app.quality.running, timeout=60, what="the stopped measurement")
            assert pane.note == "quality measurement stopped"
            assert all(q.endswith("(stopped early)") for q in app.dash.kv.quality)  # what it scored, marked
            await pilot.press("f7")
            await wait_until(pilot, lambda: not app.quality.running, timeout=180, what="the measurement")
        await _turn(pilot, SECOND, 2)
        await pilot.pause(0.3)
        last = app.turns[-1]
        return (app.session.messages[-1].content, last.metrics.reused_tokens, list(app.dash.kv.quality),
                app.dash.estimate.quality, screen_text(app))


async def test_measure_quality_on_the_chat_and_the_next_turn_is_unchanged(settings, tmp_path):
    plain = await _chat(settings, tmp_path / "plain", measure=False)
    reply, reused, lines, said, screen = await _chat(settings, tmp_path / "measured", measure=True)
    assert (reply, reused) == plain[:2] and reused > 0  # the same reply, the same prefix reused
    q8, q4 = lines
    pattern = (r"^{}: \u2212\d+% KV \([\d.,]+ (KiB|MiB) at 1,024\), KLD (0\.\d{{4}}) \(99%: [\d.]+\), "
               r"same top token ([\d.]+)% over this chat's ([\d,]+) tokens$")
    m8, m4 = re.match(pattern.format("q8_0/q8_0"), q8), re.match(pattern.format("q4_0/q4_0"), q4)
    assert m8 and m4, lines
    assert 0 < float(m8.group(2)) < float(m4.group(2))  # real numbers: 4 bits move the predictions further
    assert int(m8.group(4).replace(",", "")) > 300  # the chat's tokens, not a fixed text
    assert said.startswith("-ctk q8_0 -ctv q8_0 would fit 1.9x the context at KLD ") and said.endswith("measured here")
    assert f"KLD q8_0 {m8.group(2)} (" in screen  # on screen (the pane's one row of them), not only in its state
    # the trace holds both measurements (numbers only): a replay and a bundle show them
    import glob

    from kvtop.runner import events as ev
    from kvtop.runner.records.trace import read_trace

    (path,) = glob.glob(str(tmp_path / "measured" / "data" / "sessions" / "trace-*.jsonl"))
    recorded = [obj for kind, obj in read_trace(path).records if isinstance(obj, ev.KldMeasured)]
    assert [r.stopped for r in recorded] == ["cancelled", None]
    assert [round(p.kld_mean, 4) for p in recorded[1].pairs] == [float(m8.group(2)), float(m4.group(2))]
    # kept for the next start (tests/unit/tui/test_kv_quality_kept.py shows it): numbers, no text
    from kvtop.runner.commands.kld_cache import measured

    kept = measured(str(tmp_path / "measured" / "cache"), settings.model)
    assert {(e["type_k"], e["source"], e["count"]) for e in kept} == {
        ("q8_0", "chat", int(m8.group(4).replace(",", "")) - 1), ("q4_0", "chat", int(m4.group(4).replace(",", "")) - 1)}
    assert "weather" not in str(kept)
