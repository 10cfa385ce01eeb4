"""One simulated engine replica: continuous batching under a token budget, a KV cache and a prefix cache.

The model follows the engine's scheduler (a request is two counters, tokens known and tokens computed): each
step runs every decoding sequence one token and fills what is left of ``max_num_batched_tokens`` with prompt
chunks, oldest first; a request is admitted while the batch has room for one more sequence and the KV cache can
hold its whole prompt and output (so the model never preempts); a prompt whose shared prefix the replica holds
starts with that prefix already computed. Its first token comes at the end of the step that computes the last
prompt chunk.

Steps are not simulated one by one when nothing can change between them: while the batch only decodes and no
request can be admitted, the replica plans a *segment* that runs until its first sequence finishes, and its
length in time is a closed form (the context grows by one token per sequence per step). A request that arrives
during a segment and could be admitted cuts it at the end of the step in progress. That is what makes a
thousand replicas and a million requests fit in a minute, and the timing is the same as stepping.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from functools import lru_cache

from shoal.autoscale.signals import ReplicaPhase
from shoal.gateway.routing import Capacity, ReplicaView
from shoal.simulate.profile import EngineProfile

GROUP_SHIFT = 24  # a prefix block's hash is (group << GROUP_SHIFT) | block index
BLOCK_TOKENS = 16


@lru_cache(maxsize=64)
def capacity_of(profile: EngineProfile) -> Capacity:
    """The capacity a replica of ``profile`` announces: one object for all of them, which the routing index
    finds by identity before it compares fields."""
    return Capacity(profile.max_num_batched_tokens, profile.max_num_seqs)


class PrefixCache:
    """The prefix groups a replica holds, most recently used last, within the KV space free of running work.

    ``blocks`` is what the gateway's prefix index holds for the replica, as a plain set of block hashes so that
    routing's membership tests run at set speed: the blocks of the prefixes stored in the engine and of those
    of requests in flight there (routed, not yet finished), as ``shoal.gateway.prefix_index`` counts them.
    """

    __slots__ = ("_extent", "_stored_tokens", "blocks", "in_flight", "one_off", "stored")

    def __init__(self) -> None:
        self.stored: OrderedDict[int, int] = OrderedDict()  # group -> cached prefix tokens
        self.in_flight: dict[int, int] = {}  # group -> requests routed here, not yet finished
        self.one_off = 0  # requests of no prefix group routed here, not yet finished
        self.blocks: set[int] = set()
        self._extent: dict[int, int] = {}  # group -> blocks of it in ``blocks``
        self._stored_tokens = 0

    def _cover(self, group: int, blocks: int) -> None:
        extent = self._extent.get(group, 0)
        if blocks > extent:
            base = group << GROUP_SHIFT
            self.blocks.update(range(base + extent, base + blocks))
            self._extent[group] = blocks

    def _uncover(self, group: int) -> None:
        if group in self.in_flight or group in self.stored:
            return
        base = group << GROUP_SHIFT
        self.blocks.difference_update(range(base, base + self._extent.pop(group, 0)))

    @property
    def homes(self) -> int:
        """What the gateway counts as the prefixes it is home to: the groups it holds (stored or in flight), and
        each one-off prompt in flight. The gateway keeps a one-off prompt's home until the engine evicts it; the
        simulator keeps no one-off prompt's blocks, so it counts them only while they run (a lower bound).
        Without them a new replica held no home for as long as no group reached it and took every miss up to
        its bound: the diurnal preset's attainment fell from 99.2% to 97.5%."""
        return len(self._extent) + self.one_off

    def routed(self, group: int, prefix_tokens: int) -> None:
        self.in_flight[group] = self.in_flight.get(group, 0) + 1
        self._cover(group, prefix_tokens // BLOCK_TOKENS)

    def finished(self, group: int) -> None:
        count = self.in_flight[group] - 1
        if count:
            self.in_flight[group] = count
        else:
            del self.in_flight[group]
            self._uncover(group)

    def hit(self, group: int) -> int:
        tokens = self.stored.get(group, 0)
        if tokens:
            self.stored.move_to_end(group)
        return tokens

    def store(self, group: int, tokens: int, room: int) -> None:
        """Keeps ``tokens`` of ``group``'s prefix, evicting the least recently used groups to stay within ``room``."""
        if tokens <= 0:
            return
        before = self.stored.get(group, 0)
        if tokens > before:
            self.stored[group] = tokens
            self._stored_tokens += tokens - before
            self._cover(group, tokens // BLOCK_TOKENS)
        self.stored.move_to_end(group)
        while self._stored_tokens > room and self.stored:
            evicted, size = self.stored.popitem(last=False)
            self._stored_tokens -= size
            self._uncover(evicted)


class SimReplica:
    """Engine state of one replica; the simulator owns the clock and calls ``plan`` and ``finish_step``."""

    __slots__ = (
        "busy_until",
        "cache",
        "context",
        "created",
        "decoding",
        "ended",
        "in_flight",
        "load_tokens",
        "name",
        "pending",
        "phase",
        "prefill",
        "profile",
        "reserved",
        "segment",
        "since",
        "steps",
        "version",
        "view",
        "waiting",
    )

    def __init__(self, name: str, profile: EngineProfile, created: float) -> None:
        self.name = name
        self.profile = profile
        self.phase: ReplicaPhase = "starting"
        self.created = created
        self.since = created
        self.ended: float | None = None
        self.waiting: deque[int] = deque()
        self.prefill: list[list[int]] = []  # [request, prompt tokens still to compute], oldest first
        self.decoding: list[tuple[int, int]] = []  # heap of (decode step at which it finishes, request)
        self.steps = 0
        self.context = 0
        self.reserved = 0
        self.load_tokens = 0
        self.in_flight = 0
        self.version = 0
        self.segment: tuple[float, int, float, float] | None = None  # start, steps, first step's time, increment
        self.pending: list[tuple[list[int], int]] | None = None  # this prefill step's chunks
        self.busy_until: float | None = None
        self.cache = PrefixCache()
        self.view = ReplicaView(name, 0, self.cache.blocks, 0, capacity_of(profile))

    @property
    def running(self) -> int:
        return len(self.prefill) + len(self.decoding)

    @property
    def kv_usage(self) -> float:
        return min(1.0, self.context / self.profile.kv_capacity_tokens)

    def can_admit(self, need_tokens: int) -> bool:
        return (
            self.running < self.profile.max_num_seqs and self.reserved + need_tokens <= self.profile.kv_capacity_tokens
        )

    def admit(self, prompt: list[int], output: list[int], group: list[int], prefix: list[int]) -> None:
        """Moves waiting requests into the batch while it and the KV cache have room."""
        waiting, batch = self.waiting, self.prefill
        max_seqs, capacity = self.profile.max_num_seqs, self.profile.kv_capacity_tokens
        while waiting:
            rid = waiting[0]
            need = prompt[rid] + output[rid]
            if len(batch) + len(self.decoding) >= max_seqs or self.reserved + need > capacity:  # ``can_admit``
                return
            waiting.popleft()
            computed = 0
            if group[rid] >= 0:
                reusable = min(self.cache.hit(group[rid]), prefix[rid], prompt[rid] - 1)
                computed = reusable - reusable % BLOCK_TOKENS  # the engine caches whole blocks
            self.reserved += need
            self.context += computed
            batch.append([rid, prompt[rid] - computed])

    def release_unstarted(self, prompt: list[int], output: list[int]) -> list[int]:
        """Takes out every request with no token out yet (waiting, or admitted and still in prefill), oldest first,
        as a draining engine refuses them (503) for the gateway to retry elsewhere; their KV space is freed. A
        prefill step in progress still takes its time, its work for them lost."""
        unstarted = [entry[0] for entry in self.prefill] + list(self.waiting)
        for rid, left in ((entry[0], entry[1]) for entry in self.prefill):
            self.reserved -= prompt[rid] + output[rid]
            self.context -= prompt[rid] - left
        self.prefill, self.waiting = [], deque()
        if self.pending is not None:
            self.pending = []
        return unstarted

    def plan(self, now: float, prompt: list[int]) -> float | None:
        """Starts the next step or decode segment at ``now``; returns when it ends (None when idle)."""
        self.version += 1
        step = self.profile.step
        n_decode = len(self.decoding)
        if self.prefill:
            budget = self.profile.max_num_batched_tokens - n_decode
            chunks = []
            prefill_tokens = pairs = 0
            for entry in self.prefill:
                if budget <= 0:
                    break
                take = min(entry[1], budget)
                chunks.append((entry, take))
                budget -= take
                prefill_tokens += take
                pairs += take * (prompt[entry[0]] - entry[1] + take)
            self.pending = chunks
            self.segment = None
            self.busy_until = now + step.seconds(prefill_tokens, n_decode, self.context, pairs)
        elif n_decode:
            k = self.decoding[0][0] - self.steps
            first = step.seconds(0, n_decode, self.context)
            increment = step.per_context_token_s * n_decode
            self.pending = None
            self.segment = (now, k, first, increment)
            self.busy_until = now + _segment_time(k, first, increment)
        else:
            self.pending = None
            self.segment = None
            self.busy_until = None
        return self.busy_until

    def cut(self, now: float) -> float | None:
        """Ends the current decode segment at the step in progress at ``now``; the new end time, or None if the
        segment already ends then (or no segment runs)."""
        if self.segment is None:
            return None
        start, k, first, increment = self.segment
        done = _steps_within(now - start, first, increment)
        if done + 1 >= k:
            return None
        k = done + 1
        self.version += 1
        self.segment = (start, k, first, increment)
        self.busy_until = start + _segment_time(k, first, increment)
        return self.busy_until

    def finish_step(self, prompt: list[int], output: list[int]) -> tuple[list[int], list[int], int]:
        """Applies the step or segment that just ended: (requests whose first token came, requests finished,
        output tokens produced)."""
        first_tokens: list[int] = []
        finished: list[int] = []
        n_decode = len(self.decoding)
        if self.pending is not None:
            self.steps += 1
            self.context += n_decode
            produced = n_decode
            for entry, take in self.pending:
                entry[1] -= take
                self.context += take
            still = []
            for entry in self.prefill:
                if entry[1] > 0:
                    still.append(entry)
                    continue
                rid = entry[0]
                first_tokens.append(rid)
                produced += 1
                heapq.heappush(self.decoding, (self.steps + output[rid] - 1, rid))
            self.prefill = still
        else:
            assert self.segment is not None
            k = self.segment[1]
            self.steps += k
            self.context += k * n_decode
            produced = k * n_decode
        decoding = self.decoding
        while decoding and decoding[0][0] <= self.steps:
            _, rid = heapq.heappop(decoding)
            finished.append(rid)
            self.reserved -= prompt[rid] + output[rid]
            self.context -= prompt[rid] + output[rid] - 1
        self.pending = None
        self.segment = None
        self.busy_until = None
        return first_tokens, finished, produced


def _segment_time(k: int, first: float, increment: float) -> float:
    """Seconds for ``k`` decode steps whose times grow by ``increment`` from ``first``."""
    return k * first + increment * k * (k - 1) / 2


def _steps_within(elapsed: float, first: float, increment: float) -> int:
    """How many whole steps of a segment end within ``elapsed`` seconds of its start."""
    if elapsed <= 0:
        return 0
    if increment <= 0:
        j = int(elapsed / first)
    else:
        a, b = increment / 2, first - increment / 2
        j = int((-b + math.sqrt(b * b + 4 * a * elapsed)) / (2 * a))
    while j > 0 and _segment_time(j, first, increment) > elapsed:
        j -= 1
    while _segment_time(j + 1, first, increment) <= elapsed:
        j += 1
    return j
