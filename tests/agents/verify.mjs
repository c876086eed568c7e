#!/usr/bin/env node
// Runs the real CLIs (installed by `npm ci` here) against mock-model-server.mjs and checks six
// cases each: reply, resume, effort, error, tool, hang+SIGTERM. Prints a table; exit 1 if any fails.
//
//   node verify.mjs [--cli codex,claude,opencode] [--save-samples]
//
// --save-samples writes each case's stdout to samples/<cli>_<case>.jsonl, with the temp home
// rewritten to /home/user. No dependencies; every run gets a fresh temp home, all traffic stays on
// 127.0.0.1, and every process group started here is killed before exit.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const saveSamples = argv.includes('--save-samples');
const cliArg = argv.indexOf('--cli');
const clis = cliArg >= 0 ? argv[cliArg + 1].split(',') : ['codex', 'claude', 'opencode'];

const groups = new Set(); // pgids we started
function killGroup(pgid, sig = 'SIGTERM') {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
}
function cleanup() {
  for (const g of groups) killGroup(g, 'SIGKILL');
}
process.on('exit', cleanup);
process.on('SIGINT', () => process.exit(130));
process.on('SIGTERM', () => process.exit(143));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'pedelec-agents-verify-'));

// ---- mock ----
async function startMock() {
  const child = spawn(process.execPath, [path.join(here, 'mock-model-server.mjs')], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
  groups.add(child.pid);
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve(JSON.parse(buf.slice(0, nl)).port);
    });
    child.on('exit', () => reject(new Error('mock exited')));
  });
  return { child, port };
}
let mock;
const base = () => `http://127.0.0.1:${mock.port}`;
async function setScript(s) {
  const r = await fetch(`${base()}/_script`, { method: 'POST', body: JSON.stringify(s) });
  if (!r.ok) throw new Error(`set script: ${await r.text()}`);
}
const clearRequests = () => fetch(`${base()}/_requests`, { method: 'DELETE' });
const getRequests = async () => (await fetch(`${base()}/_requests`)).json();
const mainRequests = (reqs) => reqs.filter((r) => r.method === 'POST' && Array.isArray(r.body?.tools) && r.body.tools.length > 0);

// ---- running a CLI ----
function newHome(cli) {
  return fs.mkdtempSync(path.join(tmpRoot, `${cli}-`));
}
function startCli(cli, home, args, prompt, extraEnv = {}) {
  const child = spawn(path.join(here, 'run-cli.sh'), [cli, ...args], {
    detached: true, // own process group
    env: { ...process.env, MOCK_PORT: String(mock.port), AGENT_HOME: home, ...extraEnv },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  groups.add(child.pid);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(prompt + '\n');
  const done = new Promise((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  return { child, done, out: () => stdout, err: () => stderr };
}
async function runCli(cli, home, args, prompt, extraEnv, timeoutMs = 120000) {
  const p = startCli(cli, home, args, prompt, extraEnv);
  const t = setTimeout(() => killGroup(p.child.pid, 'SIGKILL'), timeoutMs);
  const { code, signal } = await p.done;
  clearTimeout(t);
  groups.delete(p.child.pid);
  const lines = p.out().split('\n').filter((l) => l.trim()).map((l) => {
    try {
      return JSON.parse(l);
    } catch {
      return { _unparsed: l };
    }
  });
  return { code, signal, stdout: p.out(), stderr: p.err(), lines };
}

function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}
function processesWithHome(home) {
  const out = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (fs.readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`HOME=${home}`)) out.push(Number(pid));
    } catch {
      /* gone or not ours */
    }
  }
  return out;
}

function save(cli, name, home, stdout) {
  if (!saveSamples) return;
  const dir = path.join(here, 'samples');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `${cli}_${name}.jsonl`), stdout.split(home).join('/home/user').split(`127.0.0.1:${mock.port}`).join('127.0.0.1:PORT'));
}

// ---- per-CLI knowledge: where each CLI puts the session id, the text and the usage ----
const spec = {
  codex: {
    sessionId: (ls) => ls.find((l) => l.type === 'thread.started')?.thread_id,
    text: (ls) => ls.filter((l) => l.type === 'item.completed' && l.item?.type === 'agent_message').map((l) => l.item.text).join(''),
    usage: (ls) => ls.find((l) => l.type === 'turn.completed')?.usage,
    errorMessage: (ls) => ls.find((l) => l.type === 'turn.failed')?.error?.message,
    toolRan: (ls) => ls.some((l) => l.type === 'item.completed' && l.item?.type === 'command_execution' && l.item.exit_code === 0),
    resumeArgs: (id) => ['resume', id],
    effortArgs: ['-c', 'model_reasoning_effort="high"'],
    effortEnv: {},
    effortSent: (b) => b?.reasoning?.effort,
  },
  claude: {
    sessionId: (ls) => ls.find((l) => l.type === 'system' && l.subtype === 'init')?.session_id,
    text: (ls) => ls.filter((l) => l.type === 'assistant').flatMap((l) => l.message?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join(''),
    usage: (ls) => ls.find((l) => l.type === 'result')?.usage,
    errorMessage: (ls) => {
      const r = ls.find((l) => l.type === 'result');
      return r?.is_error ? r.result : undefined;
    },
    toolRan: (ls) => ls.some((l) => l.type === 'user' && (l.message?.content ?? []).some((c) => c.type === 'tool_result' && !c.is_error)),
    resumeArgs: (id) => ['--resume', id],
    effortArgs: ['--effort', 'high'],
    // claude-sonnet-4-5 silently drops --effort; models with effort support send output_config.effort
    effortEnv: { MODEL: 'claude-sonnet-4-6' },
    effortSent: (b) => b?.output_config?.effort,
  },
  opencode: {
    sessionId: (ls) => ls.find((l) => l.sessionID)?.sessionID,
    text: (ls) => ls.filter((l) => l.type === 'text').map((l) => l.part?.text ?? '').join(''),
    usage: (ls) => ls.filter((l) => l.type === 'step_finish').map((l) => l.part?.tokens).pop(),
    errorMessage: (ls) => ls.find((l) => l.type === 'error')?.error?.data?.message,
    toolRan: (ls) => ls.some((l) => l.type === 'tool_use' && l.part?.tool === 'bash' && l.part?.state?.status === 'completed'),
    resumeArgs: (id) => ['--session', id],
    effortArgs: ['--variant', 'high'],
    effortEnv: {},
    effortSent: (b) => b?.reasoning_effort,
  },
};

const REPLY = 'Hello from the mock model.';
const ERR = 'mock: model overloaded for test';

async function verifyCli(cli) {
  const s = spec[cli];
  const results = {};
  const check = (name, ok, detail) => {
    results[name] = { ok: !!ok, detail };
  };

  // (a) reply
  await setScript({ mode: 'reply', text: REPLY });
  await clearRequests();
  const home = newHome(cli);
  const a = await runCli(cli, home, [], 'Say hello, first turn');
  const sid = s.sessionId(a.lines);
  save(cli, 'reply', home, a.stdout);
  check('reply', a.code === 0 && sid && s.text(a.lines) === REPLY && s.usage(a.lines), `exit ${a.code}, session ${sid}, text ${JSON.stringify(s.text(a.lines))}`);

  // (b) resume, same home
  await clearRequests();
  const b = await runCli(cli, home, s.resumeArgs(sid), 'Second turn');
  const breqs = mainRequests(await getRequests());
  const sawHistory = breqs.some((r) => JSON.stringify(r.body).includes('Say hello, first turn'));
  save(cli, 'resume', home, b.stdout);
  check('resume', b.code === 0 && s.sessionId(b.lines) === sid && s.text(b.lines) === REPLY && sawHistory, `exit ${b.code}, same id ${s.sessionId(b.lines) === sid}, history in request ${sawHistory}`);

  // (c) effort
  await clearRequests();
  const chome = newHome(cli);
  const c = await runCli(cli, chome, s.effortArgs, 'Think hard', s.effortEnv);
  const sent = mainRequests(await getRequests()).map((r) => s.effortSent(r.body));
  save(cli, 'effort', chome, c.stdout);
  check('effort', c.code === 0 && sent.length > 0 && sent.every((e) => e === 'high'), `exit ${c.code}, sent ${JSON.stringify(sent)}`);

  // (d) error
  await setScript({ mode: 'error', message: ERR, status: 400 });
  const dhome = newHome(cli);
  const d = await runCli(cli, dhome, [], 'Fail please');
  const msg = s.errorMessage(d.lines);
  save(cli, 'error', dhome, d.stdout);
  check('error', d.code !== 0 && msg && msg.includes(ERR), `exit ${d.code}, message ${JSON.stringify(msg)}`);

  // (e) tool
  await setScript({ mode: 'tool', command: 'echo tool-output-42', final: 'Tool said: {output}' });
  const ehome = newHome(cli);
  const e = await runCli(cli, ehome, [], 'Run the tool');
  save(cli, 'tool', ehome, e.stdout);
  check('tool', e.code === 0 && s.toolRan(e.lines) && s.text(e.lines).includes('Tool said: tool-output-42'), `exit ${e.code}, text ${JSON.stringify(s.text(e.lines))}`);

  // (f) hang + SIGTERM to the process group
  await setScript({ mode: 'hang' });
  await clearRequests();
  const fhome = newHome(cli);
  const f = startCli(cli, fhome, [], 'Hang please');
  const pg = f.child.pid;
  for (let i = 0; i < 300 && mainRequests(await getRequests()).length === 0; i++) await sleep(100);
  const reached = mainRequests(await getRequests()).length > 0;
  await sleep(1000);
  killGroup(pg, 'SIGTERM');
  // Grace period, then SIGKILL to the group: opencode can lose a SIGTERM that arrives in its first
  // seconds (see README); the table marks such a run "ok*".
  let termOk = false;
  for (let i = 0; i < 50; i++) {
    if (!groupAlive(pg)) {
      termOk = true;
      break;
    }
    await sleep(100);
  }
  if (!termOk) killGroup(pg, 'SIGKILL');
  const { code, signal } = await f.done;
  await sleep(300);
  groups.delete(pg);
  const left = groupAlive(pg) || processesWithHome(fhome).length > 0;
  save(cli, 'hang', fhome, f.out());
  check('hang', reached && !left, `request reached ${reached}, gone after SIGTERM alone ${termOk}, exit ${code ?? signal}, left behind ${left}`);
  results.hang.star = !termOk;
  return results;
}

try {
  mock = await startMock();
  const all = {};
  for (const cli of clis) {
    all[cli] = await verifyCli(cli);
    for (const [k, v] of Object.entries(all[cli])) console.error(`${cli} ${k}: ${v.ok ? 'ok' : 'FAIL'} — ${v.detail}`);
  }
  const cases = ['reply', 'resume', 'effort', 'error', 'tool', 'hang'];
  console.log(`| cli | ${cases.join(' | ')} |`);
  console.log(`|---|${cases.map(() => '---').join('|')}|`);
  let failed = false;
  for (const cli of clis) {
    console.log(`| ${cli} | ${cases.map((c) => (all[cli][c].ok ? (all[cli][c].star ? 'ok*' : 'ok') : 'FAIL')).join(' | ')} |`);
    failed ||= cases.some((c) => !all[cli][c].ok);
  }
  if (clis.some((c) => all[c].hang.star)) console.log('\nok* = the group was still there 5 s after SIGTERM and needed SIGKILL; nothing was left after that.');
  killGroup(mock.child.pid);
  groups.delete(mock.child.pid);
  fs.rmSync(tmpRoot, { recursive: true, force: true });
  process.exit(failed ? 1 : 0);
} catch (e) {
  console.error(e);
  process.exit(2);
}
