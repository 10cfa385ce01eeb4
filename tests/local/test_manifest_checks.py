"""``shoal up`` reads the same manifest as the CRD, refuses it with the CRD's own messages, and names what a
cluster would do that a laptop ignores; plus the pure helpers it sizes engines and restarts with."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from up_harness import manifest, write_manifest

from shoal.local.fleet import RESTART_BACKOFF
from shoal.local.manifest import ManifestError, ignored_locally, load_manifest
from shoal.local.threads import threads_per_engine
from shoal.operator.spec import InferenceDeploymentSpec

ROOT = Path(__file__).resolve().parents[2]


def _crd_messages() -> set[str]:
    """Every CEL message in the generated CRD (what ``kubectl apply`` answers)."""
    crd = yaml.safe_load((ROOT / "crds" / "shoal.dev_inferencedeployments.yaml").read_text())
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                found.add(rule["message"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(crd)
    return found


def _refusal(tmp_path: Path, document: dict) -> str:
    with pytest.raises(ManifestError) as refused:
        load_manifest(write_manifest(tmp_path, document))
    return str(refused.value)


def test_the_shipped_example_loads_and_says_what_is_ignored() -> None:
    loaded = load_manifest(ROOT / "examples" / "smollm2-cpu.yaml")
    assert loaded.name == "smollm2"
    assert loaded.spec.served_name == "smollm2-135m"
    assert any("resources.memory" in note and note.endswith("(ignored locally)") for note in loaded.ignored)


@pytest.mark.parametrize("replicas", [{"min": 3, "max": 2}, {"min": 1, "max": 3, "count": 5}])
def test_cross_field_errors_carry_the_crd_message(tmp_path: Path, replicas: dict) -> None:
    message = _refusal(tmp_path, manifest("smollm2-135m", replicas=replicas))
    matching = [m for m in _crd_messages() if m in message]
    assert matching, message
    assert "spec.replicas" in message


@pytest.mark.parametrize(
    ("autoscaling", "words"),
    [
        ({"enabled": True, "standby": 5}, "must not exceed replicas.max"),
        ({"enabled": False, "standby": 1}, "needs autoscaling.enabled"),
    ],
)
def test_a_standby_pool_no_scale_up_could_use_is_refused_in_the_crds_words(
    tmp_path: Path, autoscaling: dict, words: str
) -> None:
    document = manifest("smollm2-135m", replicas={"min": 1, "max": 3}, autoscaling=autoscaling)
    message = _refusal(tmp_path, document)
    assert words in message and "autoscaling.standby" in message
    assert [m for m in _crd_messages() if m in message], message


def test_every_field_error_is_listed_with_its_path_and_value(tmp_path: Path) -> None:
    document = manifest(
        "smollm2-135m",
        replicas={"min": -1, "max": 2},
        engine={"maxNumSeqs": 0, "gpu": 1},
        autoscaling={"maxStep": "two"},
    )
    message = _refusal(tmp_path, document)
    assert "spec.replicas.min: Input should be greater than or equal to 0 (got -1)" in message
    assert "spec.engine.maxNumSeqs: Input should be greater than or equal to 1 (got 0)" in message
    assert "spec.engine.gpu: unknown field" in message
    assert "spec.autoscaling.maxStep:" in message


def test_not_an_inference_deployment(tmp_path: Path) -> None:
    assert "expected exactly one InferenceDeployment, found 0" in _refusal(tmp_path, {"kind": "Deployment"})
    wrong_version = manifest("smollm2-135m") | {"apiVersion": "shoal.dev/v2"}
    assert "apiVersion: must be shoal.dev/v1alpha1" in _refusal(tmp_path, wrong_version)
    path = tmp_path / "broken.yaml"
    path.write_text("spec: [unclosed")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_manifest(path)
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.yaml")


def test_a_model_that_does_not_exist_is_refused_before_anything_starts(tmp_path: Path) -> None:
    message = _refusal(tmp_path, manifest("no-such-model"))
    assert "spec.model.source: model 'no-such-model' is neither a known alias" in message
    assert "spec.model.source:" in _refusal(tmp_path, manifest(str(tmp_path / "nowhere")))
    unqualified = _refusal(tmp_path, manifest("meta-llama/Llama-3.1-8B-Instruct"))
    assert "looks like a Hugging Face repo id: write hf://meta-llama/Llama-3.1-8B-Instruct" in unqualified


def test_a_remote_source_is_checked_for_its_form_and_fetched_later(tmp_path: Path) -> None:
    assert load_manifest(write_manifest(tmp_path, manifest("hf://org/repo@v1"))).spec.model.source == "hf://org/repo@v1"
    assert load_manifest(write_manifest(tmp_path, manifest("s3://models/llama/tiny"))).name
    message = _refusal(tmp_path, manifest("gs://models/llama"))
    assert "spec.model.source 'gs://models/llama'" in message and "supported: hf://ORG/REPO" in message


def test_cluster_only_fields_are_ignored_locally_not_refused(tmp_path: Path) -> None:
    document = manifest(
        "smollm2-135m",
        engine={
            "image": "registry.example/engine:1",
            "resources": {"gpus": 1, "cpu": "2"},
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "gpuMemoryUtilization": 0.8,
            "enforceEager": True,
            "kernelCache": {"hostPath": "/var/lib/shoal/kernels"},
        },
        gateway={"replicas": 2, "apiKeySecret": {"name": "keys"}},
        autoscaling={"enabled": True, "metrics": {"source": "prometheus", "prometheusUrl": "http://prom:9090"}},
    )
    loaded = load_manifest(write_manifest(tmp_path, document))
    ignored = "\n".join(loaded.ignored)
    for field in (
        "engine.image",
        "resources.gpus",
        "nodeSelector",
        "gateway.replicas",
        "apiKeySecret",
        "autoscaling.metrics",
        "engine.gpuMemoryUtilization",
        "engine.enforceEager",
        "engine.kernelCache",
    ):
        assert field in ignored
    assert all(note.endswith("(ignored locally)") for note in loaded.ignored)
    assert "resources.cpu" not in ignored  # used: it caps the threads of each engine


def test_the_pod_fields_are_ignored_locally_for_engine_and_gateway(tmp_path: Path) -> None:
    pod = {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}},
        "priorityClassName": "high",
        "imagePullSecrets": [{"name": "registry"}],
        "podLabels": {"team": "search"},
        "envFrom": [{"secretRef": {"name": "tokens"}}],
        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "hub"}}}],
    }
    gateway = {**pod, "env": [{"name": "PLAIN", "value": "1"}]}
    document = manifest(
        "smollm2-135m", engine={**pod, "resources": {"gpus": 0, "limits": {"cpu": "2"}}}, gateway=gateway
    )
    loaded = load_manifest(write_manifest(tmp_path, document))
    for section in ("engine", "gateway"):
        for field in ("affinity", "imagePullSecrets", "podLabels", "envFrom"):
            assert any(n.startswith(f"spec.{section}.") and field in n for n in loaded.ignored), (section, field)
    assert any(n.startswith("spec.gateway.env") for n in loaded.ignored)
    assert loaded.spec.engine.resources.cpu_limit == "2"  # caps the threads as resources.cpu does


@given(
    cores=st.integers(1, 256),
    most=st.integers(1, 64),
    cpu=st.one_of(st.none(), st.integers(1, 64).map(str), st.integers(1, 8000).map(lambda m: f"{m}m")),
)
def test_engines_never_oversubscribe_the_cores(cores: int, most: int, cpu: str | None) -> None:
    threads = threads_per_engine(cores, most, cpu)
    assert threads >= 1
    if most <= cores:
        assert threads * most <= cores
    if cpu is not None:
        limit = int(cpu[:-1]) / 1000 if cpu.endswith("m") else int(cpu)
        assert threads <= max(1, -(-limit // 1))


def test_a_cpu_quantity_without_meaning_leaves_only_the_core_share() -> None:
    assert threads_per_engine(8, 2, "2k") == 4
    assert threads_per_engine(8, 2, "500m") == 1
    assert threads_per_engine(8, 2, "1.5") == 2


@given(failures=st.integers(1, 100))
def test_restart_delays_double_up_to_the_ceiling(failures: int) -> None:
    backoff = RESTART_BACKOFF
    assert backoff.base(failures) <= 30.0
    assert backoff.base(failures + 1) >= backoff.base(failures)
    assert backoff.base(1) == 1.0 and backoff.base(3) == 4.0


def test_a_gpu_spec_runs_its_engines_on_the_cpu_with_the_cpus_default_attention(tmp_path: Path) -> None:
    """The operator's Triton flag is dropped, not overridden: the engine then picks shoal's C kernel, or torch's
    with a warning where no compiler builds it (an explicit backend would have to be one that cannot fail)."""
    from shoal.local.up import engine_launch

    spec = load_manifest(write_manifest(tmp_path, manifest("smollm2-135m", engine={"resources": {"gpus": 1}}))).spec
    argv = engine_launch(spec, tmp_path).argv
    assert "--attention-backend" not in argv
    last_device = len(argv) - 1 - argv[::-1].index("--device")  # the last flag given wins
    assert argv[last_device + 1] == "cpu"


def test_local_engines_keep_converted_weights_in_the_shoal_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``$SHOAL_CACHE`` rather than the pod's ``/model-cache``, first, so ``engine.extraArgs`` can override
    it (an empty directory turns it off)."""
    from shoal.local.up import engine_launch

    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path / "shoal-cache"))
    default = str(tmp_path / "shoal-cache" / "converted-weights")
    node_cache = {"source": "hf://org/m", "cache": {"hostPath": "/var/lib/shoal/models"}}
    cases = [({"source": "smollm2-135m"}, {}, [default]), (node_cache, {}, [default])]
    cases += [({"source": "smollm2-135m"}, {"engine": {"extraArgs": ["--weights-cache-dir", ""]}}, [default, ""])]
    for model, spec, expected in cases:
        document = manifest("smollm2-135m", **spec)
        document["spec"]["model"] = model
        argv = engine_launch(load_manifest(write_manifest(tmp_path, document)).spec, tmp_path).argv
        assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--weights-cache-dir"] == expected, model


def test_local_shoal_engines_fetch_their_adapters_themselves(tmp_path: Path) -> None:
    """No init container here: the engine is given each adapter's source (it fetches hf:// and s3:// at start)."""
    from shoal.local.up import engine_launch

    adapters = [{"name": "sql", "source": "hf://acme/sql-lora"}, {"name": "chat", "source": "/adapters/chat"}]
    spec = load_manifest(write_manifest(tmp_path, manifest("smollm2-135m", adapters=adapters))).spec
    argv = engine_launch(spec, tmp_path).argv
    at = argv.index("--lora-modules")
    assert argv[at + 1 : at + 3] == ["sql=hf://acme/sql-lora", "chat=/adapters/chat"]
    assert argv[argv.index("--max-loras") + 1] == "4", "the operator's slots"
    assert "--lora-modules-file" not in argv and "--download-dir" not in argv, "the default cache, no ConfigMap"


def test_a_cluster_model_source_is_refused_or_noted_in_the_crds_words(tmp_path: Path) -> None:
    assert (
        "spec.model: spec.model.source 'Qwen/Qwen3-8B' looks like a Hugging Face repo id: write hf://Qwen/Qwen3-8B"
        in _refusal(tmp_path, manifest("Qwen/Qwen3-8B"))
    )
    message = _refusal(tmp_path, manifest("pvc://weights/llama"))
    assert (
        "spec.model.source: pvc:// names a PersistentVolumeClaim on a cluster; give a path on this machine" in message
    )
    fetched = InferenceDeploymentSpec.model_validate(
        {"model": {"source": "hf://org/m", "credentialsSecret": "hub", "cache": {"hostPath": "/var/lib/shoal/models"}}}
    )
    notes = "\n".join(ignored_locally(fetched))
    assert "spec.model.credentialsSecret" in notes and "spec.model.cache" in notes


def _kind_manifest(tmp_path: Path, kind: str, model: Path | None = None) -> Path:
    return write_manifest(tmp_path, manifest(str(model or tmp_path), engine={"kind": kind}))


@pytest.mark.parametrize(
    ("kind", "variable", "binary"), [("vllm", "SHOAL_VLLM", "vllm"), ("llamacpp", "SHOAL_LLAMA_SERVER", "llama-server")]
)
def test_an_engine_kind_whose_binary_is_missing_is_refused_naming_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, variable: str, binary: str
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(
        ManifestError, match=f"spec.engine.kind {kind}: no {binary} on PATH; put it there or set {variable}"
    ):
        load_manifest(_kind_manifest(tmp_path, kind))
    monkeypatch.setenv(variable, str(tmp_path / "nowhere"))
    with pytest.raises(ManifestError, match=f"{variable}=.*nowhere is not an executable file"):
        load_manifest(_kind_manifest(tmp_path, kind))


def test_an_engine_binary_on_path_is_taken_and_sglang_is_refused_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SHOAL_VLLM", raising=False)
    assert load_manifest(_kind_manifest(tmp_path, "vllm", tiny_model)).spec.engine.kind == "vllm"
    with pytest.raises(
        ManifestError, match=r"spec\.engine\.kind sglang: shoal up runs engine kinds shoal, vllm, llamacpp"
    ):
        load_manifest(_kind_manifest(tmp_path, "sglang"))
