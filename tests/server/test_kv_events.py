"""``/kv/events`` lets a follower track exactly which prompt blocks this replica has cached."""

from __future__ import annotations

import json
import queue
import threading

import httpx
import pytest
from serve_harness import TINY_MODEL_NAME, ServeProcess

from shoal.protocol.block_hash import BLOCK_HASH_SCHEME, hash_blocks
from shoal.protocol.kv_events import KVEvent

pytestmark = pytest.mark.timeout(120)


class Follower:
    def __init__(self, url: str) -> None:
        self.events: queue.Queue[KVEvent] = queue.Queue()
        self._client = httpx.Client(timeout=None)
        self._thread = threading.Thread(target=self._follow, args=(url,), daemon=True)
        self._thread.start()

    def _follow(self, url: str) -> None:
        try:
            with self._client.stream("GET", f"{url}/kv/events") as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.events.put(KVEvent.model_validate(json.loads(line[6:])))
        except httpx.HTTPError:
            pass

    def next(self) -> KVEvent:
        return self.events.get(timeout=20)

    def close(self) -> None:
        self._client.close()


def test_snapshot_then_numbered_events_cover_a_new_prompt(server: ServeProcess) -> None:
    prompt = [5 + (i * 7) % 300 for i in range(70)]  # token ids: 4 full blocks of 16
    follower = Follower(server.url)
    try:
        snapshot = follower.next()
        assert (snapshot.type, snapshot.seq, snapshot.block_size) == ("snapshot", 0, 16)
        assert snapshot.hash_scheme == BLOCK_HASH_SCHEME and snapshot.engine_id
        r = httpx.post(
            f"{server.url}/v1/completions",
            json={"model": TINY_MODEL_NAME, "prompt": prompt, "max_tokens": 1},
            timeout=30,
        )
        assert r.status_code == 200
        held = set(snapshot.hashes)
        expected = set(hash_blocks(prompt, 16))
        seq = 0
        while not expected <= held:
            event = follower.next()
            seq += 1
            assert event.seq == seq  # no gaps: the follower knows it missed nothing
            if event.type == "stored":
                held |= set(event.hashes)
            else:
                held -= set(event.hashes)
    finally:
        follower.close()

    late = Follower(server.url)
    try:
        assert expected <= set(late.next().hashes)  # a new follower's snapshot already has them
    finally:
        late.close()
