// The OpenAI Agents JS SDK's items (its own protocol: camelCase `callId`, `providerData`,
// `function_call_result` with an `output` object) to and from ctxd's Responses format, so that
// ctxd understands tool calls and their results (compaction, the other formats) and the SDK gets
// every item back deep-equal to what it added.
//
// Only the two kinds whose shape differs from a Responses item are converted:
//
// * `function_call`: `callId` becomes `call_id`; everything else stays as it is.
// * `function_call_result`: becomes a `function_call_output` with `call_id` and the output as
//   text (a `{type: "text"}` output's text, a list of parts' texts), which is what ctxd's
//   compaction and other formats read.
//
// Each converted item carries `ctxd_agents_js` (the fields a Responses item has no place for:
// the SDK's `output` object), by which it is converted back exactly. Messages, reasoning and
// every other kind pass through unchanged: ctxd reads their text as they are. Responses items
// that another writer stored (a `function_call` or `function_call_output` without the mark) are
// read as the SDK's own converter reads them from the Responses API.

/** The mark a converted item carries; its value holds what the Responses shape cannot. */
export const MARK = "ctxd_agents_js";

type Obj = Record<string, unknown>;

function isObj(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function partText(part: unknown): string {
  if (typeof part === "string") return part;
  if (!isObj(part)) return "";
  if (typeof part.text === "string") return part.text;
  if (typeof part.refusal === "string") return part.refusal;
  return typeof part.type === "string" ? `[${part.type}]` : "";
}

/** A tool result's output as the text ctxd reads: compaction summarises it, other formats show it. */
export function outputText(output: unknown): string {
  if (typeof output === "string") return output;
  if (Array.isArray(output)) return output.map(partText).filter((t) => t).join("\n");
  if (isObj(output) && (output.type === "text" || output.type === "input_text")) return partText(output);
  return JSON.stringify(output ?? "");
}

/** One SDK item as the Responses item ctxd stores. */
export function toResponsesItem(item: unknown): unknown {
  if (!isObj(item)) return item;
  if (item.type === "function_call" && typeof item.callId === "string") {
    const { callId, ...rest } = item;
    return { ...rest, call_id: callId, [MARK]: {} };
  }
  if (item.type === "function_call_result" && typeof item.callId === "string") {
    const { callId, output, type: _type, ...rest } = item;
    return { ...rest, type: "function_call_output", call_id: callId, output: outputText(output), [MARK]: { output } };
  }
  return item;
}

/** One stored Responses item back in the SDK's shape. */
export function fromResponsesItem(item: unknown): unknown {
  if (!isObj(item)) return item;
  const mark = item[MARK];
  if (item.type === "function_call" && typeof item.call_id === "string") {
    const { call_id, [MARK]: _mark, ...rest } = item;
    return { ...rest, callId: call_id };
  }
  if (item.type !== "function_call_output" || typeof item.call_id !== "string") return item;
  const { call_id, output, [MARK]: _mark, ...rest } = item;
  if (isObj(mark) && "output" in mark) {
    return { ...rest, type: "function_call_result", callId: call_id, output: mark.output };
  }
  // Written by another client: read as the SDK reads a Responses function_call_output.
  const { name, status, ...others } = rest;
  return {
    ...others,
    type: "function_call_result",
    callId: call_id,
    name: typeof name === "string" ? name : call_id,
    status: typeof status === "string" ? status : "completed",
    output: typeof output === "string" ? { type: "text", text: output } : output,
  };
}
