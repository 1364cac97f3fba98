"""``kvtop load``'s arguments, all checked before anything is sent: the URLs (one
checker for every command that takes a server, runner/server/urls.py), the load's bounds
(a level sends one request at least; a rate or a duration that could not be run is
refused), and concurrency far over the server's slots only with --force.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtop.runner.cli_types import float_in, int_in, positive_float
from kvtop.runner.commands.load_output import FORMATS

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials
    from kvtop.runner.server.props import ServerInfo

# a rate of 0.001/s is one arrival in 17 minutes; 1000/s is more than one client process keeps up with
RATE = float_in(0.001, 1000.0, name="rate")
DURATION = float_in(1.0, 86400.0, name="seconds")  # under 1 s a level measures kvtop's own start
REQUESTS = int_in(1, 100_000, name="requests")
PROGRESS = float_in(0.2, 3600.0, name="seconds")  # the driver looks every 0.2 s


def _float_list(text: str) -> list[float]:
    return [RATE(x) for x in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    from kvtop.runner.commands.bench_plan import int_list
    from kvtop.runner.model.quant_types import KV_CACHE_TYPES

    p = argparse.ArgumentParser(
        prog="kvtop load", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Drive a running llama-server with many concurrent users and show throughput against the\n"
            "batched roof. Each level sends streamed requests of exactly -p prompt tokens (token ids the\n"
            "server tokenised, different for every request) and -n generated tokens (ignore_eos)."),
        epilog=(
            "Start the server with --metrics --slots (kvtop reads deferred requests, its own token\n"
            "counters and the KV in use from them) and -np at least the largest --users level.\n"
            "gen t/s: all users' tokens / the level's time; per user t/s: the median of the server's\n"
            "own decode rate per request; TTFT, ITL and e2e: this client's clock."))
    p.add_argument("url", nargs="*", help="llama-server URL(s); several spread the same load (a fleet)")
    p.add_argument("--server", action="append", default=[], metavar="URL", help="another server (repeatable)")
    p.add_argument("--api-key", metavar="KEY", help="the server's --api-key (default: $LLAMA_API_KEY)")
    g = p.add_argument_group("the load")
    g.add_argument("--users", type=int_list(1, 4096), default=None, metavar="N,N",
                   help="concurrency levels, comma list or range (default: 1,2,4,8 up to the server's slots)")
    g.add_argument("--rate", type=_float_list, default=None, metavar="R,R",
                   help="Poisson arrivals per second instead of --users (open loop), one row per rate")
    g.add_argument("-p", "--n-prompt", dest="n_prompt", type=int_in(1, 1 << 20), default=256, metavar="N",
                   help="prompt tokens of each request (default: 256)")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int_in(1, 1 << 20), default=128, metavar="N",
                   help="generated tokens of each request (default: 128)")
    stop = g.add_mutually_exclusive_group()
    stop.add_argument("--requests", type=REQUESTS, default=None, metavar="N",
                      help="requests per user at each level (--rate: in all, per rate) (default: 4; --rate 16)")
    stop.add_argument("--duration", type=DURATION, default=None, metavar="S",
                      help="seconds each level sends requests for, instead of --requests")
    g.add_argument("--shared-prefix", type=int_in(0, 1 << 20), default=0, metavar="T",
                   help="the first T prompt tokens the same in every request (the prefix cache reuses them)")
    g.add_argument("--endpoint", choices=("completion", "chat"), default="completion",
                   help="/completion (token ids: exact prompt length; default) or /v1/chat/completions "
                        "(the text of those ids, plus the chat template's tokens)")
    g.add_argument("--force", action="store_true",
                   help="allow more users than 4 per slot (or 256), and up to 1024 --rate requests in flight")
    g.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the unmeasured warm-up round")
    r = p.add_argument_group("the roof (as kvtop estimate)")
    r.add_argument("--model", metavar="FILE", help="the server's GGUF (or a vLLM's model folder), when its own "
                   "path is not readable here")
    r.add_argument("--bandwidth-gbs", type=positive_float, metavar="X", help="the server machine's bandwidth, GB/s")
    r.add_argument("--tflops", type=positive_float, metavar="X", help="the server machine's peak TFLOPS")
    r.add_argument("-ngl", "--n-gpu-layers", dest="n_gpu_layers", type=int_in(-1), default=0, metavar="N",
                   help="the server's -ngl: which device's figures the roof uses (default: 0, the CPU)")
    r.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", choices=list(KV_CACHE_TYPES), default="f16",
                   help="K cache type (default: f16; the server's -ctk)")
    r.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", choices=list(KV_CACHE_TYPES), default="f16",
                   help="V cache type (default: f16; the server's -ctv)")
    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", choices=FORMATS, default="md", help="md (default), csv, json or jsonl")
    o.add_argument("--plot", metavar="FILE.svg", help="also write throughput vs users with the roof as SVG")
    o.add_argument("--slo-ttft", type=positive_float, metavar="S", help="target TTFT p95, seconds (the knee)")
    o.add_argument("--slo-tok-s", type=positive_float, metavar="R", help="target per-user tok/s (the knee)")
    o.add_argument("--no-tui", action="store_true", help="print the rows only (also when stdout is not a terminal)")
    o.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    o.add_argument("--progress", type=PROGRESS, default=10.0, metavar="S",
                   help="inside a level, a line on stderr every S seconds: requests done/total, tokens, elapsed, "
                        "ETA, the others' CPU (default: 10)")
    return p


def check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> list[str]:
    urls = list(dict.fromkeys(list(a.url) + list(a.server)))
    if not urls:
        p.error("give a llama-server URL (kvtop load http://127.0.0.1:8080)")
    if a.users and a.rate:
        p.error("give --users or --rate (a closed loop of users, or arrivals at a rate), not both")
    if a.shared_prefix > a.n_prompt:
        p.error(f"--shared-prefix {a.shared_prefix} is longer than the prompt (-p {a.n_prompt})")
    if a.plot and not a.plot.lower().endswith(".svg"):
        p.error("--plot writes SVG: give a FILE ending in .svg")
    return urls


def concurrency_bound(slots: list[int]) -> int:
    """The most requests in flight kvtop sends without --force: 4 per slot, 256 at most."""
    return max(1, min(4 * sum(slots), 256))


def in_flight_bound(a: argparse.Namespace, slots: list[int]) -> int:
    return 1024 if getattr(a, "force", False) else concurrency_bound(slots)


def check_concurrency(a: argparse.Namespace, slots: list[int]) -> str | None:
    """Why the levels ask for more concurrency than makes sense here (without --force), or None."""
    if a.force or not a.users:
        return None
    bound = concurrency_bound(slots)
    if max(a.users) <= bound:
        return None
    return (f"--users {max(a.users)} on {sum(slots)} slot{'s' if sum(slots) != 1 else ''}: more than {bound} users "
            f"(4 per slot, 256 at most) mostly measure the queue; give --force to run it anyway")


def same_address(urls: list[str]) -> tuple[str, str] | None:
    """Two URLs whose hosts resolve to a common address, with the same port and path
    (``127.0.0.1:P`` and ``localhost:P``): one listening socket, so one server, whether or
    not it publishes /metrics. A host that does not resolve is left to the requests."""
    import socket
    from urllib.parse import urlsplit

    seen: dict[tuple[str, int, str], str] = {}
    for url in urls:
        u = urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            addrs = {str(info[4][0]) for info in socket.getaddrinfo(u.hostname or "", port, type=socket.SOCK_STREAM)}
        except (OSError, UnicodeError):
            continue
        path = u.path.rstrip("/")
        for addr in addrs:
            if (addr, port, path) in seen:
                return seen[(addr, port, path)], url
        for addr in addrs:
            seen.setdefault((addr, port, path), url)
    return None


def check_identity(urls: list[str], key: Credentials, infos: Sequence[ServerInfo]) -> str | None:
    """Why two of the URLs are one llama-server (``127.0.0.1:P`` and ``localhost:P``: its
    load counted twice), or None. The identity: the process's start stamp on /metrics
    (runner/server/monitor.py START_HEADER, one value per process) with its build and
    model; a server without /metrics is not compared."""
    from kvtop.runner.server.http import ServerClient, ServerError
    from kvtop.runner.server.monitor import START_HEADER

    same = same_address(urls)
    if same:
        return (f"{same[0]} and {same[1]} are one llama-server (both names reach the same address and path): "
                f"give it once, or its load is counted twice")
    seen: dict[tuple[object, ...], str] = {}
    for url, info in zip(urls, infos):
        client = ServerClient(url, key)
        try:
            started = client.get_text_and_header("/metrics", START_HEADER)[1]
        except ServerError:
            started = None
        finally:
            client.close()
        if not started:
            continue
        ident = (started, info.build_info, info.model_path)
        if ident in seen:
            return (f"{seen[ident]} and {url} are one llama-server (the same process answers both): "
                    f"give it once, or its load is counted twice")
        seen[ident] = url
    return None
