// Seeing the screen against a real deskboxd: locate, ocr, compare, waitFor..., and actions aimed
// at a text or an image. One container sandbox of template `minimal` with a second xterm (a
// larger font, a known place) into which the test types
//   W=APPLE / echo PINE$W / echo MANGO$W MANGO$W
// so the words searched for appear only where the shell printed them.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { BadRequestError, DeskboxError, Sandbox, TargetNotFoundError, WaitTimeoutError } from "../dist/index.js";
import { Picture, checkerboard, pngSize, startDeskboxd, waitFor } from "./support.mjs";

const FONT = ["-fa", "DejaVu Sans Mono", "-fs", "16", "-bg", "white", "-fg", "black"];
const PARK = [1270, 10]; // where the pointer waits, away from everything looked at
const STILL = [1180, 700, 80, 80]; // bare desktop no window covers
// Clicks on one spot apart by more than xterm's double-click time (250 ms), else the second
// one selects a word and the screen no longer looks as the templates do.
const singleClicks = () => new Promise((resolve) => setTimeout(resolve, 600));

const boxOf = (m) => [m.x, m.y, m.width, m.height];
const inside = ([x, y, w, h], [ox, oy, ow, oh]) => ox <= x && oy <= y && x + w <= ox + ow && y + h <= oy + oh;
const intersects = ([x, y, w, h], [ox, oy, ow, oh]) => x < ox + ow && ox < x + w && y < oy + oh && oy < y + h;

describe("seeing the screen on a real deskboxd", () => {
  let server;
  let sbx;
  let term; // the test's xterm window
  let termBox;
  let dir;

  async function startXterm(args, lives) {
    const xterms = async () => (await sbx.windows()).filter((w) => w.class === "XTerm" && w.visible);
    await waitFor(async () => (await xterms()).length > 0, 20_000);
    const before = new Set((await xterms()).map((w) => w.id));
    await sbx.commands.run(["xterm", ...FONT, ...args, ...(lives ? ["-e", "sh", "-c", lives] : [])], { background: true });
    const fresh = await waitFor(async () => (await xterms()).find((w) => !before.has(w.id)), 20_000);
    assert.ok(fresh, `the xterm ${args} appeared`);
    return fresh;
  }

  /** A patch over the first lines of the test's xterm: found nowhere else on the screen. */
  async function template() {
    const pic = Picture.fromPng(await sbx.screenshot());
    const box = [term.x + 4, term.y + 3, Math.min(360, term.width - 8), Math.floor((term.height * 3) / 10)];
    return { tpl: pic.crop(...box), box };
  }

  before(async () => {
    server = await startDeskboxd();
    dir = await mkdtemp(join(tmpdir(), "deskbox-ts-vision-"));
    sbx = await Sandbox.create({ server: server.url, template: "minimal", runtime: "container", timeout: 600, network: false });
    // Typed before its shell reads the terminal, a line is echoed twice (by the tty, then by
    // readline after the prompt): wait for bash's first prompt.
    const prompt = "/tmp/vision-prompt";
    term = await startXterm(["-geometry", "64x10+40+40", "-e", "env", `PROMPT_COMMAND=touch ${prompt}`, "bash"]);
    assert.ok(await waitFor(() => sbx.files.exists(prompt), 15_000), "the test's xterm showed a prompt");
    termBox = boxOf(term);
    await sbx.leftClick(term.x + 30, term.y + term.height - 10);
    for (const line of ["W=APPLE", "echo PINE$W", "echo MANGO$W MANGO$W", "touch /tmp/vision-ready"]) await sbx.write(line + "\n");
    assert.ok(await waitFor(() => sbx.files.exists("/tmp/vision-ready"), 15_000), "the typed commands ran");
    await sbx.moveMouse(...PARK);
    await new Promise((resolve) => setTimeout(resolve, 500));
  });

  after(async () => {
    try {
      if (sbx) await sbx[Symbol.asyncDispose]();
    } finally {
      if (dir) await rm(dir, { recursive: true, force: true });
      if (server) await server.stop();
    }
  });

  test("locate an image cut from a screenshot: bytes, Buffer, path, data: URL, grayscale, region, alpha", async () => {
    const { tpl, box } = await template();
    const png = tpl.toPng();
    const found = await sbx.locate({ image: png });
    assert.ok(found.length >= 1, JSON.stringify(found));
    assert.deepEqual(boxOf(found[0]), box);
    assert.ok(found[0].score > 0.99 && found[0].score <= 1, `score ${found[0].score}`);
    assert.equal(found[0].scale, 1);
    assert.equal(found[0].text, undefined);
    assert.ok(Math.abs(found[0].center[0] - (box[0] + box[2] / 2)) <= 1 && Math.abs(found[0].center[1] - (box[1] + box[3] / 2)) <= 1);
    assert.ok(found.frameVersion > 0, "frameVersion");
    assert.ok(found.elapsedMs >= 0, "elapsedMs");
    assert.deepEqual(Object.keys(found), [...found.keys()].map(String), "the extras are not enumerable");

    const path = join(dir, "template.png");
    await writeFile(path, png);
    const dataUrl = "data:image/png;base64," + Buffer.from(png).toString("base64");
    for (const image of [Buffer.from(png), png.buffer.slice(png.byteOffset, png.byteOffset + png.byteLength), path, dataUrl])
      assert.deepEqual(boxOf((await sbx.locate({ image }))[0]), box);
    assert.deepEqual(boxOf((await sbx.locate({ image: png, grayscale: true }))[0]), box);
    assert.deepEqual(boxOf((await sbx.locate({ image: png, region: term }))[0]), box);
    assert.deepEqual(await sbx.locate({ image: png, region: [0, 500, 1280, 300] }), []);
    assert.ok((await sbx.locate({ image: png, maxResults: 1, threshold: 0.1 })).length <= 1);

    // Transparent pixels are left out: the right half painted over but transparent still matches.
    const half = Math.floor(tpl.width / 2);
    const masked = tpl.withAlpha().paint(half, 0, tpl.width - half, tpl.height, () => [255, 0, 255, 0]);
    const m = await sbx.locate({ image: masked.toPng() });
    assert.ok(m.length >= 1);
    assert.deepEqual(boxOf(m[0]), box);
    assert.ok(m[0].score > 0.95, `score ${m[0].score}`);

    assert.deepEqual(await sbx.locate({ image: checkerboard() }), []);
  });

  test("locate errors name the field", async () => {
    const cases = [
      [{ image: new Uint8Array([1, 2, 3]) }, "image"],
      [{ image: checkerboard(), threshold: 2 }, "threshold"],
      [{ image: checkerboard(), maxResults: 0 }, "max_results"],
      [{ image: checkerboard(), scales: [10] }, "scales"],
      [{ image: checkerboard(), region: [1200, 700, 200, 200] }, "region"],
      [{ text: "" }, "text"],
      [{ text: "x", lang: "no_such_language" }, "lang"],
    ];
    for (const [query, field] of cases)
      await assert.rejects(sbx.locate(query), (err) => {
        assert.ok(err instanceof BadRequestError, `${field}: ${err}`);
        assert.equal(err.status, 400);
        assert.equal(err.field, field);
        return true;
      });
    await assert.rejects(sbx.locate({ image: "/no/such/template.png" }), /ENOENT/);
  });

  test("locate text: case-insensitive substrings in reading order, exact whole words", async () => {
    const pine = await sbx.locate({ text: "PINEAPPLE" });
    assert.equal(pine.length, 1, JSON.stringify(pine));
    assert.match(pine[0].text, /PINEAPPLE/i);
    assert.ok(inside(boxOf(pine[0]), termBox), `${boxOf(pine[0])} in ${termBox}`);
    assert.deepEqual((await sbx.locate({ text: "pineapple" })).map(boxOf), [boxOf(pine[0])]);
    assert.deepEqual((await sbx.locate({ text: "PINEAPPLE", exact: true })).map(boxOf), [boxOf(pine[0])]);
    assert.deepEqual(await sbx.locate({ text: "pineapple", exact: true }), []);

    const apples = await sbx.locate({ text: "APPLE", region: term, lang: "eng" });
    assert.equal(apples.length, 4, JSON.stringify(apples)); // W=APPLE, PINEAPPLE, 2 x MANGOAPPLE
    const [line1, p, mango1, mango2] = apples;
    assert.ok(line1.y + line1.height <= p.y + 1 && p.y + p.height <= mango1.y + 1, "top to bottom");
    assert.ok(Math.abs(mango1.y - mango2.y) <= 2 && mango1.x + mango1.width <= mango2.x + 1, "left to right");
  });

  test("ocr reads what was typed, with lines and words", async () => {
    const r = await sbx.ocr({ region: term });
    assert.match(r.text, /PINEAPPLE/);
    assert.match(r.text, /MANGOAPPLE MANGOAPPLE/);
    assert.equal(r.text, r.lines.map((l) => l.text).join("\n"));
    assert.ok(r.frameVersion > 0);
    const words = r.words.filter((w) => w.text === "PINEAPPLE");
    assert.equal(words.length, 1, JSON.stringify(r.words));
    assert.ok(inside(boxOf(words[0]), termBox));
    assert.ok(words[0].confidence >= 0 && words[0].confidence <= 100);
    assert.match(r.lines[words[0].line].text, /PINEAPPLE/);
    const mangos = r.words.filter((w) => w.text === "MANGOAPPLE");
    assert.equal(mangos.length, 2);
    assert.equal(mangos[0].line, mangos[1].line);
    assert.match((await sbx.ocr()).text, /PINEAPPLE/);
    const strict = await sbx.ocr({ region: term, minConfidence: 99.9, lang: "eng" });
    assert.ok(strict.words.every((w) => w.confidence >= 99.9));
    await assert.rejects(sbx.ocr({ region: [0, 0, 5000, 10] }), (err) => err instanceof BadRequestError && err.field === "region");
  });

  test("compare: identical with itself, a painted rectangle reported, masks, regions, tolerance, diff", async () => {
    const shot = await sbx.screenshot();
    const same = await sbx.compare(shot);
    assert.equal(same.identical, true);
    assert.deepEqual([same.changedPixels, same.changedRatio, same.changed, same.psnr], [0, 0, [], null]);
    assert.ok(Math.abs(same.ssim - 1) < 1e-6);
    assert.deepEqual([same.width, same.height], [1280, 800]);
    assert.equal(same.diffImage, undefined);

    const pic = Picture.fromPng(shot);
    const box = [100, 300, 50, 30];
    const painted = pic.invert(...box).toPng();
    const r = await sbx.compare(painted, { diff: true });
    assert.equal(r.identical, false);
    assert.deepEqual(r.changed, [box]);
    assert.equal(r.changedPixels, 1500);
    assert.ok(Math.abs(r.changedRatio - 1500 / (1280 * 800)) < 1e-6);
    assert.ok(typeof r.psnr === "number" && r.psnr > 0);
    assert.ok(r.ssim < 1);
    assert.deepEqual(pngSize(r.diffImage), { width: 1280, height: 800 });

    assert.equal((await sbx.compare(painted, { mask: [box] })).identical, true);
    const half = await sbx.compare(painted, { mask: [{ x: 100, y: 300, width: 25, height: 30 }] });
    assert.deepEqual([half.changedPixels, half.changed], [750, [[125, 300, 25, 30]]]);
    const region = [90, 290, 70, 50];
    const part = await sbx.compare(Picture.fromPng(painted).crop(...region).toPng(), { region });
    assert.deepEqual([part.width, part.height, part.changed, part.changedPixels], [70, 50, [box], 1500]);

    const shifted = pic.paint(300, 500, 40, 20, (p) => p.map((v) => (v < 128 ? v + 10 : v - 10))).toPng();
    assert.equal((await sbx.compare(shifted, { tolerance: 10 })).identical, true);
    const off = await sbx.compare(shifted, { tolerance: 9 });
    assert.deepEqual([off.identical, off.changedPixels, off.changed], [false, 800, [[300, 500, 40, 20]]]);

    await assert.rejects(sbx.compare(checkerboard()), (err) => err instanceof BadRequestError && err.field === "baseline");
    await assert.rejects(sbx.compare(shot, { tolerance: 256 }), (err) => err instanceof BadRequestError && err.field === "tolerance");
    await assert.rejects(sbx.compare(shot, { mask: [[1270, 790, 20, 20]] }), (err) => err instanceof BadRequestError && err.field === "mask[0]");
  });

  test("waitFor change after typing, stable, and a timeout that is a result (or with check an error)", async () => {
    await sbx.leftClick(term.x + 30, term.y + term.height - 10);
    await sbx.moveMouse(...PARK);
    const still = await sbx.waitUntilStable({ stableMs: 300, timeoutMs: 5000 });
    assert.equal(still.matched, true);
    assert.equal(still.until, "stable");
    try {
      await sbx.write("z");
      const r = await sbx.waitForChange({ since: still.frameVersion, timeoutMs: 5000 });
      assert.equal(r.matched, true, JSON.stringify(r.raw));
      assert.equal(r.until, "change");
      assert.ok(r.frameVersion > still.frameVersion);
      assert.ok(r.changed.length >= 1);
      for (const b of r.changed) assert.ok(intersects(b, termBox), `${b} in the xterm ${termBox}`);
    } finally {
      await sbx.press("BackSpace");
    }

    const t0 = Date.now();
    const quiet = await sbx.waitForChange({ region: STILL, timeoutMs: 400 });
    assert.equal(quiet.matched, false);
    assert.ok(quiet.elapsedMs >= 350 && Date.now() - t0 >= 350 && Date.now() - t0 < 5000);
    await assert.rejects(sbx.waitForText("NO-SUCH-WORD-ON-SCREEN", { timeoutMs: 300, check: true }), (err) => {
      assert.ok(err instanceof WaitTimeoutError && err instanceof DeskboxError);
      assert.equal(err.code, "wait_timeout");
      assert.equal(err.result.matched, false);
      assert.equal(err.result.until, "text");
      return true;
    });
    await assert.rejects(sbx.waitFor("forever"), (err) => err instanceof BadRequestError && err.field === "until");
  });

  test("waitForText, waitUntilGone and waitForImage as a window comes and goes", async () => {
    const lives = "sleep 1; echo KUMQUAT; sleep 6";
    const geometry = ["-geometry", "20x3+700+420"];
    await startXterm(geometry, lives);
    const appeared = await sbx.waitForText("KUMQUAT", { timeoutMs: 15_000, check: true });
    assert.match(appeared.match.text, /KUMQUAT/i);
    assert.ok(!intersects(boxOf(appeared.match), termBox));
    const m = appeared.match;
    const cut = [m.x - 3, m.y - 3, m.width + 6, m.height + 6];
    const patch = Picture.fromPng(await sbx.screenshot()).crop(...cut).toPng();
    assert.deepEqual(boxOf((await sbx.locate({ image: patch }))[0]), cut);

    const gone = await sbx.waitUntilGone({ image: patch }, { timeoutMs: 15_000 });
    assert.equal(gone.matched, true);
    assert.equal(gone.until, "gone");
    assert.deepEqual(await sbx.locate({ text: "KUMQUAT" }), []);

    await startXterm(geometry, lives);
    const back = await sbx.waitForImage(patch, { timeoutMs: 15_000 });
    assert.equal(back.matched, true);
    assert.equal(back.until, "image");
    assert.deepEqual([back.match.width, back.match.height], [cut[2], cut[3]]);
    assert.equal((await sbx.waitUntilGone({ text: "KUMQUAT" }, { timeoutMs: 15_000 })).matched, true);
  });

  test("actions aimed at a text or an image", async () => {
    try {
      const where = (await sbx.locate({ text: "PINEAPPLE" }))[0];
      const clicked = await sbx.clickText("PINEAPPLE");
      assert.deepEqual(boxOf(clicked), boxOf(where));
      assert.deepEqual(await sbx.cursor(), { x: clicked.center[0], y: clicked.center[1] });
      const moved = await sbx.moveMouse({ text: "PINEAPPLE", offset: [3, -2] });
      assert.deepEqual(await sbx.cursor(), { x: moved.center[0] + 3, y: moved.center[1] - 2 });
      const mangos = await sbx.locate({ text: "MANGOAPPLE" });
      const second = await sbx.moveMouse({ text: "MANGOAPPLE", index: 1 });
      assert.deepEqual(boxOf(second), boxOf(mangos[1]));

      // A double click on a word selects it; xterm copies the selection to the clipboard.
      await sbx.clipboard.set("before");
      await singleClicks();
      const dbl = await sbx.doubleClick({ text: "PINEAPPLE", exact: true });
      assert.deepEqual(boxOf(dbl), boxOf(where));
      assert.equal(await waitFor(async () => (await sbx.clipboard.get()) === "PINEAPPLE", 5000), true, await sbx.clipboard.get());
      await singleClicks();
      await sbx.leftClick(term.x + 30, term.y + term.height - 10); // deselect
      await singleClicks();

      const { tpl, box } = await template();
      const png = tpl.toPng();
      const onImage = await sbx.clickImage(png, { threshold: 0.95 });
      assert.deepEqual(boxOf(onImage), box);
      assert.deepEqual(await sbx.cursor(), { x: onImage.center[0], y: onImage.center[1] });
      const at = { image: png, threshold: 0.95, offset: [0, 1] };
      const below = { x: onImage.center[0], y: onImage.center[1] + 1 };
      for (const call of [() => sbx.leftClick(at), () => sbx.scroll({ dy: -1, target: at }), () => sbx.mousePress("left", at)]) {
        await singleClicks();
        await sbx.moveMouse(...PARK);
        const got = await call();
        assert.deepEqual(boxOf(got), box);
        assert.deepEqual(await sbx.cursor(), below);
      }
      // Released where it was pressed (moving away first would drag a selection).
      assert.deepEqual(boxOf(await sbx.mouseRelease("left", at)), box);
      assert.deepEqual(await sbx.cursor(), below);
      // act() takes a target's image as bytes too; the result carries the match.
      const results = await sbx.act([{ type: "move", target: { image: png } }, { type: "cursor_position" }]);
      assert.deepEqual([results[0].target.x, results[0].target.y], [box[0], box[1]]);
      assert.deepEqual(results[1], { x: onImage.center[0], y: onImage.center[1] });
    } finally {
      // No button left down, no selection left in the xterm: a lone click on its empty last line.
      await singleClicks();
      await sbx.act([{ type: "move", x: term.x + 30, y: term.y + term.height - 10 }, { type: "mouse_up", button: "left" }]);
      await singleClicks();
      await sbx.leftClick(term.x + 30, term.y + term.height - 10);
      await sbx.moveMouse(...PARK);
    }
  });

  test("a target that does not appear is a TargetNotFoundError naming it", async () => {
    const t0 = Date.now();
    await assert.rejects(sbx.clickText("NO-SUCH-WORD-ON-SCREEN", { timeoutMs: 300 }), (err) => {
      assert.ok(err instanceof TargetNotFoundError && err instanceof DeskboxError);
      assert.deepEqual([err.status, err.code, err.field], [422, "target_not_found", "target"]);
      return true;
    });
    assert.ok(Date.now() - t0 < 4500, "the target's timeoutMs was used");
    await assert.rejects(
      sbx.act([
        { type: "move", x: 1200, y: 20 },
        { type: "click", target: { text: "NO-SUCH-WORD", timeout_ms: 0 } },
        { type: "move", x: 1210, y: 30 },
      ]),
      (err) => err instanceof TargetNotFoundError && err.field === "actions[1].target",
    );
    assert.deepEqual(await sbx.cursor(), { x: 1200, y: 20 }, "the action before it ran, the one after did not");
    await assert.rejects(sbx.clickImage(checkerboard(), { timeoutMs: 0 }), TargetNotFoundError);
    await sbx.moveMouse(...PARK);
  });
});
