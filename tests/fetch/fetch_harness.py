"""What the fetcher tests share: the Hub stand-in's environment, ``shoal fetch-model`` run in-process, and moto's
standalone S3 server."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

from hub_standin import HubServer
from support.polling import eventually

from shoal.local.process import free_port

TOKEN = "hf_standin_token_0123456789"


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
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"} if auth else dict(os.environ)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
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

    def client(self, service: str, **credentials: str):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1", **credentials)

    def _user(self) -> tuple[str, str]:
        iam = self.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="fetcher")
        policy = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'
        iam.put_user_policy(UserName="fetcher", PolicyName="s3", PolicyDocument=policy)
        key = iam.create_access_key(UserName="fetcher")["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def s3(self):  # type: ignore[no-untyped-def]
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
