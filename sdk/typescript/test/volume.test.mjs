// Volumes through the TypeScript SDK against a real deskboxd: data one sandbox writes is read
// by the next; one writer at a time; deleting a mounted volume is refused.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequestError, ConflictError, NotFoundError, Sandbox, Volume } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

describe("volumes", () => {
  let server;
  let opts;
  before(async () => {
    server = await startDeskboxd();
    opts = { server: server.url };
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("data outlives the sandbox, one writer at a time", async () => {
    const info = await Volume.create("ts-work", { ...opts, sizeMb: 32, labels: { suite: "ts" } });
    assert.deepEqual([info.name, info.sizeMb, info.labels], ["ts-work", 32, { suite: "ts" }]);
    await assert.rejects(Volume.create("ts-work", opts), ConflictError);
    const create = (volumes) => Sandbox.create({ ...opts, template: "minimal", network: false, volumes });
    const writer = await create([Volume.mount("ts-work", "/data")]);
    try {
      await writer.commands.run("echo from-typescript > /data/note", { check: true });
      const mounts = (await Volume.get("ts-work", opts)).mounts;
      assert.deepEqual(mounts, [{ sandboxId: writer.id, path: "/data", readOnly: false }]);
      await assert.rejects(create([Volume.mount("ts-work", "/data")]), ConflictError);
      await assert.rejects(Volume.delete("ts-work", opts), ConflictError);
    } finally {
      await writer.kill();
    }
    const reader = await create([Volume.mount("ts-work", "/workspace", true)]);
    try {
      assert.equal((await reader.commands.run("cat /workspace/note")).stdout, "from-typescript\n");
    } finally {
      await reader.kill();
    }
    assert.ok((await Volume.list(opts)).some((v) => v.name === "ts-work"));
    await Volume.delete("ts-work", opts);
    await assert.rejects(Volume.get("ts-work", opts), NotFoundError);
  });

  test("bad input", async () => {
    await assert.rejects(Volume.create("Not Valid", opts), BadRequestError);
    await assert.rejects(
      Sandbox.create({ ...opts, template: "minimal", network: false, volumes: [Volume.mount("never-made", "/data")] }),
      NotFoundError,
    );
  });
});
