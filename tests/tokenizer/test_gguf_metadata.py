"""Our GGUF header reader gives exactly the values the ``gguf`` package's reader gives, for every value type."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from shoal.gguf_metadata import read_gguf_metadata
from shoal.model_registry import resolve_model

_SYNTHETIC = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count")  # the gguf reader's own additions


def reference(path: Path) -> dict:
    fields = gguf.GGUFReader(path).fields
    return {key: field.contents() for key, field in fields.items() if key not in _SYNTHETIC}


def test_the_bundled_model_reads_as_the_gguf_package_reads_it() -> None:
    path = resolve_model("smollm2-135m").path
    metadata = read_gguf_metadata(path)
    assert metadata == reference(path)
    assert len(metadata["tokenizer.ggml.tokens"]) == 49152


def test_every_value_type_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "types.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -100)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -30000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -2_000_000_000)
    writer.add_float32("t.f32", 0.1)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "Paris 🐟 東京")
    writer.add_uint64("t.u64", 2**63 + 5)
    writer.add_int64("t.i64", -(2**62))
    writer.add_float64("t.f64", 1e-300)
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, -1.25])
    writer.add_array("t.bools", [True, False])
    writer.add_array("t.strs", ["a", "", "ü"])
    writer.add_array("t.empty", [])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    metadata = read_gguf_metadata(path)
    assert metadata == reference(path)
    assert (
        metadata["t.str"] == "Paris 🐟 東京" and metadata["t.u64"] == 2**63 + 5 and metadata["t.strs"] == ["a", "", "ü"]
    )


@pytest.mark.parametrize(
    "data",
    [
        b"NOPE" + bytes(20),
        b"GGUF" + b"\xff" * 64,
        b"GGUF\x03\x00\x00\x00" + bytes(8) + (1).to_bytes(8, "little") + (1000).to_bytes(8, "little") + b"short",
    ],
)
def test_a_malformed_file_is_an_error_naming_it(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"broken.gguf"):
        read_gguf_metadata(path)
