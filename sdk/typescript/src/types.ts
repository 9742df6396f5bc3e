// Data shapes of deskboxd API v1, in camelCase.

export type Runtime = "container" | "microvm" | (string & {});
export type MouseButton = "left" | "right" | "middle" | "back" | "forward";
export type Dialect = "native" | "anthropic" | "openai";
export type SandboxState = "starting" | "running" | "paused" | "error" | "killed" | (string & {});

/** A network policy: true (the internet), false (loopback only) or allow/deny lists. */
export type NetworkPolicy = boolean | { allow?: string[]; deny?: string[] };

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
