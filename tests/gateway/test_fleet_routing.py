"""Routing over a live fleet: several models behind one gateway, active-active agreement, file discovery."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from gateway_harness import ByteTokenizer
from support.polling import eventually

from shoal.gateway.discovery import Backend, from_file, parse_line
from shoal.protocol.block_hash import hash_blocks

pytestmark = pytest.mark.timeout(60)

PROMPT = "You are a helpful assistant of the Shoal fleet. " * 3


def served_by(url: str, model: str, prompt: str = "x") -> str:
    response = httpx.post(url + "/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 2})
    assert response.status_code == 200, response.text
    return response.json()["engine"]


def test_each_model_goes_to_the_replicas_that_serve_it(fake_engines, gateways) -> None:
    ((alpha, alpha_server),) = fake_engines(1, models=("alpha",))
    ((beta, beta_server),) = fake_engines(1, models=("beta",))
    handle = gateways([alpha_server.url, beta_server.url], byte_tokenized=("alpha", "beta"))
    handle.wait_healthy(2)
    assert {served_by(handle.url, "alpha") for _ in range(3)} == {alpha.name}
    assert {served_by(handle.url, "beta") for _ in range(3)} == {beta.name}
    assert [m["id"] for m in httpx.get(handle.url + "/v1/models").json()["data"]] == ["alpha", "beta"]
    assert httpx.post(handle.url + "/v1/completions", json={"model": "gamma", "prompt": "x"}).status_code == 404


def test_two_gateways_following_the_same_kv_events_choose_the_same_replica(fake_engines, gateways) -> None:
    """Active-active: no shared state, yet a cached prefix is found by both, and a new one lands alike."""
    fleet = fake_engines(4)
    holder_engine, _ = fleet[2]
    holder_engine.kv_snapshot = hash_blocks(ByteTokenizer().encode(PROMPT))
    pair = [gateways([server.url for _, server in fleet]) for _ in range(2)]
    for handle in pair:
        handle.wait_healthy(4)
        replicas = handle.gateway.fleet.replicas.values()
        eventually(lambda replicas=replicas: all(r.index.synced for r in replicas), 10, "every KV stream in sync")
    assert [served_by(h.url, "tiny", PROMPT + "question one") for h in pair] == [holder_engine.name] * 2
    fresh = "A different system prompt that no replica has seen before, long enough for blocks. " * 2
    first, second = (served_by(h.url, "tiny", fresh) for h in pair)
    assert first == second


@pytest.mark.parametrize("line", ["http://e:8000 kv-events=0", "http://e:8000 kv-events=x", "http://e:8000 port=1"])
def test_a_backend_line_other_than_url_and_kv_events_port_is_refused_naming_it(line: str) -> None:
    with pytest.raises(ValueError, match=f"backend '{line}': expected URL \\[kv-events=PORT\\]"):
        parse_line(line)


async def test_a_backends_file_is_followed_as_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "backends.txt"
    path.write_text("# engines\nhttp://127.0.0.1:9001\n\nhttp://127.0.0.1:9002 kv-events=5601  # second\n")
    published: list[list[Backend]] = []
    task = asyncio.create_task(from_file(path, interval=0.05)(published.append))
    try:
        while not published:
            await asyncio.sleep(0.01)
        assert published[-1] == [Backend("http://127.0.0.1:9001"), Backend("http://127.0.0.1:9002", 5601)]
        await asyncio.sleep(0.05)
        path.write_text("http://127.0.0.1:9003\n")
        while published[-1] != [Backend("http://127.0.0.1:9003")]:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
