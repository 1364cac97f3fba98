"""A llama-server restarted with the same settings and no traffic is a new server too,
seen at the next poll. Nothing kvtop read before told it: the same /props, the counters
at 0 on both sides, no task ids, and no gap when the restart falls between two polls.
The vendored llama-server's /metrics sends ``Process-Start-Time-Unix``, one value per
process (runner/server/monitor.py START_HEADER); the real server, stopped and started
again on the same port with the same flags."""

from __future__ import annotations

from llama_server import free_port, llama_server

from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.identity import RestartWatch
from kvtop.runner.server.monitor import ServerMonitor


def test_a_restart_with_the_same_settings_and_no_traffic_is_seen_at_the_next_poll(llama_server_bin, smollm_path,
                                                                                  tmp_path):
    port = free_port()
    with llama_server(llama_server_bin, smollm_path, slots=2, ctx=1024, port=port, log_dir=str(tmp_path)) as (url, _):
        monitor = ServerMonitor(ServerClient(url))
        watch = RestartWatch(lambda: monitor.client.get_json("/props"))
        first = monitor.poll()
        assert first.started, "the vendored llama-server sends Process-Start-Time-Unix on /metrics"
        assert watch.observe(first) is None
        again = monitor.poll()
        assert again.started == first.started and watch.observe(again) is None  # one process, one value
    with llama_server(llama_server_bin, smollm_path, slots=2, ctx=1024, port=port, log_dir=str(tmp_path)):
        snap = monitor.poll()  # the first poll after the restart: no gap was seen
        restart = watch.observe(snap)
        assert snap.started != first.started and restart is not None, snap
        assert restart.line() == ("llama-server restarted: now 2 slots, n_ctx 1,024/slot "
                                  "(same settings; it started again)")
        assert watch.observe(monitor.poll()) is None  # said once
    monitor.client.close()
