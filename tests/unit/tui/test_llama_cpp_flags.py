"""Flags a llama.cpp user pastes: -m, -f, -p, --jinja, a bare -fa, -hf, and no abbreviations."""

import pytest

from kvtop.tui.start.launch import build_parser


def parse(*args):
    return build_parser().parse_args(list(args))


def test_llama_cli_flags_are_read_as_llama_cli_reads_them():
    a = parse("-m", "model.gguf", "-f", "prompt.txt", "-p", "Hello", "--jinja", "-fa", "-c", "2048")
    assert a.model_flag == "model.gguf" and a.prompt_file == "prompt.txt" and a.prompt == "Hello"
    assert a.flash_attn == "on" and a.n_ctx == 2048  # a bare -fa (older llama.cpp) means on
    assert parse("-fa", "off").flash_attn == "off"
    assert parse("--prompt-file", "x").prompt_file == "x"


def test_no_prefix_matching():
    with pytest.raises(SystemExit):
        parse("--promp", "x")  # argparse's default would take it for --prompt(-file)
