/* traceana report: one step on a canvas (data.timeline, from traceana/render/timeline.py), as a list of
 * tracks drawn top to bottom: the CPU threads that launched the step's work (their outermost ops and
 * annotations), then the GPU streams. A GPU interval is a kernel (or a bucket of short ones when the
 * step had more than the cap), coloured by its op's bound or its class; idle gaps are shaded by cause
 * across the streams; collectives get a mark above their lane. Hovering a kernel names it and its op
 * and draws the link from its launching runtime call on its CPU thread. The search box highlights the
 * kernels and ops whose name holds the text; Enter brings the next match into view. Zoom: wheel, the
 * buttons, + / -, or drag across a stretch; pan: Shift + wheel, horizontal wheel, the arrow buttons or keys.
 * Text only ever reaches the page through textContent.
 *
 * A new kind of track: push {kind, label, sub, h, ...} in buildTracks and add a painter to PAINT (and a
 * hit test to HIT for its tooltip); the axis, zoom, pan and layout need nothing else. */
(function () {
  "use strict";

  var AXIS = 26, PAD = 5, LEFT = 112, RIGHT = 10, MIN_PX = 0.6, GAP = 10;
  var FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  var CPU_OP = "#7f8aa0", CPU_ANN = "#a991c9", LINK = "#d6336c";

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

  function fmtAt(v) { return (v < 0 ? "\u2212" : "+") + fmtUs(Math.abs(v)); }

  // a tick at t µs, as precise as the step between ticks needs
  function fmtTick(t, step) {
    if (t === 0) { return "0"; }
    var unit = step >= 1e5 ? 1e6 : step >= 100 ? 1e3 : 1, name = unit === 1e6 ? " s" : unit === 1e3 ? " ms" : " \u00b5s";
    var dec = Math.max(0, Math.min(6, -Math.floor(Math.log(step / unit) / Math.LN10 + 1e-9)));
    return (t < 0 ? "\u2212" : "+") + (Math.abs(t) / unit).toFixed(dec) + name;
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

  function cols(c) {
    return c && Array.isArray(c.start) && Array.isArray(c.dur) && c.dur.length === c.start.length ? c : null;
  }

  // the tracks, top to bottom: each CPU thread's ops (and annotations), then each GPU stream
  function buildTracks(T) {
    var tracks = [], threadTrack = [];
    (Array.isArray(T.threads) ? T.threads : []).forEach(function (th, ti) {
      var ops = cols(th.ops), ann = cols(th.annotations);
      threadTrack.push(-1);
      if (ann) {
        tracks.push({ kind: "cpu", what: "annotations", thread: th, c: ann, h: 12, colour: CPU_ANN, label: "",
          sub: "" });
      }
      if (ops) {
        threadTrack[ti] = tracks.length;
        tracks.push({ kind: "cpu", what: "ops", thread: th, c: ops, h: 18, colour: CPU_OP,
          label: "thread " + th.tid, sub: th.launched + " launched" });
      }
    });
    var gpuFrom = tracks.length;
    T.lanes.forEach(function (lane, li) {
      tracks.push({ kind: "gpu", lane: lane, index: li, h: 22, gapBefore: li === 0 && gpuFrom > 0,
        label: "stream " + lane.stream, sub: lane.events + " events" });
    });
    var y = AXIS + PAD;
    tracks.forEach(function (tr) {
      if (tr.gapBefore) { y += GAP; }
      tr.y = y;
      y += tr.h + PAD;
    });
    return { tracks: tracks, threadTrack: threadTrack, gpuFrom: gpuFrom, height: y };
  }

  function init(T) {
    var wrap = document.getElementById("tl"), canvas = document.getElementById("tl-canvas");
    var tip = document.getElementById("tl-tip"), range = document.getElementById("tl-range");
    var search = document.getElementById("tl-search"), found = document.getElementById("tl-found");
    if (!wrap || !canvas || !canvas.getContext || !T || !Array.isArray(T.lanes) || !T.lanes.length) { return; }
    var ctx = canvas.getContext("2d");
    var lanes = T.lanes, cats = T.categories || [], causes = T.causes || [], colours = T.colours || {};
    var labels = T.labels || {}, ops = T.ops || {}, gaps = T.gaps || { start: [], dur: [], cause: [] };
    var kernels = T.kernels || { short: [], full: [] }, cpuNames = T.cpu_names || [], calls = T.calls || [];
    var dur = isNum(T.dur) && T.dur > 0 ? T.dur : 1;
    var lo = 0, hi = dur;  // the drawn domain: the GPU window and the CPU side's range
    var stepRange = Array.isArray(T.cpu) && T.cpu.length === 2 ? [T.cpu[0], T.cpu[0] + T.cpu[1]] : null;
    [T.cpu_range, stepRange].forEach(function (r) {
      if (Array.isArray(r) && isNum(r[0]) && isNum(r[1])) { lo = Math.min(lo, r[0]); hi = Math.max(hi, r[1]); }
    });
    var comm = cats.indexOf("communication");
    var layout = buildTracks(T), tracks = layout.tracks, height = layout.height;
    var view = { a: lo, b: hi };
    var drag = null, width = 0, hover = null, match = null;

    function colourOf(c) { return colours[cats[c]] || "#999999"; }
    function px(t) { return LEFT + (t - view.a) / (view.b - view.a) * (width - LEFT - RIGHT); }
    function timeAt(x) { return view.a + (x - LEFT) / (width - LEFT - RIGHT) * (view.b - view.a); }
    function gpuTrack(li) { return tracks[layout.gpuFrom + li]; }

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
      var total = hi - lo, minSpan = Math.min(total, 0.05);  // 50 ns
      if (b - a < minSpan) { var m = (a + b) / 2; a = m - minSpan / 2; b = m + minSpan / 2; }
      if (b - a > total) { a = lo; b = hi; }
      if (a < lo) { b += lo - a; a = lo; }
      if (b > hi) { a -= b - hi; b = hi; }
      view.a = Math.max(lo, a);
      view.b = Math.min(hi, b);
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
      ctx.font = "11px " + FONT;
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
      var first = gpuTrack(0), last = gpuTrack(lanes.length - 1);
      var top = first.y - PAD / 2, h = last.y + last.h + PAD / 2 - top;
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

    // intervals of one track: consecutive ones inside one pixel column and colour are one fillRect;
    // `colourAt(i)` and `hit(i)` (search) per interval; names written inside the wide ones
    function paintIntervals(tr, c, colourAt, alphaAt, hitAt, nameAt) {
      var y = tr.y, n = c.start.length, h = tr.h;
      var i = Math.max(floorIndex(c.start, view.a) - 1, 0);
      var run = null, marked = [], named = [];
      function flush() {
        if (run) {
          ctx.globalAlpha = run.alpha;
          ctx.fillStyle = run.colour;
          ctx.fillRect(run.x0, y + 2, Math.max(run.x1 - run.x0, MIN_PX), h - 4);
        }
      }
      for (; i < n; i += 1) {
        var s = c.start[i];
        if (s > view.b) { break; }
        var e = s + c.dur[i];
        if (e < view.a) { continue; }
        var x0 = Math.max(px(s), LEFT), x1 = Math.min(px(e), width - RIGHT);
        var colour = colourAt(i), alpha = alphaAt(i), lit = match ? hitAt(i) : false;
        if (match && !lit) { alpha *= 0.18; }
        if (lit) { marked.push([x0, x1]); }
        if (x1 - x0 > 46) { named.push([x0, x1, i]); }
        if (run && colour === run.colour && alpha === run.alpha && x0 <= run.x1 + 0.5) {
          run.x1 = Math.max(run.x1, x1);
        } else {
          flush();
          run = { x0: x0, x1: x1, colour: colour, alpha: alpha };
        }
      }
      flush();
      ctx.globalAlpha = 1;
      ctx.fillStyle = "#111827";
      marked.forEach(function (m) {  // search hits: a dark band along the top and bottom, at least 2 px wide
        var w = Math.max(m[1] - m[0], 2), x = m[0] - (w - (m[1] - m[0])) / 2;
        ctx.fillRect(x, y, w, 3);
        ctx.fillRect(x, y + h - 3, w, 3);
      });
      if (h >= 16) {
        ctx.font = "10.5px " + FONT;
        ctx.textAlign = "left";
        ctx.textBaseline = "middle";
        named.forEach(function (m) {
          var label = nameAt(m[2]);
          if (!label) { return; }
          ctx.save();
          ctx.beginPath();
          ctx.rect(m[0] + 3, y, m[1] - m[0] - 6, h);
          ctx.clip();
          ctx.fillStyle = match && !hitAt(m[2]) ? "rgba(255,255,255,.5)" : "#ffffff";
          ctx.fillText(label, m[0] + 4, y + h / 2);
          ctx.restore();
        });
      }
    }

    function kernelName(lane, i) {
      var k = lane.kernel ? lane.kernel[i] : -1;
      return k >= 0 && k < kernels.short.length ? kernels.short[k] : "";
    }

    // a bucket is drawn fainter the less of it was busy
    function busyAlpha(c, i) {
      return Array.isArray(c.busy) && c.dur[i] > 0 ? 0.35 + 0.65 * Math.min(c.busy[i] / c.dur[i], 1) : 1;
    }

    function opName(lane, i) {
      var op = ops[String(lane.op[i])];
      return op ? op.name : "";
    }

    var PAINT = {
      cpu: function (tr) {
        var c = tr.c;
        paintIntervals(tr, c, function () { return tr.colour; }, function (i) { return busyAlpha(c, i); },
          function (i) { return cpuHit(match, c, i); }, function (i) { return cpuNames[c.name[i]] || ""; });
      },
      gpu: function (tr) {
        var lane = tr.lane, y = tr.y, marks = [];
        paintIntervals(tr, lane, function (i) { return colourOf(lane.cat[i]); },
          function (i) { return busyAlpha(lane, i); }, function (i) { return gpuHit(match, lane, i); },
          function (i) { return kernelName(lane, i) || opName(lane, i); });
        if (comm >= 0) {  // collectives: a small mark above the lane where one starts
          var i = Math.max(floorIndex(lane.start, view.a), 0);
          for (; i < lane.start.length && lane.start[i] <= view.b; i += 1) {
            var x = Math.max(px(lane.start[i]), LEFT);
            if (lane.cat[i] === comm && (!marks.length || x - marks[marks.length - 1] > 6)) { marks.push(x); }
          }
        }
        ctx.fillStyle = "#1f6f66";
        marks.forEach(function (x) {
          ctx.beginPath();
          ctx.moveTo(x - 4, y - 4);
          ctx.lineTo(x + 4, y - 4);
          ctx.lineTo(x, y + 2);
          ctx.closePath();
          ctx.fill();
        });
      }
    };

    function drawLabel(tr) {
      if (!tr.label) {
        ctx.fillStyle = "#8a7aa8";
        ctx.font = "9.5px " + FONT;
        ctx.textAlign = "left";
        ctx.textBaseline = "middle";
        ctx.fillText("annotations", 8, tr.y + tr.h / 2);
        return;
      }
      var mid = tr.y + tr.h / 2;
      ctx.fillStyle = "#1d2330";
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.font = "600 11.5px " + FONT;
      ctx.fillText(tr.label.length > 17 ? tr.label.slice(0, 16) + "\u2026" : tr.label, 8, mid - 5);
      ctx.font = "10.5px " + FONT;
      ctx.fillStyle = "#5d6677";
      ctx.fillText(tr.sub, 8, mid + 7);
    }

    // the hovered kernel: outlined, with its launch on its CPU thread and the line between them
    function drawLink() {
      if (!hover || !hover.lane) { return; }
      var lane = hover.lane, i = hover.i, tr = gpuTrack(hover.li);
      var x0 = Math.max(px(lane.start[i]), LEFT), x1 = Math.min(px(lane.start[i] + lane.dur[i]), width - RIGHT);
      ctx.strokeStyle = LINK;
      ctx.lineWidth = 2;
      ctx.strokeRect(x0 - 1, tr.y, Math.max(x1 - x0, 1) + 2, tr.h);
      var th = lane.thread ? lane.thread[i] : -1, cpu = th >= 0 ? tracks[layout.threadTrack[th]] : null;
      if (cpu) {
        var lx = px(lane.launch[i]), ly = cpu.y + cpu.h;
        var cx = Math.min(Math.max(lx, LEFT), width - RIGHT);
        ctx.fillStyle = LINK;
        ctx.fillRect(cx - 1.5, cpu.y, 3, cpu.h);
        ctx.beginPath();
        ctx.moveTo(cx, ly);
        ctx.lineTo(Math.min(Math.max(x0, LEFT), width - RIGHT), tr.y);
        ctx.stroke();
        ctx.beginPath();  // an arrow head at the kernel
        ctx.arc(Math.min(Math.max(x0, LEFT), width - RIGHT), tr.y, 3, 0, 2 * Math.PI);
        ctx.fill();
      }
      ctx.lineWidth = 1;
    }

    function draw() {
      ctx.clearRect(0, 0, width, height);
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, width, height);
      drawAxis();
      tracks.forEach(function (tr) {
        ctx.fillStyle = tr.kind === "gpu" ? "#f6f7f9" : "#f8f7fb";
        ctx.fillRect(LEFT, tr.y, width - LEFT - RIGHT, tr.h);
      });
      if (layout.gpuFrom > 0) {  // CPU above, GPU below
        var sep = gpuTrack(0).y - GAP / 2 - PAD / 2;
        ctx.fillStyle = "#c9ccd1";
        ctx.fillRect(0, sep, width, 1);
      }
      drawGaps();  // idle shading across the GPU lanes, under the kernels
      tracks.forEach(function (tr) {
        if (PAINT[tr.kind]) { PAINT[tr.kind](tr); }
        drawLabel(tr);
      });
      drawLink();
      if (drag && Math.abs(drag.x1 - drag.x0) > 3) {
        ctx.fillStyle = "rgba(61, 111, 214, .15)";
        ctx.strokeStyle = "rgba(61, 111, 214, .8)";
        var a = Math.min(drag.x0, drag.x1), w = Math.abs(drag.x1 - drag.x0);
        ctx.fillRect(a, AXIS, w, height - AXIS);
        ctx.strokeRect(a + 0.5, AXIS + 0.5, w, height - AXIS - 1);
      }
      if (range) {
        range.textContent = "showing " + (view.a === 0 ? "0" : fmtAt(view.a)) + " to " + fmtAt(view.b) + " of "
          + fmtUs(hi - lo);
      }
    }

    // the interval of a track nearest time t within `slack`, or -1
    function nearest(c, t, slack) {
      var best = -1, bestD = Infinity, i = floorIndex(c.start, t + slack);
      for (var k = i; k >= 0 && k > i - 64; k -= 1) {
        var s = c.start[k], e = s + c.dur[k];
        var d = t < s ? s - t : t > e ? t - e : 0;
        if (d < bestD) { bestD = d; best = k; }
        if (e < t - slack * 4 && d > slack) { break; }
      }
      return best >= 0 && bestD <= slack ? best : -1;
    }

    var HIT = {
      cpu: function (tr, t, slack) { var i = nearest(tr.c, t, slack); return i >= 0 ? { cpu: tr, i: i } : null; },
      gpu: function (tr, t, slack) {
        var i = nearest(tr.lane, t, slack);
        return i >= 0 ? { lane: tr.lane, li: tr.index, i: i } : null;
      }
    };

    // what is under the pointer: an interval of a track, else an idle gap (in the GPU lanes)
    function hit(x, y) {
      var t = timeAt(x), slack = 3 * (view.b - view.a) / (width - LEFT - RIGHT);
      for (var k = 0; k < tracks.length; k += 1) {
        var tr = tracks[k];
        if (y >= tr.y && y <= tr.y + tr.h && HIT[tr.kind]) { return HIT[tr.kind](tr, t, slack); }
      }
      var first = gpuTrack(0), last = gpuTrack(lanes.length - 1);
      if (y >= first.y && y <= last.y + last.h) {
        var g = floorIndex(gaps.start, t);
        if (g >= 0 && t <= gaps.start[g] + gaps.dur[g]) { return { gap: g }; }
      }
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

    function showKernel(h, name) {
      var lane = h.lane, i = h.i, op = ops[String(lane.op[i])], k = lane.kernel ? lane.kernel[i] : -1;
      var cat = labels[cats[lane.cat[i]]] || cats[lane.cat[i]] || "\u2014";
      var bucket = lane.n[i] > 1;
      name.textContent = kernelName(lane, i) || (op ? op.name : cat);
      if (bucket) {
        row("merged", lane.n[i] + " short kernels" + (Array.isArray(lane.busy) ? ", busy " + fmtUs(lane.busy[i]) : ""));
      }
      row(bucket ? "bucket" : "duration", fmtUs(lane.dur[i]));
      row("at", fmtAt(lane.start[i]));
      row(bucket ? "op (longest kernel)" : "op", op ? op.name : "\u2014");
      if (op) {
        row("shapes", op.dims || "\u2014");
        row("dtypes", op.dtypes || "\u2014");
        row("bound", op.bound || "\u2014");
        if (op.roof) { row("% of roof", op.roof); }
        row("verdict", op.verdict);
        row("mean per call", op.mean);
      }
      row("class", cat);
      row("stream", lane.stream);
      if (lane.corr && lane.corr[i] >= 0) { row("correlation", lane.corr[i]); }
      var th = lane.thread ? lane.thread[i] : -1, thread = th >= 0 && T.threads ? T.threads[th] : null;
      var call = lane.call && lane.call[i] >= 0 ? calls[lane.call[i]] : null;
      if (call === null || call === undefined) {
        row("launched", "no launch in the trace");
      } else {
        row("launched by", call + " at " + fmtAt(lane.launch[i]));
        row("on thread", thread ? thread.tid : "one not drawn");
      }
      if (k >= 0 && kernels.full[k] && kernels.full[k] !== kernels.short[k]) {
        var full = document.createElement("div");
        full.className = "t-full";
        full.textContent = kernels.full[k];
        tip.appendChild(full);
      }
    }

    function showCpu(h, name) {
      var c = h.cpu.c, i = h.i;
      name.textContent = cpuNames[c.name[i]] || "(unnamed)";
      if (c.n[i] > 1) { row("merged", c.n[i] + " short " + h.cpu.what + " (named after the longest)"); }
      row("duration", fmtUs(c.dur[i]));
      row("at", fmtAt(c.start[i]));
      row(h.cpu.what === "ops" ? "op on" : "annotation on", "thread " + h.cpu.thread.thread);
    }

    function show(h, clientX, clientY) {
      while (tip.firstChild) { tip.removeChild(tip.firstChild); }
      var name = document.createElement("div");
      name.className = "t-name";
      tip.appendChild(name);
      if (h.gap !== undefined) {
        name.textContent = labels[causes[gaps.cause[h.gap]]] || "idle";
        row("length", fmtUs(gaps.dur[h.gap]));
        row("at", fmtAt(gaps.start[h.gap]));
      } else if (h.cpu) {
        showCpu(h, name);
      } else {
        showKernel(h, name);
      }
      tip.hidden = false;
      var box = wrap.getBoundingClientRect(), room = window.innerHeight || document.documentElement.clientHeight;
      var left = clientX - box.left + 14, top = clientY - box.top + 14;
      if (left + tip.offsetWidth > box.width) { left = Math.max(0, clientX - box.left - tip.offsetWidth - 14); }
      if (clientY + 14 + tip.offsetHeight > room) {  // no room below the pointer: above it (outside the box if need be)
        top = Math.max(clientY - box.top - tip.offsetHeight - 14, -box.top);
      }
      tip.style.left = left + "px";
      tip.style.top = top + "px";
    }

    function setHover(h) {
      var next = h && h.lane ? h : null;
      if ((next && hover && next.lane === hover.lane && next.i === hover.i) || (!next && !hover)) { return; }
      hover = next;
      draw();
    }

    function hide() { tip.hidden = true; setHover(null); }

    function holds(name, q) { return String(name || "").toLowerCase().indexOf(q) >= 0; }
    function gpuHit(m, lane, i) { return m.kernel[lane.kernel[i]] === true || m.op[lane.op[i]] === true; }
    function cpuHit(m, c, i) { return m.cpu[c.name[i]] === true; }

    // every matched interval: fn(start, dur, count, isGpu)
    function eachHit(m, fn) {
      lanes.forEach(function (lane) {
        for (var i = 0; i < lane.start.length; i += 1) {
          if (gpuHit(m, lane, i)) { fn(lane.start[i], lane.dur[i], lane.n[i], true); }
        }
      });
      tracks.forEach(function (tr) {
        if (tr.kind !== "cpu") { return; }
        for (var i = 0; i < tr.c.start.length; i += 1) {
          if (cpuHit(m, tr.c, i)) { fn(tr.c.start[i], tr.c.dur[i], tr.c.n[i], false); }
        }
      });
    }

    // search: the kernels (short or full name), ops and CPU names holding the text, case-insensitive
    function find(q) {
      q = String(q || "").trim().toLowerCase();
      if (!q) { match = null; if (found) { found.textContent = ""; } draw(); return null; }
      var m = { kernel: {}, op: {}, cpu: {}, next: 0 }, nk = 0, nc = 0;
      kernels.short.forEach(function (s, k) { if (holds(s, q) || holds(kernels.full[k], q)) { m.kernel[k] = true; } });
      Object.keys(ops).forEach(function (k) { if (holds(ops[k].name, q)) { m.op[k] = true; } });
      cpuNames.forEach(function (s, k) { if (holds(s, q)) { m.cpu[k] = true; } });
      eachHit(m, function (s, d, n, gpu) { if (gpu) { nk += n; } else { nc += n; } });
      match = m;
      if (found) {
        found.textContent = nk + " kernel" + (nk === 1 ? "" : "s") + " and " + nc + " CPU op" + (nc === 1 ? "" : "s")
          + " match";
      }
      draw();
      return { kernels: nk, cpu: nc };
    }

    // Enter in the search box: the next match (by start, GPU and CPU together) brought into view
    function nextMatch() {
      if (!match) { return null; }
      var hits = [];
      eachHit(match, function (s, d) { hits.push([s, d]); });
      if (!hits.length) { return null; }
      hits.sort(function (x, y) { return x[0] - y[0]; });
      var h = hits[match.next % hits.length], span = Math.min(view.b - view.a, Math.max(h[1] * 20, 1));
      match.next += 1;
      setView(h[0] + h[1] / 2 - span / 2, h[0] + h[1] / 2 + span / 2);
      return h;
    }

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
      if (h) { show(h, ev.clientX, ev.clientY); setHover(h); } else { hide(); }
    });
    canvas.addEventListener("mouseleave", hide);
    canvas.addEventListener("keydown", function (ev) {
      var k = ev.key;
      if (k === "+" || k === "=") { zoom(0.5); } else if (k === "-") { zoom(2); } else if (k === "ArrowLeft") {
        pan(-0.25);
      } else if (k === "ArrowRight") { pan(0.25); } else if (k === "0") { setView(lo, hi); } else { return; }
      ev.preventDefault();
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-tl]"), function (b) {
      b.addEventListener("click", function () {
        var what = b.getAttribute("data-tl");
        if (what === "in") { zoom(0.5); } else if (what === "out") { zoom(2); } else if (what === "left") {
          pan(-0.25);
        } else if (what === "right") { pan(0.25); } else { setView(lo, hi); }
      });
    });
    if (search) {
      search.hidden = false;
      search.addEventListener("input", function () { find(search.value); });
      search.addEventListener("keydown", function (ev) {
        if (ev.key === "Escape") {
          search.value = "";
          find("");
        } else if (ev.key === "Enter") {
          ev.preventDefault();
          nextMatch();
        }
      });
    }
    window.addEventListener("resize", resize);
    resize();
    // for tests and keyboard users: the drawn range, and a way to set it
    canvas.timeline = { view: view, domain: [lo, hi], setView: setView, lanes: lanes.length, hit: hit, x: px,
      y: function (i) { var tr = gpuTrack(i); return tr.y + tr.h / 2; },
      threads: layout.threadTrack.length,
      cpuY: function (th) { var tr = tracks[layout.threadTrack[th]]; return tr ? tr.y + tr.h / 2 : null; },
      hover: function () { return hover ? { lane: hover.li, i: hover.i } : null; },
      find: find, next: nextMatch, tracks: tracks };
  }

  var data = readData();
  init(data && data.timeline);
}());
