// Live streams of a sandbox: a stream command's output as it is printed (server-sent events of
// POST /commands with stream: true), and the screen stream's frames and events (the /stream
// WebSocket, through a small RFC 6455 client on node:net: Node 20 has no WebSocket of its own).
import { randomBytes } from "node:crypto";
import { connect, type Socket } from "node:net";
import { ConnectionFailedError, DeskboxError, errorFor } from "./errors.js";
import type { HttpClient } from "./http.js";

/** One piece of a command's output: `text` is UTF-8 (invalid bytes replaced), `data` the exact bytes. */
export interface CommandOutput {
  stream: "stdout" | "stderr";
  text: string;
  data: Uint8Array;
}

/** How a stream command ended (`signal` when a signal ended it). */
export interface CommandExit {
  exitCode: number;
  signal?: number;
  durationMs: number;
}

interface SseEvent {
  name: string;
  data: any;
}

/** The complete `event:`/`data:` blocks of `text`, and what is left over. */
export function parseNamedEvents(text: string): { events: SseEvent[]; rest: string } {
  const events: SseEvent[] = [];
  let at: number;
  while ((at = text.indexOf("\n\n")) >= 0) {
    const block = text.slice(0, at);
    text = text.slice(at + 2);
    let name = "message";
    let data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) name = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (data) events.push({ name, data: JSON.parse(data) });
  }
  return { events, rest: text };
}

/**
 * A running stream command (`sandbox.commands.stream(...)`): `for await` its output as it is
 * printed, then `exit`. Write to its stdin (started with `stdinOpen`) and kill it by its pid.
 * Leaving the loop early (or `close()`) closes the stream, and the server kills the command.
 */
export class CommandStream implements AsyncIterable<CommandOutput> {
  exit: CommandExit | undefined;
  private pending: SseEvent[] = [];
  private text = "";
  private readonly decoder = new TextDecoder();

  private constructor(
    readonly pid: number,
    private readonly reader: ReadableStreamDefaultReader<Uint8Array>,
    private readonly controller: AbortController,
    private readonly control: { writeStdin(pid: number, data: string | Uint8Array, eof: boolean): Promise<void>; kill(pid: number, signal: string | number): Promise<void> },
    first: SseEvent[],
  ) {
    this.pending = first;
  }

  /** Starts the command (`body` as POST /commands takes it, stream set here). */
  static async open(
    http: HttpClient,
    path: string,
    body: Record<string, unknown>,
    control: CommandStream["control"],
  ): Promise<CommandStream> {
    const controller = new AbortController();
    const response = await http.request("POST", path, {
      json: { ...body, stream: true },
      accept: "text/event-stream",
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) throw new ConnectionFailedError("the command's stream ended before its start", { code: "connection_failed", status: 0 });
      const parsed = parseNamedEvents(text + decoder.decode(value, { stream: true }));
      text = parsed.rest;
      if (parsed.events.length === 0) continue;
      const [start, ...rest] = parsed.events;
      if (start.name !== "start") throw new DeskboxError("the stream command's answer did not start with its pid", { code: "bad_stream", status: 0 });
      const stream = new CommandStream(start.data.pid, reader, controller, control, rest);
      stream.text = text;
      return stream;
    }
  }

  private async nextEvent(): Promise<SseEvent | undefined> {
    while (this.pending.length === 0) {
      const { done, value } = await this.reader.read();
      if (done) return undefined;
      const parsed = parseNamedEvents(this.text + this.decoder.decode(value, { stream: true }));
      this.text = parsed.rest;
      this.pending.push(...parsed.events);
    }
    return this.pending.shift();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<CommandOutput> {
    try {
      while (this.exit === undefined) {
        const event = await this.nextEvent();
        if (!event) throw new ConnectionFailedError("the command's stream ended before its exit", { code: "connection_failed", status: 0 });
        if (event.name === "stdout" || event.name === "stderr") {
          const data = event.data.data_b64 != null ? new Uint8Array(Buffer.from(event.data.data_b64, "base64")) : new TextEncoder().encode(event.data.data ?? "");
          yield { stream: event.name, text: event.data.data ?? "", data };
        } else if (event.name === "exit") {
          this.exit = { exitCode: event.data.exit_code, durationMs: event.data.duration_ms ?? 0 };
          if (event.data.signal != null) this.exit.signal = event.data.signal;
        } else if (event.name === "error") {
          throw new DeskboxError(event.data.message ?? "the command's stream failed", { code: event.data.code ?? "stream_failed", status: 0 });
        }
      }
    } finally {
      this.close();
    }
  }

  /** Reads (and drops) the rest of its output; how it ended. */
  async wait(): Promise<CommandExit> {
    for await (const _ of this) {
      // dropped
    }
    return this.exit!;
  }

  writeStdin(data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    return this.control.writeStdin(this.pid, data, options.eof ?? false);
  }

  kill(signal: string | number = "KILL"): Promise<void> {
    return this.control.kill(this.pid, signal);
  }

  close(): void {
    this.controller.abort();
  }
}

/** An encoded picture of the screen: "jpeg" a rectangle at x, y; "h264" an access unit. */
export interface Frame {
  codec: "jpeg" | "h264" | string;
  keyframe: boolean;
  x: number;
  y: number;
  width: number;
  height: number;
  fullWidth: number;
  fullHeight: number;
  captureUs: bigint;
  data: Uint8Array;
}

/** One message of the screen stream: a frame, or the server's JSON event (hello, cursor_position, ...). */
export type LiveMessage = { kind: "frame"; frame: Frame } | { kind: "event"; event: Record<string, any> };

export interface LiveOptions {
  codec?: "jpeg" | "h264";
  fps?: number;
  width?: number;
  height?: number;
  quality?: number;
}

const CODECS: Record<number, string> = { 1: "h264", 2: "jpeg" };

export function parseFrame(payload: Buffer): Frame | undefined {
  if (payload.length < 24) return undefined;
  return {
    codec: CODECS[payload.readUInt8(0)] ?? String(payload.readUInt8(0)),
    keyframe: (payload.readUInt8(1) & 1) === 1,
    x: payload.readUInt16LE(2),
    y: payload.readUInt16LE(4),
    width: payload.readUInt16LE(6),
    height: payload.readUInt16LE(8),
    fullWidth: payload.readUInt16LE(10),
    fullHeight: payload.readUInt16LE(12),
    captureUs: payload.readBigUInt64LE(16),
    data: new Uint8Array(payload.subarray(24)),
  };
}

/**
 * The screen stream of a sandbox (`sandbox.live()`): `for await` its messages (the first is the
 * server's hello); frames come when the screen changes. `close()` when done.
 */
export class LiveStream implements AsyncIterable<LiveMessage> {
  private buffer: Buffer = Buffer.alloc(0);
  private messages: LiveMessage[] = [];
  private waiting: (() => void) | undefined;
  private ended: Error | null | undefined;  // null: a normal close
  private fragments: Buffer[] = [];
  private fragmentOpcode = 0;

  private constructor(private readonly socket: Socket) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("close", () => this.finish(null));
    socket.on("error", (e) => this.finish(new ConnectionFailedError(`the stream broke: ${e.message}`, { code: "connection_failed", status: 0 })));
  }

  static async open(http: HttpClient, path: string, query: Record<string, string | number | undefined>): Promise<LiveStream> {
    const url = new URL(http.url(path, query));
    const socket = connect(Number(url.port || 80), url.hostname);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", (e) => reject(new ConnectionFailedError(`cannot reach deskboxd at ${http.server}: ${e.message}`, { code: "connection_failed", status: 0 })));
    });
    const key = randomBytes(16).toString("base64");
    const lines = [
      `GET ${url.pathname}${url.search} HTTP/1.1`,
      `Host: ${url.host}`,
      "Upgrade: websocket",
      "Connection: Upgrade",
      `Sec-WebSocket-Key: ${key}`,
      "Sec-WebSocket-Version: 13",
      "User-Agent: deskbox-typescript",
    ];
    if (http.apiKey) lines.push(`Authorization: Bearer ${http.apiKey}`);
    socket.write(lines.join("\r\n") + "\r\n\r\n");
    let head = Buffer.alloc(0);
    const rest = await new Promise<Buffer>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf("\r\n\r\n");
        if (end < 0) return;
        socket.off("data", onData);
        const status = Number(head.subarray(0, head.indexOf("\r\n")).toString().split(" ")[1]);
        if (status === 101) return resolve(head.subarray(end + 4));
        // The refusal's JSON error is its body; wait for the close to have all of it.
        let body = head.subarray(end + 4);
        socket.on("data", (more: Buffer) => { body = Buffer.concat([body, more]); });
        socket.once("close", () => {
          let code = `http_${status}`, message = body.toString() || `HTTP ${status}`, field: string | undefined;
          try {
            const parsed = JSON.parse(body.toString());
            code = parsed.error?.code ?? code;
            message = parsed.error?.message ?? message;
            field = parsed.error?.field;
          } catch {
            // not JSON
          }
          reject(errorFor(status, code, message, field));
        });
        setTimeout(() => socket.destroy(), 5000).unref();
      };
      socket.on("data", onData);
      socket.once("close", () => reject(new ConnectionFailedError("the connection closed during the WebSocket handshake", { code: "connection_failed", status: 0 })));
    });
    const stream = new LiveStream(socket);
    if (rest.length) stream.onData(rest);
    return stream;
  }

  private send(opcode: number, payload: Buffer): void {
    const mask = randomBytes(4);
    const n = payload.length;
    const header = n < 126 ? Buffer.from([0x80 | opcode, 0x80 | n])
      : n < 65536 ? Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | 126]), Buffer.from([n >> 8, n & 255])])
      : (() => { const h = Buffer.alloc(10); h[0] = 0x80 | opcode; h[1] = 0x80 | 127; h.writeBigUInt64BE(BigInt(n), 2); return h; })();
    const masked = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]));
    if (!this.socket.destroyed) this.socket.write(Buffer.concat([header, mask, masked]));
  }

  private onData(chunk: Buffer): void {
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    for (;;) {
      if (this.buffer.length < 2) return;
      const b0 = this.buffer[0], b1 = this.buffer[1];
      let n = b1 & 0x7f, at = 2;
      if (n === 126) {
        if (this.buffer.length < 4) return;
        n = this.buffer.readUInt16BE(2);
        at = 4;
      } else if (n === 127) {
        if (this.buffer.length < 10) return;
        n = Number(this.buffer.readBigUInt64BE(2));
        at = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      if (this.buffer.length < at + (masked ? 4 : 0) + n) return;
      let payload = this.buffer.subarray(at + (masked ? 4 : 0), at + (masked ? 4 : 0) + n);
      if (masked) {
        const mask = this.buffer.subarray(at, at + 4);
        payload = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]));
      }
      this.buffer = this.buffer.subarray(at + (masked ? 4 : 0) + n);
      const opcode = b0 & 0x0f;
      if (opcode === 0x9) this.send(0xa, payload);
      else if (opcode === 0x8) {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        this.send(0x8, payload.subarray(0, 2));
        this.socket.end();
        this.finish(code === 1000 || code === 1001 ? null : new ConnectionFailedError(`the server closed the stream (${code} ${payload.subarray(2).toString()})`, { code: "websocket_closed", status: 0 }));
      } else if (opcode !== 0xa) {
        if (opcode !== 0) this.fragmentOpcode = opcode;
        this.fragments.push(Buffer.from(payload));
        if (b0 & 0x80) {
          const whole = Buffer.concat(this.fragments);
          this.fragments = [];
          if (this.fragmentOpcode === 1) this.push({ kind: "event", event: JSON.parse(whole.toString("utf8")) });
          else {
            const frame = parseFrame(whole);
            if (frame) this.push({ kind: "frame", frame });
          }
        }
      }
    }
  }

  private push(message: LiveMessage): void {
    this.messages.push(message);
    this.waiting?.();
  }

  private finish(error: Error | null): void {
    if (this.ended === undefined) this.ended = error;
    this.waiting?.();
  }

  /** The next message, or undefined once the stream has ended. */
  async next(): Promise<LiveMessage | undefined> {
    while (this.messages.length === 0) {
      if (this.ended !== undefined) {
        if (this.ended) throw this.ended;
        return undefined;
      }
      await new Promise<void>((resolve) => { this.waiting = resolve; });
      this.waiting = undefined;
    }
    return this.messages.shift();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<LiveMessage> {
    try {
      for (;;) {
        const message = await this.next();
        if (!message) return;
        yield message;
      }
    } finally {
      this.close();
    }
  }

  /** Asks the encoder for a keyframe next. */
  keyframe(): void {
    this.send(0x1, Buffer.from('{"type":"keyframe"}'));
  }

  close(): void {
    if (this.socket.destroyed) return;
    const code = Buffer.alloc(2);
    code.writeUInt16BE(1000);
    this.send(0x8, code);
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }
}
