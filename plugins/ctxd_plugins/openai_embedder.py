"""``openai``: an embedder calling any OpenAI-compatible ``/embeddings`` API.

Works with vLLM, llama.cpp's server, Ollama (``/v1``), text-embeddings-inference
and hosted APIs. Configured in its own table ``[embedder.openai]``
(:class:`OpenAIEmbedderConfig`; ``CTXD_EMBEDDER_OPENAI_<KEY>``) like
``[summariser.openai]``; it offers itself when ``base_url`` and ``model``
are set, and ``memory.embedder = "openai"`` selects it. The API key comes
from ``api_key``, else ``api_key_file``, else the environment variable
``api_key_env``; it is never logged.

Errors: timeouts, connection failures, 408/429/5xx (after the SDK's bounded
retries) and other refusals → :class:`~ctxd_sidecar.plugin.Unavailable`
naming the server and status.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from ctxd_plugins.openai_summariser import (
    NO_KEY,
    OpenAIEndpoint,
    configured_table,
    display_url,
    resolve_api_key,
)
from ctxd_sidecar.plugin import (
    Config,
    ConfigTable,
    Positive,
    PositiveFloat,
    Unavailable,
    hookimpl,
)

NAME = "openai"
TABLE = "embedder.openai"


class OpenAIEmbedderConfig(OpenAIEndpoint):
    """``[embedder.openai]``: where the OpenAI-compatible API is and how to call it."""

    #: Dimensions asked of models that can shorten their vectors (0: the model's own).
    dimensions: Annotated[int, Field(ge=0, le=4096)] = 0
    #: Most texts per request (more are sent in several requests).
    batch_size: Positive = 64
    #: Seconds one request may take.
    timeout: PositiveFloat = 30.0
    #: Retries of a request after a timeout, connection error, 429 or 5xx.
    max_retries: Annotated[int, Field(ge=0)] = 2


class OpenAIEmbedder:
    name = NAME

    def __init__(self, cfg: OpenAIEmbedderConfig, api_key: str = "") -> None:
        self.cfg = cfg
        self._api_key = api_key or NO_KEY
        self._client: Any = None
        #: Where requests go, for messages.
        self.where = display_url(cfg.base_url)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(base_url={self.where!r}, model={self.cfg.model!r})"

    def _get_client(self) -> Any:
        if self._client is None:
            import openai  # deferred: only deployments that use it pay the import

            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.cfg.base_url,
                timeout=self.cfg.timeout,
                max_retries=self.cfg.max_retries,
            )
        return self._client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        size = self.cfg.batch_size
        for start in range(0, len(texts), size):
            out.extend(await self._batch(list(texts[start : start + size])))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        import openai

        # "float": every OpenAI-compatible server speaks it (not all speak base64).
        kwargs: dict[str, Any] = {
            "model": self.cfg.model,
            "input": texts,
            "encoding_format": "float",
        }
        if self.cfg.dimensions:
            kwargs["dimensions"] = self.cfg.dimensions
        where = f"embedder {NAME!r} at {self.where}"
        try:
            response = await self._get_client().embeddings.create(**kwargs)
        except openai.APITimeoutError:
            raise Unavailable(
                f"{where} did not answer within {self.cfg.timeout:g}s ({TABLE}.timeout)"
            ) from None
        except openai.APIConnectionError:
            raise Unavailable(f"{where} is unreachable") from None
        except openai.APIStatusError as exc:
            raise Unavailable(f"{where} refused the request (HTTP {exc.status_code})") from None
        data = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in data]


@hookimpl
def ctxd_config_tables() -> list[ConfigTable]:
    return [ConfigTable(TABLE, OpenAIEmbedderConfig)]


@hookimpl
def ctxd_check_config(config: Config) -> None:
    cfg = config.table(TABLE, OpenAIEmbedderConfig)
    if config.memory.embedder == NAME and not cfg.configured:
        raise ValueError(f'memory.embedder "{NAME}" needs {TABLE}.base_url and {TABLE}.model')


@hookimpl
def ctxd_embedders(config: Config) -> list[OpenAIEmbedder]:
    cfg = configured_table(config, TABLE, OpenAIEmbedderConfig)
    return [] if cfg is None else [OpenAIEmbedder(cfg, resolve_api_key(cfg, os.environ))]
