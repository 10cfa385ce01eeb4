"""Loading checkpoints (Hugging Face safetensors directories, GGUF files) into ``CausalLM``."""

from shoal.engine.loader.converted_cache import WeightsCache
from shoal.engine.loader.errors import WeightsError
from shoal.engine.loader.load import load_config, load_model

__all__ = ["WeightsCache", "WeightsError", "load_config", "load_model"]
