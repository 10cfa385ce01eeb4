"""S3 through moto's standalone server (the S3-compatible stand-in here, as MinIO would be on a cluster; from
moto's own venv, ``make moto``, which also runs the boto3 calls that fill its buckets), with
authentication on: shoal's own SigV4 signatures are checked by it, so a wrong secret or an unknown key is refused
as S3 refuses them. Without credentials the fetcher sends unsigned requests, played on a second moto that
checks object ACLs only (moto 5.2 answers an unsigned request 500 when IAM authentication is on, where S3
answers 403): a public-read object is fetched, a private one refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fetch_harness import Moto, run_cli

from shoal.fetch import FetchError, fetch
from shoal.fetch.s3 import S3Store
from shoal.fetch.sources import S3Source, parse_source
from shoal.model_registry import resolve_model


@pytest.fixture(scope="module")
def bucket(moto: Moto, tiny_dir: Path, tiny_gguf: Path) -> str:
    with moto.s3() as s3:
        s3.create_bucket(Bucket="models")
        for path in tiny_dir.iterdir():
            s3.put_object(Bucket="models", Key=f"llama/tiny/{path.name}", Body=path.read_bytes())
        s3.put_object(Bucket="models", Key="llama/tiny/README.md", Body=b"not needed")
        s3.put_object(Bucket="models", Key="llama/tiny/extra/model.safetensors", Body=b"a subfolder: not needed")
        s3.put_object(
            Bucket="models", Key="gguf/tiny-f32.gguf", Body=tiny_gguf.read_bytes(), ChecksumAlgorithm="SHA256"
        )
    return "models"


def test_a_prefix_is_fetched_with_credentials_and_loads(
    moto: Moto, bucket: str, tiny_dir: Path, tmp_path: Path
) -> None:
    message = tmp_path / "termination"
    done = run_cli(
        f"s3://{bucket}/llama/tiny", "--download-dir", str(tmp_path / "cache"),
        "--termination-message-path", str(message), env=moto.env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in path.iterdir()) == sorted(
        p.name
        for p in tiny_dir.iterdir()
        if p.name
        in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")
    )
    assert (path / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()
    outcome = json.loads(message.read_text())
    assert outcome["path"] == str(path) and outcome["cached"] is False and outcome["bytes"] > 0
    assert resolve_model(f"s3://{bucket}/llama/tiny", download_dir=tmp_path / "cache").path == path
    again = run_cli(f"s3://{bucket}/llama/tiny", "--download-dir", str(tmp_path / "cache"), env=moto.env())
    assert again.stdout.strip() == str(path)
    assert moto.secret_key not in done.stdout + done.stderr + message.read_text()


def _source(text: str) -> S3Source:
    source = parse_source(text)
    assert isinstance(source, S3Source)
    return source


def test_objects_are_checked_against_their_published_hashes(moto: Moto, bucket: str) -> None:
    import httpx

    with httpx.Client() as client:
        listing = S3Store(client, moto.env(), _source(f"s3://{bucket}/llama/tiny")).listing()
        config = listing.named("config.json")
        assert config is not None and [d.algorithm for d in config.digests] == ["md5"]
        (gguf,) = S3Store(client, moto.env(), _source(f"s3://{bucket}/gguf/tiny-f32.gguf")).listing().files
    assert sorted(d.algorithm for d in gguf.digests) == ["md5", "sha256-base64"]


def test_an_sse_kms_objects_etag_is_not_taken_for_an_md5(moto: Moto, bucket: str) -> None:
    import httpx

    with moto.s3() as s3:
        s3.put_object(Bucket=bucket, Key="kms/m.gguf", Body=b"GGUF" * 64, ServerSideEncryption="aws:kms")
    with httpx.Client() as client:
        (file,) = S3Store(client, moto.env(), _source(f"s3://{bucket}/kms/m.gguf")).listing().files
    assert file.size == 256 and "md5" not in [d.algorithm for d in file.digests]


def test_a_gguf_object_is_fetched(moto: Moto, bucket: str, tiny_gguf: Path, tmp_path: Path) -> None:
    result = fetch(f"s3://{bucket}/gguf/tiny-f32.gguf", tmp_path, env=moto.env(), report=lambda line: None)
    path = Path(result.path)
    assert path.name == "tiny-f32.gguf"
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(tiny_gguf.read_bytes()).digest()
    assert resolve_model(f"s3://{bucket}/gguf/tiny-f32.gguf", download_dir=tmp_path).format == "gguf"


@pytest.mark.parametrize(
    ("source", "env_change", "expected"),
    [
        (
            "s3://models/llama/tiny",
            {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWN"},
            "403 InvalidAccessKeyId: credentials: the AWS credentials were refused",
        ),
        (
            "s3://models/llama/tiny",
            {"AWS_SECRET_ACCESS_KEY": "wrong"},
            "403 SignatureDoesNotMatch: credentials: the AWS credentials were refused",
        ),
        ("s3://models/llama/tiny", {"AWS_SECRET_ACCESS_KEY": ""}, "credentials: AWS_SECRET_ACCESS_KEY is not set"),
        ("s3://no-such-bucket/llama", {}, "404 NoSuchBucket: no such bucket"),
        ("s3://models/no/such/prefix", {}, "no such key or prefix"),
        ("s3://models/gguf/absent.gguf", {}, "404: no such bucket or key"),
    ],
    ids=["unknown-key", "wrong-secret", "half-credentials", "bucket", "prefix", "key"],
)
def test_s3_failures_say_what_the_store_answered(
    moto: Moto, bucket: str, tmp_path: Path, source: str, env_change: dict[str, str], expected: str
) -> None:
    env = moto.env() | env_change
    with pytest.raises(FetchError) as error:
        fetch(source, tmp_path, env=env, report=lambda line: None)
    assert expected in str(error.value)
    assert moto.secret_key not in str(error.value)
    assert not list(tmp_path.rglob("snapshots/*"))


def test_without_credentials_requests_go_unsigned(public_moto: Moto, tiny_gguf: Path, tmp_path: Path) -> None:
    with public_moto.s3() as s3:
        s3.create_bucket(Bucket="public")
        s3.put_object(Bucket="public", Key="tiny.gguf", Body=tiny_gguf.read_bytes(), ACL="public-read")
        s3.put_object(Bucket="public", Key="private.gguf", Body=tiny_gguf.read_bytes())
    env = public_moto.env(credentials=False)
    assert not any(key.startswith(("AWS_ACCESS", "AWS_SECRET")) for key in env)
    result = fetch("s3://public/tiny.gguf", tmp_path, env=env, report=lambda line: None)
    assert Path(result.path).read_bytes() == tiny_gguf.read_bytes()
    with pytest.raises(FetchError, match="403 Forbidden: credentials: AWS_ACCESS_KEY_ID is not set"):
        fetch("s3://public/private.gguf", tmp_path, env=env, report=lambda line: None)
