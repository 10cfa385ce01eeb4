"""How engine and gateway pods get the model ``spec.model.source`` names.

An hf:// or s3:// source is fetched before the engine starts, by an init container running ``shoal fetch-model``
into the cache volume (a node's hostPath, a claim, or the pod's own emptyDir) at ``/model-cache``; the engine then
serves the source from that cache (``--download-dir``) and downloads nothing. A fetch that fails stops the pod
there (init container semantics): the engine never starts on a partial model. The fetcher writes one JSON line
(bytes fetched, or the store's error) as its termination message, which the ``ModelReady`` condition reads.
``spec.model.credentialsSecret`` becomes the environment of the fetch containers (``envFrom``), never of the
gateway container, of the engine container only where Shoal's engine fetches LoRA adapters itself
(:mod:`.adapters`), and never an argument.

Another kind of engine (``spec.engine.kind``) has no fetcher: its init container runs ``shoal fetch-model`` from
the gateway's image (Shoal's CLI without torch) with ``--link``, which points ``/model-link/model`` at the fetched
snapshot (whose directory names a revision the command line cannot know), and the engine serves that path.

The gateway needs only the tokenizer: its own init container fetches that (``--tokenizer-only``) into an emptyDir
and leaves a record of where it put it, which the gateway reads (``--fetch-record``); it never mounts the
weights' cache. A pvc:// source (or the older ``spec.model.volume``) is a claim mounted read-only into both.
"""

from __future__ import annotations

from typing import Any

from shoal.operator import model_source
from shoal.operator.builders.cache_volume import cache_volume
from shoal.operator.builders.placement import container_env
from shoal.operator.builders.security import SCRATCH_ENV, SCRATCH_MOUNT, container_security_context
from shoal.operator.spec import InferenceDeploymentSpec

FETCH_CONTAINER = "fetch-model"
TOKENIZER_CONTAINER = "fetch-tokenizer"
CACHE_DIR = "/model-cache"
CACHE_VOLUME = "model-cache"
CONVERTED_WEIGHTS_DIR = f"{CACHE_DIR}/.converted"  # a Shoal engine's converted weights, beside the fetched model
PVC_DIR = "/model-pvc"
MODEL_VOLUME = "model"
LINK_DIR = "/model-link"
LINK_VOLUME = "model-link"
MODEL_LINK = f"{LINK_DIR}/model"
TOKENIZER_DIR = "/tokenizer"
TOKENIZER_VOLUME = "tokenizer"
FETCH_RECORD = f"{TOKENIZER_DIR}/fetch-record.json"
TERMINATION_LOG = "/dev/termination-log"
FETCH_ARGS = ("--download-dir", CACHE_DIR, "--termination-message-path", TERMINATION_LOG)

Objects = list[dict[str, Any]]


def fetched(spec: InferenceDeploymentSpec) -> bool:
    """Whether the source is downloaded by an init container (hf://, s3://) rather than read where it is."""
    return model_source.kind(spec.model.source) in model_source.FETCHED_KINDS


def local_path(spec: InferenceDeploymentSpec) -> str:
    """What ``--model`` names inside the pods: a pvc:// source's path under its mount, else the source itself."""
    source = spec.model.source
    if model_source.kind(source) != "pvc":
        return source
    _, path = model_source.pvc_parts(source)
    return f"{PVC_DIR}/{path}" if path else PVC_DIR


def _claim_volume(claim: str) -> dict[str, Any]:
    return {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}


def _claim(spec: InferenceDeploymentSpec) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The read-only model claim (pvc:// or ``volume``) as (volume, mount), if the source lives on one."""
    model = spec.model
    if model_source.kind(model.source) == "pvc":
        claim, _ = model_source.pvc_parts(model.source)
        return _claim_volume(claim), {"name": MODEL_VOLUME, "mountPath": PVC_DIR, "readOnly": True}
    if model.volume is not None:
        mount = {"name": MODEL_VOLUME, "mountPath": model.volume.mount_path, "readOnly": True}
        return _claim_volume(model.volume.claim_name), mount
    return None


def fetch_container(
    spec: InferenceDeploymentSpec, name: str, image: str, args: list[str], mounts: Objects, source: str | None = None
) -> dict[str, Any]:
    """A ``shoal fetch-model`` init container for ``source`` (the model's unless given): the only container that
    sees the credentials Secret."""
    endpoint, secret = store_access(spec)
    env = container_env(spec.engine, SCRATCH_ENV) + endpoint
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": ["shoal"],
        "args": ["fetch-model", source or spec.model.source, *args],
        "env": env,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(),
        "volumeMounts": [SCRATCH_MOUNT, *mounts],
    }
    if secret:
        container["envFrom"] = secret
    return container


def store_access(spec: InferenceDeploymentSpec) -> tuple[Objects, Objects]:
    """What a container that fetches sources needs of ``spec.model``: (``env``: the S3 endpoint, ``envFrom``: the
    credentials Secret)."""
    model = spec.model
    env = [] if model.s3_endpoint is None else [{"name": "AWS_ENDPOINT_URL", "value": model.s3_endpoint}]
    secret = (
        []
        if model.credentials_secret is None
        else [{"secretRef": {"name": model.credentials_secret, "optional": False}}]
    )
    return env, secret


def shoal_reads_fetched(spec: InferenceDeploymentSpec) -> bool:
    """Whether the engine is Shoal's and takes the fetched source itself (with ``--download-dir``); another
    kind is given the link its fetcher made."""
    return fetched(spec) and spec.engine.kind == "shoal"


def engine_fetcher(
    spec: InferenceDeploymentSpec, name: str, images: tuple[str, str], args: list[str], mounts: Objects, source: str
) -> dict[str, Any]:
    """An engine pod's fetcher: in the engine's image (``images``: the engine's, the gateway's) when that is
    Shoal's, with its pull policy, else in the gateway's (Shoal's CLI without torch)."""
    if spec.engine.kind != "shoal":
        return fetch_container(spec, name, images[1], args, mounts, source)
    init = fetch_container(spec, name, images[0], args, mounts, source)
    return {**init, "imagePullPolicy": spec.engine.image_pull_policy}


def engine_model(
    spec: InferenceDeploymentSpec, engine_image: str, gateway_image: str
) -> tuple[Objects, Objects, Objects]:
    """The engine pod's (init containers, volumes, engine container mounts) for the model; the fetcher runs in
    the engine's image when that is Shoal's, else in the gateway's (Shoal's CLI)."""
    claim = _claim(spec)
    if claim is not None:
        return [], [claim[0]], [claim[1]]
    if not fetched(spec):
        return [], [], []  # a bundled alias, or a path inside the image
    mount = {"name": CACHE_VOLUME, "mountPath": CACHE_DIR}
    args = list(FETCH_ARGS)
    images, source = (engine_image, gateway_image), spec.model.source
    if shoal_reads_fetched(spec):
        init = engine_fetcher(spec, FETCH_CONTAINER, images, args, [mount], source)
        return [init], [cache_volume(CACHE_VOLUME, spec.model.cache)], [mount]
    link = {"name": LINK_VOLUME, "mountPath": LINK_DIR}
    init = engine_fetcher(spec, FETCH_CONTAINER, images, [*args, "--link", MODEL_LINK], [mount, link], source)
    volumes = [cache_volume(CACHE_VOLUME, spec.model.cache), {"name": LINK_VOLUME, "emptyDir": {}}]
    return [init], volumes, [{**mount, "readOnly": True}, {**link, "readOnly": True}]


def engine_model_path(spec: InferenceDeploymentSpec) -> str:
    """What the engine's command line names as its model: Shoal's engine takes the fetched source itself (with
    ``--download-dir``), other kinds the link their fetcher made."""
    if not fetched(spec):
        return local_path(spec)
    return spec.model.source if shoal_reads_fetched(spec) else MODEL_LINK


def gateway_tokenizer_settings(spec: InferenceDeploymentSpec) -> dict[str, str]:
    """The gateway ConfigMap's settings that say where the served model's tokenizer is."""
    if fetched(spec) and _claim(spec) is None:
        return {"SHOAL_GATEWAY_FETCH_RECORD": f"{spec.served_name}={FETCH_RECORD}"}
    return {"SHOAL_GATEWAY_TOKENIZER": f"{spec.served_name}={local_path(spec)}"}


def gateway_model(spec: InferenceDeploymentSpec, image: str) -> tuple[Objects, Objects, Objects]:
    """The gateway pod's (init containers, volumes, gateway container mounts) for the tokenizer: a fetched
    source's tokenizer only, never the weights, fetched by ``image`` (the gateway's)."""
    claim = _claim(spec)
    if claim is not None:
        return [], [claim[0]], [claim[1]]
    if not fetched(spec):
        return [], [], []
    volume = {"name": TOKENIZER_VOLUME, "emptyDir": {}}
    mount = {"name": TOKENIZER_VOLUME, "mountPath": TOKENIZER_DIR}
    args = ["--download-dir", TOKENIZER_DIR, "--tokenizer-only", "--termination-message-path", FETCH_RECORD]
    init = fetch_container(spec, TOKENIZER_CONTAINER, image, args, [mount])
    return [init], [volume], [{**mount, "readOnly": True}]
