"""The CPU use line of the Memory pane and the share other processes took during a
turn (the first thing a verdict names when it is large), mixed into the App.

Readings come from runner.system.cpu_use (psutil, cheap); they are taken on the
app's once-a-second memory sample and at a turn's start and end, never per token.
"""

from __future__ import annotations

import os

from textual import work

from runner.system.cpu_use import CPUReading, cpu_use, read_cpu
from runner.units import fmt_rate

from . import messages as msg
from .guards import while_running
from .panes.memory import MemoryPane


LOAD_WINDOW_S = 5.0  # "today's load": what others used over the last seconds, not one jumpy second


class CPUWatch:
    _cpu_last: CPUReading | None = None
    _turn_cpu_start: CPUReading | None = None
    _recorded_share: float | None = None
    _others_recent: tuple = ()  # (monotonic time, cores others used over the second before it)

    def _cpu_reading(self) -> CPUReading:
        pid = self.session.engine.pid
        return read_cpu(pid, os.getpid(), same_process=pid == os.getpid())

    def cpu_tick(self) -> None:
        """With each memory sample: the cores each used since the last one."""
        now = self._cpu_reading()
        if self._cpu_last is not None:
            use = cpu_use(self._cpu_last, now)
            self.query_one(MemoryPane).set_cpu(use)
            if use.others is not None:
                recent = [(t, o) for t, o in self._others_recent if now.wall - t < LOAD_WINDOW_S]
                self._others_recent = (*recent, (now.wall, use.others))
        self._cpu_last = now
        self.probe_again_when_quiet()

    _quiet_reprobed = False

    def probe_again_when_quiet(self) -> None:
        """A CPU probe taken under load is not this machine's ceiling (runner.system.cpu_probe
        ``cpu_profile``): its figures are the load's price taken off, an estimate. Once the
        machine is quiet (others under QUIET_PROBE of the cores at every reading of the
        last LOAD_WINDOW_S) and no turn runs, it is taken again: once a session, in a worker,
        and said like the re-probe after a beaten ceiling."""
        from runner.system.cpu_probe import QUIET_PROBE

        cpu = getattr(self.hw, "cpu", None)
        recent = self._others_recent
        if (cpu is None or cpu.flops_factor is None or self._quiet_reprobed or self.session.turn_running
                or self.session.engine.capabilities.replaying or len(recent) < LOAD_WINDOW_S - 1):
            return
        if max(o for _, o in recent) < QUIET_PROBE * (os.cpu_count() or 1):
            self._quiet_reprobed = True
            self.reprobe(f"the machine is quiet now (the last probe ran at {cpu.busy:.0%} CPU)")

    def cpu_load_now(self):
        """Other processes' use of the CPU over the last seconds (``runner.calibration.load.
        CPULoad``), as the Memory pane shows it; None before a second was measured."""
        from runner.calibration.load import CPULoad

        if not self._others_recent:
            return None
        cores = os.cpu_count() or 1
        return CPULoad(sum(o for _, o in self._others_recent) / len(self._others_recent), cores)

    def turn_cpu_begin(self) -> None:
        self._turn_cpu_start = self._cpu_reading() if self.options.live_system else None

    def turn_others_share(self) -> float | None:
        """Other processes' share of the machine during the turn just ended (0..1); in a
        replay, the share the live run measured (its trace's ``cpu`` record)."""
        start, self._turn_cpu_start = self._turn_cpu_start, None
        recorded, self._recorded_share = self._recorded_share, None
        if start is None:
            return recorded
        return cpu_use(start, self._cpu_reading()).others_share

    def on_recorded_cpu(self, m: msg.RecordedCPU) -> None:
        self._recorded_share = m.others_cpu  # read by the turn's end, the next message

    @while_running
    def on_hardware_probing(self, m: msg.HardwareProbing) -> None:
        from .panes.status import StatusBar

        if self.is_running:  # posted by the inspect worker, which may outlive the app
            self.query_one(StatusBar).set_probing(m.running)


BEATEN = 1.02  # a measured rate this far above its ceiling means the ceiling is wrong


class CeilingCheck:
    """After a turn: a measured rate above its roofline means the probe read low (taken
    while the machine was busy): probe again, once a session, in a worker, and say so."""

    _reprobed = False

    def check_ceilings(self, mt) -> None:
        from runner.physics.machine import ceilings_here, predict_here

        hw = self.hw
        if (self._reprobed or hw is None or hw.cpu is None or self.facts is None or self.layout_kv is None
                or self.session.engine.capabilities.replaying or self.session.loaded is None or not self.session.engine.capabilities.runs_model):
            return
        beaten = []
        depth = mt.prompt_tokens + mt.decode_tokens // 2
        bw, comp = ceilings_here(self.facts, self.layout_kv, hw, self.settings, depth)
        roof = min(r for r in (bw, comp) if r) if (bw or comp) else None
        if roof and mt.decode_tok_s and mt.decode_tok_s > roof * BEATEN:
            beaten.append(f"decode {fmt_rate(mt.decode_tok_s)} beat its {fmt_rate(roof)} ceiling")
        pre = predict_here(self.facts, self.layout_kv, hw, self.settings, max(mt.prefill_tokens, 1), 1,
                           mt.reused_tokens).prefill_tok_s
        if pre and mt.prefill_tok_s and mt.prefill_tok_s > pre * BEATEN and mt.prefill_tokens >= 64:
            beaten.append(f"prefill {fmt_rate(mt.prefill_tok_s)} beat its {fmt_rate(pre)} roofline")
        if beaten:
            self._reprobed = True
            self.reprobe("; ".join(beaten))

    @work(thread=True, exclusive=True, group="reprobe", exit_on_error=False)
    def reprobe(self, why: str) -> None:
        from runner.system.hardware import hardware_profile

        s, old = self.settings, self.hw
        hw = hardware_profile(s.n_gpu_layers, refresh=True, cache_dir=self.paths.cache_dir)
        was = f"{old.cpu.bandwidth_gbs:.1f} GB/s, {old.cpu.tflops:.3f} TFLOPS" if old.cpu else "?"
        now = f"{hw.cpu.bandwidth_gbs:.1f} GB/s, {hw.cpu.tflops:.3f} TFLOPS" if hw.cpu else "?"
        self.post_message(msg.HardwareReprobed(hw, f"{why}: the CPU was probed again: {now} (was {was})"))

    @while_running
    def on_hardware_reprobed(self, m: msg.HardwareReprobed) -> None:
        from .panes.decode import DecodePane

        from .panes.about import AboutBar

        self.hw = m.hardware
        self.query_one(AboutBar).set_hardware(m.hardware)
        self.query_one(DecodePane).set_ceilings(self._ceilings)
        self.setup_calibration()
        self.update_estimate()
        self.notify(m.note, markup=False, timeout=10)
