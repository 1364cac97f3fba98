"""The roof over ``kvtop load``'s curve: the same physics as the server pane and
``kvtop estimate --server`` (``runner.physics.batching``), at each level's batch.

With B users decoding at depth d, one decode step reads the weights once and every
user's KV at its depth, so the bandwidth roof is B x bandwidth / (weights + B x KV(d));
the compute roof is the peak FLOPS / FLOPs per token (it does not grow with B). The
depth is the middle of a reply (prompt + half of the generated tokens). How many more
conversations fit: the KV cells the server has left / one conversation's length.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvtop.runner.commands.common import Report
from kvtop.runner.physics.batching import batched_decode_ceiling, more_conversations_fit

if TYPE_CHECKING:
    import argparse

    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.physics.kv_bytes import KVLayout
    from kvtop.runner.server.load_driver import LevelRun
    from kvtop.runner.server.props import ServerInfo
    from kvtop.runner.system.hardware import HardwareProfile


FORMULA = ("min(B x bandwidth / (weights + B x KV(depth)), TFLOPS / FLOP per token), B = the users decoding "
           "(at most the slots), depth = -p + -n/2")


class LoadPhysics:
    def __init__(self, facts: ModelFacts | None, layout: KVLayout | None, bandwidth_gbs: float | None,
                 tflops: float | None, total_slots: int,
                 prompt_tokens: int, n_predict: int, note: str):
        self.facts, self.layout = facts, layout
        self.bandwidth_gbs, self.tflops = bandwidth_gbs, tflops
        self.total_slots, self.prompt_tokens, self.n_predict = max(total_slots, 1), prompt_tokens, n_predict
        self.note = note

    def inputs(self) -> Report:
        """The roof's inputs (the json header's ``roof``): bytes a step reads, FLOP a token, the machine."""
        from kvtop.runner.physics.kv_bytes import kv_bytes_read_at_depth
        from kvtop.runner.physics.phase_costs import decode_flops, decode_weight_bytes

        depth = self.prompt_tokens + self.n_predict // 2
        return {"formula": FORMULA, "bandwidth_gbs": self.bandwidth_gbs, "tflops": self.tflops, "depth": depth,
                "weights_bytes": decode_weight_bytes(self.facts) if self.facts is not None else None,
                "kv_bytes_per_user": kv_bytes_read_at_depth(self.layout, depth) if self.layout is not None else None,
                "flops_per_token": decode_flops(self.facts) if self.facts is not None else None,
                "slots": self.total_slots, "note": self.note}

    def formula(self) -> str | None:
        """The roof with its inputs in figures: ``roof = min(B x 33.7 GB/s / (76 MB + B x 1.4 MB KV at
        depth 48), 0.47 TFLOPS / 0.27 GFLOP a token), B = the users decoding (at most 4 slots)``."""
        from kvtop.runner.units import fmt_bytes

        i = self.inputs()
        if i["weights_bytes"] is None or i["kv_bytes_per_user"] is None:
            return None
        bw = (f"B x {self.bandwidth_gbs:.1f} GB/s / ({fmt_bytes(i['weights_bytes'])} weights + B x "
              f"{fmt_bytes(i['kv_bytes_per_user'])} KV at depth {i['depth']:,})") if self.bandwidth_gbs else None
        comp = f"{self.tflops:.2f} TFLOPS / {i['flops_per_token'] / 1e9:.2f} GFLOP a token" \
            if self.tflops and i["flops_per_token"] else None
        if not bw and not comp:
            return None
        body = f"min({bw}, {comp})" if bw and comp else bw or comp
        return f"roof = {body}; B = the users decoding together (at most {self.total_slots} slot{'s' if self.total_slots != 1 else ''})"

    def roofs(self, batch: int) -> tuple[float | None, float | None]:
        """(bandwidth roof, compute roof) in tok/s for ``batch`` users on one server."""
        from kvtop.runner.physics.kv_bytes import kv_bytes_read_at_depth
        from kvtop.runner.physics.phase_costs import decode_flops, decode_weight_bytes

        if self.facts is None or self.layout is None or batch < 1:  # the two come together
            return None, None
        batch = min(batch, self.total_slots)  # more users than slots wait: the batch is the slots
        bw = None
        weights = decode_weight_bytes(self.facts)
        if self.bandwidth_gbs and weights:
            kv = float(kv_bytes_read_at_depth(self.layout, self.prompt_tokens + self.n_predict // 2))
            c = batched_decode_ceiling(self.bandwidth_gbs * 1e9, weights, [kv] * batch)
            bw = c.aggregate_tok_s if c else None
        flops = decode_flops(self.facts)
        return bw, (self.tflops * 1e12 / flops if self.tflops and flops else None)

    def figures(self, row: Report, run: LevelRun, servers: Iterable[int]) -> Report:
        """The physics columns of one row (``servers``: the fleet indices it covers)."""
        from kvtop.runner.commands.load_rows import concurrency

        bw_sum = comp_sum = 0.0
        bw_known = comp_known = True
        for i in servers:
            batch = round(concurrency(run, i)) if run.users is None else len(range(i, run.users, len(run.watch.urls)))
            bw, comp = self.roofs(max(batch, 1))
            bw_known &= bw is not None
            comp_known &= comp is not None
            bw_sum += bw or 0.0
            comp_sum += comp or 0.0
        cells = [run.watch.cells_total[i] for i in servers]
        fit = None
        if None not in cells and row["kv_cells_used"] is not None:
            fit = more_conversations_fit(sum(c for c in cells if c is not None), row["kv_cells_used"],
                                         self.prompt_tokens + self.n_predict)
        return {"batched_roof_tok_s": bw_sum if bw_known else None,
                "compute_roof_tok_s": comp_sum if comp_known else None, "more_conversations_fit": fit}


def server_share(tflops: float | None, source: str, hw: HardwareProfile, url: str,
                 n_gpu_layers: int) -> tuple[float | None, str]:
    """The probe's FLOPS scaled to the local server's CPU threads when it runs fewer than
    the probe did (read from its command line); as they are otherwise (on a GPU, or the
    threads unknown: llama.cpp's default is every physical core, as the probe's)."""
    from kvtop.runner.server.props import local_server_threads

    probe_threads = hw.cpu.threads if hw.cpu is not None else None
    if not tflops or not probe_threads or (hw.gpus and n_gpu_layers):
        return tflops, source
    threads = local_server_threads(url)
    if threads is None or threads >= probe_threads:
        return tflops, source
    return tflops * threads / probe_threads, f"{source}; x{threads}/{probe_threads} for the server's -t {threads}"


def physics_for(info: ServerInfo, url: str, a: argparse.Namespace) -> LoadPhysics:
    """The served model's facts from its GGUF header (when the file is readable here) and
    this machine's probe (a server elsewhere needs --bandwidth-gbs and --tflops)."""
    from kvtop.runner.model.inspect import ModelFileError, load_facts
    from kvtop.runner.physics.kv_bytes import kv_layout
    from kvtop.runner.server.urls import is_loopback

    def none(note: str) -> LoadPhysics:
        return LoadPhysics(None, None, None, None, info.total_slots, a.n_prompt, a.n_predict, note)

    path = a.model or info.local_model
    if not path or not os.path.exists(path):
        named = a.model or info.model_path or "unnamed"
        return none(f"no roof: the server's model ({named}) is not readable here (give --model FILE)")
    try:
        facts = load_facts(path)
    except (ModelFileError, OSError, ValueError) as exc:
        return none(f"no roof: {exc}")
    layout = kv_layout(facts, info.n_ctx, a.cache_type_k, a.cache_type_v)
    if a.bandwidth_gbs or a.tflops:
        bw, tf, source = a.bandwidth_gbs, a.tflops, "--bandwidth-gbs/--tflops"
    elif not is_loopback(url):
        return LoadPhysics(facts, layout, None, None, info.total_slots, a.n_prompt, a.n_predict,
                           "no roof: the server is not on this machine (give --bandwidth-gbs and --tflops)")
    else:
        from kvtop.runner.records.paths import default_paths
        from kvtop.runner.system.hardware import hardware_profile

        hw = hardware_profile(a.n_gpu_layers, cache_dir=default_paths().cache_dir)
        bw, tf, source = hw.bandwidth_gbs, hw.tflops, hw.source
        tf, source = server_share(tf, source, hw, url, a.n_gpu_layers)
    return LoadPhysics(facts, layout, bw, tf, info.total_slots, a.n_prompt, a.n_predict,
                       f"roof: {bw or 0:.1f} GB/s, {tf or 0:.2f} TFLOPS ({source}); KV {a.cache_type_k}/"
                       f"{a.cache_type_v} at depth {a.n_prompt + a.n_predict // 2}")
