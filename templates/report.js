/* traceana report: roofline chart, tooltip and table sorting.
 * Data comes only from the JSON block with id "data" (written by jinja's |tojson).
 * The DOM is built with createElementNS / textContent; no markup is ever parsed from data. */
(function () {
  "use strict";

  var BOUNDS = ["compute", "memory", "latency", "underutilised", "host_link", "peer_link", "communication", "unmodelled", "opaque"];
  var W = 960, H = 540;
  var M = { l: 72, r: 162, t: 18, b: 54 };

  function readData() {
    var block = document.getElementById("data");
    if (!block) { return null; }
    try { return JSON.parse(block.textContent); } catch (e) { return null; }
  }

  function boundClass(b) {
    return "b-" + (BOUNDS.indexOf(b) >= 0 ? b : "unmodelled");
  }

  function isPos(v) {
    return typeof v === "number" && isFinite(v) && v > 0;
  }

  function log10(v) { return Math.log(v) / Math.LN10; }

  function fmtTick(e) {
    if (e >= 4 || e <= -4) { return "1e" + e; }
    var v = Math.pow(10, e);
    if (e >= 3) { return v.toLocaleString("en-US"); }
    return e < 0 ? v.toFixed(-e) : String(v);
  }

  function fmtNum(v) {
    if (!isPos(v)) { return String(v); }
    if (v >= 100) { return Math.round(v).toLocaleString("en-US"); }
    return v >= 10 ? v.toFixed(1) : v >= 1 ? v.toFixed(2) : v.toPrecision(3);
  }

  function drawChart(data) {
    var svg = document.getElementById("chart");
    var tip = document.getElementById("tip");
    if (!svg) { return; }
    var NS = svg.namespaceURI;
    function el(parent, name, attrs, text) {
      var e = document.createElementNS(NS, name);
      for (var k in attrs) {
        if (Object.prototype.hasOwnProperty.call(attrs, k)) { e.setAttribute(k, String(attrs[k])); }
      }
      if (text !== undefined) { e.textContent = text; }
      parent.appendChild(e);
      return e;
    }

    var points = (data && Array.isArray(data.points) ? data.points : []).filter(function (p) {
      return p && isPos(p.x) && isPos(p.y);
    });
    var roofs = (data && Array.isArray(data.roofs) ? data.roofs : []).filter(function (r) {
      return r && isPos(r.tflops);
    });
    var bw = data && isPos(data.dram_gbps) ? data.dram_gbps : null;

    var x0 = M.l, x1 = W - M.r, yB = H - M.b, yT = M.t;
    if (!points.length && !roofs.length && !bw) {
      el(svg, "text", { x: W / 2, y: H / 2, "text-anchor": "middle", "class": "empty" },
        "Nothing to plot: no op has a FLOP count and the device has no known roofs.");
      return;
    }

    // Domain in decades, wide enough for every point, every roof and every ridge point.
    var xs = points.map(function (p) { return p.x; });
    var ys = points.map(function (p) { return p.y; });
    var topPeak = 0;
    roofs.forEach(function (r) {
      ys.push(r.tflops);
      topPeak = Math.max(topPeak, r.tflops);
      if (bw) { xs.push(r.tflops * 1000 / bw); }
    });
    if (!xs.length) { xs = [0.1, 100]; }
    if (!ys.length) { ys = bw ? [bw / 1e4, bw / 10] : [0.01, 10]; }
    var lx0 = Math.floor(log10(Math.min.apply(null, xs)) - 0.3);
    var lx1 = Math.ceil(log10(Math.max.apply(null, xs)) + 0.3);
    var ly0 = Math.floor(log10(Math.min.apply(null, ys)) - 0.3);
    var ly1 = Math.ceil(log10(Math.max.apply(null, ys)) + 0.15);
    if (lx1 - lx0 < 2) { lx0 -= 1; lx1 += 1; }
    if (ly1 - ly0 < 2) { ly0 -= 1; ly1 += 1; }

    function sx(v) { return x0 + (log10(v) - lx0) / (lx1 - lx0) * (x1 - x0); }
    function sy(v) { return yB - (log10(v) - ly0) / (ly1 - ly0) * (yB - yT); }

    // Grid, ticks and axis titles.
    var grid = el(svg, "g", {});
    var xstep = Math.max(1, Math.ceil((lx1 - lx0) / 12));
    var ystep = Math.max(1, Math.ceil((ly1 - ly0) / 10));
    var e;
    for (e = lx0; e <= lx1; e += 1) {
      var gx = sx(Math.pow(10, e));
      el(grid, "line", { x1: gx, x2: gx, y1: yT, y2: yB, "class": "grid" });
      if ((e - lx0) % xstep === 0) {
        el(grid, "text", { x: gx, y: yB + 17, "text-anchor": "middle", "class": "tick" }, fmtTick(e));
      }
    }
    for (e = ly0; e <= ly1; e += 1) {
      var gy = sy(Math.pow(10, e));
      el(grid, "line", { x1: x0, x2: x1, y1: gy, y2: gy, "class": "grid" });
      if ((e - ly0) % ystep === 0) {
        el(grid, "text", { x: x0 - 8, y: gy + 4, "text-anchor": "end", "class": "tick" }, fmtTick(e));
      }
    }
    el(grid, "line", { x1: x0, x2: x1, y1: yB, y2: yB, "class": "axis" });
    el(grid, "line", { x1: x0, x2: x0, y1: yT, y2: yB, "class": "axis" });
    el(grid, "text", { x: (x0 + x1) / 2, y: H - 12, "text-anchor": "middle", "class": "label" },
      "arithmetic intensity (FLOP/B)");
    el(grid, "text", { x: 18, y: (yT + yB) / 2, "text-anchor": "middle", "class": "label",
      transform: "rotate(-90 18 " + (yT + yB) / 2 + ")" }, "achieved TFLOP/s");

    // Roofs: the DRAM slope (TFLOP/s = FLOP/B x GB/s / 1000) and one ceiling per dtype.
    var roofG = el(svg, "g", {});
    var xmin = Math.pow(10, lx0), xmax = Math.pow(10, lx1), ymin = Math.pow(10, ly0), ymax = Math.pow(10, ly1);
    if (bw) {
      var xa = Math.max(xmin, ymin * 1000 / bw);
      var xb = Math.min(xmax, (topPeak || ymax) * 1000 / bw);
      if (xa < xb) {
        var ax = sx(xa), ay = sy(xa * bw / 1000), bx = sx(xb), by = sy(xb * bw / 1000);
        el(roofG, "line", { x1: ax, y1: ay, x2: bx, y2: by, "class": "roof mem" });
        var angle = Math.atan2(by - ay, bx - ax) * 180 / Math.PI;
        var lx = ax + (bx - ax) * 0.32, ly = ay + (by - ay) * 0.32 - 7;
        el(roofG, "text", { x: lx, y: ly, "class": "roof-label",
          transform: "rotate(" + angle.toFixed(2) + " " + lx.toFixed(1) + " " + ly.toFixed(1) + ")" },
          "DRAM " + fmtNum(bw) + " GB/s");
      }
    }
    var labels = [];
    roofs.forEach(function (r) {
      var ra = bw ? Math.max(xmin, r.tflops * 1000 / bw) : xmin;
      var ry = sy(r.tflops);
      el(roofG, "line", { x1: sx(ra), y1: ry, x2: x1, y2: ry, "class": "roof" });
      var dtype = String(r.dtype);
      if (dtype.length > 10) { dtype = dtype.slice(0, 9) + "\u2026"; }
      labels.push({ y: ry, text: dtype + " " + fmtNum(r.tflops) + " TFLOP/s" });
    });
    labels.sort(function (a, b) { return a.y - b.y; });
    var last = -Infinity;
    labels.forEach(function (l) {
      var y = Math.max(l.y + 4, last + 13);
      last = y;
      el(roofG, "text", { x: x1 + 6, y: y, "class": "roof-label" }, l.text);
    });

    // Points: biggest first so small ones stay on top and clickable.
    var tmax = 0;
    points.forEach(function (p) { if (isPos(p.t)) { tmax = Math.max(tmax, p.t); } });
    var order = points.slice().sort(function (a, b) { return (b.t || 0) - (a.t || 0); });
    var dots = el(svg, "g", {});
    var active = null;

    function rows(p) {
      return [
        ["shapes", p.dims || "—"], ["dtypes", p.dtypes || "—"],
        ["time", p.time + " (" + p.calls + ")"],
        ["FLOP/B", p.intensity], ["TFLOP/s", p.tflops],
        ["% of roof", p.pct], ["bound", p.bound]
      ];
    }

    function show(p, circle, clientX, clientY) {
      if (!tip) { return; }
      while (tip.firstChild) { tip.removeChild(tip.firstChild); }
      var name = document.createElement("div");
      name.className = "t-name";
      name.textContent = p.name;
      tip.appendChild(name);
      rows(p).forEach(function (kv) {
        var row = document.createElement("div");
        row.className = "t-row";
        var k = document.createElement("span");
        k.textContent = kv[0];
        var v = document.createElement("span");
        v.textContent = String(kv[1]);
        row.appendChild(k);
        row.appendChild(v);
        tip.appendChild(row);
      });
      tip.hidden = false;
      var wrap = tip.parentNode.getBoundingClientRect();
      if (clientX === undefined) {
        var c = circle.getBoundingClientRect();
        clientX = c.left + c.width / 2;
        clientY = c.top + c.height / 2;
      }
      var left = clientX - wrap.left + 14, top = clientY - wrap.top + 14;
      if (left + tip.offsetWidth > wrap.width) { left = Math.max(0, clientX - wrap.left - tip.offsetWidth - 14); }
      if (top + tip.offsetHeight > wrap.height) { top = Math.max(0, clientY - wrap.top - tip.offsetHeight - 14); }
      tip.style.left = left + "px";
      tip.style.top = top + "px";
      if (active && active !== circle) { active.classList.remove("active"); }
      active = circle;
      circle.classList.add("active");
    }

    function hide() {
      if (tip) { tip.hidden = true; }
      if (active) { active.classList.remove("active"); active = null; }
    }

    function jump(p) {
      if (!p.row) { return; }
      var row = document.getElementById("op-" + p.id);
      if (!row) { return; }
      row.scrollIntoView({ block: "center" });
      row.classList.add("flash");
      window.setTimeout(function () { row.classList.remove("flash"); }, 1600);
    }

    order.forEach(function (p) {
      var r = 3 + 14 * (tmax > 0 && isPos(p.t) ? Math.sqrt(p.t / tmax) : 0);
      var c = el(dots, "circle", {
        cx: sx(p.x).toFixed(2), cy: sy(p.y).toFixed(2), r: r.toFixed(2),
        "class": boundClass(p.bound), "data-op": p.id, tabindex: 0,
        "aria-label": p.name + ", " + p.time + ", " + p.bound
      });
      c.addEventListener("mousemove", function (ev) { show(p, c, ev.clientX, ev.clientY); });
      c.addEventListener("mouseleave", hide);
      c.addEventListener("focus", function () { show(p, c); });
      c.addEventListener("blur", hide);
      c.addEventListener("click", function () { jump(p); });
      c.addEventListener("keydown", function (ev) {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); jump(p); }
      });
    });
  }

  function initTable() {
    var table = document.getElementById("ops-table");
    if (!table || !table.tHead || !table.tBodies.length) { return; }
    var ths = table.tHead.rows[0].cells;

    function key(cell, numeric) {
      if (!cell) { return null; }
      if (numeric) {
        var v = cell.getAttribute("data-v");
        if (v === null || v === "") { return null; }
        var n = parseFloat(v);
        return isFinite(n) ? n : null;
      }
      var t = cell.textContent.trim().toLowerCase();
      return t === "" || t === "\u2014" ? null : t;
    }

    function sortBy(i) {
      var th = ths[i];
      var numeric = th.getAttribute("data-type") === "num";
      var was = th.getAttribute("aria-sort");
      var dir = was === "descending" ? "ascending" : was === "ascending" ? "descending"
        : numeric ? "descending" : "ascending";
      for (var j = 0; j < ths.length; j += 1) { ths[j].removeAttribute("aria-sort"); }
      th.setAttribute("aria-sort", dir);
      var body = table.tBodies[0];
      var keyed = Array.prototype.map.call(body.rows, function (r, idx) {
        return { r: r, k: key(r.cells[i], numeric), idx: idx };
      });
      var sign = dir === "descending" ? -1 : 1;
      keyed.sort(function (a, b) {
        if (a.k === null || b.k === null) {  // unknown values always last
          return a.k === b.k ? a.idx - b.idx : a.k === null ? 1 : -1;
        }
        var c = numeric ? a.k - b.k : a.k < b.k ? -1 : a.k > b.k ? 1 : 0;
        return sign * c || a.idx - b.idx;
      });
      var frag = document.createDocumentFragment();
      keyed.forEach(function (x) { frag.appendChild(x.r); });
      body.appendChild(frag);
    }

    Array.prototype.forEach.call(ths, function (th, i) {
      var button = th.querySelector("button");
      (button || th).addEventListener("click", function () { sortBy(i); });
    });
    initFilters(table);
  }

  // Text filter (every word must appear in the row's name, dims, dtypes, bound or class) and
  // the bound / class selects: rows that do not match are hidden, never removed.
  function initFilters(table) {
    var box = document.getElementById("ops-filter");
    var bound = document.getElementById("ops-bound");
    var family = document.getElementById("ops-family");
    var shown = document.getElementById("ops-shown");
    if (!box && !bound && !family) { return; }
    function apply() {
      var words = (box ? box.value : "").toLowerCase().split(/\s+/).filter(Boolean);
      var b = bound ? bound.value : "", f = family ? family.value : "";
      var rows = table.tBodies[0].rows, n = 0;
      for (var i = 0; i < rows.length; i += 1) {
        var r = rows[i], hay = r.getAttribute("data-search") || "";
        var ok = (!b || r.getAttribute("data-bound") === b) && (!f || r.getAttribute("data-family") === f) &&
          words.every(function (w) { return hay.indexOf(w) >= 0; });
        r.hidden = !ok;
        n += ok ? 1 : 0;
      }
      if (shown) {
        shown.textContent = (words.length || b || f) ? n.toLocaleString("en-US") + " of " +
          rows.length.toLocaleString("en-US") + " shown" : "";
      }
    }
    [box, bound, family].forEach(function (el) {
      if (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); }
    });
  }

  drawChart(readData());
  initTable();
}());
