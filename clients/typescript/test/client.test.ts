// Runs against a real sidecar at $CTXD_ADDRESS (tests/test_typescript_client.py starts one).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Code, CtxdClient, CtxdError, CtxdSession, pb, type MessageInput } from "../src/index.js";

const client = new CtxdClient({ address: process.env.CTXD_ADDRESS });
const run = `ts${process.pid}`;

function turn(i: number): MessageInput[] {
  const callId = `call-${i}`;
  return [
    { user: { text: `question ${i}: what is ${i} squared?` } },
    { assistant: { tool_calls: [{ id: callId, name: "sq", arguments_json: `{"n":${i}}` }] } },
    { tool: { call_id: callId, name: "sq", json: `{"r":${i * i}}` } },
    { assistant: { text: `${i} squared is ${i * i}.` } },
  ];
}

// Turns long enough that a compaction saves more than its summary takes (it never grows a context).
function padded(i: number): MessageInput[] {
  return [...turn(i), { assistant: { text: `worked it out step by step ${"lorem ipsum ".repeat(30)}` } }];
}

test("turns, whole slices and incremental slices", async () => {
  const cid = `${run}-slice`;
  let last;
  for (let i = 0; i < 5; i += 1) last = await client.appendTurn(cid, turn(i), { idempotencyKey: `t${i}` });
  assert.equal(last?.version, 5n);
  const again = await client.appendTurn(cid, turn(4), { idempotencyKey: "t4" });
  assert.equal(again.replayed, true);
  const whole = await client.slice(cid, { pageSize: 3 });
  assert.equal(whole.messages.length, 20);
  assert.equal(whole.version, 5n);
  assert.equal(whole.messages[0].kind.case, "user");
  const none = await client.slice(cid, { sinceVersion: 5 });
  assert.equal(none.change, "none");
  await client.appendTurn(cid, [{ user: { text: "more" } }], { expectedVersion: 5 });
  const delta = await client.slice(cid, { sinceVersion: 5 });
  assert.equal(delta.change, "append");
  assert.deepEqual(delta.messages.map((m) => (m.kind.case === "user" ? m.kind.value.text : "")), ["more"]);
  const record = await client.get(cid, { pageSize: 4 });
  assert.equal(record.messages.length, 21);
  assert.equal((await client.info(cid)).messageCount, 21n);
  const ids = (await client.listContexts({ kind: pb.ContextKind.CONVERSATION, pageSize: 1 })).map((c) => c.id);
  assert.ok(ids.includes(cid));
  assert.equal(await client.delete(cid), true);
});

test("a whole turn in one call: append, then what changed in the slice", async () => {
  const cid = `${run}-turn`;
  await client.appendTurn(cid, padded(0));
  const held = await client.slice(cid);
  const t = await client.turn(cid, padded(1), { sinceVersion: held.version });
  assert.equal(t.next.change, "append");
  assert.deepEqual(t.next.messages.map((m) => m.id), t.appended.messageIds);
  assert.equal(t.next.version, t.appended.version);
  const now = await client.slice(cid);
  assert.deepEqual([...held.messages, ...t.next.messages].map((m) => m.id), now.messages.map((m) => m.id));
  assert.ok((await client.compact(cid, { keepLast: 2 })).compacted);
  const replaced = await client.turn(cid, turn(2), { sinceVersion: t.appended.version, pageSize: 2 });
  assert.equal(replaced.next.change, "replace");
  assert.equal(replaced.next.messages[0].id, "summary");
  assert.deepEqual(replaced.next.messages.map((m) => m.id), (await client.slice(cid)).messages.map((m) => m.id));
  // The same replacement read on its own, over several pages.
  const again = await client.slice(cid, { sinceVersion: held.version, pageSize: 2 });
  assert.equal(again.change, "replace");
  assert.deepEqual(again.messages.map((m) => m.id), (await client.slice(cid)).messages.map((m) => m.id));
  await client.delete(cid);
});

test("a conversation deleted and created again is replaced, not appended to", async () => {
  const cid = `${run}-again`;
  const text = (m: pb.Message) => (m.kind.case === "user" ? m.kind.value.text : "");
  for (const t of ["old 1", "old 2"]) await client.appendTurn(cid, [{ user: { text: t } }]);
  const held = await client.slice(cid);
  assert.ok(held.incarnation);
  await client.delete(cid);
  for (const t of ["a", "b", "c"]) await client.appendTurn(cid, [{ user: { text: t } }]);
  const since = { sinceVersion: held.version, sinceIncarnation: held.incarnation };
  const delta = await client.slice(cid, { ...since, pageSize: 2 });
  assert.equal(delta.change, "replace");
  assert.deepEqual(delta.messages.map(text), ["a", "b", "c"]);
  const t = await client.turn(cid, [{ user: { text: "d" } }], since);
  assert.equal(t.next.change, "replace");
  assert.deepEqual(t.next.messages.map(text), ["a", "b", "c", "d"]);
  assert.equal(t.appended.incarnation, t.next.incarnation);
  const next = await client.turn(cid, [{ user: { text: "e" } }], {
    sinceVersion: t.next.version,
    sinceIncarnation: t.next.incarnation,
  });
  assert.equal(next.next.change, "append");
  assert.deepEqual(next.next.messages.map(text), ["e"]);
});

test("compaction by the runtime's own model, then expanded", async () => {
  const cid = `${run}-cmp`;
  for (let i = 0; i < 8; i += 1) await client.appendTurn(cid, turn(i));
  const plan = await client.planCompaction(cid, { keepLast: 4 });
  assert.equal(plan.nothingToDo, false);
  const applied = await client.applyCompaction(cid, plan.planRef, { goals: ["squares"], decisions: [], open: [], facts: [] });
  assert.ok(applied.folded > 0n);
  const expanded = await client.expandCompaction(cid, applied.compaction?.id ?? "", { pageSize: 5 });
  assert.equal(BigInt(expanded.messages.length), applied.folded);
  const slice = await client.slice(cid);
  assert.equal(slice.messages[0].id, "summary");
  await client.delete(cid);
});

test("the summary and plan once per request: RenderPrompt's prompt and the slice without them", async () => {
  const cid = `${run}-once`;
  for (let i = 0; i < 8; i += 1) await client.appendTurn(cid, padded(i));
  const plan = await client.planCompaction(cid, { keepLast: 4 });
  await client.applyCompaction(cid, plan.planRef, { goals: ["squares-goal"], decisions: [], open: [], facts: [] });
  const prompt = (await client.renderPrompt(cid)).prompt;
  assert.ok(prompt.includes("squares-goal"));
  const held = await client.slice(cid, { withoutSummaryBlocks: true });
  assert.ok(held.messages.every((m) => m.id !== "summary"));
  const since = { sinceVersion: held.version, sinceIncarnation: held.incarnation };
  const t = await client.turn(cid, turn(9), { ...since, withoutSummaryBlocks: true });
  const text = JSON.stringify([...held.messages, ...t.next.messages], (_k, v) => (typeof v === "bigint" ? `${v}` : v));
  assert.equal(t.next.change, "append");
  assert.ok(!text.includes("squares-goal"));
  const json = await client.providerSlice(cid, "anthropic", { withoutSummaryBlocks: true, cacheBreakpoint: true });
  assert.ok(!JSON.stringify([json.messages, json.system ?? []]).includes("squares-goal"));
  await client.delete(cid);
});

test("plan, preflight, prompt and usage", async () => {
  const cid = `${run}-plan`;
  await client.appendTurn(cid, [{ user: { text: "plan it" } }]);
  const created = await client.updatePlan(cid, {
    case: "create",
    value: { goal: "ship", items: [{ id: "a", title: "build" }] },
  });
  assert.equal(created.plan?.items[0].title, "build");
  await client.updatePlan(cid, { case: "update", value: { itemId: "a", bind: { kind: pb.BindingKind.RUN, id: "r1" } } });
  const ran = await client.reportRun(cid, { kind: pb.BindingKind.RUN, id: "r1" }, pb.RunOutcome.SUCCEEDED);
  assert.equal(ran.itemId, "a");
  assert.ok((await client.setPreflight(cid, { ok: true })) > ran.version);
  assert.ok((await client.renderPrompt(cid)).prefixHash);
  assert.ok((await client.recordUsage(cid, { inputTokens: 400 })).estTokens > 0n);
  assert.deepEqual(await client.listSkills(), []);
  await client.delete(cid);
});

test("a turn passes the provider's usage through: the cache figures move", async () => {
  const cid = `${run}-cache`;
  // The first turn creates the context: its usage has nothing to be measured against.
  let held = await client.turn(cid, [{ user: { text: "hello" } }], {
    sinceVersion: 0n,
    usage: { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } },
  });
  // OpenAI's shape: 3000 prompt tokens, 2048 of them cached.
  held = await client.turn(cid, [{ assistant: { text: "hi" } }, { user: { text: "more" } }], {
    sinceVersion: held.next.version,
    usage: { prompt_tokens: 3000, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 2048 } },
  });
  // Anthropic's shape: input_tokens leaves the cache out.
  await client.turn(cid, [{ assistant: { text: "ok" } }], {
    sinceVersion: held.next.version,
    usage: { input_tokens: 100, output_tokens: 5, cache_read_input_tokens: 1000, cache_creation_input_tokens: 400 },
  });
  const u = (await client.get(cid)).cacheUsage;
  assert.equal(u?.reports, 2n);
  assert.equal(u?.inputTokens, 4500n);
  assert.equal(u?.cachedInputTokens, 3048n);
  assert.equal(u?.cacheWriteTokens, 400n);
  await assert.rejects(
    client.recordUsage(cid, { inputTokens: 10, cachedInputTokens: 11 }),
    (err: CtxdError) => err.code === Code.InvalidArgument && err.message.includes("cached_input_tokens"),
  );
  await client.delete(cid);
});

test("memory verbs follow pages and keep values byte for byte", async () => {
  const prefix = `${run}/`;
  for (let i = 0; i < 5; i += 1) await client.memorySet(`${prefix}k${i}`, { i });
  const raw = await client.memorySet(`${prefix}raw`, undefined, { valueJson: '{"n":12345678901234567890123}' });
  assert.equal((await client.memoryGet(`${prefix}raw`)).valueJson, '{"n":12345678901234567890123}');
  const listed = await client.memoryList(prefix, { includeValues: true, limit: 2 });
  assert.deepEqual(listed.map((r) => r.key), [0, 1, 2, 3, 4].map((i) => `${prefix}k${i}`).concat(`${prefix}raw`));
  await assert.rejects(client.memorySet(`${prefix}raw`, 1, { expectedVersion: "stale" }), (err: CtxdError) => err.code === Code.Aborted);
  assert.equal(await client.memoryDelete(`${prefix}raw`, { expectedVersion: raw.version }), true);
  await assert.rejects(client.memoryGet(`${prefix}raw`), (err: CtxdError) => err.code === Code.NotFound);
  for (const r of listed) await client.memoryDelete(r.key);
});

test("memory search ranks records by their vectors", async () => {
  const prefix = `${run}-search/`;
  await client.memorySet(`${prefix}a`, { kind: "fruit" }, { vectors: { text: [1, 0, 0] } });
  await client.memorySet(`${prefix}b`, { kind: "veg" }, { vectors: { text: [0.8, 0.2, 0] } });
  await client.memorySet(`${prefix}c`, { kind: "fruit" }, { vectors: { text: [0, 1, 0] } });
  const hits = await client.memorySearch(prefix, [1, 0, 0], { includeValues: true });
  assert.deepEqual(hits.map((h) => h.record?.key), ["a", "b", "c"].map((k) => `${prefix}${k}`));
  assert.ok(hits[0].score > hits[1].score && hits[0].field === "text");
  const fruit = await client.memorySearch(prefix, [1, 0, 0], { filter: { kind: "fruit" }, limit: 1, offset: 1 });
  assert.deepEqual(fruit.map((h) => h.record?.key), [`${prefix}c`]);
  await assert.rejects(client.memorySearch(prefix, [1, 0]), (err: CtxdError) => err.code === Code.InvalidArgument && /2 dimensions/.test(err.message));
  for (const k of ["a", "b", "c"]) await client.memoryDelete(`${prefix}${k}`);
});

test("errors carry the field the sidecar names", async () => {
  await assert.rejects(
    client.appendTurn(`${run}-bad`, [{ assistant: { tool_calls: [{ id: "x", name: "f", arguments_json: "{" }] } }]),
    (err: unknown) => {
      assert.ok(err instanceof CtxdError);
      assert.equal(err.code, Code.InvalidArgument);
      assert.ok(err.fieldViolations.some((v) => v.field.includes("arguments_json")), JSON.stringify(err.fieldViolations));
      return true;
    },
  );
  await assert.rejects(client.delete("root"), (err: CtxdError) => err.code === Code.FailedPrecondition);
});

test("watch streams events until aborted", async () => {
  const cid = `${run}-watch`;
  await client.appendTurn(cid, [{ user: { text: "first" } }]);
  const abort = new AbortController();
  const seen: pb.ContextEventKind[] = [];
  const reading = (async () => {
    for await (const event of client.watch(cid, { signal: abort.signal })) {
      seen.push(event.kind);
      if (seen.length === 2) abort.abort();
    }
  })();
  await new Promise((resolve) => setTimeout(resolve, 300));
  await client.appendTurn(cid, [{ user: { text: "second" } }]);
  await client.setPreflight(cid, { ok: 1 });
  await reading;
  assert.deepEqual(seen, [pb.ContextEventKind.TURN, pb.ContextEventKind.PREFLIGHT]);
  await client.delete(cid);
});

test("provider formats are refused clearly by an API without them", async (t) => {
  if (pb.AppendTurnRequestSchema.fields.some((f) => f.name === "messages_json")) {
    t.skip("this API has provider formats");
    return;
  }
  await assert.rejects(client.providerSlice(`${run}-fmt`, "openai"), /no provider formats/);
  await assert.rejects(
    client.appendProviderTurn(`${run}-fmt`, "openai", [{ role: "user", content: "hi" }]),
    /no provider formats/,
  );
});

test("provider formats pass OpenAI and Anthropic JSON through", async (t) => {
  if (!pb.AppendTurnRequestSchema.fields.some((f) => f.name === "messages_json")) {
    t.skip("this API has no provider formats");
    return;
  }
  const cid = `${run}-oa`;
  const sent = [
    { role: "user", content: "hi" },
    { role: "assistant", content: "hello" },
  ];
  await client.appendProviderTurn(cid, "openai", sent);
  const got = await client.providerSlice(cid, "openai", { pageSize: 1 });
  assert.deepEqual(got.messages, sent);
  const an = `${run}-an`;
  await client.appendProviderTurn(an, "anthropic", [{ role: "user", content: "hi" }], { system: "be brief" });
  const whole = await client.providerSlice(an, "anthropic");
  assert.ok((whole.system as { text?: string }[]).some((b) => b.text === "be brief"));
  await client.delete(cid);
  await client.delete(an);
});

test("Responses items exactly, tail reads, truncate, empty contexts and prefix listing", async () => {
  const cid = `${run}-resp`;
  const items = [
    { role: "user", content: "hi 🚀" },
    { id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "think" }], encrypted_content: "gAAA" },
    { id: "fc_1", type: "function_call", call_id: "c1", name: "f", arguments: '{"x":1}' },
    { type: "function_call_output", call_id: "c1", output: "done" },
    { id: "mcp_1", type: "mcp_call", server_label: "s", name: "n", arguments: "{}", output: "o" },
  ];
  await client.appendProviderTurn(cid, "openai_responses", items);
  const back = await client.providerSlice(cid, "openai_responses");
  assert.deepEqual(back.messages, items);
  // A tail never opens inside a tool round: the last 2 items reach back to the call and its reasoning.
  assert.deepEqual((await client.providerSlice(cid, "openai_responses", { lastN: 2 })).messages, items.slice(1));
  assert.equal((await client.get(cid, { lastN: 1 })).messages.length, 1);
  const popped = await client.truncate(cid, { count: 1, expectedVersion: back.version, format: "openai_responses" });
  assert.deepEqual(popped.removedJson, items.slice(4));
  await assert.rejects(
    client.truncate(cid, { count: 1, expectedVersion: back.version }),
    (e: CtxdError) => e.code === Code.Aborted,
  );
  await assert.rejects(client.truncate(cid, {}), (e: CtxdError) => e.code === Code.InvalidArgument);
  const made = await client.createContext(`${run}-empty:a`);
  assert.equal(made.created, true);
  assert.equal((await client.createContext(`${run}-empty:a`)).created, false);
  await client.createContext(`${run}-empty:b`);
  const listed = (await client.listContexts({ idPrefix: `${run}-empty:` })).map((c) => c.id);
  assert.deepEqual(listed, [`${run}-empty:a`, `${run}-empty:b`]);
});

test("CtxdSession: the Agents JS SDK session interface over ctxd", async () => {
  const session = new CtxdSession(`${run}-agents`, client);
  assert.equal(await session.getSessionId(), `${run}-agents`);
  assert.deepEqual(await session.getItems(), []);
  assert.equal(await session.popItem(), undefined);
  await session.addItems([]);
  const items = [
    { role: "user", content: "Hello" },
    { id: "rs_9", type: "reasoning", summary: [], encrypted_content: "gAAA" },
    { role: "assistant", content: "Hi there!" },
  ];
  await session.addItems(items.slice(0, 2));
  await session.addItems(items.slice(2));
  assert.deepEqual(await session.getItems(), items);
  assert.deepEqual(await session.getItems(2), items.slice(1));
  assert.deepEqual(await session.getItems(0), []);
  assert.deepEqual(await session.popItem(), items[2]);
  // The reasoning item went with the message it came with.
  assert.deepEqual(await session.getItems(), items.slice(0, 1));
  await Promise.all([0, 1, 2, 3].map((k) => session.addItems([0, 1, 2].map((i) => ({ role: "user", content: `b${k}-${i}` })))));
  const got = (await session.getItems()).slice(1).map((i: { content: string }) => i.content);
  for (let j = 0; j < 12; j += 3) {
    const k = got[j].split("-")[0];
    assert.deepEqual(got.slice(j, j + 3), [0, 1, 2].map((i) => `${k}-${i}`));
  }
  const summarised = new CtxdSession(`${run}-agents`, client, {
    keepLast: 2,
    summarise: async () => JSON.stringify({ facts: ["the user said hello"] }),
  });
  await summarised.runCompaction({ force: true });
  const after = await summarised.getItems();
  assert.equal(after[0].role, "system");
  assert.ok(String(after[0].content).includes("the user said hello"));
  assert.equal(after.length, 3);
  await session.clearSession();
  assert.deepEqual(await session.getItems(), []);
});

test("CtxdSession.fork: at an item between batches, inside one, all of them; apart afterwards", async () => {
  const session = new CtxdSession(`${run}-fsrc`, client);
  const items = [1, 2, 3, 4, 5].map((i) => ({ role: i % 2 ? "user" : "assistant", content: `item ${i}` }));
  await session.addItems(items.slice(0, 2));
  await session.addItems(items.slice(2));
  const between = await session.fork(`${run}-f1`, { atItem: 2 });
  assert.deepEqual(await between.getItems(), items.slice(0, 2));
  assert.equal((await client.info(between.sessionId)).forkedAtVersion, 1n);
  const inside = await session.fork(`${run}-f2`, { atItem: -1 });
  assert.deepEqual(await inside.getItems(), items.slice(0, 4));
  assert.equal((await client.info(inside.sessionId)).forkedFrom, session.sessionId);
  const whole = await session.fork(`${run}-f3`);
  assert.deepEqual(await whole.getItems(), items);
  await between.addItems([{ role: "user", content: "only in the fork" }]);
  assert.deepEqual(await session.getItems(), items);
  assert.equal((await between.getItems()).length, 3);
  await assert.rejects(session.fork(`${run}-f1`, { atItem: 1 }), (e: CtxdError) => e.code === Code.AlreadyExists);
});

test("6,000 calls at once through one client all complete (at most maxInFlight on the wire)", async () => {
  const p = `${run}-many/`;
  const calls = Array.from({ length: 6000 }, (_, i) =>
    i % 2 ? client.memorySet(`${p}k${i}`, JSON.stringify({ i })) : client.memoryGet(`${p}k${i - 1}`).catch((e) => (e instanceof CtxdError && e.code === Code.NotFound ? null : Promise.reject(e))),
  );
  const failed = (await Promise.allSettled(calls)).filter((r) => r.status === "rejected");
  assert.equal(failed.length, 0, `${failed.length} failed, e.g. ${failed.map((r) => String((r as PromiseRejectedResult).reason))[0]}`);
  assert.equal((await client.memoryList(p)).length, 3000);
  await Promise.all(Array.from({ length: 3000 }, (_, i) => client.memoryDelete(`${p}k${2 * i + 1}`)));
  assert.throws(() => new CtxdClient({ maxInFlight: 0 }), /maxInFlight is 0/);
});

test("history: reads at a version, the versions kept (every page) and forks retried under one key", async () => {
  const cid = `${run}-hist`;
  for (let i = 0; i < 4; i += 1) await client.appendTurn(cid, turn(i));
  const kept = await client.versions(cid, { pageSize: 2 });
  assert.deepEqual(kept.map((v) => v.version), [4n, 3n, 2n, 1n]);
  assert.equal(kept[3].kind, "turn");
  assert.equal(kept[0].messageCount, 16n);
  const then = await client.slice(cid, { atVersion: 2, pageSize: 3 });
  assert.equal(then.version, 2n);
  assert.equal(then.messages.length, 8);
  assert.equal((await client.get(cid, { atVersion: 1n, pageSize: 2 })).messages.length, 4);
  const openai = await client.providerSlice(cid, "openai", { atVersion: 1 });
  assert.equal(openai.messages.length, 4);

  const info = await client.fork(cid, `${cid}-f`, { atVersion: 2, idempotencyKey: "fk" });
  assert.equal(info.forkedFrom, cid);
  assert.equal(info.forkedAtVersion, 2n);
  const again = await client.fork(cid, `${cid}-f`, { atVersion: 2, idempotencyKey: "fk" });
  assert.equal(again.version, info.version);
  await assert.rejects(client.fork(cid, `${cid}-f`, { atVersion: 2, idempotencyKey: "other" }), CtxdError);
  await client.appendTurn(`${cid}-f`, [{ user: { text: "only in the fork" } }]);
  assert.equal((await client.slice(`${cid}-f`)).messages.length, 9);
  assert.equal((await client.slice(cid)).messages.length, 16);
  const latest = await client.fork(cid, `${cid}-g`);
  assert.equal(latest.forkedAtVersion, 4n);
  assert.deepEqual((await client.versions(`${cid}-f`)).map((v) => v.kind), ["turn", "fork"]);
  const late = await client.slice(cid, { atVersion: 9 }).catch((e: CtxdError) => e);
  assert.ok(late instanceof CtxdError && late.code === Code.OutOfRange, String(late));
});
