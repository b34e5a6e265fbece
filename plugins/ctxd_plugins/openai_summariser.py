"""``openai``: a summariser calling any OpenAI-compatible chat-completions API.

Works with vLLM, llama.cpp's server, Ollama (``/v1``) and hosted APIs. It
asks for structured output (``response_format`` ``json_schema``, else
``json_object``) and, when a server rejects a parameter with 400/422, retries
without it: ``json_schema`` → ``json_object`` → none (the system prompt
carries the schema anyway), ``max_tokens`` → ``max_completion_tokens``,
``temperature`` dropped. What works is remembered for later calls.

Configured in its own table ``[summariser.openai]`` (:class:`OpenAIConfig`;
``CTXD_SUMMARISER_OPENAI_<KEY>``); it offers itself only when ``base_url``
and ``model`` are set. The older names ``compaction.openai_<key>`` still
work, with a deprecation warning. The API key comes from ``api_key``, else
``api_key_file``, else the environment variable ``api_key_env``; it is never
logged.

Errors: timeouts, connection failures, 408/429/5xx (after the SDK's bounded
retries) → :class:`~ctxd_sidecar.plugin.Unavailable`; other refusals →
:class:`~ctxd_sidecar.core.compaction.SummariserError` (``rejected``); unusable
answers → :class:`~ctxd_sidecar.core.compaction.MalformedAnswer`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from ctxd_sidecar.plugin import (
    ANSWER_SCHEMA,
    Config,
    ConfigTable,
    MalformedAnswer,
    Positive,
    PositiveFloat,
    SummariserError,
    Summary,
    SummaryRequest,
    Table,
    Unavailable,
    hookimpl,
    parse_answer,
)

log = logging.getLogger(__name__)

NAME = "openai"
#: Sent as the key when none is configured (servers without authentication
#: ignore it; the SDK insists on some key).
NO_KEY = "no-key"
_FORMATS = ("json_schema", "json_object", "none")
#: This plugin's config table.
TABLE = "summariser.openai"


class OpenAIEndpoint(Table):
    """Where an OpenAI-compatible API is and the key it takes (the summariser's
    and the embedder's tables both start with these)."""

    #: Base URL of the OpenAI-compatible API, e.g. "http://127.0.0.1:8000/v1".
    base_url: str = ""
    #: Model name sent with each request.
    model: str = ""
    #: API key; used first when set (prefer the file or the environment). Never logged.
    api_key: str = Field(default="", repr=False)
    #: File holding the API key (read at start-up); used before the environment.
    api_key_file: str = ""
    #: Environment variable holding the API key when neither of the above is set
    #: (no key at all suits servers without authentication).
    api_key_env: str = "OPENAI_API_KEY"

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)


E = TypeVar("E", bound=OpenAIEndpoint)


class OpenAIConfig(OpenAIEndpoint):
    """``[summariser.openai]``: where the OpenAI-compatible API is and how to call it."""

    #: Seconds one request may take.
    timeout: PositiveFloat = 120.0
    #: Retries of a request after a timeout, connection error, 429 or 5xx.
    max_retries: Annotated[int, Field(ge=0)] = 2
    #: Answer allowance per request, in tokens.
    max_output_tokens: Positive = 4096
    #: The summariser model's context window, in tokens; the excerpt is trimmed
    #: or sent in several passes to fit it.
    window: Positive = 32_768
    #: Structured output requested (servers that reject the requested kind are
    #: retried with the next one).
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"

    @model_validator(mode="after")
    def _answer_fits_the_window(self) -> OpenAIConfig:
        if self.max_output_tokens >= self.window:
            raise ValueError(f"{TABLE}.max_output_tokens must be below {TABLE}.window")
        return self


class OpenAISummariser:
    name = NAME
    uses_excerpt = True

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 120.0,
        max_retries: int = 2,
        max_output_tokens: int = 4096,
        window: int = 32_768,
        response_format: str = "json_schema",
    ) -> None:
        if response_format not in _FORMATS:
            raise ValueError(f"response_format must be one of {', '.join(_FORMATS)}")
        self.base_url = base_url
        self.model = model
        self._api_key = api_key or NO_KEY
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_output_tokens = max_output_tokens
        self.window_tokens = window
        self.response_format = response_format
        self._token_param = "max_tokens"
        self._send_temperature = True
        self._client: Any = None
        #: Where requests go, for messages.
        self.where = display_url(base_url)

    def __repr__(self) -> str:
        return f"OpenAISummariser(base_url={self.where!r}, model={self.model!r})"

    @classmethod
    def from_config(
        cls, cfg: OpenAIConfig, env: Mapping[str, str] | None = None
    ) -> OpenAISummariser:
        return cls(
            base_url=cfg.base_url,
            model=cfg.model,
            api_key=resolve_api_key(cfg, os.environ if env is None else env),
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            max_output_tokens=cfg.max_output_tokens,
            window=cfg.window,
            response_format=cfg.response_format,
        )

    def _get_client(self) -> Any:
        if self._client is None:
            import openai  # deferred: only deployments that use it pay the import

            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return self._client

    def _request(self, request: SummaryRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system_prompt},
                {"role": "user", "content": request.excerpt},
            ],
            self._token_param: self.max_output_tokens,
        }
        if self._send_temperature:
            kwargs["temperature"] = 0
        if self.response_format == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "compaction_summary", "schema": ANSWER_SCHEMA},
            }
        elif self.response_format == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    async def summarise(self, request: SummaryRequest) -> Summary:
        import openai

        client = self._get_client()
        for _ in range(len(_FORMATS) + 2):  # each retry drops one rejected parameter
            try:
                response = await client.chat.completions.create(**self._request(request))
                break
            except openai.APITimeoutError:
                raise Unavailable(
                    f"summariser {NAME!r} at {self.where} did not answer within "
                    f"{self.timeout:g}s (summariser.openai.timeout)"
                ) from None
            except openai.APIConnectionError:
                raise Unavailable(f"summariser {NAME!r} at {self.where} is unreachable") from None
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status in (400, 422) and self._drop_rejected_parameter(exc):
                    continue
                detail = self._detail(exc)
                if status in (408, 429) or status >= 500:
                    raise Unavailable(
                        f"summariser {NAME!r} at {self.where} answered {status}: {detail}"
                    ) from None
                raise SummariserError(
                    "rejected",
                    f"summariser {NAME!r} at {self.where} refused the request ({status}: "
                    f"{detail}); check summariser.openai.model, base_url and the API key",
                ) from None
        else:  # pragma: no cover - every branch above breaks, continues or raises
            raise SummariserError("rejected", f"summariser {NAME!r} rejected every request")
        return self._read(response)

    def _read(self, response: Any) -> Summary:
        choice = response.choices[0] if response.choices else None
        message = choice.message if choice is not None else None
        content = (message.content or "") if message is not None else ""
        if not content.strip():
            refusal = getattr(message, "refusal", None)
            why = f" (refusal: {refusal[:200]})" if refusal else ""
            raise MalformedAnswer(f"summariser {NAME!r} answered with no content{why}")
        try:
            return parse_answer(content)
        except MalformedAnswer as exc:
            if choice.finish_reason == "length":
                raise MalformedAnswer(
                    f"summariser {NAME!r}: the answer was cut off at "
                    f"{self.max_output_tokens} tokens (raise "
                    f"summariser.openai.max_output_tokens): {exc.message}"
                ) from None
            raise MalformedAnswer(f"summariser {NAME!r}: {exc.message}") from None

    def _drop_rejected_parameter(self, exc: Any) -> bool:
        """Adapt to a server that refused a parameter; False if nothing is left to drop."""
        text = f"{exc.message} {json.dumps(exc.body, default=str)}".lower()
        if self._token_param == "max_tokens" and "max_tokens" in text:
            self._token_param = "max_completion_tokens"
        elif self._send_temperature and "temperature" in text:
            self._send_temperature = False
        elif self.response_format != "none":
            self.response_format = _FORMATS[_FORMATS.index(self.response_format) + 1]
        else:
            return False
        log.info(
            "summariser adapted to the server",
            extra={
                "summariser": NAME,
                "response_format": self.response_format,
                "token_param": self._token_param,
                "temperature": self._send_temperature,
            },
        )
        return True

    def _detail(self, exc: Any) -> str:
        detail = str(getattr(exc, "message", "") or "")
        if self._api_key != NO_KEY:
            detail = detail.replace(self._api_key, "***")
        return detail[:300]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def display_url(base_url: str) -> str:
    """``base_url`` without credentials or query, for messages."""
    parts = urlsplit(base_url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def configured_table(config: Config, table: str, cls: type[E]) -> E | None:
    """``config``'s table ``table`` when it names an endpoint, else None;
    ValueError when the openai package it then needs is missing."""
    cfg = config.table(table, cls)
    if not cfg.configured:
        return None
    if importlib.util.find_spec("openai") is None:
        raise ValueError(
            f"{table} needs the openai package: pip install '.[openai]' from a ctxd clone"
        )
    return cfg


def resolve_api_key(cfg: OpenAIEndpoint, env: Mapping[str, str]) -> str:
    """The configured key: inline, else file, else environment; ``""`` if none."""
    if cfg.api_key:
        return cfg.api_key
    if cfg.api_key_file:
        try:
            with open(cfg.api_key_file, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read {TABLE}.api_key_file: {exc.strerror}") from None
    if cfg.api_key_env:
        return env.get(cfg.api_key_env, "").strip()
    return ""


@hookimpl
def ctxd_config_tables() -> list[ConfigTable]:
    return [ConfigTable(TABLE, OpenAIConfig)]


@hookimpl
def ctxd_check_config(config: Config) -> None:
    if config.compaction.summariser == NAME and not config.table(TABLE, OpenAIConfig).configured:
        raise ValueError(f'compaction.summariser "{NAME}" needs {TABLE}.base_url and {TABLE}.model')


@hookimpl
def ctxd_summarisers(config: Config) -> list[OpenAISummariser]:
    cfg = configured_table(config, TABLE, OpenAIConfig)
    return [] if cfg is None else [OpenAISummariser.from_config(cfg)]
