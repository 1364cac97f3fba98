"""Progress inside a level of kvtop load: requests done of how many, tokens streamed,
elapsed and an ETA, counted by the driver from its threads and said by the sweep (stderr
headless, every --progress seconds). A trial's 19 minutes headless showed only
"level 2/3: 2 users" lines."""

from __future__ import annotations

from fake_llama_server import FakeLlamaServer

from kvtop.runner.server.load_driver import LoadDriver
from kvtop.runner.server.load_progress import LevelProgress, fmt_span


def test_the_eta_comes_from_the_tokens_streamed():
    p = LevelProgress(total=8, n_predict=100, t0=0.0)
    assert p.eta(10.0) is None and "0/8 requests done, 0/800 tokens, 10 s" == p.text(10.0)
    p.tokens, p.done = 200, 1
    assert p.eta(10.0) == 30.0  # a quarter of the tokens in 10 s: 30 s left
    assert p.text(10.0) == "1/8 requests done, 200/800 tokens, 10 s, ETA 30 s"
    d = LevelProgress(total=None, n_predict=100, duration=120.0, t0=0.0)
    d.tokens = 5
    assert d.text(45.0) == "0 requests done, 5 tokens, 45 s, --duration ends in 1 min 15 s"
    assert (fmt_span(59.6), fmt_span(185), fmt_span(3720)) == ("1 min 00 s", "3 min 05 s", "1 h 02 min")


def test_the_driver_counts_requests_and_tokens_while_a_level_runs():
    with FakeLlamaServer(token_s=0.01) as srv:
        driver = LoadDriver([srv.url], None, 8)
        seen: list[tuple[int, int]] = []
        driver.on_tick = lambda: seen.append((driver.progress.done, driver.progress.tokens))
        run = driver.closed_loop(2, 30, 2, None, ("level", 0))
    assert len(run.results) == 4 and all(r.ok for r in run.results)
    p = driver.progress
    assert (p.total, p.done, p.tokens) == (4, 4, 4 * 30)
    assert len(seen) >= 2 and seen == sorted(seen)  # it grew while the level ran, never back
    assert any(0 < tokens < 120 for _, tokens in seen), seen  # seen in the middle, not only at the end


def test_a_headless_sweep_says_its_progress_on_stderr(capsys):
    from kvtop.runner.commands.load import load_main

    with FakeLlamaServer(token_s=0.02) as srv:
        rc = load_main([srv.url, "--users", "1,2", "-p", "8", "-n", "40", "--requests", "2", "--no-warmup",
                        "--progress", "0.3", "-o", "csv"])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = [x for x in err.splitlines() if "requests done" in x]
    assert any(x.startswith("kvtop load: level 1/2: 1 user: ") and "/2 requests done" in x for x in lines), err
    assert any(x.startswith("kvtop load: level 2/2: 2 users: ") and "/4 requests done" in x
               and "/160 tokens" in x and ", ETA " in x for x in lines), err


def test_quiet_says_no_progress(capsys):
    from kvtop.runner.commands.load import load_main

    with FakeLlamaServer(token_s=0.02) as srv:
        rc = load_main([srv.url, "--users", "1", "-p", "8", "-n", "40", "--requests", "2", "--no-warmup",
                        "--progress", "0.3", "--quiet", "-o", "csv"])
    assert rc == 0 and "requests done" not in capsys.readouterr().err
