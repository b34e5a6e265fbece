"""A chat agent on the OpenAI Agents SDK whose session is kept by ctxd.

Each line on stdin is one turn (an empty line ends the chat); each answer
is printed. The conversation lives in the sidecar, so a restarted agent
(or another replica) carries on where it left off, and ctxd compacts it
when it passes its threshold.

    pip install './clients/python[agents]'
    CTXD_ADDRESS=127.0.0.1:50051 SESSION_ID=demo OPENAI_API_KEY=... python session_agent.py

Any OpenAI-compatible chat-completions server works: set OPENAI_BASE_URL
and MODEL.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from ctxd_client import AsyncClient
from ctxd_client.integrations.openai_agents import CtxdSession


async def main() -> None:
    set_tracing_disabled(True)  # no trace export from this example
    model_name = os.environ.get("MODEL", "gpt-4o-mini")
    model = OpenAIChatCompletionsModel(model=model_name, openai_client=AsyncOpenAI())
    agent = Agent(name="assistant", instructions="You are a concise assistant.", model=model)
    async with AsyncClient(os.environ.get("CTXD_ADDRESS", "127.0.0.1:50051")) as ctxd:
        session = CtxdSession(os.environ.get("SESSION_ID", "demo"), ctxd, model=model_name)
        for line in sys.stdin:
            line = line.strip()
            if not line:
                break
            result = await Runner.run(agent, line, session=session)
            # The SDK asks the session to compact after each turn; ctxd does
            # it only when the conversation passed its threshold.
            print(result.final_output, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
