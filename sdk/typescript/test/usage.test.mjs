// Usage and metrics through the TypeScript SDK against a real deskboxd sampling every second: a
// sandbox's samples, usage grouped by a metadata key (JSON and CSV), and a bad parameter named.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequestError, NotFoundError, Sandbox, metrics, usage, usageCsv } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

describe("usage", () => {
  let server;
  let opts;
  before(async () => {
    server = await startDeskboxd(["--usage-sample-s", "1", "--price-gib-second", "0.001"]);
    opts = { server: server.url };
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("samples and usage by customer", async () => {
    const sb = await Sandbox.create({ ...opts, network: false, template: "minimal", runtime: "container", metadata: { customer: "ts" } });
    try {
      await sb.commands.run("timeout 1 sh -c 'while :; do :; done'; true", { check: true });
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline && (await metrics(sb.id, opts)).samples.length < 2) await new Promise((r) => setTimeout(r, 200));
      const { samples } = await metrics(sb.id, opts);
      assert.ok(samples.length >= 2);
      assert.ok(samples.at(-1).totals.cpu_seconds > 0.2, JSON.stringify(samples.at(-1)));
      assert.ok((await metrics(sb.id, { ...opts, step: 3600 })).samples.length <= 2);
    } finally {
      await sb.kill();
    }
    const report = await usage({ ...opts, groupBy: "metadata.customer", from: new Date(Date.now() - 3600_000) });
    assert.deepEqual(report.groups.map((g) => g.key), ["ts"]);
    const group = report.groups[0];
    assert.equal(group.sandboxes, 1);
    assert.ok(Math.abs(group.cost - group.memory_reserved_gib_seconds * 0.001) < 1e-9);
    assert.ok((await usageCsv({ ...opts, groupBy: "day" })).startsWith("key,sandboxes,"));
  });

  test("bad parameters are named", async () => {
    await assert.rejects(usage({ ...opts, groupBy: "customer" }), (e) => e instanceof BadRequestError && e.field === "group_by");
    await assert.rejects(metrics("sb-000000000000", opts), NotFoundError);
    await assert.rejects(usage({ ...opts, from: "yesterday" }), (e) => e instanceof BadRequestError && e.field === "from");
  });
});
