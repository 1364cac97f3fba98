"""What a bug report needs, on the screen (issue 15 item 8): the last turn's compact
waterfall in the prefill pane, and the versions/hardware line under the status bar."""

from helpers import one_turn, screen_text, scripted_app

from kvtop.runner.system.cpu_name import name_from_cpuinfo
from kvtop.tui.panes.prefill import compact_waterfall

TIMELINE = (("wait for engine", 0.0, 0.002), ("template", 0.002, 0.001), ("ubatch 1", 0.003, 0.5),
            ("ubatch 2", 0.503, 0.4), ("first decode", 0.903, 0.1))


def test_the_compact_waterfall_puts_the_biggest_segment_first_and_counts_micro_batches():
    lines = compact_waterfall(1.003, TIMELINE, 200)
    assert [line.plain for line in lines] == ["TTFT 1.00 s: ■ prefill (2 ubatches) 90% ■ first decode 10%"]
    # narrow: one line (a second and third moved the dashboard's pages after each turn), the
    # biggest segment named shorter to leave room for the count of those left to F2
    assert [line.plain for line in compact_waterfall(1.003, TIMELINE, 44)] == ["TTFT 1.00 s: ■ prefill 90% +1 in F2"]
    assert [line.plain for line in compact_waterfall(1.003, TIMELINE, 30)] == ["TTFT 1.00 s: ■ prefill 90%"]


def test_the_cpu_name_comes_from_cpuinfo():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n"
    assert name_from_cpuinfo(x86) == "AMD EPYC 7B13 64-Core Processor"
    pi = "processor\t: 0\nBogoMIPS\t: 108.00\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
    assert name_from_cpuinfo(pi) == "BCM2835"
    assert name_from_cpuinfo("flags\t: fpu vme\n") == ""


import pytest


@pytest.mark.parametrize("size", [(160, 48), (120, 40)])  # one page, and pages (a new user saw none there)
async def test_the_dashboard_shows_the_turns_waterfall_and_the_versions_line(tmp_path, smollm_shaped, size):
    from dataclasses import replace
    from importlib.metadata import version

    from helpers import make_app
    from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

    from kvtop.runner.settings import Settings

    turn = scripted_turn(1, 1000.0, 30, 0, ["The", " moon", "."])
    done = turn[-1]
    turn[-1] = replace(done, metrics=replace(done.metrics, timeline=TIMELINE, ttft_s=1.003))
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2), lambda s: ScriptedEngine(s, loaded, [turn]),
                   root=tmp_path, live_system=False, write_transcript=False)
    async with app.run_test(size=size) as pilot:
        await one_turn(pilot, "hi")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "TTFT 1.00 s: ■ prefill" in text and "90%" in text  # in the prefill pane, on one line
        about = next(line for line in text.split("\n")[:4] if "llama-cpp-python" in line)
        assert f"kvtop {version('kvtop-llm')}" in about and f"llama-cpp-python {version('llama-cpp-python')}" in about
        assert "cpu Test CPU 9000" in about and "batch 512/512" in about
        assert ("temp 0.8" in about) == (size[0] >= 160)  # the sampler goes first when narrow
    app = scripted_app(tmp_path / "small", smollm_shaped, ["Hi"])
    async with app.run_test(size=(80, 24)) as pilot:  # too few rows: the panes keep the row
        await pilot.pause(0.2)
        assert not app.query_one("#about").display


def test_the_bundle_names_the_versions_the_cpu_and_the_load():
    from importlib.metadata import version

    from kvtop.runner.commands.bundle import system_facts
    from kvtop.runner.system.cpu_name import cpu_name

    f = system_facts()
    assert f["kvtop"] == version("kvtop-llm") and f["llama_cpp_python"] == version("llama-cpp-python")
    assert f["cpu_name"] == cpu_name() and f["cpu_count"] >= 1 and len(f["loadavg"]) == 3
