// The OpenAI Agents JS SDK's own Runner over CtxdSession, against a real sidecar at $CTXD_ADDRESS
// and a scripted OpenAI-compatible server on loopback (real HTTP, both the Chat Completions and
// the Responses API): text turns, a function tool call and its result, the next turn seeing both.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from "@openai/agents";
import { CtxdClient, CtxdSession } from "../src/index.js";
import { fromResponsesItem, MARK, toResponsesItem } from "../src/integrations/agentsItems.js";

setTracingDisabled(true);
const client = new CtxdClient({ address: process.env.CTXD_ADDRESS });
const run = `agents${process.pid}`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const seen: { path: string; body: Json }[] = [];
let served = 0;

/** The model's script: a square asked for → a tool call; a tool result → its answer; else echo. */
function script(transcript: { role: string; text: string }[]): { call?: string; text?: string } {
  const last = transcript[transcript.length - 1];
  if (last.role === "tool") return { text: `The square is ${JSON.parse(last.text).square}.` };
  const asked = /square of (\d+)/.exec(last.text);
  if (asked) return { call: JSON.stringify({ n: Number(asked[1]) }) };
  return { text: `I have seen ${transcript.map((m) => `${m.role}:${m.text}`).join(" | ")}` };
}

function chatTranscript(body: Json): { role: string; text: string }[] {
  return body.messages
    .filter((m: Json) => m.role !== "system")
    .map((m: Json) => ({
      role: m.role,
      text: m.tool_calls ? `call ${m.tool_calls[0].function.name}` : typeof m.content === "string" ? m.content : m.content.map((p: Json) => p.text).join(""),
    }));
}

function responsesTranscript(body: Json): { role: string; text: string }[] {
  return body.input.map((i: Json) => {
    if (i.type === "function_call") return { role: "assistant", text: `call ${i.name}` };
    if (i.type === "function_call_output") return { role: "tool", text: i.output };
    const text = typeof i.content === "string" ? i.content : i.content.map((p: Json) => p.text).join("");
    return { role: i.role, text };
  });
}

function chatAnswer(body: Json): Json {
  const next = script(chatTranscript(body));
  const id = `call_${++served}`;
  const message = next.call
    ? { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "square", arguments: next.call } }] }
    : { role: "assistant", content: next.text };
  return {
    id: `chatcmpl-${served}`, object: "chat.completion", created: 0, model: body.model,
    choices: [{ index: 0, message, finish_reason: next.call ? "tool_calls" : "stop" }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
  };
}

function responsesAnswer(body: Json): Json {
  const next = script(responsesTranscript(body));
  const n = ++served;
  const output = next.call
    ? [{ type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: "square", arguments: next.call, status: "completed" }]
    : [{ type: "message", id: `msg_${n}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: next.text, annotations: [] }] }];
  return {
    id: `resp_${n}`, object: "response", created_at: 0, status: "completed", model: body.model, output,
    usage: { input_tokens: 10, output_tokens: 5, total_tokens: 15, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
  };
}

const server = createServer((req: IncomingMessage, res: ServerResponse) => {
  let raw = "";
  req.on("data", (chunk) => (raw += chunk));
  req.on("end", () => {
    const body = JSON.parse(raw || "{}");
    seen.push({ path: req.url ?? "", body });
    const answer = req.url?.endsWith("/chat/completions") ? chatAnswer(body) : req.url?.endsWith("/responses") ? responsesAnswer(body) : null;
    res.writeHead(answer ? 200 : 404, { "content-type": "application/json" });
    res.end(JSON.stringify(answer ?? { error: { message: `no route ${req.url}` } }));
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
after(() => server.close());

const square = tool({
  name: "square",
  description: "The square of n.",
  parameters: { type: "object", properties: { n: { type: "number" } }, required: ["n"], additionalProperties: false },
  strict: true,
  execute: async (input: Json) => JSON.stringify({ square: input.n * input.n }),
});

for (const useResponses of [false, true]) {
  const api = useResponses ? "Responses" : "Chat Completions";
  test(`the JS SDK's Runner with a tool over CtxdSession (${api} API)`, async () => {
    const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: "test", baseURL, useResponses }) });
    const agent = new Agent({ name: "calc", instructions: "Use the tool.", model: "scripted", tools: [square] });
    const session = new CtxdSession(`${run}-${useResponses ? "responses" : "chat"}`, client);

    const first = await runner.run(agent, "Hello, I am Ada.", { session });
    assert.match(String(first.finalOutput), /user:Hello, I am Ada\./);
    const second = await runner.run(agent, "What is the square of 7?", { session });
    assert.equal(second.finalOutput, "The square is 49.");

    // The items come back deep-equal to what the SDK added, in its own shape.
    const items = await session.getItems();
    const kinds = items.map((i: Json) => i.type ?? "message");
    assert.deepEqual(kinds.slice(-4), ["message", "function_call", "function_call_result", "message"]);
    const call = items.find((i: Json) => i.type === "function_call");
    const result = items.find((i: Json) => i.type === "function_call_result");
    assert.equal(typeof call.callId, "string");
    assert.equal(result.callId, call.callId);
    assert.equal(result.name, "square");
    const added = [...first.history, ...second.history.slice(first.history.length)];
    assert.deepEqual(items.length, added.length);

    // A fork after the first turn goes on without the second one; the session is untouched.
    const branch = await session.fork(`${session.sessionId}-fork`, { atItem: first.history.length });
    assert.deepEqual(await branch.getItems(), items.slice(0, first.history.length));
    const other = await runner.run(agent, "And now?", { session: branch });
    assert.match(String(other.finalOutput), /user:Hello, I am Ada\..*user:And now\?/);
    assert.doesNotMatch(String(other.finalOutput), /square of 7/);
    assert.deepEqual(await session.getItems(), items);
    await branch.clearSession();

    // ctxd reads the call and its result as a tool call: its Chat Completions read pairs them.
    const chat = await client.providerSlice(session.sessionId, "openai");
    const asCall = (chat.messages as Json[]).find((m) => m.tool_calls);
    assert.equal(asCall.tool_calls[0].id, call.callId);
    const asResult = (chat.messages as Json[]).find((m) => m.role === "tool");
    assert.equal(asResult.tool_call_id, call.callId);
    assert.match(asResult.content, /"square":49/);

    // The next turn sees the earlier turns, the call and its result.
    const before = seen.length;
    const third = await runner.run(agent, "And now?", { session });
    assert.match(String(third.finalOutput), /user:Hello, I am Ada\..*call square \| tool:.*49.*assistant:The square is 49\..*user:And now\?/);
    assert.equal(seen.length, before + 1);

    // popItem after a tool turn returns the SDK's item; the one before it is the tool result.
    const popped: Json = await session.popItem();
    assert.equal(popped.role, "assistant");
    const rest = await session.getItems(3);
    assert.deepEqual(rest.map((i: Json) => i.type ?? "message"), ["function_call_result", "message", "message"]);
    assert.deepEqual(rest[0], result);
    await session.clearSession();
  });
}

test("SDK items round-trip exactly; Responses items pass through; another writer's results read", async () => {
  const items: Json[] = [
    { type: "message", role: "user", content: [{ type: "input_text", text: "hi", providerData: { x: 1 } }] },
    { type: "function_call", callId: "c1", name: "square", arguments: '{"n":2}', status: "completed", id: "fc_1", providerData: { lane: "a" } },
    { type: "function_call_result", callId: "c1", name: "square", status: "completed", output: { type: "text", text: '{"square":4}' }, providerData: { k: [1] } },
    { type: "function_call", callId: "c2", name: "square", arguments: '{"n":2}' },
    { type: "function_call_result", callId: "c2", name: "square", status: "completed", output: [{ type: "input_text", text: "four" }] },
    { type: "function_call", callId: "c3", name: "square", arguments: '{"n":2}' },
    { type: "function_call_result", callId: "c3", name: "square", status: "completed", output: "4" },
    { role: "assistant", status: "completed", content: [{ type: "output_text", text: "It is 4." }] },
    { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "gAAA" },
  ];
  for (const item of items) assert.deepEqual(fromResponsesItem(toResponsesItem(item)), item);
  assert.equal((toResponsesItem(items[2]) as Json).output, '{"square":4}');
  assert.equal((toResponsesItem(items[4]) as Json).output, "four");
  assert.equal((toResponsesItem(items[1]) as Json).call_id, "c1");

  const session = new CtxdSession(`${run}-exact`, client);
  await session.addItems(items.slice(0, 3));
  await session.addItems(items.slice(3));
  assert.deepEqual(await session.getItems(), items);
  assert.deepEqual(await session.getItems(2), items.slice(-2));
  const stored = (await client.providerSlice(session.sessionId, "openai_responses")).messages as Json[];
  assert.equal(stored[2].type, "function_call_output");
  assert.ok(stored[2][MARK]);

  // A Responses function_call_output written by another client is read as the SDK reads one.
  const other = `${run}-other`;
  await client.appendProviderTurn(other, "openai_responses", [
    { role: "user", content: "sq 3" },
    { type: "function_call", call_id: "c9", name: "square", arguments: '{"n":3}' },
    { type: "function_call_output", call_id: "c9", output: "9" },
  ]);
  const read = await new CtxdSession(other, client).getItems();
  assert.deepEqual(read.slice(1), [
    { type: "function_call", callId: "c9", name: "square", arguments: '{"n":3}' },
    { type: "function_call_result", callId: "c9", name: "c9", status: "completed", output: { type: "text", text: "9" } },
  ]);
  await session.clearSession();
  await client.delete(other);
});

// The JS SDK's own MemorySession cases (packages/agents-core/test/memorySession.test.ts), as far
// as they use the public Session interface, run against CtxdSession: ordering, `getItems(limit)`,
// `popItem`, `clearSession`, and stored items that callers' later mutations do not reach.
const userMessage = (text: string): Json => ({ role: "user", content: [{ type: "input_text", text }] });

test("the SDK's MemorySession cases hold for CtxdSession: order, limit, pop, clear", async () => {
  const session = new CtxdSession(`${run}-memcases`, client);
  const initial = [userMessage("hello")];
  await session.addItems(initial);
  assert.equal(await session.getSessionId(), `${run}-memcases`);
  assert.deepEqual(await session.getItems(), initial);
  const more = [userMessage("one"), userMessage("two")];
  await session.addItems(more);
  assert.deepEqual(await session.getItems(), [...initial, ...more]);
  assert.deepEqual(await session.getItems(2), more);
  assert.deepEqual(await session.popItem(), more[1]);
  assert.deepEqual(await session.getItems(), [...initial, more[0]]);
  await session.clearSession();
  assert.deepEqual(await session.getItems(), []);
  assert.deepEqual(await session.getItems(3), []);
  assert.equal(await session.popItem(), undefined);
});

test("the SDK's MemorySession cases hold for CtxdSession: callers' mutations never persist", async () => {
  const session = new CtxdSession(`${run}-clones`, client);
  await session.addItems([userMessage("start")]);
  const items = await session.getItems();
  items[0].content = "mutated";
  assert.deepEqual(await session.getItems(), [userMessage("start")]);
  const next = userMessage("next");
  await session.addItems([next]);
  next.content = "mutated";
  assert.deepEqual(await session.getItems(), [userMessage("start"), userMessage("next")]);
  const popped = await session.popItem();
  assert.deepEqual(popped, userMessage("next"));
  popped.content = "mutated";
  assert.deepEqual(await session.getItems(), [userMessage("start")]);
  await session.clearSession();
});

test("popItem after a tool round returns the SDK's own result item, then its call", async () => {
  const session = new CtxdSession(`${run}-poptool`, client);
  const call: Json = { type: "function_call", callId: "c7", name: "square", arguments: '{"n":7}', status: "completed" };
  const result: Json = { type: "function_call_result", callId: "c7", name: "square", status: "completed", output: { type: "text", text: "49" } };
  await session.addItems([userMessage("square of 7"), call, result]);
  assert.deepEqual(await session.popItem(), result);
  assert.deepEqual(await session.popItem(), call);
  assert.deepEqual(await session.getItems(), [userMessage("square of 7")]);
  await session.clearSession();
});
