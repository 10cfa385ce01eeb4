"""The block hash is a contract between engine and gateway: these tests pin what it promises."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from shoal.protocol.block_hash import ROOT_HASH, hash_block, hash_blocks

tokens = st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=80)


@given(tokens, st.integers(min_value=1, max_value=17))
def test_only_full_blocks_are_hashed(ids: list[int], block_size: int) -> None:
    assert len(hash_blocks(ids, block_size)) == len(ids) // block_size


@given(tokens, tokens, st.integers(min_value=1, max_value=9))
def test_blocks_match_exactly_as_far_as_the_prefixes_match(a: list[int], b: list[int], block_size: int) -> None:
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    ha, hb = hash_blocks(a, block_size), hash_blocks(b, block_size)
    shared = sum(1 for x, y in zip(ha, hb, strict=False) if x == y)
    assert shared == min(common // block_size, len(ha), len(hb))


@given(tokens, st.integers(min_value=1, max_value=9))
def test_chain_is_the_fold_of_hash_block(ids: list[int], block_size: int) -> None:
    parent, expected = ROOT_HASH, []
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash_block(parent, ids[start : start + block_size])
        expected.append(parent)
    assert hash_blocks(ids, block_size) == expected


def test_extra_key_separates_caches() -> None:
    ids = list(range(32))
    assert hash_blocks(ids, 16, extra_key=b"tenant-a") != hash_blocks(ids, 16, extra_key=b"tenant-b")
    assert hash_blocks(ids, 16, extra_key=b"tenant-a") == hash_blocks(ids, 16, extra_key=b"tenant-a")


def test_hash_is_stable_across_processes() -> None:
    """A gateway in another process (and with another PYTHONHASHSEED) must compute the same integers."""
    code = "from shoal.protocol.block_hash import hash_blocks; print(hash_blocks(list(range(48)), 16))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}
        ).stdout
        for seed in ("1", "2")
    }
    assert outs == {f"{hash_blocks(list(range(48)), 16)}\n"}


def test_hashes_fit_in_64_bits() -> None:
    assert all(0 <= h < 2**64 for h in hash_blocks(list(range(160)), 16))
