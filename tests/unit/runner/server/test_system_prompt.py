"""``-sys``: every path a chat takes puts the system prompt first, once, by one rule
(runner/policy/system_prompt.py): it was written out three times, in the llama-server
request, its prompt measurement and the vLLM request, and a fourth in the engine."""

import ast
import pathlib
from dataclasses import replace

from kvtop.runner.process.commands import Chat, ChatMessage
from kvtop.runner.process.contract import SERVER
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.server.openai_request import openai_request
from kvtop.runner.settings import Settings

RUNNER = pathlib.Path(__file__).resolve().parents[4] / "runner"
HI = (ChatMessage("user", "Hi"),)
SYS = "You are terse."


def test_every_request_puts_the_system_prompt_first_once():
    s = Settings("m.gguf", system_prompt=SYS)
    llama = ServerEngine(s, "http://127.0.0.1:9")
    vllm = ServerEngine(s, "http://127.0.0.1:9")
    vllm.capabilities = replace(SERVER, token_timings=False)
    for engine in (llama, vllm):
        _path, body = engine._request(Chat(1, HI, 0.0))
        assert body["messages"] == [{"role": "system", "content": SYS}, {"role": "user", "content": "Hi"}]
        own = (ChatMessage("system", "Mine."), *HI)  # the chat's own system message stays, alone
        assert engine._request(Chat(1, own, 0.0))[1]["messages"][0] == {"role": "system", "content": "Mine."}
    assert openai_request(Settings("m.gguf"), Chat(1, HI, 0.0))[1]["messages"] == [{"role": "user", "content": "Hi"}]


def test_the_system_prompt_is_put_in_by_one_function():
    """No module but the helper builds a system message itself."""
    writers = []
    for path in RUNNER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "role" for k in node.keys) \
                    and any(isinstance(v, ast.Constant) and v.value == "system" for v in node.values):
                writers.append(path.relative_to(RUNNER).as_posix())
    assert writers == ["policy/system_prompt.py"], writers
