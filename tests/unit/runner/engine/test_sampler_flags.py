"""llama.cpp's sampler flags (--min-p, --repeat-penalty, --repeat-last-n,
--presence-penalty, --frequency-penalty): parsed under llama.cpp's names and defaults,
each one changing what the real sampler chain does to a token's logit, sent to a
llama-server, recorded in the trace and the bundle, and shown in the sampler line.
A flag that parses but never reaches the chain would sample as before, silently."""

import ctypes

import llama_cpp
import pytest

from kvtop.runner.engine.decode import Sampling
from kvtop.runner.records.trace import Trace
from kvtop.runner.redact import Redactor
from kvtop.runner.settings import Settings, sampler_text, settings_from_args

FLAGS = {  # flag: (Settings field, llama.cpp's default, a value to set)
    "--min-p": ("min_p", 0.05, 0.3),
    "--repeat-penalty": ("repeat_penalty", 1.0, 1.5),
    "--repeat-last-n": ("repeat_last_n", 64, 3),
    "--presence-penalty": ("presence_penalty", 0.0, 0.5),
    "--frequency-penalty": ("frequency_penalty", 0.0, 0.25),
}
N_VOCAB = 8


def parse(*argv):
    from kvtop.tui.start.launch import build_parser

    return settings_from_args("m.gguf", build_parser().parse_args(list(argv)))


def test_flags_have_llama_cpps_names_and_defaults_and_are_in_help():
    from kvtop.tui.start.launch import build_parser

    helptext = build_parser().format_help()
    defaults = parse()
    for flag, (field, default, value) in FLAGS.items():
        assert flag in helptext
        assert getattr(defaults, field) == default
        assert getattr(parse(flag, str(value)), field) == value


@pytest.mark.parametrize("argv", [["--repeat-penalty", "0"], ["--repeat-penalty", "nan"], ["--min-p", "1.5"],
                                  ["--repeat-last-n", "-1"], ["--presence-penalty", "inf"],
                                  ["--frequency-penalty", "nan"]])
def test_values_llama_cpp_refuses_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2 and "must be" in capsys.readouterr().err


def _apply(settings: Settings, seen: list[int], logits: list[float]) -> dict[int, float]:
    """The logits left after the chain (without its final draw) saw ``seen``: a token
    the chain removed is missing."""
    chain = Sampling.of(settings).chain(N_VOCAB)
    try:
        n = llama_cpp.llama_sampler_chain_n(chain.ptr)
        for tok in seen:
            llama_cpp.llama_sampler_accept(chain.ptr, tok)
        data = (llama_cpp.llama_token_data * len(logits))(
            *[llama_cpp.llama_token_data(i, x, 0.0) for i, x in enumerate(logits)])
        arr = llama_cpp.llama_token_data_array(data, len(logits), -1, False)
        for i in range(n - 1):  # every stage but the draw
            llama_cpp.llama_sampler_apply(llama_cpp.llama_sampler_chain_get(chain.ptr, i), ctypes.byref(arr))
        return {arr.data[i].id: arr.data[i].logit for i in range(arr.size)}
    finally:
        chain.close()


BASE = dict(temp=1.0, top_k=0, top_p=1.0, seed=1)  # temperature 1: the logits stay as they are
LOGITS = [4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0]


def test_each_flag_changes_what_the_chain_does():
    plain = _apply(Settings("m", **BASE, min_p=0.0), [0, 0, 1], LOGITS)
    assert plain == dict(enumerate(LOGITS))  # the defaults of the penalties change nothing
    # --min-p: tokens below min_p times the top token's probability are gone
    kept = _apply(Settings("m", **BASE, min_p=0.3), [], LOGITS)
    assert sorted(kept) == [0, 1]  # e^-1 = 0.37 >= 0.3 > e^-2
    # --repeat-penalty: a positive logit seen before is divided by it
    rep = _apply(Settings("m", **BASE, min_p=0.0, repeat_penalty=2.0), [0, 1], LOGITS)
    assert rep[0] == 2.0 and rep[1] == 1.5 and rep[2] == 2.0
    # --presence-penalty: minus the penalty once, however often the token came
    pres = _apply(Settings("m", **BASE, min_p=0.0, presence_penalty=0.5), [0, 0, 1], LOGITS)
    assert pres[0] == 3.5 and pres[1] == 2.5 and pres[2] == 2.0
    # --frequency-penalty: minus the penalty per time the token came
    freq = _apply(Settings("m", **BASE, min_p=0.0, frequency_penalty=0.25), [0, 0, 1], LOGITS)
    assert freq[0] == 3.5 and freq[1] == 2.75
    # --repeat-last-n: only the last n tokens count
    last = _apply(Settings("m", **BASE, min_p=0.0, repeat_penalty=2.0, repeat_last_n=2), [0, 5, 6], LOGITS)
    assert last[0] == 4.0 and last[5] == -2.0  # token 0 is out of the window; -1 x 2 for token 5


def test_greedy_still_applies_the_penalties():
    """temp 0 picks the top token: a repeat penalty must be able to change which one."""
    s = Sampling.of(Settings("m", temp=0.0, repeat_penalty=4.0))
    chain = s.chain(N_VOCAB)
    try:
        names = [llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain.ptr, i))
                 for i in range(llama_cpp.llama_sampler_chain_n(chain.ptr))]
    finally:
        chain.close()
    assert names == [b"penalties", b"greedy"]


def test_sent_to_a_server_recorded_and_shown():
    from kvtop.runner.process.commands import Chat
    from kvtop.runner.server.engine import ServerEngine

    values = {field: value for field, _default, value in FLAGS.values()}
    s = Settings("m.gguf", **values)
    _path, body = ServerEngine(s, "http://127.0.0.1:9")._request(Chat(1, (), 0.0))
    assert {k: body[k] for k in values} == values  # llama-server's own field names
    header = {"settings": s.to_dict()}
    assert Trace(header, []).settings() == s  # a replay samples with what was recorded
    assert {k: Redactor().settings(s.to_dict())[k] for k in values} == values  # the bundle keeps them
    text = sampler_text(s)
    assert "min-p 0.3" in text and "repeat 1.5/3" in text and "presence 0.5" in text and "frequency 0.25" in text
    plain = sampler_text(Settings("m.gguf"))
    assert plain == "temp 0.8 top-k 40 top-p 0.95 min-p 0.05 seed -1"  # penalties off: not shown


def _names(settings: Settings) -> list[bytes]:
    chain = Sampling.of(settings).chain(N_VOCAB)
    try:
        return [llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain.ptr, i))
                for i in range(llama_cpp.llama_sampler_chain_n(chain.ptr))]
    finally:
        chain.close()


MORE_FLAGS = {  # llama.cpp's flag: (Settings field, a value, llama-server's field)
    "--typical": ("typical_p", 0.5, "typical_p"),
    "--top-nsigma": ("top_n_sigma", 1.5, "top_n_sigma"),
    "--xtc-probability": ("xtc_probability", 0.5, "xtc_probability"),
    "--xtc-threshold": ("xtc_threshold", 0.2, "xtc_threshold"),
    "--mirostat": ("mirostat", 2, "mirostat"),
    "--mirostat-lr": ("mirostat_lr", 0.2, "mirostat_eta"),
    "--mirostat-ent": ("mirostat_ent", 4.0, "mirostat_tau"),
}


def test_typical_top_nsigma_xtc_and_mirostat_reach_the_chain_in_llama_cpps_order():
    """They were 'unrecognized arguments'; a flag parsed but not in the chain would sample as before."""
    for flag, (field, value, _server) in MORE_FLAGS.items():
        assert getattr(parse(flag, str(value)), field) == value
    assert _names(parse("--typical", "0.5", "--top-nsigma", "1.5", "--xtc-probability", "0.5")) == [
        b"top-n-sigma", b"top-k", b"typical", b"top-p", b"min-p", b"xtc", b"temp", b"dist"]
    assert _names(parse()) == [b"top-k", b"top-p", b"min-p", b"temp", b"dist"]  # the defaults add nothing
    assert _names(parse("--mirostat", "1")) == [b"temp", b"mirostat"]
    assert _names(parse("--mirostat", "2", "--repeat-penalty", "1.5")) == [b"temp", b"mirostat-v2"]
    def alive(**kw):  # the tokens a stage left (top-n-sigma sets the others' logits to -inf)
        return sorted(k for k, v in _apply(Settings("m", **BASE, min_p=0.0, **kw), [], LOGITS).items()
                      if v != float("-inf"))

    assert alive(typical_p=0.2) and len(alive(typical_p=0.2)) < len(LOGITS)
    assert alive(top_n_sigma=1.0) == [0, 1, 2]  # within 1 sigma of the top logit (sigma of 0..7 ~ 2.3)
    assert 0 not in alive(xtc_probability=1.0, xtc_threshold=0.05)  # XTC removes the top tokens but the last


def test_the_new_samplers_are_sent_to_a_server_and_shown():
    from kvtop.runner.process.commands import Chat
    from kvtop.runner.server.engine import ServerEngine

    s = Settings("m.gguf", **{field: value for field, value, _ in MORE_FLAGS.values()})
    _path, body = ServerEngine(s, "http://127.0.0.1:9")._request(Chat(1, (), 0.0))
    assert {server: body[server] for _f, _v, server in MORE_FLAGS.values()} == \
        {server: value for _f, value, server in MORE_FLAGS.values()}
    assert sampler_text(s) == "temp 0.8 mirostat 2 lr 0.2 ent 4 seed -1"
    shown = sampler_text(Settings("m.gguf", typical_p=0.5, xtc_probability=0.5))
    assert "typical 0.5" in shown and "xtc 0.5/0.1" in shown


def test_grammar_and_json_schema_flags_become_gbnf_sent_to_a_server(tmp_path, capsys):
    """--grammar, --grammar-file, --json-schema were 'unrecognized arguments'."""
    from kvtop.runner.process.commands import Chat
    from kvtop.runner.server.engine import ServerEngine

    assert parse("--grammar", 'root ::= "yes" | "no"').grammar == 'root ::= "yes" | "no"'
    f = tmp_path / "g.gbnf"
    f.write_text('root ::= [0-9]+\n')
    assert parse("--grammar-file", str(f)).grammar == "root ::= [0-9]+\n"
    schema = parse("-j", '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}').grammar
    assert schema.count("root ::=") == 1 and '"\\"a\\""' in schema
    for argv in (["-j", "{not json"], ["--grammar-file", str(tmp_path / "missing")]):
        with pytest.raises(SystemExit):
            parse(*argv)
        assert "error: argument" in capsys.readouterr().err
    s = Settings("m.gguf", grammar='root ::= "x"')
    _path, body = ServerEngine(s, "http://127.0.0.1:9")._request(Chat(1, (), 0.0))
    assert body["grammar"] == 'root ::= "x"' and sampler_text(s).endswith("grammar seed -1")
    assert "grammar" not in ServerEngine(Settings("m.gguf"), "http://127.0.0.1:9")._request(Chat(1, (), 0.0))[1]


def test_dry_flags_have_llama_cpps_names_defaults_and_breaker_rule(capsys):
    """--dry-* were refused ('not in kvtop's sampler chain'); llama.cpp's DRY is in it now."""
    d = parse()
    assert (d.dry_multiplier, d.dry_base, d.dry_allowed_length, d.dry_penalty_last_n) == (0.0, 1.75, 2, 64)
    assert d.dry_sequence_breakers == ("\n", ":", '"', "*")  # common/common.h
    s = parse("--dry-multiplier", "0.8", "--dry-base", "2", "--dry-allowed-length", "3", "--dry-penalty-last-n", "128")
    assert (s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_penalty_last_n) == (0.8, 2.0, 3, 128)
    # the first breaker given clears llama.cpp's defaults; each adds one; "none" clears them all
    assert parse("--dry-sequence-breaker", "x", "--dry-sequence-breaker", ";").dry_sequence_breakers == ("x", ";")
    assert parse("--dry-sequence-breaker", "none").dry_sequence_breakers == ()
    assert parse().dry_sequence_breakers == ("\n", ":", '"', "*")  # a second parse starts from the defaults
    for argv in (["--dry-penalty-last-n", "-1"], ["--dry-base", "0.5"], ["--dry-multiplier", "nan"]):
        with pytest.raises(SystemExit):
            parse(*argv)
        assert "must be" in capsys.readouterr().err


def test_dry_is_sent_to_a_server_recorded_and_shown():
    from kvtop.runner.process.commands import Chat
    from kvtop.runner.server.engine import ServerEngine

    s = Settings("m.gguf", dry_multiplier=0.8, dry_base=2.0, dry_allowed_length=3, dry_penalty_last_n=128,
                 dry_sequence_breakers=("x",))
    _path, body = ServerEngine(s, "http://127.0.0.1:9")._request(Chat(1, (), 0.0))
    assert (body["dry_multiplier"], body["dry_base"], body["dry_allowed_length"], body["dry_penalty_last_n"],
            body["dry_sequence_breakers"]) == (0.8, 2.0, 3, 128, ["x"])  # llama-server's own field names
    import json

    assert Trace(json.loads(json.dumps({"settings": s.to_dict()})), []).settings() == s  # a replay samples alike
    assert "dry 0.8/2/3/128" in sampler_text(s)
    assert "dry" not in sampler_text(Settings("m.gguf"))  # off by default: not shown


def test_a_chain_with_dry_needs_the_vocabulary():
    with pytest.raises(ValueError, match="vocabulary"):
        Sampling.of(Settings("m", dry_multiplier=0.5)).chain(N_VOCAB)
