// Templates through the TypeScript SDK against a real deskboxd building with buildah: a small
// build FROM deskbox/minimal (a COPY of a file, an ENV) whose sandbox shows both, a failing
// step; and the build context's selection (.dockerignore) without a server.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { BadRequestError, IgnorePatterns, NotFoundError, Sandbox, Template, TemplateBuildError } from "../dist/index.js";
import { listContext } from "../dist/template.js";
import { startDeskboxd } from "./support.mjs";

const haveBuildah = (() => {
  try {
    execFileSync("buildah", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

async function put(path, text) {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, text);
}

describe("the build context", () => {
  test(".dockerignore patterns as Docker reads them", () => {
    const ignore = new IgnorePatterns("# comment\n*.log\n/build/\nsecret\n!secret/ok.txt\n**/*.tmp\ndocs/**\n  spaced  \n./dot/\n");
    const cases = {
      "a.log": true,
      "app/a.log": false,
      build: true,
      "build/x.o": true,
      "secret/key": true,
      "secret/ok.txt": false,
      "x.tmp": true,
      "deep/er/x.tmp": true,
      docs: false,
      "docs/a/b.md": true,
      spaced: true,
      "dot/x": true,
      Dockerfile: false,
    };
    for (const [path, excluded] of Object.entries(cases)) assert.equal(ignore.excluded(path), excluded, path);
    assert.equal(ignore.hasExceptions, true);
  });

  test("links are listed as links, the Dockerfile always", async () => {
    const dir = await mkdtemp(join(tmpdir(), "deskbox-ts-context-"));
    try {
      await put(join(dir, "Dockerfile"), "FROM deskbox/minimal\n");
      await put(join(dir, ".dockerignore"), "*.log\nbuild\nDockerfile\n");
      await put(join(dir, "app", "main.js"), "1");
      await put(join(dir, "x.log"), "no");
      await put(join(dir, "build", "out"), "no");
      await symlink("/etc", join(dir, "link"));
      const entries = await listContext(dir, new IgnorePatterns("*.log\nbuild\nDockerfile\n"), ["Dockerfile", ".dockerignore"]);
      assert.deepEqual(entries, [".dockerignore", "Dockerfile", "app", "app/main.js", "link"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("Template on a real deskboxd", { skip: !haveBuildah && "buildah is not installed" }, () => {
  let server;
  let opts;

  before(async () => {
    server = await startDeskboxd();
    opts = { server: server.url };
  });

  after(async () => {
    if (server) await server.stop();
  });

  test("build from a context, then a sandbox of it has the file and the variable", async () => {
    const ctx = await mkdtemp(join(tmpdir(), "deskbox-ts-template-"));
    let build;
    const pieces = [];
    try {
      await put(join(ctx, "Dockerfile"), "FROM deskbox/minimal\nCOPY hello.txt /etc/ts-hello.txt\nENV TS_TEMPLATE=typescript\n");
      await put(join(ctx, "hello.txt"), "hello from typescript");
      await put(join(ctx, ".dockerignore"), "*.log\n");
      await put(join(ctx, "debug.log"), "left out");
      build = await Template.build("sdk-ts", { ...opts, context: ctx, tag: "v1", network: false, onLog: (text) => pieces.push(text) });
    } finally {
      await rm(ctx, { recursive: true, force: true });
    }
    const log = pieces.join("");
    assert.equal(build.status, "succeeded");
    assert.equal(build.template, "sdk-ts:v1");
    assert.equal(build.steps, 3);
    assert.match(log, /STEP 2\/3: COPY hello.txt \/etc\/ts-hello.txt\n/);
    assert.match(log, /deskbox: template sdk-ts:v1 is ready/);
    assert.equal(await Template.logs(build.buildId, opts), log);

    const listed = Object.fromEntries((await Template.list(opts)).map((t) => [t.template, t]));
    assert.equal(listed["sdk-ts:v1"].kind, "user");
    assert.equal(listed["minimal"].kind, "shipped");
    assert.ok(listed["sdk-ts:v1"].bytes > 0);

    const sbx = await Sandbox.create({ ...opts, template: "sdk-ts:v1", network: false });
    try {
      const r = await sbx.commands.run("cat /etc/ts-hello.txt; echo; printenv TS_TEMPLATE");
      assert.equal(r.stdout, "hello from typescript\ntypescript\n");
    } finally {
      await sbx.kill();
    }
    await Template.delete("sdk-ts:v1", opts);
    await assert.rejects(Template.get("sdk-ts:v1", opts), NotFoundError);
  });

  test("a failing step throws with its step, exit code and the log's end", async () => {
    const error = await Template.build("sdk-ts-fail", {
      ...opts,
      dockerfile: "FROM deskbox/minimal\nRUN echo about to fail\nRUN exit 3\n",
      network: false,
    }).then(
      () => assert.fail("the build succeeded"),
      (e) => e,
    );
    assert.ok(error instanceof TemplateBuildError, String(error));
    assert.equal(error.build.status, "failed");
    assert.equal(error.code, "step_failed");
    assert.equal(error.step, 3);
    assert.equal(error.instruction, "RUN exit 3");
    assert.equal(error.exitCode, 3);
    assert.match(error.logTail, /about to fail/);
    assert.match(error.message, /failing step: 3\/3 RUN exit 3/);
  });

  test("bad input is refused naming the field", async () => {
    const bad = await Template.build("sdk-ts-bad", { ...opts, dockerfile: "FROM deskbox/minimal\nFROB x\n" }).catch((e) => e);
    assert.ok(bad instanceof BadRequestError, String(bad));
    assert.equal(bad.field, "dockerfile");
    assert.match(bad.message, /line 2/);
    const notTar = await Template.importArchive("sdk-ts-bad", new TextEncoder().encode("not a tar"), opts).catch((e) => e);
    assert.ok(notTar instanceof BadRequestError, String(notTar));
    assert.equal(notTar.field, "upload_id");
    // This server allows no registry (deskboxd --template-registry): refused before a pull.
    const unlisted = await Template.importImage("sdk-ts-bad", "registry.example:5000/team/app:1", opts).catch((e) => e);
    assert.ok(unlisted instanceof BadRequestError, String(unlisted));
    assert.equal(unlisted.field, "image");
    assert.match(unlisted.message, /--template-registry/);
  });
});
