// Data shapes of deskboxd API v1, in camelCase.
import type { VolumeMountSpec } from "./volume.js";

export type Runtime = "container" | "microvm" | (string & {});
export type MouseButton = "left" | "right" | "middle" | "back" | "forward";
export type Dialect = "native" | "anthropic" | "openai";
export type SandboxState = "starting" | "running" | "paused" | "error" | "killed" | (string & {});

/** A network policy: true (the internet), false (loopback only) or allow/deny lists. */
export type NetworkPolicy = boolean | { allow?: string[]; deny?: string[] };

/** `Sandbox.setNetwork`: each part given replaces that part of the policy; `null` removes it. */
export interface NetworkChange {
  /** Only these destinations (a domain, *.domain, an IP or a CIDR); `null`: all public addresses. */
  allow?: string[] | null;
  /** Never these destinations. */
  deny?: string[] | null;
  /** Credential rules: `{domain, path?, headers: {Name: "value" | "secret:NAME"}}`. */
  rules?: Array<Record<string, unknown>> | null;
  /** Egress limit for every flow, open ones too, in kbit/s; 0: none. */
  egressKbps?: number;
}

export interface CreateOptions {
  /** Template name (server default: minimal). */
  template?: string;
  /** "container" (default) or "microvm". */
  runtime?: Runtime;
  /** Screen size [width, height], each 64..8192. */
  resolution?: [number, number];
  /** Coordinates of actions are in this size and scaled to the screen. */
  apiResolution?: [number, number];
  dpi?: number;
  /** Lifetime in whole seconds (server default 300). */
  timeout?: number;
  /** What the timeout does: "kill" (default) or "pause". */
  onTimeout?: "kill" | "pause";
  network?: NetworkPolicy;
  metadata?: Record<string, unknown>;
  /** Environment of the desktop session and commands. */
  env?: Record<string, string>;
  /** Start a VNC server for the sandbox. */
  vnc?: boolean;
  /** Record from the start: true or {actions, fps}. */
  record?: boolean | { actions?: boolean; fps?: number };
  limits?: { memoryMb?: number; cpus?: number; egressKbps?: number; pids?: number };
  /** Volumes to mount: [Volume.mount("work", "/data"), ...] (see volume.ts). */
  volumes?: VolumeMountSpec[];
  /**
   * Start from this snapshot (Sandbox.snapshot): template, runtime, resolution, dpi and limits
   * are the snapshot's (asking for others is a BadRequestError).
   */
  snapshot?: string;
  /** A sandbox its timeout paused resumes on the next request that needs it (implies onTimeout "pause"). */
  autoResume?: boolean;
}

export interface ForkOptions {
  /** How many copies, 1..16 (default 1). */
  count?: number;
  /** The copies' metadata. */
  metadata?: Record<string, unknown>;
  /** The copies' lifetime in whole seconds. */
  timeout?: number;
}

export interface SandboxInfo {
  id: string;
  state: SandboxState;
  runtime: string;
  template: string;
  resolution: [number, number];
  apiResolution?: [number, number];
  dpi: number;
  createdAt: Date;
  expiresAt: Date;
  onTimeout: "kill" | "pause";
  metadata: Record<string, unknown>;
  network: Record<string, unknown>;
  /** Why the sandbox is in state "error". */
  error?: string;
  logTail?: string;
  snapshot?: { bytes: number; savedAt: Date };
  /** The named snapshot it was started from (Sandbox.create({ snapshot })). */
  snapshotName?: string;
  autoResume: boolean;
  /** While paused: "request" (pause()) or "timeout". */
  pausedReason?: "request" | "timeout" | (string & {});
  /** Only on create and inspect (GET one sandbox), not in lists. */
  viewToken?: string;
  controlToken?: string;
  vnc?: { host: string; port: number; password?: string; viewPassword?: string };
  /** Id of the recording in progress. */
  recording?: string;
  /** Ports programs listen on inside (inspect only). */
  ports?: unknown;
  /** The server's JSON as it came. */
  raw: Record<string, any>;
}

export interface ScreenshotOptions {
  format?: "png" | "jpeg" | "webp";
  /** JPEG/WebP quality 1..100. */
  quality?: number;
  /** Scale to this width/height (aspect kept when only one is given). */
  width?: number;
  height?: number;
  /** Draw the mouse pointer into the image. */
  cursor?: boolean;
  /** PNG compression level. */
  compression?: number;
}

export interface RunOptions {
  /** Return at once with the pid; the command keeps running. */
  background?: boolean;
  /** Seconds before the command is killed (server default 60). */
  timeout?: number;
  env?: Record<string, string>;
  cwd?: string;
  /** Text fed to the command's standard input. */
  stdin?: string;
  /** Throw CommandExitError when the exit code is not 0 (default: it is a result). */
  check?: boolean;
}

export interface CommandResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  /** The signal that ended it, when one did. */
  signal?: string | number;
  /** The server's JSON as it came. */
  raw: Record<string, any>;
}

export interface BackgroundCommand {
  pid: number;
}

export interface FileEntry {
  name: string;
  type: "file" | "dir" | "symlink" | (string & {});
  size: number;
  mode: number;
  /** Seconds since the epoch. */
  mtime: number;
}

/** An element of the desktop's AT-SPI tree (`Sandbox.accessibilityTree`, `findElements`). */
export interface AccessibleNode {
  /** Stable for the element's life; what `actOnElement` takes. */
  ref: string;
  /** AT-SPI role: "push button", "entry", "text", "frame", ... */
  role: string;
  name: string;
  description?: string;
  states: string[];
  /** In the same pixels as screenshots and actions; absent when off the screen. */
  bounds?: { x: number; y: number; width: number; height: number };
  offscreen?: boolean;
  actions?: string[];
  value?: number;
  text?: string;
  /** Top-level windows: their application. */
  app?: string;
  pid?: number;
  children?: AccessibleNode[];
}

export interface AccessibilityTree {
  windows: AccessibleNode[];
  node_count: number;
  truncated: boolean;
}

export interface FindElementsOptions {
  role?: string;
  name?: string;
  nameMatch?: "exact" | "substring" | "regex";
  states?: string[];
  app?: string;
  scope?: "all" | "focused";
  maxResults?: number;
}

export interface Window {
  id: number;
  title: string;
  class: string;
  instance: string;
  pid: number;
  x: number;
  y: number;
  width: number;
  height: number;
  active: boolean;
  visible: boolean;
  frame?: { x: number; y: number; width: number; height: number };
}

export interface Point {
  x: number;
  y: number;
}

export interface Size {
  width: number;
  height: number;
}

export interface ScrollOptions {
  /** Wheel notches: +dx right, +dy down. */
  dx?: number;
  dy?: number;
  /** Where to scroll (default: where the pointer is). */
  x?: number;
  y?: number;
  /** Or what to scroll over: a text or an image found on the screen. */
  target?: Target;
}

export interface RecordingStatus {
  recording: string;
  state: "recording" | "finished" | (string & {});
  actions?: boolean;
  fps?: number;
  bytes?: number;
  frames?: number;
  durationMs?: number;
}

/** A native action ({"type":"click",...}) or one of another dialect. */
export type Action = Record<string, unknown>;
export type ActionResult = Record<string, unknown>;
/** A block of an Anthropic assistant message's content (tool_use, text, ...), as the API sent it. */
export type ContentBlock = Record<string, any>;
/** A tool_result block answering one tool_use block, ready for the next user message. */
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  toolset_name?: "computer";
  content: Array<Record<string, any>>;
}

// ---------------------------------------------------------------------------------------------
// Seeing the screen: locate, ocr, compare, wait, and targets of actions. Coordinates and sizes
// are in the pixels the client sees (the screen, or the API resolution if one was set).
// ---------------------------------------------------------------------------------------------

/** A box on the screen: [x, y, width, height]. */
export type Region = [number, number, number, number];
/** A region, or anything with x, y, width and height (a Window, a Match, an OcrWord...). */
export type RegionLike = Region | { x: number; y: number; width: number; height: number };
/**
 * A PNG: its bytes (Uint8Array, Buffer, ArrayBuffer), a path to a file, or a
 * "data:image/png;base64,..." URL. Pixels with alpha < 128 are left out of the match.
 */
export type ImageInput = Uint8Array | ArrayBuffer | string;

/** How an image or a text is searched for (locate, wait, targets). */
export interface SearchOptions {
  /** Where to look (default: the whole screen). */
  region?: RegionLike;
  /** 0..1: the score an image match needs (default 0.9; ignored for text). */
  threshold?: number;
  /** Sizes the template is tried at, 0.25..4, at most 8 (default [1]; images only). */
  scales?: number[];
  /** Compare luminance only (images only). */
  grayscale?: boolean;
  /** Text: whole words, case-sensitive, instead of a case-insensitive substring. */
  exact?: boolean;
  /** OCR language(s): "eng", "eng+deu" (text only). */
  lang?: string;
}

/** Exactly one of them: an image (a template) or a text (found by OCR). */
export type ImageOrText = { image: ImageInput; text?: undefined } | { text: string; image?: undefined };

export interface LocateOptions extends SearchOptions {
  /** 1..100 (default 10). */
  maxResults?: number;
}

/** Where an image or a text was found; `center` is where a targeted action lands. */
export interface Match {
  x: number;
  y: number;
  width: number;
  height: number;
  /** 0..1. */
  score: number;
  center: [number, number];
  /** Image matches: the template's scale that matched. */
  scale?: number;
  /** Text matches: the words as read. */
  text?: string;
  raw: Record<string, any>;
}

/**
 * What locate() gives: the matches (best score first for an image, reading order for a text),
 * an empty array when nothing matched. `frameVersion` (the frame looked at) and `elapsedMs`
 * are non-enumerable, so the array compares like a plain one.
 */
export type Matches = Match[] & { readonly frameVersion: number; readonly elapsedMs: number };

export interface OcrOptions {
  region?: RegionLike;
  lang?: string;
  /** 0..100: words below it are left out (default 0). */
  minConfidence?: number;
}

export interface OcrLine {
  /** Its words joined by one space. */
  text: string;
  x: number;
  y: number;
  width: number;
  height: number;
  /** 0..100. */
  confidence: number;
}

export interface OcrWord extends OcrLine {
  /** Index into OcrResult.lines. */
  line: number;
}

export interface OcrResult {
  /** All lines joined by "\n". */
  text: string;
  /** In reading order. */
  lines: OcrLine[];
  /** Line by line, left to right. */
  words: OcrWord[];
  frameVersion: number;
  elapsedMs: number;
  raw: Record<string, any>;
}

export interface CompareOptions {
  /** Compare this region (the baseline is its size); default the whole screen. */
  region?: RegionLike;
  /** Areas left out (screen coordinates). */
  mask?: RegionLike[];
  /** 0..255: a pixel has changed when a channel differs by more (default 0). */
  tolerance?: number;
  /** Also return diffImage (a PNG). */
  diff?: boolean;
}

export interface CompareResult {
  identical: boolean;
  /** 0..1. */
  ssim: number;
  /** dB; null when nothing differs. */
  psnr: number | null;
  changedPixels: number;
  /** 0..1 of the compared area. */
  changedRatio: number;
  /** Boxes of the changed areas, screen coordinates. */
  changed: Region[];
  /** Only with `diff: true`. */
  diffImage?: Uint8Array;
  /** The compared size. */
  width: number;
  height: number;
  frameVersion: number;
  elapsedMs: number;
  raw: Record<string, any>;
}

export type WaitUntil = "change" | "stable" | "image" | "text" | "gone";

export interface WaitOptions extends SearchOptions {
  /** 0..120000 (default 10000). */
  timeoutMs?: number;
  /** Throw WaitTimeoutError instead of returning `matched: false`. */
  check?: boolean;
}

export interface WaitForOptions extends WaitOptions {
  /** until "stable": how long nothing may change, 1..60000 (default 300). */
  stableMs?: number;
  /** until "change": changes after this frameVersion (default: the frame when the wait starts). */
  since?: number;
  /** until "image"/"gone". */
  image?: ImageInput;
  /** until "text"/"gone". */
  text?: string;
}

export interface WaitResult {
  /** false: the wait timed out (not an error unless `check: true`). */
  matched: boolean;
  until: WaitUntil | (string & {});
  elapsedMs: number;
  frameVersion: number;
  /** until image/text: where it appeared. */
  match?: Match;
  /** until change: the boxes that changed. */
  changed?: Region[];
  raw: Record<string, any>;
}

/** How a targeted action finds its target. */
export interface TargetOptions extends SearchOptions {
  /** Which match (default 0: the first). */
  index?: number;
  /** [dx, dy] from the match's centre. */
  offset?: [number, number];
  /** How long the server waits for it to appear, 0..60000 (default 5000). */
  timeoutMs?: number;
}

/**
 * What a click, move, scroll or mouse press/release aims at instead of x/y:
 * `{ text: "OK" }` or `{ image: "ok.png", threshold: 0.8 }`.
 */
/** An accessible element as a target: the centre of its bounds (as `findElements` finds it). */
export interface AccessibleTarget {
  role: string;
  name?: string;
  nameMatch?: "exact" | "substring" | "regex";
  states?: string[];
  app?: string;
  image?: undefined;
  text?: undefined;
}

export type Target = (ImageOrText & TargetOptions) | (AccessibleTarget & Pick<TargetOptions, "index" | "offset" | "timeoutMs">);

export interface ClickOptions {
  button?: MouseButton;
  /** 2: double click, 3: triple click. */
  count?: number;
}
