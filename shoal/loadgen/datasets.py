"""Synthetic prompts: independent random ones, or groups sharing a long prefix (a system prompt).

Prompts are made of common English words drawn with a seeded generator, so a run can be repeated and any
tokenizer sees ordinary text (roughly one token per word for BPE vocabularies). The server reports the
exact token counts in ``usage``; the report uses those, not these estimates. The shared-prefix dataset
exercises prefix caching: every request of a group repeats the group's prefix verbatim, then a question of
its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which be this has also or had not "
    "first one their its new after who they have her she two been other when there all during into school time "
    "may years more most only over city some world would where later up such used many can state about national "
    "out known university united then made people between both under year through american before family part "
    "work being river while called since three well series number several season south held area north film "
    "government however could began early including best second music name these high house each member war"
).split()


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    max_tokens: int
    group: int | None = None


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(count, 1)))


def _length(rng: random.Random, mean: int, range_ratio: float) -> int:
    low, high = max(int(mean * (1 - range_ratio)), 1), max(int(mean * (1 + range_ratio)), 1)
    return rng.randint(low, high)


def random_dataset(
    num_requests: int, input_len: int, output_len: int, range_ratio: float = 0.0, seed: int = 0
) -> list[BenchRequest]:
    """Independent prompts of about ``input_len`` words asking for about ``output_len`` tokens."""
    rng = random.Random(seed)
    return [
        BenchRequest(_words(rng, _length(rng, input_len, range_ratio)), _length(rng, output_len, range_ratio))
        for _ in range(num_requests)
    ]


def shared_prefix_dataset(
    num_requests: int, num_groups: int, prefix_len: int, suffix_len: int, output_len: int, seed: int = 0
) -> list[BenchRequest]:
    """``num_groups`` long prefixes, each request one of them plus its own suffix, groups interleaved at random.

    Groups come in a seeded random order, as real traffic interleaves them: cycling through them in turn would
    let round-robin keep every group on one replica by coincidence whenever replicas divide groups.
    """
    rng = random.Random(seed)
    prefixes = [f"System prompt {g}: " + _words(rng, prefix_len) for g in range(num_groups)]
    groups = [i % num_groups for i in range(num_requests)]
    rng.shuffle(groups)
    return [
        BenchRequest(f"{prefixes[g]}\nQuestion {i}: {_words(rng, suffix_len)}", output_len, g)
        for i, g in enumerate(groups)
    ]
