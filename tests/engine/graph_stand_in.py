"""A stand-in for the GPU's CUDA graph, for the CPU tests of ``shoal.engine.core.decode_graphs``.

A CPU cannot record a graph, so the stand-in "captures" by keeping the forward (after one eager run, as a CUDA
capture does) and "replays" by running it again on the static buffers. What it leaves out is only what a GPU
adds (one launch instead of many); the static buffers, the padding, the bucket choice and the copies in and out
are the engine's own code.
"""

from __future__ import annotations

from collections.abc import Callable


class ReplayStandIn:
    """One recorded forward, re-run on replay."""

    def __init__(self) -> None:
        self.forward: Callable[[], None] | None = None
        self.replays = 0

    def capture(self, forward: Callable[[], None]) -> None:
        forward()
        self.forward = forward

    def replay(self) -> None:
        assert self.forward is not None, "replayed before capture"
        self.forward()
        self.replays += 1


class StandInGraphs:
    """Makes the stand-ins (the engine's ``make_graph``) and keeps them, so a test can count replays."""

    def __init__(self) -> None:
        self.made: list[ReplayStandIn] = []

    def __call__(self) -> ReplayStandIn:
        graph = ReplayStandIn()
        self.made.append(graph)
        return graph

    @property
    def replays(self) -> int:
        return sum(graph.replays for graph in self.made)
