// The HTTP layer: global fetch, Bearer auth, JSON errors into typed ones.
import { ConnectionFailedError, DeskboxError, errorFor } from "./errors.js";

/** Where deskboxd is and how to talk to it. */
export interface ConnectionOptions {
  /** Base URL of deskboxd; default env DESKBOX_SERVER or http://127.0.0.1:8700. */
  server?: string;
  /** API key (sent as `Authorization: Bearer KEY`); default env DESKBOX_API_KEY. */
  apiKey?: string;
  /** Per-request timeout in milliseconds for requests without one of their own (default 120000). */
  requestTimeoutMs?: number;
}

export type Query = Record<string, string | number | boolean | undefined>;

export interface RequestOptions {
  query?: Query;
  /** A JSON body (serialised here). */
  json?: unknown;
  /** A raw body. */
  body?: Uint8Array | string;
  timeoutMs?: number;
  /** Ends the request instead of a timeout (a stream read for as long as the caller wants). */
  signal?: AbortSignal;
  accept?: string;
}

function env(name: string): string | undefined {
  const value = typeof process !== "undefined" ? process.env?.[name] : undefined;
  return value === "" ? undefined : value;
}

export class HttpClient {
  readonly server: string;
  readonly apiKey: string | undefined;
  readonly requestTimeoutMs: number;

  constructor(options: ConnectionOptions = {}) {
    const server = options.server ?? env("DESKBOX_SERVER") ?? "http://127.0.0.1:8700";
    this.server = (server.includes("://") ? server : `http://${server}`).replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? env("DESKBOX_API_KEY");
    this.requestTimeoutMs = options.requestTimeoutMs ?? 120_000;
  }

  url(path: string, query?: Query): string {
    let url = this.server + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, String(v));
      const text = params.toString();
      if (text) url += "?" + text;
    }
    return url;
  }

  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.apiKey) headers["authorization"] = `Bearer ${this.apiKey}`;
    if (options.accept) headers["accept"] = options.accept;
    let body: string | Uint8Array | undefined;
    if (options.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.json);
    } else if (options.body !== undefined) {
      headers["content-type"] = "application/octet-stream";
      body = options.body;
    }
    const url = this.url(path, options.query);
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMs;
    let response: Response;
    try {
      const signal = options.signal ?? AbortSignal.timeout(timeoutMs);
      response = await fetch(url, { method, headers, body, signal });
    } catch (e) {
      const err = e as Error & { cause?: { code?: string; message?: string } };
      if (options.signal?.aborted) throw e;
      if (err.name === "TimeoutError" || err.name === "AbortError")
        throw new ConnectionFailedError(`deskboxd at ${this.server} did not answer ${method} ${path} within ${timeoutMs} ms`, {
          code: "timeout",
          status: 0,
          cause: e,
        });
      const why = err.cause?.code ?? err.cause?.message ?? err.message;
      throw new ConnectionFailedError(`cannot reach deskboxd at ${this.server} (${why}); is it running? (set server or DESKBOX_SERVER)`, {
        code: "connection_failed",
        status: 0,
        cause: e,
      });
    }
    if (!response.ok) throw await this.errorFrom(response);
    return response;
  }

  private async errorFrom(response: Response): Promise<DeskboxError> {
    const text = await response.text().catch(() => "");
    let code = `http_${response.status}`;
    let message = text.trim() || response.statusText || `HTTP ${response.status}`;
    let field: string | undefined;
    try {
      const parsed = JSON.parse(text) as { error?: { code?: string; message?: string; field?: string } };
      if (parsed?.error) {
        code = parsed.error.code ?? code;
        message = parsed.error.message ?? message;
        field = parsed.error.field;
      }
    } catch {
      // not JSON: keep the text
    }
    return errorFor(response.status, code, message, field);
  }

  async json<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.request(method, path, options);
    return (await response.json()) as T;
  }

  async bytes(method: string, path: string, options: RequestOptions = {}): Promise<Uint8Array> {
    const response = await this.request(method, path, options);
    return new Uint8Array(await response.arrayBuffer());
  }
}
