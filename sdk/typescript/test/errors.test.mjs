// Authentication and connection errors: a deskboxd with --api-key (no sandbox needed), and a
// port nothing listens on.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";

import { AuthenticationError, ConnectionError, ConnectionFailedError, DeskboxError, Sandbox } from "../dist/index.js";
import { startDeskboxd } from "./support.mjs";

describe("API keys", () => {
  let server;
  before(async () => {
    server = await startDeskboxd(["--api-key", "right-key"]);
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("a wrong or missing key is an AuthenticationError", async () => {
    for (const apiKey of ["wrong-key", ""]) {
      await assert.rejects(Sandbox.list({ server: server.url, apiKey }), (err) => {
        assert.ok(err instanceof AuthenticationError);
        assert.ok(err instanceof DeskboxError);
        assert.equal(err.status, 401);
        assert.equal(err.code, "unauthorized");
        return true;
      });
    }
    await assert.rejects(Sandbox.connect("sb-000000000000", { server: server.url, apiKey: "wrong-key" }), AuthenticationError);
  });

  test("the right key, given or from DESKBOX_API_KEY and DESKBOX_SERVER, works", async () => {
    assert.deepEqual(await Sandbox.list({ server: server.url, apiKey: "right-key" }), []);
    const saved = { key: process.env.DESKBOX_API_KEY, server: process.env.DESKBOX_SERVER };
    process.env.DESKBOX_API_KEY = "right-key";
    process.env.DESKBOX_SERVER = server.url;
    try {
      assert.deepEqual(await Sandbox.list(), []);
    } finally {
      for (const [name, value] of [["DESKBOX_API_KEY", saved.key], ["DESKBOX_SERVER", saved.server]])
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
    }
  });
});

test("no server at the URL is a ConnectionError naming it", async () => {
  // A port that was free a moment ago.
  const port = await new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  await assert.rejects(Sandbox.list({ server: url }), (err) => {
    assert.ok(err instanceof ConnectionFailedError);
    assert.ok(err instanceof ConnectionError, "ConnectionError is an alias");
    assert.ok(err instanceof DeskboxError);
    assert.equal(err.code, "connection_failed");
    assert.equal(err.status, 0);
    assert.ok(err.message.includes(url), err.message);
    assert.match(err.message, /ECONNREFUSED/);
    return true;
  });
});
