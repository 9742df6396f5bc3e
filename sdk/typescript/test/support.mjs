// A real deskboxd child process for the tests: a free loopback port (--listen 127.0.0.1:0, the
// port read from its "deskboxd listening on http://127.0.0.1:PORT" line, as
// tests/support/deskboxd_process.hpp does), a temporary state dir, stopped with SIGTERM.
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { openSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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
  const logPath = join(dir, "deskboxd.log");
  const logFd = openSync(logPath, "w");
  const child = spawn(DESKBOXD, ["--listen", "127.0.0.1:0", "--state-dir", join(dir, "state"), ...extraArgs], {
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
