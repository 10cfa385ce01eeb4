"""Ops launched per decode step on a tiny random-weight Llama, per decoder layer and per step, for one backend.

On a GPU a small decode step costs its launches more than its arithmetic, and on a CPU its dispatches, so this
counts what a step would launch: every aten op torch dispatches (a ``TorchDispatchMode``, below autograd; sorted
by ``kind_of`` into launches and ops that launch nothing), every Triton kernel launch and every call into
shoal's C kernels (``--backend cpu``: kind ``c``), inside the decoder layers and outside them (embedding, final
norm, LM head, sampling, the step's metadata). The torch ops a Triton launch makes itself (the CPU interpreter's copies)
are not counted. The model is the engine tests' tiny Llama (``tests/engine/tiny_checkpoints.py``: hidden 64, 4
query heads over 2 KV heads) with ``--layers`` layers; the counts per layer do not depend on its size.
``--backend triton`` runs the kernels on Triton's CPU interpreter (``TRITON_INTERPRET=1``), slowly: keep
``--layers`` small there.

    .venv/bin/python bench/decode_ops.py [--backend torch|cpu|triton] [--layers 2] [--batch 1] [--steps 4]
        [--quantization int4 [--one-call-per-op]]

With ``--backend cpu --quantization int4`` the projections' calls into the C gemv kernel count too, and a decode
batch of up to 8 rows runs every layer in one C call (``shoal_decode_layers``, counted inside the layers):
``--one-call-per-op`` turns that off for the count before.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
SYNCS = ("aten::item", "aten::is_nonzero", "aten::_local_scalar_dense")
KINDS = ("kernel", "sync", "triton", "c", "view", "alloc", "host")
LAUNCHES = ("kernel", "sync", "triton", "c")
C_CALLS = {"kernel": ("_call",), "layer_ops": ("_rms_norm", "_rotary", "_silu")}  # CpuOps' kernels' ctypes calls


class OpCounter(TorchDispatchMode):
    """Counts dispatched aten ops and Triton launches by where they ran: ``layers`` or ``outside``."""

    def __init__(self) -> None:
        super().__init__()
        self.where = "outside"
        self.in_kernel = 0  # inside a Triton launch: its own torch ops are the interpreter's, not the step's
        self.counts: Counter[tuple[str, str]] = Counter()
        self.names: Counter[tuple[str, str]] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not self.in_kernel:
            self.count(kind_of(func), func.name())
        return func(*args, **(kwargs or {}))

    def count(self, kind: str, name: str) -> None:
        self.counts[self.where, kind] += 1
        self.names[self.where, f"{kind} {name}"] += 1


def kind_of(func: Any) -> str:
    """What a dispatched op costs a GPU: a ``kernel`` launch, a ``sync`` (a device-to-host read), or no launch:
    a ``view`` (its result may alias its input: a view, a ``to`` that changes nothing), an ``alloc`` (the
    caching allocator's) or ``host`` work (no tensor in, none out, e.g. ``promote_types``)."""
    name = func._schema.name
    if name in SYNCS:
        return "sync"
    if func.is_view:
        return "view"
    if name.startswith(("aten::empty", "aten::new_empty")):
        return "alloc"
    if not any(str(ret.type) == "Tensor" for ret in func._schema.returns):
        return "host"
    return "kernel"


@contextmanager
def triton_launches_counted(counter: OpCounter) -> Iterator[None]:
    """Each Triton kernel launch (compiled or interpreted) counted, by kernel name, for the block's duration."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    originals = {cls: cls.run for cls in (InterpretedFunction, JITFunction)}

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(kernel: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if not warmup:
                counter.count("triton", kernel.fn.__name__)
            counter.in_kernel += 1
            try:
                return original(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                counter.in_kernel -= 1

        return run

    for cls, original in originals.items():
        cls.run = counted(original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.run = original  # type: ignore[method-assign]


@contextmanager
def c_calls_counted(counter: OpCounter, model: Any) -> Iterator[None]:
    """Each call into shoal's C kernels counted, by the C function's name, for the block's duration: through the
    model's ``CpuOps`` (nothing for another backend), its quantized projections' kernel, and its one-call layers
    (``DecodeStack``: counted inside the layers, as the calls it replaces were)."""
    from shoal.engine.model.quantized_linear import QuantizedLinear

    ops = model.norm.ops
    targets = [(getattr(ops, holder, None), names, None) for holder, names in C_CALLS.items()]
    gemvs = {id(m.kernel): m.kernel for m in model.modules() if isinstance(m, QuantizedLinear) and m.kernel}
    targets += [(kernel, ("_gemv",), None) for kernel in gemvs.values()]
    stack = getattr(model, "decode_stack", None)
    targets.append((stack and stack._library, ("_call",), "layers"))
    wrapped = []
    for kernel, names, where in targets:
        for name in names if kernel is not None else ():
            original = getattr(kernel, name)

            def call(*args: Any, _original: Any = original, _where: str | None = where) -> Any:
                outer = counter.where
                counter.where = _where or outer
                try:
                    counter.count("c", _original.__name__)
                    return _original(*args)
                finally:
                    counter.where = outer

            setattr(kernel, name, call)
            wrapped.append((kernel, name, original))
    try:
        yield
    finally:
        for kernel, name, original in wrapped:
            setattr(kernel, name, original)


def label_layers(model: torch.nn.Module, counter: OpCounter) -> None:
    """Ops inside a decoder layer's forward are counted as ``layers`` (the model calls ``layer.forward``)."""
    for layer in model.layers:  # type: ignore[union-attr]

        def forward(*args: Any, _original: Callable[..., Any] = layer.forward, **kwargs: Any) -> Any:
            counter.where = "layers"
            try:
                return _original(*args, **kwargs)
            finally:
                counter.where = "outside"

        layer.forward = forward


def tiny_llama(directory: Path, layers: int) -> Path:
    """The engine tests' GQA Llama with ``layers`` layers (their builder imports a neighbour, so their folder goes
    on ``sys.path``)."""
    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    from tiny_checkpoints import build_checkpoint

    return build_checkpoint(directory, "llama", seed=2, num_hidden_layers=layers, num_key_value_heads=2)


def count_step_ops(
    backend: str,
    layers: int,
    batch: int = 1,
    steps: int = 4,
    prompt_len: int = 20,
    quantization: str = "none",
    one_call: bool = True,
) -> dict[str, Any]:
    """Builds the engine on the tiny Llama, prefills ``batch`` requests, decodes once, then counts ``steps`` decode
    steps: launches per layer and per step, each kind per layer and outside the layers, each op per layer.
    ``quantization`` int4 puts the projections on shoal's C kernel; there ``one_call`` False turns the one-call
    layers off (one C call per op through the modules)."""
    from shoal.engine import LLM, SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        llm = LLM(
            str(tiny_llama(Path(tmp), layers)),
            attention_backend=backend,
            dtype="float32",
            block_size=16,
            num_kv_blocks=batch * 8 + 8,
            max_num_seqs=batch,
            quantization=quantization,
        )
    engine = llm.engine
    if not one_call:
        engine.runner.model.decode_stack = None
    params = SamplingParams(temperature=0.0, max_tokens=steps + 4, ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"r{i}", [3 + i, *range(10, 9 + prompt_len)], params)
    engine.step()  # the prefills
    engine.step()  # a first decode
    counter = OpCounter()
    label_layers(engine.runner.model, counter)
    with triton_launches_counted(counter), c_calls_counted(counter, engine.runner.model), counter:
        for _ in range(steps):
            engine.step()
    per_layer = steps * layers
    return {
        "one_call_layers": getattr(engine.runner.model, "decode_stack", None) is not None,
        "launches_per_layer": sum(counter.counts["layers", k] for k in LAUNCHES) / per_layer,
        "launches_per_step": sum(counter.counts[w, k] for w in ("layers", "outside") for k in LAUNCHES) / steps,
        "per_layer": {k: counter.counts["layers", k] / per_layer for k in KINDS},
        "outside_layers_per_step": {k: counter.counts["outside", k] / steps for k in KINDS},
        "layer_ops": {name: n / per_layer for (where, name), n in sorted(counter.names.items()) if where == "layers"},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("torch", "cpu", "triton"), default="torch")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1, help="requests decoding together")
    parser.add_argument("--prompt-len", type=int, default=20)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--quantization", choices=("none", "int4"), default="none", help="int4: the C gemv kernel")
    parser.add_argument("--one-call-per-op", action="store_true", help="int4 on cpu: the one-call layers off")
    args = parser.parse_args(argv)
    if args.backend == "triton":
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are first imported
    torch.set_num_threads(1)
    from shoal.cpu_features import cpu_info

    counts = count_step_ops(
        args.backend, args.layers, args.batch, args.steps, args.prompt_len, args.quantization, not args.one_call_per_op
    )
    report = {
        "machine": cpu_info().summary(),
        "commit": _commit(),
        "torch": torch.__version__,
        "backend": args.backend,
        "quantization": args.quantization,
        "layers": args.layers,
        "batch": args.batch,
        "steps": args.steps,
        **counts,
    }
    print(json.dumps(report, indent=2))


def _commit() -> str:
    run = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return run.stdout.strip()


if __name__ == "__main__":
    main()
