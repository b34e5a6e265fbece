// A small ctxd client in Node.js: appends turns to a conversation, compacts it
// with "the runtime's own model" (here a canned answer), and uses agent memory.
//
//   CTXD_ADDRESS=127.0.0.1:50051 [CTXD_TOKEN=...] node client.js
//
// It loads the .proto files at run time with @grpc/proto-loader, so nothing is
// generated; field names are the proto's own (keepCase).
'use strict';

const path = require('node:path');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = process.env.CTXD_PROTO_ROOT || path.resolve(__dirname, '../../proto');
const address = process.env.CTXD_ADDRESS || '127.0.0.1:50051';

const definition = protoLoader.loadSync(
  ['ctxd/v1/context.proto', 'ctxd/v1/memory.proto'],
  { includeDirs: [PROTO_ROOT], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true },
);
const ctxd = grpc.loadPackageDefinition(definition).ctxd.v1;
const credentials = grpc.credentials.createInsecure();
const contexts = new ctxd.ContextService(address, credentials);
const memory = new ctxd.MemoryService(address, credentials);

function metadata() {
  const md = new grpc.Metadata();
  if (process.env.CTXD_TOKEN) md.set('authorization', `Bearer ${process.env.CTXD_TOKEN}`);
  return md;
}

// Promisify one unary call with a deadline.
function call(client, method, request) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + 10_000);
    client[method](request, metadata(), { deadline }, (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

async function main() {
  const out = {};

  // -- agent memory ------------------------------------------------------------
  const value = '{"name":"Ada","account":12345678901234567890123,"langs":["en","fr"]}';
  const set = await call(memory, 'Set', { key: 'user/profile', value_json: value, ttl_seconds: 3600 });
  const got = await call(memory, 'Get', { key: 'user/profile' });
  assert.equal(got.record.value_json, value, 'memory value must round-trip byte for byte');
  assert.equal(got.record.version, set.record.version);
  const listed = await call(memory, 'List', { prefix: 'user/' });
  assert.deepEqual(listed.records.map((r) => r.key), ['user/profile']);
  try {
    await call(memory, 'Set', { key: 'user/profile', value_json: '{}', expected_version: 'stale' });
    assert.fail('a stale expected_version must be refused');
  } catch (err) {
    assert.equal(err.code, grpc.status.ABORTED);
  }
  out.memory = { version: set.record.version, listed: listed.records.length };

  // -- a conversation ------------------------------------------------------------
  const contextId = `node-demo-${process.pid}`;
  let last;
  for (let turn = 0; turn < 10; turn += 1) {
    const callId = `call-${turn}`;
    last = await call(contexts, 'AppendTurn', {
      context_id: contextId,
      idempotency_key: `turn-${turn}`,
      model: 'gpt-4o',
      messages: [
        { user: { text: `Question ${turn}: what is ${turn} squared?` } },
        { assistant: { text: '', tool_calls: [{ id: callId, name: 'square', arguments_json: `{"n":${turn}}` }] } },
        { tool: { call_id: callId, name: 'square', json: `{"result":${turn * turn}}` } },
        { assistant: { text: `${turn} squared is ${turn * turn}.` } },
      ],
    });
  }
  assert.equal(last.version, '10');
  out.appended = { version: last.version, est_tokens: last.est_tokens };

  // A retried turn (same idempotency key) appends nothing.
  const retry = await call(contexts, 'AppendTurn', {
    context_id: contextId,
    idempotency_key: 'turn-9',
    messages: [{ user: { text: 'duplicate' } }],
  });
  assert.equal(retry.replayed, true);
  assert.equal(retry.version, '10');

  // -- compaction with the runtime's own model ------------------------------------
  const plan = await call(contexts, 'PlanCompaction', { context_id: contextId, keep_last: 4 });
  assert.equal(plan.nothing_to_do, false, plan.reason);
  const answer = JSON.stringify({
    goals: ['square the numbers 0 to 9'],
    decisions: ['use the square tool'],
    open: [],
    facts: ['0..5 squared are 0, 1, 4, 9, 16, 25'],
  });
  const applied = await call(contexts, 'ApplyCompaction', { context_id: contextId, plan_ref: plan.plan_ref, answer });
  assert.ok(Number(applied.folded) > 0);
  assert.ok(Number(applied.tokens_after) < Number(applied.tokens_before));
  out.compaction = { folded: applied.folded, tokens_before: applied.tokens_before, tokens_after: applied.tokens_after };

  const slice = await call(contexts, 'GetContext', { context_id: contextId, view: 'CONTEXT_VIEW_SLICE' });
  assert.equal(slice.slice[0].kind, 'system', 'the slice starts with the summary block');
  out.slice_messages = slice.slice.length;

  await call(contexts, 'DeleteContext', { context_id: contextId });
  await call(memory, 'Delete', { key: 'user/profile' });
  console.log(JSON.stringify({ ok: true, ...out }));
}

main().catch((err) => {
  console.error(JSON.stringify({ ok: false, error: String(err && err.message ? err.message : err), code: err && err.code }));
  process.exit(1);
}).finally(() => {
  contexts.close();
  memory.close();
});
