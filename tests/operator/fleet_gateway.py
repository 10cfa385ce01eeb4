"""A fleet's gateway run as a local process, for the operator's kube tests whose engines run on the process node
(``support.process_node``): the gateway pod's command with what the operator wrote for it."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from operator_harness import get
from support.kube_testbed import ControlPlane
from support.polling import eventually

from shoal.local.process import LocalProcess, shoal_command
from shoal.operator.builders.gateway import API_KEYS_DIR, gateway_args


def start_gateway(plane: ControlPlane, namespace: str, name: str, workdir: Path) -> tuple[LocalProcess, str]:
    """The gateway pod's command as a local process: the arguments the operator wrote (its ConfigMap's values
    in place of ``$(VAR)``), the tenants file from the generated Secret, and a kubeconfig holding the gateway
    ServiceAccount's token instead of the in-cluster config. Returns the process and the API key."""
    settings = eventually(lambda: (get(plane, namespace, "configmap", f"{name}-gateway") or {}).get("data"), 60)
    secret = eventually(lambda: get(plane, namespace, "secret", f"{name}-api-keys"), 60, "the generated key")
    tenants = base64.b64decode(next(iter(secret["data"].values()))).decode()
    keys_file = workdir / "api-keys.yaml"
    keys_file.write_text(tenants)
    api_key = re.search(r"sk-shoal-\S+", tenants).group(0)  # type: ignore[union-attr]
    kubeconfig = plane.kubeconfig_for_service_account(namespace, f"{name}-gateway", create=False).kubeconfig
    args = [re.sub(r"\$\((\w+)\)", lambda m: settings[m.group(1)], a) for a in gateway_args(settings)]
    args = [str(keys_file) if a.startswith(API_KEYS_DIR) else a for a in args]
    host = args.index("--host")
    del args[host : host + 4]  # --host 0.0.0.0 --port N: LocalProcess gives a free loopback port
    argv = shoal_command(*args, "--host", "127.0.0.1", "--kubeconfig", str(kubeconfig))
    return LocalProcess(argv, workdir / "gateway.log").wait_ready("/health", timeout=60), api_key
