"""Runs the single-threaded ``EngineCore`` in a thread of its own, next to the HTTP event loop.

Design. Only the step thread touches the engine. The event loop talks to it through a command queue:
``add``, ``abort`` and ``follow KV events`` are closures appended to a deque under a condition variable, and
the step thread runs every pending command before each step, so an abort takes effect at the very next step.
When there is nothing to run and no command, the thread sleeps on the condition (no busy spin). After each
step it records metrics, publishes KV events, and hands the step's outputs to the loop with one
``call_soon_threadsafe``; on the loop they are routed into each HTTP request's bounded ``RequestStream``.
Neither side ever waits for the other: the loop never blocks on a step, and the step thread never waits
for a reader.

The model loads in the step thread too, after the HTTP server is up: ``/health`` answers while it loads,
``/ready`` only once it has loaded, and requests meanwhile get 503 + ``Retry-After`` (a pod that loads a
big model stays alive without a startup probe). If loading or a step fails, the engine is dead: every
request fails, ``/health`` turns 503 and ``on_dead`` tells the process to exit.

An HTTP request becomes a ``Generation`` of ``n`` x prompts child requests (ids ``<request id>-<k>``), each
feeding choice ``k`` of one stream. Admission is bounded: when more children wait for the batch than
``max_waiting``, or the server drains, ``submit`` refuses with 503 and ``Retry-After``; when the drain begins,
admitted requests with no output yet are refused the same way (their HTTP response has not begun).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from shoal.engine.core.engine_core import EngineCore
from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.core.outputs import EngineStats, RequestOutput
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.server.kv_event_hub import Follower, KVEventHub
from shoal.engine.server.metrics import ServerMetrics
from shoal.engine.server.output_stream import Delta, RequestStream, StreamFailed, StreamRefused
from shoal.engine.server.request_params import engine_error
from shoal.protocol.errors import invalid_request, service_unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Child:
    """One engine request behind choice ``index`` of an HTTP request."""

    index: int
    prompt_token_ids: list[int]
    params: SamplingParams
    lora_name: str | None = None  # the LoRA adapter the request's model names; None: the base model


class Generation:
    """The engine requests of one HTTP request, read as batches of deltas; ``close`` always runs after."""

    def __init__(self, engine: AsyncEngine, request_id: str, child_ids: list[str], stream: RequestStream) -> None:
        self._engine = engine
        self.request_id = request_id
        self.child_ids = child_ids
        self.stream = stream
        self.timed_out = False
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None

    def __aiter__(self) -> AsyncIterator[list[Delta]]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[list[Delta]]:
        while not (self.stream.finished and self.stream.pending() == 0):
            yield await self.stream.get()

    def limit_time(self, seconds: float) -> None:
        """Aborts the generation if it is still running after ``seconds``."""
        self._timer = asyncio.get_running_loop().call_later(seconds, self.expire)

    def expire(self) -> None:
        """The time limit passed: abort, but keep listening so the client gets finish reason ``abort``."""
        self.timed_out = True
        self._engine.abort(self._unfinished_ids())

    def close(self) -> None:
        """Aborts whatever has not finished (the client left) and forgets the request."""
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        unfinished = self._unfinished_ids()
        if unfinished:
            self._engine.abort(unfinished)
        self._engine._forget(self.child_ids)

    def _unfinished_ids(self) -> list[str]:
        return [self.child_ids[i] for i in sorted(self.stream.unfinished_choices())]


class AsyncEngine:
    """The bridge between the HTTP event loop and the engine's step thread."""

    def __init__(
        self,
        load: Callable[[], EngineCore],
        metrics: ServerMetrics,
        kv_hub: KVEventHub,
        *,
        max_waiting: int = 512,
        stream_capacity: int = 64,
        request_timeout_s: float | None = None,
    ) -> None:
        self._load = load
        self.core: EngineCore | None = None
        self.on_dead: Callable[[], None] | None = None
        self.metrics = metrics
        self.kv_hub = kv_hub
        self.max_waiting = max_waiting
        self.stream_capacity = stream_capacity
        self.request_timeout_s = request_timeout_s
        self.draining = False
        self.dead = False
        self._commands: deque[Callable[[], None]] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Loop-side state (touched only on the event loop).
        self._routes: dict[str, tuple[RequestStream, int]] = {}
        self._adding: dict[str, Future[None]] = {}  # admissions the step thread has not answered yet
        self._num_running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._grace_over = asyncio.Event()  # set by end_grace: a drain aborts what is left at once

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the step thread; call from the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="shoal-engine-step", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the step thread after the commands already queued."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def ready(self) -> bool:
        alive = self._thread is not None and self._thread.is_alive()
        return alive and self.core is not None and not self.draining and not self.dead

    def loaded_core(self) -> EngineCore:
        """The engine, or 503 while it still loads (or is dead)."""
        if self.dead:
            raise service_unavailable("The engine has stopped.", retry_after_s=5)
        if self.core is None:
            raise service_unavailable("The model is still loading.", retry_after_s=5)
        return self.core

    async def drain(self, grace_s: float) -> None:
        """Refuses new requests and those with no output yet, lets the others finish for ``grace_s`` (or until
        :meth:`end_grace`), then aborts the rest."""
        self.draining = True
        self._refuse_unstarted()
        idle, over = asyncio.ensure_future(self._idle.wait()), asyncio.ensure_future(self._grace_over.wait())
        done, _ = await asyncio.wait((idle, over), timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
        for waiter in (idle, over):
            waiter.cancel()
        if idle not in done:
            why = "grace period ended early" if over in done else "grace period over"
            log.warning("%s: aborting %d requests", why, len(self._routes))
            self.abort(list(self._routes))
            try:
                await asyncio.wait_for(self._idle.wait(), timeout=10.0)
            except TimeoutError:
                log.error("requests still in flight after abort: %d", len(self._routes))
        self.kv_hub.close_all()

    def end_grace(self) -> None:
        """Ends a drain's grace period now (a second SIGTERM): what is still streaming is aborted, each stream with
        a clean end, rather than cut by a SIGKILL (``shoal up`` sends it when its drain deadline nears)."""
        self._grace_over.set()

    # ---- requests (event loop) -------------------------------------------------------------------------

    def _refuse_unstarted(self) -> None:
        """Requests that have no output yet (queued, or in their prefill) leave with a 503: a gateway sends them to
        another replica, where they start sooner than behind this one's running batch, and the grace period only
        has to cover the requests already streaming (``shoal.operator.termination``)."""
        unstarted: dict[int, tuple[RequestStream, list[str]]] = {}
        for cid, (stream, _) in self._routes.items():
            if not stream.started:
                unstarted.setdefault(id(stream), (stream, []))[1].append(cid)
        for stream, child_ids in unstarted.values():
            self._forget(child_ids)
            self.abort(child_ids)
            self.metrics.observe_rejected("draining")
            stream.fail(StreamRefused("The server is shutting down."))

    async def submit(self, request_id: str, children: list[Child]) -> Generation:
        """Admits one HTTP request's children, or raises ``APIError`` (503 full/draining, 400 invalid)."""
        core = self.loaded_core()
        if self.draining:
            self.metrics.observe_rejected("draining")
            raise service_unavailable("The server is shutting down.", retry_after_s=1)
        if len(children) > self.max_waiting:  # could never be admitted: the client's mistake, not a busy server
            raise invalid_request(
                f"This request has {len(children)} sequences (prompts x n); at most "
                f"{self.max_waiting} are accepted at once.",
                param="n",
            )
        waiting = len(self._routes) - self._num_running
        if waiting + len(children) > self.max_waiting:
            self.metrics.observe_rejected("queue_full")
            raise service_unavailable(f"Too many requests waiting ({waiting}); try again shortly.", retry_after_s=1)
        child_ids = [f"{request_id}-{child.index}" for child in children]
        if any(cid in self._routes for cid in child_ids):
            raise invalid_request(f"Request id {request_id!r} is already in flight.", param="X-Request-Id")
        stream = RequestStream(num_choices=len(children), capacity=self.stream_capacity)
        for cid, child in zip(child_ids, children, strict=True):
            self._routes[cid] = (stream, child.index)
        self._idle.clear()
        added: Future[None] = Future()
        arrival = time.monotonic()
        self._adding[request_id] = added
        self._post(lambda: self._add_all(core, child_ids, children, arrival, added))
        generation = Generation(self, request_id, child_ids, stream)
        try:
            await asyncio.wrap_future(added)
        except InvalidRequestError as exc:
            self._forget(child_ids)
            self.metrics.observe_rejected("invalid")
            raise engine_error(exc) from None
        except StreamFailed:
            generation.close()
            raise service_unavailable("The engine has stopped.", retry_after_s=5) from None
        except BaseException:
            generation.close()
            raise
        finally:
            self._adding.pop(request_id, None)
        if self.request_timeout_s is not None:
            generation.limit_time(self.request_timeout_s)
        return generation

    def abort(self, child_ids: list[str]) -> None:
        """Asks the engine to abort these requests at its next step (any thread)."""
        if child_ids:
            ids = list(child_ids)
            self._post(lambda: self._core().abort(ids))

    async def follow_kv_events(self) -> Follower:
        """A follower whose stream starts with a snapshot consistent with the events after it."""
        assert self._loop is not None
        follower = Follower(self._loop, self.kv_hub.follower_queue_limit)

        core = self.loaded_core()

        def attach() -> None:
            self.kv_hub.publish(core.drain_kv_events())
            self.kv_hub.attach(follower, core.kv_snapshot())

        self._post(attach)
        return follower

    async def on_step_thread(self, command: Callable[[EngineCore], T]) -> T:
        """Runs ``command`` on the engine between two steps and returns (or raises) what it did."""
        core = self.loaded_core()
        done: Future[T] = Future()

        def run() -> None:
            try:
                done.set_result(command(core))
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting caller
                done.set_exception(exc)

        self._post(run)
        return await asyncio.wrap_future(done)

    def _forget(self, child_ids: list[str]) -> None:
        for cid in child_ids:
            self._routes.pop(cid, None)
        if not self._routes:
            self._idle.set()

    def _dispatch(self, outputs: list[RequestOutput], stats: EngineStats) -> None:
        """Routes one step's outputs into their streams (event loop)."""
        self._num_running = stats.num_running
        for out in outputs:
            route = self._routes.get(out.request_id)
            if route is None:
                continue  # its client is gone
            stream, index = route
            stream.put(Delta.from_output(index, out))
            if out.finished:
                self._forget([out.request_id])

    def _fail_all(self, error: BaseException) -> None:
        # the n choices of a request share one stream; streams are dataclasses (unhashable), so dedupe by identity
        streams = list({id(stream): stream for stream, _ in self._routes.values()}.values())
        self._routes.clear()
        self._idle.set()
        for stream in streams:
            stream.fail(error)
        for added in self._adding.values():  # the step thread is gone: nobody else will answer these
            if not added.done():
                added.set_exception(StreamFailed(str(error)))

    # ---- the step thread -------------------------------------------------------------------------------

    def _post(self, command: Callable[[], None]) -> None:
        with self._wake:
            self._commands.append(command)
            self._wake.notify()

    def _core(self) -> EngineCore:
        assert self.core is not None, "commands are only posted once the engine has loaded"
        return self.core

    @staticmethod
    def _add_all(
        core: EngineCore, child_ids: list[str], children: list[Child], arrival: float, done: Future[None]
    ) -> None:
        """Adds every child or none of them (step thread)."""
        added: list[str] = []
        try:
            for cid, child in zip(child_ids, children, strict=True):
                core.add_request(
                    cid, child.prompt_token_ids, child.params, arrival_time=arrival, lora_name=child.lora_name
                )
                added.append(cid)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who turns it into a 4xx/5xx
            if added:
                core.abort(added)
            done.set_exception(exc)
            return
        done.set_result(None)

    def _die(self, error: BaseException) -> None:
        """Marks the engine dead and fails every request (step thread)."""
        self.dead = True
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._fail_all, error)
        if self.on_dead is not None:
            self._loop.call_soon_threadsafe(self.on_dead)

    def _run(self) -> None:
        assert self._loop is not None
        loop = self._loop
        self.metrics.startup.loading_starts()
        try:
            core = self._load()
        except Exception as exc:  # reported in the log; the process exits via on_dead
            log.exception("the model failed to load")
            self._die(exc)
            return
        self.metrics.loaded(core.config.max_num_seqs, core.config.max_loras if core.lora is not None else None)
        self.metrics.observe_step([], core.stats())  # a ready engine's /metrics shows its (empty) queue at once
        self.metrics.startup.ready(core.startup_phases)
        self.core = core
        log.info("model loaded: %s (max_model_len %d)", core.model_name, core.max_model_len)
        with core.stepping():  # torch's inference mode, entered once for every step
            while True:
                with self._wake:
                    while not self._commands and not self._stopping and not core.has_unfinished():
                        self._wake.wait()
                    if self._stopping:
                        return
                    commands = list(self._commands)
                    self._commands.clear()
                try:
                    for command in commands:
                        command()
                    outputs = core.step() if core.has_unfinished() else []
                    self.kv_hub.publish(core.drain_kv_events())
                    stats = core.stats()
                    self.metrics.observe_step(outputs, stats)
                except Exception as exc:  # the engine is broken: fail every request, stay observable
                    log.exception("engine step failed; failing all requests")
                    self._die(exc)
                    return
                loop.call_soon_threadsafe(self._dispatch, outputs, stats)
