// Named snapshots: a sandbox saved under a name (Sandbox.snapshot), to start new sandboxes from
// with Sandbox.create({ snapshot: "name" }); Sandbox.fork starts copies at once. A microVM's
// snapshot (kind "memory") holds its memory and disk: processes keep running in a sandbox
// started from it. A container's (kind "filesystem") holds the files it wrote: processes start
// fresh.
import { HttpClient } from "./http.js";
import type { ConnectionOptions } from "./http.js";

export interface SnapshotInfo {
  name: string;
  kind: "memory" | "filesystem" | (string & {});
  runtime: string;
  template: string;
  /** The sandbox it was taken of. */
  sourceSandbox: string;
  createdAt: Date;
  sizeBytes: number;
  metadata: Record<string, string>;
  /** The screen size, and the limits, a sandbox started from it gets. */
  resolution: [number, number];
  limits: { memoryMb?: number; cpus?: number; pids?: number; diskMb?: number };
  raw: Record<string, any>;
}

/** @internal */
export function parseSnapshot(raw: Record<string, any>): SnapshotInfo {
  const limits: SnapshotInfo["limits"] = {};
  const l = raw.limits ?? {};
  if (l.memory_mb !== undefined) limits.memoryMb = l.memory_mb;
  if (l.cpus !== undefined) limits.cpus = l.cpus;
  if (l.pids !== undefined) limits.pids = l.pids;
  if (l.disk_mb !== undefined) limits.diskMb = l.disk_mb;
  return {
    name: raw.name ?? "",
    kind: raw.kind ?? "",
    runtime: raw.runtime ?? "",
    template: raw.template ?? "",
    sourceSandbox: raw.source_sandbox ?? "",
    createdAt: new Date(raw.created_at),
    sizeBytes: raw.size_bytes ?? 0,
    metadata: raw.metadata ?? {},
    resolution: raw.resolution ?? [0, 0],
    limits,
    raw,
  };
}

const snapshotPath = (name: string) => `/v1/snapshots/${encodeURIComponent(name)}`;

/** Snapshots on the server (/v1/snapshots); take one with Sandbox.snapshot. */
export class Snapshot {
  static async list(options: ConnectionOptions = {}): Promise<SnapshotInfo[]> {
    const raw = await new HttpClient(options).json("GET", "/v1/snapshots");
    return (raw.snapshots ?? []).map(parseSnapshot);
  }

  /** NotFoundError if there is none. */
  static async get(name: string, options: ConnectionOptions = {}): Promise<SnapshotInfo> {
    return parseSnapshot(await new HttpClient(options).json("GET", snapshotPath(name)));
  }

  /** Deletes it; NotFoundError if there is none. */
  static async delete(name: string, options: ConnectionOptions = {}): Promise<void> {
    await new HttpClient(options).json("DELETE", snapshotPath(name));
  }
}
