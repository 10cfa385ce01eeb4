"""A request trace: when each request arrives, its prompt and output lengths, and the prefix it shares.

Three file formats are read, each checked line by line so that a bad trace fails with the line and the field
at fault instead of being silently trimmed:

- CSV with a header ``timestamp,prompt_tokens,output_tokens[,prefix_group,prefix_tokens]``, timestamps in seconds;
- JSON Lines with the same keys;
- the public Azure LLM inference trace format, CSV ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock
  timestamps (``2023-11-16 18:15:46.6805900``), replayed from the first request.

Timestamps must be non-negative (Azure: any date) and sorted; token counts positive. Arrays are numpy so that
a million-request trace loads and scales in well under a second.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
REQUIRED = ("timestamp", "prompt_tokens", "output_tokens")
OPTIONAL = ("prefix_group", "prefix_tokens")


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, line and field."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival; ``prefix_group`` is -1 for a request that shares no prefix.

    ``bursts`` lists the start times of the load steps a generator put in (the simulator measures how fast each
    policy answers them); ``name`` is what reports call the trace.
    """

    name: str
    arrival: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_group: np.ndarray
    prefix_tokens: np.ndarray
    bursts: tuple[float, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def duration(self) -> float:
        return float(self.arrival[-1]) if len(self.arrival) else 0.0

    def scaled(self, time_scale: float) -> Trace:
        """The same requests replayed ``time_scale`` times faster (2.0: an hour of traffic in 30 minutes)."""
        if not time_scale > 0:
            raise TraceError(f"time scale must be > 0, got {time_scale}")
        return Trace(
            self.name,
            self.arrival / time_scale,
            self.prompt_tokens,
            self.output_tokens,
            self.prefix_group,
            self.prefix_tokens,
            tuple(b / time_scale for b in self.bursts),
        )

    def head(self, count: int) -> Trace:
        """The first ``count`` requests (a quick look at a long trace)."""
        return Trace(
            self.name,
            self.arrival[:count],
            self.prompt_tokens[:count],
            self.output_tokens[:count],
            self.prefix_group[:count],
            self.prefix_tokens[:count],
            tuple(b for b in self.bursts if count and b <= self.arrival[:count][-1]),
        )


def make_trace(
    name: str,
    arrival: Iterable[float],
    prompt: Iterable[int],
    output: Iterable[int],
    group: Iterable[int] | None = None,
    prefix: Iterable[int] | None = None,
    bursts: tuple[float, ...] = (),
) -> Trace:
    """A validated trace from columns (generators and tests build traces through here)."""
    arrival_a = np.asarray(list(arrival) if not isinstance(arrival, np.ndarray) else arrival, dtype=np.float64)
    prompt_a = np.asarray(list(prompt) if not isinstance(prompt, np.ndarray) else prompt, dtype=np.int64)
    output_a = np.asarray(list(output) if not isinstance(output, np.ndarray) else output, dtype=np.int64)
    n = len(arrival_a)
    group_a = (
        np.full(n, -1, np.int64)
        if group is None
        else np.asarray(list(group) if not isinstance(group, np.ndarray) else group, dtype=np.int64)
    )
    prefix_a = (
        np.zeros(n, np.int64)
        if prefix is None
        else np.asarray(list(prefix) if not isinstance(prefix, np.ndarray) else prefix, dtype=np.int64)
    )
    if not (len(prompt_a) == len(output_a) == len(group_a) == len(prefix_a) == n):
        raise TraceError(f"{name}: columns differ in length")
    _check_columns(name, arrival_a, prompt_a, output_a, group_a, prefix_a)
    return Trace(name, arrival_a, prompt_a, output_a, group_a, prefix_a, bursts)


def _check_columns(
    name: str,
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    group: np.ndarray,
    prefix: np.ndarray,
    first_line: int = 0,
) -> None:
    """Raises on the first bad row, naming it (``first_line`` maps row 0 to its line in the file)."""

    def fail(row: int, message: str) -> TraceError:
        where = f"line {row + first_line}" if first_line else f"request {row}"
        return TraceError(f"{name}: {where}: {message}")

    checks = (
        (
            ~np.isfinite(arrival) | (arrival < 0),
            lambda i: f"timestamp {float(arrival[i]):g} is negative or not a number",
        ),
        (prompt <= 0, lambda i: f"prompt_tokens must be > 0, got {prompt[i]}"),
        (output <= 0, lambda i: f"output_tokens must be > 0, got {output[i]} (zero-length outputs are not served)"),
        (prefix < 0, lambda i: f"prefix_tokens must be >= 0, got {prefix[i]}"),
        (prefix > prompt, lambda i: f"prefix_tokens {prefix[i]} exceeds prompt_tokens {prompt[i]}"),
        ((group < 0) & (prefix > 0), lambda i: f"prefix_tokens {prefix[i]} given without a prefix_group"),
    )
    for bad, message in checks:
        if bad.any():
            row = int(np.argmax(bad))
            raise fail(row, message(row))
    unsorted = np.diff(arrival) < 0
    if unsorted.any():
        row = int(np.argmax(unsorted)) + 1
        raise fail(
            row,
            f"timestamp {arrival[row]:g} is earlier than the previous one ({arrival[row - 1]:g}); "
            "traces must be sorted by arrival",
        )


def load_trace(path: str | Path) -> Trace:
    """Reads a trace file (CSV, Azure CSV or JSONL, told apart by extension and header)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist")
    if path.suffix in (".jsonl", ".ndjson"):
        rows = _jsonl_rows(path)
        return _from_rows(path.name, rows, first_line=1)
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}: empty file, expected a header line")
        header = [h.strip() for h in header]
        if header[:3] == list(AZURE_COLUMNS):
            return _azure(path, reader)
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise TraceError(
                f"{path}: line 1: missing column(s) {', '.join(missing)}; expected "
                f"{','.join(REQUIRED)}[,{','.join(OPTIONAL)}] or the Azure {','.join(AZURE_COLUMNS)}"
            )
        index = {c: header.index(c) for c in REQUIRED + OPTIONAL if c in header}
        return _from_rows(path.name, _csv_rows(path, reader, index), first_line=2)


def _csv_rows(path: Path, reader: Iterator[list[str]], index: dict[str, int]) -> Iterator[dict[str, str]]:
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) <= max(index.values()):
            raise TraceError(f"{path}: line {line}: {len(row)} fields, expected {max(index.values()) + 1}")
        yield {c: row[i] for c, i in index.items()}


def _jsonl_rows(path: Path) -> Iterator[dict[str, object]]:
    with path.open() as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}: line {line}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}: line {line}: expected a JSON object")
            missing = [c for c in REQUIRED if c not in obj]
            if missing:
                raise TraceError(f"{path}: line {line}: missing field(s) {', '.join(missing)}")
            yield obj


def _number(name: str, line: int, key: str, value: object, kind: type) -> float | int:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise TraceError(
            f"{name}: line {line}: field {key} is not a{'n integer' if kind is int else ' number'}: {value!r}"
        ) from None


def _from_rows(name: str, rows: Iterable[Mapping[str, object]], first_line: int) -> Trace:
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    group: list[int] = []
    prefix: list[int] = []
    for i, row in enumerate(rows):
        line = first_line + i
        arrival.append(float(_number(name, line, "timestamp", row["timestamp"], float)))
        prompt.append(int(_number(name, line, "prompt_tokens", row["prompt_tokens"], int)))
        output.append(int(_number(name, line, "output_tokens", row["output_tokens"], int)))
        g, p = row.get("prefix_group"), row.get("prefix_tokens")
        group.append(-1 if g in (None, "") else int(_number(name, line, "prefix_group", g, int)))
        prefix.append(0 if p in (None, "") else int(_number(name, line, "prefix_tokens", p, int)))
    if not arrival:
        raise TraceError(f"{name}: no requests")
    columns = (np.asarray(arrival), np.asarray(prompt), np.asarray(output), np.asarray(group), np.asarray(prefix))
    _check_columns(name, *columns, first_line=first_line)
    return Trace(name, *columns)


def _azure(path: Path, reader: Iterator[list[str]]) -> Trace:
    stamps: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) < 3:
            raise TraceError(f"{path}: line {line}: {len(row)} fields, expected {','.join(AZURE_COLUMNS)}")
        try:
            stamps.append(datetime.fromisoformat(row[0].strip()[:26]).timestamp())
        except ValueError:
            raise TraceError(f"{path}: line {line}: field TIMESTAMP is not a date and time: {row[0]!r}") from None
        prompt.append(int(_number(path.name, line, "ContextTokens", row[1], int)))
        output.append(int(_number(path.name, line, "GeneratedTokens", row[2], int)))
    if not stamps:
        raise TraceError(f"{path}: no requests")
    arrival = np.asarray(stamps) - stamps[0]
    n = len(arrival)
    columns = (arrival, np.asarray(prompt), np.asarray(output), np.full(n, -1), np.zeros(n, np.int64))
    _check_columns(path.name, *columns, first_line=2)
    return Trace(path.stem, *columns)
