"""What the Hub stand-in answers becomes one clear line, exit 1 and a termination message, and never a partial
model: a missing or wrong token (401; the token never printed), no such repo, revision or file (404)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fetch_harness import TOKEN, hub_env, run_cli
from hub_standin import HubServer

FILES = {"config.json": b"{}", "tokenizer.json": b"{}", "model.safetensors": b"\0" * 64}


def _fails(hub: HubServer, tmp_path: Path, source: str, token: str | None) -> tuple[str, dict[str, str]]:
    message = tmp_path / "termination"
    done = run_cli(
        source, "--download-dir", str(tmp_path / "cache"), "--termination-message-path", str(message),
        env=hub_env(hub, token),
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    outcome = json.loads(message.read_text())
    assert set(outcome) == {"source", "error"} and outcome["source"] == source
    assert lines[0] == f"shoal fetch-model: {outcome['error']}"
    assert not list((tmp_path / "cache").rglob("snapshots/*")), "nothing may be published"
    return lines[0], outcome


@pytest.mark.parametrize("token", [None, "hf_wrong_token_0000"], ids=["no-token", "wrong-token"])
def test_401_says_credentials_and_never_prints_the_token(hub: HubServer, tmp_path: Path, token: str | None) -> None:
    hub.hub.add_repo("org/private", FILES, token=TOKEN)
    line, outcome = _fails(hub, tmp_path, "hf://org/private", token)
    assert "401" in line and "credentials" in line
    assert ("HF_TOKEN is not set" if token is None else "HF_TOKEN was not accepted") in line
    if token is not None:
        assert token not in line and token not in json.dumps(outcome)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hf://org/missing", "404 from the Hub: no such repo org/missing"),
        ("hf://org/public@v9", "404 from the Hub: no such revision 'v9' in org/public"),
        ("hf://org/public/absent.gguf", "no such file absent.gguf in org/public@main (its .gguf files: none)"),
    ],
    ids=["repo", "revision", "file"],
)
def test_404_names_what_does_not_exist(hub: HubServer, tmp_path: Path, source: str, expected: str) -> None:
    hub.hub.add_repo("org/public", FILES)
    line, _ = _fails(hub, tmp_path, source, TOKEN)  # with a token the Hub tells a missing repo apart (404)
    assert expected in line


def test_a_repo_without_config_json_points_at_its_gguf_files(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/ggufs", {"README.md": b"x", "m.Q4_0.gguf": b"\0" * 32})
    line, _ = _fails(hub, tmp_path, "hf://org/ggufs", None)
    assert "no config.json" in line and "hf://org/ggufs/m.Q4_0.gguf" in line


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("gs://bucket/model", "unsupported scheme gs://"),
        ("pvc://claim/models/x", "mounted into the pods by the operator"),
        ("hf://org/repo/config.json", "only a .gguf file of a repo can be named"),
        ("hf://just-a-name", "expected hf://ORG/REPO[@REVISION]"),
        ("s3://B/x", "expected s3://BUCKET/PREFIX"),
    ],
)
def test_a_malformed_source_is_refused_before_anything_is_asked(
    hub: HubServer, tmp_path: Path, source: str, expected: str
) -> None:
    line, _ = _fails(hub, tmp_path, source, None)
    assert expected in line
    assert hub.hub.requests == []


def test_a_local_path_or_alias_is_printed_as_it_is(hub: HubServer, tmp_path: Path) -> None:
    for source in ("smollm2-135m", str(tmp_path)):
        done = run_cli(source, "--download-dir", str(tmp_path / "cache"), env=hub_env(hub))
        assert (done.returncode, done.stdout) == (0, f"{source}\n")
    assert hub.hub.requests == []


def test_a_download_dir_that_cannot_be_written_is_named(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/public", FILES)
    (tmp_path / "cache").write_text("a file, not a directory")
    line, _ = _fails(hub, tmp_path, "hf://org/public", None)
    assert line == f"shoal fetch-model: hf://org/public: cannot write into {tmp_path / 'cache'}: Not a directory"
