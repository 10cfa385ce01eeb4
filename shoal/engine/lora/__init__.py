"""LoRA adapters: read from PEFT directories, placed in a fixed pool of slots, applied per row of a batch."""

from shoal.engine.lora.adapter import LoRAAdapter, LoRAError, read_adapter
from shoal.engine.lora.manager import LoRAManager
from shoal.engine.lora.slots import LoRASlots

__all__ = ["LoRAAdapter", "LoRAError", "LoRAManager", "LoRASlots", "read_adapter"]
