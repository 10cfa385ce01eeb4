"""End to end on a real cluster: install the chart, deploy examples/smollm2-cpu.yaml, and use it as a user would.

One script, two clusters; every step is shared except creating the cluster and loading the images:

- ``--cluster kind`` (``make e2e-kind``; needs Docker or Podman to run kind's node containers): builds kind from
  Go modules, creates a cluster, builds the images with that runtime (``make images``) and loads them,
  ``helm install``s the chart (the operator runs from its image), applies the example, waits for Ready, reads
  the generated API key the way the chart's NOTES say, sends a chat completion through the gateway Service
  (``kubectl port-forward``) with the ``openai`` client, checks that a request without the key gets a 401, the
  printer columns and the gateway's metrics, and deletes the cluster.
- ``--cluster kwok`` (CI, ``make e2e-kwok``): the test bed here (real etcd, kube-apiserver, controller-manager,
  scheduler; kwok's fake kubelets, tests/support/kube_testbed.py). kwok pods run no container, so two steps
  change: the operator runs as a local process holding the chart's ServiceAccount token (exactly the chart's
  RBAC) instead of the chart's pod, and the serving steps are replaced by what can be checked without a
  container: the generated key is a tenants file the gateway accepts and that rejects other keys, the gateway
  pods mount it, and the NetworkPolicy and the pods' securityContext are in place.

Exit status 0 when every step passed; a failing step says which and why.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the kwok test bed lives with the tests

CHART = REPO / "charts" / "shoal"
EXAMPLE = REPO / "examples" / "smollm2-cpu.yaml"
RELEASE, RELEASE_NAMESPACE, SERVICE_ACCOUNT = "shoal", "shoal-system", "shoal"
NAMESPACE = "shoal-e2e"
KIND_CLUSTER = "shoal-e2e"
PRINTER_COLUMNS = ["NAME", "MODEL", "READY", "DESIRED", "QUEUE", "TTFT-P95-SECONDS", "AGE"]


class E2EError(RuntimeError):
    """A step failed; the message says which and why."""


def step(what: str) -> None:
    print(f"==> {what}", flush=True)


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise E2EError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Cluster:
    """kubectl and helm against one cluster."""

    kubeconfig: Path
    helm_binary: Path
    workdir: Path

    def run(
        self, argv: list[str], *, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            **{f"HELM_{k}_HOME": str(self.workdir / "helm" / k.lower()) for k in ("CACHE", "CONFIG", "DATA")},
        }
        result = subprocess.run(argv, input=input, capture_output=True, text=True, env=env, timeout=timeout)
        if check and result.returncode != 0:
            raise E2EError(f"{' '.join(argv[:4])} ... failed:\n{result.stderr.strip() or result.stdout.strip()}")
        return result

    def kubectl(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run(["kubectl", *args], **kwargs)

    def helm(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.helm_binary), *args], **kwargs)

    def get(self, *what: str) -> dict[str, Any] | None:
        result = self.kubectl("get", "-n", NAMESPACE, *what, "-o", "yaml", check=False)
        return yaml.safe_load(result.stdout) if result.returncode == 0 else None


# ---- creating a cluster: the only steps that differ, with loading the images ---------------------------------


@contextlib.contextmanager
def kwok_cluster(workdir: Path) -> Iterator[Cluster]:
    from support.kube_testbed import ControlPlane, kube_testbin_dir

    step("starting the kwok test bed (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    plane = ControlPlane(workdir / "kube", bin_dir=kube_testbin_dir())
    try:
        plane.start()
        plane.start_workloads()
        yield Cluster(plane.kubeconfig, plane.bin_dir / "helm", workdir)
    finally:
        plane.stop()


def container_runtime() -> str:
    """docker or podman, whichever can run kind's node containers here; fails fast with what to install."""
    reasons = []
    for name in ("docker", "podman"):
        if shutil.which(name) is None:
            reasons.append(f"{name} is not installed")
            continue
        info = subprocess.run([name, "info"], capture_output=True, text=True, timeout=60)
        if info.returncode == 0:
            return name
        reasons.append(f"{name} cannot run containers: {(info.stderr.strip().splitlines() or ['?'])[-1]}")
    raise E2EError(
        "kind runs its nodes as containers, and no container runtime can start one here:\n  - "
        + "\n  - ".join(reasons)
        + "\nInstall Docker (and start its daemon) or Podman, or run the same steps on the kwok test bed: "
        "make e2e-kwok"
    )


@contextlib.contextmanager
def kind_cluster(workdir: Path) -> Iterator[Cluster]:
    runtime = container_runtime()
    from support.kube_testbed import kube_testbin_dir

    kind = subprocess.run(["bash", str(REPO / "hack" / "kind" / "build.sh")], capture_output=True, text=True)
    if kind.returncode != 0:
        raise E2EError(kind.stderr.strip())
    kind_binary = kind.stdout.strip()
    env = {**os.environ, "KIND_EXPERIMENTAL_PROVIDER": runtime}
    kubeconfig = workdir / "kubeconfig"
    step(f"creating kind cluster {KIND_CLUSTER} with {runtime}")
    created = subprocess.run(
        [kind_binary, "create", "cluster", "--name", KIND_CLUSTER, "--kubeconfig", str(kubeconfig), "--wait", "120s"],
        capture_output=True,
        text=True,
        env=env,
    )
    try:
        if created.returncode != 0:
            raise E2EError(f"kind could not create a cluster with {runtime}:\n{created.stderr.strip()}")
        load_images(kind_binary, runtime, env, workdir)
        yield Cluster(kubeconfig, kube_testbin_dir() / "helm", workdir)
    finally:
        step(f"deleting kind cluster {KIND_CLUSTER}")
        subprocess.run([kind_binary, "delete", "cluster", "--name", KIND_CLUSTER], env=env, capture_output=True)


def load_images(kind_binary: str, runtime: str, env: dict[str, str], workdir: Path) -> None:
    step(f"building the images with {runtime} (make images) and loading them into the cluster")
    built = subprocess.run(
        ["bash", str(REPO / "hack" / "images" / "build.sh"), "all"],
        cwd=REPO,
        env={**os.environ, "BUILDER": runtime, "PY": sys.executable},
    )
    if built.returncode != 0:
        raise E2EError("make images failed (see above)")
    tags = subprocess.run(
        ["bash", str(REPO / "hack" / "images" / "build.sh"), "--tags"],
        capture_output=True,
        text=True,
        env={**os.environ, "PY": sys.executable},
        check=True,
    ).stdout.split()[1::2]
    for tag in tags:
        archive = workdir / "image.tar"
        subprocess.run([runtime, "save", "-o", str(archive), tag], check=True)
        loaded = subprocess.run(
            [kind_binary, "load", "image-archive", str(archive), "--name", KIND_CLUSTER],
            env=env,
            capture_output=True,
            text=True,
        )
        archive.unlink()
        if loaded.returncode != 0:
            raise E2EError(f"kind could not load {tag}:\n{loaded.stderr.strip()}")


# ---- the shared steps ----------------------------------------------------------------------------------------


def install_chart(cluster: Cluster, *, wait: bool) -> str:
    step("helm install charts/shoal")
    result = cluster.helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        *(["--wait", "--timeout", "5m"] if wait else []),
        timeout=400,
    )
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/inferencedeployments.shoal.dev")
    notes = result.stdout
    for promise in ("kubectl port-forward svc/", "-api-keys", "Authorization: Bearer"):
        if promise not in notes:
            raise E2EError(f"the chart's NOTES do not say how to reach the gateway and get the key ({promise!r})")
    return notes


@contextlib.contextmanager
def local_operator(cluster: Cluster) -> Iterator[None]:
    """kwok only: the operator as a local process with the chart's ServiceAccount token (the chart's RBAC)."""
    step("starting the operator locally with the chart's ServiceAccount (kwok pods run no containers)")
    token = cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", RELEASE_NAMESPACE, "--duration=1h").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "operator"
    operator_config = cluster.workdir / "kubeconfig-operator"
    operator_config.write_text(yaml.safe_dump(config))
    log = (cluster.workdir / "operator.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shoal.operator",
            "operator",
            "--kubeconfig",
            str(operator_config),
            "--peering",
            "shoal",
            "--resync-seconds",
            "2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        yield
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def deploy_example(cluster: Cluster) -> None:
    step(f"kubectl apply -f examples/smollm2-cpu.yaml -n {NAMESPACE}")
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE))


def wait_ready(cluster: Cluster, timeout: float) -> None:
    step("waiting for the InferenceDeployment to be Ready")
    result = cluster.kubectl(
        "wait",
        "-n",
        NAMESPACE,
        "--for=condition=Ready",
        "infd/smollm2",
        f"--timeout={int(timeout)}s",
        check=False,
        timeout=timeout + 30,
    )
    if result.returncode != 0:
        status = (cluster.get("infd", "smollm2") or {}).get("status")
        pods = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout
        raise E2EError(f"smollm2 never became Ready: {result.stderr.strip()}\nstatus: {status}\n{pods}")


def check_printer_columns(cluster: Cluster) -> None:
    step("kubectl get infd: the printer columns")
    header, *rows = cluster.kubectl("get", "infd", "-n", NAMESPACE).stdout.splitlines()
    if header.split() != PRINTER_COLUMNS:
        raise E2EError(f"printer columns {header.split()}, expected {PRINTER_COLUMNS}")
    row = dict(zip(PRINTER_COLUMNS, rows[0].split(), strict=False))
    if (row["NAME"], row["MODEL"], row["READY"], row["DESIRED"]) != ("smollm2", "smollm2-135m", "1", "1"):
        raise E2EError(f"unexpected row: {rows[0]}")


def api_key(cluster: Cluster) -> str:
    """The generated key, read as the NOTES say (the Secret's tenants file, first key)."""
    step("reading the generated API key from Secret smollm2-api-keys")
    encoded = cluster.kubectl(
        "get", "secret", "smollm2-api-keys", "-n", NAMESPACE, "-o", "jsonpath={.data.api-keys}"
    ).stdout
    tenants_file = base64.b64decode(encoded).decode()
    tenants = yaml.safe_load(tenants_file)["tenants"]
    return next(iter(tenants.values()))["api_keys"][0]


def check_lockdown(cluster: Cluster) -> None:
    step("checking the NetworkPolicy and the pods' securityContext")
    policy = cluster.get("networkpolicy", "smollm2-engine")
    if policy is None:
        raise E2EError("no NetworkPolicy smollm2-engine")
    for name in ("smollm2-engine", "smollm2-gateway"):
        pod = (cluster.get("deployment", name) or {})["spec"]["template"]["spec"]
        context = pod["containers"][0].get("securityContext", {})
        if not (pod.get("securityContext", {}).get("runAsNonRoot") and context.get("readOnlyRootFilesystem")):
            raise E2EError(f"{name} pods are not locked down: {pod.get('securityContext')} {context}")


def check_key_offline(cluster: Cluster, key: str) -> None:
    """kwok's stand-in for serving: the gateway would load this tenants file, and it admits only this key."""
    from shoal.gateway.auth import ApiKeys

    step("checking the generated key against the gateway's own key loader (kwok: no gateway runs)")
    path = cluster.workdir / "api-keys"
    encoded = cluster.kubectl("get", "secret", "smollm2-api-keys", "-n", NAMESPACE, "-o", "jsonpath={.data.api-keys}")
    path.write_bytes(base64.b64decode(encoded.stdout))
    keys = ApiKeys.from_file(path)
    if keys.tenant_for(f"Bearer {key}") is None or keys.tenant_for(None) is not None:
        raise E2EError("the generated tenants file does not admit exactly its key")
    volumes = (cluster.get("deployment", "smollm2-gateway") or {})["spec"]["template"]["spec"]["volumes"]
    if not any(v.get("secret", {}).get("secretName") == "smollm2-api-keys" for v in volumes):
        raise E2EError("the gateway pods do not mount the generated key")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def port_forward(cluster: Cluster) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        ["kubectl", "port-forward", "-n", NAMESPACE, "svc/smollm2", f"{port}:80"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_for(up, 60, "kubectl port-forward to the gateway Service")
        yield url
    finally:
        process.terminate()
        process.wait(10)


def check_serving(cluster: Cluster, key: str) -> None:
    import openai

    step("a chat completion through the gateway Service with the openai client")
    with port_forward(cluster) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key)
        reply = client.chat.completions.create(
            model="smollm2-135m",
            max_tokens=16,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
        )
        if not reply.choices[0].message.content:
            raise E2EError(f"empty completion: {reply}")
        try:
            openai.OpenAI(base_url=f"{url}/v1", api_key="sk-wrong").models.list()
            raise E2EError("a wrong API key was accepted")
        except openai.AuthenticationError:
            pass
        step("the gateway's metrics count the request")
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        if not any(
            line.startswith("shoal_gateway_requests_total{") and 'status="200"' in line for line in metrics.splitlines()
        ):
            raise E2EError("no shoal_gateway_requests_total with status 200 in the gateway's /metrics")


def run(cluster_kind: str, workdir: Path) -> None:
    create = kind_cluster if cluster_kind == "kind" else kwok_cluster
    with create(workdir) as cluster:
        install_chart(cluster, wait=cluster_kind == "kind")
        with local_operator(cluster) if cluster_kind == "kwok" else contextlib.nullcontext():
            deploy_example(cluster)
            wait_ready(cluster, 600 if cluster_kind == "kind" else 120)
            check_printer_columns(cluster)
            check_lockdown(cluster)
            key = api_key(cluster)
            if cluster_kind == "kind":
                check_serving(cluster, key)
            else:
                check_key_offline(cluster, key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", choices=["kwok", "kind"], required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shoal-e2e-") as workdir:
        try:
            run(args.cluster, Path(workdir))
        except E2EError as error:
            print(f"e2e ({args.cluster}) failed: {error}", file=sys.stderr)
            return 1
    print(f"e2e ({args.cluster}) passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
