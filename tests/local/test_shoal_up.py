"""``shoal up`` end to end with real processes: a burst scales a tiny-model fleet up, every request succeeds,
a crashed engine is restarted while the rest serve, the fleet scales back down, the dashboard renders in
headless Chromium, and no process outlives a SIGTERM or a SIGKILL of ``shoal up``."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from support.polling import eventually
from up_harness import UpProcess, alive, manifest, write_manifest

from shoal.local import shoal_command

MODEL = "tiny"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def _fleet_manifest(tiny_model: Path) -> dict:
    """Two sequences per engine and a queue target of 1, so the burst's 16 clients keep 14 requests in flight
    beyond what one engine runs: its queue stays over target for the policy's whole 6 s panic window even while
    a loaded machine keeps several clients between requests (12 clients over a target of 2 left a margin of five,
    which a load of 17 ate once). Engines get 180 s to load: two loading at once beside the burst took 24 s at
    load 13, and one past its start-up limit is restarted from scratch."""
    return manifest(
        str(tiny_model),
        model={"source": str(tiny_model), "servedName": MODEL},
        engine={"maxNumSeqs": 2, "maxModelLen": 256, "startupSeconds": 180},
        replicas={"min": 1, "max": 3},
        autoscaling={
            "enabled": True,
            "queueDepthPerReplica": 1,
            "ttftP95Seconds": 5,
            "scaleDownStabilizationSeconds": 15,
        },
    )


class Load:
    """``clients`` threads sending chats through the official client until stopped; every outcome is kept."""

    def __init__(self, url: str, clients: int) -> None:
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.one()

    def one(self) -> None:
        """One chat of up to 128 tokens: long enough that the engine, not this process's clients or the gateway
        (which a loaded machine slows as much), is what the burst waits on, so its requests queue there (at 32
        tokens a load of 15 left the engine's queue empty for 20 s of a 16-client burst)."""
        try:
            reply = self.client.chat.completions.create(
                model=MODEL, max_tokens=128, messages=[{"role": "user", "content": "count to ten"}]
            )
            assert reply.choices[0].message.content is not None
            self.ok += 1
        except Exception as error:  # noqa: BLE001 - every failure is the finding
            self.failures.append(repr(error))

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[UpProcess]:
    logs = tmp_path_factory.mktemp("up-fleet")
    up = UpProcess(write_manifest(logs, _fleet_manifest(tiny_model)), logs)
    try:
        eventually(lambda: up.ready() >= 1 and up.serving(), timeout=120, what="a first ready engine", detail=up.output)
        yield up
    finally:
        up.kill_everything()


def test_a_burst_scales_up_and_every_request_succeeds(fleet: UpProcess) -> None:
    load = Load(fleet.url, clients=16)
    try:
        eventually(lambda: fleet.ready() >= 2, timeout=240, what="a second ready engine", detail=fleet.output)
        time.sleep(2)  # requests keep flowing while the new engine joins the rotation
    finally:
        load.stop()
    assert load.failures == [] and load.ok > 20, load.failures[:5]
    snapshot = fleet.snapshot()
    assert snapshot is not None
    assert any(d["rule"].startswith("ScaleUp") and d["to_replicas"] > d["from_replicas"] for d in snapshot["decisions"])


def test_the_new_engines_start_up_is_shown_by_phase_to_its_first_token(fleet: UpProcess) -> None:
    load = Load(fleet.url, clients=0)
    for _ in range(4):  # round-robin or not, the new engine serves one of these
        load.one()

    def started() -> dict[str, float] | None:
        rows = (fleet.snapshot() or {}).get("replicas", [])
        return next((r["startup"] for r in rows if r["name"] != "engine-0" and "routed" in r["startup"]), None)

    phases = eventually(started, timeout=60, what="the new engine's phases to its first token", detail=fleet.output)
    assert list(phases)[:2] == ["spawn", "imports"] and phases["loading"] > 0 and phases["warming"] > 0
    assert all(seconds >= 0 for seconds in phases.values())
    assert "decision -> first token" in fleet.output()


def test_a_crashed_engine_is_restarted_with_backoff_while_the_rest_serve(fleet: UpProcess) -> None:
    ready = [r for r in eventually(fleet.snapshot, what="a snapshot")["replicas"] if r["phase"] == "ready"]
    assert len(ready) >= 2, "still scaled up (the scale-down window has not passed)"
    victim = ready[0]
    subprocess.run(["kill", "-9", str(victim["pid"])], check=True)
    load = Load(fleet.url, clients=0)
    for _ in range(5):
        load.one()
    assert load.failures == [] and load.ok == 5
    eventually(
        lambda: (
            (s := fleet.snapshot())
            and any(r["name"] == victim["name"] and r["restarts"] >= 1 and r["phase"] == "ready" for r in s["replicas"])
        ),
        timeout=90,
        what="the engine restarted and ready again",
        detail=fleet.output,
    )
    assert f"{victim['name']} exited with -9" in fleet.output()


def test_the_fleet_scales_back_down_after_its_window(fleet: UpProcess) -> None:
    eventually(
        lambda: (
            (s := fleet.snapshot())
            and s["desired"] == 1
            and len(s["replicas"]) == 1
            and s["replicas"][0]["phase"] == "ready"
        ),
        timeout=120,
        what="scale-down to one engine",
        detail=fleet.output,
    )
    snapshot = fleet.snapshot()
    assert snapshot is not None
    assert any(d["to_replicas"] < d["from_replicas"] for d in snapshot["decisions"]), snapshot["decisions"]
    assert "drained and stopped" in fleet.output()


def test_the_dashboard_renders_live_figures_in_headless_chromium(fleet: UpProcess, tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.fail("chromium is missing: make system-deps installs it", pytrace=False)
    dom = subprocess.run(
        [
            "chromium",
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            f"{fleet.url}/dashboard",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout
    assert "Shoal fleet: local-test" in dom
    assert '<div class="v">1</div><div class="k">ready engines</div>' in dom
    assert dom.count('<path d="M') >= 4  # the replica, queue, throughput and routing charts have lines
    assert "ScaleUp" in dom  # the decisions table
    assert "autoscaler now <b>" in dom  # the rule holding the count now, a hold included


def test_bench_serve_plots_the_fleet_over_its_run(fleet: UpProcess, tmp_path: Path) -> None:
    result = subprocess.run(
        shoal_command(
            "bench",
            "serve",
            "--url",
            fleet.url,
            "--model",
            MODEL,
            "--num-requests",
            "8",
            "--concurrency",
            "4",
            "--input-len",
            "16",
            "--output-len",
            "8",
            "--no-progress",
            "--plots",
            str(tmp_path),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "latency_cdf.png").stat().st_size > 0
    assert (tmp_path / "fleet_over_time.png").stat().st_size > 0


def test_sigterm_stops_every_process_and_no_request_hangs(fleet: UpProcess) -> None:
    assert fleet.seen, "the fleet's children were observed"
    load = Load(fleet.url, clients=4)
    eventually(lambda: load.ok >= 1, timeout=60, what="requests flowing")
    fleet.signal(signal.SIGTERM)
    assert fleet.process.wait(timeout=90) == 0, fleet.output()
    load.stop()
    assert not any(thread.is_alive() for thread in load.threads), "every request finished or failed"
    eventually(lambda: not any(alive(pid) for pid in fleet.seen), timeout=30, what="every child gone")
    assert "stopped; logs in" in fleet.output()


def test_a_sigkill_of_shoal_up_takes_its_children_with_it(tmp_path: Path, tiny_model: Path) -> None:
    document = _fleet_manifest(tiny_model)
    document["spec"]["autoscaling"] = {"enabled": False}
    up = UpProcess(write_manifest(tmp_path, document), tmp_path)
    try:
        eventually(lambda: up.ready() >= 1, timeout=120, what="a ready engine", detail=up.output)
        children = set(up.seen)
        assert len(children) == 2  # the gateway and one engine
        up.signal(signal.SIGKILL)
        up.process.wait(timeout=10)
        eventually(lambda: not any(alive(pid) for pid in children), timeout=30, what="children gone with it")
    finally:
        up.kill_everything()


def test_the_demo_answers_and_stops_by_itself(tmp_path: Path, tiny_model: Path) -> None:
    up = UpProcess(write_manifest(tmp_path, _fleet_manifest(tiny_model)), tmp_path, "--demo")
    try:
        assert up.process.wait(timeout=300) == 0, up.output()
        output = up.output()
        for step in (
            "demo: first answer",
            "demo: burst done",
            "completed / failed",
            "most engines ready at once",
            "demo: scaling decisions so far",
            "stopped; logs in",
        ):
            assert step in output, step
        assert output.count("demo: A: ") == 2
        completed = re.search(r"completed / failed +(\d+) / 0\n", output)
        assert completed and int(completed[1]) % 32 == 0, output  # whole rounds, none failed
        # the burst went on until the scale-up served: an engine started during it ran some of it
        served = re.search(r"demo: engines started during the burst that served it: (\d+)\n", output)
        assert served and int(served[1]) >= 1, output
        assert int(re.search(r"most engines ready at once during the burst: (\d+)", output)[1]) >= 2  # type: ignore[index]
    finally:
        up.kill_everything()


def test_a_model_that_will_not_load_is_retried_then_reported(tmp_path: Path, tiny_model: Path) -> None:
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not safetensors")
    document = manifest(str(broken), engine={"startupSeconds": 60})
    up = UpProcess(write_manifest(tmp_path, document), tmp_path, tui_flag=False)  # stdout is a file: log lines
    try:
        assert up.process.wait(timeout=120) == 1
        output = up.output()
        assert "restart 1 in 1 s" in output and "restart 2 in 2 s" in output
        assert "failed 3 times before any engine was ready; the model does not load" in output
    finally:
        up.kill_everything()


def test_bad_input_is_refused_before_anything_starts(tmp_path: Path, tiny_model: Path) -> None:
    invalid = write_manifest(tmp_path, manifest(str(tiny_model), replicas={"min": 4, "max": 2}), "invalid.yaml")
    result = subprocess.run(shoal_command("up", str(invalid), "--no-tui"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "spec.replicas: replicas.min must be less than or equal to replicas.max" in result.stderr

    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        valid = write_manifest(tmp_path, manifest(str(tiny_model)), "valid.yaml")
        result = subprocess.run(
            shoal_command("up", str(valid), "--no-tui", "--port", str(port)), capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
