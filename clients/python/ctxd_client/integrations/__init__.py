"""Adapters that put ctxd behind the persistence seams of agent frameworks.

Each module imports its framework, so import it only when you use it:
:mod:`.openai_agents` (``pip install 'ctxd-client[agents]'``),
:mod:`.langgraph` (``pip install 'ctxd-client[langgraph]'``) and
:mod:`.adk` (``pip install 'ctxd-client[adk]'``).
"""
