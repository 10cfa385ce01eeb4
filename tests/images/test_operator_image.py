"""The operator/gateway image, built here the way `make images` builds it (buildah, a Debian base bootstrapped
with mmdebstrap, a host-built wheelhouse), and its commands run from the image with ``buildah run``."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from image_harness import BUILDAH, buildah, run_build
from support.kube_testbed import free_port
from support.polling import eventually

from shoal.operator.spec import DEFAULT_GATEWAY_IMAGE

pytestmark = pytest.mark.slow
NON_ROOT_UID = "65532"


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """A working container of the freshly built image (what ``buildah run`` executes in)."""
    built = run_build("operator", BUILDER="buildah")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert f"built {DEFAULT_GATEWAY_IMAGE}" in built.stdout
    name = buildah("from", "--pull-never", DEFAULT_GATEWAY_IMAGE).stdout.strip().splitlines()[-1]
    yield name
    buildah("rm", name, check=False)


def run_in(container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return buildah("run", "--isolation", "chroot", container, "--", *argv, check=False)


def test_operator_and_gateway_commands_run(container: str) -> None:
    operator = run_in(container, "shoal", "operator", "--help")
    assert operator.returncode == 0 and "--peering" in operator.stdout, operator.stderr
    gateway = run_in(container, "shoal", "gateway", "--help")
    assert gateway.returncode == 0 and "--api-keys" in gateway.stdout, gateway.stderr


def test_image_has_no_torch(container: str) -> None:
    result = run_in(container, "python3", "-c", "import torch")
    assert result.returncode != 0 and "No module named 'torch'" in result.stderr


def test_image_runs_as_a_non_root_user(container: str) -> None:
    assert run_in(container, "id", "-u").stdout.strip() == NON_ROOT_UID
    config = json.loads(buildah("inspect", "--type", "image", DEFAULT_GATEWAY_IMAGE).stdout)["OCIv1"]["config"]
    assert config["User"] == f"{NON_ROOT_UID}:{NON_ROOT_UID}" and config["Entrypoint"] == ["shoal"]


def test_gateway_from_the_image_answers_health(container: str) -> None:
    port = free_port()
    argv = [
        *BUILDAH,
        "run",
        "--isolation",
        "chroot",
        container,
        "--",
        "shoal",
        "gateway",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend",
        "http://127.0.0.1:9",
    ]
    gateway = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def healthy() -> bool:
        assert gateway.poll() is None, f"the gateway exited:\n{gateway.stdout.read() if gateway.stdout else ''}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        eventually(healthy, 60, "the image's gateway answering /health on loopback")
    finally:
        gateway.terminate()
        gateway.wait(30)
