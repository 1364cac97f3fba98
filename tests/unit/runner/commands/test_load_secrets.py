"""``kvtop load http://user:pass@host --api-key KEY``: the login and the key go on the
wire as a header and never into the rows, the notes or the errors (issue 21, item 4)."""

from __future__ import annotations

from fake_llama_server import FakeLlamaServer

from kvtop.runner import redact
from kvtop.runner.commands.load import load_main

PASSWORD = "pw-SECRET"
KEY = "sk-SECRET123"


def test_load_prints_neither_the_login_nor_the_key(capsys):
    try:
        for fmt in ("md", "json"):
            with FakeLlamaServer() as srv:
                url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
                rc = load_main([url, "--api-key", KEY, "--users", "1", "-p", "8", "-n", "2", "--requests", "1",
                                "--no-warmup", "-o", fmt])
            out, err = capsys.readouterr()
            assert rc == 0, err
            assert out.strip() and PASSWORD not in out + err and KEY not in out + err and "alice" not in out + err
        rc = load_main([f"http://alice:{PASSWORD}@127.0.0.1:1", "--api-key", KEY, "--quiet"])
        err = capsys.readouterr().err
        assert rc == 1 and "127.0.0.1:1" in err and PASSWORD not in err and KEY not in err
    finally:
        redact.forget_secrets()
