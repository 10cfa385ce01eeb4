"""Weights re-homed into transparent huge pages: same values, ties kept, in a mapping advised for huge pages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from shoal.engine.loader import load_model
from shoal.engine.loader.huge_pages import HUGE_PAGE, huge_pages_available, move_to_huge_pages
from shoal.kernels import TorchOps
from shoal.model_registry import resolve_model

needs_thp = pytest.mark.skipif(not huge_pages_available(), reason="transparent huge pages are off on this machine")


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(300, 24)
        self.head = nn.Linear(24, 300, bias=False)
        self.head.weight = self.embed.weight
        self.proj = nn.Linear(24, 24).to(torch.bfloat16)
        self.register_buffer("table", torch.arange(1000, dtype=torch.int32), persistent=False)


def mapping_flags(address: int) -> set[str]:
    """The VmFlags of the mapping of this process that holds ``address``."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@needs_thp
def test_parameters_and_buffers_move_into_one_huge_page_mapping_with_their_values_and_ties() -> None:
    torch.manual_seed(0)
    model = Tied()
    before = {name: t.clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    x = torch.randint(0, 300, (5,))
    expected = model.head(model.embed(x))

    moved = move_to_huge_pages(model)

    assert moved >= sum(t.numel() * t.element_size() for t in before.values())
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        assert torch.equal(t, before[name]) and t.dtype == before[name].dtype, name
        assert t.data_ptr() % 64 == 0 and "hg" in mapping_flags(t.data_ptr()), name
    assert model.head.weight is model.embed.weight  # still one tied parameter
    assert isinstance(model.proj.weight, nn.Parameter) and model.table.dtype == torch.int32
    arena_start = min(t.data_ptr() for t in model.parameters())
    assert arena_start % HUGE_PAGE == 0
    assert torch.equal(model.head(model.embed(x)), expected)


def test_nothing_moves_where_huge_pages_are_off(tmp_path: Path) -> None:
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    model = Tied()
    pointers = [t.data_ptr() for t in model.parameters()]

    assert not huge_pages_available(setting)
    assert move_to_huge_pages(model, setting) == 0
    assert [t.data_ptr() for t in model.parameters()] == pointers
    assert not huge_pages_available(tmp_path / "missing")


@needs_thp
def test_a_loaded_model_serves_from_huge_pages(tiny_llama_dir: Path) -> None:
    model = load_model(resolve_model(str(tiny_llama_dir)), torch.float32, TorchOps(), quantization="int8")

    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        assert "hg" in mapping_flags(t.data_ptr()), name
