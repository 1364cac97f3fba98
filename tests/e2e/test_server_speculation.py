"""A speculating llama-server attached (issue 36, item 6): the real llama-server the tests
build, started with ``--spec-type ngram-simple`` (short n-grams), on the demo model. A turn's drafted and
accepted come from its own ``timings``; the server pane's counters are ``/metrics``'
``llamacpp:spec_decode_*``, and the accepted count it shows grows by the turn's own."""

import pytest
from llama_server import llama_server
from textual.app import App

from kvtop.runner.policy.speculation import spec_line
from kvtop.runner.process.blocking import BlockingEngine
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor
from kvtop.runner.server.spec_metrics import parse_spec
from kvtop.runner.settings import Settings

TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the great clock, "
        "trimmed the wick, polished the brass lens until it shone, and wrote the weather in his logbook.")
COPY = f"Copy this text exactly, twice.\n\n{TEXT}\n\n{TEXT}\n\n{TEXT}"


class PaneApp(App):
    def compose(self):
        from kvtop.tui.panes.server import ServerPane

        pane = ServerPane("http://127.0.0.1:8080")
        pane.styles.width = 95
        yield pane


@pytest.fixture(scope="module")
def spec_served(llama_server_bin, smollm_path, tmp_path_factory):
    # short n-grams (3, drafts of up to 16) so that kvtop load's random-token prompts draft
    # too, once the demo model's reply repeats itself
    with llama_server(llama_server_bin, smollm_path, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                      "--spec-ngram-simple-size-m", "16", slots=1,
                      log_dir=str(tmp_path_factory.mktemp("spec-srv"))) as s:
        yield s


async def test_the_server_panes_accepted_counter_grows_by_the_turns_own(spec_served, smollm_path):
    url, _ = spec_served
    client = ServerClient(url)
    monitor = ServerMonitor(client)
    before = monitor.poll().spec
    drafted0, accepted0 = (before.totals.drafted, before.totals.accepted) if before else (0, 0)
    e = BlockingEngine(ServerEngine(Settings(smollm_path, temp=0, n_predict=96), url))
    e.start()
    try:
        done = e.chat([{"role": "user", "content": COPY}])
    finally:
        e.close()
    m = done.metrics
    timings = m.perf["server_timings"]
    assert m.spec_type == "llama-server" and m.spec_drafted == timings["draft_n"] > 0
    assert m.spec_accepted == timings["draft_n_accepted"] > 0
    assert spec_line(m) == (f"speculation (llama-server): {m.spec_accepted / m.spec_drafted:.0%} of "
                            f"{m.spec_drafted:,} drafted accepted")
    raw = parse_spec(client.get_text_and_header("/metrics", "x")[0])
    after = monitor.poll()
    client.close()
    assert after.spec is not None and raw is not None
    assert after.spec.totals.accepted - accepted0 == m.spec_accepted == raw.accepted - accepted0
    assert after.spec.totals.drafted - drafted0 == m.spec_drafted
    assert after.spec.totals.drafts > 0 and sum(after.spec.totals.per_pos) == after.spec.totals.accepted
    app = PaneApp()
    async with app.run_test(size=(160, 40)) as pilot:
        from kvtop.tui.panes.server import ServerPane

        pane = app.query_one(ServerPane)
        pane.set_snapshot(after)
        await pilot.pause()
        text = " ".join(pane.render().plain.split("\n"))
    t = after.spec.totals
    assert f"speculation: {t.accepted:,} of {t.drafted:,} drafted accepted" in text
    assert "tok/pass over" in text and "by position" in text
    # the batched roof with speculation, from the server's own counters and the demo model's facts
    from helpers import FIXED_HW

    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here, server_physics, speculative_server_ceiling

    here = Here.at(load_facts(smollm_path, need_weights=True), FIXED_HW, Settings(smollm_path).resolved())
    plain, *_ = server_physics(here, after.slots)
    spec = speculative_server_ceiling(here, plain, t.drafted, t.drafts, t.accepted)
    assert plain is not None and spec is not None
    assert spec.tokens_per_pass == pytest.approx(1 + t.accepted / t.drafts)
    async with PaneApp().run_test(size=(160, 40)) as pilot:
        from kvtop.tui.panes.server import ServerPane

        pane = pilot.app.query_one(ServerPane)
        pane.spec_ceiling = spec
        pane.set_snapshot(after, plain)
        await pilot.pause()
        text = " ".join(pane.render().plain.split("\n"))
    assert "with speculation" in text and f"({spec.over_plain(plain):.2f}x)" in text
    assert f"{spec.tokens_per_pass:.1f} tok/pass, drafts of {spec.draft}" in text


def test_kvtop_load_rows_carry_the_levels_drafted_and_accepted(spec_served):
    """``kvtop load`` against the speculating server: each level's draft_tokens and
    accepted_tokens are its requests' timings, summed; /metrics grew by as many."""
    import subprocess
    import sys

    from kvtop.runner.commands.load_json import flat_levels

    url, _ = spec_served
    client = ServerClient(url)
    # each run's random prompts are new (load's seed is the run's own): a reply that never
    # repeats a 3-gram drafts nothing (seen once in a full run), so up to three runs are
    # taken, and the first that drafted is checked
    for _ in range(3):
        before = parse_spec(client.get_text_and_header("/metrics", "x")[0])
        r = subprocess.run([sys.executable, "-m", "kvtop", "load", url, "--users", "1", "-p", "32", "-n", "128",
                            "--requests", "2", "-o", "json", "--no-warmup", "--quiet"],
                           capture_output=True, text=True, timeout=400)
        assert r.returncode == 0, r.stderr
        after = parse_spec(client.get_text_and_header("/metrics", "x")[0])
        (row,) = flat_levels(r.stdout)
        drafted = after.drafted - (before.drafted if before else 0)
        accepted = after.accepted - (before.accepted if before else 0)
        if drafted > 0:
            break
    client.close()
    assert drafted > 0, "the demo model's replies to random tokens repeat: 3-grams draft"
    assert (row["draft_tokens"], row["accepted_tokens"]) == (drafted, accepted)
    assert row["acceptance"] == accepted / drafted
