"""What the machine does beside the engine: the Memory pane's once-a-second sample and
CPU use line, the share other processes took during a turn (the first thing a verdict
names when it is large), today's load the forecast is priced at, and the CPU probe taken
again when it read low (a turn beat its ceiling, or the machine turned quiet after a
probe taken under load).

``CPUWatch`` is an object the App holds (``app.cpu_watch``), not a mixin: it owns its
readings and the once-a-session re-probe flags. Readings come from
runner.system.cpu_use (psutil, cheap); they are taken on the memory sample and at a
turn's start and end, never per token. Whether a turn beat its ceilings is the
machine model's to say (runner.physics.here ``Here.beaten_by``).
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import TYPE_CHECKING

from kvtop.runner.pacing import MEMORY_HOLD_S
from kvtop.runner.system.cpu_use import CPUReading, cpu_use, read_cpu
from kvtop.runner.system.memory import take_sample
from kvtop.tui.base import messages as msg
from kvtop.tui.base.guards import while_running

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

LOAD_WINDOW_S = 5.0  # "today's load": what others used over the last seconds, not one jumpy second


class CPUWatch:
    """The App's memory and CPU readings and the CPU re-probes (see the module's docstring)."""

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.last: CPUReading | None = None
        self.turn_start: CPUReading | None = None
        self.turn_readings: list[float] = []  # cores others held at each reading while the turn ran
        self.recorded_share: float | None = None  # a replay's: the share the live run measured
        self.others_recent: tuple = ()  # (monotonic time, cores others used over the second before it)
        self.quiet_reprobed = False  # once a session each
        self.reprobed = False

    def _reading(self) -> CPUReading:
        pid = self.app.session.engine.pid
        return read_cpu(pid, os.getpid(), same_process=pid == os.getpid())

    def sample(self) -> None:
        """Once a second. While a turn runs the sample waits for the turn's next update,
        so the pane redraws in the same frame as the figures instead of in one more."""
        app = self.app
        pid = app.session.engine.pid
        pane = app.dash.memory
        wait = app.session.turn_running and time.monotonic() - pane.drawn_at < MEMORY_HOLD_S
        pane.measuring = "F7" if app.quality.running else "F8" if app.tuning.running else None
        pane.set_sample(take_sample(pid, os.getpid(), same_process=pid == os.getpid()), redraw=not wait)
        app.dash.estimate.set_peak(pane.peak_engine_rss)  # one figure in both panes
        self.tick()
        app.dash.decode.note_waiting(time.monotonic(), max(3.0, 3 * app.refresh_s))

    def tick(self) -> None:
        """With each memory sample: the cores each used since the last one."""
        now = self._reading()
        if self.last is not None:
            use = cpu_use(self.last, now)
            self.app.dash.memory.set_cpu(use)
            if use.others is not None:
                recent = [(t, o) for t, o in self.others_recent if now.wall - t < LOAD_WINDOW_S]
                self.others_recent = (*recent, (now.wall, use.others))
                if self.turn_start is not None:
                    self.turn_readings.append(use.others)
        self.last = now
        self.probe_again_when_quiet()

    def probe_again_when_quiet(self) -> None:
        """A CPU probe taken under load is not this machine's ceiling (runner.system.cpu_probe
        ``cpu_profile``): its figures are lower bounds of the ceilings. Once the
        machine is quiet (others under QUIET_PROBE of the cores at every reading of the
        last LOAD_WINDOW_S) and no turn runs, it is taken again: once a session, in a worker,
        and said like the re-probe after a beaten ceiling."""
        from kvtop.runner.system.cpu_probe import QUIET_PROBE

        app = self.app
        cpu = getattr(app.hw, "cpu", None)
        recent = self.others_recent
        if (cpu is None or not cpu.lower_bound or self.quiet_reprobed or app.session.turn_running
                or app.session.engine.capabilities.replaying or len(recent) < LOAD_WINDOW_S - 1):
            return
        if max(o for _, o in recent) < QUIET_PROBE * (os.cpu_count() or 1):
            self.quiet_reprobed = True
            self.reprobe(f"the machine is quiet now (the last probe ran at {cpu.busy:.0%} CPU)")

    def load_now(self):
        """Other processes' use of the CPU over the last seconds (``runner.calibration.load.
        CPULoad``), as the Memory pane shows it; None before a second was measured."""
        from kvtop.runner.calibration.load import CPULoad

        if not self.others_recent:
            return None
        cores = os.cpu_count() or 1
        return CPULoad(sum(o for _, o in self.others_recent) / len(self.others_recent), cores)

    def turn_begin(self) -> None:
        self.turn_start = self._reading() if self.app.options.live_system else None
        self.turn_readings = []

    def turn_others_share(self) -> float | None:
        """Other processes' share of the machine during the turn just ended (0..1); in a
        replay, the share the live run measured (its trace's ``cpu`` record). The load
        it ran at, with the readings taken through it, is kept for the calibration
        (``turn_load``)."""
        from kvtop.runner.calibration.pace import TurnLoad

        start, self.turn_start = self.turn_start, None
        recorded, self.recorded_share = self.recorded_share, None
        self.last_turn_load = None
        if start is None:
            return recorded
        use = cpu_use(start, self._reading())
        if use.others is not None:
            cores = os.cpu_count() or 1
            self.last_turn_load = TurnLoad(use.others, cores, (*self.turn_readings, use.others))
        return use.others_share

    last_turn_load = None  # the turn just ended: the mean and the readings through it (runner.calibration.pace.TurnLoad)

    def check_ceilings(self, mt) -> None:
        """After a turn: a measured rate above its roofline means the probe read low (taken
        while the machine was busy): probe again, once a session, in a worker, and say so."""
        app = self.app
        here = app.here
        if (self.reprobed or here is None or here.hw.cpu is None or app.session.engine.capabilities.replaying
                or app.session.loaded is None or not app.session.engine.capabilities.runs_model):
            return
        beaten = here.beaten_by(mt)
        if beaten:
            self.reprobed = True
            self.reprobe("; ".join(beaten))

    def reprobe(self, why: str) -> None:
        """The CPU probed again in a worker; ``HardwareReprobed`` brings the new figures."""
        self.app.run_worker(partial(self._probe, why), name="reprobe", group="reprobe", exclusive=True,
                            exit_on_error=False, thread=True)

    def _probe(self, why: str) -> None:
        from kvtop.runner.system.hardware import hardware_profile

        app = self.app
        old = app.hw
        hw = hardware_profile(app.settings.n_gpu_layers, refresh=True, cache_dir=app.paths.cache_dir)
        was = f"{old.cpu.bandwidth_gbs:.1f} GB/s, {old.cpu.tflops:.3f} TFLOPS" if old.cpu else "?"
        now = f"{hw.cpu.bandwidth_gbs:.1f} GB/s, {hw.cpu.tflops:.3f} TFLOPS" if hw.cpu else "?"
        app.post_message(msg.HardwareReprobed(hw, f"{why}: the CPU was probed again: {now} (was {was})"))


class CPUWatching:
    """The App's handlers of what the CPU watch and the probes post (mixed into the App;
    the work is ``CPUWatch``'s and the machine model's)."""

    def on_recorded_cpu(self, m: msg.RecordedCPU) -> None:
        self.cpu_watch.recorded_share = m.others_cpu  # read by the turn's end, the next message

    @while_running
    def on_hardware_probing(self, m: msg.HardwareProbing) -> None:
        if self.is_running:  # posted by the inspect worker, which may outlive the app
            self.dash.status.set_probing(m.running)

    @while_running
    def on_hardware_reprobed(self, m: msg.HardwareReprobed) -> None:
        self.hw = m.hardware
        self.dash.about.set_hardware(m.hardware)
        self.machine.reprobed(m.hardware)
        self.notify(m.note, markup=False, timeout=10)
