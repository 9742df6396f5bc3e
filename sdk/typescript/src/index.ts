export { Sandbox, Commands, Files, Clipboard, Recording, CommandExitError, WaitTimeoutError } from "./sandbox.js";
export { Template, TemplateBuildError, IgnorePatterns, PART_SIZE } from "./template.js";
export type { TemplateBuild, TemplateInfo, BuildOptions, ImportOptions, ImportImageOptions, BuildError, BuildStatus, LogCallback } from "./template.js";
export { Snapshot } from "./snapshot.js";
export type { SnapshotInfo } from "./snapshot.js";
export { Volume } from "./volume.js";
export { Secret } from "./secret.js";
export type { SecretInfo } from "./secret.js";
export { usage, usageCsv, metrics } from "./usage.js";
export { events, parseEventBlocks } from "./events.js";
export { CommandStream, LiveStream, parseFrame, parseNamedEvents } from "./live.js";
export type { CommandOutput, CommandExit, Frame, LiveMessage, LiveOptions } from "./live.js";
export type { DeskboxEvent, EventOptions, EventType } from "./events.js";
export type { UsageReport, UsageGroup, UsageTotals, UsageSample, SandboxMetrics, UsageOptions, MetricsOptions, UsageTime } from "./usage.js";
export type { VolumeInfo, VolumeMount, VolumeMountSpec } from "./volume.js";
export { HttpClient } from "./http.js";
export type { ConnectionOptions } from "./http.js";
export {
  DeskboxError,
  BadRequestError,
  AuthenticationError,
  NotFoundError,
  ConflictError,
  SandboxError,
  ConnectionError,
  ConnectionFailedError,
  InvalidActionError,
  PermissionDeniedError,
  SandboxExhaustedError,
  SandboxPausedError,
  TargetNotFoundError,
  PayloadTooLargeError,
  RateLimitError,
  TimeoutError,
} from "./errors.js";
export type * from "./types.js";
