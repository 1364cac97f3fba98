"""Self-speculative drafters: llama.cpp's n-gram lookups, ported line for line.

The vendored llama.cpp's ``common/ngram-map.cpp`` (``ngram-simple``, ``ngram-map-k``,
``ngram-map-k4v``) and ``common/ngram-mod.cpp`` with ``common/speculative.cpp``'s
wrappers (``ngram-mod``'s chunked adds and its low-acceptance reset), so the same
flags draft the same tokens as llama-server's. Pure Python: no llama.cpp here, each
drafter is a function of the token history it is shown.

A drafter sees ``tokens`` (the history whose KV is in the cache) and ``sampled`` (the
token the target just sampled, not yet in the cache), as llama-server's
``common_speculative_draft_params`` do, and returns the tokens it guesses follow.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

LCG_FACTOR = 2654435761  # common/ngram-map.cpp
HASH_MAP_SIZE = 262144  # COMMON_NGRAM_HASH_MAP_SIZE
MAX_VALUES = 4  # COMMON_NGRAM_MAX_VALUES
MAX_VALUE_COUNT = 16380  # COMMON_NGRAM_MAX_VALUE_COUNT
MOD_SIZE = 1 << 22  # ngram-mod's table: 4,194,304 entries (common/speculative.cpp), not bytes
MOD_FACTOR = 6364136223846793005
EMPTY = -1
M32, M64 = (1 << 32) - 1, (1 << 64) - 1


class Drafter(Protocol):
    name: str

    def begin(self, prompt: Sequence[int]) -> None: ...

    def draft(self, tokens: Sequence[int], sampled: int, n_max: int) -> list[int]: ...

    def accept(self, n_accepted: int, is_other: bool) -> None: ...


class NgramSimple:
    """``common_ngram_simple_draft``: the last ``size_n`` tokens (the sampled one last),
    found again in the history searching backwards: the ``size_m`` tokens after it.
    Stateless; ``min_hits`` is read by llama.cpp's flag but not by this drafter."""

    name = "ngram-simple"

    def __init__(self, size_n: int = 12, size_m: int = 48) -> None:
        self.n, self.m = size_n, size_m

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def accept(self, n_accepted: int, is_other: bool) -> None:
        pass

    def draft(self, tokens: Sequence[int], sampled: int, n_max: int = 0) -> list[int]:
        n, m, cur = self.n, self.m, len(tokens)
        if cur <= n + m + 1:
            return []
        pattern = list(tokens[cur - n + 1:]) + [sampled]
        first, match_pos = pattern[0], 0
        for j in range(cur - n - 1, 0, -1):
            if tokens[j] == first and list(tokens[j:j + n]) == pattern:
                match_pos = j
                break
        if match_pos == 0:
            return []
        copy_max = min(m, cur - (match_pos + n))
        if copy_max < n:
            return []
        return list(tokens[match_pos + n:match_pos + n + copy_max])


def _hash(tokens: Sequence[int], start: int, n: int) -> int:
    h = 0
    for i in range(n):
        h = (h * LCG_FACTOR + tokens[start + i]) & M32
    return h


@dataclass
class _Value:
    value_idx: int = 0
    value_num: int = 0
    n_accepted: int = -1


@dataclass
class _Key:
    key_idx: int
    stat_idx: int
    key_num: int
    values: list[_Value]


class NgramMap:
    """``common_ngram_map``: ``key_only`` is ``ngram-map-k`` (the m tokens after the
    key, as many as were accepted last time), else ``ngram-map-k4v`` (the most frequent
    of up to four values after the key, once it has ``min_hits`` hits)."""

    def __init__(self, size_n: int = 12, size_m: int = 48, key_only: bool = True, min_hits: int = 1) -> None:
        self.name = "ngram-map-k" if key_only else "ngram-map-k4v"
        self.n, self.m, self.key_only, self.min_hits = size_n, size_m, key_only, min_hits
        self.keys: list[_Key] = []
        self.size_last_begin = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        self.idx_last_check = 0
        self.key_map = array("I", [0]) * HASH_MAP_SIZE
        self.key_map_last_idx = 0

    def _matches(self, inp: Sequence[int], at: int, key: Sequence[int]) -> bool:
        for k in range(self.n):
            if inp[at + k] != key[k]:
                return False
        return True

    def begin(self, tokens: Sequence[int]) -> None:  # common_ngram_map_begin
        size_begin = len(tokens)
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - self.n - self.m if size_begin > self.n + self.m else 0
        if size_begin < self.idx_last_check:
            km = self.key_map
            for i in range(len(km)):
                if km[i] != 0 and km[i] >= cleanup:
                    km[i] = 0
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            if self.keys:
                self._cleanup_keys(cleanup)
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin

    def _cleanup_keys(self, cleanup: int) -> None:
        for i in range(len(self.keys) - 1, -1, -1):
            key = self.keys[i]
            if key.key_idx >= cleanup:
                del self.keys[i]
                continue
            if self.key_only:
                continue
            for j in range(MAX_VALUES - 1, -1, -1):
                if key.values[j].value_idx != 0 and key.values[j].value_idx >= cleanup:
                    last = key.values[-1].n_accepted  # the last slot keeps its n_accepted, as in C
                    del key.values[j]
                    key.values.append(_Value(0, 0, last))
            if key.values[0].value_idx == 0:
                del self.keys[i]

    def _search(self, inp: Sequence[int], key: list[int]) -> int:
        n, m, cur = self.n, self.m, len(inp)
        match_pos = 0
        idx_key = self.key_map[_hash(key, 0, n) % HASH_MAP_SIZE]
        if idx_key != 0 and idx_key < cur - n - m - 1 and self._matches(inp, idx_key, key):
            match_pos = idx_key
        if match_pos == 0 and self.size_last_begin > n + m + 1:
            for j in range(self.size_last_begin - n - m - 1, self.key_map_last_idx, -1):
                if self._matches(inp, j, key):
                    match_pos = j
                    break
        if match_pos == 0:
            for j in range(cur - n - m - 1, max(self.size_last_begin, self.key_map_last_idx), -1):
                if self._matches(inp, j, key):
                    match_pos = j
                    break
        return match_pos

    def _index(self, inp: Sequence[int]) -> None:
        """Add the new n-grams' hashes, in the search's order (a collision keeps the first)."""
        n, m, cur, km = self.n, self.m, len(inp), self.key_map
        ranges = []
        if self.size_last_begin > n + m + 1:
            ranges.append(range(self.size_last_begin - n - m - 1, self.key_map_last_idx, -1))
        ranges.append(range(cur - n - m - 1, max(self.size_last_begin, self.key_map_last_idx), -1))
        for r in ranges:
            for j in r:
                h = _hash(inp, j, n) % HASH_MAP_SIZE
                if km[h] == 0:
                    km[h] = j
        self.key_map_last_idx = max(cur - n - m - 1, self.key_map_last_idx)

    def draft(self, inp: Sequence[int], sampled: int, n_max: int = 0) -> list[int]:  # common_ngram_map_draft
        self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = False, 0, 0
        n, m, cur = self.n, self.m, len(inp)
        if cur < 2 * n + m:
            return []
        self.idx_last_check = cur
        key = list(inp[cur - n + 1:]) + [sampled]
        match_pos = self._search(inp, key)
        self._index(inp)
        if match_pos == 0:
            return []
        offset = next((i for i, k in enumerate(self.keys) if self._matches(inp, k.key_idx, key)), len(self.keys))
        if offset == len(self.keys):
            self.keys.append(_Key(match_pos, 0, 0, [_Value(0, 0, m) for _ in range(MAX_VALUES)]))
        cur_key = self.keys[offset]
        cur_key.key_num = min(cur_key.key_num + 1, MAX_VALUE_COUNT)
        slot = 0
        if not self.key_only:
            if cur_key.key_num < self.min_hits:
                return []
            slot = self._best_value(inp, key, cur_key, match_pos)
            if slot < 0:
                return []
        count = min(m, cur_key.values[slot].n_accepted)
        out = [inp[match_pos + n + i] for i in range(max(count, 0))]
        self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, offset, slot
        return out

    def _best_value(self, inp: Sequence[int], key: list[int], cur_key: _Key, match_pos: int) -> int:
        """ngram-map-k4v: count the m-grams after each occurrence of the key; the most
        frequent one's slot, or -1 when it is not at least twice the others together."""
        n, m = self.n, self.m
        for i in range(cur_key.stat_idx, match_pos + 1):
            if not self._matches(inp, i, key):
                continue
            begin, found = i + n, -1
            for v in range(MAX_VALUES):
                val = cur_key.values[v]
                if val.value_idx == 0:
                    val.value_idx, val.value_num, val.n_accepted = begin, 0, m
                    found = v
                    break
                if all(inp[begin + j] == inp[val.value_idx + j] for j in range(m)):
                    found = v
                    break
            if found >= 0:
                cur_key.values[found].value_num = min(cur_key.values[found].value_num + 1, MAX_VALUE_COUNT)
        cur_key.stat_idx = match_pos
        max_occur, slot_max = 0, 0
        for v in range(MAX_VALUES):
            if cur_key.values[v].value_num > max_occur:
                max_occur, slot_max = cur_key.values[v].value_num, v
        sum_occur = sum(cur_key.values[v].value_num for v in range(MAX_VALUES) if v != slot_max)
        if sum_occur > 0 and max_occur < 2 * sum_occur:
            return -1
        return slot_max

    def accept(self, n_accepted: int, is_other: bool) -> None:  # common_ngram_map_accept
        if is_other or not self.last_draft_created:
            return
        self.keys[self.last_draft_key_idx].values[self.last_draft_value_idx].n_accepted = n_accepted


class NgramMod:
    """``ngram-mod``: a 4M-entry hash from each ``n_match``-gram to the token after it,
    filled as the history grows; a draft follows the chain from the last n-gram, at
    least ``n_min`` tokens or none. Reset when a quarter full, or after five drafts in
    a row with under a quarter accepted."""

    name = "ngram-mod"

    def __init__(self, n_match: int = 24, n_max: int = 64, n_min: int = 48, size: int = MOD_SIZE) -> None:
        self.n, self.n_max, self.n_min = n_match, n_max, n_min
        self.entries = array("i", [EMPTY]) * size
        self.used = 0
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0

    def _idx(self, tokens: Sequence[int], at: int) -> int:
        res = 0
        for i in range(self.n):
            res = (res * MOD_FACTOR + (tokens[at + i] & M64)) & M64
        return res % len(self.entries)

    def _add(self, tokens: Sequence[int], at: int) -> None:
        i = self._idx(tokens, at)
        if self.entries[i] == EMPTY:
            self.used += 1
        self.entries[i] = tokens[at + self.n]

    def reset(self) -> None:
        self.entries = array("i", [EMPTY]) * len(self.entries)
        self.used = 0

    def begin(self, prompt: Sequence[int]) -> None:
        self.i_last, self.n_draft_last = 0, 0
        n = self.n
        if len(prompt) < n:
            return
        for i in range(len(prompt) - n):
            self._add(prompt, i)
        self.i_last = len(prompt) - n
        if self.used / len(self.entries) > 0.25:
            self.reset()

    def draft(self, tokens: Sequence[int], sampled: int, n_max: int = 0) -> list[int]:
        self.n_draft_last = 0
        n, cur = self.n, len(tokens)
        if cur < n:
            return []
        if self.i_last + 32 < cur:
            for i in range(self.i_last, cur - n):
                self._add(tokens, i)
            self.i_last = cur - n
        result = list(tokens[cur - n + 1:]) + [sampled]
        for i in range(self.n_max):
            tok = self.entries[self._idx(result, i)]
            if tok == EMPTY:
                if i < self.n_min:
                    return []
                break
            result.append(tok)
        out = result[n:]
        self.n_draft_last = len(out)
        return out

    def accept(self, n_accepted: int, is_other: bool) -> None:
        if is_other or self.n_draft_last <= 0:
            return
        if n_accepted / self.n_draft_last < 0.25:
            self.n_low += 1
            if self.n_low >= 5:
                self.reset()
                self.n_low, self.i_last = 0, 0
        else:
            self.n_low = 0


class Speculator:
    """``common_speculative``: the drafters in llama.cpp's order of preference; the first
    with a draft drafts (cut to ``n_max``), and hears how much of it was accepted."""

    def __init__(self, drafters: Sequence[Drafter]) -> None:
        self.drafters = list(drafters)
        self.last: Drafter | None = None

    def begin(self, prompt: Sequence[int]) -> None:
        for d in self.drafters:
            d.begin(prompt)

    def draft(self, tokens: Sequence[int], sampled: int, n_max: int) -> list[int]:
        if n_max <= 0:
            return []
        for d in self.drafters:
            out = d.draft(tokens, sampled, n_max)
            if out:
                self.last = d
                return out[:n_max]
        return []

    def accept(self, n_accepted: int) -> None:
        if self.last is None:
            return
        self.last.accept(n_accepted, False)
        for d in self.drafters:
            if d is not self.last:
                d.accept(n_accepted, True)


ORDER = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "draft-simple")  # common_speculative_init's
