"""How ``shoal up`` shows a :class:`FleetSnapshot`: a live rich view on a terminal, log lines otherwise.

Both are pure formatting of the snapshot (no I/O here): ``render`` builds the rich renderable that ``up``
hands to ``rich.live.Live``; ``summary_line`` and ``event_line`` are what ``--no-tui`` (or a non-TTY) prints.
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shoal.local.fleet import Event
from shoal.local.snapshot import FleetSnapshot

PHASE_STYLE = {"starting": "yellow", "ready": "green", "draining": "cyan", "backoff": "red"}
EVENT_STYLE = {"info": "", "warning": "yellow", "error": "red"}


def _num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "-" if value is None else fmt.format(value) + unit


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def fleet_line(s: FleetSnapshot) -> str:
    """The fleet's figures in one line (the view's header and the periodic ``--no-tui`` line)."""
    return (
        f"replicas {s.count('ready')} ready / {s.count('starting') + s.count('backoff')} starting / "
        f"{s.count('draining')} draining (desired {s.desired}){_standby(s)} | queue {s.waiting:.0f} running {s.running:.0f} | "
        f"TTFT p95 {_num(s.ttft_p95_seconds, '{:.2f}', ' s')} | {_num(s.output_tokens_per_second)} tok/s | "
        f"prefix hits {_pct(s.prefix_hit_rate)}"
    )


def _standby(s: FleetSnapshot) -> str:
    return f" | standby {s.count('standby')} ready of {s.pool}" if s.pool else ""


def summary_line(s: FleetSnapshot) -> str:
    routing = ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.routing.items())) or "none yet"
    missing = f" | metrics: {s.metrics_missing}" if s.metrics_missing else ""
    rule = f" | autoscaler: {s.current.rule}" if s.current else ""
    return f"{_clock(s.time)} {fleet_line(s)} | routed: {routing}{rule}{missing}"


def event_line(event: Event) -> str:
    return f"{_clock(event.time)} {event.level.upper():7} {event.text}"


def _startup(phases: dict[str, float]) -> str:
    """Decision to first token (or to ready, marked ``+``, until it has served); the phases are in the events."""
    if not phases:
        return "-"
    return f"{sum(phases.values()):.1f} s" + ("" if "routed" in phases else "+")


def _replicas(s: FleetSnapshot) -> Table:
    table = Table(title="engines", title_justify="left", expand=True)
    for column in ("name", "phase", "for", "url", "queue", "running", "KV", "restarts", "start-up", "last error"):
        table.add_column(
            column,
            no_wrap=column != "last error",
            justify="right" if column in ("for", "queue", "running", "KV", "restarts", "start-up") else "left",
        )
    for r in s.replicas:
        table.add_row(
            r.name,
            Text(r.phase, style=PHASE_STYLE.get(r.phase, "")),
            f"{s.time - r.since:.0f} s",
            r.url or "-",
            _num(r.waiting),
            _num(r.running),
            _pct(r.kv_usage),
            str(r.restarts),
            _startup(r.startup),
            Text(r.error or "", style="red"),
        )
    return table


def _decisions(s: FleetSnapshot) -> Table:
    table = Table(
        title="scaling decisions" + ("" if s.autoscaling else " (autoscaling off)"), title_justify="left", expand=True
    )
    for column in ("time", "replicas", "rule", "why"):
        table.add_column(column, no_wrap=column != "why")
    for d in s.decisions[-5:]:
        table.add_row(_clock(d.time), f"{d.from_replicas} -> {d.to_replicas}", d.rule, d.message)
    return table


def render(s: FleetSnapshot) -> RenderableType:
    header = Text.assemble(
        (f"shoal up {s.name}", "bold"),
        f"  model {s.model}  OpenAI base URL ",
        (f"{s.url}/v1", "bold cyan"),
        f"  dashboard {s.url}/dashboard",
    )
    routing = ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.routing.items())) or "none yet"
    figures = Text(
        f"{fleet_line(s)} | arrivals {_num(s.arrival_rate, '{:.1f}', '/s')}\nrouting decisions by reason: {routing}"
    )
    if s.current:
        figures.append(f"\nautoscaler now: {s.current.rule}: {s.current.message}", style="bold")
    if s.metrics_missing:
        figures.append(f"\nmetrics: {s.metrics_missing}", style="yellow")
    events = Text("\n".join(event_line(e) for e in s.events[-6:]))
    return Group(
        header,
        figures,
        _replicas(s),
        _decisions(s),
        Text("recent events", style="italic"),
        events,
        Text("Ctrl-C stops the fleet", style="dim"),
    )
