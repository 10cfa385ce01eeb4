"""The loader's one error type: every message names the file or tensor at fault."""


class WeightsError(ValueError):
    """Checkpoint files are missing, unreadable, or hold tensors the model does not expect (or lack some)."""
