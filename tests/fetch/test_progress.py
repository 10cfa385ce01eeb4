"""Progress is plain lines, at most one per interval of the (injected) clock, with a final summary."""

from __future__ import annotations

from shoal.fetch.progress import Progress, human


def test_lines_are_rate_limited_by_the_clock() -> None:
    now = [0.0]
    lines: list[str] = []
    progress = Progress("hf://org/m@abc", 4 << 20, lines.append, interval_s=5.0, clock=lambda: now[0])
    progress.skip(1 << 20)  # resumed from an earlier part: done, not fetched
    for second in range(1, 13):  # 1 MiB/4 per second for 12 s: lines at 5 s and 10 s only
        now[0] = float(second)
        progress.advance(1 << 18)
    assert lines == [
        "hf://org/m@abc: 56% (2.2 MiB of 4.0 MiB, 256.0 KiB/s)",
        "hf://org/m@abc: 88% (3.5 MiB of 4.0 MiB, 256.0 KiB/s)",
    ]
    assert progress.finish() == "hf://org/m@abc: fetched 3.0 MiB in 12.0 s"


def test_sizes_read_as_people_write_them() -> None:
    assert [human(n) for n in (512, 1536, 5 << 20, 3 << 30, 5 << 40)] == [
        "512 B", "1.5 KiB", "5.0 MiB", "3.0 GiB", "5120.0 GiB",
    ]  # fmt: skip
