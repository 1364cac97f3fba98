"""Every llama.cpp flag has an answer (issue 33, item 1): the table of llama-cli's,
llama-completion's and llama-server's flags (generated from the vendored common/arg.cpp)
is read by kvtop's parser, accepted with no effect, or refused with a reason; no flag is
read as another (argparse joined ``-cnv`` into ``-c nv``)."""

import os

import pytest

from kvtop.runner.commands.bench import build_parser as bench_parser
from kvtop.runner.commands.estimate import build_parser as estimate_parser
from kvtop.runner.commands.llama_cpp_args import LLAMA_CPP_ARGS
from kvtop.runner.commands.llama_flags import NO_EFFECT, REASONS, answer, prescan
from kvtop.runner.commands.load_args import build_parser as load_parser
from kvtop.tui.start.launch import build_parser, parse_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def parse(*args):
    return parse_flags(build_parser(), list(args))


def usage_error(capsys, *args) -> str:
    with pytest.raises(SystemExit) as e:
        parse(*args)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_every_llama_cpp_flag_has_an_explicit_answer():
    known = set(build_parser()._option_string_actions)
    unanswered = []
    for names, _values in LLAMA_CPP_ARGS:
        for name in names:
            if name in known:
                continue
            if not ({name, names[0]} & (NO_EFFECT.keys() | REASONS.keys())):
                unanswered.append(name)
            kind, why = answer(name)
            assert kind in ("no effect", "refused") and why and "\n" not in why, name
    assert unanswered == []
    assert len(LLAMA_CPP_ARGS) > 250  # the whole of arg.cpp's cli/completion/server flags


def test_every_refused_flag_says_what_to_use_instead(capsys):
    for names, _values in LLAMA_CPP_ARGS:
        kind, why = answer(names[-1])
        if kind == "refused":
            assert any(w in why for w in ("kvtop --server", "give", "use", "-sys", "--chat-template", "-h",
                                          "-t and -tb", "--prompt-cache", "-ngl")), (names, why)


def test_s_is_the_seed_not_the_system_prompt():
    a = parse("-s", "42")
    assert a.seed == 42 and a.system_prompt == ""


@pytest.mark.parametrize("argv,flag", [(["-np", "2"], "-np"), (["-ts", "1,1"], "-ts"), (["-mg", "0"], "-mg"), (["-sm", "row"], "-sm"),
                                       (["-dev", "none"], "-dev"), (["--dynatemp-range", "2"], "--dynatemp-range")])
def test_a_multi_letter_short_flag_is_matched_whole(capsys, argv, flag):
    """-np 2 was '-n/--n-predict … (got p)', -mg 0 became the model file '0'."""
    err = usage_error(capsys, *argv)
    assert f"error: {flag}: " in err and "kvtop --server URL" in err


def test_cnv_is_accepted_with_no_effect_said_once(capsys):
    """-cnv was 'argument -c/--ctx-size: must be an integer (got nv)'."""
    a = parse("-cnv", "-c", "2048", "-cnv", "--color", "-i")
    assert a.n_ctx == 2048
    assert len(a.flag_notes) == 3 and a.flag_notes[0].startswith("-cnv: accepted, no effect")
    assert capsys.readouterr().err.count("-cnv:") == 1


def test_no_abbreviation_of_a_short_flag(capsys):
    assert "-sy: neither kvtop nor llama.cpp" in usage_error(capsys, "-sy", "hello")


def test_server_refuses_the_local_engine_flags_naming_llama_servers(capsys):
    """--server silently accepted -t 1 -c 8192."""
    err = usage_error(capsys, "--server", "http://127.0.0.1:1", "-t", "1", "-c", "8192")
    assert "-t sets up a local engine" in err and "restart llama-server with -t" in err
    err = usage_error(capsys, "--server=http://127.0.0.1:1", "-c", "8192")
    assert "restart llama-server with -c" in err
    kept, _ = prescan(["--server", "u", "--temp", "0.2", "-s", "1"], build_parser(), server=True)
    assert kept == ["--server", "u", "--temp", "0.2", "-s", "1"]  # per-request sampler flags go to the server


def test_bench_help_lists_only_what_bench_uses(capsys):
    text = bench_parser().format_help()
    for flag in ("--temp", "--keep", "--context-shift", "-sys", "--top-k", "--seed", "--chat-template", "--ignore-eos",
                 "--grammar", "--mirostat"):
        assert f"{flag} " not in text and f"{flag}," not in text, flag
    with pytest.raises(SystemExit):
        parse_flags_of(bench_parser(), ["--temp", "0.5"])
    assert "--temp: kvtop bench does not use it" in capsys.readouterr().err


def parse_flags_of(p, argv):
    from kvtop.runner.commands.llama_flags import parse_flags as headless

    return headless(p, argv)


def test_estimate_and_load_refuse_what_they_do_not_use(capsys):
    for p, flag in ((estimate_parser(), "-sys"), (load_parser(), "--temp")):
        with pytest.raises(SystemExit):
            parse_flags_of(p, [flag, "x"])
        assert f"{flag}: {p.prog} does not use it" in capsys.readouterr().err


def test_kvtop_help_lists_load():
    assert "kvtop load" in build_parser().format_help()


def _cached_arg_cpp() -> str:
    """The arg.cpp the build script copied beside llama-server (same pin and cache folder)."""
    import re

    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as fh:
        pin = re.search(r'"llama-cpp-python==([^"]+)"', fh.read())
    cache = os.environ.get("KVTOP_BUILD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kvtop-build")
    return os.path.join(cache, f"llama-server-{pin.group(1) if pin else ''}", "arg.cpp")


def test_the_table_is_what_arg_cpp_says():
    """Regenerated from the vendored llama.cpp's arg.cpp when its sdist is at hand
    (KVTOP_LLAMA_ARG_CPP=path/to/common/arg.cpp): the checked-in table is that file's."""
    path = os.environ.get("KVTOP_LLAMA_ARG_CPP", "") or _cached_arg_cpp()
    if not os.path.isfile(path):
        pytest.skip("no common/arg.cpp: .ci/build-llama-server keeps the vendored one beside llama-server when "
                    "it builds (a cache built before it did has none), or set KVTOP_LLAMA_ARG_CPP")
    import contextlib
    import importlib.machinery
    import importlib.util
    import io

    loader = importlib.machinery.SourceFileLoader("llama_cpp_flags", os.path.join(ROOT, ".ci", "llama-cpp-flags"))
    gen = importlib.util.module_from_spec(importlib.util.spec_from_loader("llama_cpp_flags", loader))
    loader.exec_module(gen)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gen.main(path)
    with open(os.path.join(ROOT, "runner", "commands", "llama_cpp_args.py"), encoding="utf-8") as fh:
        assert fh.read() == out.getvalue()


def test_rope_frequency_flags_reach_llama_cpps_context_params(capsys):
    """--rope-freq-base/--rope-freq-scale were 'unrecognized arguments'."""
    from kvtop.runner.engine.load_params import context_params as _context_params
    from kvtop.runner.settings import settings_from_args

    s = settings_from_args("m.gguf", parse("--rope-freq-base", "500000", "--rope-freq-scale", "0.5")).resolved()
    cp = _context_params(s, 512)
    assert (cp.rope_freq_base, cp.rope_freq_scale) == (500000.0, 0.5)
    plain = _context_params(settings_from_args("m.gguf", parse()).resolved(), 512)
    assert (plain.rope_freq_base, plain.rope_freq_scale) == (0.0, 0.0)  # llama.cpp reads the GGUF's
    assert "restart llama-server with --rope-freq-base" in usage_error(capsys, "--server", "u", "--rope-freq-base", "1")


def test_nkvo_keeps_the_kv_cache_in_host_memory(capsys):
    """-nkvo was read as -n ('must be an integer … (got kvo)')."""
    from kvtop.runner.engine.load_params import context_params as _context_params
    from kvtop.runner.settings import settings_from_args

    def offload(*argv):
        return _context_params(settings_from_args("m.gguf", parse(*argv)).resolved(), 512).offload_kqv

    assert offload() is True and offload("-nkvo") is False and offload("-nkvo", "-kvo") is True
    assert "restart llama-server with -nkvo" in usage_error(capsys, "--server", "u", "-nkvo")


def test_numa_is_a_load_setting_a_server_cannot_take(capsys):
    """--numa was 'unrecognized arguments'."""
    from kvtop.runner.settings import settings_from_args

    assert settings_from_args("m.gguf", parse("--numa", "distribute")).numa == "distribute"
    assert settings_from_args("m.gguf", parse()).numa == ""
    assert "restart llama-server with --numa" in usage_error(capsys, "--server", "u", "--numa", "isolate")


@pytest.mark.parametrize("main,argv,needle", [
    ("launch", ["--server", "http://127.0.0.1:1", "-t", "1", "-c", "8192"], "restart llama-server with -t"),
    ("launch", ["-mg", "0"], "-mg: kvtop runs on one device"),
    ("bench", ["--temp", "0.5"], "--temp: kvtop bench does not use it"),
    ("estimate", ["-s", "1"], "-s: kvtop estimate does not use it"),
    ("load", ["http://127.0.0.1:1", "-np", "2"], "-np: a llama-server setting"),
])
def test_each_command_answers_before_it_does_anything(main, argv, needle, capsys):
    """The commands as users run them: the answer comes before any model, server or terminal."""
    from kvtop.runner.commands.bench import bench_main
    from kvtop.runner.commands.estimate import estimate_main
    from kvtop.runner.commands.load import load_main
    from kvtop.tui.start.launch import launch_main

    run = {"launch": launch_main, "bench": bench_main, "estimate": estimate_main, "load": load_main}[main]
    with pytest.raises(SystemExit) as e:
        run(argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_lora_flags_read_as_llama_cpp_reads_them(tmp_path, capsys):
    """--lora and --lora-scaled were refused ('kvtop applies no adapters')."""
    from kvtop.runner.commands.llama_flags import prescan
    from kvtop.runner.settings import settings_from_args

    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    s = settings_from_args("m.gguf", parse("--lora", f"{a},{b}", "--lora-scaled", f"{b}:0.5"))
    assert s.lora == ((str(a), 1.0), (str(b), 1.0), (str(b), 0.5))  # in order, as llama.cpp applies them
    assert settings_from_args("m.gguf", parse()).lora == ()
    for argv, why in ((["--lora", str(tmp_path / "missing.gguf")], "no such file"),
                      (["--lora-scaled", str(a)], "FNAME:SCALE"), (["--lora-scaled", f"{a}:x"], "must be a number"),
                      (["--lora-scaled", f"{a}:nan"], "finite")):
        assert why in usage_error(capsys, *argv), argv
    with pytest.raises(SystemExit):
        prescan(["--server", "u", "--lora", str(a)], build_parser(), server=True)
    assert "restart llama-server with --lora" in capsys.readouterr().err


def test_override_tensor_and_its_shorthands_read_as_llama_cpp_builds_them(capsys):
    """-ot, -cmoe, -ncmoe, -ncffn were refused ('kvtop places whole layers with -ngl N')."""
    from kvtop.runner.commands.llama_flags import prescan
    from kvtop.runner.settings import settings_from_args

    s = settings_from_args("m.gguf", parse("-ot", r"blk\.1\.=CPU,token_embd=CPU", "-cmoe", "-ncffn", "2"))
    assert s.override_tensor == ((r"blk\.1\.", "CPU"), ("token_embd", "CPU"),
                                 (r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),  # common.h's regexes
                                 (r"blk\.0\.ffn_(up|down|gate)\.", "CPU"), (r"blk\.1\.ffn_(up|down|gate)\.", "CPU"))
    assert settings_from_args("m.gguf", parse("-ncmoe", "1")).override_tensor == (
        (r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),)
    assert "PATTERN=BUFFER_TYPE" in usage_error(capsys, "-ot", "blk.0")
    assert "number of layers" in usage_error(capsys, "-ncmoe", "-1")
    with pytest.raises(SystemExit):
        prescan(["--server", "u", "-ot", "x=CPU"], build_parser(), server=True)
    assert "restart llama-server with -ot" in capsys.readouterr().err


def test_kvtop_help_names_every_subcommand_and_a_usage_error_is_short(capsys):
    """`kvtop --help` did not name tune or kld; a refused flag came after a 20-line usage."""
    text = " ".join(build_parser().format_help().split())  # argparse wraps the description
    for sub in ("bench", "tune", "estimate", "kld", "load", "replay", "sessions"):
        assert f"kvtop {sub}" in text, sub
    err = usage_error(capsys, "-np", "2")
    assert len(err.strip().splitlines()) == 2 and "-np: a llama-server setting" in err, err
