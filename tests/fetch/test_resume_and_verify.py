"""A cut connection is resumed with a Range request (here and in a later process), a 503 is asked again; a file
whose hash differs from what the Hub stand-in publishes is refused and nothing is published."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fetch_harness import hub_env
from hub_standin import HubServer

from shoal.fetch import FetchError, fetch
from shoal.fetch.cache import CacheEntry
from shoal.fetch.sources import parse_source

WEIGHTS = bytes(range(256)) * 4096  # 1 MiB
FILES = {"config.json": b'{"model_type": "llama"}', "tokenizer.json": b"{}" * 300, "model.safetensors": WEIGHTS}


def test_a_cut_download_resumes_from_where_it_stopped(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/m", FILES)
    hub.hub.cut_once |= {"model.safetensors", "tokenizer.json"}  # an LFS file (via the CDN) and a regular one
    lines: list[str] = []
    result = fetch("hf://org/m", tmp_path, env=hub_env(hub), report=lines.append)
    path = Path(result.path)
    assert (path / "model.safetensors").read_bytes() == WEIGHTS
    assert (path / "tokenizer.json").read_bytes() == FILES["tokenizer.json"]
    assert hub.hub.downloads["model.safetensors"] == 2 and hub.hub.downloads["tokenizer.json"] == 2
    # the second request asked only for the rest (from where the cut left the part), and each byte counts once
    weights = [start for name, start in hub.hub.starts if name == "model.safetensors"]
    assert weights[0] == 0 and 0 < weights[1] <= len(WEIGHTS) // 2
    assert result.bytes == sum(len(d) for d in FILES.values())
    assert sum("resuming at byte" in line for line in lines) == 2


def test_a_part_left_by_a_killed_process_is_resumed_with_a_range(hub: HubServer, tmp_path: Path) -> None:
    commit = hub.hub.add_repo("org/m", FILES)
    source = parse_source("hf://org/m")
    assert source is not None
    staging = CacheEntry(tmp_path, source).staging(commit)
    staging.mkdir(parents=True)
    (staging / "model.safetensors.part").write_bytes(WEIGHTS[:300_000])
    result = fetch("hf://org/m", tmp_path, env=hub_env(hub), report=lambda line: None)
    assert (Path(result.path) / "model.safetensors").read_bytes() == WEIGHTS
    assert result.bytes == sum(len(d) for d in FILES.values()) - 300_000
    assert ("model.safetensors", 300_000) in hub.hub.starts
    assert not staging.exists()


def test_a_wrong_hash_is_refused_and_nothing_is_published(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/m", FILES)
    hub.hub.corrupt.add("model.safetensors")
    with pytest.raises(FetchError, match=r"model\.safetensors does not match the sha256 the store publishes") as error:
        fetch("hf://org/m", tmp_path, env=hub_env(hub), report=lambda line: None)
    assert hashlib.sha256(WEIGHTS).hexdigest() in str(error.value)
    assert not list(tmp_path.rglob("snapshots/*"))
    assert not list(tmp_path.rglob("model.safetensors*"))  # the bad download is gone, not kept as a part


def test_a_small_file_is_checked_against_its_git_blob_id(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/m", FILES)
    hub.hub.corrupt.add("config.json")
    with pytest.raises(FetchError, match=r"config\.json does not match the git-sha1"):
        fetch("hf://org/m", tmp_path, env=hub_env(hub), report=lambda line: None)
    assert not list(tmp_path.rglob("snapshots/*"))


def test_a_503_is_asked_again_and_a_lasting_one_named(hub: HubServer, tmp_path: Path) -> None:
    hub.hub.add_repo("org/m", FILES)
    hub.hub.unavailable = 1
    lines: list[str] = []
    fetch("hf://org/m", tmp_path, env=hub_env(hub), report=lines.append)
    assert lines[0] == "hf://org/m: the Hub answered 503; asking again"
    hub.hub.unavailable = 3
    with pytest.raises(FetchError, match=r"^hf://org/m: the Hub answered 503 \(3 attempts\)$"):
        fetch("hf://org/m@v2", tmp_path, env=hub_env(hub), report=lambda line: None)
