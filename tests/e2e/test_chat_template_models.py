"""Each installed model talks in its own chat format, through the real engine process.

Gemma-3 270M's GGUF has no chat template: kvtop must not fall back to ChatML (the
model then echoes "<|im_end|>user"), but pick llama.cpp's "gemma" format from the
vocabulary's <start_of_turn>, and say so. SmolLM2 carries its own (ChatML) template.
The first tests check the choice itself, without a model.
"""

import argparse

import pytest
from helpers import cores

from kvtop.runner import events as ev
from kvtop.runner.engine.chat_template import check_override, pick_family, render_chat
from kvtop.runner.process.blocking import BlockingEngine
from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings

TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|eot_id|>",
                   "<|start_header_id|>", "<|end|>", "<|user|>", "<|assistant|>")
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def _vocab(*special: str):
    """A tokenizer that knows ``special`` as single tokens (and splits anything else)."""
    return lambda text, add_special: [1] if text in special else [1, 2, 3]


def test_family_is_read_from_the_vocabulary_then_the_architecture():
    assert pick_family("gemma3", _vocab("<start_of_turn>", "<end_of_turn>"))[0] == "gemma"
    assert pick_family("llama", _vocab("<|start_header_id|>", "<|eot_id|>"))[0] == "llama3"
    assert pick_family("llama", _vocab("<|im_start|>"))[0] == "chatml"
    assert pick_family("phi3", _vocab())[0] == "phi3"
    assert pick_family("gemma2", None) == ("gemma", "its architecture is gemma2")
    assert pick_family("mamba", _vocab())[0] == "chatml"


def test_no_template_renders_the_familys_format_and_says_which():
    r = render_chat(None, QUESTION, "<bos>", "<eos>", architecture="gemma3", tokenize=_vocab("<start_of_turn>"))
    assert r.text == "<start_of_turn>user\n" + QUESTION[0]["content"] + "<end_of_turn>\n<start_of_turn>model\n"
    assert r.template_name == "gemma"
    assert "no chat template" in r.fallback_reason and "gemma" in r.fallback_reason
    assert "<start_of_turn>" in r.fallback_reason  # why gemma


def test_override_by_name_or_file_wins_over_the_ggufs_template(tmp_path):
    gguf = "{% for m in messages %}GGUF {{ m.content }}{% endfor %}"
    r = render_chat(gguf, QUESTION, override="llama3")
    assert r.template_name == "llama3" and r.fallback_reason is None and "<|start_header_id|>user" in r.text
    f = tmp_path / "mine.jinja"
    f.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]")
    r = render_chat(gguf, QUESTION, override=str(f))
    assert r.template_name == "file" and r.text.startswith("[user] What is")
    # a file that fails in the sandbox: said, and the GGUF's template is used
    f.write_text("{{ cycler.__init__.__globals__ }}")
    r = render_chat(gguf, QUESTION, override=str(f))
    assert r.template_name == "gguf" and "--chat-template" in r.fallback_reason


def test_chat_template_flag_accepts_a_format_name_or_a_file(tmp_path):
    assert check_override("gemma") == "gemma"
    f = tmp_path / "t.jinja"
    f.write_text("x")
    assert check_override(str(f)) == str(f)
    with pytest.raises(argparse.ArgumentTypeError, match="gemma"):
        check_override("no-such-format")


def test_chat_template_flag_reaches_the_settings():
    from kvtop.runner.commands.engine_flags import add_engine_flags
    from kvtop.runner.settings import settings_from_args

    p = argparse.ArgumentParser()
    add_engine_flags(p)
    assert settings_from_args("m.gguf", p.parse_args(["--chat-template", "gemma"])).chat_template == "gemma"
    assert settings_from_args("m.gguf", p.parse_args([])).chat_template == ""


def _chat(path: str, **kw):
    settings = Settings(path, n_ctx=1024, n_threads=cores(), temp=0.0, seed=1, n_predict=48, **kw)
    eng = BlockingEngine(EngineProcess(settings))
    started = []
    try:
        eng.start()
        done = eng.chat(QUESTION, on_event=lambda e: started.append(e) if isinstance(e, ev.TurnStarted) else None)
    finally:
        eng.close()
    assert isinstance(done, ev.TurnDone), done
    return started[0], done


def _assert_clean_reply(done):
    reply = done.text
    assert reply.strip(), "no reply"
    for tok in TEMPLATE_TOKENS:
        assert tok not in reply, f"the reply contains the template token {tok!r}: {reply!r}"
    assert "\nuser" not in reply and not reply.lstrip().startswith(("user\n", "model\n", "assistant\n"))


def test_gemma_without_a_template_talks_in_gemmas_format(gemma_path):
    started, done = _chat(gemma_path)
    assert started.template_name == "gemma"
    assert "gemma" in (started.template_fallback or "") and "<start_of_turn>" in started.template_fallback
    _assert_clean_reply(done)  # (a base model: what it says is its own affair, but in its own format)


def test_smollm_uses_its_own_template(smollm_path):
    started, done = _chat(smollm_path)
    assert started.template_name == "gguf" and started.template_fallback is None
    _assert_clean_reply(done)


def test_chat_template_flag_overrides_the_ggufs_template(smollm_path):
    started, _done = _chat(smollm_path, chat_template="gemma")
    assert started.template_name == "gemma" and started.template_fallback is None
