// SDK overhead per action: 300 moveMouse calls through the SDK against 300 raw fetch POSTs of
// the same body to the same endpoint, on one sandbox of a deskboxd started here (or the
// server in DESKBOX_SERVER when set). Interleaved in rounds of 50 so drift hits both alike.
// Bounded: gives up after 120 s.
//
//   cd sdk/typescript && npm run build && node bench/overhead.mjs [N]
import { Sandbox } from "../dist/index.js";
import { startDeskboxd } from "../test/support.mjs";

const N = Number(process.argv[2] ?? 300);
const ROUND = 50;
const deadline = Date.now() + 120_000;
const watchdog = setTimeout(() => {
  console.error("overhead bench: over 120 s, giving up");
  process.exit(2);
}, 120_000);

const own = process.env.DESKBOX_SERVER ? null : await startDeskboxd();
const server = own ? own.url : process.env.DESKBOX_SERVER;
const apiKey = process.env.DESKBOX_API_KEY;
let sbx;
try {
  sbx = await Sandbox.create({ server, apiKey, template: "minimal", runtime: "container", network: false, timeout: 300 });
  const url = `${server}/v1/sandboxes/${sbx.id}/actions`;
  const headers = { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) };
  const point = (i) => [100 + (i % 400), 100 + ((i * 7) % 300)];

  async function viaSdk(i) {
    const [x, y] = point(i);
    await sbx.moveMouse(x, y);
  }
  async function viaFetch(i) {
    const [x, y] = point(i);
    const response = await fetch(url, { method: "POST", headers, body: JSON.stringify({ type: "move", x, y }) });
    if (!response.ok) throw new Error(`raw POST: HTTP ${response.status} ${await response.text()}`);
    await response.json();
  }

  // Warm up both paths (connections, JIT).
  for (let i = 0; i < 30; i++) {
    await viaSdk(i);
    await viaFetch(i);
  }

  const samples = { sdk: [], fetch: [] };
  for (let done = 0; done < N && Date.now() < deadline; done += ROUND) {
    const n = Math.min(ROUND, N - done);
    for (const [name, fn] of [
      ["sdk", viaSdk],
      ["fetch", viaFetch],
    ]) {
      for (let i = 0; i < n; i++) {
        const t0 = process.hrtime.bigint();
        await fn(done + i);
        samples[name].push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    }
  }

  const stats = (xs) => {
    const sorted = [...xs].sort((a, b) => a - b);
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    const q = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
    return { n: xs.length, mean, p50: q(0.5), p90: q(0.9) };
  };
  const sdk = stats(samples.sdk);
  const raw = stats(samples.fetch);
  const fmt = (s) => `mean ${s.mean.toFixed(3)} ms/action  p50 ${s.p50.toFixed(3)}  p90 ${s.p90.toFixed(3)}  (n=${s.n})`;
  console.log(`moveMouse via SDK     ${fmt(sdk)}`);
  console.log(`same POST, raw fetch  ${fmt(raw)}`);
  console.log(
    `SDK overhead          mean ${(sdk.mean - raw.mean).toFixed(3)} ms/action (${(((sdk.mean - raw.mean) / raw.mean) * 100).toFixed(1)}%), ` +
      `p50 ${(sdk.p50 - raw.p50).toFixed(3)} ms`,
  );
} finally {
  if (sbx) await sbx.kill().catch((e) => console.error("kill:", e.message));
  if (own) await own.stop();
  clearTimeout(watchdog);
}
