"""Real Prometheus, Alertmanager and Redis (Debian's packages) on free loopback ports, for tests.

Each starter writes its own config into a work dir, waits until the service answers, and returns a handle whose
`stop()` ends it; logs stay in the work dir so a failing test can show them.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from .kube_testbed import Component, KubeTestbinMissing, free_port, wait_for

APT_HINT = "run `make system-deps` (apt-get install prometheus prometheus-alertmanager redis-server)"


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise KubeTestbinMissing(f"{name} is not installed; {APT_HINT}")
    return found


def _spawn(name: str, argv: list[str], workdir: Path) -> Component:
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            start_new_session=True,
        )
    return Component(name, process, log_path)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return 200 <= response.status < 300


def http_json(url: str, payload: Any | None = None) -> Any:
    """GET (or POST `payload` as JSON) and decode the JSON answer: enough for the Prometheus and Alertmanager APIs."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


@dataclass
class Service:
    """A running service: where it listens and the process behind it."""

    url: str
    port: int
    workdir: Path
    component: Component

    def stop(self) -> None:
        self.component.stop()

    def log_tail(self, lines: int = 40) -> str:
        return self.component.log_tail(lines)


@dataclass
class Prometheus(Service):
    """Prometheus with the lifecycle API on, so a test can swap scrape configs and rules with `apply_config`."""

    config_path: Path

    def apply_config(self, config: dict[str, Any], rules: dict[str, Any] | None = None) -> None:
        """Writes a new prometheus.yml (and a rules file, if given) and reloads; raises if Prometheus rejects it."""
        config = dict(config)
        if rules is not None:
            rules_path = self.workdir / "rules.yml"
            rules_path.write_text(yaml.safe_dump(rules))
            config["rule_files"] = [str(rules_path)]
        self.config_path.write_text(yaml.safe_dump(config))
        request = urllib.request.Request(self.url + "/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status != 200:
                raise RuntimeError(f"Prometheus reload failed: {response.read()!r}")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        answer = http_json(f"{self.url}/api/v1/query?query={quote(promql)}")
        return list(answer["data"]["result"])


def start_prometheus(workdir: Path, config: dict[str, Any] | None = None) -> Prometheus:
    """Starts Prometheus scraping itself every second (or with `config`), with a throwaway TSDB."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = workdir / "prometheus.yml"
    config = config or {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
    }
    config_path.write_text(yaml.safe_dump(config))
    component = _spawn(
        "prometheus",
        [
            _binary("prometheus"),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1h",
            # alerts that fire before the notifier has discovered Alertmanager are dropped and resent only after
            # this delay (1 min by default): keep it short so an alert reaches Alertmanager within seconds
            "--rules.alert.resend-delay=1s",
        ],
        workdir,
    )
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _http_ok(url + "/-/ready"), what="Prometheus /-/ready", timeout=60, component=component)
    return Prometheus(url, port, workdir, component, config_path)


def start_alertmanager(workdir: Path, config: dict[str, Any] | None = None) -> Service:
    """Starts Alertmanager with clustering off and short group timers (the defaults hold the first alert ~1 min)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = workdir / "alertmanager.yml"
    config = config or {
        "route": {"receiver": "null", "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "null"}],
    }
    config_path.write_text(yaml.safe_dump(config))
    component = _spawn(
        "alertmanager",
        [
            _binary("prometheus-alertmanager"),
            f"--config.file={config_path}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        workdir,
    )
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _http_ok(url + "/-/ready"), what="Alertmanager /-/ready", timeout=60, component=component)
    return Service(url, port, workdir, component)


def route_alerts_to_shoal(alertmanager: Service, webhook_url: str, token_file: Path) -> None:
    """Loads the route docs/autoscaling.md documents (alerts labelled ``infd`` grouped per fleet, sent with
    their resolutions to the operator's webhook with a bearer token read from a file, as from a mounted Secret),
    with 1 s group timers so a test need not wait Alertmanager's defaults, and waits for the reload."""
    config = {
        "route": {
            "receiver": "null",
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
            "routes": [{"receiver": "shoal", "matchers": ['infd=~".+"'], "group_by": ["namespace", "infd"]}],
        },
        "receivers": [
            {"name": "null"},
            {
                "name": "shoal",
                "webhook_configs": [
                    {
                        "url": webhook_url,
                        "send_resolved": True,
                        "max_alerts": 0,
                        "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token_file)}},
                    }
                ],
            },
        ],
    }
    (alertmanager.workdir / "alertmanager.yml").write_text(yaml.safe_dump(config))
    request = urllib.request.Request(alertmanager.url + "/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def start_redis(workdir: Path, port: int | None = None) -> Service:
    """Starts redis-server on loopback without persistence (on ``port``, to bring a stopped one back)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    component = _spawn(
        "redis",
        [
            _binary("redis-server"),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        workdir,
    )

    def pong() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    wait_for(pong, what="redis PING", timeout=30, component=component)
    return Service(f"redis://127.0.0.1:{port}/0", port, workdir, component)
