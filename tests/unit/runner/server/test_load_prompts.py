"""``kvtop load``'s prompts: exact length, a new draw for every request and every run.
With a fixed seed a second run against the same server sent the first run's prompts,
the server's prefix cache answered them and TTFT fell from 0.61 s to 0.03 s (a new
user's trial)."""

from kvtop.runner.server.load_prompts import PromptMaker


class Tokenizer:
    """Stands in for the /tokenize answer: one id per word."""

    def post_json(self, path, body):
        assert path == "/tokenize"
        return {"tokens": [hash(w) % 50_000 for w in body["content"].split()]}


def test_each_run_draws_new_prompts_and_one_run_keeps_its_own():
    first, second = PromptMaker(Tokenizer(), 64), PromptMaker(Tokenizer(), 64)
    assert len(first.ids(1, 0, 0)) == 64
    assert first.ids(1, 0, 0) == first.ids(1, 0, 0)  # a request's prompt is fixed within the run
    assert first.ids(1, 0, 0) != first.ids(1, 1, 0)  # another user, another prompt
    assert first.ids(1, 0, 0)[:16] != second.ids(1, 0, 0)[:16]  # the next run shares no prefix


def test_the_shared_prefix_is_common_within_a_run_only():
    a, b = PromptMaker(Tokenizer(), 48, shared_prefix=16), PromptMaker(Tokenizer(), 48, shared_prefix=16)
    assert a.ids(1, 0, 0)[:16] == a.ids(2, 3, 1)[:16] and a.ids(1, 0, 0)[16:] != a.ids(2, 3, 1)[16:]
    assert a.ids(1, 0, 0)[:16] != b.ids(1, 0, 0)[:16]


def test_a_given_seed_repeats_the_prompts():
    assert PromptMaker(Tokenizer(), 32, seed="x").ids(1, 0, 0) == PromptMaker(Tokenizer(), 32, seed="x").ids(1, 0, 0)
