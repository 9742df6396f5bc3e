// Lifecycle events through the TypeScript SDK against a real deskboxd: the stream from the
// log's start, a live event after an id, a refused type named, and a signal that ends the loop.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequestError, Sandbox, events, parseEventBlocks } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

async function take(iterable, n) {
  const out = [];
  for await (const e of iterable) {
    out.push(e);
    if (out.length === n) break;
  }
  return out;
}

describe("events", () => {
  let server;
  let opts;
  before(async () => {
    server = await startDeskboxd([]);
    opts = { server: server.url };
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("from the log, then live after an id", async () => {
    const sb = await Sandbox.create({ ...opts, network: false, template: "minimal", runtime: "container" });
    await sb.kill();
    const [created, killed] = await take(events({ ...opts, after: 0, types: ["created", "killed"] }), 2);
    assert.equal(created.type, "created");
    assert.equal(created.sandbox_id, sb.id);
    assert.equal(killed.type, "killed");
    assert.ok(killed.id > created.id);

    const next = take(events({ ...opts, after: killed.id, types: ["killed"] }), 1);
    const other = await Sandbox.create({ ...opts, network: false, template: "minimal", runtime: "container" });
    await other.kill();
    const [live] = await next;
    assert.equal(live.sandbox_id, other.id);
    assert.equal(live.type, "killed");
  });

  test("a bad type is named, and a signal ends the loop", async () => {
    await assert.rejects(take(events({ ...opts, types: ["exploded"] }), 1), (e) => e instanceof BadRequestError && e.field === "types");
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 300);
    const got = await take(events({ ...opts, signal: controller.signal }), 1);
    assert.deepEqual(got, []);
  });

  test("blocks are parsed whole, comments skipped, a cut block kept", () => {
    const { events: parsed, rest } = parseEventBlocks(': keep-alive\n\nid: node-a:4\nevent: ready\ndata: {"id":"node-a:4","type":"ready"}\n\nid: 3\nevent: killed\ndata: {"id":3,"type":"killed"}\n\nid: 5\nda');
    // The second is a server from before ids named their node: its number becomes a string.
    assert.deepEqual(parsed.map((e) => e.id), ["node-a:4", "3"]);
    assert.equal(rest, "id: 5\nda");
  });
});
