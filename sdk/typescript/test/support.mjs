// A real deskboxd child process for the tests: a free loopback port (--listen 127.0.0.1:0, the
// port read from its "deskboxd listening on http://127.0.0.1:PORT" line, as
// tests/support/deskboxd_process.hpp does), a temporary state dir, stopped with SIGTERM.
import { spawn } from "node:child_process";
import { chmod, mkdtemp, readFile, rm } from "node:fs/promises";
import { openSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { deflateSync, inflateSync } from "node:zlib";

export const DESKBOXD = process.env.DESKBOXD || "/work/main/build/server/deskboxd";

export async function mountsUnder(dir) {
  const mounts = await readFile("/proc/self/mounts", "utf8");
  return mounts
    .split("\n")
    .map((line) => line.split(" ")[1])
    .filter((point) => point && (point === dir || point.startsWith(dir + "/")));
}

export async function startDeskboxd(extraArgs = []) {
  const dir = await mkdtemp(join(tmpdir(), "deskbox-ts-sdk-"));
  await chmod(dir, 0o711); // sandboxes' user-namespace roots pass through to the state dir
  const logPath = join(dir, "deskboxd.log");
  const logFd = openSync(logPath, "w");
  const child = spawn(DESKBOXD, ["--listen", "127.0.0.1:0", "--state-dir", join(dir, "state"), "--on-exit", "kill", ...extraArgs], {
    stdio: ["ignore", "pipe", logFd],
  });
  closeSync(logFd);
  const log = () => readFile(logPath, "utf8").catch(() => "");
  const url = await new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(() => fail(new Error("deskboxd did not print its address within 30 s")), 30_000);
    const fail = async (error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      error.message += `\nstdout: ${text}\nlog: ${await log()}`;
      await rm(dir, { recursive: true, force: true });
      reject(error);
    };
    child.once("error", fail);
    child.once("exit", (code, signal) => fail(new Error(`deskboxd exited (${code ?? signal}) before listening`)));
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      text += chunk;
      const newline = text.indexOf("\n");
      if (newline < 0) return;
      const line = text.slice(0, newline);
      const colon = line.lastIndexOf(":");
      if (!line.includes("listening") || colon < 0) return fail(new Error(`deskboxd did not start: ${line}`));
      clearTimeout(timer);
      child.removeAllListeners("exit");
      resolve(`http://127.0.0.1:${Number.parseInt(line.slice(colon + 1), 10)}`);
    });
  });
  // Keep draining stdout so the child never blocks on a full pipe.
  child.stdout.resume();
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));

  return {
    url,
    dir,
    log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        let timer;
        const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve("timeout"), 30_000)));
        const outcome = await Promise.race([exited, timeout]);
        clearTimeout(timer);
        if (outcome === "timeout") {
          child.kill("SIGKILL");
          await exited;
          throw new Error(`deskboxd did not stop within 30 s of SIGTERM\n${await log()}`);
        }
      }
      const left = await mountsUnder(dir);
      if (left.length) throw new Error(`deskboxd left mounts behind (${left.join(", ")}); not removing ${dir}`);
      await rm(dir, { recursive: true, force: true });
      return exited;
    },
  };
}

/** Width and height from a PNG's IHDR chunk (throws if it is not a PNG). */
export function pngSize(bytes) {
  const signature = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (bytes.length < 24 || signature.some((b, i) => bytes[i] !== b)) throw new Error("not a PNG");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (String.fromCharCode(...bytes.subarray(12, 16)) !== "IHDR") throw new Error("PNG without IHDR first");
  return { width: view.getUint32(16), height: view.getUint32(20) };
}

/** Retries `fn` until it returns a truthy value or `ms` pass; returns its last value. */
export async function waitFor(fn, ms = 10_000, every = 100) {
  const deadline = Date.now() + ms;
  for (;;) {
    let value;
    try {
      value = await fn();
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    if (value || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, every));
  }
}

/**
 * A decoded 8-bit RGB/RGBA PNG (what deskboxd's screenshots are), for tests that cut, paint and
 * re-encode screenshots.
 */
export class Picture {
  constructor(width, height, channels, pixels) {
    Object.assign(this, { width, height, channels, pixels });
  }

  static fromPng(bytes) {
    const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (data.readUInt32BE(0) !== 0x89504e47) throw new Error("not a PNG");
    let pos = 8;
    let ihdr;
    const idat = [];
    while (pos < data.length) {
      const length = data.readUInt32BE(pos);
      const kind = data.toString("latin1", pos + 4, pos + 8);
      const body = data.subarray(pos + 8, pos + 8 + length);
      if (kind === "IHDR") ihdr = body;
      else if (kind === "IDAT") idat.push(body);
      pos += 12 + length;
    }
    const width = ihdr.readUInt32BE(0);
    const height = ihdr.readUInt32BE(4);
    const channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[ihdr[9]];
    if (ihdr[8] !== 8 || ihdr[12] !== 0) throw new Error("only 8-bit, non-interlaced PNGs");
    const raw = inflateSync(Buffer.concat(idat));
    const stride = width * channels;
    const out = new Uint8Array(stride * height);
    for (let row = 0; row < height; row++) {
      const filter = raw[row * (stride + 1)];
      const src = raw.subarray(row * (stride + 1) + 1, (row + 1) * (stride + 1));
      const line = out.subarray(row * stride, (row + 1) * stride);
      const prev = row > 0 ? out.subarray((row - 1) * stride, row * stride) : new Uint8Array(stride);
      for (let i = 0; i < stride; i++) {
        const a = i >= channels ? line[i - channels] : 0;
        const b = prev[i];
        const c = i >= channels ? prev[i - channels] : 0;
        let v = src[i];
        if (filter === 1) v += a;
        else if (filter === 2) v += b;
        else if (filter === 3) v += (a + b) >> 1;
        else if (filter === 4) {
          const p = a + b - c;
          const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
          v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
        }
        line[i] = v & 255;
      }
    }
    return new Picture(width, height, channels, out);
  }

  toPng() {
    const chunk = (kind, body) => {
      const head = Buffer.alloc(8);
      head.writeUInt32BE(body.length, 0);
      head.write(kind, 4, "latin1");
      const crc = Buffer.alloc(4);
      crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), body])), 0);
      return Buffer.concat([head, body, crc]);
    };
    const ihdr = Buffer.alloc(13);
    ihdr.writeUInt32BE(this.width, 0);
    ihdr.writeUInt32BE(this.height, 4);
    ihdr[8] = 8;
    ihdr[9] = { 1: 0, 2: 4, 3: 2, 4: 6 }[this.channels];
    const stride = this.width * this.channels;
    const raw = Buffer.alloc((stride + 1) * this.height);
    for (let row = 0; row < this.height; row++) raw.set(this.pixels.subarray(row * stride, (row + 1) * stride), row * (stride + 1) + 1);
    return new Uint8Array(
      Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]),
    );
  }

  crop(x, y, w, h) {
    const c = this.channels;
    const out = new Uint8Array(w * h * c);
    for (let row = 0; row < h; row++) out.set(this.pixels.subarray(((y + row) * this.width + x) * c, ((y + row) * this.width + x + w) * c), row * w * c);
    return new Picture(w, h, c, out);
  }

  /** A copy with fn(array of the pixel's channel values) -> new values applied in a box. */
  paint(x, y, w, h, fn) {
    const c = this.channels;
    const out = new Picture(this.width, this.height, c, new Uint8Array(this.pixels));
    for (let row = y; row < y + h; row++)
      for (let col = x; col < x + w; col++) {
        const i = (row * this.width + col) * c;
        out.pixels.set(fn([...out.pixels.subarray(i, i + c)]), i);
      }
    return out;
  }

  /** A copy with the box's colours inverted: every pixel in it differs. */
  invert(x, y, w, h) {
    return this.paint(x, y, w, h, (p) => p.map((v, i) => (i < 3 ? 255 - v : v)));
  }

  withAlpha() {
    if (this.channels === 4) return new Picture(this.width, this.height, 4, new Uint8Array(this.pixels));
    const out = new Uint8Array(this.width * this.height * 4);
    for (let i = 0, j = 0; i < this.pixels.length; i += 3, j += 4) {
      out.set(this.pixels.subarray(i, i + 3), j);
      out[j + 3] = 255;
    }
    return new Picture(this.width, this.height, 4, out);
  }
}

/** A magenta/green checkerboard PNG: nothing like it is on the screen. */
export function checkerboard(width = 40, height = 20) {
  const px = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) px.set((Math.floor(x / 4) + Math.floor(y / 4)) % 2 ? [255, 0, 255] : [0, 255, 0], (y * width + x) * 3);
  return new Picture(width, height, 3, px).toPng();
}

const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = crcTable[(c ^ b) & 255] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
