"""Bad --spec-* input as users meet it (issue 36): kvtop run in a process says what is
wrong in one line and exits 2 before it starts anything (no engine, no terminal UI)."""

import subprocess
import sys

import pytest


def kvtop(*args):
    return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def last_line(r):
    return r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("argv,needle", [
    (["--spec-type", "nonsense"], "argument --spec-type: unknown speculative type: nonsense"),
    (["--spec-type", "ngram-simple,nonsense"], "unknown speculative type: nonsense"),
    (["--spec-draft-n-max", "0"], "argument --spec-draft-n-max: must be an integer from 1 to 1,024 (got 0)"),
    (["--spec-draft-n-max", "10000"], "must be an integer from 1 to 1,024 (got 10000)"),
    (["--spec-ngram-simple-size-n", "0"], "argument --spec-ngram-simple-size-n: must be an integer from 1"),
    (["--spec-type", "draft-simple"], "--spec-type draft-simple needs -md FILE"),
    (["--draft", "4"], "--draft: removed in llama.cpp: use --spec-draft-n-max"),
])
def test_bad_spec_flags_are_one_line_and_exit_2(smollm_path, argv, needle):
    r = kvtop(smollm_path, *argv)
    assert r.returncode == 2 and r.stdout == "" and needle in last_line(r), r.stderr[-500:]


def test_a_draft_path_that_is_not_a_gguf(smollm_path, tmp_path):
    bad = tmp_path / "draft.gguf"
    bad.write_text("not a model")
    r = kvtop(smollm_path, "-md", str(bad))
    assert r.returncode == 2 and "argument -md/--spec-draft-model/--model-draft:" in last_line(r)
    assert "is not a GGUF file" in last_line(r)


def test_a_draft_of_another_vocabulary_is_refused_before_anything_starts(smollm_path, gemma_path):
    r = kvtop(smollm_path, "--spec-type", "draft-simple", "-md", gemma_path)
    assert r.returncode == 2 and r.stdout == ""
    assert last_line(r).startswith(f"kvtop: -md {gemma_path}: not a draft for this model: its tokenizer is")
    assert len(r.stderr.strip().splitlines()) == 1


def test_server_refuses_spec_flags_naming_llama_servers():
    r = kvtop("--server", "http://127.0.0.1:9", "--spec-type", "ngram-simple")
    assert r.returncode == 2 and "restart llama-server with --spec-type" in last_line(r)
