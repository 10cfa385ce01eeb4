"""vLLM's run-time LoRA endpoints' bodies (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``), torch-free so
a gateway can validate them too."""

from __future__ import annotations

from pydantic import Field

from shoal.protocol.openai_api import _Request


class LoadLoRAAdapterRequest(_Request):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadLoRAAdapterRequest(_Request):
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None  # vLLM accepts it and goes by the name; so does shoal
