"""One of every OpenAI Responses API input item, as a session stores them.

Shared by the round-trip tests of the Responses format and of the Agents
SDK session: each item must come back exactly as added (equal as JSON).
"""

from __future__ import annotations

import copy

_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

CORPUS: list[dict] = [
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": [{"type": "input_text", "text": "Prefer metric units."}]},
    {"role": "user", "content": 'héllo — 你好 🚀 "quoted" back\\slash \u0000nul'},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": _PNG, "detail": "low"},
            {"type": "input_file", "file_id": "file-abc123", "filename": "notes.pdf"},
        ],
    },
    {
        "id": "rs_0001",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "The user wants the picture described."}],
        "encrypted_content": "gAAAAABo-opaque-blob-" + "x" * 64,
    },
    {
        "id": "msg_0001",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "A single pixel.", "annotations": [], "logprobs": []}
        ],
    },
    {
        "id": "fc_0001",
        "type": "function_call",
        "call_id": "call_weather_1",
        "name": "get_weather",
        "arguments": '{"city":"Zürich","days":3,"threshold":1.10}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_weather_1", "output": '{"temp_c":21.5}'},
    {
        "id": "fc_0002",
        "type": "function_call",
        "call_id": "call_chart_2",
        "name": "draw_chart",
        "arguments": "{}",
        "status": "completed",
    },
    {
        "type": "function_call_output",
        "call_id": "call_chart_2",
        "output": [
            {"type": "input_text", "text": "chart drawn"},
            {"type": "input_image", "image_url": _PNG, "detail": "auto"},
        ],
    },
    {
        "id": "ws_0001",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "weather Zürich"},
    },
    {
        "id": "fs_0001",
        "type": "file_search_call",
        "status": "completed",
        "queries": ["quarterly report"],
        "results": None,
    },
    {
        "id": "cu_0001",
        "type": "computer_call",
        "call_id": "call_click_3",
        "action": {"type": "click", "button": "left", "x": 10, "y": 20},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_click_3",
        "output": {"type": "computer_screenshot", "image_url": _PNG},
    },
    {"id": "ig_0001", "type": "image_generation_call", "status": "completed", "result": "aGVsbG8="},
    {
        "id": "ci_0001",
        "type": "code_interpreter_call",
        "code": "print(2 ** 100)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "1267650600228229401496703205376"}],
        "status": "completed",
    },
    {
        "id": "lsh_0001",
        "type": "local_shell_call",
        "call_id": "call_shell_4",
        "action": {"type": "exec", "command": ["ls", "-la"], "env": {}},
        "status": "completed",
    },
    {"id": "lsh_0001", "type": "local_shell_call_output", "output": "total 0"},
    {
        "id": "mcpl_0001",
        "type": "mcp_list_tools",
        "server_label": "docs",
        "tools": [{"name": "search", "input_schema": {"type": "object"}, "description": None}],
    },
    {
        "id": "mcpr_0001",
        "type": "mcp_approval_request",
        "server_label": "docs",
        "name": "search",
        "arguments": '{"q":"ctxd"}',
    },
    {
        "id": "mcpa_0001",
        "type": "mcp_approval_response",
        "approval_request_id": "mcpr_0001",
        "approve": True,
    },
    {
        "id": "mcp_0001",
        "type": "mcp_call",
        "server_label": "docs",
        "name": "search",
        "arguments": '{"q":"ctxd"}',
        "output": "3 results",
        "error": None,
    },
    {
        "id": "ctc_0001",
        "type": "custom_tool_call",
        "call_id": "call_custom_5",
        "name": "grammar",
        "input": "SELECT 1",
    },
    {"type": "custom_tool_call_output", "call_id": "call_custom_5", "output": "1"},
    {"id": "cmp_0001", "type": "compaction", "encrypted_content": "gAAAAABo-compacted"},
    {"type": "item_reference", "id": "msg_0001"},
    {
        "role": "assistant",
        "content": "Numbers stay exact: 123456789012345678901234567890 and 1.10",
    },
]


def corpus() -> list[dict]:
    """A fresh copy (tests may not share mutable items)."""
    return copy.deepcopy(CORPUS)
