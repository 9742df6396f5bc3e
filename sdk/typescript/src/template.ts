// Templates of your own: built on the server from a Dockerfile (and a build context), or imported
// from an OCI or Docker image archive; then Sandbox.create({ template: "name:tag" }).
import { spawn } from "node:child_process";
import { lstat, mkdtemp, open, readFile, readdir, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join, relative, resolve, sep } from "node:path";

import { ConnectionFailedError, DeskboxError, PayloadTooLargeError, SandboxError } from "./errors.js";
import { HttpClient, type ConnectionOptions } from "./http.js";
import type { NetworkPolicy } from "./types.js";

/** An upload's part size; the server's --max-body-mb bounds one (64 MiB by default). */
export const PART_SIZE = 32 << 20;
const LOG_WAIT_S = 10;
const FOLLOW_RETRIES = 20;

export type BuildStatus = "queued" | "running" | "succeeded" | "failed" | "cancelled" | (string & {});
export type Command = string | string[];
/** Gets each piece of a build's log as it arrives (awaited before the next is read). */
export type LogCallback = (text: string) => void | Promise<void>;

export interface BuildError {
  code: string;
  message: string;
  step?: number;
  instruction?: string;
  exitCode?: number;
  logTail?: string;
}

/** A build (or import) and where it is. `template` ("name:tag") is what Sandbox.create takes. */
export interface TemplateBuild {
  buildId: string;
  kind: "dockerfile" | "import" | (string & {});
  template: string;
  name: string;
  tag: string;
  status: BuildStatus;
  step: number;
  steps: number;
  instruction?: string;
  cachedSteps: number;
  createdAt?: string;
  startedAt?: string;
  finishedAt?: string;
  seconds?: number;
  imageId?: string;
  logBytes: number;
  error?: BuildError;
  raw: Record<string, any>;
}

/** A template the server offers: "shipped" (deskbox's own) or "user" (built or imported here). */
export interface TemplateInfo {
  template: string;
  name: string;
  tag?: string;
  kind: "shipped" | "user" | (string & {});
  runtimes: string[];
  bytes?: number;
  createdAt?: string;
  buildId?: string;
  imageId?: string;
  /** A base pulled from a registry, pinned: registry/repository@sha256:... */
  baseDigest?: string;
  inUse: boolean;
  raw: Record<string, any>;
}

interface StartOptions {
  /** Tag (default "latest"); "name:tag" as the name works too. */
  tag?: string;
  /** What a sandbox of it starts in its desktop (a shell line or argv); default ENTRYPOINT + CMD. */
  startCmd?: Command;
  /** A command that succeeds once the started app is ready (Sandbox.create answers after it). */
  readyCmd?: Command;
  /** The whole ready condition instead (windows, window_title, port, command, timeout_s...). */
  ready?: Record<string, unknown>;
  /** Seconds the build may take on the server (default 1800). */
  timeout?: number;
  onLog?: LogCallback;
  /** false: return the queued build at once (follow it with Template.wait). Default true. */
  wait?: boolean;
  partSize?: number;
}

export interface BuildOptions extends StartOptions, ConnectionOptions {
  /** The Dockerfile's text. */
  dockerfile?: string;
  /** A Dockerfile on this machine: inside `context` it is used from there, elsewhere its text is sent. */
  file?: string;
  /** A directory sent as the build context (what COPY reads), less what its .dockerignore excludes; links are sent as links. */
  context?: string;
  buildArgs?: Record<string, string>;
  noCache?: boolean;
  /** The RUN steps' network (default the server's). */
  network?: NetworkPolicy;
  limits?: { memoryMb?: number; cpus?: number; pids?: number };
}

export interface ImportOptions extends StartOptions, ConnectionOptions {
  format?: "oci-archive" | "docker-archive";
}

/** Template.importImage's options: those of a build's start and the connection. */
export interface ImportImageOptions extends StartOptions, ConnectionOptions {}

/** A build or import that failed or was cancelled: where, with what exit code, and the log's end. */
export class TemplateBuildError extends DeskboxError {
  readonly build: TemplateBuild;
  readonly step: number;
  readonly instruction: string | undefined;
  readonly exitCode: number | undefined;
  readonly logTail: string;
  constructor(build: TemplateBuild) {
    const e = build.error ?? { code: build.status, message: "no reason given" };
    let text = `template ${build.template} ${build.status}: ${e.message}`;
    if (e.step) text += `\n  failing step: ${e.step}/${build.steps} ${e.instruction ?? ""}`.trimEnd();
    if (e.exitCode !== undefined) text += `\n  exit code: ${e.exitCode}`;
    const tail = (e.logTail ?? "").replace(/\n$/, "");
    if (tail) text += "\n  the log's end:\n    " + tail.split("\n").slice(-15).join("\n    ");
    super(text, { code: e.code, status: 0 });
    this.build = build;
    this.step = e.step ?? 0;
    this.instruction = e.instruction;
    this.exitCode = e.exitCode;
    this.logTail = e.logTail ?? "";
  }
}

function parseBuild(raw: Record<string, any>): TemplateBuild {
  const build: TemplateBuild = {
    buildId: raw.build_id,
    kind: raw.kind,
    template: raw.template,
    name: raw.name,
    tag: raw.tag,
    status: raw.status,
    step: raw.step ?? 0,
    steps: raw.steps ?? 0,
    cachedSteps: raw.cached_steps ?? 0,
    logBytes: raw.log_bytes ?? 0,
    raw,
  };
  if (raw.instruction !== undefined) build.instruction = raw.instruction;
  if (raw.created_at !== undefined) build.createdAt = raw.created_at;
  if (raw.started_at !== undefined) build.startedAt = raw.started_at;
  if (raw.finished_at !== undefined) build.finishedAt = raw.finished_at;
  if (raw.seconds !== undefined) build.seconds = raw.seconds;
  if (raw.image_id !== undefined) build.imageId = raw.image_id;
  if (raw.error) {
    const e = raw.error;
    build.error = { code: e.code, message: e.message };
    if (e.step !== undefined) build.error.step = e.step;
    if (e.instruction !== undefined) build.error.instruction = e.instruction;
    if (e.exit_code !== undefined) build.error.exitCode = e.exit_code;
    if (e.log_tail !== undefined) build.error.logTail = e.log_tail;
  }
  return build;
}

function parseTemplate(raw: Record<string, any>): TemplateInfo {
  const info: TemplateInfo = {
    template: raw.template,
    name: raw.name,
    kind: raw.kind,
    runtimes: raw.runtimes ?? [],
    inUse: Boolean(raw.in_use),
    raw,
  };
  if (raw.tag !== undefined) info.tag = raw.tag;
  if (raw.bytes !== undefined) info.bytes = raw.bytes;
  if (raw.created_at !== undefined) info.createdAt = raw.created_at;
  if (raw.build_id !== undefined) info.buildId = raw.build_id;
  if (raw.image_id !== undefined) info.imageId = raw.image_id;
  if (raw.base_digest) info.baseDigest = raw.base_digest;
  return info;
}

// --- .dockerignore, as Docker reads it (the CLI's server/cli/build_context.cpp, the Python SDK's _context.py) ---

function clean(path: string): string {
  const rooted = path.startsWith("/");
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "..") {
      if (parts.length && parts[parts.length - 1] !== "..") parts.pop();
      else if (!rooted) parts.push(part);
    } else if (part && part !== ".") parts.push(part);
  }
  return (rooted ? "/" : "") + parts.join("/") || ".";
}

const escapeChar = (c: string) => c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

function toRegex(pattern: string): RegExp {
  let re = "^";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (inClass) {
      if (c === "]") inClass = false;
      if (c === "\\" && i + 1 < pattern.length) {
        re += "\\" + pattern[++i];
        continue;
      }
      re += c;
    } else if (c === "*") {
      if (pattern[i + 1] === "*") {
        i++;
        if (pattern[i + 1] === "/") i++; // "**/" is "**"
        re += i + 1 === pattern.length ? ".*" : "(.*/)?";
      } else re += "[^/]*";
    } else if (c === "?") re += "[^/]";
    else if (c === "\\") re += i + 1 < pattern.length ? escapeChar(pattern[++i]) : "\\\\";
    else if (c === "[") {
      inClass = true;
      re += c;
    } else re += escapeChar(c);
  }
  return new RegExp(re + "$", "s");
}

/**
 * The patterns of a .dockerignore with Docker's meaning: '#' lines are comments, '!' makes an
 * exception, a pattern is cleaned and matched against the whole relative path ('*', '?',
 * '[...]', '**'); a path is also excluded when a pattern matches one of its parent directories;
 * the last pattern that matches decides.
 */
export class IgnorePatterns {
  private readonly patterns: { regex: RegExp; exception: boolean }[] = [];
  readonly hasExceptions: boolean;

  constructor(text = "") {
    if (text.startsWith("\ufeff")) text = text.slice(1);
    text.split("\n").forEach((raw, index) => {
      if (raw.startsWith("#")) return;
      let line = raw.trim();
      if (!line) return;
      const exception = line.startsWith("!");
      if (exception) line = line.slice(1).trim();
      if (line) {
        line = clean(line);
        if (line.length > 1 && line.startsWith("/")) line = line.slice(1);
      }
      try {
        this.patterns.push({ regex: toRegex(line), exception });
      } catch {
        throw new Error(`.dockerignore line ${index + 1}: the pattern '${line}' is malformed`);
      }
    });
    this.hasExceptions = this.patterns.some((p) => p.exception);
  }

  /** Whether `path` (relative, '/'-separated, no leading "./") is left out. */
  excluded(path: string): boolean {
    const parts = path.split("/");
    const parents = parts.slice(1).map((_, i) => parts.slice(0, i + 1).join("/"));
    let matched = false;
    for (const { regex, exception } of this.patterns) {
      if (exception !== matched) continue;
      if (regex.test(path) || parents.some((p) => regex.test(p))) matched = !exception;
    }
    return matched;
  }
}

/** What a build context sends: directories, files and links (sorted), less what `ignore` excludes. */
export async function listContext(dir: string, ignore: IgnorePatterns, always: string[] = []): Promise<string[]> {
  const kept = new Set(always);
  const entries: string[] = [];
  const keep = async (rel: string): Promise<boolean> => {
    const st = await lstat(join(dir, rel));
    if (!(st.isFile() || st.isDirectory() || st.isSymbolicLink())) return false; // sockets, FIFOs, devices
    entries.push(rel);
    return st.isDirectory();
  };
  const walk = async (base: string): Promise<void> => {
    for (const entry of await readdir(join(dir, base), { withFileTypes: true })) {
      const rel = base ? `${base}/${entry.name}` : entry.name;
      if (!kept.has(rel) && ignore.excluded(rel)) {
        // Without exceptions nothing below an excluded directory can be kept.
        if (entry.isDirectory() && ignore.hasExceptions) await walk(rel);
        continue;
      }
      if (await keep(rel)) await walk(rel); // a link to a directory is a link: not followed
    }
  };
  await walk("");
  for (const rel of kept)
    if (!entries.includes(rel))
      await lstat(join(dir, rel)).then(
        () => keep(rel),
        () => false,
      );
  return entries.sort();
}

/** Writes the entries of `dir` as a tar to `file` with the system's tar (links stay links). */
async function tarContext(dir: string, entries: string[], file: string): Promise<void> {
  const child = spawn(
    "tar",
    ["--create", `--file=${file}`, `--directory=${dir}`, "--no-recursion", "--null", "--files-from=-", "--numeric-owner"],
    { stdio: ["pipe", "ignore", "pipe"], env: { ...process.env, LC_ALL: "C" } },
  );
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d) => (stderr += d));
  const done = new Promise<number>((resolve, reject) => {
    child.once("error", (e) => reject(new DeskboxError(`cannot run tar: ${e.message}`, { code: "tar_failed", status: 0 })));
    child.once("close", (code) => resolve(code ?? -1));
  });
  child.stdin.end(entries.map((e) => `./${e}\0`).join(""));
  const code = await done;
  // 1: a file changed as it was read.
  if (code !== 0 && code !== 1)
    throw new DeskboxError(`tar could not archive the build context: ${stderr.trim()}`, { code: "tar_failed", status: 0 });
}

/** The Dockerfile's path inside the context, or undefined when it lies outside (or behind a link). */
async function dockerfileInContext(dir: string, file: string): Promise<string | undefined> {
  const lexical = relative(resolve(dir), resolve(file));
  const real = relative(await realpath(dir), await realpath(file));
  if (lexical !== real || !lexical || lexical === ".." || lexical.startsWith(".." + sep) || isAbsolute(lexical)) return undefined;
  if ((await lstat(file)).isSymbolicLink()) return undefined;
  return lexical.split(sep).join("/");
}

// --- uploads and following a build ---

type Source = (size: number) => Promise<Uint8Array>; // empty at the end

function refBody(name: string, tag: string | undefined): Record<string, unknown> {
  let theTag = tag;
  const colon = name.indexOf(":");
  if (colon >= 0) {
    const named = name.slice(colon + 1);
    if (tag !== undefined && tag !== named) throw new Error(`the tag is given twice: '${named}' and tag '${tag}'`);
    theTag = named;
    name = name.slice(0, colon);
  }
  const body: Record<string, unknown> = { name };
  if (theTag !== undefined) body.tag = theTag;
  return body;
}

function putStart(body: Record<string, unknown>, o: StartOptions): void {
  if (o.startCmd !== undefined) body.start_cmd = o.startCmd;
  if (o.readyCmd !== undefined) body.ready_cmd = o.readyCmd;
  if (o.ready !== undefined) body.ready = o.ready;
  if (o.timeout !== undefined) body.timeout_s = o.timeout;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function upload(http: HttpClient, read: Source, partSize: number): Promise<string> {
  let id: string | undefined;
  let sent = 0;
  for (;;) {
    const part = await read(partSize);
    if (id !== undefined && part.length === 0) return id;
    let raw: any;
    for (let attempt = 0; ; attempt++) {
      try {
        raw =
          id === undefined
            ? await http.json("POST", "/v1/templates/uploads", { body: part, timeoutMs: 600_000 })
            : await http.json("PUT", `/v1/templates/uploads/${encodeURIComponent(id)}`, { query: { offset: sent }, body: part, timeoutMs: 600_000 });
        break;
      } catch (e) {
        // 503: too many bodies in flight on the server; it asks to come back shortly.
        if (e instanceof SandboxError && e.status === 503 && attempt < 5) {
          await sleep(1000 << attempt);
          continue;
        }
        if (e instanceof PayloadTooLargeError && e.code === "payload_too_large")
          throw new PayloadTooLargeError(`${e.message}: send smaller parts (partSize); the server's --max-body-mb bounds one`, {
            code: e.code,
            status: e.status,
            field: e.field ?? null,
          });
        throw e;
      }
    }
    id = String(raw.upload_id);
    sent += part.length;
    if (raw.bytes !== sent) throw new DeskboxError(`the server holds ${raw.bytes} bytes of upload ${id}, not the ${sent} sent`, { code: "bad_response", status: 0 });
    if (part.length < partSize) return id;
  }
}

async function fileSource<T>(path: string, use: (read: Source) => Promise<T>): Promise<T> {
  const handle = await open(path, "r");
  try {
    return await use(async (size) => {
      const buffer = new Uint8Array(size);
      let filled = 0;
      while (filled < size) {
        const { bytesRead } = await handle.read(buffer, filled, size - filled, null);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return buffer.subarray(0, filled);
    });
  } finally {
    await handle.close();
  }
}

async function follow(http: HttpClient, buildId: string, onLog?: LogCallback): Promise<TemplateBuild> {
  const path = `/v1/templates/builds/${encodeURIComponent(buildId)}`;
  let offset = 0;
  let failures = 0;
  for (;;) {
    let chunk: any;
    try {
      chunk = await http.json("GET", `${path}/log`, { query: { offset, wait_s: LOG_WAIT_S }, timeoutMs: (LOG_WAIT_S + 60) * 1000 });
      failures = 0;
    } catch (e) {
      // A dropped connection: the log goes on from the last byte read.
      if (!(e instanceof ConnectionFailedError) || ++failures > FOLLOW_RETRIES) throw e;
      await sleep(Math.min(failures, 5) * 1000);
      continue;
    }
    if (chunk.text && onLog) await onLog(chunk.text);
    offset = chunk.next_offset ?? offset;
    if (chunk.complete) break;
  }
  for (let attempt = 1; ; attempt++) {
    try {
      return parseBuild(await http.json("GET", path));
    } catch (e) {
      if (!(e instanceof ConnectionFailedError) || attempt >= 5) throw e;
      await sleep(attempt * 1000);
    }
  }
}

async function finish(http: HttpClient, started: Record<string, any>, o: StartOptions): Promise<TemplateBuild> {
  const queued = parseBuild(started);
  if (o.wait === false) return queued;
  const build = await follow(http, queued.buildId, o.onLog);
  if (build.status !== "succeeded") throw new TemplateBuildError(build);
  return build;
}

/** The server's templates and their builds. Every call takes `server` and `apiKey` (default env DESKBOX_SERVER, DESKBOX_API_KEY). */
export class Template {
  private constructor() {}

  /**
   * Builds a template from a Dockerfile (`dockerfile` text, `file` on this machine, or
   * `context`/Dockerfile) and returns the finished build; `onLog` gets the log as it grows.
   * Throws TemplateBuildError (step, exit code, the log's end) when the build fails, and
   * BadRequestError naming the field or the Dockerfile line when the server refuses it.
   */
  static async build(name: string, options: BuildOptions = {}): Promise<TemplateBuild> {
    const body = refBody(name, options.tag ?? (name.includes(":") ? undefined : "latest"));
    const always = [".dockerignore"];
    const dir = options.context;
    if (options.dockerfile !== undefined && options.file !== undefined) throw new Error("give dockerfile or file, not both");
    if (options.dockerfile !== undefined) body.dockerfile = options.dockerfile;
    else {
      if (options.file === undefined && dir === undefined) throw new Error("give the Dockerfile's text (dockerfile), a file, or a context directory that holds one");
      const file = options.file ?? join(dir!, "Dockerfile");
      const st = await lstat(file).catch(() => undefined);
      if (!st || !(st.isFile() || st.isSymbolicLink())) throw new Error(`no Dockerfile at ${file}`);
      const inside = dir === undefined ? undefined : await dockerfileInContext(dir, file);
      if (inside === undefined) body.dockerfile = await readFile(file, "utf8");
      else {
        always.push(inside);
        if (inside !== "Dockerfile") body.dockerfile_path = inside;
      }
    }
    if (options.buildArgs) body.build_args = options.buildArgs;
    if (options.noCache) body.no_cache = true;
    if (options.network !== undefined) body.network = options.network;
    if (options.limits) {
      const limits: Record<string, number> = {};
      if (options.limits.memoryMb !== undefined) limits.memory_mb = options.limits.memoryMb;
      if (options.limits.cpus !== undefined) limits.cpus = options.limits.cpus;
      if (options.limits.pids !== undefined) limits.pids = options.limits.pids;
      body.limits = limits;
    }
    putStart(body, options);
    const http = new HttpClient(options);
    if (dir !== undefined) {
      if (!(await lstat(dir).catch(() => undefined))?.isDirectory()) throw new Error(`context ${dir} is not a directory`);
      const ignoreText = await readFile(join(dir, ".dockerignore"), "utf8").catch(() => "");
      const entries = await listContext(dir, new IgnorePatterns(ignoreText), always);
      const tmp = await mkdtemp(join(tmpdir(), "deskbox-context-"));
      try {
        const archive = join(tmp, "context.tar");
        await tarContext(dir, entries, archive);
        body.upload_id = await fileSource(archive, (read) => upload(http, read, options.partSize ?? PART_SIZE));
      } finally {
        await rm(tmp, { recursive: true, force: true });
      }
    }
    const started = await http.json("POST", "/v1/templates/builds", { json: body, timeoutMs: 600_000 });
    return finish(http, started, options);
  }

  /** Imports an image archive (`docker save`, or an OCI archive): a path or its bytes. */
  static async importArchive(name: string, archive: string | Uint8Array, options: ImportOptions = {}): Promise<TemplateBuild> {
    const body = refBody(name, options.tag ?? (name.includes(":") ? undefined : "latest"));
    if (options.format !== undefined) body.format = options.format;
    putStart(body, options);
    const http = new HttpClient(options);
    const partSize = options.partSize ?? PART_SIZE;
    if (typeof archive === "string") body.upload_id = await fileSource(archive, (read) => upload(http, read, partSize));
    else {
      let at = 0;
      body.upload_id = await upload(
        http,
        async (size) => {
          const part = archive.subarray(at, at + size);
          at += part.length;
          return part;
        },
        partSize,
      );
    }
    const started = await http.json("POST", "/v1/templates/imports", { json: body, timeoutMs: 600_000 });
    return finish(http, started, options);
  }

  /**
   * Imports an image the server pulls from a registry: `HOST[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST]`,
   * the registry named in full. The server pulls only from registries its operator allows
   * (`deskboxd --template-registry`), anonymously; the template records the digest pulled
   * (`base_digest` in its JSON).
   */
  static async importImage(name: string, image: string, options: ImportImageOptions = {}): Promise<TemplateBuild> {
    const body = refBody(name, options.tag ?? (name.includes(":") ? undefined : "latest"));
    body.image = image;
    putStart(body, options);
    const http = new HttpClient(options);
    const started = await http.json("POST", "/v1/templates/imports", { json: body, timeoutMs: 600_000 });
    return finish(http, started, options);
  }

  /** The templates the server offers: deskbox's own ("shipped") and yours ("user"). */
  static async list(options: ConnectionOptions = {}): Promise<TemplateInfo[]> {
    const raw = await new HttpClient(options).json("GET", "/v1/templates");
    return (raw.items ?? []).map(parseTemplate);
  }

  /** A template built or imported here ("name" or "name:tag"); NotFoundError if none. */
  static async get(template: string, options: ConnectionOptions = {}): Promise<TemplateInfo> {
    return parseTemplate(await new HttpClient(options).json("GET", `/v1/templates/${encodeURIComponent(template)}`));
  }

  /** Deletes a template of yours; ConflictError while a sandbox uses it. */
  static async delete(template: string, options: ConnectionOptions = {}): Promise<void> {
    await new HttpClient(options).json("DELETE", `/v1/templates/${encodeURIComponent(template)}`);
  }

  /** The builds and imports the server remembers, newest first. */
  static async builds(options: ConnectionOptions = {}): Promise<TemplateBuild[]> {
    const raw = await new HttpClient(options).json("GET", "/v1/templates/builds");
    return (raw.builds ?? []).map(parseBuild);
  }

  static async getBuild(buildId: string, options: ConnectionOptions = {}): Promise<TemplateBuild> {
    return parseBuild(await new HttpClient(options).json("GET", `/v1/templates/builds/${encodeURIComponent(buildId)}`));
  }

  /** Follows a build's log from its start until it has finished; throws TemplateBuildError if it did not succeed (unless check: false). */
  static async wait(buildId: string, options: ConnectionOptions & { onLog?: LogCallback; check?: boolean } = {}): Promise<TemplateBuild> {
    const build = await follow(new HttpClient(options), buildId, options.onLog);
    if (options.check !== false && build.status !== "succeeded") throw new TemplateBuildError(build);
    return build;
  }

  /** The build's log so far. */
  static async logs(buildId: string, options: ConnectionOptions = {}): Promise<string> {
    const http = new HttpClient(options);
    let text = "";
    let offset = 0;
    for (;;) {
      const chunk = await http.json("GET", `/v1/templates/builds/${encodeURIComponent(buildId)}/log`, { query: { offset } });
      text += chunk.text ?? "";
      if (chunk.complete || chunk.next_offset <= offset) return text;
      offset = chunk.next_offset;
    }
  }

  /** Cancels a queued or running build; returns it (a finished one is left as it is). */
  static async cancel(buildId: string, options: ConnectionOptions = {}): Promise<TemplateBuild> {
    return parseBuild(await new HttpClient(options).json("POST", `/v1/templates/builds/${encodeURIComponent(buildId)}/cancel`, { timeoutMs: 60_000 }));
  }
}
