// rtimer dashboard: polls /api/dashboard and draws with its own SVG and canvas code
// (no library, nothing fetched from elsewhere). ?interval=MS sets the polling period.
"use strict";
(function () {
  const params = new URLSearchParams(window.location.search);
  const INTERVAL_MS = Math.max(200, Number(params.get("interval")) || 1000);
  const HISTORY = 120;
  const COLORS = { a: "#2f6fdf", b: "#1f9d6b", c: "#d9822b", bar: "#2f6fdf" };
  const SVG_NS = "http://www.w3.org/2000/svg";
  const history = [];

  const fmt = new Intl.NumberFormat("en-US");
  const $ = (id) => document.getElementById(id);

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  function ms(n) { return n >= 10000 ? (n / 1000).toFixed(1) + " s" : fmt.format(n) + " ms"; }

  function setText(id, text, bad) {
    const el = $(id);
    el.textContent = text;
    if (bad !== undefined) el.classList.toggle("bad", bad);
  }

  function svgEl(name, attrs, text) {
    const el = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = text;
    return el;
  }

  // vertical bars: items = [{label, value}]
  function barChart(svg, items) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 480, H = 170, top = 18, bottom = 22, left = 8;
    const max = Math.max(1, ...items.map((d) => d.value));
    const slot = (W - 2 * left) / Math.max(1, items.length);
    items.forEach((d, i) => {
      const h = Math.round((H - top - bottom) * d.value / max);
      const x = left + i * slot + slot * 0.15, w = slot * 0.7;
      svg.appendChild(svgEl("rect", { x, y: H - bottom - h, width: w, height: Math.max(h, 0),
                                      rx: 2, fill: COLORS.bar, "data-label": d.label,
                                      "data-value": d.value }));
      svg.appendChild(svgEl("text", { x: x + w / 2, y: H - bottom - h - 4, "text-anchor": "middle" },
                            fmt.format(d.value)));
      svg.appendChild(svgEl("text", { x: x + w / 2, y: H - bottom + 14, "text-anchor": "middle" },
                            d.label));
    });
  }

  // horizontal bars with a value label: items = [{label, value, text}]
  function hbarChart(svg, items) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 480, rowH = Math.min(24, 170 / Math.max(1, items.length)), labelW = 120;
    const max = Math.max(1, ...items.map((d) => d.value));
    items.forEach((d, i) => {
      const y = i * rowH + 2, w = Math.round((W - labelW - 150) * d.value / max);
      svg.appendChild(svgEl("text", { x: 0, y: y + rowH * 0.65 }, d.label));
      svg.appendChild(svgEl("rect", { x: labelW, y, width: Math.max(w, 1), height: rowH - 6, rx: 2,
                                      fill: COLORS.b }));
      svg.appendChild(svgEl("text", { x: labelW + w + 6, y: y + rowH * 0.65 }, d.text));
    });
  }

  // the smallest top of a scale of ``ticks`` equal steps of 1, 2, 2.5 or 5 x 10^k covering v
  function niceMax(v, ticks) {
    const raw = v / ticks, power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
    return step * ticks;
  }

  // lines over time on a canvas: series = [{name, color, points: [[t, v|null]]}]
  function lineChart(canvas, legend, series, unit) {
    const ctx = canvas.getContext("2d");
    const W = canvas.width, H = canvas.height, left = 52, bottom = 20, top = 10;
    ctx.clearRect(0, 0, W, H);
    const all = series.flatMap((s) => s.points).filter((p) => p[1] !== null);
    const t0 = history.length ? history[0].t : 0, t1 = history.length ? history[history.length - 1].t : 1;
    const vmax = niceMax(Math.max(1, ...all.map((p) => p[1])), 4);
    ctx.strokeStyle = "#d9dee5"; ctx.fillStyle = "#5b6676"; ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const y = top + (H - top - bottom) * k / 4;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(W, y); ctx.stroke();
      const v = vmax * (1 - k / 4);
      ctx.fillText(v >= 100 ? fmt.format(Math.round(v)) : String(Number(v.toPrecision(3))), 2, y + 4);
    }
    ctx.fillText(Math.round((t1 - t0) / 1000) + " s shown", W - 70, H - 4);
    const x = (t) => left + (W - left) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
    const y = (v) => top + (H - top - bottom) * (1 - v / vmax);
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.lineWidth = 2; ctx.beginPath();
      let drawing = false;
      for (const [t, v] of s.points) {
        if (v === null) { drawing = false; continue; }
        if (drawing) ctx.lineTo(x(t), y(v)); else ctx.moveTo(x(t), y(v));
        drawing = true;
      }
      ctx.stroke();
    }
    legend.textContent = "";
    for (const s of series) {
      const last = s.points.filter((p) => p[1] !== null).pop();
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = s.color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(
        s.name + (last ? ": " + (last[1] >= 100 ? fmt.format(Math.round(last[1])) : last[1].toFixed(1)) + unit : "")));
      legend.appendChild(item);
    }
  }

  // the bucket bound holding the q-th quantile of per-bucket counts (null past the last bound)
  function quantile(bounds, counts, q) {
    const total = counts.reduce((a, b) => a + b, 0);
    if (!total) return null;
    let running = 0;
    for (let i = 0; i < counts.length; i++) {
      running += counts[i];
      if (running >= q * total) return i < bounds.length ? bounds[i] : bounds[bounds.length - 1];
    }
    return null;
  }

  function rate(prev, cur, key) {
    const dt = (cur.t - prev.t) / 1000;
    return dt > 0 ? Math.max(0, (cur[key] - prev[key]) / dt) : null;
  }

  function render(doc) {
    setText("engine", "engine " + doc.engine + (doc.layout ? " (" + doc.layout + ")" : ""));
    const health = $("health");
    health.textContent = doc.healthy ? "healthy" : "problems found";
    health.className = "tag " + (doc.healthy ? "good" : "bad");
    setText("updated", "updated " + new Date(doc.now_ms).toISOString().replace("T", " ").slice(0, 19) + " UTC");
    setText("pending", doc.pending === null ? "unreadable" : fmt.format(doc.pending), doc.pending === null);
    setText("in-flight", fmt.format(doc.in_flight));
    setText("lag", doc.lag_ms === null ? "unreadable" : ms(doc.lag_ms));
    setText("sent", fmt.format(doc.sent_total));
    setText("delivered", fmt.format(doc.delivered));
    setText("consumed", fmt.format(doc.consumed));
    setText("early", fmt.format(doc.early), doc.early > 0);
    setText("set-aside", fmt.format(doc.set_aside), doc.set_aside > 0);

    const buckets = Object.entries(doc.due.buckets).map(([label, value]) => ({ label, value }));
    barChart($("due-chart"), buckets);
    const head = $("due-table").tHead.rows[0], row = $("due-table").tBodies[0].rows[0];
    head.textContent = "";
    row.textContent = "";
    for (const b of buckets) {
      const th = document.createElement("th");
      th.textContent = b.label;
      const td = document.createElement("td");
      td.dataset.bucket = b.label;
      td.textContent = fmt.format(b.value);
      head.appendChild(th);
      row.appendChild(td);
    }
    barChart($("day-chart"), doc.due.days.map((d) => ({ label: d.day.slice(5), value: d.count })));

    const late = doc.lateness_ms;
    history.push({ t: doc.now_ms, sent: doc.sent_total, delivered: doc.delivered,
                   consumed: doc.consumed, late: late.counts.slice() });
    while (history.length > HISTORY) history.shift();
    const rates = { send: [], deliver: [], consume: [] }, p50 = [], p99 = [], pmax = [];
    for (let i = 1; i < history.length; i++) {
      const prev = history[i - 1], cur = history[i];
      rates.send.push([cur.t, rate(prev, cur, "sent")]);
      rates.deliver.push([cur.t, rate(prev, cur, "delivered")]);
      rates.consume.push([cur.t, rate(prev, cur, "consumed")]);
      const delta = cur.late.map((c, k) => c - prev.late[k]);
      p50.push([cur.t, quantile(late.bounds, delta, 0.5)]);
      p99.push([cur.t, quantile(late.bounds, delta, 0.99)]);
      pmax.push([cur.t, quantile(late.bounds, delta, 1)]);
    }
    lineChart($("rate-chart"), $("rate-legend"), [
      { name: "send", color: COLORS.a, points: rates.send },
      { name: "deliver", color: COLORS.b, points: rates.deliver },
      { name: "consume", color: COLORS.c, points: rates.consume }], "/s");
    lineChart($("late-chart"), $("late-legend"), [
      { name: "max", color: COLORS.c, points: pmax },
      { name: "p99", color: COLORS.a, points: p99 },
      { name: "p50", color: COLORS.b, points: p50 }], " ms");

    const written = Object.entries(doc.bytes_written).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
    const per = doc.sent_total ? (v) => " (" + fmt.format(Math.round(v / doc.sent_total)) + " B/msg)" : () => "";
    hbarChart($("bytes-chart"), written.map(([k, v]) => ({ label: k, value: v, text: bytes(v) + per(v) })));
    setText("bytes-note", "B/msg: bytes written per message sent since start" +
            (doc.live_fraction !== null && doc.live_fraction !== undefined
              ? "; value segments live: " + (100 * doc.live_fraction).toFixed(1) + "%" : ""));

    const rows = [["set aside (damaged)", doc.set_aside], ["early deliveries", doc.early],
                  ...Object.entries(doc.problems).filter(([k]) => k !== "timer_set_aside"),
                  ["open took", ms(doc.open.open_ms)],
                  ["previous stop", doc.open.previous_stop_clean ? "clean" : "unclean (recovered)"]];
    for (const [name, f] of Object.entries(doc.fronts)) rows.push([name + " requests / errors", f.requests + " / " + f.errors]);
    for (const f of doc.failures) rows.push(["failing: " + f.where, f.count + " in a row: " + f.error_type]);
    const hbody = $("health-table").tBodies[0];
    hbody.textContent = "";
    for (let i = 0; i < rows.length; i += 2) {  // two figures a row: fits a laptop screen
      const tr = document.createElement("tr");
      for (const [k, v] of rows.slice(i, i + 2)) {
        const a = document.createElement("td"); a.textContent = k.replace(/_/g, " ");
        const b = document.createElement("td"); b.className = "n"; b.textContent = String(v);
        if (typeof v === "number" && v > 0) b.classList.add("bad");
        tr.append(a, b);
      }
      hbody.appendChild(tr);
    }
    document.body.dataset.polls = String((Number(document.body.dataset.polls) || 0) + 1);
  }

  async function poll() {
    try {
      const reply = await fetch("api/dashboard", { cache: "no-store" });
      if (!reply.ok) throw new Error("HTTP " + reply.status);
      render(await reply.json());
    } catch (err) {
      setText("updated", "broker not answering (" + err.message + "); retrying");
    } finally {
      window.setTimeout(poll, INTERVAL_MS);
    }
  }
  poll();
})();
