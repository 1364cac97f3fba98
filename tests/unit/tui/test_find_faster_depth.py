"""Find faster settings measures at the chat's typical depth (issue 39: "default: the
chat's typical depth, else 512"): its turns' median prompt; 512 before any turn."""

from types import SimpleNamespace

from kvtop.tui.turn.tuning import DEPTH, typical_depth


def turn(prompt_tokens):
    return SimpleNamespace(metrics=SimpleNamespace(prompt_tokens=prompt_tokens))


def test_the_chats_median_prompt_or_512():
    assert typical_depth([]) == DEPTH == 512
    assert typical_depth([turn(40), turn(900), turn(300)]) == 300
    assert typical_depth([turn(0), turn(120)]) == 120  # a turn with no prompt counted is left out
