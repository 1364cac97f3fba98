"""Short follow-ups after a cached prefix: the forecast TTFT the UI shows before Enter
against the measured one, on each installed model.

A session as a user has it: one calibration (in a temporary folder) that every turn
adds to, as the app's; a first turn of ``--first`` prompt tokens, then ``--follow-ups``
turns that each add ``--new`` tokens to the previous prompt (its prefix cached, the
reply trimmed). Before each follow-up the Forecaster forecasts its TTFT from what the
session has recorded so far, with the cached prefix the engine will reuse. Ratio:

    forecast TTFT / measured TTFT  (the wait for the engine left out, as the forecast does)

A benchmark, not a test: it prints, it does not assert. The load average is printed
before and after each model.

    python bench/followup_accuracy.py [--first 1024] [--new 20] [--follow-ups 3] [--models smollm,gemma]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.forecast_accuracy import model_paths, roofline_and_engine  # noqa: E402
from kvtop.runner.commands.bench import BENCH_TEXT  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402
from kvtop.runner.system.hardware import hardware_profile  # noqa: E402


def bench_model(label: str, path: str, a, hw) -> None:
    settings = Settings(path, n_ctx=a.first + a.follow_ups * (a.new + a.n_gen) + 256, n_threads=a.threads).resolved()
    with tempfile.TemporaryDirectory() as cache:
        basis, cal, eng = roofline_and_engine(path, settings, hw, cache)
        try:
            base = eng.tokenize(BENCH_TEXT)
            words = eng.tokenize(" and then the next question was about something else entirely", add_special=False)
            eng.generate(base[:32], n_predict=4, ignore_eog=True)  # warm-up, not calibrated
            eng.reset()
            prompt = (base * (a.first // len(base) + 1))[:a.first]
            print(f"\n{label} ({settings.n_threads} threads, ubatch {settings.n_ubatch}); "
                  f"load average {os.getloadavg()[0]:.2f}")
            print(f"{'turn':>5} {'prompt':>7} {'cached':>7} {'new':>5} {'fc TTFT':>9} {'TTFT':>9} {'ratio':>6}  basis")
            cached = 0
            for turn in range(a.follow_ups + 1):
                fc = cal.forecaster(basis).forecast(len(prompt), cached, a.n_gen)
                m = eng.generate(prompt, n_predict=a.n_gen, ignore_eog=True).metrics
                ttft = m.ttft_s - m.wait_s
                ratio = f"{fc.ttft_s / ttft:>6.3f}" if fc.ttft_s else "     -"
                print(f"{turn:>5} {len(prompt):>7} {m.reused_tokens:>7} {len(prompt) - m.reused_tokens:>5} "
                      f"{(fc.ttft_s or 0):>8.3f}s {ttft:>8.3f}s {ratio}  {fc.label()}")
                cal.record(m)
                cached = len(prompt)
                prompt = prompt + (words * (a.new // len(words) + 1))[:a.new]
            print(f"load average {os.getloadavg()[0]:.2f}")
        finally:
            eng.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=1024)
    ap.add_argument("--new", type=int, default=20)
    ap.add_argument("--follow-ups", dest="follow_ups", type=int, default=3)
    ap.add_argument("-n", dest="n_gen", type=int, default=32)
    ap.add_argument("-t", dest="threads", type=int, default=0)
    ap.add_argument("--models", default="smollm,gemma")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as probe_dir:
        hw = hardware_profile(0, cache_dir=probe_dir, refresh=True)
    print(f"hardware: {hw.bandwidth_gbs:.1f} GB/s, {hw.tflops:.3f} TFLOPS ({hw.source})")
    for label, path in model_paths(a.models.split(",")):
        bench_model(label, path, a, hw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
