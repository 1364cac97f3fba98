"""``kvtop --server URL [--server URL …]``: watch running llama-servers instead of a model
kvtop loads. Checks the first server before the UI starts (a server that is down, a
wrong API key or a URL that is not llama-server exits 1 with one line)."""

from __future__ import annotations

import argparse
import sys

from kvtop.runner.sanitize import clean_line


def add_server_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("watching a llama-server")
    g.add_argument("--server", action="append", metavar="URL",
                   help="attach to a running llama-server (start it with --metrics --slots); repeat for a fleet")
    g.add_argument("--server-file", metavar="FILE", help="a file of llama-server URLs, one per line")
    g.add_argument("--api-key", metavar="KEY", help="the server's --api-key (default: $LLAMA_API_KEY)")
    from kvtop.runner.cli_types import positive_float

    g.add_argument("--bandwidth-gbs", type=positive_float, metavar="X",
                   help="the server machine's memory bandwidth, GB/s (a remote server cannot be probed)")
    g.add_argument("--tflops", type=positive_float, metavar="X", help="the server machine's peak TFLOPS")


def read_server_file(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return [ln.strip() for ln in fh.read(1 << 20).splitlines() if ln.strip() and not ln.startswith("#")]


def server_main(p: argparse.ArgumentParser, a: argparse.Namespace, argv: list[str], guarded: bool = False,
                hardware=None, run=None) -> int:
    """``hardware``: a fixed HardwareProfile instead of the probe (a seam for tests);
    ``run``: what runs the app (default: tui/start/run.py's ``run_until_quit``; ``kvtop`` passes
    ``tui.launch.run_until_quit``, the seam tests replace)."""
    from kvtop.runner.server.http import ServerClient, ServerError
    from kvtop.runner.server.props import read_server_info
    from kvtop.runner.server.urls import api_key_from_env, is_loopback
    from kvtop.runner.settings import settings_from_args

    if a.context_shift is not None or a.keep is not None:
        # kvtop sends the server the whole chat; what happens when it does not fit is the
        # server's own setting, which kvtop can neither read nor change
        p.error("--context-shift, --no-context-shift and --keep are llama-server's to decide with --server: "
                "start llama-server with them (kvtop sends the whole chat; a prompt over the server's context "
                "is refused by the server, and the chat pane shows its reason)")
    from kvtop.runner.server.credentials import Credentials

    # the key and the URLs' logins stay inside Credentials (the HTTP header); every URL
    # kept, shown or recorded from here on is without user:password@
    key = Credentials(api_key_from_env(a.api_key))
    urls = list(a.server or [])
    try:
        if a.server_file:
            urls += read_server_file(a.server_file)
        urls = list(dict.fromkeys(key.add(u) for u in urls))
    except (OSError, ServerError) as exc:
        p.error(clean_line(str(exc)))
    if not urls:
        p.error(f"--server-file {clean_line(a.server_file or '')}: no URL in it (one per line; # starts a comment)")
    client = ServerClient(urls[0], key)
    try:
        info = read_server_info(client)
    except ServerError as exc:
        print(f"kvtop: {clean_line(str(exc), 400)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl+C while the server loads its model (a wait of up to 2 minutes)
        print(f"kvtop: stopped before {clean_line(urls[0], 200)} answered", file=sys.stderr)
        return 130
    finally:
        client.close()
    if guarded:
        from kvtop.tui.start.run import refusal

        refused = refusal(a, terminal=True)
        if refused:
            print(refused, file=sys.stderr)
            return 2
    model = a.model_flag or a.model or info.local_model or ""  # a GGUF, or the folder a vLLM serves
    a.ctx_size = info.n_ctx
    settings = settings_from_args(model or info.model_path or urls[0], a)
    settings = type(settings)(**{**settings.__dict__, "n_ctx": info.n_ctx})
    return run_server_app(settings, urls, key, a, argv, local_model=bool(model),
                          local=is_loopback(urls[0]), guarded=guarded, hardware=hardware, run=run)


def run_server_app(settings, urls, key, a, argv, local_model: bool, local: bool, guarded: bool = False,
                   hardware=None, run=None) -> int:
    app = server_app(settings, urls, key, a, argv, local_model, local, hardware)
    if run is None:
        from kvtop.tui.start.run import run_until_quit as run  # signals, the summary with the server's own figures

    return run(app, guarded=guarded)


def server_app(settings, urls, key, a, argv, local_model: bool, local: bool, hardware=None, **more):
    """The ``kvtop --server`` app; ``more``: further AppOptions (kvtop load's ``load``)."""
    from kvtop.runner.records.paths import default_paths
    from kvtop.runner.session.source import EngineSource
    from kvtop.runner.system.hardware import HardwareProfile
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base.options import AppOptions

    # None: a server on this machine is probed like a local model (NVML, CPU probe)
    if hardware is None and (a.bandwidth_gbs or a.tflops):
        hardware = HardwareProfile(a.bandwidth_gbs, a.tflops, "--bandwidth-gbs/--tflops", None, None)
    elif hardware is None and not local:
        hardware = HardwareProfile(None, None, "unknown: the server is not on this machine "
                                   "(give --bandwidth-gbs and --tflops)", None, None)
    # --ui-nice as for a local model: on the server's machine kvtop's redraws compete
    # with llama-server's decode threads (the nice applies once the server's pid is known)
    from kvtop.runner.redact import scrub_argv

    opts = AppOptions(argv=scrub_argv([sys.argv[0]] + argv), servers=tuple(urls), api_key=key, hardware=hardware,
                      model_readable=local_model, refresh=a.refresh, trace_path=a.trace, ui_nice=a.ui_nice,
                      prompt_file=a.prompt_file, prompt_text=a.prompt, bundle_text=a.bundle_text,
                      notes=tuple(getattr(a, "flag_notes", ())), **more)
    return KvtopApp(settings, EngineSource(servers=tuple(urls), api_key=key), default_paths(), opts)


def load_app(la, urls: list[str], key, infos, hardware=None):
    """``kvtop load``'s live view: the ``kvtop --server`` dashboard of the first server (its
    GGUF read as --server reads it, or load's --model), with the load pane and the sweep
    (tui/server/load_view.py). No chat, so no transcript and no trace; kvtop's own priority is
    left alone (the sweep's client runs in this process, and its CPU is measured)."""
    import argparse

    from kvtop.runner.server.urls import is_loopback
    from kvtop.runner.settings import settings_from_args
    from kvtop.tui.server.load_view import LoadRun

    info = infos[0]
    model = la.model or info.local_model or ""
    flags = argparse.Namespace(n_ctx=info.n_ctx, n_gpu_layers=la.n_gpu_layers, cache_type_k=la.cache_type_k,
                               cache_type_v=la.cache_type_v)
    settings = settings_from_args(model or info.model_path or urls[0], flags)
    a = argparse.Namespace(bandwidth_gbs=la.bandwidth_gbs, tflops=la.tflops, refresh=None, trace=None, ui_nice=0,
                           prompt_file=None, prompt=None, bundle_text=False)
    return server_app(settings, urls, key, a, ["load", *urls], local_model=bool(model), local=is_loopback(urls[0]),
                      hardware=hardware, load=LoadRun(la, urls, key, infos), write_transcript=False,
                      record_trace=False)


def load_live(la, urls: list[str], key, infos):
    """The sweep with its live view (tui/start/cli.py); its result, None when it never ended."""
    from kvtop.tui.start.run import run_app

    app = load_app(la, urls, key, infos)
    try:
        run_app(app)
    finally:
        app.control.shutdown()
    return app.options.load.settle()
