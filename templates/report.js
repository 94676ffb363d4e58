/* traceana report: the roofline chart's tooltips (the chart itself is drawn by svg.py), the ops table's
 * sorting, filters and (for a big table) lazy drawing. Data comes only from the JSON blocks with ids
 * "data" and "ops-rows" (written by jinja's |tojson).
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
      var table = document.getElementById("ops-table");
      if (p.row && table && table.reveal) { table.reveal(p.id); }
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

  // ---------------------------------------------------------------- the ops table
  // Two forms, one behaviour. A table of up to a few thousand rows is plain HTML: sorting moves its
  // rows, the filters hide them. A bigger one (class "lazy") has every row in the JSON block
  // "ops-rows" and only the rows in view in the DOM (virtual scrolling: two spacer rows stand for
  // the rest); sorting and the filters work on the data, so on every row. Either way
  // table.reveal(id) brings op "id"'s row into view and flashes it (the chart, the timeline and
  // the "#op-…" links use it), and performance mark "traceana:ops-ready" says when the table is
  // ready to use.

  // a sort key: numbers from the sort key, text lower-cased; blank and "—" are unknown (null)
  function textKey(t) {
    t = String(t).trim().toLowerCase();
    return t === "" || t === "\u2014" ? null : t;
  }

  function numKey(v) {
    if (v === null || v === undefined || v === "") { return null; }
    var n = typeof v === "number" ? v : parseFloat(v);
    return isFinite(n) ? n : null;
  }

  // unknown values always last; ties keep the rows' first order (most device time first)
  function sortKeyed(keyed, numeric, sign) {
    keyed.sort(function (a, b) {
      if (a.k === null || b.k === null) {
        return a.k === b.k ? a.idx - b.idx : a.k === null ? 1 : -1;
      }
      var c = numeric ? a.k - b.k : a.k < b.k ? -1 : a.k > b.k ? 1 : 0;
      return sign * c || a.idx - b.idx;
    });
    return keyed;
  }

  function flash(row) {
    row.classList.add("flash");
    window.setTimeout(function () { row.classList.remove("flash"); }, 1600);
  }

  // the plain table: its rows are the DOM's
  function plainTable(table) {
    var body = table.tBodies[0];
    return {
      sort: function (i, numeric, sign) {
        var keyed = Array.prototype.map.call(body.rows, function (r, idx) {
          var cell = r.cells[i];
          var k = !cell ? null : numeric ? numKey(cell.getAttribute("data-v")) : textKey(cell.textContent);
          return { r: r, k: k, idx: idx };
        });
        var frag = document.createDocumentFragment();
        sortKeyed(keyed, numeric, sign).forEach(function (x) { frag.appendChild(x.r); });
        body.appendChild(frag);
      },
      filter: function (ok) {  // ok(search text, bound, class), or null for every row
        var rows = body.rows, n = 0;
        for (var i = 0; i < rows.length; i += 1) {
          var r = rows[i];
          r.hidden = ok !== null && !ok(r.getAttribute("data-search") || "", r.getAttribute("data-bound"),
                                        r.getAttribute("data-family"));
          n += r.hidden ? 0 : 1;
        }
        return [n, rows.length];
      },
      row: function (id) {
        var r = document.getElementById("op-" + id);
        return r && body.contains(r) ? r : null;
      }
    };
  }

  // The lazy table. Its first rows come as HTML and are what shows first; every row is in the JSON
  // block "ops-rows" at the end of the page, parsed once the page has painted (or at the first
  // scroll, sort or filter). From then on only the rows in view of the scrolling box around the
  // table are in the DOM, between two spacer rows as tall as the rows they stand for; sorting and
  // the filters work on the data, so on every row. Before the data is in, a sort or filter is
  // remembered and applied when it comes (onData).
  function lazyTable(table, total, onData) {
    var body = table.tBodies[0], wrap = table.parentNode, cols = table.tHead.rows[0].cells.length;
    var OVER = 12, ROW = 24;
    var strings = [], classes = [], rows = null, byId = null, search = null;
    var order = null, view = null, wanted = null, sorting = null;
    var h = 0, first = -1, last = -1, flashing = null;

    function str(x) {  // a text, or the index of one in the strings
      return typeof x === "number" ? String(strings[x] === undefined ? "" : strings[x])
        : x === undefined || x === null ? "" : String(x);
    }
    function cellOf(r, i) {  // text | [text, sort key, title (one line or a list of lines), class]
      var c = Array.isArray(r[4]) ? r[4][i] : undefined;
      return Array.isArray(c) ? c : [c];
    }
    function textOf(r, i) { return str(cellOf(r, i)[0]); }
    function titleOf(r, i) {
      var t = cellOf(r, i)[2];
      return Array.isArray(t) ? t.map(str).join("\n") : str(t);
    }
    // what the text filter searches: full name, shapes, dtypes, bound and class (as the HTML rows' data-search)
    function searchOf(r) {
      return [str(r[3]) || textOf(r, 0), titleOf(r, 1) || textOf(r, 1), textOf(r, 2), str(r[1]), str(r[2])]
        .join(" ").toLowerCase();
    }

    function load() {
      if (rows) { return true; }
      var block = document.getElementById("ops-rows"), d = null;
      if (!block) { return false; }
      try { d = JSON.parse(block.textContent); } catch (e) { d = null; }
      if (!d || !Array.isArray(d.rows)) { block.removeAttribute("id"); return false; }
      strings = Array.isArray(d.strings) ? d.strings : [];
      classes = Array.isArray(d.classes) ? d.classes : [];
      rows = d.rows.filter(function (r) { return Array.isArray(r) && typeof r[0] === "string"; });
      order = rows.map(function (r, i) { return i; });
      if (sorting) { sort.apply(null, sorting); } else { select(); }
      render(true);
      onData();
      if (window.performance && performance.mark) { performance.mark("traceana:ops-data"); }
      return true;
    }

    function pad() {
      var tr = document.createElement("tr"), td = document.createElement("td");
      tr.className = "pad";
      tr.setAttribute("aria-hidden", "true");
      td.colSpan = cols;
      tr.appendChild(td);
      return tr;
    }
    var top = pad(), bottom = pad();

    function draw(k, pos) {
      var r = rows[k], tr = document.createElement("tr");
      tr.id = "op-" + r[0];
      tr.setAttribute("data-bound", str(r[1]));
      tr.setAttribute("data-family", str(r[2]));
      tr.setAttribute("aria-rowindex", String(pos + 2));
      for (var i = 0; i < cols; i += 1) {
        var c = cellOf(r, i), td = document.createElement("td"), cls = str(c[3]) || str(classes[i]);
        var t = str(c[0]), v = numKey(c[1]);
        if (cls) { td.className = cls; }
        if (v !== null) { td.setAttribute("data-v", String(v)); }
        td.title = titleOf(r, i) || (cls === "dims" ? t : "");  // a clipped shape reads in full on hover
        td.textContent = t;
        if (pos === 0 && i === 0) { td.setAttribute("elementtiming", "ops-table"); }
        tr.appendChild(td);
      }
      if (flashing === r[0]) { tr.classList.add("flash"); }
      return tr;
    }

    function rowHeight() {  // measured on the rows drawn: the lazy table's cells never wrap
      if (!h) {
        var drawn = body.querySelectorAll("tr:not(.pad)");
        if (drawn.length) {
          var rh = (drawn[drawn.length - 1].getBoundingClientRect().bottom - drawn[0].getBoundingClientRect().top) / drawn.length;
          if (rh > 0 && isFinite(rh)) { h = rh; }
        }
      }
      return h || ROW;
    }

    // the rows from index a to b of the view, between the spacers
    function render(force) {
      if (!rows) { return; }
      var n = view.length, rh = rowHeight(), head = table.tHead.offsetHeight;
      var seen = Math.max(0, wrap.scrollTop - head), tall = wrap.clientHeight || window.innerHeight;
      var a = Math.max(0, Math.min(n, Math.floor(seen / rh) - OVER));
      var b = Math.max(a, Math.min(n, Math.ceil((seen + tall) / rh) + OVER));
      if (!force && a === first && b === last) { return; }
      first = a;
      last = b;
      var frag = document.createDocumentFragment();
      frag.appendChild(top);
      for (var i = a; i < b; i += 1) { frag.appendChild(draw(view[i], i)); }
      frag.appendChild(bottom);
      body.textContent = "";
      body.appendChild(frag);
      top.firstChild.style.height = a * rh + "px";
      bottom.firstChild.style.height = (n - b) * rh + "px";
    }

    function sort(i, numeric, sign) {
      sorting = [i, numeric, sign];
      if (!rows) { return; }
      var keyed = order.map(function (k) {
        var c = cellOf(rows[k], i);
        return { r: k, k: numeric ? numKey(c[1]) : textKey(str(c[0])), idx: k };
      });
      order = sortKeyed(keyed, numeric, sign).map(function (x) { return x.r; });
      select();
      render(true);
    }

    function select() {  // the view: the sorted rows the filters let through
      if (!wanted) {
        view = order;
        return;
      }
      if (!search) { search = rows.map(searchOf); }
      view = order.filter(function (k) { return wanted(search[k], str(rows[k][1]), str(rows[k][2])); });
    }

    function filter(ok) {  // ok(search text, bound, class), or null for every row
      wanted = ok;
      if (!rows) { return null; }
      select();
      wrap.scrollTop = 0;
      render(true);
      return [view.length, rows.length];
    }

    // Before the data: the HTML rows and a spacer for the others (the scroll bar is as long as the table's).
    body.appendChild(bottom);
    window.requestAnimationFrame(function () {
      if (!rows) { bottom.firstChild.style.height = Math.max(0, total - body.rows.length + 1) * rowHeight() + "px"; }
    });
    function later() {  // after the first paint
      window.requestAnimationFrame(function () { window.setTimeout(load, 0); });
    }
    if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", later); } else { later(); }

    var queued = false;
    wrap.addEventListener("scroll", function () {
      if (queued) { return; }
      queued = true;
      window.requestAnimationFrame(function () { queued = false; if (load()) { render(false); } });
    }, { passive: true });
    window.addEventListener("resize", function () { render(true); });

    return {
      sort: function (i, numeric, sign) { load(); sort(i, numeric, sign); },
      filter: function (ok) { load(); return filter(ok); },
      row: function (id) {  // draw the row (when the filters let it show) and return it
        if (!load()) { return document.getElementById("op-" + id); }
        if (!byId) {
          byId = {};
          rows.forEach(function (r, k) { byId[r[0]] = k; });
        }
        var k = byId[id], pos = k === undefined ? -1 : view.indexOf(k);
        if (pos < 0) { return null; }
        var rh = rowHeight(), head = table.tHead.offsetHeight;
        wrap.scrollTop = Math.max(0, head + pos * rh - (wrap.clientHeight - head) / 2);
        render(true);
        return document.getElementById("op-" + id);
      },
      flash: function (id) {  // rows drawn again in the next 1.6 s keep the flash, then lose it
        flashing = id;
        window.setTimeout(function () {
          if (flashing !== id) { return; }
          flashing = null;
          var r = document.getElementById("op-" + id);
          if (r) { r.classList.remove("flash"); }
        }, 1600);
      }
    };
  }

  function initTable() {
    var table = document.getElementById("ops-table");
    if (!table || !table.tHead || !table.tBodies.length) { return; }
    var ths = table.tHead.rows[0].cells;
    var lazy = table.classList.contains("lazy"), refilter = function () {};
    var ctl = lazy ? lazyTable(table, parseInt(table.getAttribute("aria-rowcount"), 10) - 1 || 0,
                               function () { refilter(); })
      : plainTable(table);

    Array.prototype.forEach.call(ths, function (th, i) {
      var button = th.querySelector("button");
      (button || th).addEventListener("click", function () {
        var numeric = th.getAttribute("data-type") === "num";
        var was = th.getAttribute("aria-sort");
        var dir = was === "descending" ? "ascending" : was === "ascending" ? "descending"
          : numeric ? "descending" : "ascending";
        for (var j = 0; j < ths.length; j += 1) { ths[j].removeAttribute("aria-sort"); }
        th.setAttribute("aria-sort", dir);
        ctl.sort(i, numeric, dir === "descending" ? -1 : 1);
      });
    });
    var filters = initFilters(ctl);
    refilter = function () { if (filters.active()) { filters.apply(); } };  // a filter set before the data came

    // bring op id's row into view and flash it; a row the filters hide is shown by clearing them
    table.reveal = function (id) {
      var row = ctl.row(id);
      if (!row && filters.clear()) { row = ctl.row(id); }
      if (!row) { return false; }
      if (ctl.flash) { ctl.flash(id); }
      row.scrollIntoView({ block: "center" });
      flash(row);
      return true;
    };
    if (lazy) {  // "#op-…" links (findings, explanations): the row may not be drawn yet
      document.addEventListener("click", function (ev) {
        var a = ev.target && ev.target.closest ? ev.target.closest("a[href^='#op-']") : null;
        if (a && table.reveal(a.getAttribute("href").slice(4))) { ev.preventDefault(); }
      });
      if (location.hash.indexOf("#op-") === 0 && !document.getElementById(location.hash.slice(1))) {
        var id = decodeURIComponent(location.hash.slice(4));
        document.addEventListener("DOMContentLoaded", function () { table.reveal(id); });
      }
    }
    if (window.performance && performance.mark) { performance.mark("traceana:ops-ready"); }
  }

  // Text filter (every word must appear in the row's name, dims, dtypes, bound or class) and
  // the bound / class selects. Returns apply(), active() and clear() (true when a filter was set).
  function initFilters(ctl) {
    var box = document.getElementById("ops-filter");
    var bound = document.getElementById("ops-bound");
    var family = document.getElementById("ops-family");
    var shown = document.getElementById("ops-shown");
    function apply() {
      var words = (box ? box.value : "").toLowerCase().split(/\s+/).filter(Boolean);
      var b = bound ? bound.value : "", f = family ? family.value : "";
      var counts = ctl.filter(words.length || b || f ? function (hay, rb, rf) {
        return (!b || rb === b) && (!f || rf === f) && words.every(function (w) { return hay.indexOf(w) >= 0; });
      } : null);
      if (shown) {
        shown.textContent = counts && (words.length || b || f) ? counts[0].toLocaleString("en-US") + " of " +
          counts[1].toLocaleString("en-US") + " shown" : "";
      }
    }
    [box, bound, family].forEach(function (el) {
      if (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); }
    });
    function active() { return [box, bound, family].some(function (el) { return el && el.value; }); }
    return {
      apply: apply,
      active: active,
      clear: function () {
        var set = active();
        if (set) {
          [box, bound, family].forEach(function (el) { if (el) { el.value = ""; } });
          apply();
        }
        return set;
      }
    };
  }

  // "Do this first" links: open the finding card they point at, and the "show N more" fold around it
  function bindPlan() {
    document.addEventListener("click", function (ev) {
      var a = ev.target && ev.target.closest ? ev.target.closest("a[href^='#f-']") : null;
      var card = a ? document.getElementById(a.getAttribute("href").slice(1)) : null;
      for (var d = card; d; d = d.parentElement) { if (d.tagName === "DETAILS") { d.open = true; } }
      var own = card ? card.querySelector("details") : null;
      if (own) { own.open = true; }
    });
  }

  bindChart(readData());
  initTable();
  bindPlan();
}());
