"""``openai:BASE_URL#MODEL``: an OpenAI-compatible ``POST BASE_URL/embeddings`` endpoint."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.ingest.embedders.core import Vectors, WindowedEmbedder, window_starts

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder(WindowedEmbedder):
    """``POST {base_url}/embeddings`` with ``{"model", "input": [...]}`` (OpenAI's shape).

    ``api_key`` is sent as a Bearer token when given (``ks`` passes
    ``$KS_EMBEDDINGS_API_KEY``: ``EmbedderSettings.api_key``). The dimension is learnt from the first answer (a one-text probe if
    it is asked for before anything was embedded). Texts are split at about 4
    characters a token.
    """

    CHARS_PER_TOKEN = 4

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        batch_size: int = 64,
        max_tokens: int = 8191,
        timeout: float = 60.0,
    ) -> None:
        super().__init__(
            f"openai:{model}", spec=f"openai:{base_url.rstrip('/')}#{model}", batch_size=batch_size
        )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.url = f"{self.base_url}/embeddings"
        self.api_key = api_key
        self.timeout = timeout
        self._max_tokens = max_tokens
        self._dimension: int | None = None
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, rest: str, *, api_key: str | None = None) -> OpenAIEmbedder:
        base_url, sep, model = rest.strip().rpartition("#")
        if not sep or not base_url or not model:
            raise InvalidRequest(
                f"'openai:{rest}' needs a base URL and a model:"
                " write openai:BASE_URL#MODEL, e.g. openai:http://127.0.0.1:8080/v1#text-embedding-3-small"
            )
        if not base_url.startswith(("http://", "https://")):
            raise InvalidRequest(
                f"the base URL {base_url!r} of an openai: embedder must start with http:// or https://"
            )
        return cls(base_url, model, api_key=api_key)

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._encode(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def parts(self, texts: Sequence[str]) -> list[list[str]]:
        size = self._max_tokens * self.CHARS_PER_TOKEN
        overlap = size // 8
        return [
            [text]
            if len(text) <= size
            else [text[s : s + size] for s in window_starts(len(text), size, overlap)]
            for text in texts
        ]

    def _post(self, payload: dict[str, Any]) -> Any:
        import httpx

        with self._lock:
            if self._client is None:
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                self._client = httpx.Client(timeout=self.timeout, headers=headers)
            client = self._client
        try:
            response = client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise StoreError(
                f"embedding endpoint {self.url} could not be reached: {exc}", url=self.url
            ) from exc
        body = response.text
        if not response.is_success:
            raise StoreError(
                f"embedding endpoint {self.url} answered HTTP {response.status_code}: {body[:200]}",
                url=self.url,
                status=response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise self._malformed(body, "not JSON") from exc

    def _malformed(self, body: str, why: str) -> StoreError:
        return StoreError(
            f"embedding endpoint {self.url} answered a malformed body ({why}): {body[:200]}",
            url=self.url,
        )

    def _encode(self, batch: list[str]) -> Vectors:
        answer = self._post({"model": self.model, "input": batch})
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != len(batch):
            got = len(data) if isinstance(data, list) else "no"
            raise self._malformed(
                str(answer), f"{got} embeddings in 'data' for {len(batch)} inputs"
            )
        rows: dict[int, list[float]] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not isinstance(vector, list) or index in rows:
                raise self._malformed(str(answer), "each item needs an 'embedding' and an 'index'")
            rows[index] = vector
        if sorted(rows) != list(range(len(batch))):
            raise self._malformed(str(answer), f"indexes are not 0..{len(batch) - 1}")
        try:
            out = np.asarray([rows[i] for i in range(len(batch))], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self._malformed(
                str(answer), "embeddings are not equal-length number lists"
            ) from exc
        if out.ndim != 2 or out.shape[1] == 0 or not np.isfinite(out).all():
            raise self._malformed(str(answer), "embeddings are not equal-length number lists")
        if self._dimension is None:
            self._dimension = int(out.shape[1])
        elif out.shape[1] != self._dimension:
            raise StoreError(
                f"embedding endpoint {self.url} answered dimension {out.shape[1]},"
                f" earlier {self._dimension}",
                url=self.url,
            )
        return out
