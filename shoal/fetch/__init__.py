"""Fetching models from where people keep them (``hf://``, ``s3://``) into a local cache, torch-free."""

from shoal.fetch.cache import cached_path, default_download_dir
from shoal.fetch.errors import FetchError, SourceError
from shoal.fetch.fetcher import FetchResult, NoSpace, fetch, local_path
from shoal.fetch.sources import HubSource, RemoteSource, S3Source, parse_source

__all__ = [
    "FetchError",
    "FetchResult",
    "HubSource",
    "NoSpace",
    "RemoteSource",
    "S3Source",
    "SourceError",
    "cached_path",
    "default_download_dir",
    "fetch",
    "local_path",
    "parse_source",
]
