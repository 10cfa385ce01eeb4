"""``shoal fetch-model SOURCE --download-dir DIR``: what an engine's (or gateway's) init container runs.

The local model path is the last line of stdout, progress goes to stderr, a failure is one line on stderr and
exit status 1. ``--termination-message-path`` (Kubernetes' ``terminationMessagePath``) gets one JSON line either
way: ``{"source", "path", "bytes", "cached"}`` or ``{"source", "error"}``. ``--link`` also points a symlink at
the path: a snapshot's directory carries its revision, which another engine's command line, written before the
fetch, cannot know.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fetch-model",
        help="Fetch a model (hf://, s3://) into a local cache and print its path.",
        description="Downloads what serving needs (config, tokenizer, safetensors; the GGUF file named) into a "
        "cache directory keyed by source and revision, resumed and verified, published atomically. Credentials "
        "come from the environment only: HF_TOKEN, HF_ENDPOINT; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL.",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="hf://ORG/REPO[@REVISION][/FILE.gguf], s3://BUCKET/PREFIX, s3://BUCKET/KEY.gguf; "
        "a local path or bundled alias is printed as it is",
    )
    p.add_argument("--download-dir", type=Path, required=True, help="the cache directory (a node cache, a PVC)")
    p.add_argument(
        "--tokenizer-only",
        action="store_true",
        help="only the config and tokenizer files (what a gateway needs); a GGUF file is fetched whole",
    )
    p.add_argument(
        "--link",
        type=Path,
        default=None,
        help="also make this path a symlink to the fetched model (replaced atomically), for engines that take a "
        "fixed path",
    )
    p.add_argument(
        "--termination-message-path",
        type=Path,
        default=None,
        help="also write the outcome there as one JSON line (Kubernetes shows it in the pod's status)",
    )
    p.set_defaults(func=_fetch_model)


def _write_message(path: Path | None, message: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        path.write_text(json.dumps(message) + "\n")
    except OSError as exc:
        print(f"shoal fetch-model: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)


def _link(link: Path, target: Path) -> None:
    """``link`` -> ``target``, swapped in by a rename so a reader never finds it missing or half made."""
    staging = link.with_name(f".{link.name}.{os.getpid()}")
    staging.unlink(missing_ok=True)
    staging.symlink_to(target.resolve())
    os.replace(staging, link)


def _fetch_model(args: argparse.Namespace) -> int:
    from shoal.fetch import FetchError, fetch

    try:
        result = fetch(args.source, args.download_dir, tokenizer_only=args.tokenizer_only)
    except FetchError as exc:
        print(f"shoal fetch-model: {exc}", file=sys.stderr)
        _write_message(args.termination_message_path, {"source": args.source, "error": str(exc)})
        return 1
    message = {"source": result.source, "path": result.path, "bytes": result.bytes, "cached": result.cached}
    if args.link is not None:
        try:
            _link(args.link, Path(result.path))
        except OSError as exc:
            error = f"cannot link {args.link} to {result.path}: {exc.strerror or exc}"
            print(f"shoal fetch-model: {error}", file=sys.stderr)
            _write_message(args.termination_message_path, {"source": args.source, "error": error})
            return 1
    _write_message(args.termination_message_path, message)
    print(result.path)
    return 0
