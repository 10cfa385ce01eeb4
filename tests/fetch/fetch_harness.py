"""What the fetcher tests share: the Hub stand-in's environment, ``shoal fetch-model`` run in-process, and moto's
standalone S3 server, run with boto3 from moto's own venv (``make moto``)."""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import TracebackType
from typing import Any
from unittest import mock

from hub_standin import HubServer
from support.polling import eventually

from shoal.local.process import free_port

TOKEN = "hf_standin_token_0123456789"
REPO_ROOT = Path(__file__).resolve().parents[2]
MOTO_INSTALL = REPO_ROOT / "hack" / "moto" / "install.sh"
IN_MOTO_VENV = Path(__file__).with_name("in_moto_venv.py")


class MotoVenvMissing(RuntimeError):
    """moto's venv is not installed: the S3 and SigV4 tests fail with this rather than skip."""


@functools.cache
def moto_python() -> Path:
    """The python of the venv ``hack/moto/install.sh`` makes (moto[server], boto3, botocore at their pins)."""
    python = Path(
        subprocess.run(["bash", str(MOTO_INSTALL), "--path"], capture_output=True, text=True, check=True).stdout.strip()
    )
    if subprocess.run(["bash", str(MOTO_INSTALL), "--check"]).returncode != 0:
        raise MotoVenvMissing(
            f"moto's venv is not installed (expected at {python.parent.parent}, with the pins in {MOTO_INSTALL}). "
            "Run `make moto` (moto[server], boto3 and botocore from PyPI into a venv of their own; about a minute). "
            "`make test` runs it first."
        )
    return python


def _moto_venv_env() -> dict[str, str]:
    """The environment for moto's venv: this one without PYTHONPATH, which may point into shoal's tree."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def in_moto_venv(request: dict[str, Any]) -> Any:
    """``tests/fetch/in_moto_venv.py`` run by moto's venv on ``request``; its JSON answer."""
    done = subprocess.run(
        [str(moto_python()), str(IN_MOTO_VENV)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=_moto_venv_env(),
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{IN_MOTO_VENV.name} ({request['action']}) failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def hub_env(server: HubServer, token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    env["HF_ENDPOINT"] = server.url
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def run_cli_command(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``shoal ARGV`` in this process (the same entry point, without a Python start-up per call), with exactly
    ``env`` as its environment; its exit status, stdout and stderr."""
    from shoal.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), redirect_stdout(stdout), redirect_stderr(stderr):
        status = main(list(argv))
    return subprocess.CompletedProcess(["shoal", *argv], status, stdout.getvalue(), stderr.getvalue())


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``shoal fetch-model ARGS``, as :func:`run_cli_command` runs it."""
    return run_cli_command("fetch-model", *args, env=env)


class Moto:
    """moto's standalone server, the S3-compatible stand-in for S3 (and MinIO) here; with ``auth`` every request
    after the IAM setup must be signed by the user's key (moto checks the SigV4 signature), else anything goes,
    as for a public bucket."""

    def __init__(self, workdir: Path, auth: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "moto.log"
        # the first 3 actions (the IAM user, its policy, its key) run unauthenticated; every later one is checked
        env = _moto_venv_env()
        if auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(moto_python().parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        eventually(self._up, timeout=30, what="moto answering", detail=lambda: self.log.read_text()[-2000:])
        self.access_key, self.secret_key = self._user() if auth else ("anyone", "anything")

    def _up(self) -> bool:
        import httpx

        try:
            return httpx.get(self.url + "/moto-api/", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    def client(self, service: str, **credentials: str) -> Calls:
        """Calls to ``service`` made by boto3 in moto's venv, in one go when the ``with`` block ends."""
        return Calls({"endpoint": self.url, "region": "us-east-1", "service": service, "credentials": credentials})

    def _user(self) -> tuple[str, str]:
        policy = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'
        with self.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup") as iam:
            iam.create_user(UserName="fetcher")
            iam.put_user_policy(UserName="fetcher", PolicyName="s3", PolicyDocument=policy)
            iam.create_access_key(UserName="fetcher")
        key = iam.answers[-1]["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def s3(self) -> Calls:
        return self.client("s3", aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)

    def env(self, credentials: bool = True) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env |= {"AWS_ENDPOINT_URL": self.url, "AWS_REGION": "us-east-1"}
        if credentials:
            env |= {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        return env

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


class Calls:
    """boto3 client calls recorded in a ``with`` block (``calls.put_object(Bucket=..., Body=b"...")``) and made
    in order, by one run of moto's venv, when it ends; their answers are then in ``answers``."""

    def __init__(self, request: dict[str, Any]) -> None:
        self._request = request
        self._calls: list[tuple[str, dict[str, Any]]] = []
        self.answers: list[dict[str, Any]] = []

    def __enter__(self) -> Calls:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            calls = [[op, _encode(kwargs)] for op, kwargs in self._calls]
            self.answers = in_moto_venv({"action": "calls", **self._request, "calls": calls})

    def __getattr__(self, op: str) -> Any:
        if op.startswith("_"):
            raise AttributeError(op)

        def record(**kwargs: Any) -> None:
            self._calls.append((op, kwargs))

        return record
