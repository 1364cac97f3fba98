"""``kvtop --server`` (and ``kvtop load``'s live view): the KV pane says what every slot
holds. Its bar is this chat's slot, which stays empty while others fill the rest; a new
user's trial saw "0/1,024 cells" for a whole load run beside four busy slots."""

from __future__ import annotations

from fake_servers import FakeServer, json_reply, llama_routes, slot
from helpers import make_app, wait_until

from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings
from kvtop.tui.panes.kv import KVPane


async def test_the_kv_pane_counts_the_cells_of_every_slot(tmp_path, smollm_shaped):
    busy = [slot(0, processing=True, n_prompt=47), slot(1, processing=True, n_prompt=95), slot(2), slot(3)]
    with FakeServer(llama_routes(4, **{"/slots": json_reply(busy)})) as url:
        app = make_app(Settings(smollm_shaped, n_ctx=1024, n_threads=2), lambda s: ServerEngine(s, url), tmp_path,
                       servers=(url,), live_system=False, write_transcript=False)
        async with app.run_test(size=(120, 40)) as pilot:
            kv = app.query_one(KVPane)
            await wait_until(pilot, lambda: app.loaded is not None and kv.server_cells is not None, timeout=10,
                             what="attached and polled")
            await wait_until(pilot, lambda: "all 4 slots 142/4,096 cells 3.5%" in kv.render().plain, timeout=10,
                             what="every slot's cells on the KV pane")
            assert kv.cells == 0 and "this chat 0/1,024 cells" in kv.render().plain  # the chat's own slot: empty, and said so
            # each kind's bytes are every slot's, as the all-slots line above them (a trial read
            # "■ full 30L×2,048 0 B/45.0 MiB" under "all 2 slots 106/2,048 cells")
            lines = kv.render().plain.splitlines()
            all_bytes = next(ln for ln in lines if ln.startswith("all 4 slots")).split(" · ")[1].split(" of ")[0]
            kind = next(ln for ln in lines if ln.startswith("■ full"))
            assert kind.split("×")[1].split(" ", 1)[1].strip().split("/")[0] == all_bytes != "0 B"
