// The SDK against a real deskboxd: one container sandbox of template `minimal`, driven through
// every part of the surface, then killed; the server stopped and its state dir removed.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import {
  BadRequestError,
  CommandExitError,
  ConflictError,
  DeskboxError,
  InvalidActionError,
  NotFoundError,
  PermissionDeniedError,
  Sandbox,
  SandboxPausedError,
  TargetNotFoundError,
} from "../dist/index.js";
import { pngSize, startDeskboxd, waitFor } from "./support.mjs";

describe("Sandbox on a real deskboxd", () => {
  let server;
  let sbx;
  let opts;

  before(async () => {
    server = await startDeskboxd();
    opts = { server: server.url };
    sbx = await Sandbox.create({
      ...opts,
      template: "minimal",
      runtime: "container",
      resolution: [1024, 768],
      timeout: 600,
      network: false,
      metadata: { suite: "ts-sdk" },
      env: { DESKBOX_TS_TEST: "from-create" },
    });
  });

  after(async () => {
    try {
      if (sbx) await sbx[Symbol.asyncDispose]();
    } finally {
      if (server) await server.stop();
    }
  });

  test("create gives an id and the asked-for sandbox; list and connect find it", async () => {
    assert.match(sbx.id, /^sb-[0-9a-f]+$/);
    const info = await sbx.info();
    assert.equal(info.id, sbx.id);
    assert.equal(info.state, "running");
    assert.equal(info.runtime, "container");
    assert.equal(info.template, "minimal");
    assert.deepEqual(info.resolution, [1024, 768]);
    assert.deepEqual(info.metadata, { suite: "ts-sdk" });
    assert.equal(info.network.policy.enabled, false);
    assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()));
    assert.ok(info.expiresAt > info.createdAt);
    assert.match(info.viewToken, /^[0-9a-f]{16,}$/);
    assert.match(info.controlToken, /^[0-9a-f]{16,}$/);

    const listed = await Sandbox.list(opts);
    assert.deepEqual(
      listed.map((s) => s.id),
      [sbx.id],
    );
    assert.equal(listed[0].viewToken, undefined, "lists carry no tokens");

    const again = await Sandbox.connect(sbx.id, opts);
    assert.equal(again.id, sbx.id);
    assert.deepEqual(await again.screenSize(), { width: 1024, height: 768 });
    assert.equal(again.streamUrl(), `${server.url}/view/${sbx.id}?token=${info.viewToken}`);
    assert.equal(again.streamUrl({ viewOnly: false }), `${server.url}/view/${sbx.id}?token=${info.controlToken}`);
    // The viewer page opens with the view token.
    const page = await fetch(sbx.streamUrl());
    assert.equal(page.status, 200);
    assert.match(page.headers.get("content-type"), /text\/html/);
    await page.arrayBuffer();
  });

  test("screenshot is a PNG of the screen's size, or of the asked size", async () => {
    const png = await sbx.screenshot();
    assert.ok(png instanceof Uint8Array);
    assert.deepEqual(pngSize(png), { width: 1024, height: 768 });
    const small = await sbx.screenshot({ format: "png", width: 512, height: 384 });
    assert.deepEqual(pngSize(small), { width: 512, height: 384 });
    const jpeg = await sbx.screenshot({ format: "jpeg", quality: 60 });
    assert.deepEqual([...jpeg.subarray(0, 3)], [0xff, 0xd8, 0xff]);
  });

  test("commands: exit code, stdout, stderr, env, cwd, stdin, argv, background, timeout", async () => {
    const r = await sbx.commands.run("echo out; echo err >&2; exit 3");
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    assert.equal(r.timedOut, false);

    const e = await sbx.commands.run('echo "$A $DESKBOX_TS_TEST"; pwd; cat', { env: { A: "x y" }, cwd: "/tmp", stdin: "fed" });
    assert.deepEqual([e.exitCode, e.stdout], [0, "x y from-create\n/tmp\nfed"]);

    const argv = await sbx.commands.run(["printf", "%s|", "a b", "c"]);
    assert.equal(argv.stdout, "a b|c|");

    const bg = await sbx.commands.run("sleep 30", { background: true });
    assert.ok(Number.isInteger(bg.pid) && bg.pid > 0);
    const ps = await sbx.commands.run(`kill ${bg.pid} && echo killed`);
    assert.equal(ps.stdout, "killed\n");

    await assert.rejects(sbx.commands.run("echo nope >&2; exit 4", { check: true }), (err) => {
      assert.ok(err instanceof CommandExitError);
      assert.equal(err.result.exitCode, 4);
      assert.equal(err.result.stderr, "nope\n");
      return true;
    });

    const slow = await sbx.commands.run("sleep 10", { timeout: 1 });
    assert.equal(slow.timedOut, true);
    assert.notEqual(slow.exitCode, 0);
  });

  test("files: write, read, readText, list, remove", async () => {
    const bytes = new Uint8Array(256).map((_, i) => i);
    assert.deepEqual(await sbx.files.write("/tmp/sdk/dir/bytes.bin", bytes), { size: 256 });
    assert.deepEqual(await sbx.files.read("/tmp/sdk/dir/bytes.bin"), bytes);
    await sbx.files.write("/tmp/sdk/text.txt", "héllo 日本語\n");
    assert.equal(await sbx.files.readText("/tmp/sdk/text.txt"), "héllo 日本語\n");
    const cat = await sbx.commands.run("cat /tmp/sdk/text.txt");
    assert.equal(cat.stdout, "héllo 日本語\n");

    const entries = await sbx.files.list("/tmp/sdk");
    assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(), [
      ["dir", "dir"],
      ["text.txt", "file"],
    ]);
    assert.equal(entries.find((e) => e.name === "text.txt").size, Buffer.byteLength("héllo 日本語\n"));

    await assert.rejects(sbx.files.remove("/tmp/sdk"), (err) => err instanceof DeskboxError && err.code === "not_empty" && err.field === "path");
    await assert.rejects(sbx.files.remove("/etc/hostname"), (err) => err instanceof PermissionDeniedError && err.status === 403);
    await sbx.files.remove("/tmp/sdk", { recursive: true });
    assert.equal(await sbx.files.exists("/tmp/sdk"), false);
    await assert.rejects(sbx.files.read("/tmp/sdk/text.txt"), (err) => err instanceof NotFoundError && err.status === 404 && err.field === "path");
  });

  test("clipboard round trip", async () => {
    await sbx.clipboard.set("clip ✓ 123");
    assert.equal(await sbx.clipboard.get(), "clip ✓ 123");
  });

  test("keyboard: typing into the desktop's xterm runs a command and changes the screen", async () => {
    // The template's autostarted xterm maps a moment after create returns.
    let windows = [];
    const xterm = await waitFor(async () => (windows = await sbx.windows()).find((w) => w.class === "XTerm" && w.visible));
    assert.ok(xterm, `an xterm window among ${JSON.stringify(windows)}`);
    assert.ok(xterm.width > 0 && xterm.height > 0 && typeof xterm.title === "string");
    await sbx.leftClick(xterm.x + Math.floor(xterm.width / 2), xterm.y + Math.floor(xterm.height / 2));
    const before = await sbx.screenshot();
    await sbx.write("echo typed-$((6*7)) > /tmp/typed.txt");
    await sbx.press("Return");
    const text = await waitFor(async () => (await sbx.files.readText("/tmp/typed.txt")).trim(), 10_000);
    assert.equal(text, "typed-42");
    const afterShot = await sbx.screenshot();
    assert.notDeepEqual(afterShot, before, "typing changed the screen");
    await sbx.press(["ctrl", "l"]);
  });

  test("mouse: move, cursor, clicks, press/release, drag, scroll; act in two dialects", async () => {
    await sbx.moveMouse(101, 202);
    assert.deepEqual(await sbx.cursor(), { x: 101, y: 202 });
    await sbx.leftClick(5, 6);
    assert.deepEqual(await sbx.cursor(), { x: 5, y: 6 });
    await sbx.rightClick(); // openbox's root menu opens; Escape closes it
    await sbx.press("Escape");
    await sbx.middleClick(7, 8);
    await sbx.doubleClick(9, 10);
    await sbx.tripleClick(11, 12);
    assert.deepEqual(await sbx.cursor(), { x: 11, y: 12 });
    await sbx.mousePress("left");
    await sbx.mouseRelease("left");
    await sbx.drag([
      [20, 20],
      [60, 70],
    ]);
    assert.deepEqual(await sbx.cursor(), { x: 60, y: 70 });
    await sbx.scroll({ dy: 1, x: 30, y: 40 });
    assert.deepEqual(await sbx.cursor(), { x: 30, y: 40 });

    const t0 = Date.now();
    await sbx.wait(200);
    assert.ok(Date.now() - t0 >= 190, "wait waited");

    const native = await sbx.act([{ type: "move", x: 13, y: 14 }, { type: "cursor_position" }]);
    assert.deepEqual(native, [{}, { x: 13, y: 14 }]);
    const anthropic = await sbx.act({ action: "mouse_move", coordinate: [15, 16] }, { dialect: "anthropic" });
    assert.equal(anthropic.length, 1);
    const openai = await sbx.act({ type: "move", x: 17, y: 18 }, { dialect: "openai" });
    assert.equal(openai.length, 1);
    assert.deepEqual(await sbx.cursor(), { x: 17, y: 18 });

    // One Claude turn's content: text, then computer toolset members, answered block by block.
    const member = (id, name, input) => ({ type: "tool_use", id, name, toolset_name: "computer", input });
    const toolResults = await sbx.runToolUses([
      { type: "text", text: "Moving, then looking." },
      member("toolu_1", "mouse_move", { coordinate: [21, 22] }),
      member("toolu_2", "cursor_position", {}),
      member("toolu_3", "zoom", { region: [768, 576, 1024, 768] }),
    ]);
    assert.deepEqual(
      toolResults.map((r) => r.tool_use_id),
      ["toolu_1", "toolu_2", "toolu_3"],
    );
    assert.deepEqual(toolResults[1].content, [{ type: "text", text: "X=21,Y=22" }]);
    assert.equal(toolResults[2].content[0].type, "image");
    assert.deepEqual(await sbx.runToolUses([{ type: "text", text: "done" }]), []);
    await assert.rejects(
      sbx.runToolUses([member("a", "left_click", { coordinate: [1, 99999] })]),
      (err) => err instanceof InvalidActionError && err.field === "[0].input.coordinate[1]",
    );
  });

  test("an off-screen coordinate is a BadRequestError naming the field", async () => {
    await assert.rejects(sbx.leftClick(5000, 10), (err) => {
      assert.ok(err instanceof InvalidActionError);
      assert.ok(err instanceof BadRequestError);
      assert.equal(err.code, "invalid_action");
      assert.equal(err.field, "x");
      assert.equal(err.status, 400);
      assert.match(err.message, /outside the 1024x768 screen/);
      return true;
    });
    await assert.rejects(sbx.act({ type: "move", x: 1, y: 99999 }), (err) => err instanceof BadRequestError && err.field === "y");
    await assert.rejects(sbx.act([{ type: "move", x: 1, y: 1 }, { type: "nope" }]), (err) => err instanceof BadRequestError && /^actions\[1\]/.test(err.field));
  });

  test("accessibility: minimal has no libatspi and says so; bad fields are named", async () => {
    await assert.rejects(sbx.accessibilityTree({ scope: "all" }), (err) => {
      assert.ok(err instanceof DeskboxError);
      assert.equal(err.status, 422);
      assert.equal(err.code, "accessibility_unavailable");
      assert.match(err.message, /libatspi not installed/);
      return true;
    });
    await assert.rejects(sbx.findElements({ name: "(", nameMatch: "regex" }), (err) => err instanceof BadRequestError && err.field === "name");
    await assert.rejects(sbx.actOnElement(":1.2/x", "press", 3), (err) => err instanceof BadRequestError && err.field === "value");
    await assert.rejects(
      sbx.leftClick({ role: "push button", name: "Save", timeoutMs: 300 }),
      (err) => err instanceof TargetNotFoundError && err.field === "target" && /libatspi not installed/.test(err.message),
    );
  });

  test("pause and resume; a paused sandbox refuses actions with a ConflictError", async () => {
    const paused = await sbx.pause();
    assert.equal(paused.state, "paused");
    await assert.rejects(sbx.moveMouse(1, 1), (err) => err instanceof SandboxPausedError && err instanceof ConflictError && err.status === 409 && err.code === "sandbox_paused");
    const resumed = await sbx.resume();
    assert.equal(resumed.state, "running");
    await sbx.moveMouse(2, 3);
    assert.deepEqual(await sbx.cursor(), { x: 2, y: 3 });
  });

  test("setTimeout moves expires_at; a bad value is a BadRequestError on timeout_s", async () => {
    const start = Date.now();
    const info = await sbx.setTimeout(1234);
    const expected = start + 1234_000;
    assert.ok(Math.abs(info.expiresAt.getTime() - expected) < 5000, `${info.expiresAt.toISOString()} ≈ +1234 s`);
    await assert.rejects(sbx.setTimeout(0), (err) => err instanceof BadRequestError && err.field === "timeout_s");
  });

  test("recording start and stop", async () => {
    const started = await sbx.recording.start();
    assert.equal(started.state, "recording");
    assert.match(started.recording, new RegExp(`^${sbx.id}-`));
    await sbx.moveMouse(50, 50);
    const stopped = await sbx.recording.stop();
    assert.equal(stopped.state, "finished");
    assert.equal(stopped.recording, started.recording);
    const mp4 = await sbx.recording.download(stopped.recording);
    assert.equal(String.fromCharCode(...mp4.subarray(4, 8)), "ftyp");
    const events = await sbx.recording.download(stopped.recording, { events: true }).catch((e) => e);
    assert.ok(events instanceof NotFoundError, "no events track unless asked for");
    await sbx.recording.delete(stopped.recording);
    await assert.rejects(sbx.recording.download(stopped.recording), NotFoundError);
  });

  test("an unknown id is a NotFoundError", async () => {
    await assert.rejects(Sandbox.connect("sb-000000000000", opts), (err) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.code, "not_found");
      assert.equal(err.field, "id");
      assert.equal(err.status, 404);
      return true;
    });
  });

  test("kill answers the sandbox as it ended and removes it; disposing after is fine", async () => {
    assert.equal(typeof Symbol.asyncDispose, "symbol");
    const ended = await sbx.kill();  // the Sandbox object, as pause and resume answer it
    assert.equal(ended.id, sbx.id);
    assert.equal(ended.state, "killed");
    assert.deepEqual(await Sandbox.list(opts), []);
    await assert.rejects(sbx.info(), NotFoundError);
    await assert.rejects(sbx.kill(), NotFoundError);
    await sbx[Symbol.asyncDispose]();
    sbx = undefined;
  });
});
