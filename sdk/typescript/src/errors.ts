// Typed errors for deskboxd's JSON error bodies: {"error":{"code","message","field"}}.
// The same classes as the Python SDK (deskbox.errors), chosen by code first, then by status.

export interface ErrorOptions {
  code: string;
  /** HTTP status; 0 when no answer arrived. */
  status: number;
  field?: string | null;
  cause?: unknown;
}

/** Any error deskboxd answered with, or a failure to reach it. */
export class DeskboxError extends Error {
  /** The server's error code ("invalid_action", "not_found", ...), or an SDK code ("connection_failed"). */
  readonly code: string;
  /** The request field the error is about ("x", "actions[2].coordinate[0]", "path"), if the server named one. */
  readonly field: string | undefined;
  /** The HTTP status; 0 when no answer arrived. */
  readonly status: number;

  constructor(message: string, options: ErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code;
    this.field = options.field || undefined;
    this.status = options.status;
  }
}

/** The server could not be reached (refused, reset, no answer in time); the message names its URL. */
export class ConnectionFailedError extends DeskboxError {}
/** 400: the request was wrong (a bad field, an unknown option). */
export class BadRequestError extends DeskboxError {}
/** 400 "invalid_action": an action that does not parse or a coordinate off the screen. */
export class InvalidActionError extends BadRequestError {}
/** 401: a missing or wrong API key or token. */
export class AuthenticationError extends DeskboxError {}
/** 403: not allowed (a file the sandbox user may not touch...). */
export class PermissionDeniedError extends DeskboxError {}
/** 404: no such sandbox, file, recording or endpoint. */
export class NotFoundError extends DeskboxError {}
/** 409: the sandbox is not in a state for this (busy, not built, already recording...). */
export class ConflictError extends DeskboxError {}
/** 409 "sandbox_paused": resume it first. */
export class SandboxPausedError extends ConflictError {}
/**
 * 409 "sandbox_exhausted": the sandbox is at its process or memory limit (`field` names it, e.g.
 * "limits.pids"); `sandbox.killProcesses()` brings it back.
 */
export class SandboxExhaustedError extends ConflictError {}
/**
 * 422 "target_not_found": what an action aimed at (its `target` text or image) did not appear
 * on the screen in time. `field` names it ("target", "actions[2].target"); the actions before it
 * in the batch have run.
 */
export class TargetNotFoundError extends DeskboxError {}
/** 413: the request body is over the server's limit. */
export class PayloadTooLargeError extends DeskboxError {}
/** 429: too many sandboxes. */
export class RateLimitError extends DeskboxError {}
/** 5xx: the sandbox or the server failed doing it. */
export class SandboxError extends DeskboxError {}
/** 504: the sandbox's agent or the command did not answer in time. */
export class TimeoutError extends SandboxError {}

/** Alias of ConnectionFailedError. */
export const ConnectionError = ConnectionFailedError;
export type ConnectionError = ConnectionFailedError;

type ErrorClass = new (message: string, options: ErrorOptions) => DeskboxError;

const byCode: Record<string, ErrorClass> = {
  invalid_action: InvalidActionError,
  sandbox_paused: SandboxPausedError,
  sandbox_exhausted: SandboxExhaustedError,
  target_not_found: TargetNotFoundError,
};

const byStatus: Record<number, ErrorClass> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  429: RateLimitError,
  504: TimeoutError,
};

/** The typed error for an answer with this status and error body. */
export function errorFor(status: number, code: string, message: string, field?: string | null): DeskboxError {
  const cls = byCode[code] ?? byStatus[status] ?? (status >= 500 ? SandboxError : DeskboxError);
  return new cls(message, { code, status, field });
}
