// Secrets through the TypeScript SDK against a real deskboxd: set, list (names only), replace,
// delete; bad input is a BadRequestError. A sandbox's network policy changed live (setNetwork).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequestError, NotFoundError, Sandbox, Secret } from "../dist/index.js";
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

  test("setNetwork changes the policy live; null takes a part away", async () => {
    const sbx = await Sandbox.create({ ...opts, template: "minimal", runtime: "container", timeout: 600, network: { allow: ["a.test"] } });
    try {
      let net = await sbx.setNetwork({ allow: ["b.test"], deny: ["c.test"], egressKbps: 800 });
      assert.deepEqual(net.policy.allow, ["b.test"]);
      assert.deepEqual(net.policy.deny, ["c.test"]);
      assert.equal(net.egress_kbps, 800);
      net = await sbx.setNetwork({ allow: null });
      assert.equal(net.policy.allow, "all public addresses");
      assert.deepEqual(net.policy.deny, ["c.test"]);
      await assert.rejects(sbx.setNetwork({ allow: "b.test" }), (e) => e instanceof BadRequestError && e.field === "allow");
    } finally {
      await sbx.kill();
    }
  });
});
