// A small ctxd client in Node.js with the ctxd-client package: appends turns
// to a conversation, compacts it with "the runtime's own model" (here a
// canned answer), reads the slice incrementally, and uses agent memory.
//
//   CTXD_ADDRESS=127.0.0.1:50051 [CTXD_TOKEN=...] node client.js
//
// Everything it writes is under its own unique names (memory prefix and
// context id), so it runs on a store that already holds other keys.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Code, CtxdClient } from 'ctxd-client';

const client = new CtxdClient();
const run = `node-demo-${randomUUID().slice(0, 8)}`;
const prefix = `${run}/`;

async function main() {
  const out = {};

  // -- agent memory ------------------------------------------------------------
  const key = `${prefix}profile`;
  const value = '{"name":"Ada","account":12345678901234567890123,"langs":["en","fr"]}';
  const set = await client.memorySet(key, undefined, { valueJson: value, ttlSeconds: 3600 });
  const got = await client.memoryGet(key);
  assert.equal(got.valueJson, value, 'memory value must round-trip byte for byte');
  assert.equal(got.version, set.version);
  const listed = await client.memoryList(prefix);
  assert.deepEqual(listed.map((r) => r.key), [key]);
  await assert.rejects(
    client.memorySet(key, {}, { expectedVersion: 'stale' }),
    (err) => err.code === Code.Aborted,
    'a stale expected_version must be refused',
  );
  out.memory = { version: set.version, listed: listed.length };

  // -- a conversation ------------------------------------------------------------
  const contextId = run;
  let last;
  for (let turn = 0; turn < 10; turn += 1) {
    const callId = `call-${turn}`;
    last = await client.appendTurn(contextId, [
      { user: { text: `Question ${turn}: what is ${turn} squared?` } },
      { assistant: { text: '', tool_calls: [{ id: callId, name: 'square', arguments_json: `{"n":${turn}}` }] } },
      { tool: { call_id: callId, name: 'square', json: `{"result":${turn * turn}}` } },
      { assistant: { text: `${turn} squared is ${turn * turn}.` } },
    ], { idempotencyKey: `turn-${turn}`, model: 'gpt-4o' });
  }
  assert.equal(last.version, 10n);
  out.appended = { version: String(last.version), est_tokens: String(last.estTokens) };

  // A retried turn (same idempotency key) appends nothing.
  const retry = await client.appendTurn(contextId, [{ user: { text: 'duplicate' } }], { idempotencyKey: 'turn-9' });
  assert.equal(retry.replayed, true);
  assert.equal(retry.version, 10n);

  // -- compaction with the runtime's own model ------------------------------------
  const plan = await client.planCompaction(contextId, { keepLast: 4 });
  assert.equal(plan.nothingToDo, false, plan.reason);
  const applied = await client.applyCompaction(contextId, plan.planRef, {
    goals: ['square the numbers 0 to 9'],
    decisions: ['use the square tool'],
    open: [],
    facts: ['0..5 squared are 0, 1, 4, 9, 16, 25'],
  });
  assert.ok(applied.folded > 0n);
  assert.ok(applied.tokensAfter < applied.tokensBefore);
  out.compaction = {
    folded: String(applied.folded),
    tokens_before: String(applied.tokensBefore),
    tokens_after: String(applied.tokensAfter),
  };

  const slice = await client.slice(contextId);
  assert.equal(slice.messages[0].kind.case, 'system', 'the slice starts with the summary block');
  out.slice_messages = slice.messages.length;
  await client.appendTurn(contextId, [{ user: { text: 'one more' } }]);
  const delta = await client.slice(contextId, { sinceVersion: slice.version });
  assert.equal(delta.change, 'append');
  assert.equal(delta.messages.length, 1);

  await client.delete(contextId);
  await client.memoryDelete(key);
  console.log(JSON.stringify({ ok: true, ...out }));
}

main().catch((err) => {
  console.error(JSON.stringify({ ok: false, error: String(err && err.message ? err.message : err), code: err && err.code }));
  process.exitCode = 1;
});
