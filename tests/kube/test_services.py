"""The real Prometheus, Alertmanager and Redis fixtures work end to end (what other suites build on)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from support.kube_testbed import ControlPlane
from support.polling import eventually
from support.services import Prometheus, Service, http_json


def self_scrape(prometheus: Prometheus) -> dict[str, Any]:
    return {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prometheus.port}"]}]}


def test_redis_server_stores_and_returns_values(redis_server: Service) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.set("shoal:test", "fleet")
    assert client.get("shoal:test") == b"fleet"
    assert client.incr("shoal:counter") == 1


def test_prometheus_scrapes_itself(prometheus: Prometheus) -> None:
    prometheus.apply_config({"global": {"scrape_interval": "1s"}, "scrape_configs": [self_scrape(prometheus)]})
    result = eventually(lambda: prometheus.query('up{job="prometheus"}'))
    assert result[0]["value"][1] == "1"


def test_prometheus_alert_reaches_alertmanager(prometheus: Prometheus, alertmanager: Service) -> None:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [self_scrape(prometheus)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.url.removeprefix("http://")]}]}]},
    }
    rules = {
        "groups": [
            {
                "name": "shoal-test",
                "rules": [
                    {"alert": "ShoalTestAlwaysFiring", "expr": "vector(1)", "labels": {"severity": "page"}},
                ],
            }
        ]
    }
    prometheus.apply_config(config, rules)

    def received() -> list[dict[str, Any]]:
        alerts = http_json(alertmanager.url + "/api/v2/alerts")
        return [a for a in alerts if a["labels"].get("alertname") == "ShoalTestAlwaysFiring"]

    alert = eventually(received, timeout=60)[0]
    assert alert["labels"]["severity"] == "page"
    assert alert["status"]["state"] == "active"


@pytest.mark.kube
def test_prometheus_scrapes_the_test_apiserver(prometheus: Prometheus, kube_apiserver: ControlPlane) -> None:
    # Debian's Prometheus is built without kubernetes_sd_configs, so the apiserver is a static TLS target
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            self_scrape(prometheus),
            {
                "job_name": "kube-apiserver",
                "scheme": "https",
                "static_configs": [{"targets": [kube_apiserver.url.removeprefix("https://")]}],
                "tls_config": {
                    "ca_file": str(kube_apiserver.ca_file),
                    "cert_file": str(kube_apiserver.admin_cert_file),
                    "key_file": str(kube_apiserver.admin_key_file),
                },
            },
        ],
    }
    prometheus.apply_config(config)
    up = eventually(lambda: prometheus.query('up{job="kube-apiserver"} == 1'))
    assert up[0]["metric"]["instance"] == kube_apiserver.url.removeprefix("https://")
    assert eventually(lambda: prometheus.query('apiserver_request_total{job="kube-apiserver"}'))
