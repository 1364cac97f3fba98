"""The measurement behind ``kvtop kld``: one model (or two of the same vocabulary) and two
scoring contexts, the same chunks through both, llama-perplexity's statistics as they
accumulate (runner.physics.kld), then decode speed at depth of each context.

Per chunk the base and the candidate decode the same slice in turn, and the slice's
rows of logits are scored at once: memory holds one slice of logits per side, whatever
the number of chunks. Ctrl+C between two slices ends the run with what was scored.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvtop.runner.engine.handles import Model
from kvtop.runner.engine.scoring import ScoringContext, adds_bos, load_model, tokenize_plain
from kvtop.runner.physics.kld import KldStats, NonFinite, Sums, chunk_tokens, first_scored, n_chunks
from kvtop.runner.settings import Settings

Progress = Callable[[int, int, float], None]  # (chunks done, chunks, seconds so far)


class KldError(RuntimeError):
    """Bad input or a failed run: one line (``stats``: what was scored before it, or None)."""

    def __init__(self, msg: str, stats: KldStats | None = None) -> None:
        super().__init__(msg)
        self.stats = stats


@dataclass
class KldResult:
    stats: KldStats
    n_tokens: int  # the text's tokens
    n_ctx: int
    seconds: float  # loading excluded: the chunks through both sides
    decode: dict[str, float] = field(default_factory=dict)  # "base"/"candidate" tok/s at depth, "depth"
    interrupted: bool = False


def vocab_mismatch(base: Model, other: Model, base_tokens: list[int], other_tokens: list[int]) -> str | None:
    """Why two models cannot be compared token by token, or None."""
    nb, no = base.vocab.n_tokens(), other.vocab.n_tokens()
    if nb != no:
        return f"the vocabularies differ: the base has {nb:,} tokens, the other model {no:,}"
    if base_tokens != other_tokens:
        at = next((i for i, (x, y) in enumerate(zip(base_tokens, other_tokens)) if x != y),
                  min(len(base_tokens), len(other_tokens)))
        return (f"the vocabularies differ: the two models tokenize the text differently from token {at:,} on "
                f"({len(base_tokens):,} and {len(other_tokens):,} tokens)")
    return None


class KldRun:
    """Loads what the two sides need; ``run()`` measures; ``close()`` frees it all."""

    def __init__(self, base: Settings, cand: Settings, text: str, n_ctx: int, chunks: int = -1) -> None:
        self.models: list[Model] = []
        self.sides: list[ScoringContext] = []
        try:
            self._open(base, cand, text, n_ctx, chunks)
        except BaseException:
            self.close()
            raise

    def _open(self, base: Settings, cand: Settings, text: str, n_ctx: int, chunks: int) -> None:
        from kvtop.runner.physics.kld import TooShort

        self.models.append(load_model(base))
        if cand.model != base.model:
            self.models.append(load_model(cand))
        bm, cm = self.models[0], self.models[-1]
        self.tokens = tokenize_plain(bm, text)
        if cm is not bm:
            why = vocab_mismatch(bm, cm, self.tokens, tokenize_plain(cm, text))
            if why:
                raise KldError(why)
        try:
            self.n_chunk = n_chunks(len(self.tokens), n_ctx, chunks)
        except TooShort as exc:
            raise KldError(str(exc)) from None
        self.n_ctx = n_ctx
        self.bos = bm.vocab.bos() if adds_bos(bm) else None
        self.sides.append(ScoringContext(bm, base, n_ctx))
        self.sides.append(ScoringContext(cm, cand, n_ctx))

    def run(self, progress: Progress | None = None, decode_tokens: int = 32, rounds: int = 3) -> KldResult:
        sums, t0, done = Sums(), time.monotonic(), 0
        interrupted = False
        try:
            for i in range(self.n_chunk):
                self._chunk(i, sums)
                done += 1
                if progress:
                    progress(done, self.n_chunk, time.monotonic() - t0)
        except KeyboardInterrupt:
            interrupted = True
        seconds = time.monotonic() - t0
        if sums.count == 0:
            raise KldError("stopped before the first chunk was scored" if interrupted else "nothing was scored")
        partial = done < self.n_chunk
        result = KldResult(sums.stats(chunks=done, partial=partial), len(self.tokens), self.n_ctx, seconds,
                           interrupted=interrupted)
        if not partial and decode_tokens > 0:
            last = chunk_tokens(self.tokens, self.n_chunk - 1, self.n_ctx, self.bos)
            try:
                result.decode = self.decode_speed(last, decode_tokens, rounds)
            except KeyboardInterrupt:
                result.interrupted = True
        return result

    def _chunk(self, i: int, sums: Sums) -> None:
        """Chunk ``i`` through both sides, slice by slice; its scored rows into ``sums``."""
        toks = chunk_tokens(self.tokens, i, self.n_ctx, self.bos)
        original = self.tokens[i * self.n_ctx:(i + 1) * self.n_ctx]  # the targets: the text's own tokens
        first = first_scored(self.n_ctx)
        base, cand = self.sides
        base.clear()
        cand.clear()
        for start, n in base.slices(self.n_ctx):
            rows = [side.decode(toks[start:start + n], start, first) for side in self.sides]
            if rows[0] is None or rows[1] is None:
                continue
            p0 = max(start, first)
            keep = min(start + n, self.n_ctx - 1) - p0  # the chunk's last position predicts nothing in it
            if keep <= 0:
                continue
            targets = np.asarray(original[p0 + 1:p0 + 1 + keep], dtype=np.int64)
            try:
                sums.add(rows[0][:keep], rows[1][:keep], targets)
            except NonFinite as exc:
                pos = p0 + exc.row
                raise KldError(f"the {exc.which}'s logits are NaN or infinite at position {pos:,} of chunk "
                               f"{i + 1} (token {i * self.n_ctx + pos:,} of the text): stopped",
                               sums.stats(chunks=i, partial=True) if sums.count else None) from None

    def decode_speed(self, chunk: list[int], n_gen: int, rounds: int) -> dict[str, float]:
        """Each side's decode rate after a context of nearly the whole chunk, the sides
        taking turns ``rounds`` times (a busy moment falls on both): the medians."""
        n_gen = max(1, min(n_gen, self.n_ctx // 4))
        depth = self.n_ctx - n_gen
        rates: list[list[float]] = [[], []]
        for _ in range(rounds):
            for k, side in enumerate(self.sides):
                rates[k].append(side.decode_rate(chunk, depth, n_gen))
        return {"depth": float(depth), "tokens": float(n_gen), "base": statistics.median(rates[0]),
                "candidate": statistics.median(rates[1])}

    def close(self) -> None:
        for side in self.sides:
            side.close()
        self.sides = []
        for m in self.models:
            m.close()
        self.models = []
