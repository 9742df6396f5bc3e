// Lifecycle events as they happen, from deskboxd's server-sent event stream (GET /v1/events, or
// one sandbox's with its token):
//   for await (const e of events({ types: ["killed", "error"] })) console.log(e.type, e.sandbox_id);
// From now on, or after an id seen before (`after`; the server's log is durable). A broken link is
// reopened after the last event yielded, so none is lost or repeated. Stop by leaving the loop or
// aborting `signal`. A refused request (bad type, unknown sandbox, wrong token) is a typed error.
import { DeskboxError } from "./errors.js";
import { HttpClient } from "./http.js";
import type { ConnectionOptions } from "./http.js";

export type EventType = "created" | "ready" | "paused" | "resumed" | "timeout" | "killed" | "error" | "snapshot_created";

export interface DeskboxEvent {
  /**
   * Unique across a cluster: "<node>:<n>" in a cluster, "<n>" on a single server (n grows by one
   * with each event of that node). Resume after it with `after` (on the node that wrote it),
   * deduplicate by it.
   */
  id: string;
  type: EventType;
  /** RFC 3339, UTC, milliseconds. */
  time: string;
  sandbox_id: string;
  template: string;
  metadata: Record<string, string>;
  /** Per type: the reason of an error or a kill, a snapshot's name, ... */
  data: Record<string, unknown>;
}

export interface EventOptions extends ConnectionOptions {
  /** Start after this event id, or a number of the node's log (0: everything it kept); default: from now on. */
  after?: string | number;
  types?: EventType[];
  /** One sandbox's events; with `token` (its view or control token) no API key is needed. */
  sandboxId?: string;
  token?: string;
  /** Reopen a broken stream after the last id (default true). */
  reconnect?: boolean;
  signal?: AbortSignal;
}

const RECONNECT_DELAY_MS = 1000;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/** The data of each complete server-sent event block in `text`, and what is left over. */
export function parseEventBlocks(text: string): { events: DeskboxEvent[]; rest: string } {
  const events: DeskboxEvent[] = [];
  let at: number;
  while ((at = text.indexOf("\n\n")) >= 0) {
    const block = text.slice(0, at);
    text = text.slice(at + 2);
    const data = block
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5))
      .join("\n");
    if (data) {  // comments (keep-alives) have none
      const event = JSON.parse(data) as DeskboxEvent;
      event.id = String(event.id);  // a server from before ids named their node sends a number
      events.push(event);
    }
  }
  return { events, rest: text };
}

export async function* events(options: EventOptions = {}): AsyncGenerator<DeskboxEvent> {
  const http = new HttpClient(options);
  const path = options.sandboxId ? `/v1/sandboxes/${encodeURIComponent(options.sandboxId)}/events` : "/v1/events";
  const reconnect = options.reconnect ?? true;
  let last = options.after;
  while (!options.signal?.aborted) {
    const query = { types: options.types?.join(","), token: options.token, after: last };
    const controller = new AbortController();
    const stop = () => controller.abort();
    options.signal?.addEventListener("abort", stop, { once: true });
    try {
      let response: Response;
      try {
        response = await http.request("GET", path, { query, accept: "text/event-stream", signal: controller.signal });
      } catch (e) {
        // A refusal, or no server before anything was seen: the caller's to handle.
        if (!reconnect || last === undefined || (e instanceof DeskboxError && e.status !== 0)) throw e;
        await sleep(RECONNECT_DELAY_MS, options.signal);
        continue;
      }
      const reader = response.body!.getReader();
      const decoder = new TextDecoder();
      let pending = "";
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          const parsed = parseEventBlocks(pending + decoder.decode(value, { stream: true }));
          pending = parsed.rest;
          for (const event of parsed.events) {
            last = event.id;
            yield event;
          }
        }
      } catch (e) {
        if (options.signal?.aborted) return;
        if (!reconnect) throw e;
      }
      if (!reconnect) return;
    } finally {
      options.signal?.removeEventListener("abort", stop);
      controller.abort();  // leaving the loop early closes the connection
    }
  }
}
