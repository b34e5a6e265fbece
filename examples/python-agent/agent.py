"""A chat agent whose working memory lives in ctxd, with the OpenAI SDK against
any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, ...).

    pip install ./clients/python openai
    CTXD_ADDRESS=127.0.0.1:50051 OPENAI_BASE_URL=http://127.0.0.1:8000/v1 MODEL=... python agent.py

The transcript survives restarts of the agent; ctxd compacts it when it nears
the model's window, so the loop never trims history itself. The agent reads
the whole conversation once, then each turn is one call that appends its
messages and brings what it holds up to date (``Client.turn``).
"""

import os

from openai import OpenAI

from ctxd_client import Client, NotFound

llm = OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "none"))  # honours OPENAI_BASE_URL
model = os.environ.get("MODEL", "gpt-4o-mini")
cid = os.environ.get("CONTEXT_ID", "python-agent")
ctxd = Client()  # CTXD_ADDRESS and CTXD_TOKEN from the environment

# What goes to the model, in OpenAI's shape, and the version it reflects
# (a new conversation: nothing yet, version 0). The system prompt comes from
# RenderPrompt and carries the summary and plan, so the slice leaves them out
# (without_summary_blocks): each request holds them once.
try:
    held = ctxd.slice(cid, format="openai", without_summary_blocks=True)
    history, version = list(held), held.version
except NotFound:
    history, version = [], 0


def turn(messages: list[dict]):
    """Append ``messages`` and bring ``history`` up to date, in one round trip."""
    global history, version
    t = ctxd.turn(
        cid,
        messages,
        since_version=version,
        format="openai",
        model=model,
        without_summary_blocks=True,
    )
    # "append": our messages as stored (and anything another writer added);
    # "replace": the conversation was compacted, here is all of it.
    history = [*history, *t.next.messages] if t.next.change == "append" else t.next.messages
    version = t.next.version
    return t.appended


while line := input("> ").strip():
    turn([{"role": "user", "content": line}])
    system = {"role": "system", "content": ctxd.render_prompt(cid).prompt}
    reply = llm.chat.completions.create(model=model, messages=[system, *history])
    text = reply.choices[0].message.content or ""
    appended = turn([{"role": "assistant", "content": text}])
    if reply.usage:
        ctxd.record_usage(cid, input_tokens=reply.usage.prompt_tokens, model=model)
    if appended.compaction_due:
        ctxd.compact(cid)  # or plan_compaction/apply_compaction with this model
    print(text)
