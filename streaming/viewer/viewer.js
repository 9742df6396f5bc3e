// deskbox web viewer: shows a sandbox's live stream (H.264 through WebCodecs, JPEG otherwise)
// on a canvas scaled to the window, draws the sandbox's pointer, shows fps and latency, and with
// a control token sends mouse and keyboard to the sandbox. Protocol: server/stream/viewer_session.hpp.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const id = decodeURIComponent(location.pathname.split("/").pop());
  const token = params.get("token") || "";
  const canvas = document.getElementById("screen");
  const ctx = canvas.getContext("2d");
  const cursorImg = document.getElementById("cursor");
  const statusEl = document.getElementById("status");
  const statsEl = document.getElementById("stats");
  const controlBox = document.getElementById("control");
  document.getElementById("title").textContent = "deskbox · " + id;

  // Exposed for tests and curious people (read-only use).
  const state = (window.deskboxViewer = {
    connected: false, codec: null, control: false, framesDrawn: 0, packets: 0,
    screen: null, lastError: null, latencyMs: null, rttMs: null, closeCode: null,
  });

  let ws = null;
  let decoder = null;
  let decoderCodec = null;
  let outW = 0, outH = 0;
  let drawChain = Promise.resolve();
  let cursor = { x: 0, y: 0, xhot: 0, yhot: 0, scale: 1, known: false };
  const frameTimes = [];

  function setStatus(text, ok) {
    statusEl.textContent = text;
    statusEl.className = "status " + (ok ? "ok" : "bad");
  }

  async function chooseCodec() {
    const asked = params.get("codec");
    if (asked === "jpeg" || asked === "h264") return asked;
    if (typeof VideoDecoder === "undefined") return "jpeg";
    try {
      const support = await VideoDecoder.isConfigSupported({ codec: "avc1.42e01f", optimizeForLatency: true });
      return support.supported ? "h264" : "jpeg";
    } catch (e) {
      return "jpeg";
    }
  }

  function resizeCanvas(w, h) {
    if (canvas.width !== w || canvas.height !== h) {
      canvas.width = w;
      canvas.height = h;
    }
    outW = w;
    outH = h;
  }

  function noteFrame(captureUs) {
    state.framesDrawn++;
    const now = performance.now();
    frameTimes.push(now);
    while (frameTimes.length && now - frameTimes[0] > 1000) frameTimes.shift();
    // Wall clocks of server and browser agree on one host; elsewhere this is indicative only.
    if (captureUs > 0) state.latencyMs = Date.now() - captureUs / 1000;
  }

  // ---- H.264 ----
  function spsCodecString(data) {
    // Find the SPS NAL (type 7) and read profile, constraints, level from its first bytes.
    for (let i = 0; i + 4 < data.length; i++) {
      if (data[i] === 0 && data[i + 1] === 0 && data[i + 2] === 1 && (data[i + 3] & 0x1f) === 7) {
        const hex = (b) => b.toString(16).padStart(2, "0");
        return "avc1." + hex(data[i + 4]) + hex(data[i + 5]) + hex(data[i + 6]);
      }
    }
    return null;
  }

  function ensureDecoder(codecString, w, h) {
    if (decoder && decoderCodec === codecString + w + "x" + h && decoder.state === "configured") return;
    if (decoder) { try { decoder.close(); } catch (e) {} }
    decoder = new VideoDecoder({
      output: (frame) => {
        ctx.drawImage(frame, 0, 0, outW, outH);
        noteFrame(frame.timestamp);
        frame.close();
      },
      error: (e) => {
        state.lastError = String(e);
        decoder = null;
        send({ type: "keyframe" });
      },
    });
    decoder.configure({ codec: codecString, codedWidth: w, codedHeight: h, optimizeForLatency: true });
    decoderCodec = codecString + w + "x" + h;
  }

  function onH264(keyframe, w, h, captureUs, payload) {
    if (keyframe) {
      const codecString = spsCodecString(payload) || "avc1.42e01f";
      resizeCanvas(w, h);
      ensureDecoder(codecString, w, h);
    }
    if (!decoder) return;  // waiting for a keyframe
    decoder.decode(new EncodedVideoChunk({
      type: keyframe ? "key" : "delta", timestamp: captureUs, data: payload,
    }));
  }

  // ---- JPEG ----
  function onJpeg(keyframe, x, y, w, h, fullW, fullH, captureUs, payload) {
    const blob = new Blob([payload], { type: "image/jpeg" });
    const decoded = createImageBitmap(blob);
    // Patches must land in order: chain the draws.
    drawChain = drawChain.then(() => decoded).then((bitmap) => {
      if (keyframe) resizeCanvas(fullW, fullH);
      ctx.drawImage(bitmap, x, y, w, h);
      bitmap.close();
      noteFrame(captureUs);
    }).catch((e) => { state.lastError = String(e); });
  }

  function onBinary(buffer) {
    const view = new DataView(buffer);
    if (buffer.byteLength < 24) return;
    state.packets++;
    const kind = view.getUint8(0);
    const keyframe = (view.getUint8(1) & 1) === 1;
    const x = view.getUint16(2, true), y = view.getUint16(4, true);
    const w = view.getUint16(6, true), h = view.getUint16(8, true);
    const fullW = view.getUint16(10, true), fullH = view.getUint16(12, true);
    const captureUs = Number(view.getBigUint64(16, true));
    const payload = new Uint8Array(buffer, 24);
    if (kind === 1) onH264(keyframe, fullW, fullH, captureUs, payload);
    else if (kind === 2) onJpeg(keyframe, x, y, w, h, fullW, fullH, captureUs, payload);
  }

  // ---- pointer drawn over the canvas ----
  function placeCursor() {
    if (!cursor.known || !state.screen || cursorImg.hidden) return;
    const rect = canvas.getBoundingClientRect();
    const stage = canvas.parentElement.getBoundingClientRect();
    const sx = rect.width / state.screen.width;
    const sy = rect.height / state.screen.height;
    cursorImg.style.transform =
      "translate(" + (rect.left - stage.left + (cursor.x - cursor.xhot) * sx) + "px," +
      (rect.top - stage.top + (cursor.y - cursor.yhot) * sy) + "px) scale(" + sx + "," + sy + ")";
  }

  function onText(text) {
    let m;
    try { m = JSON.parse(text); } catch (e) { return; }
    if (m.type === "hello") {
      state.codec = m.codec;
      state.screen = m.screen;
      state.control = !!m.control;
      controlBox.disabled = !m.control;
      document.getElementById("control-label").title = m.control
        ? "Send your mouse and keyboard to the sandbox"
        : "This link can only watch (view token)";
      if (m.control && params.get("control") === "1") setControl(true);
      setStatus("live · " + m.codec + " · " + m.screen.width + "×" + m.screen.height, true);
    } else if (m.type === "cursor_shape") {
      if (m.png) {
        cursorImg.src = "data:image/png;base64," + m.png;
        cursorImg.hidden = false;
      } else {
        cursorImg.hidden = true;
      }
      cursor.xhot = m.xhot;
      cursor.yhot = m.yhot;
      placeCursor();
    } else if (m.type === "cursor") {
      cursor.x = m.x;
      cursor.y = m.y;
      cursor.known = true;
      placeCursor();
    } else if (m.type === "pong") {
      state.rttMs = performance.now() - m.t;
    } else if (m.type === "error") {
      state.lastError = m.message;
    }
  }

  function send(message) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
  }

  // ---- taking control ----
  let controlling = false;
  const heldKeys = new Map();  // KeyboardEvent.code -> keysym sent on keydown

  function setControl(on) {
    controlling = on && state.control;
    controlBox.checked = controlling;
    canvas.classList.toggle("control", controlling);
    if (controlling) canvas.focus();
    else releaseKeys();
  }
  controlBox.addEventListener("change", () => setControl(controlBox.checked));

  function screenPoint(event) {
    const rect = canvas.getBoundingClientRect();
    const x = Math.floor((event.clientX - rect.left) / rect.width * state.screen.width);
    const y = Math.floor((event.clientY - rect.top) / rect.height * state.screen.height);
    return { x: Math.max(0, Math.min(state.screen.width - 1, x)), y: Math.max(0, Math.min(state.screen.height - 1, y)) };
  }

  function onPointer(event) {
    if (!controlling || !state.screen) return;
    event.preventDefault();
    const p = screenPoint(event);
    send({ type: "pointer", x: p.x, y: p.y, buttons: event.buttons });
  }
  for (const type of ["mousemove", "mousedown", "mouseup"]) canvas.addEventListener(type, onPointer);
  canvas.addEventListener("contextmenu", (e) => { if (controlling) e.preventDefault(); });
  canvas.addEventListener("wheel", (event) => {
    if (!controlling || !state.screen) return;
    event.preventDefault();
    const p = screenPoint(event);
    const lines = event.deltaMode === 1 ? 1 : event.deltaMode === 2 ? 10 : 1 / 40;
    const notches = (d) => (d === 0 ? 0 : Math.sign(d) * Math.max(1, Math.round(Math.abs(d) * lines / 3)));
    send({ type: "wheel", x: p.x, y: p.y, dx: notches(event.deltaX), dy: notches(event.deltaY) });
  }, { passive: false });

  const NAMED_KEYS = {
    Backspace: 0xff08, Tab: 0xff09, Enter: 0xff0d, Escape: 0xff1b, Delete: 0xffff,
    Home: 0xff50, ArrowLeft: 0xff51, ArrowUp: 0xff52, ArrowRight: 0xff53, ArrowDown: 0xff54,
    PageUp: 0xff55, PageDown: 0xff56, End: 0xff57, Insert: 0xff63, ContextMenu: 0xff67,
    CapsLock: 0xffe5, NumLock: 0xff7f, ScrollLock: 0xff14, Pause: 0xff13, PrintScreen: 0xff61,
  };
  const SIDED_KEYS = {
    ShiftLeft: 0xffe1, ShiftRight: 0xffe2, ControlLeft: 0xffe3, ControlRight: 0xffe4,
    AltLeft: 0xffe9, AltRight: 0xfe03, MetaLeft: 0xffeb, MetaRight: 0xffec,
  };

  function keysymOf(event) {
    if (SIDED_KEYS[event.code]) return SIDED_KEYS[event.code];
    if (NAMED_KEYS[event.key]) return NAMED_KEYS[event.key];
    const f = /^F([1-9]|1[0-9]|2[0-4])$/.exec(event.key);
    if (f) return 0xffbe + Number(f[1]) - 1;
    const chars = Array.from(event.key);
    if (chars.length === 1) {
      const cp = chars[0].codePointAt(0);
      if ((cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff)) return cp;
      return 0x01000000 + cp;
    }
    return 0;
  }

  canvas.addEventListener("keydown", (event) => {
    if (!controlling) return;
    event.preventDefault();
    const keysym = heldKeys.get(event.code) || keysymOf(event);
    if (!keysym) return;
    heldKeys.set(event.code, keysym);
    send({ type: "key", keysym: keysym, down: true });
  });
  canvas.addEventListener("keyup", (event) => {
    if (!controlling) return;
    event.preventDefault();
    const keysym = heldKeys.get(event.code);
    if (!keysym) return;
    heldKeys.delete(event.code);
    send({ type: "key", keysym: keysym, down: false });
  });
  function releaseKeys() {
    for (const keysym of heldKeys.values()) send({ type: "key", keysym: keysym, down: false });
    heldKeys.clear();
  }
  canvas.addEventListener("blur", releaseKeys);

  // ---- connection ----
  async function connect() {
    const codec = await chooseCodec();
    const dpr = window.devicePixelRatio || 1;
    const query = new URLSearchParams({ codec: codec, token: token });
    const maxW = Math.round(canvas.parentElement.clientWidth * dpr);
    const maxH = Math.round(canvas.parentElement.clientHeight * dpr);
    if (params.get("scale") === "window" && maxW >= 16 && maxH >= 16) {
      query.set("width", String(maxW));
      query.set("height", String(maxH));
    }
    for (const name of ["fps", "quality", "width", "height"]) if (params.get(name)) query.set(name, params.get(name));
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(scheme + "//" + location.host + "/v1/sandboxes/" + encodeURIComponent(id) + "/stream?" + query);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => { state.connected = true; };
    ws.onmessage = (e) => (typeof e.data === "string" ? onText(e.data) : onBinary(e.data));
    ws.onclose = (e) => {
      state.connected = false;
      state.closeCode = e.code;
      setStatus("closed (" + e.code + (e.reason ? ": " + e.reason : "") + ")", false);
      if (e.code !== 1001 && e.code !== 1008) setTimeout(connect, 2000);
    };
  }

  setInterval(() => {
    send({ type: "ping", t: performance.now() });
    const parts = [frameTimes.length + " fps"];
    if (state.latencyMs !== null) parts.push("frame age " + Math.max(0, state.latencyMs).toFixed(0) + " ms");
    if (state.rttMs !== null) parts.push("rtt " + state.rttMs.toFixed(0) + " ms");
    if (state.lastError) parts.push("last error: " + state.lastError);
    statsEl.textContent = parts.join(" · ");
  }, 1000);
  window.addEventListener("resize", placeCursor);
  connect();
})();
