/* traceana report: one step stream by stream, on a canvas (data.timeline, from traceana/render/timeline.py).
 * Lanes are streams; each interval is a kernel (or a bucket of short ones when the step had more than
 * the cap), coloured by its op's bound or its class; idle gaps are shaded by cause; collectives get a
 * mark above their lane. Zoom: wheel, the buttons, + / -, or drag across a stretch; pan: Shift + wheel,
 * horizontal wheel, the arrow buttons or keys. Text only ever reaches the page through textContent. */
(function () {
  "use strict";

  var AXIS = 26, LANE = 22, PAD = 5, LEFT = 112, RIGHT = 10, MIN_PX = 0.6;

  function readData() {
    var block = document.getElementById("data");
    if (!block) { return null; }
    try { return JSON.parse(block.textContent); } catch (e) { return null; }
  }

  function isNum(v) { return typeof v === "number" && isFinite(v); }

  function fmtUs(v) {
    var a = Math.abs(v);
    if (a < 10) { return v.toFixed(2) + " \u00b5s"; }
    if (a < 1000) { return v.toFixed(1) + " \u00b5s"; }
    if (a < 1e6) { return (v / 1000).toFixed(a < 1e4 ? 3 : 2) + " ms"; }
    return (v / 1e6).toFixed(2) + " s";
  }

  // a tick at t µs, as precise as the step between ticks needs
  function fmtTick(t, step) {
    if (t === 0) { return "0"; }
    var unit = step >= 1e5 ? 1e6 : step >= 100 ? 1e3 : 1, name = unit === 1e6 ? " s" : unit === 1e3 ? " ms" : " \u00b5s";
    var dec = Math.max(0, Math.min(6, -Math.floor(Math.log(step / unit) / Math.LN10 + 1e-9)));
    return "+" + (t / unit).toFixed(dec) + name;
  }

  function niceStep(span, n) {
    var raw = span / Math.max(n, 1), p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10));
    var m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }

  // the last index i with xs[i] <= t (-1 when none)
  function floorIndex(xs, t) {
    var lo = 0, hi = xs.length - 1, ans = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] <= t) { ans = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return ans;
  }

  function init(T) {
    var wrap = document.getElementById("tl"), canvas = document.getElementById("tl-canvas");
    var tip = document.getElementById("tl-tip"), range = document.getElementById("tl-range");
    if (!wrap || !canvas || !canvas.getContext || !T || !Array.isArray(T.lanes) || !T.lanes.length) { return; }
    var ctx = canvas.getContext("2d");
    var lanes = T.lanes, cats = T.categories || [], causes = T.causes || [], colours = T.colours || {};
    var labels = T.labels || {}, ops = T.ops || {}, gaps = T.gaps || { start: [], dur: [], cause: [] };
    var total = isNum(T.dur) && T.dur > 0 ? T.dur : 1;
    var comm = cats.indexOf("communication");
    var view = { a: 0, b: total };
    var drag = null, width = 0, height = AXIS + lanes.length * (LANE + PAD) + PAD;

    function colourOf(c) { return colours[cats[c]] || "#999999"; }
    function px(t) { return LEFT + (t - view.a) / (view.b - view.a) * (width - LEFT - RIGHT); }
    function timeAt(x) { return view.a + (x - LEFT) / (width - LEFT - RIGHT) * (view.b - view.a); }
    function laneTop(i) { return AXIS + PAD + i * (LANE + PAD); }

    function resize() {
      var dpr = window.devicePixelRatio || 1;
      width = Math.max(wrap.clientWidth, LEFT + 100);
      canvas.style.height = height + "px";
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      draw();
    }

    function setView(a, b) {
      var minSpan = Math.min(total, 0.05);  // 50 ns
      if (b - a < minSpan) { var m = (a + b) / 2; a = m - minSpan / 2; b = m + minSpan / 2; }
      if (b - a > total) { a = 0; b = total; }
      if (a < 0) { b -= a; a = 0; }
      if (b > total) { a -= b - total; b = total; }
      view.a = Math.max(0, a);
      view.b = Math.min(total, b);
      draw();
    }

    function zoom(f, at) {
      var t = at === undefined ? (view.a + view.b) / 2 : at;
      setView(t - (t - view.a) * f, t + (view.b - t) * f);
    }

    function pan(f) {
      var d = (view.b - view.a) * f;
      setView(view.a + d, view.b + d);
    }

    function drawAxis() {
      var span = view.b - view.a, step = niceStep(span, (width - LEFT) / 110);
      ctx.fillStyle = "#5d6677";
      ctx.strokeStyle = "#eceef2";
      ctx.font = "11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
      ctx.textAlign = "center";
      ctx.textBaseline = "alphabetic";
      for (var t = Math.ceil(view.a / step) * step; t <= view.b + 1e-9; t += step) {
        var x = Math.round(px(t)) + 0.5;
        ctx.beginPath();
        ctx.moveTo(x, AXIS - 6);
        ctx.lineTo(x, height);
        ctx.stroke();
        var label = fmtTick(Math.abs(t) < step * 1e-6 ? 0 : t, step), half = ctx.measureText(label).width / 2;
        ctx.fillText(label, Math.max(LEFT + half, Math.min(x, width - RIGHT - half)), AXIS - 10);
      }
      if (Array.isArray(T.cpu) && isNum(T.cpu[0]) && isNum(T.cpu[1])) {  // the step's CPU range
        var c0 = Math.max(px(T.cpu[0]), LEFT), c1 = Math.min(px(T.cpu[0] + T.cpu[1]), width - RIGHT);
        if (c1 > c0) {
          ctx.fillStyle = "#9aa3b2";
          ctx.fillRect(c0, AXIS - 3, c1 - c0, 2);
        }
      }
    }

    function drawGaps() {
      var top = AXIS + 1, h = height - top;
      var i = Math.max(floorIndex(gaps.start, view.a), 0);
      for (; i < gaps.start.length && gaps.start[i] <= view.b; i += 1) {
        var x0 = px(gaps.start[i]), x1 = px(gaps.start[i] + gaps.dur[i]);
        if (x1 < LEFT) { continue; }
        x0 = Math.max(x0, LEFT);
        ctx.globalAlpha = 0.55;
        ctx.fillStyle = colours[causes[gaps.cause[i]]] || "#eef0f3";
        ctx.fillRect(x0, top, Math.max(x1 - x0, MIN_PX), h);
      }
      ctx.globalAlpha = 1;
    }

    function drawLane(lane, li) {
      var y = laneTop(li), n = lane.start.length;
      var i = Math.max(floorIndex(lane.start, view.a) - 1, 0);
      var run = null;  // consecutive intervals inside one pixel column and colour: one fillRect
      function flush() {
        if (run) {
          ctx.globalAlpha = run.alpha;
          ctx.fillStyle = run.colour;
          ctx.fillRect(run.x0, y + 2, Math.max(run.x1 - run.x0, MIN_PX), LANE - 4);
        }
      }
      var marks = [];
      for (; i < n; i += 1) {
        var s = lane.start[i];
        if (s > view.b) { break; }
        var e = s + lane.dur[i];
        if (e < view.a) { continue; }
        var x0 = Math.max(px(s), LEFT), x1 = Math.min(px(e), width - RIGHT);
        var colour = colourOf(lane.cat[i]);
        var alpha = Array.isArray(lane.busy) && lane.dur[i] > 0 ? 0.35 + 0.65 * Math.min(lane.busy[i] / lane.dur[i], 1) : 1;
        if (run && colour === run.colour && alpha === run.alpha && x0 <= run.x1 + 0.5) {
          run.x1 = Math.max(run.x1, x1);
        } else {
          flush();
          run = { x0: x0, x1: x1, colour: colour, alpha: alpha };
        }
        if (lane.cat[i] === comm && comm >= 0 && (!marks.length || x0 - marks[marks.length - 1] > 6)) {
          marks.push(x0);
        }
      }
      flush();
      ctx.globalAlpha = 1;
      ctx.fillStyle = "#1f6f66";
      marks.forEach(function (x) {  // collectives: a small mark above the lane where one starts
        ctx.beginPath();
        ctx.moveTo(x - 4, y - 4);
        ctx.lineTo(x + 4, y - 4);
        ctx.lineTo(x, y + 2);
        ctx.closePath();
        ctx.fill();
      });
      ctx.fillStyle = "#1d2330";
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.font = "600 11.5px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
      ctx.fillText("stream " + lane.stream, 8, y + LANE / 2 - 5);
      ctx.font = "10.5px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
      ctx.fillStyle = "#5d6677";
      ctx.fillText(lane.events + " events", 8, y + LANE / 2 + 7);
    }

    function draw() {
      ctx.clearRect(0, 0, width, height);
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, width, height);
      drawAxis();
      ctx.fillStyle = "#f6f7f9";
      lanes.forEach(function (lane, li) { ctx.fillRect(LEFT, laneTop(li), width - LEFT - RIGHT, LANE); });
      drawGaps();  // idle shading across every lane, under the kernels
      lanes.forEach(drawLane);
      if (drag && Math.abs(drag.x1 - drag.x0) > 3) {
        ctx.fillStyle = "rgba(61, 111, 214, .15)";
        ctx.strokeStyle = "rgba(61, 111, 214, .8)";
        var a = Math.min(drag.x0, drag.x1), w = Math.abs(drag.x1 - drag.x0);
        ctx.fillRect(a, AXIS, w, height - AXIS);
        ctx.strokeRect(a + 0.5, AXIS + 0.5, w, height - AXIS - 1);
      }
      if (range) {
        range.textContent = "showing " + (view.a > 0 ? "+" + fmtUs(view.a) : "0") + " to +" + fmtUs(view.b) + " of " + fmtUs(total);
      }
    }

    // what is under the pointer: an interval of a lane, else an idle gap
    function hit(x, y) {
      var li = Math.floor((y - AXIS - PAD / 2) / (LANE + PAD));
      var t = timeAt(x), slack = 3 * (view.b - view.a) / (width - LEFT - RIGHT);
      if (li >= 0 && li < lanes.length && y >= laneTop(li) && y <= laneTop(li) + LANE) {
        var lane = lanes[li], best = -1, bestD = Infinity;
        var i = floorIndex(lane.start, t + slack);
        for (var k = i; k >= 0 && k > i - 64; k -= 1) {
          var s = lane.start[k], e = s + lane.dur[k];
          var d = t < s ? s - t : t > e ? t - e : 0;
          if (d < bestD) { bestD = d; best = k; }
          if (e < t - slack * 4 && d > slack) { break; }
        }
        if (best >= 0 && bestD <= slack) { return { lane: lane, i: best }; }
      }
      var g = floorIndex(gaps.start, t);
      if (g >= 0 && t <= gaps.start[g] + gaps.dur[g]) { return { gap: g }; }
      return null;
    }

    function row(k, v) {
      var r = document.createElement("div");
      r.className = "t-row";
      var a = document.createElement("span");
      a.textContent = k;
      var b = document.createElement("span");
      b.textContent = String(v);
      r.appendChild(a);
      r.appendChild(b);
      tip.appendChild(r);
    }

    function show(h, clientX, clientY) {
      while (tip.firstChild) { tip.removeChild(tip.firstChild); }
      var name = document.createElement("div");
      name.className = "t-name";
      tip.appendChild(name);
      if (h.gap !== undefined) {
        name.textContent = labels[causes[gaps.cause[h.gap]]] || "idle";
        row("length", fmtUs(gaps.dur[h.gap]));
        row("at", "+" + fmtUs(gaps.start[h.gap]));
      } else {
        var lane = h.lane, i = h.i, op = ops[String(lane.op[i])];
        var cat = labels[cats[lane.cat[i]]] || cats[lane.cat[i]] || "\u2014";
        name.textContent = op ? op.name : cat;
        if (op) {
          row("shapes", op.dims || "\u2014");
          row("dtypes", op.dtypes || "\u2014");
          row("verdict", op.verdict);
          row("mean per call", op.mean);
        }
        row("class", cat);
        row(lane.n[i] > 1 ? "bucket" : "kernel", fmtUs(lane.dur[i]) + " at +" + fmtUs(lane.start[i]));
        if (lane.n[i] > 1) {
          row("merged", lane.n[i] + " short kernels" + (Array.isArray(lane.busy) ? ", busy " + fmtUs(lane.busy[i]) : "")
            + (op ? " (op of the longest)" : ""));
        }
        row("stream", lane.stream);
      }
      tip.hidden = false;
      var box = wrap.getBoundingClientRect();
      var left = clientX - box.left + 14, top = clientY - box.top + 14;
      if (left + tip.offsetWidth > box.width) { left = Math.max(0, clientX - box.left - tip.offsetWidth - 14); }
      if (top + tip.offsetHeight > box.height) { top = Math.max(0, clientY - box.top - tip.offsetHeight - 14); }
      tip.style.left = left + "px";
      tip.style.top = top + "px";
    }

    function hide() { tip.hidden = true; }

    function local(ev) {
      var r = canvas.getBoundingClientRect();
      return { x: ev.clientX - r.left, y: ev.clientY - r.top };
    }

    canvas.addEventListener("wheel", function (ev) {
      var p = local(ev);
      if (p.x < LEFT) { return; }
      ev.preventDefault();
      var dx = ev.deltaX || (ev.shiftKey ? ev.deltaY : 0);
      if (dx) { pan(dx / Math.max(width - LEFT, 1)); return; }
      zoom(Math.exp(Math.max(Math.min(ev.deltaY, 200), -200) * 0.002), timeAt(p.x));
    }, { passive: false });
    canvas.addEventListener("mousedown", function (ev) {
      var p = local(ev);
      if (ev.button !== 0 || p.x < LEFT) { return; }
      drag = { x0: p.x, x1: p.x };
      hide();
    });
    window.addEventListener("mouseup", function (ev) {
      if (!drag) { return; }
      var d = drag;
      drag = null;
      if (Math.abs(d.x1 - d.x0) > 3) {
        setView(timeAt(Math.min(d.x0, d.x1)), timeAt(Math.max(d.x0, d.x1)));
        return;
      }
      var p = local(ev), h = hit(p.x, p.y);  // a click: jump to the op's row
      var op = h && h.lane ? ops[String(h.lane.op[h.i])] : null;
      var table = document.getElementById("ops-table");
      if (op && op.row && table && table.reveal) { table.reveal(op.id); }  // report.js draws the row if need be
      draw();
    });
    canvas.addEventListener("mousemove", function (ev) {
      var p = local(ev);
      if (drag) {
        drag.x1 = Math.max(LEFT, Math.min(p.x, width - RIGHT));
        draw();
        return;
      }
      var h = hit(p.x, p.y);
      if (h) { show(h, ev.clientX, ev.clientY); } else { hide(); }
    });
    canvas.addEventListener("mouseleave", hide);
    canvas.addEventListener("keydown", function (ev) {
      var k = ev.key;
      if (k === "+" || k === "=") { zoom(0.5); } else if (k === "-") { zoom(2); } else if (k === "ArrowLeft") {
        pan(-0.25);
      } else if (k === "ArrowRight") { pan(0.25); } else if (k === "0") { setView(0, total); } else { return; }
      ev.preventDefault();
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-tl]"), function (b) {
      b.addEventListener("click", function () {
        var what = b.getAttribute("data-tl");
        if (what === "in") { zoom(0.5); } else if (what === "out") { zoom(2); } else if (what === "left") {
          pan(-0.25);
        } else if (what === "right") { pan(0.25); } else { setView(0, total); }
      });
    });
    window.addEventListener("resize", resize);
    resize();
    // for tests and keyboard users: the drawn range, and a way to set it
    canvas.timeline = { view: view, setView: setView, lanes: lanes.length, hit: hit, x: px,
      y: function (i) { return laneTop(i) + LANE / 2; } };
  }

  var data = readData();
  init(data && data.timeline);
}());
