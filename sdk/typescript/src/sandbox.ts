// A deskbox sandbox: a disposable Linux desktop served by deskboxd.
import { DeskboxError, NotFoundError } from "./errors.js";
import { HttpClient, type ConnectionOptions } from "./http.js";
import { parseSnapshot, type SnapshotInfo } from "./snapshot.js";
import { volumeMountJson } from "./volume.js";
import { CommandStream, LiveStream, type LiveOptions } from "./live.js";
import type {
  Action,
  ActionResult,
  ContentBlock,
  BackgroundCommand,
  ClickOptions,
  CommandResult,
  CompareOptions,
  CompareResult,
  CreateOptions,
  Dialect,
  ForkOptions,
  FileEntry,
  ImageInput,
  ImageOrText,
  LocateOptions,
  Match,
  Matches,
  MouseButton,
  NetworkChange,
  OcrOptions,
  OcrResult,
  Point,
  RecordingStatus,
  RegionLike,
  RunOptions,
  SandboxInfo,
  ScreenshotOptions,
  ScrollOptions,
  Size,
  Target,
  TargetOptions,
  WaitForOptions,
  WaitOptions,
  WaitResult,
  WaitUntil,
  Window,
  AccessibilityTree,
  AccessibleNode,
  FindElementsOptions,
  ToolResultBlock,
} from "./types.js";
import {
  actionJson,
  encodeImage,
  parseCompare,
  parseMatch,
  parseMatches,
  parseOcr,
  parseWait,
  regionJson,
  searchBody,
  targetJson,
} from "./vision.js";

// Older Node 20 releases lack Symbol.asyncDispose: define it as the well-known symbol
// TypeScript's `await using` falls back to, so the method below has a real key everywhere.
if (typeof (Symbol as { asyncDispose?: symbol }).asyncDispose !== "symbol")
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("Symbol.asyncDispose") });

function parseInfo(raw: Record<string, any>): SandboxInfo {
  const info: SandboxInfo = {
    id: raw.id,
    state: raw.state,
    runtime: raw.runtime,
    template: raw.template,
    resolution: raw.resolution,
    dpi: raw.dpi,
    createdAt: new Date(raw.created_at),
    expiresAt: new Date(raw.expires_at),
    onTimeout: raw.on_timeout,
    metadata: raw.metadata ?? {},
    network: raw.network ?? {},
    autoResume: Boolean(raw.auto_resume),
    raw,
  };
  if (raw.api_resolution) info.apiResolution = raw.api_resolution;
  if (raw.error !== undefined) info.error = raw.error;
  if (raw.log_tail !== undefined) info.logTail = raw.log_tail;
  // A string: the named snapshot it came from; an object: a paused microVM saved to disk.
  if (typeof raw.from_snapshot === "string") info.snapshotName = raw.from_snapshot;
  else if (raw.snapshot) info.snapshot = { bytes: raw.snapshot.bytes, savedAt: new Date(raw.snapshot.saved_at) };
  if (raw.paused_reason) info.pausedReason = raw.paused_reason;
  if (raw.view_token) info.viewToken = raw.view_token;
  if (raw.control_token) info.controlToken = raw.control_token;
  if (raw.vnc)
    info.vnc = {
      host: raw.vnc.host,
      port: raw.vnc.port,
      ...(raw.vnc.password ? { password: raw.vnc.password } : {}),
      ...(raw.vnc.view_password ? { viewPassword: raw.vnc.view_password } : {}),
    };
  if (raw.recording) info.recording = raw.recording;
  if (raw.ports !== undefined) info.ports = raw.ports;
  return info;
}

function createBody(o: CreateOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const put = (key: string, value: unknown) => {
    if (value !== undefined) body[key] = value;
  };
  put("template", o.template);
  put("runtime", o.runtime);
  put("resolution", o.resolution);
  put("api_resolution", o.apiResolution);
  put("dpi", o.dpi);
  put("timeout_s", o.timeout);
  put("on_timeout", o.onTimeout);
  put("network", o.network);
  put("metadata", o.metadata);
  put("env", o.env);
  put("vnc", o.vnc);
  put("record", o.record);
  put("snapshot", o.snapshot);
  put("auto_resume", o.autoResume);
  if (o.volumes) body.volumes = o.volumes.map(volumeMountJson);
  if (o.limits) {
    const limits: Record<string, number> = {};
    if (o.limits.memoryMb !== undefined) limits.memory_mb = o.limits.memoryMb;
    if (o.limits.cpus !== undefined) limits.cpus = o.limits.cpus;
    if (o.limits.egressKbps !== undefined) limits.egress_kbps = o.limits.egressKbps;
    if (o.limits.pids !== undefined) limits.pids = o.limits.pids;
    body.limits = limits;
  }
  return body;
}

function recordingStatus(raw: Record<string, any>): RecordingStatus {
  const status: RecordingStatus = { recording: raw.recording, state: raw.state };
  if (raw.actions !== undefined) status.actions = raw.actions;
  if (raw.fps !== undefined) status.fps = raw.fps;
  if (raw.bytes !== undefined) status.bytes = raw.bytes;
  if (raw.frames !== undefined) status.frames = raw.frames;
  if (raw.duration_ms !== undefined) status.durationMs = raw.duration_ms;
  return status;
}

function found(match: Match | undefined): Match {
  if (!match) throw new DeskboxError("the action's result carries no target match", { code: "bad_response", status: 0 });
  return match;
}

function toBytes(data: string | Uint8Array | ArrayBuffer): Uint8Array {
  if (typeof data === "string") return new TextEncoder().encode(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return data;
}

/** Thrown by `commands.run(cmd, {check: true})` when the command exits with a nonzero code. */
export class CommandExitError extends DeskboxError {
  readonly result: CommandResult;
  constructor(result: CommandResult, cmd: string | string[]) {
    super(`command ${JSON.stringify(cmd)} exited with ${result.exitCode}: ${result.stderr.trim().slice(0, 300)}`, {
      code: "command_failed",
      status: 0,
    });
    this.result = result;
  }
}

/** Thrown by the waitFor... calls with `check: true` when the wait timed out; `result.matched` is false. */
export class WaitTimeoutError extends DeskboxError {
  readonly result: WaitResult;
  constructor(result: WaitResult, what: string) {
    super(`waiting for ${what}: timed out after ${result.elapsedMs} ms`, { code: "wait_timeout", status: 0 });
    this.result = result;
  }
}

/** Shell commands inside the sandbox. */
export class Commands {
  constructor(private readonly sandbox: Sandbox) {}

  /**
   * Runs `cmd` (a shell command line, or an argv array run without a shell). Waits for it and
   * gives its exit code and output, or with `background: true` returns at once with its pid.
   * A nonzero exit code is a result, not an error, unless `check: true`.
   */
  run(cmd: string | string[], options: RunOptions & { background: true }): Promise<BackgroundCommand>;
  run(cmd: string | string[], options?: RunOptions & { background?: false }): Promise<CommandResult>;
  run(cmd: string | string[], options?: RunOptions): Promise<CommandResult | BackgroundCommand>;
  async run(cmd: string | string[], options: RunOptions = {}): Promise<CommandResult | BackgroundCommand> {
    const body: Record<string, unknown> = Array.isArray(cmd) ? { argv: cmd } : { cmd };
    if (options.background) body.background = true;
    if (options.timeout !== undefined) body.timeout_s = options.timeout;
    if (options.env !== undefined) body.env = options.env;
    if (options.cwd !== undefined) body.cwd = options.cwd;
    if (options.stdin !== undefined) body.stdin = options.stdin;
    // The server waits up to timeout_s + 15 s for the command; we wait a little longer.
    const timeoutMs = options.background ? 30_000 : ((options.timeout ?? 60) + 30) * 1000;
    const raw = await this.sandbox.http.json("POST", this.sandbox.path("/commands"), { json: body, timeoutMs });
    if (options.background) return { pid: raw.pid };
    const result: CommandResult = {
      exitCode: raw.exit_code ?? -1,
      stdout: raw.stdout ?? "",
      stderr: raw.stderr ?? "",
      durationMs: raw.duration_ms ?? 0,
      timedOut: Boolean(raw.timed_out),
      raw,
    };
    if (raw.signal !== undefined && raw.signal !== null) result.signal = raw.signal;
    if (options.check && result.exitCode !== 0) throw new CommandExitError(result, cmd);
    return result;
  }

  /**
   * Starts `cmd` and streams its output as it is printed:
   * `const run = await sb.commands.stream("make"); for await (const out of run) ...; run.exit`.
   * `stdinOpen` keeps stdin open for `run.writeStdin`.
   */
  async stream(cmd: string | string[], options: Omit<RunOptions, "background" | "check"> & { stdinOpen?: boolean } = {}): Promise<CommandStream> {
    const body: Record<string, unknown> = Array.isArray(cmd) ? { argv: cmd } : { cmd };
    if (options.timeout !== undefined) body.timeout_s = options.timeout;
    if (options.env !== undefined) body.env = options.env;
    if (options.cwd !== undefined) body.cwd = options.cwd;
    if (options.stdin !== undefined) body.stdin = options.stdin;
    if (options.stdinOpen) body.stdin_open = true;
    return CommandStream.open(this.sandbox.http, this.sandbox.path("/commands"), body, {
      writeStdin: (pid, data, eof) => this.writeStdin(pid, data, { eof }),
      kill: (pid, signal) => this.kill(pid, signal),
    });
  }

  /** Writes to a running background or stream command's stdin (started with stdinOpen); NotFoundError once it ended. */
  async writeStdin(pid: number, data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    await this.sandbox.http.json("POST", this.sandbox.path(`/commands/${pid}/stdin`), {
      query: { eof: options.eof ? "true" : undefined },
      body: typeof data === "string" ? new TextEncoder().encode(data) : data,
    });
  }

  /** Signals a running command (its process group) by pid, KILL by default; NotFoundError once it ended. */
  async kill(pid: number, signal: string | number = "KILL"): Promise<void> {
    await this.sandbox.http.json("POST", this.sandbox.path(`/commands/${pid}/kill`), { json: { signal } });
  }

  /** The commands deskbox started that still run. */
  async list(): Promise<{ pid: number; command: unknown; background: boolean; stream: boolean; elapsed_ms: number }[]> {
    return (await this.sandbox.http.json("GET", this.sandbox.path("/commands"))).processes;
  }
}

/** Files inside the sandbox. */
export class Files {
  constructor(private readonly sandbox: Sandbox) {}

  /** The bytes of a file. */
  async read(path: string): Promise<Uint8Array> {
    return this.sandbox.http.bytes("GET", this.sandbox.path("/files"), { query: { path }, timeoutMs: 300_000 });
  }

  /** A file as UTF-8 text. */
  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  /** Writes a file (parent directories are created); `mode` is octal text like "755". */
  async write(path: string, data: string | Uint8Array | ArrayBuffer, options: { mode?: string } = {}): Promise<{ size: number }> {
    const raw = await this.sandbox.http.json("PUT", this.sandbox.path("/files"), {
      query: { path, mode: options.mode },
      body: toBytes(data),
      timeoutMs: 300_000,
    });
    return { size: raw.size };
  }

  /** The entries of a directory (ConflictError for a file). */
  async list(path: string): Promise<FileEntry[]> {
    const raw = await this.sandbox.http.json<{ entries: FileEntry[] }>("GET", this.sandbox.path("/files/list"), { query: { path } });
    return raw.entries;
  }

  /** Makes a directory; `parents` makes missing parents too and accepts an existing one. */
  async mkdir(path: string, options: { parents?: boolean } = {}): Promise<void> {
    await this.sandbox.http.json("POST", this.sandbox.path("/files/mkdir"), {
      query: { path, parents: options.parents ? "true" : undefined },
    });
  }

  /** Removes a file, or a directory (with everything in it when `recursive`). */
  async remove(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.sandbox.http.json("DELETE", this.sandbox.path("/files"), {
      query: { path, recursive: options.recursive ? "true" : undefined },
    });
  }

  /** Whether a path exists. */
  async exists(path: string): Promise<boolean> {
    try {
      const response = await this.sandbox.http.request("GET", this.sandbox.path("/files"), { query: { path } });
      await response.body?.cancel();
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}

/** The desktop's clipboard. */
export class Clipboard {
  constructor(private readonly sandbox: Sandbox) {}

  async get(): Promise<string> {
    const raw = await this.sandbox.http.json("GET", this.sandbox.path("/clipboard"));
    return raw.text ?? "";
  }

  async set(text: string): Promise<void> {
    await this.sandbox.http.json("PUT", this.sandbox.path("/clipboard"), { json: { text } });
  }
}

/** MP4 recordings of the screen (and optionally the actions). */
export class Recording {
  constructor(private readonly sandbox: Sandbox) {}

  async start(options: { actions?: boolean; fps?: number } = {}): Promise<RecordingStatus> {
    const body: Record<string, unknown> = {};
    if (options.actions !== undefined) body.actions = options.actions;
    if (options.fps !== undefined) body.fps = options.fps;
    return recordingStatus(await this.sandbox.http.json("POST", this.sandbox.path("/recording"), { json: body }));
  }

  async stop(): Promise<RecordingStatus> {
    return recordingStatus(await this.sandbox.http.json("DELETE", this.sandbox.path("/recording")));
  }

  async status(): Promise<RecordingStatus> {
    return recordingStatus(await this.sandbox.http.json("GET", this.sandbox.path("/recording")));
  }

  /** The MP4 of a recording (by the id start() and stop() give), or with `events` its actions track (JSON lines). */
  async download(id: string, options: { events?: boolean } = {}): Promise<Uint8Array> {
    const path = `/v1/recordings/${encodeURIComponent(id)}${options.events ? "/events" : ""}`;
    return this.sandbox.http.bytes("GET", path, { timeoutMs: 300_000 });
  }

  /** Deletes a finished recording from the server. */
  async delete(id: string): Promise<void> {
    await this.sandbox.http.json("DELETE", `/v1/recordings/${encodeURIComponent(id)}`);
  }
}

export class Sandbox {
  /** The sandbox id ("sb-..."). */
  readonly id: string;
  readonly http: HttpClient;
  readonly commands: Commands;
  readonly files: Files;
  readonly clipboard: Clipboard;
  readonly recording: Recording;
  private viewToken: string | undefined;
  private controlToken: string | undefined;
  private size: Size | undefined;

  private constructor(http: HttpClient, raw: Record<string, any>) {
    this.http = http;
    this.id = raw.id;
    this.commands = new Commands(this);
    this.files = new Files(this);
    this.clipboard = new Clipboard(this);
    this.recording = new Recording(this);
    this.remember(raw);
  }

  private remember(raw: Record<string, any>): void {
    if (raw.view_token) this.viewToken = raw.view_token;
    if (raw.control_token) this.controlToken = raw.control_token;
    const size = raw.api_resolution ?? raw.resolution;
    if (Array.isArray(size)) this.size = { width: size[0], height: size[1] };
  }

  /** Creates a sandbox and waits until its desktop is up. */
  static async create(options: CreateOptions & ConnectionOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(options);
    const raw = await http.json("POST", "/v1/sandboxes", { json: createBody(options), timeoutMs: 600_000 });
    return new Sandbox(http, raw);
  }

  /** A sandbox that exists already (NotFoundError if it does not). */
  static async connect(id: string, options: ConnectionOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(options);
    const raw = await http.json("GET", `/v1/sandboxes/${encodeURIComponent(id)}`);
    return new Sandbox(http, raw);
  }

  /** Every sandbox on the server (without tokens). */
  static async list(options: ConnectionOptions = {}): Promise<SandboxInfo[]> {
    const http = new HttpClient(options);
    const raw = await http.json<{ sandboxes: Record<string, any>[] }>("GET", "/v1/sandboxes");
    return raw.sandboxes.map(parseInfo);
  }

  /** @internal */
  path(rest = ""): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}${rest}`;
  }

  /** The sandbox as the server describes it now, with tokens and listening ports. */
  async info(): Promise<SandboxInfo> {
    const raw = await this.http.json("GET", this.path());
    this.remember(raw);
    return parseInfo(raw);
  }

  /** The screen as image bytes (PNG unless another format is asked for). */
  async screenshot(options: ScreenshotOptions = {}): Promise<Uint8Array> {
    return this.http.bytes("GET", this.path("/screenshot"), { query: { ...options } });
  }

  /**
   * Runs actions: one object or a list, in the native dialect unless another is named
   * ("anthropic": computer-use tool input, "openai": computer_call.action). One result per action.
   * Actions are in the API's own shape (snake_case); a native action's `target` may hold its
   * `image` as bytes (it is base64-encoded here). A target not found in time throws
   * TargetNotFoundError (the actions before it have run).
   */
  async act(actions: Action | Action[], options: { dialect?: Dialect } = {}): Promise<ActionResult[]> {
    const body = Array.isArray(actions) ? { actions: await Promise.all(actions.map(actionJson)) } : await actionJson(actions);
    const raw = await this.http.json<{ results: ActionResult[] }>("POST", this.path("/actions"), {
      json: body,
      query: options.dialect && options.dialect !== "native" ? { dialect: options.dialect } : undefined,
    });
    return raw.results;
  }

  /**
   * Runs one Claude turn's computer tool_use blocks and gives their tool_results, in order, by
   * tool_use_id: send them back as the next user message's content. `blocks` may be the
   * assistant message's whole content: of it, the computer toolset's blocks
   * (toolset_name "computer", computer_toolset_20260801) or the computer tool's (input with
   * action) run; text, thinking and other tools' blocks are left for you. `screenshot: true` ends
   * the last tool_result with the screen after them. A bad block throws InvalidActionError
   * naming it ("[2].input.coordinate") before anything runs.
   */
  async runToolUses(blocks: ContentBlock[], options: { screenshot?: boolean } = {}): Promise<ToolResultBlock[]> {
    const turn = blocks.filter(
      (b) =>
        b?.type === "tool_use" &&
        (b.toolset_name === "computer" ||
          (b.toolset_name == null && typeof b.input === "object" && b.input !== null && "action" in b.input)),
    );
    if (turn.length === 0) return [];
    const query: Record<string, string> = { dialect: "anthropic" };
    if (options.screenshot) query.screenshot = "true";
    const raw = await this.http.json<{ tool_results?: ToolResultBlock[] }>("POST", this.path("/actions"), { json: turn, query });
    return raw.tool_results ?? [];
  }

  private async action(action: Action): Promise<ActionResult> {
    const [result] = await this.act(action);
    return result ?? {};
  }

  /** Runs an action at (x, y), at a target (then gives its match), or where the pointer is. */
  private async aimed(action: Action, at?: number | Target, y?: number): Promise<Match | undefined> {
    if (typeof at === "object" && at !== null) action.target = await targetJson(at);
    else if (at !== undefined || y !== undefined) {
      action.x = at;
      action.y = y;
    }
    const result = await this.action(action);
    const hit = result.target;
    return hit && typeof hit === "object" ? parseMatch(hit as Record<string, any>) : undefined;
  }

  private click(button: MouseButton, count: number, at?: number | Target, y?: number): Promise<Match | undefined> {
    const action: Action = { type: "click", button };
    if (count !== 1) action.count = count;
    return this.aimed(action, at, y);
  }

  /**
   * Clicks at (x, y), where the pointer is when no point is given, or at a target on the
   * screen: `leftClick({ text: "OK" })`, `leftClick({ image: "ok.png" })` (then it resolves to
   * the Match clicked, or throws TargetNotFoundError). The same for every click, moveMouse,
   * mousePress/mouseRelease and scroll.
   */
  leftClick(target: Target): Promise<Match>;
  leftClick(x?: number, y?: number): Promise<void>;
  async leftClick(at?: number | Target, y?: number): Promise<Match | void> {
    return this.click("left", 1, at, y);
  }
  rightClick(target: Target): Promise<Match>;
  rightClick(x?: number, y?: number): Promise<void>;
  async rightClick(at?: number | Target, y?: number): Promise<Match | void> {
    return this.click("right", 1, at, y);
  }
  middleClick(target: Target): Promise<Match>;
  middleClick(x?: number, y?: number): Promise<void>;
  async middleClick(at?: number | Target, y?: number): Promise<Match | void> {
    return this.click("middle", 1, at, y);
  }
  doubleClick(target: Target): Promise<Match>;
  doubleClick(x?: number, y?: number): Promise<void>;
  async doubleClick(at?: number | Target, y?: number): Promise<Match | void> {
    return this.click("left", 2, at, y);
  }
  tripleClick(target: Target): Promise<Match>;
  tripleClick(x?: number, y?: number): Promise<void>;
  async tripleClick(at?: number | Target, y?: number): Promise<Match | void> {
    return this.click("left", 3, at, y);
  }

  /** Clicks on a text found on the screen (waiting up to `timeoutMs`, default 5000, for it) and gives where. */
  async clickText(text: string, options: TargetOptions & ClickOptions = {}): Promise<Match> {
    const { button = "left", count = 1, ...target } = options;
    return found(await this.click(button, count, { ...target, text }));
  }

  /** Clicks on an image (PNG bytes or a path) found on the screen, as clickText does. */
  async clickImage(image: ImageInput, options: TargetOptions & ClickOptions = {}): Promise<Match> {
    const { button = "left", count = 1, ...target } = options;
    return found(await this.click(button, count, { ...target, image }));
  }

  moveMouse(target: Target): Promise<Match>;
  moveMouse(x: number, y: number): Promise<void>;
  async moveMouse(at: number | Target, y?: number): Promise<Match | void> {
    return this.aimed({ type: "move" }, at, y);
  }

  /** Holds a mouse button down (at the pointer, at x, y, or at a target). */
  mousePress(button: MouseButton, target: Target): Promise<Match>;
  mousePress(button?: MouseButton, x?: number, y?: number): Promise<void>;
  async mousePress(button: MouseButton = "left", at?: number | Target, y?: number): Promise<Match | void> {
    return this.aimed({ type: "mouse_down", button }, at, y);
  }

  mouseRelease(button: MouseButton, target: Target): Promise<Match>;
  mouseRelease(button?: MouseButton, x?: number, y?: number): Promise<void>;
  async mouseRelease(button: MouseButton = "left", at?: number | Target, y?: number): Promise<Match | void> {
    return this.aimed({ type: "mouse_up", button }, at, y);
  }

  /** Presses at the first point, moves through the others, releases at the last. */
  async drag(path: Array<[number, number]>, options: { button?: MouseButton } = {}): Promise<void> {
    await this.action({ type: "drag", path, ...(options.button ? { button: options.button } : {}) });
  }

  /** Scrolls by wheel notches (+dy down, +dx right), at (x, y) or over `target` if given. */
  scroll(options: ScrollOptions & { target: Target }): Promise<Match>;
  scroll(options: ScrollOptions): Promise<void>;
  async scroll(options: ScrollOptions): Promise<Match | void> {
    const action: Action = { type: "scroll" };
    for (const key of ["dx", "dy"] as const) if (options[key] !== undefined) action[key] = options[key];
    return this.aimed(action, options.target ?? options.x, options.target ? undefined : options.y);
  }

  /** Types text (any Unicode; "\n" is Return, "\t" is Tab). */
  async write(text: string): Promise<void> {
    await this.action({ type: "type", text });
  }

  /**
   * Presses keys, xdotool style: "ctrl+c", "Return", "ctrl+a Delete" (a sequence). An array is
   * one chord: ["ctrl", "shift", "t"] is "ctrl+shift+t".
   */
  async press(keys: string | string[]): Promise<void> {
    await this.action({ type: "key", keys: Array.isArray(keys) ? keys.join("+") : keys });
  }

  /** Waits in the sandbox's input queue (between this sandbox's actions). */
  async wait(ms: number): Promise<void> {
    await this.action({ type: "wait", duration_ms: ms });
  }

  // -- seeing the screen ----------------------------------------------------------------------

  /**
   * Finds an image (a template PNG: bytes or a path) or a text (by OCR) on the screen now:
   * `locate({ image: png })`, `locate({ text: "Save", region: win })`. Image matches come best
   * score first, text matches in reading order; an empty array when nothing matched. A text
   * matches as a case-insensitive substring of a line, or with `exact` as whole words,
   * case-sensitive.
   */
  async locate(query: ImageOrText & LocateOptions): Promise<Matches> {
    const body = await searchBody(query);
    if (query.maxResults !== undefined) body.max_results = query.maxResults;
    return parseMatches(await this.http.json("POST", this.path("/locate"), { json: body }));
  }

  /** Reads the text on the screen (or a region): `text`, and `lines`/`words` with boxes and confidences. */
  async ocr(options: OcrOptions = {}): Promise<OcrResult> {
    const body: Record<string, unknown> = {};
    if (options.region !== undefined) body.region = regionJson(options.region);
    if (options.lang !== undefined) body.lang = options.lang;
    if (options.minConfidence !== undefined) body.min_confidence = options.minConfidence;
    return parseOcr(await this.http.json("POST", this.path("/ocr"), { json: body }));
  }

  /**
   * Compares the screen (or `region` of it) with a baseline PNG of the same size: `identical`,
   * `ssim`, `psnr`, `changedPixels`/`changedRatio`, `changed` boxes (screen coordinates), and
   * with `diff: true` a `diffImage`.
   */
  async compare(baseline: ImageInput, options: CompareOptions = {}): Promise<CompareResult> {
    const body: Record<string, unknown> = { baseline: await encodeImage(baseline) };
    if (options.region !== undefined) body.region = regionJson(options.region);
    if (options.mask !== undefined) body.mask = options.mask.map(regionJson);
    if (options.tolerance !== undefined) body.tolerance = options.tolerance;
    if (options.diff) body.diff = true;
    return parseCompare(await this.http.json("POST", this.path("/compare"), { json: body }));
  }

  /**
   * Waits on the server until the screen (or `region`) shows something: "change" (after frame
   * `since`, default the frame when the wait starts), "stable" (nothing changed for
   * `stableMs`), "image"/"text" (it appears) or "gone" (the image or text is not there).
   * `matched: false` is a timeout, not an error, unless `check: true`. (Not `wait(ms)`, which
   * pauses the input queue.)
   */
  async waitFor(until: WaitUntil, options: WaitForOptions = {}): Promise<WaitResult> {
    const body = await searchBody(options);
    body.until = until;
    if (options.timeoutMs !== undefined) body.timeout_ms = options.timeoutMs;
    if (options.stableMs !== undefined) body.stable_ms = options.stableMs;
    if (options.since !== undefined) body.since = options.since;
    const timeoutMs = (options.timeoutMs ?? 10_000) + 30_000;
    const result = parseWait(await this.http.json("POST", this.path("/wait"), { json: body, timeoutMs }));
    if (options.check && !result.matched)
      throw new WaitTimeoutError(result, until + (options.text !== undefined ? ` ${JSON.stringify(options.text)}` : options.image !== undefined ? " (image)" : ""));
    return result;
  }

  /** Waits until `text` is on the screen (`match` says where). */
  async waitForText(text: string, options: WaitOptions = {}): Promise<WaitResult> {
    return this.waitFor("text", { ...options, text });
  }

  /** Waits until the image (PNG bytes or a path) is on the screen (`match` says where). */
  async waitForImage(image: ImageInput, options: WaitOptions = {}): Promise<WaitResult> {
    return this.waitFor("image", { ...options, image });
  }

  /**
   * Waits until the screen (or `region`) changes after frame `since` (a frameVersion from an
   * earlier answer; default the frame when the wait starts, so take one before the action
   * whose effect you wait for).
   */
  async waitForChange(options: { since?: number; region?: RegionLike; timeoutMs?: number; check?: boolean } = {}): Promise<WaitResult> {
    return this.waitFor("change", options);
  }

  /** Waits until nothing on the screen (or `region`) changed for `stableMs` (default 300). */
  async waitUntilStable(options: { stableMs?: number; region?: RegionLike; timeoutMs?: number; check?: boolean } = {}): Promise<WaitResult> {
    return this.waitFor("stable", options);
  }

  /** Waits until a text or an image is no longer on the screen: `waitUntilGone({ text: "Loading" })`. */
  async waitUntilGone(what: ImageOrText, options: WaitOptions = {}): Promise<WaitResult> {
    return this.waitFor("gone", { ...options, ...what });
  }

  /** Where the mouse pointer is, in API pixels like every coordinate. */
  async cursor(): Promise<Point> {
    const raw = await this.http.json("GET", this.path("/cursor"));
    return { x: raw.x, y: raw.y };
  }

  /** The size coordinates are given in (the screen, or the API resolution if one was set). */
  async screenSize(): Promise<Size> {
    if (!this.size) await this.info();
    return { ...this.size! };
  }

  /** The desktop's top-level windows. */
  async windows(): Promise<Window[]> {
    const raw = await this.http.json<{ windows: Window[] }>("GET", this.path("/windows"));
    return raw.windows;
  }

  /**
   * The desktop's AT-SPI tree: the focused window's (`scope: "focused"`) or every window's,
   * each element with its role, name, states, bounds (screenshot pixels) and ref.
   */
  async accessibilityTree(options: { scope?: "focused" | "all"; app?: string; maxDepth?: number; maxNodes?: number; visibleOnly?: boolean } = {}): Promise<AccessibilityTree> {
    return this.http.json<AccessibilityTree>("GET", this.path("/accessibility"), {
      query: {
        scope: options.scope,
        app: options.app,
        max_depth: options.maxDepth,
        max_nodes: options.maxNodes,
        visible_only: options.visibleOnly,
      },
    });
  }

  /** Accessible elements by role, name (exact, substring or regex) and states, in tree order. */
  async findElements(options: FindElementsOptions): Promise<AccessibleNode[]> {
    const body: Record<string, unknown> = {};
    if (options.role !== undefined) body.role = options.role;
    if (options.name !== undefined) body.name = options.name;
    if (options.nameMatch !== undefined) body.name_match = options.nameMatch;
    if (options.states !== undefined) body.states = options.states;
    if (options.app !== undefined) body.app = options.app;
    if (options.scope !== undefined) body.scope = options.scope;
    if (options.maxResults !== undefined) body.max_results = options.maxResults;
    const raw = await this.http.json<{ matches: AccessibleNode[] }>("POST", this.path("/accessibility/find"), { json: body });
    return raw.matches;
  }

  /**
   * Invokes an action on an element: "press"/"click", "focus", "set_value" (`value`: a text
   * field's text or a number) or "select". Answers the element afterwards.
   */
  async actOnElement(ref: string, action: string = "press", value?: string | number): Promise<{ ref: string; action: string; node: AccessibleNode }> {
    const body: Record<string, unknown> = { ref, action };
    if (value !== undefined) body.value = value;
    return this.http.json("POST", this.path("/accessibility/act"), { json: body });
  }

  /**
   * The screen stream (WebSocket): `for await (const m of await sb.live())` gives the server's
   * events and frames (when the screen changes), e.g. to record an agent's run.
   */
  async live(options: LiveOptions = {}): Promise<LiveStream> {
    const query: Record<string, string | number | undefined> = {
      codec: options.codec ?? "jpeg", fps: options.fps, width: options.width, height: options.height, quality: options.quality,
    };
    if (!this.http.apiKey) {
      if (!this.viewToken) await this.info();
      query.token = this.viewToken;
    }
    return LiveStream.open(this.http, this.path("/stream"), query);
  }

  /**
   * The first window whose title contains `title` (or matches it), looking again each time the
   * screen changes; WaitTimeoutError after `timeoutMs` (default 30 s).
   */
  async waitForWindow(title: string | RegExp, options: { timeoutMs?: number } = {}): Promise<Window> {
    const matches = (t: string) => (typeof title === "string" ? t.includes(title) : title.test(t));
    const deadline = Date.now() + (options.timeoutMs ?? 30_000);
    const find = async () => (await this.windows()).find((w) => matches(w.title));
    let found = await find();
    if (found) return found;
    const live = await this.live({ fps: 5, width: 320, height: 200 });
    try {
      while (Date.now() < deadline) {
        const left = deadline - Date.now();
        const message = await Promise.race([live.next(), new Promise<undefined>((r) => setTimeout(() => r(undefined), Math.min(1000, left)).unref())]);
        if (message === undefined || message.kind === "frame") {
          found = await find();
          if (found) return found;
        }
      }
    } finally {
      live.close();
    }
    throw new DeskboxError(`no window titled ${String(title)} within ${options.timeoutMs ?? 30_000} ms`, { code: "timeout", status: 0 });
  }

  /**
   * The web viewer's URL. View-only by default; `viewOnly: false` gives the control token,
   * which lets whoever opens it use the mouse and keyboard.
   */
  streamUrl(options: { viewOnly?: boolean } = {}): string {
    const viewOnly = options.viewOnly ?? true;
    const token = viewOnly ? this.viewToken : this.controlToken;
    if (!token) throw new DeskboxError("the sandbox's tokens are unknown; call info() first", { code: "no_token", status: 0 });
    return this.http.url(`/view/${encodeURIComponent(this.id)}`, { token });
  }

  /**
   * Ends every process but the desktop session (agent, X server, window manager): the way back
   * from a 409 `sandbox_exhausted` (a sandbox at its process or memory limit) without a re-create.
   */
  async killProcesses(): Promise<{ killed: number; refused: number; rounds: number }> {
    return (await this.http.json("POST", this.path("/processes/kill"), { json: {} })) as {
      killed: number;
      refused: number;
      rounds: number;
    };
  }

  /** Pauses the sandbox; `snapshot: true` saves a microVM to disk (it survives a server restart). */
  async pause(options: { snapshot?: boolean } = {}): Promise<SandboxInfo> {
    const body = options.snapshot !== undefined ? { snapshot: options.snapshot } : {};
    return parseInfo(await this.http.json("POST", this.path("/pause"), { json: body, timeoutMs: 600_000 }));
  }

  async resume(): Promise<SandboxInfo> {
    return parseInfo(await this.http.json("POST", this.path("/resume"), { json: {}, timeoutMs: 600_000 }));
  }

  /**
   * Saves the sandbox as the snapshot `name` ([a-z0-9][a-z0-9_.-]{0,62}) to start sandboxes from
   * with Sandbox.create({ snapshot: name }). ConflictError if the name is taken; a
   * DeskboxError with status 507 if the host's disk cannot hold it.
   */
  async snapshot(name: string, options: { metadata?: Record<string, string> } = {}): Promise<SnapshotInfo> {
    const body: Record<string, unknown> = { name };
    if (options.metadata !== undefined) body.metadata = options.metadata;
    return parseSnapshot(await this.http.json("POST", this.path("/snapshots"), { json: body, timeoutMs: 600_000 }));
  }

  /**
   * Starts `count` (1..16, default 1) copies of the sandbox as it is now, each a Sandbox of its
   * own (kill them as any). A microVM's copies go on where it is; a container's have its files,
   * with processes started fresh. ConflictError when the server has no room for them.
   */
  async fork(options: ForkOptions = {}): Promise<Sandbox[]> {
    const body: Record<string, unknown> = { count: options.count ?? 1 };
    if (options.metadata !== undefined) body.metadata = options.metadata;
    if (options.timeout !== undefined) body.timeout_s = options.timeout;
    const raw = await this.http.json<{ sandboxes: Record<string, any>[] }>("POST", this.path("/fork"), {
      json: body,
      timeoutMs: 600_000,
    });
    const connection = { server: this.http.server, apiKey: this.http.apiKey, requestTimeoutMs: this.http.requestTimeoutMs };
    return raw.sandboxes.map((s) => new Sandbox(new HttpClient(connection), s));
  }

  /** The sandbox ends `seconds` from now (unless extended again). */
  /**
   * Changes the network policy while the sandbox runs (`PATCH .../network`). Each part given
   * replaces that part of the policy in force; `null` removes it (`allow: null`: the internet
   * minus `deny`); parts not given stay. Open connections the new policy forbids are cut at
   * once; `egressKbps: 0` lifts the limit. Resolves to the network as inspect shows it.
   */
  async setNetwork(change: NetworkChange): Promise<Record<string, unknown>> {
    const body: Record<string, unknown> = {};
    for (const key of ["allow", "deny", "rules"] as const) if (change[key] !== undefined) body[key] = change[key];
    if (change.egressKbps !== undefined) body.egress_kbps = change.egressKbps;
    return (await this.http.json("PATCH", this.path("/network"), { json: body })) as Record<string, unknown>;
  }

  async setTimeout(seconds: number): Promise<SandboxInfo> {
    return parseInfo(await this.http.json("POST", this.path("/timeout"), { json: { timeout_s: seconds } }));
  }

  /** Ends the sandbox (nothing of it stays on the host) and answers it as it ended. */
  async kill(): Promise<SandboxInfo> {
    // Like pause and resume, the sandbox as it ends (state "killed").
    return parseInfo(await this.http.json("DELETE", this.path(), { timeoutMs: 120_000 }));
  }

  /** `await using sbx = await Sandbox.create()` kills it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.kill();
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }
}
