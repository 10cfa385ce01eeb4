"""The Prometheus Operator on the test bed: built from its Go module by ``make prometheus-operator``
(hack/prometheus-operator/build.sh, with its CRDs copied beside the binary from the module cache) and run as a
process against a :class:`ControlPlane` with the admin client certificate, as the control plane's own binaries are.
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

from .kube_testbed import REPO_ROOT, Component, ControlPlane, free_port, wait_for

BUILD_SCRIPT = REPO_ROOT / "hack" / "prometheus-operator" / "build.sh"


class PrometheusOperatorMissing(RuntimeError):
    """Not built here: its test skips with this message."""


def prometheus_operator_dir() -> Path:
    """The build directory (``bin/operator``, ``crds/``) that build.sh maps the current pin to."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "--dir"], capture_output=True, text=True)
    if result.returncode != 0:
        raise PrometheusOperatorMissing(result.stderr.strip() or f"{BUILD_SCRIPT} --dir failed")
    root = Path(result.stdout.strip())
    if not (root / ".complete").is_file():
        raise PrometheusOperatorMissing(
            f"the Prometheus Operator is not built (expected in {root}): run `make prometheus-operator` "
            "(needs Go >= 1.26 and the Go module proxy; a few minutes cold on 2 cores)"
        )
    return root


def start_prometheus_operator(plane: ControlPlane, root: Path, workdir: Path) -> Component:
    """The operator watching every namespace of ``plane``, ready once its ``/healthz`` answers."""
    port = free_port()
    argv = [
        str(root / "bin" / "operator"),
        f"--apiserver={plane.url}",
        f"--ca-file={plane.ca_file}",
        f"--cert-file={plane.admin_cert_file}",
        f"--key-file={plane.admin_key_file}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    log_path = workdir / "prometheus-operator.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir, start_new_session=True
        )
    component = Component("prometheus-operator", process, log_path)

    def healthy() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return bool(response.status == 200)

    try:
        wait_for(healthy, what="the Prometheus Operator's /healthz", timeout=60, component=component)
    except BaseException:
        component.stop()
        raise
    return component
