"""Flags a llama.cpp user pastes: -m, -f, -p, --jinja, a bare -fa, -hf, and no abbreviations."""

import subprocess
import sys

import pytest

from tui.launch import build_parser, version_text


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


@pytest.mark.parametrize("argv,needle", [(["-hf", "org/repo"], "downloads nothing"),
                                         (["-f"], "expected one argument")])
def test_misread_flags_give_a_usage_error_that_names_them(argv, needle):
    r = subprocess.run([sys.executable, "-m", "tui", *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and needle in r.stderr
    assert "invalid choice" not in r.stderr  # "-f FILE" used to become "-fa FILE"


def test_version_names_kvtop_llama_cpp_python_and_the_backends():
    text = version_text()
    from importlib.metadata import version

    # the distribution is kvtop-llm ("kvtop" on PyPI is another tool): its version, not "not installed"
    assert text.startswith(f"kvtop {version('kvtop-llm')}\n") and "llama-cpp-python 0.3.36" in text
    assert "llama.cpp backends: CPU" in text and "GPU offload: " in text
    r = subprocess.run([sys.executable, "-m", "tui", "-V"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == text
