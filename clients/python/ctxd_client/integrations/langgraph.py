"""LangGraph and LangChain agents over ctxd.

``pip install 'ctxd-client[langgraph]'``:

* :class:`CtxdStore` — LangGraph's ``BaseStore`` (long-term memory shared
  across threads) kept in ctxd's MemoryService.
* :class:`CtxdContextMiddleware` — an agent middleware for LangChain's
  ``create_agent`` in place of ``SummarizationMiddleware``: ctxd keeps the
  whole transcript and compacts it, the model sees ctxd's slice, and the
  graph's checkpointed ``messages`` stay bounded.
"""

from typing import Any

from ctxd_client.integrations._langgraph_store import CtxdStore

__all__ = ["CtxdContextMiddleware", "CtxdStore"]  # noqa: F822 (the middleware: __getattr__)


def __getattr__(name: str) -> Any:
    # The middleware needs LangChain (``create_agent``); the store needs LangGraph alone,
    # so the middleware is imported when first asked for.
    if name == "CtxdContextMiddleware":
        from ctxd_client.integrations._langgraph_middleware import CtxdContextMiddleware

        return CtxdContextMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
