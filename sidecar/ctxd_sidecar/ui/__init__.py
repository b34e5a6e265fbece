"""``ctxd ui``: a read-only web page over a sidecar's gRPC API.

Conversations, their transcript, what the model is sent, every compaction
and what it folded, the summary and ledger, the token estimate, and memory.
Installed with the ``ui`` extra (Starlette, Uvicorn, Jinja2); the page's
script and styles ship in the package, so it works offline.
"""
