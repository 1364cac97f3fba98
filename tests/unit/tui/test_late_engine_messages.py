"""Engine messages that arrive while the app shuts down are dropped, not drawn: the
engine's thread posts until it is stopped, and a message handled after the dashboard's
widgets were removed raised NoMatches at the end of the run (seen 1 run in 7 beside a
CPU hog, when a pilot test quit mid-decode)."""

import threading

from helpers import scripted_app, wait_until

from kvtop.tui.base import messages as msg


async def test_messages_posted_during_shutdown_raise_nothing(tmp_path, smollm_shaped):
    current: dict = {}
    stop = threading.Event()

    def engine_thread() -> None:  # as the bridge does: post_message from another thread
        while not stop.is_set():
            app = current.get("app")
            if app is not None:
                app.post_message(msg.EngineLoadProgress(0.5))
                app.post_message(msg.Notice("still here"))
            stop.wait(0.0005)

    poster = threading.Thread(target=engine_thread, daemon=True)
    poster.start()
    try:
        for _ in range(5):  # each shutdown is one chance for the race
            app = scripted_app(tmp_path, smollm_shaped, ["Hello"])
            async with app.run_test(size=(120, 40)) as pilot:
                await wait_until(pilot, lambda: app.loaded is not None, what="load")
                current["app"] = app
                await pilot.pause(0.05)
            # leaving the block shut the app down with messages still arriving: nothing raised
            current["app"] = None
    finally:
        stop.set()
        poster.join(5)


def test_every_message_a_thread_posts_is_guarded():
    """Each message type that a thread posts (found in tui/'s source: ``post_message(msg.X``)
    has its handler (on the App, or on kvtop load's view, which its sweep posts to) wrapped
    by ``while_running``. A llama-server poll handled after
    the widgets were removed raised NoMatches at the end of a restart test (beside a
    CPU hog), as engine tokens once did: the handler had no guard."""
    import pathlib
    import re

    from textual.message import Message

    from kvtop.tui.app import KvtopApp
    from kvtop.tui.server.load_view import LoadView

    root = pathlib.Path(__file__).resolve().parents[3] / "tui"
    posted = set()
    for path in root.rglob("*.py"):
        posted |= set(re.findall(r"post_message\(msg\.([A-Za-z]+)", path.read_text(encoding="utf-8")))
    assert {"ServerPolled", "EngineFailed", "LoadLevelDone"} <= posted
    unguarded = []
    for name in sorted(posted):
        cls = getattr(msg, name)
        assert issubclass(cls, Message)
        handler = getattr(KvtopApp, cls.handler_name, None) or getattr(LoadView, cls.handler_name, None)
        if handler is None or getattr(handler, "__wrapped__", None) is None:
            unguarded.append(f"{name} -> {cls.handler_name}")
    assert not unguarded, unguarded
