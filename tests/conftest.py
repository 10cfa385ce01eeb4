"""Session fixtures for real infrastructure: a Kubernetes control plane, Prometheus, Alertmanager, Redis.

Missing binaries make these fixtures fail (never skip): `make test` builds and installs them first.
Component logs are attached to the report of any failing test that used one of these fixtures. At the end, the
session fails if any log it produced carries an API key or a bearer token (``support.secret_scan``).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# `support` must import the same way under any pytest import mode (prepend, importlib) and package layout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.kube_testbed import ControlPlane, KubeTestbinMissing, kube_testbin_dir
from support.secret_scan import SecretCatcher, scan_log_files
from support.services import Prometheus, Service, start_alertmanager, start_prometheus, start_redis

# No property test is timed (performance lives in bench/): hypothesis's per-example deadline would fail an example
# for the machine's load, not for what it checks.
settings.register_profile("shoal", deadline=None)
settings.load_profile("shoal")

# fixture name -> log source of its running components, for the reports of failing tests that used it
_LOG_SOURCES: dict[str, Callable[[], str]] = {}


def _require(start: Callable[[], object]) -> object:
    """Turns a missing binary into a plain test failure with the fix, not a traceback or a skip."""
    try:
        return start()
    except KubeTestbinMissing as missing:
        message = str(missing)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (RBAC, admin cert in system:masters); `.kubeconfig`, `.url`, `.ca_file`, helpers."""
    bin_dir = _require(kube_testbin_dir)
    plane = ControlPlane(tmp_path_factory.mktemp("kube"), bin_dir=bin_dir)  # type: ignore[arg-type]
    _LOG_SOURCES["kube_apiserver"] = plane.component_logs
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        _LOG_SOURCES.pop("kube_apiserver", None)


@pytest.fixture(scope="session")
def kube_cluster(kube_apiserver: ControlPlane) -> ControlPlane:
    """The same plane plus controller-manager, scheduler and kwok with 2 fake nodes of 8 `nvidia.com/gpu` each."""
    kube_apiserver.start_workloads()
    return kube_apiserver


@pytest.fixture(scope="session")
def process_node(kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Node ``proc-node-0``, whose pods run as local processes (``support.process_node.ProcessNode``: a kubelet
    stand-in); a pod lands on it only with ``.placement()``'s node selector and toleration."""
    from support.process_node import ProcessNode  # the kubernetes client: only for the sessions that use it

    node = ProcessNode(kube_cluster.api_client(), "proc-node-0", tmp_path_factory.mktemp("proc-node-0"))
    _LOG_SOURCES["process_node"] = node.log_tail
    try:
        yield node.start()
    finally:
        node.stop()
        _LOG_SOURCES.pop("process_node", None)


@pytest.fixture(scope="session")
def installed_chart(kube_apiserver: ControlPlane) -> ControlPlane:
    """charts/shoal installed into the test cluster (CRDs, RBAC, peering object, operator Deployment); shared by
    the operator and the autoscale tests."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "operator"))
    from operator_harness import install_chart

    return install_chart(kube_apiserver)


@pytest.fixture(scope="session")
def operator_kubeconfig(installed_chart: ControlPlane) -> Path:
    """A kubeconfig holding a token of the chart's ServiceAccount: the operator gets exactly the chart's RBAC."""
    from operator_harness import RELEASE_NAMESPACE, SERVICE_ACCOUNT

    return installed_chart.kubeconfig_for_service_account(RELEASE_NAMESPACE, SERVICE_ACCOUNT, create=False).kubeconfig


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping itself every second; `apply_config` swaps in a test's scrape configs and rules."""
    server = _require(lambda: start_prometheus(tmp_path_factory.mktemp("prometheus")))
    assert isinstance(server, Prometheus)
    yield from _owned("prometheus", server)


@pytest.fixture(scope="session")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Alertmanager with clustering off and 1 s group timers; `.url` is its HTTP API."""
    server = _require(lambda: start_alertmanager(tmp_path_factory.mktemp("alertmanager")))
    assert isinstance(server, Service)
    yield from _owned("alertmanager", server)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """redis-server without persistence; `.url` is redis://127.0.0.1:PORT/0."""
    server = _require(lambda: start_redis(tmp_path_factory.mktemp("redis")))
    assert isinstance(server, Service)
    yield from _owned("redis_server", server)


def _owned(name: str, server: Service) -> Iterator[Service]:
    _LOG_SOURCES[name] = server.log_tail
    try:
        yield server
    finally:
        server.stop()
        _LOG_SOURCES.pop(name, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for name in set(getattr(item, "fixturenames", ())) & _LOG_SOURCES.keys():
            report.sections.append((f"{name} logs", _LOG_SOURCES[name]()))


_SECRETS = SecretCatcher()
_BASETEMP: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    logging.getLogger().addHandler(_SECRETS)


@pytest.fixture(scope="session", autouse=True)
def _remember_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    _BASETEMP.append(tmp_path_factory.getbasetemp())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the session if a key or token reached any log it produced (``support.secret_scan``)."""
    found = _SECRETS.found + [hit for root in _BASETEMP for hit in scan_log_files(root)]
    if found:
        print("\nSECRETS IN LOGS (keys and tokens must never be logged):\n  " + "\n  ".join(found[:50]))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """Quiet CI: Triton's nanobind bindings print a page of "leaked function" lines while the interpreter shuts
    down (objects still alive at exit, not a leak during the run; nanobind's docs, "Reference leaks"), which
    buried the test summary at the end of every log. Triton offers no switch for them (nanobind's is C++-only),
    so a session that loaded Triton sends stderr nowhere at exit: from an ``atexit`` handler, because pytest
    puts its captured stderr back after this hook, and atexit handlers run before the interpreter's teardown."""
    if "triton" in sys.modules:
        atexit.register(_silence_stderr)


def _silence_stderr() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
