"""llama.cpp's n-gram drafters, ported (runner/policy/ngram.py), on hand-made histories
whose drafts can be worked out from common/ngram-map.cpp and common/ngram-mod.cpp."""

from kvtop.runner.policy.ngram import NgramMap, NgramMod, NgramSimple, Speculator


def test_ngram_simple_drafts_what_followed_the_last_n_tokens_before():
    hist = [9, 1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 1, 2]
    # pattern: the last n-1 cached tokens then the sampled one: [1, 2, 3]; found at 1
    # (searching back from len - n - 1), then min(m, len - (1 + n)) = 4 tokens after it
    assert NgramSimple(3, 4).draft(hist, 3) == [4, 5, 6, 7]
    assert NgramSimple(3, 4).draft(hist, 99) == []  # [1, 2, 99] was never seen
    assert NgramSimple(3, 20).draft(hist, 3) == []  # too short a history for n + m + 1
    # searching back from len - n - 1 = 7: [1, 2] at 3, then min(4, 10 - 5) tokens
    assert NgramSimple(2, 4).draft([7, 1, 2, 1, 2, 5, 6, 9, 9, 1], 2) == [5, 6, 9, 9]


def test_ngram_simple_takes_the_latest_match():
    hist = [0, 1, 2, 10, 11, 12, 1, 2, 20, 21, 22, 30, 1]
    assert NgramSimple(2, 3).draft(hist, 2) == [20, 21, 22]


def test_the_speculator_cuts_a_draft_to_n_max_and_drafts_nothing_at_zero():
    hist = [9, 1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 1, 2]
    spec = Speculator([NgramSimple(3, 4)])
    assert spec.draft(hist, 3, 2) == [4, 5]
    assert spec.draft(hist, 3, 0) == []


def test_the_speculator_falls_through_to_the_next_drafter():
    hist = [9, 1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 1, 2]
    spec = Speculator([NgramSimple(3, 20), NgramSimple(3, 4)])
    assert spec.draft(hist, 3, 10) == [4, 5, 6, 7] and spec.last is spec.drafters[1]


def test_ngram_map_k_drafts_as_many_as_were_accepted_last_time():
    hist = [0] + list(range(1, 21)) + [40, 41] + list(range(1, 4))
    m = NgramMap(4, 3, key_only=True)
    m.begin(hist)
    assert m.draft(hist, 4) == [5, 6, 7]
    m.accept(1, False)
    assert m.draft(hist, 4) == [5]
    m.accept(0, False)
    assert m.draft(hist, 4) == []  # llama.cpp's map-k stops drafting a key nobody accepted


def test_ngram_map_k4v_needs_the_most_frequent_value_to_dominate():
    a = [1, 2, 3]
    hist = [0] + a + [7, 8] + [50] + a + [9, 9] + [52, 53, 54, 55] + a[:2]
    m = NgramMap(3, 2, key_only=False, min_hits=1)
    m.begin(hist)
    # values after [1, 2, 3]: [7, 8] once, [9, 9] once: 1 < 2 * 1, so no draft
    assert m.draft(hist, 3) == []
    hist = [0] + a + [7, 8] + [50] + a + [7, 8] + [51] + a + [9, 9] + [52, 53, 54, 55] + a[:2]
    m = NgramMap(3, 2, key_only=False, min_hits=1)
    m.begin(hist)
    # [7, 8] twice against one [9, 9]: a draft, of what followed the latest match (as llama.cpp)
    assert m.draft(hist, 3) == [9, 9]


def test_ngram_mod_follows_its_hash_chain_and_keeps_at_least_n_min():
    hist = list(range(100, 140)) + list(range(100, 104))
    mod = NgramMod(n_match=4, n_max=8, n_min=2, size=1 << 16)
    mod.begin(hist)
    assert mod.draft(hist, 104) == list(range(105, 113))
    strict = NgramMod(n_match=4, n_max=8, n_min=2, size=1 << 16)
    strict.begin(hist)
    assert strict.draft(hist, 999) == []  # nothing follows [101, 102, 103, 999]
