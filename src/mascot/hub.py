"""Whether the Hugging Face hub can be reached, and what its caches hold, asked without a download:
models, tokenizers and datasets read from the hub by any command decide here whether to try it."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

HUB_PROBE_TIMEOUT_S = 3.0


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


_hub_reachable: bool | None = None


def hub_online() -> bool:
    """Whether the Hugging Face hub can be reached: False when HF_HUB_OFFLINE is set, otherwise one
    quick connection probe per process, so that an offline machine never waits on download retries."""
    global _hub_reachable
    if _env_flag("HF_HUB_OFFLINE") or _env_flag("TRANSFORMERS_OFFLINE"):
        return False
    if _hub_reachable is None:
        _hub_reachable = _probe_hub()
    return _hub_reachable


def _probe_hub() -> bool:
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # only the proxy knows; let the real request decide
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=HUB_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def in_datasets_cache(hub_id: str) -> bool:
    """Whether `datasets` has a prepared copy of a hub dataset, which it loads offline: the folder
    `<cache>/<owner>___<name>/<config>/<version>/<hash>` it looks for then."""
    owner, _, name = hub_id.rpartition("/")
    snake = re.sub(r"([a-z\d])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)).lower()
    root = _datasets_cache() / "___".join(p for p in (owner, snake) if p)
    return any(p.is_dir() for p in root.glob("*/*/*"))


def _datasets_cache() -> Path:
    """`datasets`' cache folder, found as `datasets.config` finds it (without importing datasets)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "datasets"
