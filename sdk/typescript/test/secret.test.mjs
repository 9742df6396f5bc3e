// Secrets through the TypeScript SDK against a real deskboxd: set, list (names only), replace,
// delete; bad input is a BadRequestError.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequestError, NotFoundError, Secret } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

describe("secrets", () => {
  let server;
  let opts;
  before(async () => {
    server = await startDeskboxd();
    opts = { server: server.url };
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("write-only: names and times, never a value", async () => {
    const info = await Secret.set("ts-gh", "Bearer ts-value-123", opts);
    assert.equal(info.name, "ts-gh");
    assert.ok(!JSON.stringify(info.raw).includes("ts-value"));
    await Secret.set("ts-gh", "Bearer ts-value-456", opts);
    const listed = await Secret.list(opts);
    assert.deepEqual(listed.map((s) => s.name), ["ts-gh"]);
    assert.ok(!JSON.stringify(listed).includes("ts-value"));
    await Secret.delete("ts-gh", opts);
    await assert.rejects(Secret.delete("ts-gh", opts), NotFoundError);
  });

  test("bad input", async () => {
    await assert.rejects(Secret.set("no/slash", "v", opts), BadRequestError);
    await assert.rejects(Secret.set("ok", "a\nb", opts), BadRequestError);
    await assert.rejects(Secret.set("ok", "v".repeat(9000), opts), BadRequestError);
  });
});
