#!/usr/bin/env node
// Mock model server for running the real agent CLIs (codex, claude, opencode) offline.
//
// Start:   node mock-model-server.mjs [--script FILE.json]
//          Binds 127.0.0.1 on a free port and prints one JSON line on stdout: {"port":N}
//
// Vendor APIs (all streaming SSE; non-streaming JSON is answered too when `stream` is false):
//   POST /v1/responses          OpenAI Responses      (codex)
//   POST /v1/messages[?beta=..] Anthropic Messages    (claude)
//   POST /v1/chat/completions   OpenAI chat completions (opencode, @ai-sdk/openai-compatible)
//   POST /v1/messages/count_tokens  -> {"input_tokens":N}
//
// Control endpoints:
//   GET    /_script      current script
//   POST   /_script      replace the script (JSON body, same shape as the --script file)
//   GET    /_requests    every request received so far (vendor and unknown paths), oldest first:
//                        [{seq, time, method, path, query, headers, body}]  (body parsed as JSON
//                        when possible, else a string)
//   DELETE /_requests    clear the log
//
// Script (JSON object):
//   {"mode":"reply", "text":"Hello from the mock model."}
//   {"mode":"tool",  "command":"echo tool-output-42", "final":"Tool said: {output}", "repeat":1}
//   {"mode":"mcp",   "tool":"update_counter", "tool_args":{"delta":5}, "final":"Tool said: {output}"}
//   {"mode":"error", "message":"mock: model overloaded for test", "status":400}
//   {"mode":"hang"}
// Optional keys for every mode: "delay_ms" (pause between streamed deltas, default 5),
//   "title" (text for auxiliary requests, default "Mock title"), "chunks" (reply/final text: split
//   into this many deltas at word boundaries instead of at most 4 — the browser suite uses long
//   streams to kill the native host mid-turn), "replies" (reply mode: an array of texts used one per
//   main request in order, the last one repeating — scripted multi-turn conversations).
// Tool mode: the shell tool is looked up in the request's `tools` (codex exec_command/shell,
//   claude Bash, opencode bash), its argument object built from the tool's JSON schema
//   (`cmd` or `command` string, or an argv array, plus `description` when present). Overrides:
//   "tool_name" and "tool_args" (object sent verbatim), or "tool_name" and "tool_input" (a string:
//   the input of a freeform tool, codex's `apply_patch`, sent as a Responses `custom_tool_call`).
//   While fewer than "repeat" tool results
//   follow the last real user message, another tool call is issued; after that the final text is
//   "final" with {output} replaced by the last tool result's text.
// MCP mode: calls the page tool `tool` as the CLI offers it natively, found in the request by its
//   name, never by a CLI's naming scheme: a function named `tool` inside a namespace (codex:
//   namespace `mcp__<server>`), or a tool whose name is `tool` or ends in `_tool` (claude
//   `mcp__<server>__tool`, opencode `<server>_tool`). When it is not offered but codex's
//   `tool_search` is, the model first searches (`tool_search_call` {query: tool}) and then calls
//   what codex's `tool_search_output` returned, as the real model does. Then "final" with {output}.
// Auxiliary requests (a chat-completions or messages request that offers no tools, e.g. opencode's
//   title request) are always answered with plain text ("title"), whatever the mode, so that the
//   mode applies to the agent's main turn only.
//
// No dependencies; Node >= 20.

import http from 'node:http';
import fs from 'node:fs';
import zlib from 'node:zlib';
import { randomBytes } from 'node:crypto';

const DEFAULT_SCRIPT = { mode: 'reply', text: 'Hello from the mock model.' };

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--script') out.script = argv[++i];
    else if (argv[i].startsWith('--script=')) out.script = argv[i].slice(9);
    else if (argv[i] === '--help' || argv[i] === '-h') out.help = true;
    else throw new Error(`unknown argument: ${argv[i]}`);
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
if (args.help) {
  process.stdout.write('usage: node mock-model-server.mjs [--script FILE.json]\n');
  process.exit(0);
}

let script = args.script ? JSON.parse(fs.readFileSync(args.script, 'utf8')) : { ...DEFAULT_SCRIPT };
validateScript(script);

const requests = [];
let seq = 0;
// Position in script.replies; reset whenever a script is set.
let replyIndex = 0;
const sockets = new Set();

function validateScript(s) {
  if (!s || typeof s !== 'object' || Array.isArray(s)) throw new Error('script must be a JSON object');
  const modes = ['reply', 'tool', 'mcp', 'error', 'hang'];
  if (!modes.includes(s.mode)) throw new Error(`script.mode must be one of ${modes.join(', ')}`);
  if (s.mode === 'tool' && typeof s.command !== 'string' && !s.tool_args && typeof s.tool_input !== 'string') {
    throw new Error('tool mode needs "command" (or "tool_args", or "tool_input")');
  }
  if (s.mode === 'mcp' && typeof s.tool !== 'string') throw new Error('mcp mode needs "tool"');
}

const id = (prefix) => `${prefix}${randomBytes(8).toString('hex')}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function splitDeltas(text) {
  // Several deltas: split at word boundaries into up to 4 pieces (or script.chunks).
  const words = text.split(/(?<=\s)/);
  if (words.length <= 1) return [text];
  const wanted = Number.isInteger(script.chunks) && script.chunks > 0 ? script.chunks : 4;
  const n = Math.min(wanted, words.length);
  const per = Math.ceil(words.length / n);
  const out = [];
  for (let i = 0; i < words.length; i += per) out.push(words.slice(i, i + per).join(''));
  return out;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('error', reject);
    req.on('end', () => {
      let buf = Buffer.concat(chunks);
      const enc = (req.headers['content-encoding'] || '').toLowerCase();
      try {
        if (enc === 'gzip') buf = zlib.gunzipSync(buf);
        else if (enc === 'deflate') buf = zlib.inflateSync(buf);
        else if (enc === 'br') buf = zlib.brotliDecompressSync(buf);
        else if (enc === 'zstd' && typeof zlib.zstdDecompressSync === 'function') buf = zlib.zstdDecompressSync(buf);
      } catch {
        /* keep raw */
      }
      const text = buf.toString('utf8');
      let body = text;
      if (text.length) {
        try {
          body = JSON.parse(text);
        } catch {
          /* not JSON */
        }
      } else body = null;
      resolve(body);
    });
  });
}

function sendJson(res, status, obj) {
  const data = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

function sseStart(res) {
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.flushHeaders();
}

// Write an SSE event; resolves false when the client went away.
function sse(res, event, data) {
  if (res.destroyed || res.writableEnded) return false;
  let s = '';
  if (event) s += `event: ${event}\n`;
  s += `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
  res.write(s);
  return true;
}

// Hang: keep the response open forever (until the client disconnects or the server stops).
function hang(res) {
  const t = setInterval(() => {
    if (res.destroyed) clearInterval(t);
  }, 1000);
  res.on('close', () => clearInterval(t));
}

// ---------- tool helpers ----------

function toolList(body) {
  return Array.isArray(body?.tools) ? body.tools : [];
}

// Normalise a tool offered in a request to {name, schema}.
function toolInfo(t) {
  if (!t || typeof t !== 'object') return null;
  if (t.type === 'function' && t.function) return { name: t.function.name, schema: t.function.parameters || {} }; // chat completions
  if (t.type === 'custom' && t.name) return { name: t.name, schema: {}, custom: true }; // responses freeform (codex apply_patch)
  if (t.name) return { name: t.name, schema: t.parameters || t.input_schema || {} }; // responses / anthropic
  return null;
}

const SHELL_TOOL_NAMES = ['exec_command', 'shell_command', 'shell', 'Bash', 'bash'];

function pickShellTool(body) {
  const infos = toolList(body).map(toolInfo).filter(Boolean);
  if (script.tool_name) {
    return infos.find((i) => i.name === script.tool_name) || { name: script.tool_name, schema: {} };
  }
  for (const n of SHELL_TOOL_NAMES) {
    const hit = infos.find((i) => i.name === n);
    if (hit) return hit;
  }
  return infos.find((i) => /shell|bash|exec/i.test(i.name)) || null;
}

// The page tool `wanted` as offered natively: in `tools`, or (codex) in a tool_search_output of the
// input. Returns {name, namespace?, schema} or null.
function findMcpTool(body, wanted) {
  const offered = [...toolList(body)];
  for (const item of Array.isArray(body?.input) ? body.input : []) {
    if (item?.type === 'tool_search_output' && Array.isArray(item.tools)) offered.push(...item.tools);
  }
  for (const t of offered) {
    if (t?.type === 'namespace' && Array.isArray(t.tools)) {
      const hit = t.tools.find((f) => f?.name === wanted);
      if (hit) return { name: hit.name, namespace: t.name, schema: hit.parameters || {} };
      continue;
    }
    const info = toolInfo(t);
    if (info && (info.name === wanted || info.name.endsWith(`_${wanted}`))) return info;
  }
  return null;
}

// codex offers deferred tools through a client-executed `tool_search` tool.
const offersToolSearch = (body) => toolList(body).some((t) => t?.type === 'tool_search');
const searchedAlready = (body) =>
  (Array.isArray(body?.input) ? body.input : []).some((i) => i?.type === 'tool_search_output');

function buildToolArgs(info) {
  if (script.tool_args) return script.tool_args;
  const props = info?.schema?.properties || {};
  const command = script.command;
  const a = {};
  const key = ['cmd', 'command'].find((k) => props[k]) || 'command';
  a[key] = props[key]?.type === 'array' ? ['bash', '-lc', command] : command;
  if (props.description || !info?.schema?.properties) a.description = 'mock tool call';
  return a;
}

function textOf(content) {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map(textOf).filter((s) => s !== '').join('\n');
  if (typeof content === 'object') {
    if (typeof content.text === 'string') return content.text;
    if (typeof content.output === 'string') return content.output;
    if (content.content !== undefined) return textOf(content.content);
  }
  return '';
}

// Tool results after the last real user message, oldest first, as text.
function toolResults(vendor, body) {
  const out = [];
  if (vendor === 'responses') {
    const input = Array.isArray(body?.input) ? body.input : [];
    for (const item of input) {
      if (item?.type === 'message' && item.role === 'user') out.length = 0;
      else if (!item?.type && item?.role === 'user') out.length = 0;
      else if (item?.type === 'function_call_output' || item?.type === 'custom_tool_call_output') out.push(textOf(item.output));
    }
  } else if (vendor === 'messages') {
    for (const m of body?.messages || []) {
      if (m.role !== 'user') continue;
      const blocks = Array.isArray(m.content) ? m.content : [{ type: 'text', text: m.content }];
      const results = blocks.filter((b) => b?.type === 'tool_result');
      if (results.length === 0) out.length = 0;
      else for (const b of results) out.push(textOf(b.content));
    }
  } else if (vendor === 'chat') {
    for (const m of body?.messages || []) {
      if (m.role === 'user') out.length = 0;
      else if (m.role === 'tool') out.push(textOf(m.content));
    }
  }
  return out;
}

// Decide what to do with a main request: {kind:'text', text} | {kind:'tool', info, args} | {kind:'error'} | {kind:'hang'}
function plan(vendor, body) {
  const s = script;
  if (s.mode === 'error') return { kind: 'error' };
  if (s.mode === 'hang') return { kind: 'hang' };
  if (s.mode === 'tool') {
    const results = toolResults(vendor, body);
    const repeat = Number.isInteger(s.repeat) && s.repeat > 0 ? s.repeat : 1;
    if (results.length < repeat) {
      const info = pickShellTool(body);
      if (!info) return { kind: 'text', text: 'mock: no shell tool offered in the request' };
      return { kind: 'tool', info, args: buildToolArgs(info) };
    }
    let output = results[results.length - 1];
    // codex wraps exec_command output in a header ("Chunk ID: …\nWall time: …\n…\nOutput:\n"): quote only the output.
    const m = /^Chunk ID:[^\n]*\n(?:[^\n]*\n)*?Output:\n/.exec(output);
    if (m) output = output.slice(m[0].length);
    output = output.trim();
    return { kind: 'text', text: (s.final ?? 'Tool said: {output}').split('{output}').join(output) };
  }
  if (s.mode === 'mcp') {
    const results = toolResults(vendor, body);
    if (results.length === 0) {
      const info = findMcpTool(body, s.tool);
      if (info) return { kind: 'tool', info, args: s.tool_args ?? {} };
      if (vendor === 'responses' && offersToolSearch(body) && !searchedAlready(body)) {
        return { kind: 'tool_search', query: s.tool };
      }
      return { kind: 'text', text: `mock: no native tool ${s.tool} in the request` };
    }
    // codex puts a header before an MCP result ("Wall time: …\nOutput:").
    const output = results[results.length - 1].replace(/^Wall time:[^\n]*\nOutput:\n?/, '').trim();
    return { kind: 'text', text: (s.final ?? 'Tool said: {output}').split('{output}').join(output) };
  }
  if (Array.isArray(s.replies) && s.replies.length > 0) {
    // One reply per main request, in order; the last one repeats.
    const text = s.replies[Math.min(replyIndex, s.replies.length - 1)];
    replyIndex++;
    return { kind: 'text', text: String(text) };
  }
  return { kind: 'text', text: s.text ?? DEFAULT_SCRIPT.text };
}

const errorMessage = () => script.message ?? 'mock: model overloaded for test';
const errorStatus = () => script.status ?? 400;
const delay = () => (Number.isFinite(script.delay_ms) ? script.delay_ms : 5);

// ---------- OpenAI Responses (codex) ----------

async function handleResponses(req, res, body) {
  const p = plan('responses', body);
  if (p.kind === 'error') {
    return sendJson(res, errorStatus(), {
      error: { message: errorMessage(), type: 'invalid_request_error', param: null, code: 'mock_error' },
    });
  }
  const respId = id('resp_');
  const base = {
    id: respId,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model: body?.model ?? 'mock',
    status: 'in_progress',
    output: [],
  };
  sseStart(res);
  sse(res, 'response.created', { type: 'response.created', sequence_number: 0, response: base });
  if (p.kind === 'hang') return hang(res);
  let n = 1;
  const output = [];
  if (p.kind === 'tool_search') {
    const item = {
      type: 'tool_search_call',
      id: id('ts_'),
      call_id: id('call_'),
      status: 'completed',
      execution: 'client',
      arguments: { query: p.query, limit: 5 },
    };
    sse(res, 'response.output_item.added', { type: 'response.output_item.added', sequence_number: n++, output_index: 0, item: { ...item, status: 'in_progress' } });
    sse(res, 'response.output_item.done', { type: 'response.output_item.done', sequence_number: n++, output_index: 0, item });
    output.push(item);
  } else if (p.kind === 'tool' && p.info.custom) {
    // A freeform tool (codex's apply_patch): its input is the script's text as is.
    const item = {
      type: 'custom_tool_call',
      id: id('ctc_'),
      call_id: id('call_'),
      name: p.info.name,
      input: script.tool_input ?? '',
      status: 'completed',
    };
    sse(res, 'response.output_item.added', { type: 'response.output_item.added', sequence_number: n++, output_index: 0, item: { ...item, input: '', status: 'in_progress' } });
    sse(res, 'response.custom_tool_call_input.delta', { type: 'response.custom_tool_call_input.delta', sequence_number: n++, item_id: item.id, output_index: 0, delta: item.input });
    sse(res, 'response.custom_tool_call_input.done', { type: 'response.custom_tool_call_input.done', sequence_number: n++, item_id: item.id, output_index: 0, input: item.input });
    sse(res, 'response.output_item.done', { type: 'response.output_item.done', sequence_number: n++, output_index: 0, item });
    output.push(item);
  } else if (p.kind === 'tool') {
    const item = {
      type: 'function_call',
      id: id('fc_'),
      call_id: id('call_'),
      ...(p.info.namespace ? { namespace: p.info.namespace } : {}),
      name: p.info.name,
      arguments: JSON.stringify(p.args),
      status: 'completed',
    };
    sse(res, 'response.output_item.added', { type: 'response.output_item.added', sequence_number: n++, output_index: 0, item: { ...item, arguments: '', status: 'in_progress' } });
    sse(res, 'response.function_call_arguments.delta', { type: 'response.function_call_arguments.delta', sequence_number: n++, item_id: item.id, output_index: 0, delta: item.arguments });
    sse(res, 'response.function_call_arguments.done', { type: 'response.function_call_arguments.done', sequence_number: n++, item_id: item.id, output_index: 0, arguments: item.arguments });
    sse(res, 'response.output_item.done', { type: 'response.output_item.done', sequence_number: n++, output_index: 0, item });
    output.push(item);
  } else {
    const msgId = id('msg_');
    sse(res, 'response.output_item.added', {
      type: 'response.output_item.added', sequence_number: n++, output_index: 0,
      item: { type: 'message', id: msgId, role: 'assistant', status: 'in_progress', content: [] },
    });
    sse(res, 'response.content_part.added', {
      type: 'response.content_part.added', sequence_number: n++, item_id: msgId, output_index: 0, content_index: 0,
      part: { type: 'output_text', text: '', annotations: [] },
    });
    for (const d of splitDeltas(p.text)) {
      if (!sse(res, 'response.output_text.delta', { type: 'response.output_text.delta', sequence_number: n++, item_id: msgId, output_index: 0, content_index: 0, delta: d })) return;
      await sleep(delay());
    }
    sse(res, 'response.output_text.done', { type: 'response.output_text.done', sequence_number: n++, item_id: msgId, output_index: 0, content_index: 0, text: p.text });
    const item = { type: 'message', id: msgId, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: p.text, annotations: [] }] };
    sse(res, 'response.content_part.done', { type: 'response.content_part.done', sequence_number: n++, item_id: msgId, output_index: 0, content_index: 0, part: item.content[0] });
    sse(res, 'response.output_item.done', { type: 'response.output_item.done', sequence_number: n++, output_index: 0, item });
    output.push(item);
  }
  sse(res, 'response.completed', {
    type: 'response.completed',
    sequence_number: n++,
    response: {
      ...base,
      status: 'completed',
      output,
      usage: {
        input_tokens: 123,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 45,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 168,
      },
    },
  });
  res.end();
}

// ---------- Anthropic Messages (claude) ----------

async function handleMessages(req, res, body) {
  const auxiliary = toolList(body).length === 0;
  const p = auxiliary ? { kind: 'text', text: script.title ?? 'Mock title' } : plan('messages', body);
  if (p.kind === 'error') {
    return sendJson(res, errorStatus(), {
      type: 'error',
      error: { type: 'invalid_request_error', message: errorMessage() },
    });
  }
  const msgId = id('msg_');
  const model = body?.model ?? 'claude-sonnet-4-5';
  const usage = { input_tokens: 111, output_tokens: 22 };
  let content;
  if (p.kind === 'tool') content = [{ type: 'tool_use', id: id('toolu_'), name: p.info.name, input: p.args }];
  else if (p.kind === 'text') content = [{ type: 'text', text: p.text }];
  const stopReason = p.kind === 'tool' ? 'tool_use' : 'end_turn';

  if (body?.stream !== true && p.kind !== 'hang') {
    return sendJson(res, 200, { id: msgId, type: 'message', role: 'assistant', model, content, stop_reason: stopReason, stop_sequence: null, usage });
  }
  sseStart(res);
  sse(res, 'message_start', {
    type: 'message_start',
    message: { id: msgId, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: usage.input_tokens, output_tokens: 1 } },
  });
  if (p.kind === 'hang') {
    sse(res, 'ping', { type: 'ping' });
    return hang(res);
  }
  if (p.kind === 'tool') {
    const b = content[0];
    sse(res, 'content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } });
    const json = JSON.stringify(b.input);
    const mid = Math.floor(json.length / 2);
    for (const part of [json.slice(0, mid), json.slice(mid)]) {
      if (!sse(res, 'content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: part } })) return;
      await sleep(delay());
    }
  } else {
    sse(res, 'content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    for (const d of splitDeltas(p.text)) {
      if (!sse(res, 'content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: d } })) return;
      await sleep(delay());
    }
  }
  sse(res, 'content_block_stop', { type: 'content_block_stop', index: 0 });
  sse(res, 'message_delta', { type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } });
  sse(res, 'message_stop', { type: 'message_stop' });
  res.end();
}

// ---------- OpenAI chat completions (opencode) ----------

async function handleChat(req, res, body) {
  const auxiliary = toolList(body).length === 0;
  const p = auxiliary ? { kind: 'text', text: script.title ?? 'Mock title' } : plan('chat', body);
  if (p.kind === 'error') {
    return sendJson(res, errorStatus(), {
      error: { message: errorMessage(), type: 'invalid_request_error', param: null, code: 'mock_error' },
    });
  }
  const chatId = id('chatcmpl-');
  const model = body?.model ?? 'mock';
  const created = Math.floor(Date.now() / 1000);
  const usage = { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 };
  const chunk = (choices, extra = {}) => ({ id: chatId, object: 'chat.completion.chunk', created, model, choices, ...extra });
  const toolCall = p.kind === 'tool' ? { id: id('call_'), type: 'function', function: { name: p.info.name, arguments: JSON.stringify(p.args) } } : null;

  if (body?.stream !== true && p.kind !== 'hang') {
    const message = toolCall ? { role: 'assistant', content: null, tool_calls: [toolCall] } : { role: 'assistant', content: p.text };
    return sendJson(res, 200, {
      id: chatId, object: 'chat.completion', created, model,
      choices: [{ index: 0, message, finish_reason: toolCall ? 'tool_calls' : 'stop' }], usage,
    });
  }
  sseStart(res);
  sse(res, null, chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]));
  if (p.kind === 'hang') return hang(res);
  if (toolCall) {
    sse(res, null, chunk([{ index: 0, delta: { tool_calls: [{ index: 0, id: toolCall.id, type: 'function', function: { name: toolCall.function.name, arguments: '' } }] }, finish_reason: null }]));
    const a = toolCall.function.arguments;
    const mid = Math.floor(a.length / 2);
    for (const part of [a.slice(0, mid), a.slice(mid)]) {
      if (!sse(res, null, chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: part } }] }, finish_reason: null }]))) return;
      await sleep(delay());
    }
    sse(res, null, chunk([{ index: 0, delta: {}, finish_reason: 'tool_calls' }]));
  } else {
    for (const d of splitDeltas(p.text)) {
      if (!sse(res, null, chunk([{ index: 0, delta: { content: d }, finish_reason: null }]))) return;
      await sleep(delay());
    }
    sse(res, null, chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]));
  }
  sse(res, null, chunk([], { usage }));
  sse(res, null, '[DONE]');
  res.end();
}

// ---------- server ----------

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  const path = url.pathname;
  try {
    const body = await readBody(req);

    // control endpoints (not logged)
    if (path === '/_requests') {
      if (req.method === 'GET') return sendJson(res, 200, requests);
      if (req.method === 'DELETE') {
        requests.length = 0;
        return sendJson(res, 200, { ok: true });
      }
      return sendJson(res, 405, { error: 'GET or DELETE' });
    }
    if (path === '/_script') {
      if (req.method === 'GET') return sendJson(res, 200, script);
      if (req.method === 'POST') {
        try {
          validateScript(body);
        } catch (e) {
          return sendJson(res, 400, { error: String(e.message) });
        }
        script = body;
        replyIndex = 0;
        return sendJson(res, 200, { ok: true, script });
      }
      return sendJson(res, 405, { error: 'GET or POST' });
    }

    requests.push({
      seq: ++seq,
      time: new Date().toISOString(),
      method: req.method,
      path,
      query: Object.fromEntries(url.searchParams),
      headers: req.headers,
      body,
    });

    if (req.method === 'POST' && path === '/v1/responses') return await handleResponses(req, res, body);
    if (req.method === 'POST' && path === '/v1/messages/count_tokens') return sendJson(res, 200, { input_tokens: 100 });
    if (req.method === 'POST' && path === '/v1/messages') return await handleMessages(req, res, body);
    if (req.method === 'POST' && path === '/v1/chat/completions') return await handleChat(req, res, body);
    if (req.method === 'HEAD' || (req.method === 'GET' && path === '/')) return sendJson(res, 200, { ok: true });
    return sendJson(res, 404, { error: { message: `mock: no route for ${req.method} ${path}`, type: 'not_found' } });
  } catch (e) {
    if (!res.headersSent) sendJson(res, 500, { error: { message: `mock internal error: ${e.message}` } });
    else res.destroy();
  }
});

server.on('connection', (s) => {
  sockets.add(s);
  s.on('close', () => sockets.delete(s));
});
server.keepAliveTimeout = 5000;

function shutdown() {
  server.close();
  for (const s of sockets) s.destroy();
  setTimeout(() => process.exit(0), 50).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
});
