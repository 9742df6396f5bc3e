// Seeing the screen: request bodies and answers of locate, ocr, compare, wait, and action targets.
import type {
  CompareResult,
  ImageInput,
  Match,
  Matches,
  OcrResult,
  Region,
  RegionLike,
  SearchOptions,
  Target,
  TargetOptions,
  ImageOrText,
  WaitResult,
} from "./types.js";

const DATA_URL = "data:image/png;base64,";

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

/** The base64 text the API takes for a PNG given as bytes, a file path or a data: URL. */
export async function encodeImage(image: ImageInput): Promise<string> {
  if (typeof image === "string") {
    if (image.startsWith("data:")) return image;
    const { readFile } = await import("node:fs/promises");
    return base64(await readFile(image));
  }
  if (image instanceof ArrayBuffer) return base64(new Uint8Array(image));
  if (image instanceof Uint8Array) return base64(image);
  throw new TypeError(`an image is PNG bytes, a file path or a data: URL, not ${typeof image}`);
}

/** [x, y, width, height] from an array or an object with those fields. */
export function regionJson(region: RegionLike): Region {
  if (Array.isArray(region)) {
    if (region.length !== 4) throw new TypeError(`a region is [x, y, width, height], not ${JSON.stringify(region)}`);
    return [region[0], region[1], region[2], region[3]];
  }
  return [region.x, region.y, region.width, region.height];
}

/** The request fields locate, wait and targets share (only those given). */
export async function searchBody(o: SearchOptions & { image?: ImageInput; text?: string }): Promise<Record<string, unknown>> {
  const body: Record<string, unknown> = {};
  if (o.image !== undefined) body.image = await encodeImage(o.image);
  if (o.text !== undefined) body.text = o.text;
  if (o.region !== undefined) body.region = regionJson(o.region);
  if (o.threshold !== undefined) body.threshold = o.threshold;
  if (o.scales !== undefined) body.scales = o.scales;
  if (o.grayscale !== undefined) body.grayscale = o.grayscale;
  if (o.exact !== undefined) body.exact = o.exact;
  if (o.lang !== undefined) body.lang = o.lang;
  return body;
}

/** An action's `target` object. */
export async function targetJson(t: Target): Promise<Record<string, unknown>> {
  let body: Record<string, unknown>;
  if ("role" in t && t.role !== undefined) {
    body = { role: t.role };
    if (t.name !== undefined) body.name = t.name;
    if (t.nameMatch !== undefined) body.name_match = t.nameMatch;
    if (t.states !== undefined) body.states = t.states;
    if (t.app !== undefined) body.app = t.app;
  } else {
    body = await searchBody(t as ImageOrText & TargetOptions);
  }
  if (t.index !== undefined) body.index = t.index;
  if (t.offset !== undefined) body.offset = t.offset;
  if (t.timeoutMs !== undefined) body.timeout_ms = t.timeoutMs;
  return body;
}

export function parseMatch(raw: Record<string, any>): Match {
  // An accessible target's element: its bounds, score 1, its name as the text; raw keeps it.
  if (raw.bounds && typeof raw.bounds === "object") {
    const m = parseMatch({ ...raw.bounds, score: 1, text: raw.name });
    m.raw = raw;
    return m;
  }
  const m: Match = {
    x: raw.x,
    y: raw.y,
    width: raw.width,
    height: raw.height,
    score: raw.score,
    center: raw.center ?? [raw.x + Math.floor(raw.width / 2), raw.y + Math.floor(raw.height / 2)],
    raw,
  };
  if (raw.scale !== undefined && raw.scale !== null) m.scale = raw.scale;
  if (raw.text !== undefined && raw.text !== null) m.text = raw.text;
  return m;
}

export function parseMatches(raw: Record<string, any>): Matches {
  const list = ((raw.matches ?? []) as Record<string, any>[]).map(parseMatch);
  Object.defineProperty(list, "frameVersion", { value: raw.frame_version ?? 0 });
  Object.defineProperty(list, "elapsedMs", { value: raw.elapsed_ms ?? 0 });
  return list as Matches;
}

export function parseOcr(raw: Record<string, any>): OcrResult {
  const box = (o: Record<string, any>) => ({ text: o.text ?? "", x: o.x, y: o.y, width: o.width, height: o.height, confidence: o.confidence ?? 0 });
  return {
    text: raw.text ?? "",
    lines: ((raw.lines ?? []) as Record<string, any>[]).map(box),
    words: ((raw.words ?? []) as Record<string, any>[]).map((w) => ({ ...box(w), line: w.line ?? 0 })),
    frameVersion: raw.frame_version ?? 0,
    elapsedMs: raw.elapsed_ms ?? 0,
    raw,
  };
}

export function parseCompare(raw: Record<string, any>): CompareResult {
  const result: CompareResult = {
    identical: Boolean(raw.identical),
    ssim: raw.ssim,
    psnr: raw.psnr ?? null,
    changedPixels: raw.changed_pixels ?? 0,
    changedRatio: raw.changed_ratio ?? 0,
    changed: raw.changed ?? [],
    width: raw.width,
    height: raw.height,
    frameVersion: raw.frame_version ?? 0,
    elapsedMs: raw.elapsed_ms ?? 0,
    raw,
  };
  if (typeof raw.diff_image === "string") {
    const text = raw.diff_image.startsWith(DATA_URL) ? raw.diff_image.slice(DATA_URL.length) : raw.diff_image;
    result.diffImage = new Uint8Array(Buffer.from(text, "base64"));
  }
  return result;
}

export function parseWait(raw: Record<string, any>): WaitResult {
  const result: WaitResult = {
    matched: Boolean(raw.matched),
    until: raw.until,
    elapsedMs: raw.elapsed_ms ?? 0,
    frameVersion: raw.frame_version ?? 0,
    raw,
  };
  if (raw.match && typeof raw.match === "object") result.match = parseMatch(raw.match);
  if (Array.isArray(raw.changed)) result.changed = raw.changed;
  return result;
}

/** act(): a target's image given as bytes is base64-encoded; everything else goes as it is. */
export async function actionJson(action: Record<string, unknown>): Promise<Record<string, unknown>> {
  const target = action.target as Record<string, unknown> | undefined;
  if (!target || typeof target !== "object") return action;
  const image = target.image;
  if (image instanceof Uint8Array || image instanceof ArrayBuffer)
    return { ...action, target: { ...target, image: await encodeImage(image) } };
  return action;
}
