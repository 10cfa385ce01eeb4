"""How many torch threads each engine step gets: every CPU for small decode steps while that pays, else one fewer.

A server leaves one CPU to its HTTP event loop (``shoal.engine.hardware.choose_threads``), which at many
streams has real work per token (detokenizing, SSE framing, a dispatch per step). At a few streams the loop
does almost nothing, and leaving its CPU idle halves the matrix work's speed for the one stream that waits
on every step: that was the whole gap to llama.cpp at one concurrent request. So steps of up to
``small_rows`` sequences, all decoding, run on every CPU, and larger steps (many streams, or prefill chunks
among them) on one fewer.

Every CPU only pays when nobody else wants one: torch's OpenMP workers meet at a barrier after every op, and a
worker the kernel has descheduled for a neighbour's process stalls each of a step's hundreds of ops (measured
on this 2-CPU machine at load 5: 150-1,050 ms a step on two threads against 29-55 ms on one). So the choice for
small steps is measured, not assumed: the policy starts on one fewer, keeps a moving average of small steps'
time at each count (steps of 1 and of ``small_rows`` sequences alike: close enough to rank the two counts),
runs on the faster one, and now and then probes the other for a few steps, measured afresh; each probe that
confirms the choice doubles the wait before the next (up to ``max_probe_interval`` small steps), so a loaded
machine pays for a probe rarely and an idle one switches within the first ``probe_interval`` steps.
``set_num_threads`` itself costs well under a microsecond.

Pure: the caller measures the steps (``observe``) and applies the answer (``threads_for``); no clock reads.
"""

from __future__ import annotations

from shoal.engine.hardware import SMALL_ROWS

PROBE_INTERVAL = 8  # small steps before the first probe of the other thread count
MAX_PROBE_INTERVAL = 4096
PROBE_STEPS = 4  # small steps per probe; the first is not measured (the thread team may be starting)
SMOOTHING = 0.25  # weight of the newest step in the moving averages


class StepThreads:
    """Answers each step's thread count from its size and what earlier small steps measured."""

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
        self.probe_interval = probe_interval
        self.max_probe_interval = max_probe_interval
        self.probe_steps = probe_steps
        self.choice = self.fewer  # for small steps, until a probe shows every CPU is faster
        self.seconds: dict[int, float] = {}  # thread count -> moving average of a small step's seconds
        self._interval = probe_interval
        self._until_probe = probe_interval
        self._probe_left = 0  # small steps still to run at the other count
        self._last = self.choice  # the count of the previous small step (a switch's first step is not measured)

    def is_small(self, rows: int, decode_only: bool) -> bool:
        return decode_only and rows <= self.small_rows

    def threads_for(self, rows: int, decode_only: bool) -> int:
        """The thread count for a step of ``rows`` sequences (``decode_only``: one new token each)."""
        if not self.is_small(rows, decode_only):
            return self.fewer
        return self._other() if self._probe_left else self.choice

    def observe(self, threads: int, rows: int, decode_only: bool, seconds: float) -> None:
        """Records a finished step; for small steps, learns from its time and moves the probe schedule on."""
        if not self.is_small(rows, decode_only):
            return
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
