"""LangGraph and LangChain agents over ctxd.

``pip install 'ctxd-client[langgraph]'``:

* :class:`CtxdStore` — LangGraph's ``BaseStore`` (long-term memory shared
  across threads) kept in ctxd's MemoryService.
* :class:`CtxdContextMiddleware` — an agent middleware for LangChain's
  ``create_agent`` in place of ``SummarizationMiddleware``: ctxd keeps the
  whole transcript and compacts it, the model sees ctxd's slice, and the
  graph's checkpointed ``messages`` stay bounded.
"""

from ctxd_client.integrations._langgraph_middleware import CtxdContextMiddleware
from ctxd_client.integrations._langgraph_store import CtxdStore

__all__ = ["CtxdContextMiddleware", "CtxdStore"]
