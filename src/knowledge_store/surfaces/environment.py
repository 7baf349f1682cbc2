"""The environment variables of ``ks`` and its servers, read here and nowhere else.

The library reads no environment (a test greps ``src/`` for it): every setting
is a parameter — :class:`~knowledge_store.store.EngineSettings` (the engines'),
:class:`~knowledge_store.ingest.embedding.EmbedderSettings`, an identity, a
location. The command line and the servers map the variables below onto those
parameters, so a script that sets them keeps working.

==========================  ==============================================================
variable                    parameter
==========================  ==============================================================
``KS_STORE``                the store location (``ks --store``; typer reads it)
``KS_AS``                   the identity a command or the stdio server reads as
``KS_EMBEDDER``             the embedder spec a store is opened with
``KS_PG_LEXICAL``           ``EngineSettings.lexical_ranker`` (PostgreSQL)
``KS_PG_KEEP_RUNNING``      ``EngineSettings.keep_server`` (``pg:DIR``; ``1`` = keep)
``KS_GRAPH_TIME_LIMIT_MS``  ``EngineSettings.graph_time_limit_s`` (query_graph; default 250)
``KS_ONNX_DEVICE``          ``EmbedderSettings.device`` (``auto``, ``cpu``, ``gpu``)
``KS_ONNX_THREADS``         ``EmbedderSettings.threads``
``KS_ONNX_CACHE``           ``EmbedderSettings.onnx_cache`` (else ``$XDG_CACHE_HOME/knowledge-store/onnx``)
``KS_EMBEDDINGS_API_KEY``   ``EmbedderSettings.api_key`` (an ``openai:`` endpoint)
``KS_EMBED_WINDOW_MS``      ``ks serve``'s query batching window
==========================  ==============================================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import QUERY_GRAPH_TIME_LIMIT_S, Identity

if TYPE_CHECKING:  # imported when used: ``ks --help`` stays quick
    from knowledge_store.ingest.embedders.core import Device
    from knowledge_store.ingest.embedding import EmbedderSettings
    from knowledge_store.store import EngineSettings, KnowledgeStore

__all__ = [
    "EMBEDDER_ENV",
    "embed_window_s",
    "embedder_settings",
    "embedder_spec",
    "engine_settings",
    "identity",
    "open_store",
]

EMBEDDER_ENV = "KS_EMBEDDER"


def _environ(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def identity(given: str | None = None, env: Mapping[str, str] | None = None) -> Identity:
    """``given``, else ``$KS_AS``, else ``everyone``."""
    return Identity(given or _environ(env).get("KS_AS") or "everyone")


def embedder_spec(env: Mapping[str, str] | None = None) -> str | None:
    return _environ(env).get(EMBEDDER_ENV) or None


def engine_settings(env: Mapping[str, str] | None = None) -> EngineSettings:
    from knowledge_store.store import EngineSettings

    values = _environ(env)
    graph_ms = _positive_int(values, "KS_GRAPH_TIME_LIMIT_MS")
    return EngineSettings(
        lexical_ranker=values.get("KS_PG_LEXICAL") or None,
        keep_server=values.get("KS_PG_KEEP_RUNNING", "") not in ("", "0"),
        graph_time_limit_s=QUERY_GRAPH_TIME_LIMIT_S if graph_ms is None else graph_ms / 1000,
    )


def _positive_int(values: Mapping[str, str], name: str) -> int | None:
    """``$name`` as a whole number ≥ 1; unset or empty: None. Anything else is refused —
    a setting silently ignored looks like one that took effect."""
    value = values.get(name, "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit() and int(value) > 0):
        raise InvalidRequest(
            f"{name}={value!r} is not a whole number of 1 or more; set it to one, or unset it"
            " for the default",
            field=name,
        )
    return int(value)


def embedder_settings(env: Mapping[str, str] | None = None) -> EmbedderSettings:
    """``KS_ONNX_DEVICE`` / ``KS_ONNX_THREADS`` / ``KS_ONNX_CACHE`` / ``KS_EMBEDDINGS_API_KEY``."""
    from knowledge_store.ingest.embedders.core import DEVICES
    from knowledge_store.ingest.embedding import EmbedderSettings

    values = _environ(env)
    device = (values.get("KS_ONNX_DEVICE") or "auto").strip().lower()
    if device not in DEVICES:
        raise InvalidRequest(
            f"KS_ONNX_DEVICE={device!r} is not one of: {', '.join(DEVICES)}",
            field="KS_ONNX_DEVICE",
            allowed=list(DEVICES),
        )
    cache = values.get("KS_ONNX_CACHE")
    xdg = values.get("XDG_CACHE_HOME")
    onnx_cache = (
        Path(cache).expanduser()
        if cache
        else Path(xdg) / "knowledge-store" / "onnx"
        if xdg
        else None
    )
    return EmbedderSettings(
        device=cast("Device", device),
        threads=_positive_int(values, "KS_ONNX_THREADS"),
        onnx_cache=onnx_cache,
        api_key=values.get("KS_EMBEDDINGS_API_KEY") or None,
    )


def embed_window_s(env: Mapping[str, str] | None = None) -> float | None:
    """``$KS_EMBED_WINDOW_MS`` in seconds (unset or empty: None, the batcher's default). A
    value that is not a finite number of milliseconds ≥ 0 is refused, naming the variable."""
    value = _environ(env).get("KS_EMBED_WINDOW_MS", "").strip()
    if not value:
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = math.nan
    if not (math.isfinite(ms) and ms >= 0):
        raise InvalidRequest(
            f"KS_EMBED_WINDOW_MS={value!r} is not a number of milliseconds of 0 or more"
            " (0 embeds each query at once); set it to one, or unset it for the default",
            field="KS_EMBED_WINDOW_MS",
        )
    return ms / 1000.0


def open_store(
    location: str | Path | None,
    env: Mapping[str, str] | None = None,
    *,
    create: bool = True,
) -> KnowledgeStore:
    """The store at ``location``, opened with the settings the environment names.
    ``create=False``: only a store that exists (``NotFound`` else, and nothing is made)."""
    from knowledge_store.store import KnowledgeStore

    return KnowledgeStore.open(
        location,
        create=create,
        embedder=embedder_spec(env),
        engine_settings=engine_settings(env),
        embedder_settings=embedder_settings(env),
    )
