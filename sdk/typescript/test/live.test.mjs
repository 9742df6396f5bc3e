// Stream clients of the TypeScript SDK against a real deskboxd: a stream command's output read
// while it runs, its stdin and kill by pid; the screen stream's hello and a JPEG frame over the
// SDK's own WebSocket client; a window waited for by its title; mkdir and directory listing.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { ConflictError, NotFoundError, Sandbox } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

describe("live streams", () => {
  let server;
  let sb;
  before(async () => {
    server = await startDeskboxd([]);
    sb = await Sandbox.create({ server: server.url, network: false, template: "minimal", runtime: "container" });
  });
  after(async () => {
    if (sb) await sb.kill();
    if (server) await server.stop();
  });

  test("a stream command's output arrives while it runs", async () => {
    const run = await sb.commands.stream("echo first; while [ ! -e /tmp/go-ts ]; do sleep 0.05; done; echo second");
    const it = run[Symbol.asyncIterator]();
    const first = await it.next();
    // It cannot end before /tmp/go-ts exists: the first line came while it ran.
    assert.equal(first.value.text, "first\n");
    assert.ok((await sb.commands.list()).some((p) => p.pid === run.pid));
    await sb.files.write("/tmp/go-ts", "x");
    let rest = "";
    for (let next = await it.next(); !next.done; next = await it.next()) rest += next.value.text;
    assert.equal(rest, "second\n");
    assert.equal(run.exit.exitCode, 0);
  });

  test("stdin to a running command, and kill by pid", async () => {
    const run = await sb.commands.stream("cat", { stdinOpen: true });
    await run.writeStdin("echo me\n");
    const it = run[Symbol.asyncIterator]();
    assert.equal((await it.next()).value.text, "echo me\n");
    await run.kill("TERM");
    assert.equal((await it.next()).done, true);
    assert.equal(run.exit.signal, 15);
    await assert.rejects(sb.commands.writeStdin(run.pid, "late\n"), NotFoundError);
    await assert.rejects(sb.commands.kill(run.pid), NotFoundError);
  });

  test("the screen stream, and a window by its title", async () => {
    const live = await sb.live({ codec: "jpeg", fps: 5 });
    const hello = await live.next();
    assert.equal(hello.kind, "event");
    assert.equal(hello.event.type, "hello");
    let frame;
    while (!frame) {
      const message = await live.next();
      if (message.kind === "frame") frame = message.frame;
    }
    live.close();
    assert.equal(frame.codec, "jpeg");
    assert.deepEqual([frame.data[0], frame.data[1]], [0xff, 0xd8]);
    await sb.commands.run("xterm -T deskbox-ts-window -e sleep 60", { background: true });
    const window = await sb.waitForWindow("deskbox-ts-window", { timeoutMs: 30_000 });
    assert.equal(window.title, "deskbox-ts-window");
  });

  test("mkdir and list", async () => {
    await sb.files.mkdir("/tmp/ts-made/inner", { parents: true });
    await sb.files.write("/tmp/ts-made/inner/a.txt", "a");
    assert.deepEqual((await sb.files.list("/tmp/ts-made/inner")).map((e) => e.name), ["a.txt"]);
    await assert.rejects(sb.files.mkdir("/tmp/ts-made"), ConflictError);
    await assert.rejects(sb.files.list("/tmp/ts-made/inner/a.txt"), ConflictError);
  });
});
