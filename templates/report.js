/* traceana report: the roofline chart's tooltips (the chart itself is drawn by svg.py), table sorting.
 * Data comes only from the JSON block with id "data" (written by jinja's |tojson).
 * The DOM is built with createElementNS / textContent; no markup is ever parsed from data. */
(function () {
  "use strict";

  function readData() {
    var block = document.getElementById("data");
    if (!block) { return null; }
    try { return JSON.parse(block.textContent); } catch (e) { return null; }
  }

  function bindChart(data) {
    // The chart is drawn on the server (traceana/render/svg.py); here its circles and labels get
    // the tooltip and the jump to the op's row. Points come from data.points (ops with FLOPs) and
    // data.strip (the bandwidth strip), matched by the op's anchor in data-op.
    var svg = document.getElementById("chart");
    var tip = document.getElementById("tip");
    if (!svg) { return; }
    var byId = {};
    (data && Array.isArray(data.points) ? data.points : []).forEach(function (p) {
      if (p && typeof p.id === "string") { byId["pt:" + p.id] = p; }
    });
    (data && Array.isArray(data.strip) ? data.strip : []).forEach(function (p) {
      if (p && typeof p.id === "string") { byId["bw:" + p.id] = p; p.strip = true; }
    });
    var active = null;

    function rows(p) {
      if (p.strip) {
        return [
          ["shapes", p.dims || "\u2014"], ["dtypes", p.dtypes || "\u2014"],
          ["time", p.time + " (" + p.calls + ")"],
          ["GB/s", p.gbps], ["of DRAM roof", p.dram], ["% of roof", p.pct], ["bound", p.bound]
        ];
      }
      return [
        ["shapes", p.dims || "—"], ["dtypes", p.dtypes || "—"],
        ["time", p.time + " (" + p.calls + ")"],
        ["FLOP/B", p.intensity], ["TFLOP/s", p.tflops],
        ["% of roof", p.pct], ["bound", p.bound]
      ];
    }

    function show(p, shape, clientX, clientY) {
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
        var c = shape.getBoundingClientRect();
        clientX = c.left + c.width / 2;
        clientY = c.top + c.height / 2;
      }
      var left = clientX - wrap.left + 14, top = clientY - wrap.top + 14;
      if (left + tip.offsetWidth > wrap.width) { left = Math.max(0, clientX - wrap.left - tip.offsetWidth - 14); }
      if (top + tip.offsetHeight > wrap.height) { top = Math.max(0, clientY - wrap.top - tip.offsetHeight - 14); }
      tip.style.left = left + "px";
      tip.style.top = top + "px";
      if (active && active !== shape) { active.classList.remove("active"); }
      active = shape;
      shape.classList.add("active");
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

    Array.prototype.forEach.call(svg.querySelectorAll("circle[data-op], text.pt-label[data-op]"), function (c) {
      var circle = c.tagName.toLowerCase() === "circle";
      var kind = circle ? (c.classList.contains("bw") ? "bw:" : "pt:") : null;
      var id = c.getAttribute("data-op");
      var p = kind ? byId[kind + id] : byId["pt:" + id] || byId["bw:" + id];
      if (!p) { return; }
      c.addEventListener("mousemove", function (ev) { show(p, c, ev.clientX, ev.clientY); });
      c.addEventListener("mouseleave", hide);
      c.addEventListener("click", function () { jump(p); });
      if (circle) {
        c.addEventListener("focus", function () { show(p, c); });
        c.addEventListener("blur", hide);
        c.addEventListener("keydown", function (ev) {
          if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); jump(p); }
        });
      }
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

  bindChart(readData());
  initTable();
}());
