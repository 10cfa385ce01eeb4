"""Real engines scraped by the real Prometheus, as the metrics-source tests use them (the fixture is in this
folder's ``conftest.py``), and a way to make a real process hang."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from serve_harness import ServeProcess
from support.services import Prometheus

from shoal.autoscale.source import ReplicaTarget


@dataclass
class ScrapedFleet:
    """The engines (``engine-0``, ``engine-1``), the name of a target nobody serves, and the Prometheus job."""

    engines: list[ServeProcess]
    prometheus: Prometheus
    dead_name: str
    dead_url: str

    def targets(self, *, dead: bool = False) -> list[ReplicaTarget]:
        targets = [ReplicaTarget(f"engine-{i}", "ready", 0.0, e.url) for i, e in enumerate(self.engines)]
        return [*targets, ReplicaTarget(self.dead_name, "ready", 0.0, self.dead_url)] if dead else targets

    def client(self, engine: int) -> openai.OpenAI:
        """The official client for one engine, no retries (a failed request is a finding)."""
        return openai.OpenAI(base_url=f"{self.engines[engine].url}/v1", api_key="unused", max_retries=0, timeout=120)

    @staticmethod
    def complete(client: openai.OpenAI, prompt: str, max_tokens: int) -> float:
        """One completion of exactly ``max_tokens`` tokens (EOS ignored); returns its latency in seconds."""
        response = client.with_raw_response.completions.create(
            model="tiny-llama",
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            extra_body={"ignore_eos": True},
        )
        return response.elapsed.total_seconds()

    def load(self, engine: int, requests: int, max_tokens: int = 48) -> list[float]:
        """Sends ``requests`` concurrent completions to one engine and returns each one's latency."""
        client = self.client(engine)
        with ThreadPoolExecutor(requests) as pool:
            return list(pool.map(lambda i: self.complete(client, f"load {i}", max_tokens), range(requests)))


class Resending:
    """``clients`` threads each sending a completion to one engine and the next as soon as its own ends, until
    the block exits: the engine's queue then holds ``clients`` minus what it runs at every instant, and
    Prometheus's one-minute windows keep holding arrivals and first tokens for as long as the checks take.
    (A fixed burst could end, and slide out of those windows, before a loaded machine's scrapes saw it; resending
    only once a whole round had finished let the queue drain to zero every round, so on an idle machine a queue
    breach never lasted the policy's 6 s panic window.) Every latency and failure is kept."""

    def __init__(
        self, fleet: ScrapedFleet, engine: int, clients: int, max_tokens: int = 32, via: openai.OpenAI | None = None
    ) -> None:
        """``via``: send through this client (a gateway's) instead of straight to engine ``engine``."""
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._client = via or fleet.client(engine)
        self._max_tokens = max_tokens
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def __enter__(self) -> Resending:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Stops resending and waits for the requests in flight, so their latencies count and the shared engine
        is left to drain."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=150)

    def _run(self, client: int) -> None:
        while not self._stop.is_set():
            try:
                self.latencies.append(ScrapedFleet.complete(self._client, f"load {client}", self._max_tokens))
            except Exception as error:  # noqa: BLE001 - a failed request is a finding, and ends this client
                self.failures.append(repr(error))
                return


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """SIGSTOPs a real process (its sockets still accept, nothing answers: a hang), SIGCONTs it afterwards."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
