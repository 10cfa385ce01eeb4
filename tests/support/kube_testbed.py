"""A real Kubernetes control plane on loopback, built from Go modules by `make kube-testbin`.

Fakes get schema validation, CEL rules, RBAC, server-side apply, subresources, conflicts and garbage collection
wrong, so the operator is tested against a real etcd + kube-apiserver (what controller-runtime's envtest runs),
optionally with kube-controller-manager, kube-scheduler and kwok (fake kubelets with `nvidia.com/gpu` capacity)
so that Deployments really get scheduled, Running pods. Used by the pytest fixtures in tests/conftest.py and by
`make kube-up` (tests/support/kube_up.py).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "kube-testbin" / "build.sh"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "helm", "kwok")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_LEASE_SECONDS = 40  # a kubelet's default; kwok renews the lease every quarter of it


class KubeTestbinMissing(RuntimeError):
    """The control-plane binaries are not built: the kube tests fail with this rather than skip."""


class ComponentFailed(RuntimeError):
    """A component exited or never became ready; the message carries the tail of its log."""


def kube_testbin_dir() -> Path:
    """Where the binaries are: $SHOAL_KUBE_TESTBIN, else the cache dir that build.sh maps the current pins to."""
    override = os.environ.get("SHOAL_KUBE_TESTBIN")
    if override:
        bin_dir = Path(override)
        missing = [name for name in BINARIES if not (bin_dir / name).is_file()]
        if missing:
            raise KubeTestbinMissing(f"SHOAL_KUBE_TESTBIN={bin_dir} lacks {', '.join(missing)}")
        return bin_dir
    result = subprocess.run(["bash", str(BUILD_SCRIPT), "--bin-dir"], capture_output=True, text=True)
    if result.returncode != 0:
        raise KubeTestbinMissing(result.stderr.strip() or f"{BUILD_SCRIPT} --bin-dir failed")
    bin_dir = Path(result.stdout.strip())
    if not (bin_dir / ".complete").is_file():
        raise KubeTestbinMissing(
            f"the Kubernetes test binaries are not built (expected in {bin_dir}). Run `make kube-testbin` "
            "(needs Go >= 1.24 and the Go module proxy; about 20 minutes cold on 2 cores), or point "
            "SHOAL_KUBE_TESTBIN at a directory holding " + ", ".join(BINARIES) + "."
        )
    return bin_dir


def kubectl_binary() -> Path:
    """kubectl is not built here (Debian's or the image's is used); its absence is a setup error, not a skip."""
    found = shutil.which("kubectl")
    if found is None:
        raise KubeTestbinMissing("kubectl is not on PATH; install it (e.g. Debian's kubernetes-client) and rerun")
    return Path(found)


def free_port() -> int:
    """A loopback port nobody listens on now (engineers and CI share this machine: no fixed ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    """A throwaway CA that signs the apiserver's serving cert and every client cert (admin and extra users)."""

    def __init__(self, common_name: str = "shoal-test-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem_key(self.key)

    def issue(
        self,
        common_name: str,
        organizations: Sequence[str] = (),
        *,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
    ) -> tuple[bytes, bytes]:
        """Returns (cert PEM, key PEM). Kubernetes reads a client cert's CN as the user and each O as a group."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


@dataclass
class Component:
    """One running binary, its log file, and how to tell it is healthy."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the component's whole process group, then SIGKILL what is left."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def wait_for(check: Callable[[], bool], *, what: str, timeout: float, component: Component | None = None) -> None:
    """Polls `check` until it is true; fails at once with the component's log if that component died."""
    deadline = time.monotonic() + timeout
    while True:
        if component is not None and component.process.poll() is not None:
            raise ComponentFailed(
                f"{component.name} exited with {component.process.returncode} while waiting for {what}:\n"
                f"{component.log_tail()}"
            )
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError, subprocess.SubprocessError):
            pass
        if time.monotonic() > deadline:
            tail = f":\n{component.log_tail()}" if component else ""
            raise ComponentFailed(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
        time.sleep(0.2)


@dataclass
class Credentials:
    """A kubeconfig for one identity (admin, an extra user, or a ServiceAccount)."""

    kubeconfig: Path
    user: str


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, optionally with the workload controllers and kwok.

    `service_account_admission` is off when no controller-manager runs from the start (as envtest does): the
    plugin rejects pods until a controller has created the namespace's `default` ServiceAccount.
    """

    workdir: Path
    bin_dir: Path = field(default_factory=kube_testbin_dir)
    service_account_admission: bool = False
    components: list[Component] = field(default_factory=list)
    ca: CertificateAuthority = field(default_factory=CertificateAuthority)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki_dir = self.workdir / "pki"
        self.logs_dir = self.workdir / "logs"
        self.pki_dir.mkdir(exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca_file = self._write_pki("ca.crt", self.ca.cert_pem)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.admin_cert_file = self.pki_dir / "admin.crt"  # system:masters client cert, e.g. for a scraper
        self.admin_key_file = self.pki_dir / "admin.key"
        self.workloads = False

    # ---- files -------------------------------------------------------------------------------------------

    def _write_pki(self, name: str, data: bytes) -> Path:
        path = self.pki_dir / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def _write_kubeconfig(self, path: Path, user: str, auth: dict[str, str]) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "shoal-test",
                    "cluster": {"server": self.url, "certificate-authority-data": _b64(self.ca.cert_pem)},
                }
            ],
            "users": [{"name": user, "user": auth}],
            "contexts": [{"name": "shoal-test", "context": {"cluster": "shoal-test", "user": user}}],
            "current-context": "shoal-test",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def user_kubeconfig(self, user: str, groups: Iterable[str] = (), path: Path | None = None) -> Credentials:
        """A kubeconfig with a client cert for `user` in `groups`, for RBAC tests as someone other than admin."""
        cert, key = self.ca.issue(user, list(groups))
        slug = user.replace(":", "_").replace("/", "_")
        target = path or self.workdir / f"kubeconfig-{slug}"
        auth = {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
        return Credentials(self._write_kubeconfig(target, user, auth), user)

    def kubeconfig_for_service_account(self, namespace: str, name: str, *, create: bool = True) -> Credentials:
        """A kubeconfig with a TokenRequest token for a ServiceAccount (created if missing), to test a chart's RBAC."""
        if create:
            metadata = {"name": name, "namespace": namespace}
            manifest = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}
            self.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration=24h").stdout.strip()
        user = f"system:serviceaccount:{namespace}:{name}"
        target = self.workdir / f"kubeconfig-sa-{namespace}-{name}"
        return Credentials(self._write_kubeconfig(target, user, {"token": token}), user)

    # ---- clients -----------------------------------------------------------------------------------------

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """The environment for kubectl, helm, kwok or an operator process: KUBECONFIG and the bin dir on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs kubectl against this plane; with check, a failure raises with kubectl's stderr."""
        return self._run([str(kubectl_binary()), *args], input=input, check=check, kubeconfig=kubeconfig)

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs the built helm against this plane, with helm's caches kept inside the workdir."""
        helm_home = self.workdir / "helm"
        extra = {f"HELM_{kind}_HOME": str(helm_home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
        argv = [str(self.bin_dir / "helm"), *args]
        return self._run(argv, input=input, check=check, kubeconfig=kubeconfig, extra_env=extra)

    def _run(
        self,
        argv: list[str],
        *,
        input: str | None,
        check: bool,
        kubeconfig: Path | None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        env = self.env(kubeconfig) | (extra_env or {})
        result = subprocess.run(argv, input=input, capture_output=True, text=True, env=env, timeout=120)
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A `kubernetes.client.ApiClient` for this plane (admin unless another kubeconfig is given)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def get(self, path: str) -> bytes:
        """GET a raw apiserver path as admin (readiness checks and /version)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin_cert_file), str(self.admin_key_file))
        with urllib.request.urlopen(self.url + path, context=context, timeout=5) as response:
            return bytes(response.read())

    # ---- lifecycle ---------------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> Component:
        log_path = self.logs_dir / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
            )
        component = Component(name, process, log_path)
        self.components.append(component)
        return component

    def start(self) -> ControlPlane:
        """Starts etcd and kube-apiserver and waits for /readyz; writes the admin kubeconfig."""
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self.etcd_url = client_url
        etcd = self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                f"--data-dir={self.workdir / 'etcd'}",
                "--name=shoal-test",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=shoal-test={peer_url}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(client_url + "/health", timeout=2) as response:
                return b'"true"' in response.read()

        wait_for(healthy, what="etcd /health", timeout=60, component=etcd)

    def _start_apiserver(self) -> None:
        serving_cert, serving_key = self.ca.issue(
            "kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", "10.0.0.1"],
            server=True,
        )
        admin_cert, admin_key = self.ca.issue("shoal-admin", ["system:masters"])
        sa_key = ec.generate_private_key(ec.SECP256R1())
        sa_pub = sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        # the aggregation layer's front proxy: without it, every controller logs a missing requestheader CA
        front_proxy_cert, front_proxy_key = self.ca.issue("front-proxy-client")
        files = {
            "ca.key": self.ca.key_pem,
            "apiserver.crt": serving_cert,
            "apiserver.key": serving_key,
            "admin.crt": admin_cert,
            "admin.key": admin_key,
            "sa.key": _pem_key(sa_key),
            "sa.pub": sa_pub,
            "front-proxy.crt": front_proxy_cert,
            "front-proxy.key": front_proxy_key,
        }
        paths = {name: self._write_pki(name, data) for name, data in files.items()}
        self._write_kubeconfig(
            self.kubeconfig,
            "shoal-admin",
            {"client-certificate-data": _b64(admin_cert), "client-key-data": _b64(admin_key)},
        )
        admission = [] if self.service_account_admission else ["--disable-admission-plugins=ServiceAccount"]
        self._apiserver_argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={paths['apiserver.crt']}",
            f"--tls-private-key-file={paths['apiserver.key']}",
            f"--client-ca-file={self.ca_file}",
            f"--cert-dir={self.pki_dir}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={paths['sa.pub']}",
            f"--service-account-signing-key-file={paths['sa.key']}",
            *admission,
            "--endpoint-reconciler-type=none",  # Endpoints may not hold a loopback address
            f"--requestheader-client-ca-file={self.ca_file}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={paths['front-proxy.crt']}",
            f"--proxy-client-key-file={paths['front-proxy.key']}",
            "--profiling=false",
            "--v=1",
        ]
        self._wait_apiserver(self._spawn("kube-apiserver", self._apiserver_argv))

    def _wait_apiserver(self, apiserver: Component) -> None:
        wait_for(lambda: self.get("/readyz") == b"ok", what="kube-apiserver /readyz", timeout=120, component=apiserver)
        wait_for(self._default_namespace_exists, what="the default namespace", timeout=60, component=apiserver)

    def stop_apiserver(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stops the apiserver alone (SIGKILL by default: a crash); etcd and every client keep running."""
        apiserver = next(c for c in self.components if c.name == "kube-apiserver")
        os.killpg(apiserver.process.pid, sig)
        apiserver.process.wait(30)

    def restart_apiserver(self) -> None:
        """Starts the apiserver again on the same address, certificates and etcd, and waits until it is ready:
        clients must reconnect by themselves (the fault tests check that the operator does)."""
        index = next(i for i, c in enumerate(self.components) if c.name == "kube-apiserver")
        if self.components[index].process.poll() is None:
            self.stop_apiserver()
        self.components.pop(index)
        apiserver = self._spawn("kube-apiserver", self._apiserver_argv)
        self.components.insert(index, self.components.pop())  # its old place: stop() ends it after its clients
        self._wait_apiserver(apiserver)

    def _default_namespace_exists(self) -> bool:
        self.get("/api/v1/namespaces/default")
        return True

    def start_workloads(self, gpu_nodes: int = 2, gpus_per_node: int = 8) -> None:
        """Adds kube-controller-manager, kube-scheduler and kwok with fake GPU nodes, so pods really run."""
        if self.workloads:
            return
        kcm_port, scheduler_port, kwok_port = free_port(), free_port(), free_port()
        kubeconfig = str(self.kubeconfig)
        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",
                "--controllers=*",
                f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-signing-cert-file={self.ca_file}",
                f"--cluster-signing-key-file={self.pki_dir / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--v=1",
            ],
        )
        scheduler = self._spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--leader-elect=false",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                "--v=1",
            ],
        )
        kwok = self._spawn(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={self._write_kwok_config()}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--node-ip=10.1.0.1",
                "--cidr=10.2.0.0/16",
                f"--server-address=127.0.0.1:{kwok_port}",
            ],
        )
        self.workloads = True
        for component, port in ((kcm, kcm_port), (scheduler, scheduler_port)):
            wait_for(
                lambda port=port: self._healthz(port),
                what=f"{component.name} /healthz",
                timeout=90,
                component=component,
            )
        wait_for(
            lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
            what="the default ServiceAccount (controller-manager running)",
            timeout=90,
            component=kcm,
        )
        for index in range(gpu_nodes):
            self.add_gpu_node(f"gpu-node-{index}", gpus_per_node)
        wait_for(self.nodes_ready, what="kwok to mark the GPU nodes Ready", timeout=60, component=kwok)

    def _write_kwok_config(self) -> Path:
        """An explicit kwok config, so a person's ~/.kwok/kwok.yaml never leaks into the tests.

        Node leases must be on. Without them kwok v0.7 heartbeats node status only every 10 minutes, so every
        ~55 s (the controller-manager's 50 s grace period plus its 5 s monitor period) the node lifecycle
        controller declares both nodes unreachable and marks every pod on them NotReady, and kwok never readies
        a pod twice: a Deployment that was not yet seen available stays unavailable for good."""
        path = self.workdir / "kwok.yaml"
        config = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {"nodeLeaseDurationSeconds": NODE_LEASE_SECONDS},
        }
        path.write_text(yaml.safe_dump(config))
        return path

    @staticmethod
    def _healthz(port: int) -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the component's self-signed loopback cert; only liveness matters here
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as response:
            return response.read() == b"ok"

    def nodes_ready(self) -> bool:
        """Every kwok node reports Ready."""
        out = self.kubectl(
            "get",
            "nodes",
            "-l",
            "type=kwok",
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
        ).stdout.split()
        return bool(out) and all(status == "True" for status in out)

    def add_gpu_node(self, name: str, gpus: int = 8) -> None:
        """Creates a fake node that kwok manages, with `nvidia.com/gpu` capacity and no taints."""
        resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "nvidia.com/gpu.present": "true",
                },
            },
            "status": {"allocatable": resources, "capacity": resources},
        }
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(node))

    def version(self) -> str:
        """The apiserver's reported gitVersion (the pinned release when the ldflags are right)."""
        return str(yaml.safe_load(self.get("/version"))["gitVersion"])

    def component_logs(self, lines: int = 40) -> str:
        """The tail of every component's log, shown when a kube test fails."""
        parts = []
        for component in self.components:
            state = "running" if component.process.poll() is None else f"exited {component.process.returncode}"
            parts.append(f"----- {component.name} ({state}) {component.log_path}\n{component.log_tail(lines)}")
        return "\n".join(parts)

    def pids(self) -> list[int]:
        return [component.process.pid for component in self.components]

    def stop(self) -> None:
        """Stops every component, newest first (kwok and controllers before the apiserver, etcd last)."""
        for component in reversed(self.components):
            component.stop()
