"""A validating admission webhook on loopback that holds one user's writes of chosen resources in one namespace
until the test releases them: a deterministic "mid-reconcile" for the fault tests.

The real apiserver calls it for every matching write (rules and a namespace selector in a
ValidatingWebhookConfiguration); requests from ``user`` (the operator's ServiceAccount) are recorded and, while
the gate is closed, held open, so a test knows exactly which child the operator is writing and which it has not
reached yet, and can kill a process or restart the apiserver right then. Other users' requests (the
controller-manager's, the admin's) pass at once. Leaving the context manager deletes the configuration and
stops the server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import yaml

from support.kube_testbed import ControlPlane
from support.polling import eventually

HOLD_SECONDS = 25.0  # under the webhook's own 30 s limit, past which the apiserver gives up on it


class AdmissionGate:
    """``held`` lists the held requests as ``{operation, kind, name}``; ``release(allow)`` answers them (and every
    later request) allowed or denied."""

    def __init__(
        self,
        plane: ControlPlane,
        namespace: str,
        user: str,
        resources: tuple[str, ...] = ("deployments",),
        api_group: str = "apps",
    ) -> None:
        self.plane, self.namespace, self.user = plane, namespace, user
        self.resources, self.api_group = resources, api_group
        self.name = f"shoal-test-gate-{namespace}"
        self.held: list[dict[str, str]] = []
        self._probed = False  # the apiserver called us for a dry run: the configuration is in force
        self._open = threading.Event()
        self._allow = True
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.socket = self._tls().wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=self.name)

    def _tls(self) -> ssl.SSLContext:
        cert, key = self.plane.ca.issue("admission-gate", ip_addresses=["127.0.0.1"], server=True)
        directory = self.plane.workdir / "admission-gate"
        directory.mkdir(exist_ok=True)
        cert_file, key_file = directory / f"{self.namespace}.crt", directory / f"{self.namespace}.key"
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        key_file.chmod(0o600)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert_file), str(key_file))
        return context

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                allowed = gate._decide(review["request"])
                response = {"uid": review["request"]["uid"], "allowed": allowed}
                if not allowed:
                    response["status"] = {"code": 403, "message": "held by the test's admission gate, then refused"}
                body = json.dumps(
                    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the apiserver gave up on the call (its client went away)
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the apiserver's calls are recorded in `held`; nothing to print

        return Handler

    def _decide(self, request: dict[str, Any]) -> bool:
        user = request.get("userInfo", {}).get("username")
        if user != self.user:
            self._probed = self._probed or bool(request.get("dryRun"))
            return True
        with self._lock:
            self.held.append(
                {
                    "operation": request["operation"],
                    "kind": request["kind"]["kind"],
                    "name": request.get("name") or request["object"]["metadata"]["name"],
                }
            )
        self._open.wait(HOLD_SECONDS)
        with self._lock:
            return self._allow

    def __enter__(self) -> AdmissionGate:
        self._thread.start()
        port, ca = self._server.server_address[1], base64.b64encode(self.plane.ca.cert_pem).decode()
        webhook = {
            "name": "gate.shoal.test",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/", "caBundle": ca},
            "rules": [
                {
                    "apiGroups": [self.api_group],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": list(self.resources),
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 30,
        }
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [webhook],
        }
        self.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(config))
        eventually(self._in_force, 60, "the apiserver to call the admission gate")
        return self

    def _in_force(self) -> bool:
        """The apiserver reads webhook configurations through an informer: probe with an admin dry run."""
        probe = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gate-probe", "namespace": self.namespace},
            "spec": {
                "selector": {"matchLabels": {"app": "probe"}},
                "template": {
                    "metadata": {"labels": {"app": "probe"}},
                    "spec": {"containers": [{"name": "probe", "image": "probe"}]},
                },
            },
        }
        self.plane.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), check=False)
        return self._probed

    def wait_held(self, timeout: float = 90.0) -> dict[str, str]:
        """The first request held."""
        what = f"{self.user} to write {', '.join(self.resources)}"
        return dict(eventually(lambda: self.held[0] if self.held else None, timeout, what))

    def release(self, *, allow: bool) -> None:
        """Answers the held requests and every later one: allowed, or refused. The first answer stands."""
        with self._lock:
            if not self._open.is_set():
                self._allow = allow
                self._open.set()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release(allow=True)
        self.plane.kubectl("delete", "validatingwebhookconfiguration", self.name, "--ignore-not-found", check=False)
        self._server.shutdown()
        self._server.server_close()
