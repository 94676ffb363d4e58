"""What a report says first, as plain display strings every format shares (html, markdown, the
terminal): the device line, the ledger's terms and its one sentence of where the time went,
"Do this first" (the plan's levers, each with its saving and the span after it), and the
findings grouped into cards ordered by saving.

All of it reads the analysis dict only (docs/analysis-schema.md): `ledger` (the primary
device's one account of its span: every µs in exactly one term), `plan` (at most 3 levers)
and `findings` (each with `fix` and `group`). Every field may be missing or malformed, so
each reader checks what it takes; the strings are plain text, escaped by each format's own
function (jinja's autoescape, md_text, term_text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from traceana.render.views import finding_kind, fmt_pct, fmt_sig, fmt_time_us, plural
from traceana.document import mapping, seq, share
from traceana.units import num, text

#: Cards shown before the "show N more" fold.
CARDS_BEFORE_FOLD = 8
#: Levers in "Do this first".
PLAN_LEVERS = 3
#: Colours of the ledger's terms (the bounds' as in report.css and svg.py); a key not listed
#: takes its group's colour.
TERM_COLOURS: dict[str, str] = {
    "compute": "#3d6fd6", "memory": "#e8871e", "latency": "#9b5bb5", "underutilised": "#c2527a",
    "host_link": "#c9a227", "unmodelled": "#aab0b8", "unknown": "#c9ccd1", "opaque": "#5f6670",
    "comm_transfer": "#2a9d8f", "comm_wait": "#8fd1c8", "comm_unsized": "#5bb5a9", "copies": "#c9a227",
    "sync": "#e06666", "host_dispatch": "#f0a3a3", "launch_gaps": "#cdd5e2", "stream_wait": "#f3cf8c",
    "no_work": "#e4e6ea", "graph_launch": "#d98cb3",
    # a CPU-only trace's account (diagnose/cpu_account.py): its ops by bound, and the time outside any op
    "dispatch": "#9b5bb5", "composite": "#7f9fd6", "outside_ops": "#e4e6ea",
}
GROUP_COLOURS = {"work": "#aab0b8", "communication": "#2a9d8f", "copies": "#c9a227", "idle": "#eef0f3"}
GROUPS = ("work", "communication", "copies", "idle")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])")


def ledger(a: Mapping[str, Any]) -> Mapping[str, Any]:
    """The analysis' ledger ({} when it has none: a CPU-only trace, or an older document)."""
    return mapping(a.get("ledger"))


def cpu_only(a: Mapping[str, Any]) -> bool:
    """A CPU-only trace: CPU ops judged, no device time."""
    return bool(mapping(a.get("cpu"))) and not num(mapping(a.get("coverage")).get("device_time_us"))


def account(a: Mapping[str, Any]) -> Mapping[str, Any]:
    """The span's one account: the primary GPU's ledger, or a CPU-only trace's (cpu.account); {} for neither."""
    led = ledger(a)
    if led or not cpu_only(a):
        return led
    return mapping(mapping(a.get("cpu")).get("account"))


def terms(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ledger's terms with a positive time, in its order: {key, group, label, meaning,
    us, share (% of the span), time, pct, colour}. Each term once: they add up to the span.
    A CPU-only trace's account has the same shape (its busiest thread's span)."""
    led = account(a)
    span = num(led.get("span_us"))
    out = []
    for t in seq(led.get("terms")):
        t = mapping(t)
        us = num(t.get("us"))
        if us is None or us <= 0:
            continue
        key, group = text(t.get("key"), 40), text(t.get("group"), 20)
        pct = share(us, span)
        out.append({"key": key, "group": group if group in GROUPS else "work",
                    "label": text(t.get("label"), 80) or key.replace("_", " "),
                    "meaning": text(t.get("meaning"), 400), "us": us, "share": pct,
                    "time": fmt_time_us(us), "pct": fmt_pct(pct) if pct is not None else "—",
                    "colour": TERM_COLOURS.get(key, GROUP_COLOURS.get(group, "#999999"))})
    return out


def sentence(a: Mapping[str, Any]) -> str:
    """The ledger's one sentence of where the time went (a CPU-only trace's: cpu.sentence), then the
    kernel account's of what the kernels were ("" without either)."""
    s = text(ledger(a).get("sentence"), 1200)
    if not s and cpu_only(a):
        s = text(mapping(a.get("cpu")).get("sentence"), 1200)
    return " ".join(x for x in (s, kernel_sentence(a)) if x)


def kernel_sentence(a: Mapping[str, Any]) -> str:
    """What the kernels were, by class with their dtype, tensor-core use and library (analysis["kernels"],
    from kernel names: shapes or not); a dominating kernel launched outside any op first."""
    return text(mapping(a.get("kernels")).get("sentence"), 600)


def device_line(a: Mapping[str, Any]) -> str:
    """One line: the device (and its table row), the roof most device time was held to, DRAM
    bandwidth, the span and the steps it covers. A CPU-only trace: the CPU (named by its device
    profile; a trace records no CPU model) and the roofs its ops were judged against."""
    if cpu_only(a):
        return cpu_device_line(a)
    dev = mapping(a.get("device"))
    led = ledger(a)
    name, key = text(dev.get("name"), 120), text(dev.get("key"), 80)
    key = text(dev.get("borrowed"), 120) or key  # a device without its own row: whose figures, how scaled
    bits = [f"{name} ({key})" if name and key and key != name else name or key or unknown_device(dev)]
    peak = _main_peak(a)
    if peak:
        bits.append(peak)
    dram = num(dev.get("dram_gbps"))
    if dram is not None:
        bits.append(f"DRAM {fmt_sig(dram)} GB/s")
    span = num(led.get("span_us"))
    if span:
        where = f"GPU {text(led.get('device'), 12)} " if led.get("device") is not None else ""
        span_bit = f"{where}span {fmt_time_us(span)}"
        steps, step = num(led.get("steps")), num(led.get("step_us"))
        if steps:
            span_bit += f", {plural(steps, 'step')}" + (
                f" ({'median ' if steps > 1 else ''}{fmt_time_us(step)})" if step else "")
        bits.append(span_bit)
    return " · ".join(bits)


def unknown_device(dev: Mapping[str, Any]) -> str:
    """'unknown device', with what the kernels' names say of it when the trace has no deviceProperties:
    'unknown device (kernels built for sm_80: Ampere or later)'."""
    built = mapping(dev.get("built_for"))
    cc = text(built.get("cc"), 8)
    if not cc:
        return "unknown device"
    return f"unknown device (kernels built for sm_{cc.replace('.', '')}: {text(built.get('family'), 40)} or later)"


def cpu_device_line(a: Mapping[str, Any]) -> str:
    """'CPU Intel(R) Xeon(R) (2 threads, profile cpu.json) · BLAS fp32 0.36 TFLOP/s · memory 15 GB/s ·
    dispatch 1.00 µs per op · span 2.18 s'."""
    cpu = mapping(a.get("cpu"))
    dev, roofs = mapping(cpu.get("device")), mapping(mapping(cpu.get("roofline")).get("roofs"))
    name = text(dev.get("name"), 120)
    threads = num(dev.get("threads"))
    facts = [plural(threads, "thread")] if threads else []
    if text(dev.get("profile")):
        facts.append(f"profile {text(dev.get('profile'), 80)}")
    bits = [f"CPU {name}" + (f" ({', '.join(facts)})" if facts else "") if name else
            "CPU (model and cores not recorded in the trace: pass --profile from `traceana calibrate` on that machine)"]
    peaks = {text(k, 10): x for k, v in mapping(roofs.get("peak_tflops")).items() if (x := num(v))}
    if "fp32" in peaks:
        default = text(roofs.get("source")) != "profile"
        bits.append(f"BLAS fp32 {fmt_sig(peaks['fp32'])} TFLOP/s" + (" (default)" if default else ""))
    if num(roofs.get("dram_gbps")):
        bits.append(f"memory {fmt_sig(roofs.get('dram_gbps'))} GB/s")
    if num(roofs.get("dispatch_us")):
        bits.append(f"dispatch {fmt_time_us(roofs.get('dispatch_us'))} per op")
    acc = account(a)
    span = num(acc.get("span_us"))
    if span:
        steps = num(acc.get("steps"))
        bits.append(f"span {fmt_time_us(span)}" + (f", {plural(steps, 'step')}" if steps else ""))
    return " · ".join(bits)


def _main_peak(a: Mapping[str, Any]) -> str:
    """'bf16 tensor 989 TFLOP/s': the compute roof that held the most FLOPs; when no op with FLOPs names
    one, the roof the matrix kernels' names say they ran on (the highest peak when they say nothing)."""
    from traceana import units

    peaks = {text(k, 40): x for k, v in mapping(mapping(a.get("device")).get("peak_tflops")).items()
             if (x := num(v)) is not None and x > 0}
    if not peaks:
        return ""
    weight: dict[str, float] = {}
    for op in seq(a.get("ops")):
        op = mapping(op)
        k = text(op.get("peak_dtype"), 40)
        if k in peaks:
            weight[k] = weight.get(k, 0.0) + (num(op.get("flops")) or 0.0) * (num(op.get("count")) or 0.0)
    weight = {k: w for k, w in weight.items() if w > 0} or _kernel_roofs(a, peaks)
    best = max(weight, key=lambda k: (weight[k], k)) if weight else max(peaks, key=lambda k: (peaks[k], k))
    return f"{units.peak_name(best)} {fmt_sig(peaks[best])} TFLOP/s"


_TC_ROOF = {"bf16": "bf16_tc", "fp16": "fp16_tc", "fp8": "fp8_tc", "int8": "int8_tc", "fp64": "fp64_tc"}


def _kernel_roofs(a: Mapping[str, Any], peaks: Mapping[str, float]) -> dict[str, float]:
    """With no op costed (no shapes): the roof the kernel account's matrix kernels ran on, by their time (fp32
    on CUDA cores -> fp32, fp32 operands on TF32 -> tf32_tc, bf16 on tensor cores -> bf16_tc), never the
    device's highest peak, which the run may not use at all."""
    weight: dict[str, float] = {}
    for r in seq(mapping(a.get("kernels")).get("rows")):
        r = mapping(r)
        if text(r.get("class"), 20) not in ("gemm", "convolution", "attention"):
            continue
        dt, tc, math = text(r.get("dtype"), 20).split(" x ")[0], r.get("tensor_cores"), text(r.get("math"), 8)
        key = ("tf32_tc" if math in ("tf32", "xf32") else _TC_ROOF.get(dt)) if tc else dt if tc is False else None
        if key in peaks:
            weight[key] = weight.get(key, 0.0) + (num(r.get("time_us")) or 0.0)
    return {k: w for k, w in weight.items() if w > 0}


def first_sentence(s: str) -> str:
    """The first sentence of a finding's text (its fix when the finding states none)."""
    s = " ".join(s.split())
    parts = _SENTENCE_END.split(s, maxsplit=1)
    return parts[0] if parts else s


def fix_of(f: Mapping[str, Any]) -> str:
    """A finding's one-line fix: its `fix`, else the first sentence of its text."""
    return text(f.get("fix"), 300) or text(first_sentence(text(f.get("text"), 3000)), 300)


def plan(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    """"Do this first": the plan's levers (at most 3), each {title, fix, saving, saving_text,
    confidence, after (the span after it and every lever above it, each µs once), after_pct (how
    much shorter), step_after (with several profiler steps: the median step less this span saving
    spread over the steps), finding (index), findings (its findings' indices), id}.

    `saving` is the lever's saving alone; `then` what it takes off the span after the levers above
    it (the previous span-after less its own), which overlapping levers make smaller. `saving_text`
    says both when they differ ("X alone; Y after the levers above") and is what every format
    shows, on the lever and on its card alike."""
    led = account(a)
    findings = seq(a.get("findings"))
    span, steps, step = num(led.get("span_us")), num(led.get("steps")), num(led.get("step_us"))
    out = []
    prev_after = None
    for k, p in enumerate(seq(a.get("plan"))[:PLAN_LEVERS]):
        p = mapping(p)
        i = p.get("finding")
        f = mapping(findings[i]) if isinstance(i, int) and 0 <= i < len(findings) else {}
        saving, after = num(p.get("saving_us")), num(p.get("span_after_us"))
        now = num(p.get("span_now_us")) or span
        step_after = num(p.get("step_after_us"))  # the plan's own, when it carries one
        if step_after is None and after is not None and now and steps and steps >= 2 and step:
            step_after = max(step - (now - after) / steps, 0.0)  # the span's saving, spread over its steps
        before = prev_after if prev_after is not None else now
        then = max(before - after, 0.0) if after is not None and before is not None else None
        prev_after = after if after is not None else prev_after
        idx = [x for x in seq(p.get("findings")) if isinstance(x, int) and 0 <= x < len(findings)]
        out.append({
            "title": text(p.get("title"), 300) or text(f.get("title"), 300),
            "fix": text(p.get("fix"), 300) or (fix_of(f) if f else ""),
            "saving": fmt_time_us(saving) if saving else "",
            "saving_us": saving or 0.0, "then_us": then,
            "saving_text": saving_text(saving, then, k),
            "confidence": text(p.get("confidence") or f.get("confidence"), 12),
            "after": fmt_time_us(after) if after is not None and saving else "",  # a note saves nothing
            "after_pct": fmt_pct(share(now - after, now)) if after is not None and now and saving else "",
            "step": fmt_time_us(step) if step_after is not None else "",
            "step_after": fmt_time_us(step_after) if step_after is not None else "",
            "finding": i if f else None, "findings": idx or ([i] if f else []),
            "id": text(p.get("id") or f.get("id"), 20),
        })
    return out


#: A lever's saving alone and what it takes off the span after the levers above are "the same" within this share.
SAME_SAVING = 0.01


def saving_text(saving: float | None, then: float | None, k: int) -> str:
    """'saves up to 504.3 µs', or when the levers above (or the rest of the span) take part of it:
    'saves up to 504.3 µs alone; 340.0 µs after the levers above' ('...; 48.02 ms off the span' for the first)."""
    if not saving:
        return ""
    out = f"saves up to {fmt_time_us(saving)}"
    if then is None or abs(then - saving) <= SAME_SAVING * saving:
        return out
    return out + f" alone; {fmt_time_us(then)} " + ("after the levers above" if k else "off the span")


def cards(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The findings grouped into cards ordered by saving (notes, which save nothing, last). Each lever
    of the plan is a card of its own findings, with the lever's title and saving (the same words in
    both places); the other findings are grouped by `group` (else by kind), a group's savings added
    up. Each card: {title, fix, saving, saving_text, confidence, kind, count, members: [{title, text,
    ops, id}], key, lever (its place in the plan, or None)}."""
    found = seq(a.get("findings"))
    levers = plan(a)
    claimed = {i for p in levers for i in p["findings"]}
    groups: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for i, f in enumerate(found):
        if isinstance(f, Mapping) and i not in claimed:
            key = text(f.get("group"), 200) or text(f.get("kind"), 60) or "other"
            groups.setdefault(key, []).append((i, f))
    out = []
    for k, p in enumerate(levers):
        members = [(i, mapping(found[i])) for i in p["findings"]]
        if not members:
            continue
        top = members[0][1]
        key = text(top.get("group"), 200) or text(top.get("kind"), 60) or "other"
        out.append(_card(key, members, p["title"], p["fix"] or fix_of(top), p["saving_us"], p["saving_text"], k))
    for key, members in groups.items():
        members.sort(key=lambda m: -_saving(m[1]))
        top = members[0][1]
        saving = sum(_saving(f) for _, f in members)
        out.append(_card(key, members, text(top.get("title"), 300), fix_of(top), saving,
                         saving_text(saving, None, 0), None))
    out.sort(key=lambda c: (-c["saving_us"], c["members"][0]["index"]))
    return out


def _card(key: str, members: list[tuple[int, Mapping[str, Any]]], title: str, fix: str, saving: float,
          saving_txt: str, lever: int | None) -> dict[str, Any]:
    top = members[0][1]
    return {
        "key": key, "title": title, "fix": fix, "saving_us": saving,
        "saving": fmt_time_us(saving) if saving else "", "saving_text": saving_txt,
        "confidence": text(top.get("confidence"), 12), "kind": finding_kind(top.get("kind")),
        "estimated": any(f.get("estimated") is True for _, f in members),
        "note": saving <= 0, "count": len(members), "lever": lever,
        "members": [{"index": i, "id": text(f.get("id"), 20), "title": text(f.get("title"), 300),
                     "text": text(f.get("text"), 3000), "ops": seq(f.get("ops"))[:20],
                     "saving": fmt_time_us(_saving(f)) if _saving(f) else ""} for i, f in members],
    }


def _saving(f: Mapping[str, Any]) -> float:
    """A finding's saving as a lever (0 for a note: lever false or no saving)."""
    s = num(f.get("saving_us"))
    return s if s and s > 0 and f.get("lever") is not False else 0.0
