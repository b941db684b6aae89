"""Speculative decoding is exact: with drafts right and wrong in scripted patterns, in ragged batches, greedy and
seeded generations emit the tokens of plain decoding and leave the same caches and states; sampled tokens are
distributed as without speculation (chi-square, disjoint seeds)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.agent_episode import MID_SIZE_CONFIG
from benchmarks.random_checkpoint import write_tiny_checkpoint
from model.drafting import Draft, NgramIndex
from model.engine import Engine
from model.engine_options import EngineOptions
from model.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0)
# (right, wrong) tokens per draft, in turn: full acceptance, none, partial, no draft at all (a plain step).
PATTERNS = {
    "all_right": [(4, 0)],
    "all_wrong": [(0, 3)],
    "mixed": [(2, 1), (0, 0), (5, 3), (1, 0), (0, 2), (3, 1)],
}
PROMPTS = [[11, 12, 13, 14, 15, 16], [21, 22, 23], [31, 32, 33, 34, 35, 36, 37, 38]]
LIMITS = [120, 90, 60]


class ScriptedDrafter:
    """Proposes each row's reference continuation: right for the pattern's first count of tokens, then wrong for
    its second (the reference token plus one)."""

    name = "scripted"

    def __init__(self, references: dict[tuple[int, ...], list[int]], pattern, vocab_size: int) -> None:
        self.references = references
        self.pattern = pattern
        self.vocab_size = vocab_size
        self.calls = 0

    def draft(self, text: NgramIndex, limit: int) -> Draft:
        prompt = next(p for p in self.references if tuple(text.tokens[: len(p)]) == p)
        reference = self.references[prompt]
        generated = len(text) - len(prompt)
        right, wrong = self.pattern[self.calls % len(self.pattern)]
        self.calls += 1
        ahead = reference[generated : generated + right + wrong]
        proposal = ahead[:right] + [(token + 1) % self.vocab_size for token in ahead[right:]]
        return Draft(proposal[:limit], 1)

    def finished(self, generated: list[int], before: list[int]) -> None:
        pass


def _engine(path, speculate: str, **options) -> Engine:
    return Engine.load(
        path, EngineOptions(device="cpu", dtype="float32", max_context=512, speculate=speculate, **options)
    )


def _generate(engine: Engine, sampling: SamplingParams, limits=LIMITS, prompts=PROMPTS):
    session = engine.new_session(len(prompts), 400)
    session.append([list(p) for p in prompts])
    return session, session.generate(list(limits), sampling, stop_ids=set())


@pytest.fixture(scope="module")
def plain(checkpoint_dirs):
    return {name: _engine(path, "off") for name, path in checkpoint_dirs.items()}


def _speculating(path, references, pattern, vocab_size, **options) -> Engine:
    """An engine checking every scripted draft whole (no draft budget cutting them)."""
    engine = _engine(path, "ngram", **options)
    engine.drafter = ScriptedDrafter(references, pattern, vocab_size)
    engine.draft_budget = None
    return engine


def _assert_same_state(speculated, plain_session) -> None:
    """Equal to fp32 rounding: a verify pass attends over its positions in one call, which sums in another order
    than one decode step per token (1e-5 absolute, 1e-3 relative)."""
    lengths = plain_session.processed_lengths
    assert speculated.processed_lengths == lengths
    assert speculated.lengths == plain_session.lengths
    trunk_kv = speculated.cache.kv[: len(plain_session.cache.kv)]  # a draft head's own cache follows
    for (k, v), (pk, pv) in zip(trunk_kv, plain_session.cache.kv, strict=True):
        for row, length in enumerate(lengths):
            torch.testing.assert_close(k[row, :, :length], pk[row, :, :length], rtol=1e-3, atol=1e-5)
            torch.testing.assert_close(v[row, :, :length], pv[row, :, :length], rtol=1e-3, atol=1e-5)
    for mine, theirs in zip(
        speculated.cache.conv + speculated.cache.recurrent,
        plain_session.cache.conv + plain_session.cache.recurrent,
        strict=True,
    ):
        torch.testing.assert_close(mine, theirs, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_greedy_tokens_and_states_equal_plain_decoding(variant, pattern, checkpoint_dirs, plain):
    plain_session, expected = _generate(plain[variant], GREEDY)
    references = {tuple(p): out for p, out in zip(PROMPTS, expected, strict=True)}
    vocab = plain[variant].config.vocab_size
    engine = _speculating(checkpoint_dirs[variant], references, PATTERNS[pattern], vocab)
    session, tokens = _generate(engine, GREEDY)
    assert tokens == expected
    _assert_same_state(session, plain_session)
    stats = session.speculation
    assert stats.verify_passes > 0
    if pattern == "all_wrong":
        assert stats.accepted == 0
    else:
        assert stats.accepted > 0
        # A pass emits its accepted tokens and one more: fewer forward passes than tokens.
        assert stats.verify_passes + stats.steps < sum(LIMITS) - len(LIMITS)
    # The session continues as a plain one would: appending and generating again agrees.
    session.append([[5], [], [7]])
    plain_session.append([[5], [], [7]])
    assert session.generate(20, GREEDY, set()) == plain_session.generate(20, GREEDY, set())


def test_stops_and_rows_sitting_out(checkpoint_dirs, plain):
    """A stop id inside an accepted draft ends the row there; rows not asked for keep their pending tokens."""
    engine_plain = plain["text_tied"]
    _, expected = _generate(engine_plain, GREEDY)
    stop = {expected[0][30], expected[2][10]}
    plain_session = engine_plain.new_session(3, 400)
    plain_session.append([list(p) for p in PROMPTS])
    plain_out = plain_session.generate([100, 100], GREEDY, stop, rows=[0, 2])
    references = {tuple(p): out for p, out in zip(PROMPTS, expected, strict=True)}
    engine = _speculating(checkpoint_dirs["text_tied"], references, [(8, 0)], engine_plain.config.vocab_size)
    session = engine.new_session(3, 400)
    session.append([list(p) for p in PROMPTS])
    assert session.generate([100, 100], GREEDY, stop, rows=[0, 2]) == plain_out
    assert all(out[-1] in stop for out in plain_out)
    _assert_same_state(session, plain_session)


def test_seeded_sampling_emits_the_tokens_of_plain_decoding(checkpoint_dirs, plain):
    sampling = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, seed=7)
    plain_session, expected = _generate(plain["text_tied"], sampling)
    references = {tuple(p): out for p, out in zip(PROMPTS, expected, strict=True)}
    vocab = plain["text_tied"].config.vocab_size
    engine = _speculating(checkpoint_dirs["text_tied"], references, PATTERNS["mixed"], vocab)
    session, tokens = _generate(engine, sampling)
    assert tokens == expected
    assert session.speculation.accepted > 0
    _assert_same_state(session, plain_session)


def _chi_square_p(first: list[int], second: list[int]) -> float:
    """p-value of a two-sample chi-square test that both lists are drawn from one distribution (values seen
    fewer than 10 times pooled, so that every expected count is at least 5)."""
    values = sorted(set(first) | set(second))
    counts = torch.tensor([[first.count(v), second.count(v)] for v in values], dtype=torch.float64)
    common = counts.sum(1) >= 10
    table = torch.cat([counts[common], counts[~common].sum(0, keepdim=True)])
    table = table[table.sum(1) > 0]
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    statistic = ((table - expected) ** 2 / expected).sum()
    degrees = table.shape[0] - 1
    return float(torch.special.gammaincc(torch.tensor(degrees / 2.0), statistic / 2))


# Slow (left out of the fast tier): 800 sampled generations.
@pytest.mark.slow
def test_sampled_tokens_follow_the_distribution_of_plain_sampling(checkpoint_dirs, plain):
    """Disjoint seeds: speculative and plain sampling are two samples of one distribution, at each of the
    first three generated positions, with the draft (plain decoding's most frequent continuation) accepted
    and rejected both often."""
    path = checkpoint_dirs["text_mqa"]
    prompt = [[3, 4, 5, 6]]
    samples = 400

    def runs(engine: Engine, seeds: range) -> list[list[int]]:
        out = []
        for seed in seeds:
            session = engine.new_session(1, 32)
            session.append(prompt[0])
            out.append(session.generate(3, SamplingParams(temperature=1.0, top_k=6, seed=seed), set())[0])
        return out

    plain_runs = runs(plain["text_mqa"], range(samples))
    likely = [max(set(column), key=column.count) for column in zip(*plain_runs, strict=True)]
    engine = _engine(path, "ngram")
    engine.drafter = ScriptedDrafter({tuple(prompt[0]): likely}, [(3, 0)], engine.config.vocab_size)
    engine.draft_budget = None
    speculative_runs = runs(engine, range(samples, 2 * samples))
    for position in range(3):
        first = [run[position] for run in plain_runs]
        second = [run[position] for run in speculative_runs]
        assert _chi_square_p(first, second) > 1e-3, position
    accepted = sum(run[0] == likely[0] for run in speculative_runs)
    assert 0.1 * samples < accepted < 0.9 * samples


# Slow (left out of the fast tier): a mid-size checkpoint.
@pytest.mark.slow
def test_mid_size_greedy_over_hundreds_of_tokens(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "mid", text_config=MID_SIZE_CONFIG, seed=3)
    prompts = [[101, 102, 103, 104] * 3, [205, 206, 207]]
    plain_session, expected = _generate(_engine(path, "off"), GREEDY, [300, 240], prompts)
    engine = _engine(path, "ngram")
    references = {tuple(p): out for p, out in zip(prompts, expected, strict=True)}
    engine.drafter = ScriptedDrafter(references, PATTERNS["mixed"], engine.config.vocab_size)
    engine.draft_budget = None
    session, tokens = _generate(engine, GREEDY, [300, 240], prompts)
    assert tokens == expected
    _assert_same_state(session, plain_session)


def test_replayed_texts_replace_the_targets_within_the_block_only(checkpoint_dirs):
    replayed = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 9, 9]]
    engine = _engine(checkpoint_dirs["text_tied"], "ngram")
    session, reference = engine.new_session(2, 64), engine.new_session(2, 64)
    for each in (session, reference):
        each.append([[5, 6, 7], [1, 2]])
    with session.decoding.replaying(replayed):
        # Limits past a replayed text stop at its end.
        assert session.generate([8, 10], GREEDY, set()) == replayed
    assert session.speculation.accepted > 0  # "5 6 7" repeats: its drafts agree with the replayed tokens
    # After the block the model chooses again: as a session fed the same tokens does.
    reference.append(replayed)
    assert session.generate(4, GREEDY, set()) == reference.generate(4, GREEDY, set())


def test_auto_drafts_unless_the_steps_are_captured_or_compiled():
    assert EngineOptions().speculation(captured=False) == "ngram"
    assert EngineOptions().speculation(captured=True) == "off"
    assert EngineOptions(compile=True).speculation(captured=False) == "off"
    assert EngineOptions(speculate="ngram", compile=True).speculation(captured=True) == "ngram"
    assert EngineOptions(speculate="off").speculation(captured=False) == "off"
