"""Each kind of ``spec.model.source`` -> the pods' init containers, volumes, mounts, env and arguments."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from shoal.gateway import cli as gateway_cli
from shoal.operator.builders import build_children
from shoal.operator.naming import Owner
from shoal.operator.spec import InferenceDeploymentSpec

OWNER = Owner("chat", "team-a", "0b7d3f52-0000-4000-8000-000000000001")
SECRET_ENV = {"envFrom": [{"secretRef": {"name": "hub-token", "optional": False}}]}


def pods(model: dict[str, Any], kind: str = "shoal") -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(engine pod spec, gateway pod spec, gateway ConfigMap data) for a ``spec.model``."""
    spec = InferenceDeploymentSpec.model_validate(
        {"model": model, "engine": {"kind": kind, "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]}}
    )
    built = {(c["kind"], c["metadata"]["name"]): c for c in build_children(OWNER, spec, 2, prometheus_operator=False)}
    engine = built[("Deployment", "chat-engine")]["spec"]["template"]["spec"]
    gateway = built[("Deployment", "chat-gateway")]["spec"]["template"]["spec"]
    return engine, gateway, built[("ConfigMap", "chat-gateway")]["data"]


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["volumes"]}


def mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container["volumeMounts"]}


def env_names(container: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container.get("env", [])}


def test_an_hf_source_is_fetched_by_an_init_container_into_the_node_cache() -> None:
    engine, gateway, _ = pods(
        {
            "source": "hf://meta-llama/Llama-3.1-8B-Instruct@main",
            "credentialsSecret": "hub-token",
            "cache": {"hostPath": "/var/lib/shoal/models"},
        }
    )
    (init,) = engine["initContainers"]
    (container,) = engine["containers"]
    assert init["name"] == "fetch-model" and init["command"] == ["shoal"]
    assert init["args"] == [
        "fetch-model",
        "hf://meta-llama/Llama-3.1-8B-Instruct@main",
        "--download-dir",
        "/model-cache",
        "--termination-message-path",
        "/dev/termination-log",
    ]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert init["image"] == container["image"] and init["securityContext"] == container["securityContext"]
    assert volumes(engine)["model-cache"] == {
        "name": "model-cache",
        "hostPath": {"path": "/var/lib/shoal/models", "type": "DirectoryOrCreate"},
    }
    assert mounts(init)["model-cache"]["mountPath"] == mounts(container)["model-cache"]["mountPath"] == "/model-cache"
    args = container["args"]
    assert args[args.index("--model") + 1] == "hf://meta-llama/Llama-3.1-8B-Instruct@main"
    assert args[args.index("--download-dir") + 1] == "/model-cache"
    # the Secret is the fetcher's environment only: never the engine's or the gateway's, never an argument
    assert init["envFrom"] == SECRET_ENV["envFrom"]
    assert "envFrom" not in container and "hub-token" not in json.dumps(container)
    assert "hub-token" not in json.dumps(gateway["containers"]) and "hub-token" not in " ".join(init["args"])
    assert "HTTPS_PROXY" in env_names(init), "engine.env (a proxy, HF_ENDPOINT) reaches the fetcher"


def test_another_kinds_engine_serves_the_link_its_fetcher_made_from_the_gateways_image() -> None:
    """vLLM's image has no ``shoal``: the fetch runs in the gateway's (Shoal's CLI without torch), and the
    engine is given the fixed path ``--link`` points at the revision's snapshot."""
    engine, gateway, _ = pods({"source": "hf://Qwen/Qwen3-0.6B", "credentialsSecret": "hub-token"}, kind="vllm")
    (init,) = engine["initContainers"]
    (container,) = engine["containers"]
    assert init["image"] == gateway["containers"][0]["image"] != container["image"]
    assert init["args"][-2:] == ["--link", "/model-link/model"] and init["envFrom"] == SECRET_ENV["envFrom"]
    assert volumes(engine)["model-link"] == {"name": "model-link", "emptyDir": {}}
    assert mounts(init)["model-link"]["mountPath"] == mounts(container)["model-link"]["mountPath"] == "/model-link"
    assert mounts(container)["model-link"]["readOnly"] and mounts(container)["model-cache"]["readOnly"]
    assert container["args"][:2] == ["serve", "/model-link/model"] and "--download-dir" not in container["args"]
    assert "hub-token" not in json.dumps(container)


def test_the_gateway_fetches_the_tokenizer_only_and_never_mounts_the_weights() -> None:
    _, gateway, data = pods(
        {
            "source": "hf://org/model",
            "servedName": "chat-model",
            "credentialsSecret": "hub-token",
            "cache": {"claimName": "models"},
        }
    )
    (init,) = gateway["initContainers"]
    (container,) = gateway["containers"]
    assert init["name"] == "fetch-tokenizer" and init["image"] == container["image"]
    assert init["args"] == [
        "fetch-model",
        "hf://org/model",
        "--download-dir",
        "/tokenizer",
        "--tokenizer-only",
        "--termination-message-path",
        "/tokenizer/fetch-record.json",
    ]
    assert init["envFrom"] == SECRET_ENV["envFrom"], "a gated repo's tokenizer needs the token too"
    assert volumes(gateway)["tokenizer"] == {"name": "tokenizer", "emptyDir": {}}
    assert "model-cache" not in volumes(gateway) and "model" not in volumes(gateway)
    assert mounts(container)["tokenizer"] == {"name": "tokenizer", "mountPath": "/tokenizer", "readOnly": True}
    assert data["SHOAL_GATEWAY_FETCH_RECORD"] == "chat-model=/tokenizer/fetch-record.json"
    assert "SHOAL_GATEWAY_TOKENIZER" not in data


def test_the_gateway_reads_the_tokenizer_where_the_fetch_record_says(tmp_path: Path) -> None:
    """The gateway's expanded arguments parse with the real ``shoal gateway`` parser, and its record reader takes
    the path from the JSON line the fetcher's ``--termination-message-path`` contract defines."""
    from shoal.gateway.fetch_record import fetched_tokenizers

    _, gateway, data = pods({"source": "s3://models/llama", "s3Endpoint": "http://minio:9000"})
    args = [re.sub(r"\$\((\w+)\)", lambda m: data[m.group(1)], a) for a in gateway["containers"][0]["args"]]
    parser = argparse.ArgumentParser()
    gateway_cli.register(parser.add_subparsers())
    assert parser.parse_args(args).fetch_record == ["s3://models/llama=/tokenizer/fetch-record.json"]
    record = tmp_path / "fetch-record.json"
    record.write_text(
        json.dumps({"source": "s3://models/llama", "path": "/tokenizer/x/llama", "bytes": 9, "cached": False})
    )
    assert fetched_tokenizers([f"llama={record}"]) == {"llama": "/tokenizer/x/llama"}
    record.write_text(json.dumps({"source": "s3://models/llama", "error": "403 Forbidden: AccessDenied"}))
    with pytest.raises(SystemExit, match="fetching s3://models/llama failed: 403 Forbidden: AccessDenied"):
        fetched_tokenizers([f"llama={record}"])
    with pytest.raises(SystemExit, match="cannot read"):
        fetched_tokenizers([f"llama={tmp_path / 'missing.json'}"])


def test_an_s3_source_gets_its_endpoint_in_the_fetchers_env_and_an_emptydir_by_default() -> None:
    engine, gateway, _ = pods({"source": "s3://models/llama-3.1/", "s3Endpoint": "http://minio.store:9000"})
    (init,) = engine["initContainers"]
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://minio.store:9000"} in init["env"]
    assert "AWS_ENDPOINT_URL" not in env_names(engine["containers"][0])
    assert "envFrom" not in init, "no Secret named, none referenced"
    assert volumes(engine)["model-cache"] == {"name": "model-cache", "emptyDir": {}}
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://minio.store:9000"} in gateway["initContainers"][0]["env"]


def test_a_claim_cache_is_mounted_read_write() -> None:
    engine, _, _ = pods({"source": "hf://org/model/q4/model-Q4_K_M.gguf", "cache": {"claimName": "models"}})
    assert volumes(engine)["model-cache"] == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}}
    assert "readOnly" not in mounts(engine["initContainers"][0])["model-cache"]


@pytest.mark.parametrize("cache", [{"hostPath": "/var/lib/shoal/models"}, {"claimName": "models"}])
def test_a_shoal_engine_keeps_its_converted_weights_beside_the_models_cache(cache: dict[str, str]) -> None:
    engine, _, _ = pods({"source": "hf://org/model", "cache": cache})
    (container,) = engine["containers"]
    args = container["args"]
    assert args[args.index("--weights-cache-dir") + 1] == "/model-cache/.converted"
    assert args.count("--weights-cache-dir") == 1
    assert "readOnly" not in mounts(container)["model-cache"], "the engine writes the entry there"


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ({"source": "hf://org/model"}, "shoal"),  # the pod's own emptyDir: no later start would read it
        ({"source": "hf://org/model", "cache": {"hostPath": "/var/lib/shoal/models"}}, "vllm"),
        ({"source": "smollm2-135m"}, "shoal"),
        ({"source": "pvc://weights/llama"}, "shoal"),
    ],
)
def test_without_a_model_cache_or_for_another_kind_no_converted_weights_are_kept(
    model: dict[str, Any], kind: str
) -> None:
    engine, _, _ = pods(model, kind=kind)
    assert "--weights-cache-dir" not in engine["containers"][0]["args"]


def test_a_pvc_source_is_a_read_only_claim_and_nothing_is_fetched() -> None:
    engine, gateway, data = pods({"source": "pvc://weights/llama/3.1-8b", "servedName": "llama"})
    assert "initContainers" not in engine and "initContainers" not in gateway
    claim = {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    for pod in (engine, gateway):
        assert volumes(pod)["model"] == claim
        assert mounts(pod["containers"][0])["model"] == {"name": "model", "mountPath": "/model-pvc", "readOnly": True}
    args = engine["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/model-pvc/llama/3.1-8b" and "--download-dir" not in args
    assert data["SHOAL_GATEWAY_TOKENIZER"] == "llama=/model-pvc/llama/3.1-8b"


@pytest.mark.parametrize("source", ["smollm2-135m", "/opt/models/llama.gguf"])
def test_an_alias_or_a_path_is_served_as_it_is(source: str) -> None:
    engine, gateway, data = pods({"source": source})
    assert "initContainers" not in engine and "initContainers" not in gateway
    assert "model-cache" not in volumes(engine) and "tokenizer" not in volumes(gateway)
    args = engine["containers"][0]["args"]
    assert args[args.index("--model") + 1] == source and "--download-dir" not in args
    assert data["SHOAL_GATEWAY_TOKENIZER"] == f"{source}={source}"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"source": "Qwen/Qwen3-8B"},
            "spec.model.source 'Qwen/Qwen3-8B' looks like a Hugging Face repo id: write hf://Qwen/Qwen3-8B",
        ),
        (
            {"source": "gs://bucket/model"},
            "spec.model.source 'gs://bucket/model': unsupported scheme; supported: hf://",
        ),
        ({"source": "hf://just-a-name"}, "an hf:// source is hf://ORG/REPO[@REVISION][/FILE.gguf]"),
        ({"source": "models/llama/x.gguf"}, "spec.model.source 'models/llama/x.gguf' is a relative path"),
        ({"source": "smollm2-135m", "credentialsSecret": "t"}, "spec.model.credentialsSecret is used only to fetch"),
        (
            {"source": "hf://a/b", "s3Endpoint": "http://minio:9000"},
            "spec.model.s3Endpoint is the endpoint of an s3://",
        ),
        ({"source": "pvc://w/m", "cache": {"hostPath": "/x"}}, "spec.model.cache is where hf:// and s3:// sources"),
        ({"source": "hf://a/b", "volume": {"claimName": "w"}}, "spec.model.volume mounts a claim for a path source"),
        ({"source": "hf://a/b", "cache": {"hostPath": "/x", "claimName": "c"}}, "takes one of hostPath or claimName"),
    ],
    ids=[
        "repo-id",
        "scheme",
        "hf-form",
        "relative",
        "secret-on-alias",
        "endpoint-on-hf",
        "cache-on-pvc",
        "volume-on-hf",
        "two-caches",
    ],
)
def test_the_model_refuses_what_the_crd_refuses(model: dict[str, Any], message: str) -> None:
    """``shoal up`` and the operator parse with the models: the same words as the apiserver's CEL rules."""
    with pytest.raises(ValidationError, match=re.escape(message)):
        InferenceDeploymentSpec.model_validate({"model": model})


def test_the_fetchers_and_the_engines_args_parse_with_the_real_clis() -> None:
    """What the operator writes for a fetched source is what ``shoal fetch-model`` and ``shoal serve`` accept."""
    from shoal.engine.server import cli as serve_cli
    from shoal.fetch import cli as fetch_cli

    model = {"source": "s3://models/llama/", "s3Endpoint": "http://minio:9000", "cache": {"claimName": "models"}}
    engine, gateway, _ = pods(model)
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    serve_cli.register(subparsers)
    fetch_cli.register(subparsers)
    served = parser.parse_args(engine["containers"][0]["args"])
    assert (served.model, str(served.download_dir)) == ("s3://models/llama/", "/model-cache")
    assert served.weights_cache_dir == "/model-cache/.converted"
    for init in engine["initContainers"] + gateway["initContainers"]:
        fetched = parser.parse_args(init["args"])
        assert fetched.source == "s3://models/llama/" and fetched.termination_message_path
    tokenizer_only = [parser.parse_args(i["args"]).tokenizer_only for i in gateway["initContainers"]]
    assert tokenizer_only == [True]
