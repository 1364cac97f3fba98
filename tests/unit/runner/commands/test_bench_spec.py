"""``kvtop bench --spec-type``: each tg test on a plain and a speculative engine, taking
turns, on the same text and depth; the rows' drafted/accepted/acceptance/speedup; the
text (the presets, -f FILE, the copy frame); the usage refusals. On engines with fixed
speeds (the real engines: tests/e2e/test_bench_spec_cli.py)."""

import json

import pytest
from scripted_engine import smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.commands import bench, bench_spec

TG_PLAIN, TG_SPEC = 100.0, 250.0  # the fakes' decode tok/s
DRAFTED, ACCEPTED = 10, 7  # what the speculative fake drafts and keeps each turn


class FakeEngine:
    opened: list = []

    def __init__(self, settings):
        self.settings = settings.resolved()
        self.texts: list[str] = []
        self.turns: list[tuple[list[int], int]] = []
        FakeEngine.opened.append(self)

    @property
    def speculates(self) -> bool:
        return self.settings.spec_type != "none"

    def start(self, on_event=None):
        return smollm_loaded(self.settings.model, n_ctx=self.settings.n_ctx)

    def tokenize(self, text, add_special=True):
        self.texts.append(text)
        return [1] + list(text.encode())[:300]

    def generate(self, tokens, on_event=None, n_predict=128, ignore_eog=True):
        self.turns.append((list(tokens), n_predict))
        rate = TG_SPEC if self.speculates else TG_PLAIN
        decode_s = (n_predict - 1) / rate
        spec = {"spec_type": self.settings.spec_type, "spec_drafted": DRAFTED, "spec_accepted": ACCEPTED,
                "spec_passes": 2} if self.speculates else {}
        m = ev.TurnMetrics(
            prompt_tokens=len(tokens), reused_tokens=len(tokens) - 1, prefill_tokens=1, prefill_s=0.001,
            prefill_tok_s=1000.0, template_s=0.0, tokenize_s=0.0, wait_s=0.0, ttft_s=0.002,
            decode_tokens=n_predict, decode_s=decode_s, decode_tok_s=(n_predict - 1) / decode_s if decode_s else None,
            itl_p50_ms=None, itl_p95_ms=None, kv_cells_used=len(tokens) + n_predict, n_ctx=self.settings.n_ctx,
            first_token_s=0.001, ubatches=((1, 0.001),), **spec)
        return ev.TurnDone(0, "n_predict", "", m, 0.0)

    def close(self, timeout=3.0):
        pass


@pytest.fixture
def fake(monkeypatch, smollm_shaped):
    FakeEngine.opened = []
    recorded = []
    monkeypatch.setattr(bench, "open_engine", lambda settings, in_process, server=None, api_key=None:
                        FakeEngine(settings))
    monkeypatch.setattr(bench, "record_calibration",
                        lambda settings, runs, server, share=None: recorded.append((settings, runs)))

    def run(*argv):
        return bench.bench_main([smollm_shaped, *argv]), FakeEngine.opened, recorded

    return run


def md_rows(out: str) -> list[dict[str, str]]:
    lines = [line for line in out.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_plain_and_speculative_rows_side_by_side(fake, capsys):
    code, engines, recorded = fake("--spec-type", "ngram-simple", "-n", "16,32", "-r", "2", "--no-warmup")
    assert code == 0
    plain, spec = engines
    assert plain.settings.spec_type == "none" and spec.settings.spec_type == "ngram-simple"
    assert plain.settings.temp == spec.settings.temp == 0.0  # greedy: both make the same tokens
    assert plain.texts == [bench_spec.PRESETS["copy"]]  # the copy preset by default
    depth = len(plain.turns[0][0])
    # the same prompt (the text) on both, taking turns every repetition: 2 tests x 2 repetitions
    assert [len(t) for t, _ in plain.turns] == [depth] * 4 and plain.turns == spec.turns
    assert [n for _, n in plain.turns] == [17, 17, 33, 33]
    rows = md_rows(capsys.readouterr().out)
    assert [(r["spec_type"], r["test"]) for r in rows] == [
        ("none", f"tg16 @ d{depth}"), ("ngram-simple", f"tg16 @ d{depth}"),
        ("none", f"tg32 @ d{depth}"), ("ngram-simple", f"tg32 @ d{depth}")]
    assert rows[0]["drafted"] == rows[0]["accepted"] == rows[0]["acceptance"] == rows[0]["speedup"] == "-"
    assert (rows[1]["drafted"], rows[1]["accepted"], rows[1]["acceptance"], rows[1]["speedup"]) == \
        ("10", "7", "70%", "2.50x")
    assert rows[1]["t/s"].startswith("250.00") and rows[0]["t/s"].startswith("100.00")
    assert [len(runs) for _, runs in recorded] == [2, 2]  # only the plain turns calibrate
    assert all(s.spec_type == "none" for s, _ in recorded)


def test_json_rows_carry_the_drafts(fake, capsys):
    code, _, _ = fake("--spec-type", "ngram-simple", "-n", "8", "-r", "3", "--no-warmup", "--json")
    assert code == 0
    plain, spec = json.loads(capsys.readouterr().out)
    assert plain["kvtop_spec_type"] is None and plain["kvtop_spec_drafted"] == [0, 0, 0]
    assert spec["kvtop_spec_type"] == "ngram-simple" and spec["kvtop_spec_drafted"] == [DRAFTED] * 3
    assert spec["kvtop_spec_accepted"] == [ACCEPTED] * 3 and spec["kvtop_spec_acceptance"] == 0.7
    assert spec["kvtop_spec_speedup"] == 2.5 and spec["n_depth"] == plain["n_depth"] > 0
    assert spec["n_gen"] == 8 and spec["n_prompt"] == 0


def test_a_file_is_continued_or_copied(fake, tmp_path, capsys):
    f = tmp_path / "code.py"
    f.write_text("def f(x):\n    return x + 1\n")
    code, engines, _ = fake("--spec-type", "ngram-mod", "-f", str(f), "-n", "4", "-r", "1", "--no-warmup")
    assert code == 0 and engines[0].texts == ["def f(x):\n    return x + 1\n"]
    assert "file " + str(f) in capsys.readouterr().out
    code, engines, _ = fake("--spec-type", "ngram-mod", "-f", str(f), "--spec-text", "copy", "-n", "4", "-r", "1")
    assert code == 0 and engines[-2].texts == [bench_spec.copy_frame("def f(x):\n    return x + 1")]


def test_the_edit_preset(fake):
    code, engines, _ = fake("--spec-type", "ngram-simple", "--spec-text", "edit", "-n", "4", "-r", "1")
    assert code == 0 and engines[0].texts == [bench_spec.PRESETS["edit"]]
    assert bench_spec.PRESETS["edit"].count("def total_price") == 2  # the function given twice, renamed once


@pytest.mark.parametrize(("argv", "says"), [
    (["--spec-type", "ngram-simple", "-p", "64"], "speculation changes generation only"),
    (["--spec-type", "ngram-simple", "-d", "64"], "depth of each test is its text's tokens"),
    (["--spec-type", "ngram-simple", "-pg", "8,8"], "give -n"),
    (["--spec-text", "copy"], "give --spec-type"),
    (["--spec-type", "ngram-simple", "--spec-text", "edit", "-f", "x"], "built-in text"),
    (["--spec-type", "ngram-simple", "-f", "/no/such/file"], "No such file"),
    (["--spec-type", "draft-simple"], "needs -md FILE"),
])
def test_usage_refusals(fake, capsys, argv, says):
    with pytest.raises(SystemExit) as e:
        fake(*argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err.splitlines()[-1] and not FakeEngine.opened


def test_an_empty_file_is_refused(fake, tmp_path, capsys):
    f = tmp_path / "empty.txt"
    f.write_text("  \n")
    with pytest.raises(SystemExit):
        fake("--spec-type", "ngram-simple", "-f", str(f))
    assert "no text in it" in capsys.readouterr().err
