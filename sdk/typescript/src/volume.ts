// Volumes: data that outlives sandboxes and server restarts (/v1/volumes). Create one, then
// mount it with Sandbox.create({ volumes: [Volume.mount("work", "/data")] }). One sandbox may
// mount a volume read-write at a time (a second is a ConflictError); any number read-only.
import { HttpClient } from "./http.js";
import type { ConnectionOptions } from "./http.js";

/** An entry of CreateOptions.volumes. */
export interface VolumeMountSpec {
  name: string;
  path: string;
  readOnly?: boolean;
}

/** A sandbox that mounts the volume now. */
export interface VolumeMount {
  sandboxId: string;
  path: string;
  readOnly: boolean;
}

export interface VolumeInfo {
  name: string;
  /** Its size in MiB: the hard quota (writes past it fail with ENOSPC in the sandbox). */
  sizeMb: number;
  usedBytes: number;
  createdAt: string;
  labels: Record<string, string>;
  mounts: VolumeMount[];
  raw: Record<string, any>;
}

function parseVolume(raw: Record<string, any>): VolumeInfo {
  return {
    name: raw.name ?? "",
    sizeMb: raw.size_mb ?? 0,
    usedBytes: raw.used_bytes ?? 0,
    createdAt: raw.created_at ?? "",
    labels: raw.labels ?? {},
    mounts: (raw.mounts ?? []).map((m: Record<string, any>) => ({
      sandboxId: m.sandbox_id ?? "",
      path: m.path ?? "",
      readOnly: Boolean(m.read_only),
    })),
    raw,
  };
}

/** The create request's form of a mount. */
export function volumeMountJson(spec: VolumeMountSpec): Record<string, unknown> {
  return { name: spec.name, path: spec.path, read_only: spec.readOnly ?? false };
}

const volumePath = (name: string) => `/v1/volumes/${encodeURIComponent(name)}`;

export class Volume {
  /** An entry of Sandbox.create's `volumes`. */
  static mount(name: string, path: string, readOnly = false): VolumeMountSpec {
    return { name, path, readOnly };
  }

  /** Creates a volume of sizeMb MiB (default 1024); ConflictError if the name is taken. */
  static async create(
    name: string,
    options: ConnectionOptions & { sizeMb?: number; labels?: Record<string, string> } = {},
  ): Promise<VolumeInfo> {
    const body: Record<string, unknown> = { name, size_mb: options.sizeMb ?? 1024 };
    if (options.labels) body.labels = options.labels;
    return parseVolume(await new HttpClient(options).json("POST", "/v1/volumes", { json: body }));
  }

  static async list(options: ConnectionOptions = {}): Promise<VolumeInfo[]> {
    const raw = await new HttpClient(options).json("GET", "/v1/volumes");
    return (raw.volumes ?? []).map(parseVolume);
  }

  /** NotFoundError if there is none. */
  static async get(name: string, options: ConnectionOptions = {}): Promise<VolumeInfo> {
    return parseVolume(await new HttpClient(options).json("GET", volumePath(name)));
  }

  /** Deletes it and its data; ConflictError while a sandbox mounts it. */
  static async delete(name: string, options: ConnectionOptions = {}): Promise<void> {
    await new HttpClient(options).json("DELETE", volumePath(name));
  }
}
