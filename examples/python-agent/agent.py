"""A chat agent whose working memory lives in ctxd, with the OpenAI SDK against
any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, ...).

    pip install ctxd-client openai
    CTXD_ADDRESS=127.0.0.1:50051 OPENAI_BASE_URL=http://127.0.0.1:8000/v1 MODEL=... python agent.py

The transcript survives restarts of the agent; ctxd compacts it when it nears
the model's window, so the loop never trims history itself.
"""

import os

from ctxd_client import Client, CtxdError
from openai import OpenAI

llm = OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "none"))  # honours OPENAI_BASE_URL
model = os.environ.get("MODEL", "gpt-4o-mini")
cid = os.environ.get("CONTEXT_ID", "python-agent")
ctxd = Client()  # CTXD_ADDRESS and CTXD_TOKEN from the environment


def history() -> list[dict]:
    """The slice in OpenAI's shape; converted here when the sidecar cannot."""
    try:
        return list(ctxd.slice(cid, format="openai"))
    except CtxdError:
        role = {"system": "system", "user": "user", "assistant": "assistant", "note": "system"}
        return [
            {"role": role[k], "content": getattr(m, k).text}
            for m in ctxd.slice(cid)
            if (k := m.WhichOneof("kind")) in role
        ]


while line := input("> ").strip():
    ctxd.append_turn(cid, [{"user": {"text": line}}], model=model)
    system = {"role": "system", "content": ctxd.render_prompt(cid).prompt}
    reply = llm.chat.completions.create(model=model, messages=[system, *history()])
    text = reply.choices[0].message.content or ""
    turn = ctxd.append_turn(cid, [{"assistant": {"text": text}}])
    if reply.usage:
        ctxd.record_usage(cid, input_tokens=reply.usage.prompt_tokens, model=model)
    if turn.compaction_due:
        ctxd.compact(cid)  # or plan_compaction/apply_compaction with this model
    print(text)
