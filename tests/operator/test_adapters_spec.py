"""``spec.adapters``: refused at admission in the same words by the apiserver and the models; for kind shoal a
ConfigMap the engines load at start (a change rolls nothing: the operator loads at run time,
``test_adapters_runtime.py``), for vLLM fetched by init containers and named on every engine's command line (a
change rolls the engines)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from operator_harness import OperatorProcess, apply, eventually, example, get
from pydantic import ValidationError
from support.kube_testbed import ControlPlane

from shoal.local.process import LocalProcess, shoal_command
from shoal.operator.builders import build_children
from shoal.operator.builders.adapters import MODULES_FILE, modules_file
from shoal.operator.builders.engine import serve_args
from shoal.operator.builders.network import OPERATOR_POD_LABELS
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")
SQL = {"name": "sql", "source": "hf://acme/sql-lora@v2"}
CHAT = {"name": "chat", "source": "s3://adapters/chat/"}
LOCAL = {"name": "local", "source": "/model-cache/adapters/local"}


def children(model: dict[str, Any], adapters: list[dict[str, str]], **engine: Any) -> dict[tuple[str, str], Any]:
    spec = InferenceDeploymentSpec.model_validate({"model": model, "engine": engine, "adapters": adapters})
    return {(c["kind"], c["metadata"]["name"]): c for c in build_children(OWNER, spec, 2, prometheus_operator=False)}


def engine_pod(model: dict[str, Any], adapters: list[dict[str, str]], **engine: Any) -> dict[str, Any]:
    return children(model, adapters, **engine)[("Deployment", "chat-engine")]["spec"]["template"]["spec"]


def flag_values(args: list[str], flag: str) -> list[str]:
    """The values after ``flag`` up to the next flag."""
    rest = args[args.index(flag) + 1 :]
    return rest[: next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_kind_shoal_loads_a_configmap_at_start_and_fetches_the_adapters_itself() -> None:
    model = {"source": "s3://models/smollm2/", "credentialsSecret": "store-keys", "s3Endpoint": "http://minio:9000"}
    built = children(model, [SQL, CHAT, LOCAL], resources={"gpus": 0})
    config = built[("ConfigMap", "chat-adapters")]
    assert json.loads(config["data"]["adapters.json"]) == [
        {"name": "sql", "path": "hf://acme/sql-lora@v2"},
        {"name": "chat", "path": "s3://adapters/chat/"},
        {"name": "local", "path": "/model-cache/adapters/local"},
    ]
    pod = built[("Deployment", "chat-engine")]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-model"], "the engine fetches its adapters itself"
    assert "shoal.dev/adapters" not in built[("Deployment", "chat-engine")]["spec"]["template"]["metadata"].get(
        "annotations", {}
    )
    (engine,) = pod["containers"]
    args = engine["args"]
    assert args[args.index("--enable-lora") :] == [
        "--enable-lora",
        "--max-loras",
        "4",
        "--lora-modules-file",
        "/etc/shoal/adapters/adapters.json",
        "--allow-runtime-lora-updating",
    ]
    assert flag_values(args, "--download-dir") == ["/model-cache"]
    assert by_name(pod["volumes"])["adapters"] == {"name": "adapters", "configMap": {"name": "chat-adapters"}}
    mounts = by_name(engine["volumeMounts"])
    assert mounts["adapters"] == {"name": "adapters", "mountPath": "/etc/shoal/adapters", "readOnly": True}
    assert "readOnly" not in mounts["model-cache"], "the engine writes what it fetches"
    assert engine["envFrom"] == [{"secretRef": {"name": "store-keys", "optional": False}}]
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://minio:9000"} in engine["env"]


def test_kind_shoal_lets_the_operator_reach_its_engines() -> None:
    policy = children({"source": "smollm2-135m"}, [SQL])[("NetworkPolicy", "chat-engine")]
    sources = [peer["podSelector"]["matchLabels"] for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert OPERATOR_POD_LABELS in sources


def test_another_kinds_fetched_adapters_have_fetchers_and_its_engine_loads_every_adapter_at_start() -> None:
    pod = engine_pod(
        {"source": "/models/base", "servedName": "base"},
        [SQL, CHAT, LOCAL],
        kind="vllm",
        resources={"gpus": 1},
    )
    inits = by_name(pod["initContainers"])
    assert list(inits) == ["fetch-adapter-0", "fetch-adapter-1"], "a path is read where it is"
    assert inits["fetch-adapter-0"]["args"] == [
        "fetch-model",
        "hf://acme/sql-lora@v2",
        "--download-dir",
        "/model-cache",
        "--termination-message-path",
        "/dev/termination-log",
        "--link",
        "/model-link/adapter-0",
    ]
    assert inits["fetch-adapter-1"]["args"][1] == "s3://adapters/chat/"
    assert inits["fetch-adapter-1"]["args"][-1] == "/model-link/adapter-1"
    (engine,) = pod["containers"]
    args = engine["args"]
    assert args[args.index("--enable-lora") + 1 : args.index("--lora-modules")] == ["--max-loras", "3"]
    assert flag_values(args, "--lora-modules") == [
        "sql=/model-link/adapter-0",
        "chat=/model-link/adapter-1",
        "local=/model-cache/adapters/local",
    ]
    # the model is an alias, so the adapters bring the cache and the links; the engine only reads them
    assert by_name(pod["volumes"])["model-cache"] == {"name": "model-cache", "emptyDir": {}}
    mounts = by_name(engine["volumeMounts"])
    assert mounts["model-cache"]["readOnly"] and mounts["model-link"]["readOnly"]
    assert "readOnly" not in by_name(inits["fetch-adapter-0"]["volumeMounts"])["model-link"]


def test_vllm_gets_its_own_flags_and_the_adapters_share_the_models_cache_and_credentials() -> None:
    model = {
        "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
        "servedName": "llama",
        "credentialsSecret": "hub-token",
        "cache": {"hostPath": "/var/lib/shoal/models"},
    }
    pod = engine_pod(model, [SQL], kind="vllm", maxLoras=1, maxLoraRank=64)
    inits = by_name(pod["initContainers"])
    assert list(inits) == ["fetch-model", "fetch-adapter-0"]
    assert inits["fetch-adapter-0"]["image"] == inits["fetch-model"]["image"] == "ghcr.io/shoal-dev/shoal:0.1.0"
    assert inits["fetch-adapter-0"]["envFrom"] == [{"secretRef": {"name": "hub-token", "optional": False}}]
    volumes = [v["name"] for v in pod["volumes"]]
    assert volumes.count("model-cache") == 1 and volumes.count("model-link") == 1
    assert by_name(pod["volumes"])["model-cache"]["hostPath"]["path"] == "/var/lib/shoal/models"
    (engine,) = pod["containers"]
    assert [m["name"] for m in engine["volumeMounts"]].count("model-link") == 1
    args = engine["args"]
    assert args[args.index("--enable-lora") :] == [
        "--enable-lora",
        "--max-loras",
        "1",
        "--max-lora-rank",
        "64",
        "--lora-modules",
        "sql=/model-link/adapter-0",
    ]


def test_without_adapters_the_engine_runs_without_lora() -> None:
    pod = engine_pod({"source": "smollm2-135m"}, [])
    assert "initContainers" not in pod
    assert not {"--enable-lora", "--lora-modules", "--max-loras"} & set(pod["containers"][0]["args"])


def test_changing_the_adapters_rolls_another_kinds_engines_but_not_shoals() -> None:
    model, changed = {"source": "/models/base"}, [{**SQL, "source": "hf://acme/sql-lora@v3"}, CHAT]
    assert engine_pod(model, [SQL], kind="vllm") != engine_pod(model, changed, kind="vllm")
    assert engine_pod(model, [SQL]) == engine_pod(model, changed), "the list is the ConfigMap's, not the pod's"


def test_a_shoal_engine_serves_the_adapters_of_the_operators_configmap(tmp_path: Path) -> None:
    """The operator's ``shoal serve`` arguments run as a real engine, its ConfigMap's file in place: it loads every
    adapter at start, but one it refuses (a rank above maxLoraRank), which it leaves out and still starts; it lists
    each with the base model as ``parent`` (what the gateway learns the names from), and answers for it."""
    import openai

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
    from lora_adapters import write_adapter
    from tiny_checkpoints import build_checkpoint

    base = build_checkpoint(tmp_path / "base", "llama", seed=7)
    sql = write_adapter(base, tmp_path / "sql", 1, r=4, target_modules=["q_proj", "v_proj"])
    chat = write_adapter(base, tmp_path / "chat", 2, r=8, target_modules=["o_proj"])
    wide = write_adapter(base, tmp_path / "wide", 3, r=16, target_modules=["q_proj"])
    adapters = [{"name": "sql", "source": str(sql)}, {"name": "wide", "source": str(wide)}]
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": str(base), "servedName": "tiny"},
            "engine": {"resources": {"gpus": 0}, "maxLoraRank": 8},
            "adapters": [*adapters, {"name": "chat", "source": str(chat)}],
        }
    )
    (tmp_path / "adapters.json").write_text(modules_file(spec))
    args = [str(tmp_path / "adapters.json") if a == MODULES_FILE else a for a in serve_args(spec)]
    args[args.index("--download-dir") + 1] = str(tmp_path / "cache")  # the pod's /model-cache
    # the pod's own --host and --port, overridden for this machine (the last flag given wins)
    engine = LocalProcess(shoal_command(*args, "--host", "127.0.0.1"), tmp_path / "engine.log")
    try:
        engine.wait_ready()
        client = openai.OpenAI(base_url=f"{engine.url}/v1", api_key="unused")
        cards = {m.id: getattr(m, "parent", None) for m in client.models.list().data}
        assert cards == {"tiny": None, "sql": "tiny", "chat": "tiny"}
        assert "adapter 'wide'" in engine.log(20000) and "not loaded" in engine.log(20000)
        reply = client.completions.create(model="chat", prompt="hello", max_tokens=4, temperature=0)
        assert reply.model == "chat" and reply.usage is not None and reply.usage.completion_tokens > 0
    finally:
        engine.stop()


REFUSED = [
    (
        {"adapters": [{"name": "sql", "source": "acme/sql-lora"}]},
        "spec.adapters: adapter 'sql': source 'acme/sql-lora' looks like a Hugging Face repo id: write "
        "hf://acme/sql-lora",
    ),
    (
        {"adapters": [{"name": "sql", "source": "./adapters/sql"}]},
        "spec.adapters: adapter 'sql': source './adapters/sql' is not a PEFT adapter's directory; give "
        "hf://ORG/REPO[@REVISION], s3://BUCKET/PREFIX, or an absolute path in the engine pod",
    ),
    (
        {"adapters": [{"name": "sql", "source": "hf://acme/sql/model.gguf"}]},
        "spec.adapters: adapter 'sql': source 'hf://acme/sql/model.gguf' is not a PEFT adapter's directory",
    ),
    (
        {
            "adapters": [
                {"name": "sql", "source": "/a"},
                {"name": "chat", "source": "/b"},
                {"name": "sql", "source": "/c"},
            ]
        },
        "spec.adapters: two adapters have the same name; a name is what a request sends as model, so it is unique",
    ),
    (
        {"adapters": [{"name": "smollm2", "source": "/a"}]},
        "spec.adapters: adapter 'smollm2' has the served model's name; requests could not tell them apart",
    ),
    (
        {"engine": {"kind": "llamacpp"}, "adapters": [{"name": "sql", "source": "/a"}]},
        "engine.kind llamacpp cannot honour spec.adapters: llama-server loads LoRA adapters as GGUF files",
    ),
    (
        {"engine": {"kind": "sglang"}, "adapters": [{"name": "sql", "source": "/a"}]},
        "engine.kind sglang cannot honour spec.adapters: SGLang's OpenAI API names an adapter as BASE:ADAPTER",
    ),
    (
        {"engine": {"maxLoraRank": 32}},
        "spec.engine.maxLoras and maxLoraRank size the adapter slots: set them only with spec.adapters",
    ),
]
REFUSED_IDS = ["repo-id", "relative", "gguf", "duplicate", "served-name", "llamacpp", "sglang", "rank-alone"]


def _spec(fields: dict[str, Any]) -> dict[str, Any]:
    """The CPU example's spec (served as smollm2) with ``fields``; another kind serves a path."""
    spec = {**example("x")["spec"], **fields}
    spec["model"] = {"source": "/models/smollm2.gguf" if "kind" in spec["engine"] else "smollm2-135m"}
    spec["model"]["servedName"] = "smollm2"
    return spec


@pytest.mark.parametrize(("fields", "message"), REFUSED, ids=REFUSED_IDS)
def test_the_models_refuse_a_bad_adapter_list(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        InferenceDeploymentSpec.model_validate(_spec(fields))


@pytest.mark.kube
@pytest.mark.parametrize(("fields", "message"), REFUSED, ids=REFUSED_IDS)
def test_the_apiserver_refuses_a_bad_adapter_list_in_the_same_words(
    installed_chart: ControlPlane, fields: dict[str, Any], message: str
) -> None:
    result = apply(installed_chart, "default", {**example("lora"), "spec": _spec(fields)})
    assert result.returncode != 0 and message in result.stderr, result.stderr


@pytest.mark.kube
@pytest.mark.timeout(180)
def test_the_operator_writes_engines_that_fetch_and_load_the_adapters(
    installed_chart: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    """On the test bed, for kind vllm: the apiserver admits the list and the Deployment the operator writes from it,
    and a change of the list reaches the Deployment."""
    plane = installed_chart
    spec = _spec({"engine": {"kind": "vllm"}, "adapters": [SQL, LOCAL]})
    assert apply(plane, namespace, {**example("tuned"), "spec": spec}).returncode == 0

    def engine_args(want: str) -> list[str] | None:
        deployment = get(plane, namespace, "deployment", "tuned-engine")
        pod = ((deployment or {}).get("spec") or {}).get("template", {}).get("spec", {})
        args = pod.get("containers", [{}])[0].get("args", [])
        return args if want in args else None

    args = eventually(lambda: engine_args("--enable-lora"), 60, "the engine Deployment with adapters")
    assert flag_values(args, "--lora-modules") == ["sql=/model-link/adapter-0", "local=/model-cache/adapters/local"]
    pod = get(plane, namespace, "deployment", "tuned-engine")["spec"]["template"]["spec"]  # type: ignore[index]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-adapter-0"]

    def adapters_status() -> list[dict[str, Any]] | None:
        status = (get(plane, namespace, "infd", "tuned") or {}).get("status") or {}
        ready = next((c for c in status.get("conditions", []) if c["type"] == "AdaptersReady"), {})
        return status.get("adapters") if ready.get("status") == "True" else None

    # kwok runs the pod and marks it ready: every adapter it names counts as loaded there
    assert eventually(adapters_status, 90, "AdaptersReady") == [
        {"name": "sql", "loadedReplicas": 1, "replicas": 1},
        {"name": "local", "loadedReplicas": 1, "replicas": 1},
    ]

    changed = {**spec, "adapters": [LOCAL]}
    assert apply(plane, namespace, {**example("tuned"), "spec": changed}).returncode == 0
    args = eventually(
        lambda: engine_args("--enable-lora") if not engine_args("sql=/model-link/adapter-0") else None,
        60,
        "the Deployment without sql",
    )
    assert flag_values(args, "--lora-modules") == ["local=/model-cache/adapters/local"]
    pod = get(plane, namespace, "deployment", "tuned-engine")["spec"]["template"]["spec"]  # type: ignore[index]
    assert "initContainers" not in pod
