// What sandboxes used, from deskboxd's usage ledger (kept after they are gone): usage() sums a
// period, grouped by template, day or a metadata key; metrics(id) is a sandbox's samples. Times
// are Dates, RFC 3339 strings or Unix seconds; a bad parameter is a BadRequestError naming it.
// The answers are the API's JSON as it is (snake_case; see the OpenAPI document's UsageReport
// and SandboxMetrics).
import { HttpClient } from "./http.js";
import type { ConnectionOptions, Query } from "./http.js";

export type UsageTime = Date | string | number;

export interface UsageTotals {
  cpu_seconds: number;
  vcpu_seconds: number;
  memory_gib_seconds: number;
  memory_reserved_gib_seconds: number;
  disk_gib_seconds: number;
  disk_peak_bytes: number;
  egress_bytes: number;
  ingress_bytes: number;
  lifetime_seconds: number;
  paused_seconds: number;
}

export interface UsageGroup extends UsageTotals {
  /** The template, the metadata value ("" without it), the UTC day, or "all". */
  key: string;
  sandboxes: number;
  /** Only when the server has prices (--price-vcpu-second, --price-gib-second). */
  cost?: number;
}

export interface UsageReport {
  from: string;
  to: string;
  group_by: string;
  groups: UsageGroup[];
  total: Omit<UsageGroup, "key">;
}

export interface UsageSample {
  at: string;
  at_ms: number;
  state: "running" | "paused";
  cpu_percent: number;
  memory_resident_bytes: number;
  memory_reserved_bytes: number;
  disk_bytes: number;
  net_out_bytes: number;
  net_in_bytes: number;
  totals: UsageTotals;
}

export interface SandboxMetrics {
  id: string;
  from: string;
  to: string;
  step_s: number;
  state: "running" | "ended";
  ended_at?: string;
  samples: UsageSample[];
}

export interface UsageOptions extends ConnectionOptions {
  from?: UsageTime;
  to?: UsageTime;
  /** "template", "day" or "metadata.KEY". */
  groupBy?: string;
}

export interface MetricsOptions extends ConnectionOptions {
  from?: UsageTime;
  to?: UsageTime;
  /** Whole seconds: one sample per step. */
  step?: number;
}

function timeText(value: UsageTime | undefined): string | undefined {
  if (value === undefined || typeof value === "string") return value;
  if (value instanceof Date) return value.toISOString();
  return String(Math.trunc(value));
}

/** Usage summed over the period (default: everything recorded, up to now). */
export async function usage(options: UsageOptions = {}): Promise<UsageReport> {
  const query: Query = { from: timeText(options.from), to: timeText(options.to), group_by: options.groupBy };
  return new HttpClient(options).json("GET", "/v1/usage", { query });
}

/** The same as usage(), as CSV text (a header row and a row per group). */
export async function usageCsv(options: UsageOptions = {}): Promise<string> {
  const query: Query = { from: timeText(options.from), to: timeText(options.to), group_by: options.groupBy, format: "csv" };
  const bytes = await new HttpClient(options).bytes("GET", "/v1/usage", { query });
  return new TextDecoder().decode(bytes);
}

/** A sandbox's samples, also after it ended (within the server's --metrics-keep-h). */
export async function metrics(sandboxId: string, options: MetricsOptions = {}): Promise<SandboxMetrics> {
  const query: Query = { from: timeText(options.from), to: timeText(options.to), step: options.step };
  return new HttpClient(options).json("GET", `/v1/sandboxes/${encodeURIComponent(sandboxId)}/metrics`, { query });
}
