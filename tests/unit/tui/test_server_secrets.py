"""``kvtop --server http://user:pass@host --api-key KEY``: the key and the login are taken
out where the options are read (issue 21, item 4): the app gets URLs without the login,
a command line without the key, settings without either, and options whose repr hides
them (the key lives only in the HTTP client's header)."""

import pytest

KEY = "sk-SECRET123"
PASSWORD = "pw-SECRET"


@pytest.mark.parametrize("key_from", ["flag", "env"])
def test_the_app_never_holds_the_key_or_the_login(monkeypatch, tmp_path, key_from):
    import kvtop.runner.server.props as props
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    info = props.ServerInfo(None, "m", 4096, 1, "b1", None, None, None, None, None, None)
    seen = []

    def read_info(client, wait_s=120.0):
        seen.append((client.url, dict(client._headers)))
        return info

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(props, "read_server_info", read_info)
    built = {}
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: built.setdefault("app", self) and 0)
    argv = ["--server", f"http://alice:{PASSWORD}@127.0.0.1:9", "--server", "127.0.0.1:10", "--tflops", "1"]
    if key_from == "flag":
        argv += ["--api-key", KEY]
    else:
        monkeypatch.setenv("LLAMA_API_KEY", KEY)
    assert launch.launch_main(argv) == 0
    app = built["app"]
    assert seen == [("http://127.0.0.1:9", {"Authorization": f"Bearer {KEY}"})]  # on the wire only
    held = " ".join([repr(app.options), repr(app.settings), " ".join(app.options.argv),
                     " ".join(app.session.argv), repr(app.settings.to_dict())])
    assert app.options.servers == ("http://127.0.0.1:9", "http://127.0.0.1:10")
    assert KEY not in held and PASSWORD not in held and "alice" not in held
    assert app.session.engine.client.url == "http://127.0.0.1:9"
    assert app.session.engine.client._headers == {"Authorization": f"Bearer {KEY}"}
