"""How many torch threads each engine step gets: every CPU or one fewer, whichever is measured faster.

A server can leave one CPU to its HTTP event loop (``shoal.engine.hardware.choose_threads``), which at many
streams has real work per token (detokenizing, SSE framing, a dispatch per step). Whether that pays depends on
the machine, not on the step: on an idle 2-CPU machine every CPU won at every size, from one stream to 64
(docs/history/2026-11-27-benchmarks-notebook.md). But every CPU only pays when nobody else wants one: torch's OpenMP workers meet at a barrier after every op, and a worker the kernel has descheduled for a
neighbour's process stalls each of a step's hundreds of ops (measured on this 2-CPU machine at load 5:
150-1,050 ms a step on two threads against 29-55 ms on one).

So the count is measured, not assumed, separately for two kinds of step whose costs differ: small decode steps
(up to ``small_rows`` sequences, one token each), timed per step, and the rest (many streams, prefill chunks),
timed per token scheduled. Each kind starts on one fewer, keeps a moving average of its time at each count,
runs on the faster one, and now and then probes the other for a few steps, measured afresh; each probe that
confirms the choice doubles the wait before the next (up to ``max_probe_interval`` steps of that kind), so a
loaded machine pays for a probe rarely and an idle one switches within the first ``probe_interval`` steps.
``set_num_threads`` itself costs well under a microsecond.

Pure: the caller measures the steps (``observe``) and applies the answer (``threads_for``); no clock reads.
"""

from __future__ import annotations

from shoal.engine.hardware import SMALL_ROWS

PROBE_INTERVAL = 8  # steps of a kind before the first probe of the other thread count
MAX_PROBE_INTERVAL = 4096
PROBE_STEPS = 4  # steps per probe; the first is not measured (the thread team may be starting)
SMOOTHING = 0.25  # weight of the newest step in the moving averages


class CountChoice:
    """The thread count for one kind of step: the measured faster of ``all`` and ``fewer``, probed now and then."""

    def __init__(self, all_: int, fewer: int, probe_interval: int, max_probe_interval: int, probe_steps: int) -> None:
        self.all = all_
        self.fewer = fewer
        self.probe_interval = probe_interval
        self.max_probe_interval = max_probe_interval
        self.probe_steps = probe_steps
        self.choice = fewer  # until a probe shows every CPU is faster
        self.seconds: dict[int, float] = {}  # thread count -> moving average of a step's (or a token's) seconds
        self._interval = probe_interval
        self._until_probe = probe_interval
        self._probe_left = 0  # steps still to run at the other count
        self._last = fewer  # the count of the previous step (a switch's first step is not measured)

    def answer(self) -> int:
        return self._other() if self._probe_left else self.choice

    def learn(self, threads: int, seconds: float) -> None:
        """Records a step of this kind; learns from its time and moves the probe schedule on."""
        if threads == self._last:
            old = self.seconds.get(threads)
            self.seconds[threads] = seconds if old is None else old + SMOOTHING * (seconds - old)
        self._last = threads
        if self._probe_left:
            self._probe_left -= 1
            if not self._probe_left:
                self._decide()
            return
        self._until_probe -= 1
        if self._until_probe <= 0:
            self._probe_left = self.probe_steps
            self.seconds.pop(self._other(), None)  # what it measured long ago says little about now

    def _other(self) -> int:
        return self.fewer if self.choice == self.all else self.all

    def _decide(self) -> None:
        """After a probe: keep the faster count; a confirmed choice waits twice as long for the next probe."""
        mine, other = self.seconds.get(self.choice), self.seconds.get(self._other())
        if other is not None and (mine is None or other < mine):
            self.choice = self._other()
            self._interval = self.probe_interval
        else:
            self._interval = min(2 * self._interval, self.max_probe_interval)
        self._until_probe = self._interval


class StepThreads:
    """Answers each step's thread count from its size and what earlier steps of its kind measured."""

    def __init__(
        self,
        cores: int,
        small_rows: int = SMALL_ROWS,
        probe_interval: int = PROBE_INTERVAL,
        max_probe_interval: int = MAX_PROBE_INTERVAL,
        probe_steps: int = PROBE_STEPS,
    ) -> None:
        if cores < 2:
            raise ValueError(f"adaptive threads need at least 2 CPUs, got {cores}")
        self.all = cores
        self.fewer = cores - 1
        self.small_rows = small_rows
        self.small = CountChoice(cores, cores - 1, probe_interval, max_probe_interval, probe_steps)
        self.large = CountChoice(cores, cores - 1, probe_interval, max_probe_interval, probe_steps)

    def is_small(self, rows: int, tokens: int) -> bool:
        """A decode step (one token a sequence) of at most ``small_rows`` sequences."""
        return tokens == rows and rows <= self.small_rows

    def kind(self, rows: int, tokens: int) -> CountChoice:
        return self.small if self.is_small(rows, tokens) else self.large

    def threads_for(self, rows: int, tokens: int) -> int:
        """The thread count for a step of ``rows`` sequences and ``tokens`` tokens in all."""
        return self.kind(rows, tokens).answer()

    def observe(self, threads: int, rows: int, tokens: int, seconds: float) -> None:
        """Records a finished step: small decode steps by their time, the rest by their time per token."""
        if self.is_small(rows, tokens):
            self.small.learn(threads, seconds)
        else:
            self.large.learn(threads, seconds / max(tokens, 1))
