"""Each engine kind's ``/metrics`` page read through its metric map.

The vLLM and llama-server pages were recorded from the real servers on this machine, under load (vLLM 0.32.0's
CPU build with 4 requests running; llama-server 0.3.36 with 2 slots busy and 1 request deferred). SGLang's
server needs CUDA, so its page is a stand-in written from the names, types and labels in its source (the file
says so in its first lines).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shoal.autoscale.engine_page import PageError, parse_engine_page
from shoal.engine_kinds import ADAPTERS

PAGES = Path(__file__).parent / "pages"


def page(name: str) -> str:
    return (PAGES / name).read_text()


def test_vllm_page_gives_every_signal_but_the_batch_limit() -> None:
    read = parse_engine_page(page("vllm-0.32.0-cpu.txt"), ADAPTERS["vllm"].metrics)
    assert (read.waiting, read.running) == (0.0, 4.0)
    assert read.kv_usage == pytest.approx(0.011019283746556474)
    assert read.ended == 3.0  # request_success summed over finished_reason
    assert read.generated == 250.0
    assert read.ttft_buckets[math.inf] == 7.0 and read.ttft_buckets[0.06] == 2.0
    assert read.max_num_seqs is None


def test_llama_server_page_has_its_queue_and_tokens_and_nothing_it_does_not_export() -> None:
    read = parse_engine_page(page("llama-server-0.3.36.txt"), ADAPTERS["llamacpp"].metrics)
    assert (read.waiting, read.running) == (1.0, 2.0)
    assert read.kv_usage is None and read.ended is None and read.ttft_buckets == {}
    assert read.generated is not None and read.generated > 0


def test_sglang_page_sums_its_label_sets() -> None:
    read = parse_engine_page(page("sglang-0.5.23-written-from-source.txt"), ADAPTERS["sglang"].metrics)
    assert (read.waiting, read.running, read.kv_usage) == (5.0, 3.0, 0.42)
    assert read.ended == 10.0  # streaming and not
    assert read.generated == 1200.0
    assert read.ttft_buckets == {0.1: 2.0, 0.5: 7.0, 1.0: 10.0, math.inf: 10.0}


@pytest.mark.parametrize("kind", ["shoal", "sglang", "llamacpp"])
def test_a_vllm_page_read_as_another_kind_is_refused_not_read_as_idle(kind: str) -> None:
    with pytest.raises(PageError, match=ADAPTERS[kind].metrics.waiting):
        parse_engine_page(page("vllm-0.32.0-cpu.txt"), ADAPTERS[kind].metrics)


def test_every_mapped_family_is_on_the_recorded_pages() -> None:
    """The map names real series: each family it names appears on that engine's page (a renamed metric in a new
    release fails here, not as a fleet that never scales)."""
    for kind, name in (("vllm", "vllm-0.32.0-cpu.txt"), ("llamacpp", "llama-server-0.3.36.txt")):
        families = {family.name for family in text_string_to_metric_families(page(name))}
        assert set(ADAPTERS[kind].metrics.families()) <= families, kind
