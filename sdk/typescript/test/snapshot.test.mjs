// Snapshots, fork and auto-resume through the TypeScript SDK against a real deskboxd: a sandbox
// started from a snapshot has the files its source wrote and the source's settings; a fork's
// copies too; a sandbox its timeout paused resumes for the next command.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequestError, ConflictError, NotFoundError, Sandbox, Snapshot } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

describe("snapshots", () => {
  let server;
  let opts;
  let create;
  before(async () => {
    server = await startDeskboxd();
    opts = { server: server.url };
    create = (options) => Sandbox.create({ ...opts, network: false, ...options });
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("a sandbox starts from a snapshot", async () => {
    const source = await create({ template: "minimal", runtime: "container", resolution: [1024, 768] });
    let info;
    try {
      await source.commands.run("echo from-typescript > /home/user/note", { check: true });
      info = await source.snapshot("ts-snap", { metadata: { suite: "ts" } });
      assert.deepEqual(
        [info.name, info.kind, info.runtime, info.template, info.sourceSandbox, info.metadata, info.resolution],
        ["ts-snap", "filesystem", "container", "minimal", source.id, { suite: "ts" }, [1024, 768]],
      );
      assert.ok(!Number.isNaN(info.createdAt.getTime()));
      await assert.rejects(source.snapshot("ts-snap"), ConflictError);
    } finally {
      await source.kill();
    }
    assert.equal((await Snapshot.get("ts-snap", opts)).sourceSandbox, source.id);
    assert.ok((await Snapshot.list(opts)).some((s) => s.name === "ts-snap"));
    const copy = await create({ snapshot: "ts-snap" });
    try {
      assert.equal((await copy.commands.run("cat /home/user/note")).stdout, "from-typescript\n");
      const described = await copy.info();
      assert.deepEqual([described.snapshotName, described.template, described.resolution], ["ts-snap", "minimal", [1024, 768]]);
    } finally {
      await copy.kill();
    }
    await assert.rejects(create({ snapshot: "ts-snap", resolution: [800, 600] }), BadRequestError);
    await Snapshot.delete("ts-snap", opts);
    await assert.rejects(Snapshot.get("ts-snap", opts), NotFoundError);
    await assert.rejects(Snapshot.delete("ts-snap", opts), NotFoundError);
  });

  test("fork starts copies", async () => {
    const source = await create({ template: "minimal", runtime: "container" });
    let forks = [];
    try {
      await source.commands.run("echo before-fork > /home/user/note", { check: true });
      forks = await source.fork({ count: 2, metadata: { role: "fork" } });
      assert.equal(forks.length, 2);
      assert.equal(new Set([source.id, ...forks.map((f) => f.id)]).size, 3);
      for (const f of forks) {
        assert.equal((await f.commands.run("cat /home/user/note")).stdout, "before-fork\n");
        assert.deepEqual((await f.info()).metadata, { role: "fork" });
      }
      // Each copy is its own: a write in one is not in the other nor in the source.
      await forks[0].commands.run("echo changed > /home/user/note", { check: true });
      assert.equal((await forks[1].commands.run("cat /home/user/note")).stdout, "before-fork\n");
      assert.equal((await source.commands.run("cat /home/user/note")).stdout, "before-fork\n");
      await assert.rejects(source.fork({ count: 0 }), BadRequestError);
      await assert.rejects(source.fork({ count: 17 }), BadRequestError);
    } finally {
      for (const f of forks) await f.kill();
      await source.kill();
    }
  });

  test("auto-resume after the timeout", async () => {
    const sbx = await create({ template: "minimal", runtime: "container", timeout: 1, autoResume: true });
    try {
      const described = await sbx.info();
      assert.deepEqual([described.onTimeout, described.autoResume], ["pause", true]);
      // Sandbox.list never resumes one: wait there for the timeout's pause.
      const deadline = Date.now() + 30_000;
      let listed;
      while (Date.now() < deadline) {
        listed = (await Sandbox.list(opts)).find((s) => s.id === sbx.id);
        if (listed?.state === "paused") break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      assert.deepEqual([listed?.state, listed?.pausedReason], ["paused", "timeout"]);
      assert.equal((await sbx.commands.run("echo awake")).stdout, "awake\n");
    } finally {
      await sbx.kill();
    }
  });

  test("bad input", async () => {
    await assert.rejects(create({ snapshot: "never-made" }), NotFoundError);
    await assert.rejects(create({ template: "minimal", autoResume: true, onTimeout: "kill" }), BadRequestError);
    const sbx = await create({ template: "minimal", runtime: "container" });
    try {
      await assert.rejects(sbx.snapshot("Not Valid"), BadRequestError);
    } finally {
      await sbx.kill();
    }
  });
});
