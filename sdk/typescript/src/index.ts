export { Sandbox, Commands, Files, Clipboard, Recording, CommandExitError, WaitTimeoutError } from "./sandbox.js";
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
