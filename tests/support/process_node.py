"""A stand-in for a kubelet, for tests only: one Node of the test bed whose pods run as local processes.

A real kubelet cannot run here (no container runtime), and kwok's nodes run nothing, so this "process kubelet"
plays the kubelet's part for one Node: it registers the Node, keeps it Ready with a Lease renewed every 10 s
(as kwok does, ``support.kube_testbed``), and runs each pod bound to it as a process, writing the pod status the
EndpointSlice controller reads. What it does of a kubelet's work, and how:

- **Address.** Each pod gets an IP of its own, served by ``lo``: the node claims a /24 of the benchmarking range
  198.18.0.0/15 (RFC 2544) with one route, ``ip route add local 198.18.N.0/24 dev lo`` (what makes all of
  127.0.0.0/8 local), and hands out .2, .3, ... as pod IPs. Loopback itself cannot serve: the apiserver refuses
  127.0.0.0/8 in an EndpointSlice ("may not be in the loopback range"), so the endpoints would never appear.
  Claiming the route needs CAP_NET_ADMIN (root here); without it ``start`` fails saying so.
- **Container.** The pod's one container runs as ``command + args`` with only ``--host`` rewritten to the pod's
  IP (the port stays the container port, as in a pod's own network namespace). ``shoal`` is the engine image's
  entrypoint (docker/engine.Dockerfile), run here as this interpreter's ``python -m shoal.cli``. Its environment
  is this host's (standing for the image's), with ``SHOAL_CACHE`` pinned to this host's cache so the compiled
  kernels are reused, under the container's ``env`` values (``valueFrom``/``envFrom`` are not resolved).
  Init containers are skipped (none exists for a local model source such as ``smollm2-135m``; a fetch init
  container for hf:// or s3:// cannot run here) and each skip is logged. A ``configMap`` volume the container
  mounts is written at start into a directory of the node's (its keys as files, not followed afterwards), and
  an argument under the mount path is rewritten to that directory, as ``--host`` is. Other volumes, resources,
  the security context and restarts are not emulated: a container that exits stays terminated.
- **Status.** Phase Running with podIP, hostIP and a running container status once started; the Ready condition
  from the readiness probe's HTTP path, polled at its period (ready at the first success, unready after
  ``failureThreshold`` failures). As a kubelet does, probing goes on while the pod terminates, so ``serving``
  follows the engine. Startup and liveness probes are not acted on.
- **Deletion** (``deletionTimestamp`` set): the preStop hook (``sleep``, or ``exec`` run as a process), then
  SIGTERM, up to ``deletionGracePeriodSeconds`` from the deletion for the process to exit, SIGKILL, and finally
  the pod deleted with grace 0, as the kubelet ends it.

``stop()`` kills every process, deletes the Node and its Lease and gives the route back.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from shoal.local.process import shoal_command

log = logging.getLogger(__name__)

ADDRESS_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
NODE_LABEL = "shoal.dev/process-node"  # label and NoSchedule taint: only pods that ask for this node land on it
LEASE_SECONDS = 40
RENEW_SECONDS = 10
MERGE = "application/merge-patch+json"  # lists written whole, so every status write is complete


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def with_host(args: list[str], host: str) -> list[str]:
    """``args`` with the ``--host`` flag's value replaced by ``host`` (added when absent); nothing else changes."""
    out, replaced, i = [], False, 0
    while i < len(args):
        if args[i] == "--host" and i + 1 < len(args):
            out += ["--host", host]
            replaced, i = True, i + 2
            continue
        if args[i].startswith("--host="):
            out.append(f"--host={host}")
            replaced = True
        else:
            out.append(args[i])
        i += 1
    return out if replaced else [*out, "--host", host]


def _claim_subnet() -> ipaddress.IPv4Network:
    """A /24 of ``ADDRESS_RANGE`` made local to ``lo`` by one route; another session's /24 is left alone."""
    subnets = list(ADDRESS_RANGE.subnets(new_prefix=24))
    for subnet in random.sample(subnets, 20):
        result = subprocess.run(
            ["ip", "route", "add", "local", str(subnet), "dev", "lo"], capture_output=True, text=True, check=False
        )
        if result.returncode == 0:
            return subnet
        if "File exists" not in result.stderr:
            raise RuntimeError(
                f"the process node cannot make {subnet} local (`ip route add local {subnet} dev lo`: "
                f"{result.stderr.strip()}); it needs CAP_NET_ADMIN"
            )
    raise RuntimeError(f"no free /24 in {ADDRESS_RANGE} after 20 tries")


@dataclass
class PodProcess:
    """One pod's process and what happened to it, for the test's assertions."""

    namespace: str
    name: str
    uid: str
    ip: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    started: str = ""  # the container's start, as the status gives it
    ready: bool = False
    deleting: bool = False
    sigterm_at: float | None = None  # time.monotonic() when SIGTERM was sent
    killed: bool = False  # SIGKILL was needed
    deleted: bool = False
    port: int = 0  # the container's first port: where the engine listens on ``ip``
    skipped_init_containers: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"


class ProcessNode:
    """The kubelet stand-in for Node ``name`` (see the module docstring); ``pods`` by uid, newest last."""

    def __init__(self, api_client: Any, name: str, log_dir: Path) -> None:
        self.name, self.log_dir = name, log_dir
        self.core = client.CoreV1Api(api_client)
        self.leases = client.CoordinationV1Api(api_client)
        self.pods: dict[str, PodProcess] = {}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.subnet: ipaddress.IPv4Network | None = None
        self._hosts: Any = None

    # ---- what a spec needs to land here --------------------------------------------------------------

    def placement(self) -> dict[str, Any]:
        """The ``nodeSelector`` and ``tolerations`` that put a pod (an engine's ``spec.engine``) on this node."""
        return {
            "nodeSelector": {NODE_LABEL: self.name},
            "tolerations": [{"key": NODE_LABEL, "operator": "Equal", "value": self.name, "effect": "NoSchedule"}],
        }

    # ---- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> ProcessNode:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.subnet = _claim_subnet()
        self._hosts = self.subnet.hosts()
        self.node_ip = str(next(self._hosts))
        try:
            self._register()
        except BaseException:
            self.stop()
            raise
        for target in (self._renew_forever, self._watch_pods):
            thread = threading.Thread(target=target, name=f"{self.name}-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Kills every pod's process, deletes the Node and its Lease, gives the address range back."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=15)
        for pod in list(self.pods.values()):
            if pod.process is not None and pod.process.poll() is None:
                os.killpg(pod.process.pid, signal.SIGKILL)
                pod.process.wait(10)
        for delete in (
            lambda: self.leases.delete_namespaced_lease(self.name, "kube-node-lease"),
            lambda: self.core.delete_node(self.name),
        ):
            try:
                delete()
            except (ApiException, OSError) as error:
                log.warning("process node %s: cleanup: %s", self.name, error)
        if self.subnet is not None:
            subprocess.run(["ip", "route", "del", "local", str(self.subnet), "dev", "lo"], check=False)

    # ---- the Node and its Lease -----------------------------------------------------------------------

    def _register(self) -> None:
        resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        node: Any = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    NODE_LABEL: self.name,
                },
            },
            "spec": {"taints": [{"key": NODE_LABEL, "value": self.name, "effect": "NoSchedule"}]},
        }
        self.core.create_node(node)
        status = {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": self.node_ip}, {"type": "Hostname", "address": self.name}],
            "nodeInfo": {"kubeletVersion": "process-node", "operatingSystem": "linux", "architecture": "amd64"},
        }
        self.core.patch_node_status(self.name, {"status": status | self._node_conditions()}, _content_type=MERGE)
        self._renew()

    def _node_conditions(self) -> dict[str, Any]:
        now = _now()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "ProcessNodeReady",
            "message": "the process kubelet is running",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        return {"conditions": [ready]}

    def _renew(self) -> None:
        """Creates the node's Lease, or moves its ``renewTime`` on: what the node lifecycle controller watches."""
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_now()}
        try:
            self.leases.patch_namespaced_lease(self.name, "kube-node-lease", {"spec": spec}, _content_type=MERGE)
        except ApiException as error:
            if error.status != 404:
                raise
            metadata = {"name": self.name, "namespace": "kube-node-lease"}
            lease: Any = {"metadata": metadata, "spec": spec}
            self.leases.create_namespaced_lease("kube-node-lease", lease)

    def _renew_forever(self) -> None:
        while not self._stopping.wait(RENEW_SECONDS):
            try:
                self._renew()
            except Exception as error:  # noqa: BLE001 - a kubelet outlives an apiserver outage (urllib3's errors too)
                log.warning("process node %s: lease renewal failed: %s", self.name, error)

    # ---- pods -----------------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """Lists then watches the pods bound here (short watches, so ``stop`` is seen), handing each to ``_sync``."""
        selector = f"spec.nodeName={self.name}"
        while not self._stopping.is_set():
            try:
                listing = self.core.list_pod_for_all_namespaces(field_selector=selector)
                for pod in listing.items:
                    self._sync(pod)
                for event in watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listing.metadata.resource_version,  # type: ignore[union-attr]
                    timeout_seconds=2,
                ):
                    if event["type"] != "DELETED":
                        self._sync(event["object"])
            except Exception as error:  # noqa: BLE001 - as the lease: an apiserver restart must not end the watch
                log.warning("process node %s: pod watch: %s", self.name, error)
                self._stopping.wait(1)

    def _sync(self, pod: Any) -> None:
        """Starts a new pod, terminates a deleted one, puts back a Ready condition another writer changed (only
        the watch thread calls it)."""
        uid = pod.metadata.uid
        known = self.pods.get(uid)
        if known is None:
            if pod.metadata.deletion_timestamp is not None:
                return
            known = PodProcess(
                pod.metadata.namespace,
                pod.metadata.name,
                uid,
                str(next(self._hosts)),
                self.log_dir / f"{pod.metadata.namespace}.{pod.metadata.name}.log",
            )
            self.pods[uid] = known
            self._spawn_thread(self._run, known, pod)
        elif pod.metadata.deletion_timestamp is not None and not known.deleting:
            known.deleting = True
            self._spawn_thread(self._terminate, known, pod)
        elif known.started and _ready_condition(pod) != known.ready and not known.deleted:
            # another writer (the node lifecycle controller) changed it: a kubelet's status sync puts it back
            self._write_status(known, pod, running=known.process is not None and known.process.poll() is None)

    def _spawn_thread(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=f"{self.name}-{args[0].name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _run(self, record: PodProcess, pod: Any) -> None:
        """Starts the container's process, then probes readiness at its period until the process exits."""
        for init in pod.spec.init_containers or []:
            record.skipped_init_containers.append(init.name)
            log.warning("process node %s: skipping init container %s of %s", self.name, init.name, record.name)
        container = pod.spec.containers[0]
        ports = {p.name: p.container_port for p in container.ports or []}
        record.port = next(iter(ports.values()), 80)
        env = {**os.environ, "SHOAL_CACHE": _host_cache(), "PYTHONUNBUFFERED": "1"}
        env |= {e.name: e.value for e in container.env or [] if e.value is not None}
        command = list(container.command or ["shoal"])  # no command: the image's entrypoint, `shoal`
        argv = [*(shoal_command() if command[0] == "shoal" else command[:1]), *command[1:]]
        argv += self._config_maps(record, pod, with_host(list(container.args or []), record.ip))
        with record.log_path.open("ab") as out:
            record.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        record.started = _now()
        self._write_status(record, pod, running=True)
        probe = container.readiness_probe
        url, period, failures, timeout = record.url, 10, 3, 1
        if probe is not None and probe.http_get is not None:
            port = probe.http_get.port
            url = f"http://{record.ip}:{ports.get(port, port)}{probe.http_get.path or '/'}"
            period, failures, timeout = (
                probe.period_seconds or 10,
                probe.failure_threshold or 3,
                probe.timeout_seconds or 1,
            )
        failed = 0
        while not self._stopping.is_set() and record.process.poll() is None:
            ok = self._probe(url, timeout)
            failed = 0 if ok else failed + 1
            ready = ok or (record.ready and failed < failures)
            if ready != record.ready:
                record.ready = ready
                self._write_status(record, pod, running=True)
            self._stopping.wait(period)
        if record.process.poll() is not None and not record.deleted:
            record.ready = False
            self._write_status(record, pod, running=False)

    def _config_maps(self, record: PodProcess, pod: Any, args: list[str]) -> list[str]:
        """``args`` with each mounted ConfigMap's path replaced by a directory holding its keys as files."""
        sources = {v.name: v.config_map.name for v in pod.spec.volumes or [] if v.config_map is not None}
        for mount in pod.spec.containers[0].volume_mounts or []:
            if mount.name not in sources:
                continue
            directory = self.log_dir / f"{record.namespace}.{record.name}" / mount.name
            directory.mkdir(parents=True, exist_ok=True)
            data = self.core.read_namespaced_config_map(sources[mount.name], record.namespace).data or {}
            for key, value in data.items():
                (directory / key).write_text(value)
            args = [str(directory) + a[len(mount.mount_path) :] if a.startswith(mount.mount_path) else a for a in args]
        return args

    @staticmethod
    def _probe(url: str, timeout: float) -> bool:
        try:
            return 200 <= httpx.get(url, timeout=timeout).status_code < 400
        except httpx.HTTPError:
            return False

    def _write_status(self, record: PodProcess, pod: Any, *, running: bool) -> None:
        ready = "True" if record.ready else "False"
        now = _now()
        conditions = [
            {"type": kind, "status": status, "lastTransitionTime": now}
            for kind, status in (
                ("PodReadyToStartContainers", "True"),
                ("Initialized", "True"),
                ("ContainersReady", ready),
                ("Ready", ready),
                ("PodScheduled", "True"),
            )
        ]
        state: dict[str, Any] = {"running": {"startedAt": record.started}}
        if not running and record.process is not None:
            code = record.process.returncode
            state = {
                "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": now}
            }
        container = pod.spec.containers[0]
        status = {
            "phase": "Running",
            "hostIP": self.node_ip,
            "hostIPs": [{"ip": self.node_ip}],
            "podIP": record.ip,
            "podIPs": [{"ip": record.ip}],
            "startTime": record.started,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": container.name,
                    "image": container.image,
                    "imageID": "",
                    "containerID": f"process://{record.process.pid if record.process else 0}",
                    "ready": record.ready,
                    "started": running,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }
        try:
            self.core.patch_namespaced_pod_status(
                record.name, record.namespace, {"status": status}, _content_type=MERGE
            )
        except ApiException as error:
            if error.status != 404:  # a pod already gone needs no status
                raise

    def _terminate(self, record: PodProcess, pod: Any) -> None:
        """preStop, SIGTERM, the rest of the grace period, SIGKILL, then the pod deleted with grace 0."""
        grace = pod.metadata.deletion_grace_period_seconds
        deadline = time.monotonic() + (30 if grace is None else grace)
        hook = pod.spec.containers[0].lifecycle.pre_stop if pod.spec.containers[0].lifecycle else None
        if hook is not None and hook.sleep is not None:
            self._stopping.wait(min(hook.sleep.seconds, max(0.0, deadline - time.monotonic())))
        elif hook is not None and hook._exec is not None:
            subprocess.run(hook._exec.command, check=False, timeout=max(1.0, deadline - time.monotonic()))
        process = record.process
        if process is not None and process.poll() is None:
            record.sigterm_at = time.monotonic()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                record.killed = True
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        record.deleted = True
        options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=record.uid))
        try:
            self.core.delete_namespaced_pod(record.name, record.namespace, body=options, grace_period_seconds=0)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    # ---- for tests ------------------------------------------------------------------------------------

    def log_tail(self, chars: int = 3000) -> str:
        """The end of every pod process's log, for a failing test's report."""
        parts = []
        for pod in list(self.pods.values()):
            text = pod.log_path.read_text(errors="replace")[-chars:] if pod.log_path.exists() else ""
            parts.append(f"----- {pod.namespace}/{pod.name} at {pod.url} (sigterm: {pod.sigterm_at})\n{text}")
        return "\n".join(parts)


def _ready_condition(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _host_cache() -> str:
    return os.environ.get("SHOAL_CACHE") or str(Path.home() / ".cache" / "shoal")
