// deskbox's MCP server as a real MCP client sees it: the official TypeScript SDK
// (@modelcontextprotocol/sdk) over Streamable HTTP (deskboxd's /mcp) and over stdio
// (`deskbox mcp`), against a real deskboxd with real container sandboxes.
// Env: DESKBOXD and DESKBOX_CLI (the built binaries).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const DESKBOXD = process.env.DESKBOXD ?? 'build/server/deskboxd';
const DESKBOX_CLI = process.env.DESKBOX_CLI ?? 'build/server/deskbox';

let server;
let url;
let stateDir;

before(async () => {
  stateDir = mkdtempSync(join(tmpdir(), 'deskbox-mcp-test-'));
  chmodSync(stateDir, 0o711); // sandboxes' user-namespace roots pass through to the state dir
  server = spawn(DESKBOXD, ['--listen', '127.0.0.1:0', '--state-dir', join(stateDir, 'state'), '--on-exit', 'kill'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const firstLine = await new Promise((resolve, reject) => {
    const lines = createInterface({ input: server.stdout });
    lines.once('line', resolve);
    server.once('exit', (code) => reject(new Error(`deskboxd exited with ${code}`)));
  });
  const port = firstLine.match(/:(\d+)\s*$/)?.[1];
  assert.ok(port, `deskboxd's first line names its port: ${firstLine}`);
  url = `http://127.0.0.1:${port}`;
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once('exit', resolve));
    server.kill('SIGTERM');
    await exited;
  }
  rmSync(stateDir, { recursive: true, force: true });
});

async function rest(method, path, body) {
  const answer = await fetch(url + path, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: answer.status, json: await answer.json() };
}

function imageOf(result) {
  const image = result.content.find((c) => c.type === 'image');
  assert.ok(image, `an image in ${JSON.stringify(result).slice(0, 300)}`);
  assert.equal(image.mimeType, 'image/png');
  const png = Buffer.from(image.data, 'base64');
  assert.equal(png.subarray(1, 4).toString(), 'PNG');
  return { png, width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

// "gone" once the process whose pid is in `pidFile` has ended in the guest (a kill is sent as
// a cancel arrives; the guest reaps it a moment later), else "alive" after 10 s of asking.
async function stateOf(client, pidFile) {
  let state = 'alive';
  for (let i = 0; i < 100 && state !== 'gone'; i++) {
    const probe = await client.callTool({ name: 'run_command', arguments: {
      command: `kill -0 $(cat ${pidFile}) 2>/dev/null && echo alive || echo gone` } });
    state = probe.structuredContent.stdout.trim();
    if (state !== 'gone') await new Promise((r) => setTimeout(r, 100));
  }
  return state;
}

function textOf(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

test('Streamable HTTP: tools, a click that changes the screen, an error result, the screen resource', async () => {
  const client = new Client({ name: 'deskbox-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'));
  await client.connect(transport);
  try {
    assert.equal(client.getServerVersion().name, 'deskbox');
    assert.ok(transport.sessionId, 'the server gave a session id');

    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['accessibility_tree', 'act_on_element', 'computer', 'computer_tool_uses', 'create_sandbox',
      'find_element', 'find_on_screen', 'fork', 'kill_sandbox',
      'list_sandboxes', 'read_file', 'read_screen', 'run_command', 'screenshot', 'snapshot',
      'wait_for', 'write_file']);
    const computer = tools.find((t) => t.name === 'computer');
    assert.ok(computer.inputSchema.properties.action.enum.includes('zoom'));
    assert.deepEqual(computer.inputSchema.required, ['action']);

    const created = await client.callTool({ name: 'create_sandbox', arguments: { template: 'minimal' } });
    assert.equal(created.isError, false, textOf(created));
    const id = created.structuredContent.id;
    assert.match(id, /^sb-/);

    const before = imageOf(await client.callTool({ name: 'computer', arguments: { action: 'screenshot' } }));
    assert.deepEqual([before.width, before.height], [1280, 800]);
    // openbox opens its root menu on a right click on the desktop: the screen changes, and
    // the click's own result is the screenshot after it.
    const clicked = await client.callTool({
      name: 'computer', arguments: { action: 'right_click', coordinate: [400, 300] },
    });
    assert.equal(clicked.isError, false, textOf(clicked));
    const after = imageOf(clicked);
    assert.deepEqual([after.width, after.height], [1280, 800]);
    assert.notDeepEqual(after.png, before.png, 'the menu shows in the screenshot after the click');
    await client.callTool({ name: 'computer', arguments: { action: 'key', text: 'Escape' } });

    const zoomed = imageOf(await client.callTool({
      name: 'computer', arguments: { action: 'zoom', region: [0, 0, 319, 199] },
    }));
    assert.deepEqual([zoomed.width, zoomed.height], [320, 200]);

    // One Claude turn in the computer toolset's form (computer_toolset_20260801), relayed whole.
    const member = (id, name, input) => ({ type: 'tool_use', id, name, toolset_name: 'computer', input });
    const turn = await client.callTool({
      name: 'computer_tool_uses',
      arguments: {
        tool_uses: [member('toolu_1', 'mouse_move', { coordinate: [30, 40] }),
          member('toolu_2', 'cursor_position', {}),
          member('toolu_3', 'zoom', { region: [960, 600, 1280, 800] })],
      },
    });
    assert.equal(turn.isError, false, textOf(turn));
    const results = turn.structuredContent.tool_results;
    assert.deepEqual(results.map((r) => r.tool_use_id), ['toolu_1', 'toolu_2', 'toolu_3']);
    assert.deepEqual(results[1].content, [{ type: 'text', text: 'X=30,Y=40' }]);
    const quarter = imageOf({ content: turn.content.filter((c) => c.type === 'image') });
    assert.deepEqual([quarter.width, quarter.height], [320, 200]);
    const badTurn = await client.callTool({
      name: 'computer_tool_uses', arguments: { tool_uses: [member('toolu_4', 'fly', {})] },
    });
    assert.equal(badTurn.isError, true);
    assert.match(textOf(badTurn), /tool_uses\[0\]\.name: unknown computer toolset member 'fly'/);

    const bad = await client.callTool({
      name: 'computer', arguments: { action: 'left_click', coordinate: [5000, 10] },
    });
    assert.equal(bad.isError, true);
    assert.match(textOf(bad), /coordinate\[0\]/);
    const unknown = await client.callTool({ name: 'computer', arguments: { action: 'fly' } });
    assert.equal(unknown.isError, true);
    assert.match(textOf(unknown), /unknown action 'fly'/);

    const wrote = await client.callTool({
      name: 'write_file', arguments: { path: '/tmp/mcp.txt', content: 'héllo from mcp\n' },
    });
    assert.equal(wrote.isError, false, textOf(wrote));
    const read = await client.callTool({ name: 'read_file', arguments: { path: '/tmp/mcp.txt' } });
    assert.equal(textOf(read), 'héllo from mcp\n');
    // A directory lists, as GET /files answers it.
    const dir = await client.callTool({ name: 'read_file', arguments: { path: '/tmp' } });
    assert.equal(dir.isError, false, textOf(dir));
    assert.match(textOf(dir), /^mcp\.txt$/m);
    assert.ok(dir.structuredContent.entries.some((e) => e.name === 'mcp.txt'));
    const ran = await client.callTool({ name: 'run_command', arguments: { command: 'wc -c </tmp/mcp.txt; exit 4' } });
    assert.equal(ran.structuredContent.exit_code, 4);
    assert.equal(ran.structuredContent.stdout.trim(), '16');

    // Seeing the screen without screenshots: type, wait for the text, find it, read it.
    await client.callTool({ name: 'run_command', arguments: { command: 'xterm -geometry 60x10+100+100 -e sh -c "echo marmalade quokka; sleep 60"', background: true } });
    const waited = await client.callTool({ name: 'wait_for', arguments: { until: 'text', text: 'marmalade quokka', timeout_ms: 20000 } });
    assert.equal(waited.isError, false, textOf(waited));
    assert.equal(waited.structuredContent.matched, true, textOf(waited));
    const found = await client.callTool({ name: 'find_on_screen', arguments: { text: 'quokka' } });
    assert.equal(found.structuredContent.matches.length, 1, textOf(found));
    assert.match(textOf(found), /^quokka at \d+,\d+/);
    const screenText = await client.callTool({ name: 'read_screen', arguments: { region: [80, 80, 640, 300] } });
    assert.match(textOf(screenText), /marmalade quokka/i);  // OCR may read the first m as M
    const badWait = await client.callTool({ name: 'wait_for', arguments: { until: 'soon' } });
    assert.equal(badWait.isError, true);
    assert.match(textOf(badWait), /until/);

    const { resources } = await client.listResources();
    const screen = resources.find((r) => r.uri === `deskbox://sandboxes/${id}/screen`);
    assert.ok(screen, JSON.stringify(resources));
    const { contents } = await client.readResource({ uri: screen.uri });
    assert.equal(contents[0].mimeType, 'image/png');
    assert.equal(Buffer.from(contents[0].blob, 'base64').subarray(1, 4).toString(), 'PNG');

    // A snapshot and a fork of the session's sandbox: the copy has its files; the session's
    // sandbox stays the one forked.
    const saved = await client.callTool({ name: 'snapshot', arguments: { name: 'mcp-snap' } });
    assert.equal(saved.isError, false, textOf(saved));
    assert.deepEqual([saved.structuredContent.name, saved.structuredContent.source_sandbox], ['mcp-snap', id]);
    assert.equal((await rest('DELETE', '/v1/snapshots/mcp-snap')).status, 200);
    await client.callTool({ name: 'write_file', arguments: { path: '/home/user/fork.txt', content: 'before the fork\n' } });
    const forked = await client.callTool({ name: 'fork', arguments: { count: 1 } });
    assert.equal(forked.isError, false, textOf(forked));
    const copy = forked.structuredContent.sandboxes[0].id;
    assert.equal(forked.structuredContent.sandboxes[0].control_token, undefined);
    const copied = await client.callTool({ name: 'read_file', arguments: { path: '/home/user/fork.txt', sandbox_id: copy } });
    assert.equal(textOf(copied), 'before the fork\n');
    assert.equal((await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: copy } })).isError, false);

    const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} });
    assert.match(textOf(listed), new RegExp(`${id}\\t\\w+\\tminimal\\t\\(current\\)`));
    const killed = await client.callTool({ name: 'kill_sandbox', arguments: {} });
    assert.equal(killed.isError, false, textOf(killed));
    // The sandbox object as it ended, as DELETE /v1/sandboxes/{id} answers it.
    assert.equal(killed.structuredContent.id, id);
    assert.equal(killed.structuredContent.state, 'killed');
    assert.equal(killed.structuredContent.template, 'minimal');
    assert.equal((await rest('GET', `/v1/sandboxes/${id}`)).status, 404);
    const none = await client.callTool({ name: 'screenshot', arguments: {} });
    assert.equal(none.isError, true);
    assert.match(textOf(none), /create_sandbox first/);
  } finally {
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
});

test('Streamable HTTP: protocol errors are JSON-RPC errors; sessions are required and end', async () => {
  const post = (body, headers = {}) => fetch(url + '/mcp', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body,
  });
  let answer = await post('{not json');
  assert.equal(answer.status, 400);
  assert.equal((await answer.json()).error.code, -32700);
  answer = await post('[{"jsonrpc":"2.0","id":1,"method":"ping"}]');
  assert.equal((await answer.json()).error.code, -32600);
  answer = await post('{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
  assert.equal(answer.status, 400, 'no session');
  answer = await post('{"jsonrpc":"2.0","id":1,"method":"tools/list"}', { 'mcp-session-id': 'nope' });
  assert.equal(answer.status, 404);
  answer = await post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { 'mcp-protocol-version': '1999-01-01' });
  assert.equal(answer.status, 400);

  answer = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } } }));
  const session = answer.headers.get('mcp-session-id');
  assert.equal((await answer.json()).result.protocolVersion, '2025-06-18', 'a supported older revision is kept');
  answer = await post('{"jsonrpc":"2.0","id":2,"method":"no/such"}', { 'mcp-session-id': session });
  assert.equal((await answer.json()).error.code, -32601);
  answer = await post('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}', { 'mcp-session-id': session });
  assert.equal((await answer.json()).error.code, -32602);
  const ended = await fetch(url + '/mcp', { method: 'DELETE', headers: { 'mcp-session-id': session } });
  assert.equal(ended.status, 204);
  answer = await post('{"jsonrpc":"2.0","id":4,"method":"ping"}', { 'mcp-session-id': session });
  assert.equal(answer.status, 404, 'an ended session is gone');
});

test('auth: a control token opens only its sandbox; with --api-key the key is needed', async () => {
  const { status, json: created } = await rest('POST', '/v1/sandboxes', { template: 'minimal', network: false });
  assert.equal(status, 201, JSON.stringify(created));
  const other = await rest('POST', '/v1/sandboxes', { template: 'minimal', network: false });
  try {
    const wrong = new Client({ name: 'wrong-token', version: '1' });
    await assert.rejects(wrong.connect(new StreamableHTTPClientTransport(
      new URL(`${url}/mcp?sandbox=${created.id}&token=not-the-token`))), /401|unauthorized/i);

    const client = new Client({ name: 'token', version: '1' });
    const transport = new StreamableHTTPClientTransport(
      new URL(`${url}/mcp?sandbox=${created.id}&token=${created.control_token}`));
    await client.connect(transport);
    const ran = await client.callTool({ name: 'run_command', arguments: { command: 'echo mine' } });
    assert.equal(ran.structuredContent.stdout, 'mine\n', 'the session starts on ?sandbox=');
    const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} });
    assert.deepEqual(listed.structuredContent.sandboxes.map((s) => s.id), [created.id]);
    const elsewhere = await client.callTool({
      name: 'screenshot', arguments: { sandbox_id: other.json.id },
    });
    assert.equal(elsewhere.isError, true);
    assert.match(textOf(elsewhere), /may only use sandbox/);
    const create = await client.callTool({ name: 'create_sandbox', arguments: {} });
    assert.equal(create.isError, true);
    // A snapshot or a fork outlives the sandbox and makes others: the API key's to ask for.
    for (const [name, args] of [['snapshot', { name: 'by-token' }], ['fork', { count: 1 }]]) {
      const refused = await client.callTool({ name, arguments: args });
      assert.equal(refused.isError, true, name);
      assert.match(textOf(refused), /API key/, name);
    }
    await transport.terminateSession();
    await client.close();
  } finally {
    await rest('DELETE', `/v1/sandboxes/${created.id}`);
    await rest('DELETE', `/v1/sandboxes/${other.json.id}`);
  }

  const keyed = spawn(DESKBOXD, ['--listen', '127.0.0.1:0', '--state-dir', join(stateDir, 'keyed'),
    '--api-key', 'sekret-key-1', '--on-exit', 'kill'], { stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const line = await new Promise((resolve, reject) => {
      createInterface({ input: keyed.stdout }).once('line', resolve);
      keyed.once('exit', (code) => reject(new Error(`deskboxd --api-key exited with ${code}`)));
    });
    const keyedUrl = new URL(`http://127.0.0.1:${line.match(/:(\d+)\s*$/)[1]}/mcp`);
    const anonymous = new Client({ name: 'anonymous', version: '1' });
    await assert.rejects(anonymous.connect(new StreamableHTTPClientTransport(keyedUrl)), /401|unauthorized/i);
    const client = new Client({ name: 'keyed', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(keyedUrl, {
      requestInit: { headers: { Authorization: 'Bearer sekret-key-1' } },
    }));
    const { tools } = await client.listTools();
    assert.equal(tools.length, 17);
    await client.close();
  } finally {
    const exited = new Promise((resolve) => keyed.once('exit', resolve));
    keyed.kill('SIGTERM');
    await exited;
  }
});

test('stdio: `deskbox mcp --create` serves a sandbox of its own and kills it at the end', async () => {
  const transport = new StdioClientTransport({
    command: DESKBOX_CLI,
    args: ['mcp', '--create', 'minimal', '--server', url],
    stderr: 'pipe',
  });
  const client = new Client({ name: 'deskbox-stdio-test', version: '1.0.0' });
  await client.connect(transport);
  const { tools } = await client.listTools();
  assert.ok(tools.some((t) => t.name === 'computer'));
  const shot = imageOf(await client.callTool({ name: 'screenshot', arguments: {} }));
  assert.deepEqual([shot.width, shot.height], [1280, 800]);
  const typed = await client.callTool({ name: 'run_command', arguments: { command: 'echo $((6*7))' } });
  assert.equal(typed.structuredContent.stdout, '42\n');
  // With progress the server answers SSE; the bridge relays each of its messages as a line when
  // it comes. (The pauses keep each line in a read of its own: the SDK's stdio transport runs a
  // read's responses before its notifications, so progress read together with its response
  // would find the call already over.)
  const progress = [];
  const counted = await client.callTool({ name: 'run_command', arguments: { command: 'echo one; sleep 0.3; echo two; sleep 0.3' } },
    undefined, { onprogress: (p) => progress.push(p.message) });
  assert.equal(counted.structuredContent.stdout, 'one\ntwo\n');
  assert.deepEqual(progress, ['one', 'two']);
  // A cancel typed while a call runs goes out at once, and the command ends in the guest.
  const controller = new AbortController();
  let ticked;
  const firstTick = new Promise((resolve) => { ticked = resolve; });
  const long = client.callTool(
    { name: 'run_command', arguments: { command: 'echo $$ > /tmp/stdio.pid; while true; do echo tick; sleep 0.5; done', timeout_s: 600 } },
    undefined, { signal: controller.signal, timeout: 600_000, onprogress: () => ticked() });
  await firstTick;
  controller.abort(new Error('the test cancels'));
  await assert.rejects(long);
  assert.equal(await stateOf(client, '/tmp/stdio.pid'), 'gone', 'the command cancelled over stdio is gone in the guest');
  const bad = await client.callTool({ name: 'computer', arguments: { action: 'scroll', coordinate: [1, 1] } });
  assert.equal(bad.isError, true);
  assert.match(textOf(bad), /scroll_direction/);
  const { json: listed } = await rest('GET', '/v1/sandboxes');
  assert.equal(listed.sandboxes.length, 1, 'the bridge made one sandbox');
  await client.close();
  // The bridge kills its sandbox when stdin ends.
  for (let i = 0; i < 100; i++) {
    const { json } = await rest('GET', '/v1/sandboxes');
    if (json.sandboxes.length === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail('the sandbox of `deskbox mcp --create` outlived the bridge');
});

test('Streamable HTTP: a long run_command streams its lines as progress; a cancel kills it in the guest', async () => {
  const client = new Client({ name: 'deskbox-progress-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'));
  await client.connect(transport);
  try {
    const created = await client.callTool({ name: 'create_sandbox', arguments: { template: 'minimal' } });
    assert.equal(created.isError, false, textOf(created));
    const id = created.structuredContent.id;

    // A short command with progress: each line arrives as a notification, then the result.
    const lines = [];
    const done = await client.callTool(
      { name: 'run_command', arguments: { command: 'for i in 1 2 3; do echo line $i; done' } },
      undefined, { onprogress: (p) => lines.push(p) });
    assert.equal(done.structuredContent.exit_code, 0, textOf(done));
    assert.equal(done.structuredContent.stdout, 'line 1\nline 2\nline 3\n');
    assert.deepEqual(lines.map((p) => p.message), ['line 1', 'line 2', 'line 3']);
    assert.deepEqual(lines.map((p) => p.progress), [1, 2, 3], 'progress grows with each');

    // A long one, cancelled once its second line has come: the call ends, and so does the
    // command in the guest (its shell and its sleep).
    const controller = new AbortController();
    const progress = [];
    let secondLine;
    const sawSecondLine = new Promise((resolve) => { secondLine = resolve; });
    const call = client.callTool(
      { name: 'run_command', arguments: {
        command: 'echo $$ > /tmp/long.pid; for i in $(seq 1 1200); do echo tick $i; sleep 0.5; done',
        timeout_s: 900 } },
      undefined,
      { signal: controller.signal, timeout: 900_000, onprogress: (p) => {
        progress.push(p);
        if (p.message === 'tick 2') secondLine();
      } });
    await sawSecondLine;
    controller.abort(new Error('the test cancels'));
    await assert.rejects(call);
    assert.equal(await stateOf(client, '/tmp/long.pid'), 'gone', 'the cancelled command is gone in the guest');
    const { json: running } = await rest('GET', `/v1/sandboxes/${id}/commands`);
    assert.equal(running.processes.filter((p) => String(p.command).includes('tick')).length, 0,
      JSON.stringify(running));

    // Cancelling a request this session never sent is a clear error; a late cancel is not.
    const post = (body) => fetch(url + '/mcp', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
        'mcp-session-id': transport.sessionId, 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify(body),
    });
    let answer = await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 987654 } });
    assert.equal(answer.status, 404);
    assert.match((await answer.json()).error.message, /no request 987654/);
    answer = await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: {} });
    assert.equal(answer.status, 400);
    answer = await post({ jsonrpc: '2.0', id: 'late-1', method: 'ping' });
    assert.equal(answer.status, 200);
    answer = await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'late-1' } });
    assert.equal(answer.status, 202, 'a cancel that comes after the answer is late, not wrong');
    // A session the server does not know (one from before a restart) tells the client to
    // initialize again.
    answer = await fetch(url + '/mcp', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
        'mcp-session-id': 'from-before-a-restart' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    assert.equal(answer.status, 404);
    assert.match((await answer.json()).error.message, /initialize again/);
    await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: id } });
  } finally {
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
});
