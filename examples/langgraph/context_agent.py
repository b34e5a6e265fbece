"""A LangChain ``create_agent`` agent whose conversation and memory are kept by ctxd.

``CtxdContextMiddleware`` gives each step's messages to ctxd and calls the
model with ctxd's slice (summary + recent tail), so the checkpoint holds a
bounded slice while ctxd keeps the whole transcript; ``CtxdStore`` is the
graph's long-term store (here: one note per question). Each line on stdin
is one turn (an empty line ends the chat).

    pip install './clients/python[langgraph]' langchain-openai
    CTXD_ADDRESS=127.0.0.1:50051 THREAD_ID=demo OPENAI_API_KEY=... python context_agent.py

Any OpenAI-compatible chat-completions server works: set OPENAI_BASE_URL
and MODEL.
"""

from __future__ import annotations

import os
import sys

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from ctxd_client import Client
from ctxd_client.integrations.langgraph import CtxdContextMiddleware, CtxdStore


def main() -> None:
    model_name = os.environ.get("MODEL", "gpt-4o-mini")
    model = ChatOpenAI(model=model_name, base_url=os.environ.get("OPENAI_BASE_URL"))
    thread = os.environ.get("THREAD_ID", "demo")
    with Client(os.environ.get("CTXD_ADDRESS", "127.0.0.1:50051")) as ctxd:
        store = CtxdStore(ctxd)
        agent = create_agent(
            model,
            system_prompt="You are a concise assistant.",
            middleware=[CtxdContextMiddleware(ctxd, model=model_name)],
            checkpointer=InMemorySaver(),
            store=store,
        )
        config = {"configurable": {"thread_id": thread}}
        notes = ("notes", thread)
        for line in sys.stdin:
            line = line.strip()
            if not line:
                break
            asked = len(store.search(notes, limit=1000))
            store.put(notes, f"q{asked}", {"question": line})
            state = agent.invoke({"messages": [{"role": "user", "content": line}]}, config)
            print(state["messages"][-1].text, flush=True)


if __name__ == "__main__":
    main()
