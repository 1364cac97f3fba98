"""The forecast's 80% interval against what happens, per load regime (issue 35).

For each model and each regime, from an EMPTY calibration: ``--turns`` turns of mixed
prompt lengths (``--lengths``, drawn with a fixed seed, each on an empty KV cache) run
one after another as the app runs them: the forecast is made and frozen before the turn
(at the load measured just before it, on the threads the app would give it), the turn
runs with the load read through it every half second, then it is offered to the
calibration by the app's rule (runner.calibration.service ``admit``: priced at its own
load, refused only when no single price fits). Regimes:

    quiet    nothing added (this shared machine's own neighbours still run)
    one      a ``yes`` process holds one core
    both     two ``yes`` processes hold both cores
    flicker  a ``yes`` process that starts and stops every 5 s

Printed per regime: the share of turns whose measured TTFT and decode tok/s fall inside
the stated 80% interval (goal 70-90%), the median forecast/measured ratio after the 3rd
turn (goal 0.8-1.25), the median interval width relative to the forecast, and how many
turns were refused. ``--record FILE`` writes every turn's measurements (the unit tests'
recorded samples: tests/unit/runner/calibration/data/).

    python bench/forecast_accuracy.py --coverage [--turns 30] [--regimes quiet,one,both,flicker]
                                      [--models smollm,gemma] [--lengths 64,3000] [-n 32] [--record FILE]
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time

REGIMES = ("quiet", "one", "both", "flicker")


class Hogs:
    """The regime's other processes (``yes`` to /dev/null), stopped by ``stop``: only
    the processes started here are signalled, by their own pid."""

    def __init__(self, regime: str):
        self.regime = regime
        self.procs: list[subprocess.Popen] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _yes(self) -> subprocess.Popen:
        return subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> Hogs:
        if self.regime in ("one", "both"):
            self.procs = [self._yes() for _ in range(1 if self.regime == "one" else 2)]
        elif self.regime == "flicker":
            self.procs = [self._yes()]
            self._thread = threading.Thread(target=self._flicker, daemon=True)
            self._thread.start()
        return self

    def _flicker(self) -> None:
        running = True
        while not self._stop.wait(5.0):
            for p in self.procs:
                os.kill(p.pid, signal.SIGSTOP if running else signal.SIGCONT)
            running = not running

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(6)
        for p in self.procs:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
            p.terminate()
            p.wait(5)
        self.procs = []


class LoadReader:
    """Other processes' cores, read every ``every`` seconds while a turn runs."""

    def __init__(self, engine_pid: int | None, every: float = 0.5):
        self.pid, self.every = engine_pid, every
        self.readings: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self):
        from kvtop.runner.system.cpu_use import read_cpu

        return read_cpu(self.pid, os.getpid())

    def __enter__(self) -> LoadReader:
        self.start = last = self._read()

        def run() -> None:
            from kvtop.runner.system.cpu_use import cpu_use

            nonlocal last
            while not self._stop.wait(self.every):
                now = self._read()
                use = cpu_use(last, now)
                if use.others is not None:
                    self.readings.append(use.others)
                last = now

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        from kvtop.runner.system.cpu_use import cpu_use

        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        use = cpu_use(self.start, self._read())
        self.mean = use.others
        self.cores = use.cores


def load_before(seconds: float = 1.0):
    from kvtop.runner.calibration.load import CPULoad
    from kvtop.runner.system.cpu_use import others_over

    use = others_over(seconds)
    return CPULoad(use.others, use.cores) if use.others is not None else None


def regime_service(path: str, hw, settings):
    """A forecast service on an EMPTY calibration (in a temporary folder, removed with
    the context), as the app builds it for ``path`` at ``settings``."""
    from kvtop.runner.calibration.calibration import Calibration
    from kvtop.runner.calibration.key import calibration_key, file_identity
    from kvtop.runner.calibration.service import ForecastService
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here
    from kvtop.runner.session.site import flags_site

    facts = load_facts(path, need_weights=True)
    cache = tempfile.TemporaryDirectory()
    cal = Calibration(cache.name, calibration_key(settings, file_identity(path) or path))
    return cache, ForecastService(Here.at(facts, hw, settings), cal, flags_site(settings, facts, hw, None))


def played_turn(service, i: int, n: int, fc, m, load) -> dict:
    """One turn's row: offered to the calibration by the app's rule, then how its frozen
    forecast ``fc`` did against what it measured ``m``."""
    from kvtop.runner.calibration.interval import inside, measured_ttft

    admitted = service.admit(m, load, fc)
    t_in, d_in = inside(fc, m)
    ttft = measured_ttft(m)
    return {"turn": i, "n": n, "t_in": t_in, "d_in": d_in, "admitted": admitted.value,
            "t_ratio": fc.ttft_s / ttft if fc.ttft_s and ttft else None,
            "d_ratio": fc.decode_tok_s / m.decode_tok_s if fc.decode_tok_s and m.decode_tok_s else None,
            "t_width": (fc.ttft_s_high - fc.ttft_s_low) / fc.ttft_s if fc.ttft_s_high and fc.ttft_s else None,
            "d_width": (fc.decode_tok_s_high - fc.decode_tok_s_low) / fc.decode_tok_s
            if fc.decode_tok_s_high and fc.decode_tok_s else None,
            "share": load.share if load else None, "basis": fc.basis, "ttft": ttft, "fc": fc, "m": m}


def turn_line(regime: str, r: dict) -> str:
    fc, m = r["fc"], r["m"]
    return (f"  {regime:>7} {r['turn']:>3} n={r['n']:>5} others {r['share'] or 0:.0%} ttft {r['ttft'] or 0:.3f}s "
            f"fc {fc.ttft_s or 0:.3f} [{fc.ttft_s_low or 0:.3f}-{fc.ttft_s_high or 0:.3f}] "
            f"tg {m.decode_tok_s or 0:.1f} fc {fc.decode_tok_s or 0:.1f} "
            f"[{fc.decode_tok_s_low or 0:.1f}-{fc.decode_tok_s_high or 0:.1f}] {r['admitted']}")


def run_regime(label: str, path: str, regime: str, a, hw, eng, base: list[int], settings, record: list) -> dict:
    from kvtop.runner.calibration.pace import TurnLoad

    rng = random.Random(f"{label}:{regime}")
    lo, hi = a.lengths
    rows = []
    cache, service = regime_service(path, hw, settings)
    with cache:
        hogs = Hogs(regime).start()
        try:
            time.sleep(1.0)
            for i in range(1, a.turns + 1):
                n = int(round(lo * (hi / lo) ** rng.random()))  # log-uniform: as many short prompts as long
                sent = load_before()
                fc = service.forecast(n, 0, a.n_gen, sent)
                threads = service.turn_threads(sent)
                eng.reset()
                prompt = (base * (n // max(1, len(base)) + 1))[:n]
                with LoadReader(eng.pid) as reader:
                    m = eng.generate(prompt, n_predict=a.n_gen, ignore_eog=True, threads=threads).metrics
                load = TurnLoad(reader.mean, reader.cores, (*reader.readings, reader.mean)) \
                    if reader.mean is not None else None
                rows.append(played_turn(service, i, n, fc, m, load))
                record.append({"model": label, "regime": regime, "turn": i, "metrics": m.to_dict(),
                               "sent_others": sent.others_cores if sent else None,
                               "load": [load.others_cores, load.n_cores, list(load.readings)] if load else None})
                if a.verbose:
                    print(turn_line(regime, rows[-1]), flush=True)
        finally:
            hogs.stop()
    return summarize(rows)


def replay_regime(path: str, regime: str, hw, settings, turns: list[dict], cores: int, verbose: bool) -> dict:
    """A recorded regime played again through today's forecast code: each turn forecast
    at the load recorded before it, then offered at the load recorded through it. The
    measurements are the recorded ones; only the forecasts are computed again (the
    threads each turn ran on were decided from the same recorded load)."""
    from kvtop.runner.calibration.load import CPULoad
    from kvtop.runner.calibration.pace import TurnLoad
    from kvtop.runner.events import TurnMetrics

    rows = []
    cache, service = regime_service(path, hw, settings)
    with cache:
        for t in turns:
            m = TurnMetrics(**dict(t["metrics"], ubatches=tuple(tuple(u) for u in t["metrics"]["ubatches"])))
            sent = CPULoad(t["sent_others"], cores) if t["sent_others"] is not None else None
            load = TurnLoad(t["load"][0], t["load"][1], tuple(t["load"][2])) if t["load"] else None
            fc = service.forecast(m.prompt_tokens, 0, m.decode_tokens, sent)
            rows.append(played_turn(service, t["turn"], m.prompt_tokens, fc, m, load))
            if verbose:
                print(turn_line(regime, rows[-1]), flush=True)
    return summarize(rows)


def summarize(rows: list[dict]) -> dict:
    def share(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    def median(key: str, after: int = 3) -> float | None:
        vals = [r[key] for r in rows if r["turn"] > after and r[key] is not None]
        return statistics.median(vals) if vals else None

    return {"turns": len(rows), "t_cover": share("t_in"), "d_cover": share("d_in"),
            "t_ratio": median("t_ratio"), "d_ratio": median("d_ratio"),
            "t_width": median("t_width", 0), "d_width": median("d_width", 0),
            "refused": sum(r["admitted"] == "unsteady" for r in rows),
            "others": statistics.median([r["share"] for r in rows if r["share"] is not None] or [0.0])}


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:.0%}" if pct else f"{x:.2f}"


def print_table(table: list) -> None:
    print("\n| model | regime | others' CPU (median) | turns | refused | TTFT inside 80% | decode inside 80% "
          "| TTFT fc/measured (after 3rd) | decode fc/measured (after 3rd) | TTFT width | decode width |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, regime, s in table:
        print(f"| {label} | {regime} | {fmt(s['others'], True)} | {s['turns']} | {s['refused']} | "
              f"{fmt(s['t_cover'], True)} | {fmt(s['d_cover'], True)} | {fmt(s['t_ratio'])} | {fmt(s['d_ratio'])} | "
              f"{fmt(s['t_width'], True)} | {fmt(s['d_width'], True)} |")


def coverage_main(a, hw, model_paths, bench_text: str, open_engine) -> int:
    from kvtop.runner.settings import Settings

    table = []
    record: list = []
    for label, path in model_paths(a.models.split(",")):
        settings = Settings(path, n_ctx=a.lengths[1] + a.n_gen + 64, n_threads=a.threads).resolved()
        eng = open_engine(settings, in_process=False)
        eng.start()
        try:
            base = eng.tokenize(bench_text)
            eng.reset()
            eng.generate(base[:32], n_predict=4, ignore_eog=True)  # warm-up: first-touch of the weights
            for regime in a.regimes.split(","):
                t0 = time.monotonic()
                s = run_regime(label, path, regime, a, hw, eng, base, settings, record)
                table.append((label, regime, s))
                print(f"{label} {regime}: {json.dumps(s)} ({time.monotonic() - t0:.0f} s)", flush=True)
        finally:
            eng.close()
    print_table(table)
    if a.record:
        with open(a.record, "w", encoding="utf-8") as fh:
            json.dump({"cores": os.cpu_count(), "n_gen": a.n_gen, "threads": a.threads, "lengths": list(a.lengths),
                       "hardware": hw.to_dict(), "turns": record}, fh)
    return 0


def replay_main(a, hw, model_paths) -> int:
    """``--replay FILE``: a ``--record``ed run's turns through today's forecast code (on
    the hardware figures the record carries; a record without them: ``hw``, this
    machine's probe now), printed as the same table."""
    from kvtop.runner.records.trace import Trace
    from kvtop.runner.settings import Settings

    with open(a.replay, encoding="utf-8") as fh:
        rec = json.load(fh)
    if rec.get("hardware"):
        hw = Trace({"hardware": rec["hardware"]}, []).hardware
    paths = dict(model_paths(a.models.split(",")))
    lengths = rec.get("lengths") or list(a.lengths)
    table = []
    for label in dict.fromkeys(t["model"] for t in rec["turns"]):
        path = paths.get(label)
        if path is None:
            print(f"{label}: not among --models; skipped")
            continue
        settings = Settings(path, n_ctx=lengths[1] + rec["n_gen"] + 64, n_threads=rec["threads"]).resolved()
        for regime in dict.fromkeys(t["regime"] for t in rec["turns"] if t["model"] == label):
            turns = [t for t in rec["turns"] if t["model"] == label and t["regime"] == regime]
            s = replay_regime(path, regime, hw, settings, turns, rec["cores"], a.verbose)
            table.append((label, regime, s))
    print_table(table)
    return 0
