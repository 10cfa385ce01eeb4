"""`helm test`: one completion through an InferenceDeployment's gateway, with the first key of its tenants file.

Run by the chart's test Job in the operator image (python with pyyaml); the environment names the gateway
(SHOAL_GATEWAY_URL), the mounted tenants file (SHOAL_API_KEYS_FILE) and how long the request may take
(SHOAL_TEST_TIMEOUT_SECONDS: a fleet at zero replicas starts an engine first). Exits 0 with the answer printed, or
1 with the status and body of what failed.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

import yaml


def first_key(path: str) -> str:
    with open(path) as file:
        tenants = yaml.safe_load(file)["tenants"]
    return str(next(iter(tenants.values()))["api_keys"][0])


def call(url: str, key: str, timeout: float, body: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return dict(json.load(response))


def main() -> int:
    base = os.environ["SHOAL_GATEWAY_URL"].rstrip("/")
    timeout = float(os.environ.get("SHOAL_TEST_TIMEOUT_SECONDS", "300"))
    key = first_key(os.environ["SHOAL_API_KEYS_FILE"])
    try:
        model = call(f"{base}/v1/models", key, timeout)["data"][0]["id"]
        body = {"model": model, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
        answer = call(f"{base}/v1/completions", key, timeout, body)
    except urllib.error.HTTPError as error:
        print(f"{error.url}: HTTP {error.code}: {error.read().decode(errors='replace')[:500]}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as error:
        print(f"{base}: {error}", file=sys.stderr)
        return 1
    print(f"{model} answered through {base}: {answer['choices'][0]['text']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
