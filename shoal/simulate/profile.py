"""An engine profile: what one simulated replica can do, calibrated from measurements of a real engine.

A step of continuous batching runs every decoding sequence one token and fills the rest of the token budget
with prompt chunks. Its time is linear in what it touches::

    step_s = base_s + per_prefill_token_s * prefill_tokens + per_decode_seq_s * decode_seqs
             + per_context_token_s * context_tokens + per_prefill_attention_s * prefill_pairs

where ``context_tokens`` are the tokens already in the KV cache of the batch's sequences (what attention reads)
and ``prefill_pairs`` sums, over the step's prompt chunks, chunk length x the tokens the chunk attends to (the
quadratic part of prefill, which dominates long prompts on a CPU and is ~0 for a GPU's fused kernels).
The coefficients are fitted by :mod:`shoal.simulate.calibrate` from ``shoal bench serve`` results; the fit is
only trusted for the batches it saw, so a profile records the largest batch it covers and the simulator refuses
an engine configuration beyond it. ``startup_s`` is the range a replica's start-up (pod scheduled, image there,
model loaded, ready) is drawn from, uniformly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

PROFILES = resources.files("shoal.simulate").joinpath("profiles")
SHIPPED = tuple(sorted(p.name.removesuffix(".json") for p in PROFILES.iterdir() if p.name.endswith(".json")))
DEFAULT_PROFILE = "gpu-8b-h100-derived"
RENAMED = {"gpu-8b-h100": "gpu-8b-h100-derived"}  # old name -> new: the name now says it is not measured


class ProfileError(ValueError):
    """A profile that cannot drive the simulation; the message names the field."""


@dataclass(frozen=True)
class StepCost:
    base_s: float
    per_prefill_token_s: float
    per_decode_seq_s: float
    per_context_token_s: float
    per_prefill_attention_s: float = 0.0

    def seconds(self, prefill_tokens: int, decode_seqs: int, context_tokens: int, prefill_pairs: int = 0) -> float:
        return (
            self.base_s
            + self.per_prefill_token_s * prefill_tokens
            + self.per_decode_seq_s * decode_seqs
            + self.per_context_token_s * context_tokens
            + self.per_prefill_attention_s * prefill_pairs
        )


@dataclass(frozen=True)
class EngineProfile:
    """One engine configuration on one kind of hardware (see the module docstring)."""

    name: str
    source: str
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_capacity_tokens: int
    covered_batch_tokens: int
    covered_decode_seqs: int
    step: StepCost
    startup_s: tuple[float, float]

    def __post_init__(self) -> None:
        for key in ("max_num_batched_tokens", "max_num_seqs", "kv_capacity_tokens"):
            if getattr(self, key) <= 0:
                raise ProfileError(f"profile {self.name}: {key} must be > 0, got {getattr(self, key)}")
        if self.max_num_seqs > self.max_num_batched_tokens:
            raise ProfileError(
                f"profile {self.name}: max_num_seqs {self.max_num_seqs} exceeds "
                f"max_num_batched_tokens {self.max_num_batched_tokens} (one token per sequence)"
            )
        if self.max_num_batched_tokens > self.covered_batch_tokens:
            raise ProfileError(
                f"profile {self.name}: max_num_batched_tokens {self.max_num_batched_tokens} is beyond "
                f"the batches its step times were measured for (covered_batch_tokens "
                f"{self.covered_batch_tokens})"
            )
        if self.max_num_seqs > self.covered_decode_seqs:
            raise ProfileError(
                f"profile {self.name}: max_num_seqs {self.max_num_seqs} is beyond the decode batches "
                f"its step times were measured for (covered_decode_seqs {self.covered_decode_seqs})"
            )
        low, high = self.startup_s
        if not 0 <= low <= high:
            raise ProfileError(
                f"profile {self.name}: startup_s must be [low, high] with 0 <= low <= high, got {list(self.startup_s)}"
            )
        for key, value in asdict(self.step).items():
            if value < 0:
                raise ProfileError(f"profile {self.name}: step.{key} must be >= 0, got {value}")
        if self.step.seconds(1, 1, 1) <= 0:
            raise ProfileError(f"profile {self.name}: every step must take some time; step coefficients are all 0")

    def with_engine(self, max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None) -> EngineProfile:
        """The same hardware run with another token budget or batch size (checked against what was measured)."""
        fields = asdict(self)
        fields["step"] = self.step
        fields["startup_s"] = self.startup_s
        if max_num_batched_tokens is not None:
            fields["max_num_batched_tokens"] = max_num_batched_tokens
        if max_num_seqs is not None:
            fields["max_num_seqs"] = max_num_seqs
        return EngineProfile(**fields)

    def concurrency(self, mean_prompt: float, mean_output: float) -> int:
        """Sequences one replica runs at once for requests of this shape: the batch or the KV cache, the smaller."""
        return max(1, min(self.max_num_seqs, int(self.kv_capacity_tokens // max(mean_prompt + mean_output, 1))))

    def capacity_rps(self, mean_prompt: float, mean_output: float) -> float:
        """Requests per second one replica completes when full, for requests of this shape.

        A request costs its prompt's prefill plus its share of ``mean_output`` decode steps of a full batch,
        whose sequences hold half their output on average.
        """
        n = self.concurrency(mean_prompt, mean_output)
        step = self.step.seconds(0, n, int(n * (mean_prompt + mean_output / 2)))
        prefill = self.step.per_prefill_token_s * mean_prompt + self.step.per_prefill_attention_s * mean_prompt**2
        return 1.0 / (prefill + mean_output * step / n)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def profile_from_dict(data: object, origin: str) -> EngineProfile:
    """A profile from parsed JSON, naming the missing or mistyped field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: expected a JSON object")
    step = data.get("step")
    if not isinstance(step, dict):
        raise ProfileError(f"{origin}: missing field 'step' (an object of step-time coefficients)")
    try:
        required = ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_context_token_s")
        cost = StepCost(
            **{k: float(_field(step, k, origin, "step.")) for k in required},
            per_prefill_attention_s=float(step.get("per_prefill_attention_s", 0.0)),
        )
        startup = _field(data, "startup_s", origin)
        if not isinstance(startup, list) or len(startup) != 2:
            raise ProfileError(f"{origin}: field 'startup_s' must be [low, high] seconds, got {startup!r}")
        ints = {
            k: int(_field(data, k, origin))
            for k in (
                "max_num_batched_tokens",
                "max_num_seqs",
                "kv_capacity_tokens",
                "covered_batch_tokens",
                "covered_decode_seqs",
            )
        }
        return EngineProfile(
            name=str(_field(data, "name", origin)),
            source=str(data.get("source", "")),
            step=cost,
            startup_s=(float(startup[0]), float(startup[1])),
            **ints,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ProfileError):
            raise
        raise ProfileError(f"{origin}: {exc}") from None


def _field(data: dict, key: str, origin: str, prefix: str = "") -> Any:
    if key not in data:
        raise ProfileError(f"{origin}: missing field '{prefix}{key}'")
    return data[key]


def load_profile(name_or_path: str) -> EngineProfile:
    """A shipped profile by name (``gpu-8b-h100-derived``, ``smollm2-135m-cpu``) or a profile JSON file."""
    if name_or_path in RENAMED:
        raise ProfileError(f"profile {name_or_path!r} is now {RENAMED[name_or_path]!r} (derived, not measured)")
    if name_or_path in SHIPPED:
        text = PROFILES.joinpath(f"{name_or_path}.json").read_text()
        origin = f"profile {name_or_path}"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ProfileError(
                f"profile {name_or_path!r} is neither a shipped profile ({', '.join(SHIPPED)}) nor a file"
            )
        text, origin = path.read_text(), str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{origin}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return profile_from_dict(data, origin)
