"""SentencePiece itself, as the reference for SentencePiece GGUF vocabularies, run in a child process.

The ``sentencepiece`` wheel brings its own ``libgomp``, and the ``gguf`` package imports ``sentencepiece``
whenever it can: installed in the venv, it would map a second OpenMP runtime into every process that reads a
GGUF, so the tests would no longer run the engine as a user's install does. So ``make install`` puts it in a
directory of its own (``REFERENCE_SITE``), which only this child has on its path. The child
trains the model and answers ``encode`` and ``decode`` over a pipe (a JSON line each way); the pieces, scores
and types come back once, for the GGUF writer.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REFERENCE_SITE = Path(sys.prefix) / "sentencepiece-reference"  # pip install --target, by make install

# Llama 2's trainer settings: byte fallback, text kept as it is (no normalization, spaces kept), digits split,
# runs of spaces allowed as pieces
LLAMA_2_TRAINING = dict(
    model_type="bpe",
    byte_fallback=True,
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    add_dummy_prefix=True,
    allow_whitespace_only_pieces=True,
    split_digits=True,
    character_coverage=1.0,
    hard_vocab_limit=False,
    minloglevel=2,
)


class SentencePieceReference:
    """A SentencePiece BPE model trained on ``sentences`` with Llama 2's settings updated by ``options``
    (``add_dummy_prefix=False`` as Gemma's, ``byte_fallback=False``, ``user_defined_symbols=[...]``)."""

    def __init__(self, sentences: Iterable[str], vocab_size: int = 400, **options: Any) -> None:
        if not (REFERENCE_SITE / "sentencepiece").is_dir():
            raise RuntimeError(f"SentencePiece is not installed in {REFERENCE_SITE}: make install puts it there")
        self._child = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env={**os.environ, "PYTHONPATH": str(REFERENCE_SITE)},
        )
        settings = {**LLAMA_2_TRAINING, "vocab_size": vocab_size, **options}
        trained = self._call("train", list(sentences), settings)
        self.model: bytes = base64.b64decode(trained["model"])
        self.add_dummy_prefix: bool = settings["add_dummy_prefix"]
        self.pieces: list[str] = trained["pieces"]
        self.scores: list[float] = trained["scores"]
        self.kinds: list[str] = trained["kinds"]  # "normal", "unknown", "control", "user_defined", "unused", "byte"
        self._ids = {piece: index for index, piece in enumerate(self.pieces)}

    def encode(self, text: str) -> list[int]:
        return self._call("encode", text)

    def decode(self, ids: list[int]) -> str:
        return self._call("decode", ids)

    def vocab_size(self) -> int:
        return len(self.pieces)

    def piece_to_id(self, piece: str) -> int:
        return self._ids[piece]

    def id_to_piece(self, index: int) -> str:
        return self.pieces[index]

    def ids_of(self, *kinds: str) -> list[int]:
        return [index for index, kind in enumerate(self.kinds) if kind in kinds]

    def bos_id(self) -> int:
        return self._ids["<s>"]

    def eos_id(self) -> int:
        return self._ids["</s>"]

    def unk_id(self) -> int:
        return self._ids["<unk>"]

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.stdin.close()  # type: ignore[union-attr]
            self._child.wait(timeout=10)

    def _call(self, method: str, *args: Any) -> Any:
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write(json.dumps([method, *args]) + "\n")
        self._child.stdin.flush()
        reply = self._child.stdout.readline()
        if not reply:
            raise RuntimeError(f"the SentencePiece child process died (exit status {self._child.wait()})")
        return json.loads(reply)


def _serve() -> None:
    """The child: train once, then answer encode/decode until stdin closes."""
    import io

    import sentencepiece

    processor = None
    for line in sys.stdin:
        method, *args = json.loads(line)
        if method == "train":
            sentences, settings = args
            model = io.BytesIO()
            sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **settings)
            processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
            user_defined = set(settings.get("user_defined_symbols", ()))
            reply: Any = {
                "model": base64.b64encode(model.getvalue()).decode(),
                "pieces": [processor.id_to_piece(i) for i in range(processor.vocab_size())],
                "scores": [processor.get_score(i) for i in range(processor.vocab_size())],
                "kinds": [_kind(processor, i, user_defined) for i in range(processor.vocab_size())],
            }
        else:
            reply = getattr(processor, method)(*args)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _kind(processor: Any, index: int, user_defined: set[str]) -> str:
    for kind in ("unknown", "control", "unused", "byte"):
        if getattr(processor, f"is_{kind}")(index):
            return kind
    return "user_defined" if processor.id_to_piece(index) in user_defined else "normal"


if __name__ == "__main__":
    _serve()
