"""Missing or failing hardware APIs, resizes during decode, the transcript after a crash."""

import types

import psutil
from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.records.transcript import Transcript, latest_session, read_messages
from kvtop.runner.settings import Settings
from kvtop.runner.system import hardware
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.memory import MemoryPane


def test_no_nvml_is_a_value(monkeypatch):
    monkeypatch.setattr(hardware, "_NVML_STATE", hardware._NVML())
    import pynvml

    def boom():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", boom)
    rep = hardware.query_gpus()
    assert rep.gpus == () and rep.note.startswith("no NVIDIA GPU")


def test_nvml_errors_mid_run_become_na(monkeypatch):
    """GPU lost / not supported / no permission on individual queries: those fields are N/A."""
    import pynvml

    fake = types.SimpleNamespace(
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: "h",
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda h: (_ for _ in ()).throw(pynvml.NVMLError_GpuIsLost()),
        nvmlDeviceGetUtilizationRates=lambda h: (_ for _ in ()).throw(pynvml.NVMLError_NotSupported()),
        nvmlDeviceGetMemoryBusWidth=lambda h: (_ for _ in ()).throw(pynvml.NVMLError_NoPermission()),
        nvmlDeviceGetMaxClockInfo=lambda h, c: 2619,
        nvmlDeviceGetComputeRunningProcesses=lambda h: (_ for _ in ()).throw(pynvml.NVMLError_GpuIsLost()),
        NVML_CLOCK_MEM=2,
    )
    state = hardware._NVML()
    state._state, state._nv = "ok", fake
    monkeypatch.setattr(hardware, "_NVML_STATE", state)
    g = hardware.query_gpus(pid=123).gpus[0]
    assert g.name == "NVIDIA H200" and g.memory_total is None and g.utilization is None
    assert g.bandwidth_gbs == 4800.0  # bus width unreadable: the datasheet figure, named in the table
    assert g.tflops == 989.0 and "H200" in g.tflops_source and g.process_memory is None


def test_psutil_errors_become_na(monkeypatch):
    class Gone:
        def __init__(self, pid):
            raise psutil.NoSuchProcess(pid)

    class Denied:
        def __init__(self, pid):
            raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", Gone)
    assert hardware.process_memory(1).rss is None and hardware.process_memory(1).note == "process gone"
    monkeypatch.setattr(psutil, "Process", Denied)
    assert hardware.process_memory(1).note == "access denied"


async def test_memory_pane_shows_na_and_no_gpu(monkeypatch, tmp_path, smollm_shaped):
    class Denied:
        def __init__(self, pid):
            raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", Denied)
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, []), tmp_path, write_transcript=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await wait_until(pilot, lambda: app.query_one(MemoryPane).sample is not None, what="sample")
        text = screen_text(app)
        assert "UI RSS N/A" in text or "N/A" in text
        assert "no NVIDIA GPU" in text


async def test_context_full_in_the_ui_offers_a_new_chat(tmp_path, smollm_shaped):
    loaded = smollm_loaded(smollm_shaped, n_ctx=4096)
    pieces = ["word"] * 40
    turns = [scripted_turn(1, 1.0, 4056, 0, pieces, stop_reason="context_full")]
    app = make_app(Settings(smollm_shaped, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "fill it")
        await wait_until(pilot, lambda: app.turns, what="turn")
        await wait_until(pilot, lambda: "context full" in screen_text(app), timeout=5, what="context full shown")
        assert "Ctrl+L" in screen_text(app)
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: app.query_one(KVPane).cells == 0, what="cache cleared")
        assert app.session.messages == []


def test_transcript_survives_a_torn_last_line_and_resumes(tmp_path):
    t = Transcript(str(tmp_path), {"model": "m"})
    t.turn("q1", "a1", "eog", {"decode_tokens": 3})
    t.turn("q2", "a2", "eog", {"decode_tokens": 4})
    t.close()
    with open(t.path, "a") as fh:
        fh.write('{"type": "turn", "user": "q3", "assis')  # power cut mid-write
    assert latest_session(str(tmp_path)) == t.path
    assert read_messages(t.path) == [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"},
    ]


async def test_resume_reopens_the_last_session(tmp_path, smollm_shaped):
    t = Transcript(str(tmp_path / "data" / "sessions"), {"model": smollm_shaped})
    t.turn("What is a lighthouse?", "A tower with a light.", "eog", {})
    t.close()
    loaded = smollm_loaded(smollm_shaped)
    msgs = read_messages(latest_session(str(tmp_path / "data" / "sessions")))
    app = make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, [scripted_turn(1, 1.0, 40, 0, ["ok"])]),
                   tmp_path, live_system=False, resume_messages=msgs)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        assert "A tower with a light." in screen_text(app)
        await send(pilot, "And why?")
        await wait_until(pilot, lambda: app.turns, what="turn")
        sent = app.engine.chats[-1]
        assert [m["content"] for m in sent] == ["What is a lighthouse?", "A tower with a light.", "And why?"]
