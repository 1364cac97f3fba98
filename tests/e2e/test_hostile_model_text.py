"""Untrusted text from a real model file and the real engine: GGUF metadata, template fallback, lone surrogates."""

from gguf_factory import write_tiny_llama
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.engine.engine import Engine
from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.panes.status import StatusBar

MSGS = [{"role": "user", "content": "hi"}]
EVIL = "[bold]b[/] [@click=app.quit]quit[/] [link=file:///etc/passwd]pw[/link] [/] \x1b[31mred\x1b[0m " \
       "\x1b]8;;https://evil.example\x07osc\x1b]8;;\x07 nul\x00 c1\x9b2J bel\x07"


def test_engine_uses_the_fallback_and_reports_it(tmp_path, smollm_path):
    import gguf

    path = write_tiny_llama(tmp_path / "ssti.gguf", smollm_path)
    # replace the chat template (copied from SmolLM2) with the SSTI payload, same length

    r = gguf.GGUFReader(path)
    assert "tokenizer.chat_template" in r.fields
    evil = tmp_path / "evil.gguf"
    data = open(path, "rb").read()
    tmpl = str(bytes(r.fields["tokenizer.chat_template"].parts[r.fields["tokenizer.chat_template"].data[0]]), "utf-8")
    payload = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    payload = payload + " " * (len(tmpl.encode()) - len(payload))  # same length: offsets stay valid
    evil.write_bytes(data.replace(tmpl.encode(), payload.encode()))
    seen = []
    e = Engine(Settings(str(evil), n_ctx=256, temp=0, n_predict=2), seen.append)
    e.load()
    try:
        done = e.chat(MSGS)
        started = [x for x in seen if type(x).__name__ == "TurnStarted"][0]
        assert started.template_name == "chatml" and "sandbox" in started.template_fallback
        assert done.metrics.decode_tokens == 2
    finally:
        e.close()


async def test_markup_in_gguf_metadata_is_shown_literally(tmp_path, smollm_path):
    path = write_tiny_llama(tmp_path / "evil-name.gguf", smollm_path, name=EVIL)
    app = make_app(Settings(path, n_ctx=256, temp=0, n_predict=4), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        bar = app.query_one(StatusBar)
        # the file's name, then the metadata name (it says what the file name does not), as text
        assert bar.model_label == "evil-name.gguf" and "[@click=app.quit]quit[/]" in bar.meta_name
        assert "\x1b" not in bar.meta_name
        await pilot.click(StatusBar, offset=(30, 0))  # clicking the "link" does nothing
        await pilot.pause()
        assert app.is_running
        text = screen_text(app)
        assert "[@click=app.quit]quit[/]" in text and "\x1b" not in text


async def test_lone_surrogates_in_the_input_are_replaced(tmp_path, smollm_path):
    app = make_app(Settings(smollm_path, n_ctx=512, temp=0, n_predict=4), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "bad \ud800 text \udfff")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        assert app.session.messages[0].content == "bad \ufffd text \ufffd"
        assert app.turns[-1].stop_reason in ("eog", "n_predict")
