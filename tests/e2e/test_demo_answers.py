"""The demo answers (issue 33): with the bundled demo model (SmolLM2-135M-Instruct Q4_1) and
no sampler flag, kvtop samples as the model's authors recommend, with a reply limit that
fits the context, and a newcomer's ordinary first questions end by end-of-generation, inside
that limit. Before, the demo sampled with llama.cpp's generic defaults and no limit: "What is
the capital of France?" looped ("la femme de la femme…") for 656 tokens, a summary ran to
"context full". The settings come from the path the app takes (``chat_settings``, what
``kvtop`` calls on its command line); only the seed is fixed, so the test is deterministic."""

import pytest

from kvtop.runner import events as ev
from kvtop.runner.commands.chat_sampling import chat_settings
from kvtop.runner.engine.engine import Engine
from kvtop.tui.start.launch import build_parser

QUESTIONS = ["What is the capital of France?", "Summarize in two sentences why the sky is blue.", "Hello!",
             "What is 7 + 5?"]
SEED = "8"


def demo_settings(smollm_path, *flags):
    return chat_settings(smollm_path, build_parser().parse_args([smollm_path, *flags]))


def test_the_demo_samples_as_recommended_with_a_reply_limit(smollm_path):
    s, note = demo_settings(smollm_path)
    assert (s.temp, s.top_p) == (0.2, 0.9)  # the model card's
    assert 0 < s.n_predict <= s.resolved().n_ctx // 4
    assert note == ("demo sampling: temp 0.2 top-k 50 top-p 0.9 min-p 0 repeat 1.1/64, replies ≤ 512 tokens "
                    "(SmolLM2-Instruct's model card; the repeat penalty is kvtop's); flags override")
    small, _ = demo_settings(smollm_path, "-c", "512")
    assert small.n_predict == 128  # a quarter of a small context
    mine, note = demo_settings(smollm_path, "--temp", "0.7", "-n", "64", "--repeat-penalty", "1")
    assert (mine.temp, mine.n_predict, mine.repeat_penalty, mine.top_p) == (0.7, 64, 1.0, 0.9)
    assert note.endswith("flags override (set by a flag: n_predict, repeat_penalty, temp)")
    assert "replies ≤" not in note
    seeded, _ = demo_settings(smollm_path, "-s", SEED)
    assert seeded.seed == 8 and seeded.temp == 0.2  # the seed is no sampler setting: the demo's stay


def test_another_model_keeps_llama_cpps_defaults(tiny_llama):
    s, note = chat_settings(tiny_llama, build_parser().parse_args([tiny_llama]))
    assert note is None and (s.temp, s.top_k, s.top_p, s.min_p, s.n_predict) == (0.8, 40, 0.95, 0.05, -1)


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_demo_answers_an_ordinary_question(smollm_path, question):
    s, _ = demo_settings(smollm_path, "-s", SEED)
    assert 0 < s.n_predict <= s.resolved().n_ctx // 4, "no reply limit: a loop runs to context full"
    engine = Engine(s, lambda e: None)
    engine.load()
    try:
        r = engine.chat([{"role": "user", "content": question}], turn_id=1)
    finally:
        engine.close()
    assert isinstance(r, ev.TurnDone)
    assert r.stop_reason == "eog", f"{question!r}: {r.stop_reason} after {r.metrics.decode_tokens} tokens: {r.text!r}"
    assert 0 < r.metrics.decode_tokens < s.n_predict and r.text.strip()


def test_kvtop_with_no_model_starts_the_demo_with_its_sampling_and_says_so(tmp_path, monkeypatch, smollm_path):
    """``kvtop`` as a newcomer types it: the demo, its sampling, and the one line in the chat."""
    import signal

    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base import collector
    from kvtop.tui.start import launch

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    seen = {}
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: seen.setdefault("app", self) and 0)
    monkeypatch.setattr(collector, "freeze_startup_objects", lambda: None)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    assert launch.launch_main([]) == 0
    app = seen["app"]
    assert app.settings.model == smollm_path and (app.settings.temp, app.settings.n_predict) == (0.2, 512)
    assert [n for n in app.options.notes if n.startswith("demo sampling: ")] == [
        "demo sampling: temp 0.2 top-k 50 top-p 0.9 min-p 0 repeat 1.1/64, replies ≤ 512 tokens "
        "(SmolLM2-Instruct's model card; the repeat penalty is kvtop's); flags override"]
    seen.clear()
    assert launch.launch_main(["--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
                               "--repeat-penalty", "1", "-n", "-1"]) == 0
    s = seen["app"].settings
    assert (s.temp, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.n_predict) == (0.8, 40, 0.95, 0.05, 1.0, -1)
