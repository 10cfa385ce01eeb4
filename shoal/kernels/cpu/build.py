"""Compiles a kernel's C source into a shared library once per machine, source, compiler and flags.

The library is built for the CPU it runs on (``-march=native``), so it is cached under ``$SHOAL_CACHE`` (default
``~/.cache/shoal``, as the rest of the project's build outputs) in a folder named by a hash of the source, the
flags, the compiler's identity and the CPU's model and flags: a home directory shared by machines of different
CPUs never hands one a library with instructions it lacks, and an edited source or a new compiler builds anew.
Several engines may start at once, so each compiles into its own temporary file and renames it into place
(atomic on one filesystem): a reader sees the whole library or none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from shoal.cache_dir import shoal_cache
from shoal.cpu_features import cpu_info

NATIVE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
BUILD_TIMEOUT_S = 120.0


class BuildError(RuntimeError):
    """The library could not be built; the message says why (no compiler, a compiler error, no cache folder)."""


def cache_root() -> Path:
    return shoal_cache() / "kernels"


def compiler() -> str:
    """The C compiler: ``$CC``, else ``cc``."""
    return os.environ.get("CC") or "cc"


def built_library(source: Path, flags: Sequence[str] = NATIVE_FLAGS, cc: str | None = None) -> Path:
    """The path of ``source`` compiled with ``flags``, building it if this machine has not yet."""
    cc = cc or compiler()
    found = shutil.which(cc)
    if found is None:
        raise BuildError(f"no C compiler: {cc!r} (from $CC, else 'cc') is not on PATH")
    key = _key(source.read_bytes(), flags, found, _compiler_identity(found))
    target = cache_root() / key / f"{source.stem}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{source.stem}.", suffix=".so")
        os.close(handle)
    except OSError as exc:
        raise BuildError(f"cannot write the kernel cache {str(target.parent)!r}: {exc}") from exc
    try:
        command = [found, *flags, "-o", temporary, str(source)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{' '.join(command)} failed: {exc}") from exc
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-6:])
            raise BuildError(f"{' '.join(command)} exited {done.returncode}: {tail}")
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target


def _compiler_identity(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"the C compiler {path!r} does not run: {exc}") from exc
    if done.returncode != 0:
        raise BuildError(f"the C compiler {path!r} does not run: '{path} --version' exited {done.returncode}")
    return done.stdout


def _key(source: bytes, flags: Sequence[str], path: str, identity: str) -> str:
    cpu = cpu_info()
    digest = hashlib.sha256()
    for part in (source, "\0".join(flags).encode(), path.encode(), identity.encode(), cpu.model.encode()):
        digest.update(part)
        digest.update(b"\n--\n")
    digest.update(" ".join(sorted(cpu.flags)).encode())
    return digest.hexdigest()[:20]
