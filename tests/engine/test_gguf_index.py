"""The engine's own GGUF tensor index equals the ``gguf`` package's reader, tensor for tensor and byte for byte,
and a broken file is an error naming it."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from shoal.gguf_metadata import open_gguf
from shoal.model_registry import resolve_model


def test_the_bundled_smollm2_index_equals_the_gguf_readers() -> None:
    path = resolve_model("smollm2-135m").path
    ours, reference = open_gguf(path).tensors, gguf.GGUFReader(path).tensors
    assert [t.name for t in ours] == [t.name for t in reference]
    for mine, theirs in zip(ours, reference, strict=True):
        assert mine.tensor_type == theirs.tensor_type
        assert mine.shape.tolist() == theirs.shape.tolist()
        assert (mine.data.dtype, mine.data.shape) == (theirs.data.dtype, theirs.data.shape)
        assert np.array_equal(mine.data, theirs.data)


def test_an_f32_and_f16_file_with_its_own_alignment_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(64)
    tensors = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.arange(5, dtype=np.float16),
        "c": np.arange(8, dtype=np.int32).reshape(2, 2, 2),
    }
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    read = {t.name: t for t in open_gguf(path).tensors}
    for name, array in tensors.items():
        assert np.array_equal(read[name].data, array) and read[name].data.dtype == array.dtype


def test_a_truncated_file_is_an_error_naming_it(tmp_path: Path) -> None:
    source = resolve_model("smollm2-135m").path
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(source.read_bytes()[:4096])
    with pytest.raises(ValueError, match=r"broken\.gguf"):
        open_gguf(broken)
