// deskbox dashboard: the sandboxes of this server with live thumbnails, CPU and memory (the usage
// sampler's last sample) and links to their viewers, and what sandboxes used today (UTC). Needs
// the API key when the server has one (?key= or the form; kept for the tab only).
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  if (params.get("key")) sessionStorage.setItem("deskbox-key", params.get("key"));
  let key = sessionStorage.getItem("deskbox-key") || "";
  const table = document.getElementById("sandboxes");
  const body = table.querySelector("tbody");
  const errorEl = document.getElementById("error");
  const form = document.getElementById("key-form");
  const rows = new Map();

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    key = document.getElementById("key").value;
    sessionStorage.setItem("deskbox-key", key);
    refresh();
  });

  function withKey(url) {
    return key ? url + (url.includes("?") ? "&" : "?") + "key=" + encodeURIComponent(key) : url;
  }

  function mib(bytes) {
    return (bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0) + " MiB";
  }

  // What every sandbox used since UTC midnight, ended ones included (GET /v1/usage).
  async function refreshToday() {
    const midnight = new Date();
    midnight.setUTCHours(0, 0, 0, 0);
    try {
      const res = await fetch(withKey("/v1/usage?from=" + encodeURIComponent(midnight.toISOString())));
      if (!res.ok) return;
      const t = (await res.json()).total || {};
      let text = " · today: " + t.sandboxes + " sandboxes, " + (t.cpu_seconds || 0).toFixed(1) + " CPU-s, " +
        (t.vcpu_seconds || 0).toFixed(0) + " vCPU-s, " + (t.memory_reserved_gib_seconds || 0).toFixed(1) + " GiB-s";
      if (t.cost !== undefined) text += ", cost " + t.cost.toFixed(4);
      document.getElementById("today").textContent = text;
    } catch (e) {
      // the sandboxes' refresh reports an unreachable server
    }
  }

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }

  async function openViewer(id) {
    const res = await fetch(withKey("/v1/sandboxes/" + encodeURIComponent(id)));
    const sandbox = await res.json();
    if (sandbox.control_token)
      window.open("/view/" + encodeURIComponent(id) + "?token=" + encodeURIComponent(sandbox.control_token), "_blank");
  }

  // A sandbox's thumbnail, fetched rather than set as the image's URL: the screenshot route
  // answers Cache-Control: no-store and takes no cache-busting parameter (unknown ones are
  // refused), so an <img> given the same URL again may show its stale copy. One fetch at a time
  // per image; the blob URL it replaces is revoked. Counts what drew for tests and people.
  const thumbnailsInFlight = new WeakSet();
  window.deskboxDashboard = { thumbnailsDrawn: 0, thumbnailErrors: 0, lastThumbnailError: "" };

  async function refreshThumbnail(id, img) {
    if (thumbnailsInFlight.has(img)) return;
    thumbnailsInFlight.add(img);
    try {
      const res = await fetch(withKey("/v1/sandboxes/" + encodeURIComponent(id) +
                                      "/screenshot?format=jpeg&quality=60&width=240"),
                              { cache: "no-store" });
      if (!res.ok) {
        let message = "HTTP " + res.status;
        try {
          message = (await res.json()).error.message || message;
        } catch (e) {
          // not the API's error shape: the status says enough
        }
        throw new Error(message);
      }
      const url = URL.createObjectURL(await res.blob());
      await new Promise((resolve, reject) => {
        img.onload = resolve;
        img.onerror = () => reject(new Error("the screenshot did not decode"));
        const old = img.src;
        img.src = url;
        if (old.startsWith("blob:")) URL.revokeObjectURL(old);
      });
      img.title = "";
      window.deskboxDashboard.thumbnailsDrawn++;
    } catch (e) {
      img.title = "no screenshot: " + e.message;
      window.deskboxDashboard.thumbnailErrors++;
      window.deskboxDashboard.lastThumbnailError = e.message;
    } finally {
      thumbnailsInFlight.delete(img);
    }
  }

  function render(list) {
    const seen = new Set();
    for (const s of list) {
      seen.add(s.id);
      let row = rows.get(s.id);
      if (!row) {
        row = document.createElement("tr");
        const img = document.createElement("img");
        img.alt = "screen of " + s.id;
        const shot = document.createElement("td");
        shot.appendChild(img);
        row.appendChild(shot);
        for (let i = 0; i < 9; i++) row.appendChild(cell(""));
        const open = document.createElement("a");
        open.href = "#";
        open.textContent = "view";
        open.addEventListener("click", (e) => { e.preventDefault(); openViewer(s.id); });
        const action = document.createElement("td");
        action.appendChild(open);
        row.appendChild(action);
        body.appendChild(row);
        rows.set(s.id, row);
      }
      const cells = row.children;
      cells[1].textContent = s.id;
      cells[2].textContent = s.template;
      cells[3].textContent = s.runtime;
      cells[4].textContent = s.state;
      const used = s.usage || {};
      cells[5].textContent = used.cpu_percent === undefined ? "–" : used.cpu_percent.toFixed(1) + " %";
      cells[6].textContent = used.memory_resident_bytes === undefined ? "–" : mib(used.memory_resident_bytes);
      cells[7].textContent = used.cpu_seconds === undefined ? "–" : used.cpu_seconds.toFixed(1) + " s";
      cells[8].textContent = s.created_at || "";
      cells[9].textContent = s.expires_at || "";
      if (s.state === "running") refreshThumbnail(s.id, cells[0].firstChild);
    }
    for (const [id, row] of rows) {
      if (!seen.has(id)) {
        row.remove();
        rows.delete(id);
      }
    }
    document.getElementById("summary").textContent = list.length + " sandbox" + (list.length === 1 ? "" : "es");
  }

  async function refresh() {
    try {
      const res = await fetch(withKey("/v1/sandboxes"));
      if (res.status === 401) {
        form.hidden = false;
        table.hidden = true;
        errorEl.hidden = !key;
        errorEl.textContent = "That API key was refused.";
        return;
      }
      const data = await res.json();
      form.hidden = true;
      errorEl.hidden = true;
      table.hidden = false;
      render(data.sandboxes || []);
    } catch (e) {
      errorEl.hidden = false;
      errorEl.textContent = "Cannot reach deskboxd: " + e;
    }
  }

  refresh();
  refreshToday();
  setInterval(refresh, 2000);
  setInterval(refreshToday, 10000);
})();
