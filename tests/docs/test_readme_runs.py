"""The README works as written: its shell and Python blocks run, in order, as a user would paste them.

Each fenced ``bash`` or ``python`` block of README.md, then of docs/install.md, runs in the repository root;
bash blocks share one environment (an ``export`` or ``eval`` in one block holds for the next, as in one
terminal). An HTML comment on the line before a block changes how it runs, visibly, where users read it:

- ``<!-- readme-test: skip (why) -->``: the block only makes sense elsewhere (a GPU, a kind cluster) or cannot
  run inside the tests (``make test`` itself); the reason is required.
- ``<!-- readme-test: cheaper (--flag value ...) -->``: the block runs as written but with these flags' values,
  the README's own cheaper form of an expensive command (a benchmark of minutes on 2 cores); each flag must
  appear in the block.
- ``<!-- readme-test: background (...) -->``: the block keeps running (a server, a fleet). It is started in the
  background, must still be alive when every later block has run, and is then stopped as Ctrl-C would. With
  ``ready at URL`` in the comment, later blocks wait until URL answers 200.
- ``<!-- readme-test: after ctrl-c (...) -->``: the background blocks are checked alive and stopped first, as
  the README tells the user to Ctrl-C them before this block.

The cluster walk-through runs against a fresh ``make kube-up`` (its own state directory, ``KUBE_UP_DIR``); a
failing block is named by its file and line, with its output.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "docs" / "install.md"]  # in the order a new user reads them
MARKER = re.compile(r"<!--\s*readme-test:\s*(skip|background|cheaper|after ctrl-c)\b(.*?)-->")
READY_AT = re.compile(r"ready at (\S+)")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file, language, first line number (of the fence) and text, and how to run it."""

    source: str
    language: str
    line: int
    text: str
    mode: str  # "run", "skip", "cheaper", "background" or "after ctrl-c"
    note: str

    def name(self) -> str:
        return f"{self.source}:{self.line} ({self.language} block)"

    def as_run(self) -> str:
        """The text to run: as written, or with the values a ``cheaper`` marker gives its flags."""
        if self.mode != "cheaper":
            return self.text
        text = self.text
        for flag, value in re.findall(r"(--[\w-]+)\s+([^\s)]+)", self.note):
            text, count = re.subn(rf"{re.escape(flag)}\s+\S+", f"{flag} {value}", text)
            if not count:
                raise ValueError(f"{self.name()}: its cheaper marker names {flag}, which the block does not use")
        return text


def extract_blocks(markdown: str, source: str) -> list[Block]:
    """The ``bash`` and ``python`` fenced blocks in order, each with the readme-test marker just above it."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = re.fullmatch(r"```(bash|python)\s*", lines[index])
        if not fence:
            index += 1
            continue
        end = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(index - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(above)
        mode, note = (marker.group(1), marker.group(2).strip()) if marker else ("run", "")
        blocks.append(Block(source, fence.group(1), index + 1, "\n".join(lines[index + 1 : end]), mode, note))
        index = end + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for doc in DOCS for block in extract_blocks(doc.read_text(), str(doc.relative_to(REPO)))]


def test_extract_blocks_reads_markers_and_lines() -> None:
    markdown = "\n".join(
        [
            "# t",
            "```bash",
            "echo one",
            "```",
            "",
            "<!-- readme-test: skip (needs a GPU) -->",
            "```bash",
            "gpu",
            "```",
            "<!-- readme-test: background (a server), ready at http://x/ready -->",
            "",
            "```python",
            "print(1)",
            "```",
            "```yaml",
            "a: 1",
            "```",
        ]
    )
    blocks = extract_blocks(markdown, "t.md")
    assert [(b.language, b.line, b.text, b.mode) for b in blocks] == [
        ("bash", 2, "echo one", "run"),
        ("bash", 7, "gpu", "skip"),
        ("python", 12, "print(1)", "background"),
    ]
    assert blocks[1].note == "(needs a GPU)" and blocks[1].name() == "t.md:7 (bash block)"
    assert READY_AT.search(blocks[2].note).group(1) == "http://x/ready"  # type: ignore[union-attr]


def test_cheaper_marker_replaces_flag_values_and_rejects_unknown_flags() -> None:
    block = Block(
        "t.md",
        "bash",
        3,
        "bench --num-requests 48 \\\n  --concurrency 16 --out x",
        "cheaper",
        "(--num-requests 8 --concurrency 4)",
    )
    assert block.as_run() == "bench --num-requests 8 \\\n  --concurrency 4 --out x"
    with pytest.raises(ValueError, match="--seed"):
        Block("t.md", "bash", 3, "bench --num-requests 48", "cheaper", "(--seed 1)").as_run()


def test_every_marker_says_why() -> None:
    """A block marked not runnable here must tell the reader the reason, in the README itself."""
    for block in all_blocks():
        if block.mode == "skip":
            assert re.search(r"\(\s*\S.+\)", block.note), f"{block.name()}: a skip marker needs its reason in ()"


class Terminal:
    """Runs blocks as one user's shell session would: shared exports, background jobs stopped at the end."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env_file = workdir / "env.sh"
        self.env_file.write_text("".join(f"export {k}={_quote(v)}\n" for k, v in env.items()))
        self.background: list[tuple[Block, subprocess.Popen[bytes], Path]] = []

    def _script(self, block: Block) -> str:
        if block.language == "python":
            source = self.workdir / f"block_{block.line}.py"
            source.write_text(block.text)
            body = f"{_quote(str(REPO / '.venv/bin/python'))} {_quote(str(source))}"
        else:
            body = block.as_run()
        return (
            f"set -eo pipefail\nsource {_quote(str(self.env_file))}\n{body}\nexport -p > {_quote(str(self.env_file))}\n"
        )

    def run(self, block: Block, timeout: float) -> None:
        result = subprocess.run(
            ["bash", "-c", self._script(block)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            pytest.fail(
                f"{block.name()} failed with exit status {result.returncode}:\n{block.as_run()}\n"
                f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-3000:]}"
                f"{self.background_logs()}",
                pytrace=False,
            )

    def start(self, block: Block) -> None:
        log = self.workdir / f"background_{block.line}.log"
        script = self._script(block).replace(f"export -p > {_quote(str(self.env_file))}\n", "")
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", script],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.background.append((block, process, log))
        ready = READY_AT.search(block.note)
        if ready:
            eventually(
                lambda: process.poll() is not None or _answers(ready.group(1)),
                timeout=300,
                what=f"{block.name()} ready at {ready.group(1)}",
                interval=1.0,
                detail=self.background_logs,
            )
            if process.poll() is not None:
                pytest.fail(
                    f"{block.name()} exited with {process.returncode} before it was ready{self.background_logs()}",
                    pytrace=False,
                )

    def check_and_stop_background(self) -> None:
        """Each background block must have kept running; then each gets Ctrl-C (SIGINT to its group)."""
        died = [(block, process.returncode) for block, process, _ in self.background if process.poll() is not None]
        self.stop_background()
        if died:
            pytest.fail(
                "background blocks stopped by themselves: "
                + ", ".join(f"{block.name()} (exit {code})" for block, code in died)
                + self.background_logs(),
                pytrace=False,
            )
        self.background.clear()

    def stop_background(self) -> None:
        for _, process, _ in reversed(self.background):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)

    def background_logs(self) -> str:
        return "".join(
            f"\n--- {block.name()}, background ---\n{log.read_text(errors='replace')[-3000:]}"
            for block, _, log in self.background
        )


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.mark.slow
@pytest.mark.kube
def test_readme_blocks_run_in_order(tmp_path: Path) -> None:
    """Every block not marked skip runs, in order, against a fresh `make kube-up` and `shoal up`."""
    blocks = [block for block in all_blocks() if block.mode != "skip"]
    assert blocks, "the README has no runnable blocks"
    kube_up_dir = tmp_path / "kube-up"
    env = {"KUBE_UP_DIR": str(kube_up_dir)}
    terminal = Terminal(tmp_path, env)
    try:
        for block in blocks:
            if block.mode == "background":
                terminal.start(block)
                continue
            if block.mode == "after ctrl-c":
                terminal.check_and_stop_background()
            terminal.run(block, timeout=600)
        terminal.check_and_stop_background()
    finally:
        terminal.stop_background()
        subprocess.run(
            [sys.executable, "-m", "support.kube_up", "down", "--dir", str(kube_up_dir)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
            capture_output=True,
            timeout=120,
        )
