"""A Hugging Face repo fetched from the Hub stand-in (``hub_standin.py``; the Hub cannot be reached from here):
only what serving needs, cached by commit, loadable by ``resolve_model`` from the printed path or the source."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

from fetch_harness import TOKEN, hub_env, run_cli, run_cli_command
from hub_standin import HubServer

from shoal.fetch import cached_path, fetch
from shoal.model_registry import resolve_model

NOT_NEEDED = {
    "README.md": b"# tiny\n",
    "pytorch_model.bin": b"\0" * 4096,
    "consolidated.safetensors": b"\1" * 4096,  # a second copy of the weights, as Mistral's repos carry
    "onnx/model.onnx": b"\2" * 1024,
}


def _repo_files(tiny_dir: Path, sharded: bool = False) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in tiny_dir.iterdir() if p.is_file()}
    if sharded:  # the real weights, listed by an index as a sharded checkpoint's are
        weights = files.pop("model.safetensors")
        files["model-00001-of-00001.safetensors"] = weights
        files["model.safetensors.index.json"] = json.dumps(
            {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}
        ).encode()
    return files | NOT_NEEDED


def test_a_repo_is_fetched_with_only_what_serving_needs_then_served_from_the_cache(
    hub: HubServer, tiny_dir: Path, tmp_path: Path
) -> None:
    commit = hub.hub.add_repo("tiny/llama", _repo_files(tiny_dir, sharded=True))
    env = hub_env(hub)
    first = run_cli("hf://tiny/llama", "--download-dir", str(tmp_path), env=env)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip().splitlines()[-1])
    assert path.name == commit
    fetched = sorted(p.name for p in path.iterdir())
    assert fetched == sorted(
        [
            "config.json",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "model.safetensors.index.json",
            "model-00001-of-00001.safetensors",
        ]
    )
    assert set(hub.hub.downloads) == set(fetched)
    assert all(count == 1 for count in hub.hub.downloads.values())
    assert (path / "model-00001-of-00001.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()
    model = resolve_model(str(path))
    assert (model.format, model.path) == ("hf", path)
    assert "fetching 6 files" in first.stderr

    again = run_cli("hf://tiny/llama@main", "--download-dir", str(tmp_path), env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == str(path)
    assert all(count == 1 for count in hub.hub.downloads.values())  # no second download

    # without asking the Hub: what the gateway's tokenizer loading and shoal serve's model check use
    assert cached_path("hf://tiny/llama", tmp_path) == path
    by_source = resolve_model("hf://tiny/llama", download_dir=tmp_path)
    assert (by_source.path, by_source.format, by_source.served_name) == (path, "hf", "tiny/llama")


def test_a_cached_commit_needs_no_hub_and_a_branch_falls_back_to_its_last_fetch(
    hub: HubServer, tiny_dir: Path, tmp_path: Path
) -> None:
    commit = hub.hub.add_repo("tiny/llama", _repo_files(tiny_dir))
    first = fetch("hf://tiny/llama", tmp_path, env=hub_env(hub), report=lambda line: None)
    assert not first.cached and first.bytes > 0
    hub.stop()  # the Hub is gone from here on
    pinned = fetch(f"hf://tiny/llama@{commit}", tmp_path, env=hub_env(hub), report=lambda line: None)
    assert (pinned.path, pinned.bytes, pinned.cached) == (first.path, 0, True)
    lines: list[str] = []
    branch = fetch("hf://tiny/llama", tmp_path, env=hub_env(hub), report=lines.append)
    assert (branch.path, branch.cached) == (first.path, True)
    assert len(lines) == 1 and "cannot be reached" in lines[0] and "using the copy fetched earlier" in lines[0]


def test_tokenizer_only_fetches_config_and_tokenizer_files(hub: HubServer, tiny_dir: Path, tmp_path: Path) -> None:
    hub.hub.add_repo("tiny/llama", _repo_files(tiny_dir))
    message = tmp_path / "termination"
    done = run_cli(
        "hf://tiny/llama", "--download-dir", str(tmp_path / "cache"), "--tokenizer-only",
        "--termination-message-path", str(message), env=hub_env(hub),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    outcome = json.loads(message.read_text())
    assert outcome == {"source": "hf://tiny/llama", "path": str(path), "bytes": outcome["bytes"], "cached": False}
    assert outcome["bytes"] == sum(p.stat().st_size for p in path.iterdir())
    # the gateway's tokenizer loading finds it in $SHOAL_MODEL_CACHE, as a gateway pod with the cache mounted does
    from shoal.gateway.prompts import PromptReader

    with mock.patch.dict(os.environ, {"SHOAL_MODEL_CACHE": str(tmp_path / "cache")}):
        tokenizer = PromptReader({"tiny": "hf://tiny/llama"}).load("tiny")
    assert tokenizer is not None and tokenizer.encode("The capital of France")


def test_a_gguf_file_of_a_repo_is_fetched_alone(
    hub: HubServer, tiny_dir: Path, tiny_gguf: Path, tmp_path: Path
) -> None:
    files = {"config.json": b"{}", "tiny-f32.gguf": tiny_gguf.read_bytes(), "tiny-q8.gguf": b"\0" * 2048}
    hub.hub.add_repo("tiny/llama-gguf", files)
    done = run_cli("hf://tiny/llama-gguf/tiny-f32.gguf", "--download-dir", str(tmp_path), env=hub_env(hub))
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.name == "tiny-f32.gguf" and path.read_bytes() == tiny_gguf.read_bytes()
    assert dict(hub.hub.downloads) == {"tiny-f32.gguf": 1}
    model = resolve_model("hf://tiny/llama-gguf/tiny-f32.gguf", download_dir=tmp_path)
    assert (model.path, model.format, model.served_name) == (path, "gguf", "tiny-f32")


def test_link_points_a_fixed_path_at_the_fetched_model(hub: HubServer, tiny_gguf: Path, tmp_path: Path) -> None:
    """What another kind of engine's init container asks for: its command line names ``--link``'s path."""
    hub.hub.add_repo("tiny/llama-gguf", {"config.json": b"{}", "tiny-f32.gguf": tiny_gguf.read_bytes()})
    link = tmp_path / "link" / "model"
    link.parent.mkdir()
    link.symlink_to(tmp_path)  # left by an earlier fetch: replaced
    for _ in range(2):  # the second finds the snapshot cached and links it again
        done = run_cli(
            "hf://tiny/llama-gguf/tiny-f32.gguf", "--download-dir", str(tmp_path / "c"), "--link", str(link),
            env=hub_env(hub),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert link.is_symlink() and link.resolve() == Path(done.stdout.strip()).resolve()
        assert link.read_bytes() == tiny_gguf.read_bytes()
    assert sorted(p.name for p in link.parent.iterdir()) == ["model"]  # no staging link left behind
    assert dict(hub.hub.downloads) == {"tiny-f32.gguf": 1}


def test_a_private_repo_is_fetched_with_hf_token(hub: HubServer, tiny_dir: Path, tmp_path: Path) -> None:
    hub.hub.add_repo("org/private", _repo_files(tiny_dir), token=TOKEN)
    done = run_cli("hf://org/private", "--download-dir", str(tmp_path), env=hub_env(hub, TOKEN))
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr


def test_generate_fetches_then_completes(hub: HubServer, tiny_dir: Path, tmp_path: Path) -> None:
    hub.hub.add_directory("tiny/llama", tiny_dir)
    done = run_cli_command(
        "generate", "--model", "hf://tiny/llama", "--download-dir", str(tmp_path), "--max-tokens", "3",
        "The capital of France", env=hub_env(hub),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and hub.hub.downloads["model.safetensors"] == 1
