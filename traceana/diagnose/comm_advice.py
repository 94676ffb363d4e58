"""Findings about communication, from the ledger's account of it and the run's context.

The ledger (ledger.py) splits the primary device's collective time, where nothing else ran
(exposed), into transfer (the bytes each rank sends at the link's bandwidth: traceana/roofline/comm_split.py),
wait (the rest: the collective waiting for the other ranks, and per-call latency) and unsized
(no size or link recorded, so the two cannot be told apart). Each part gets its own finding,
because each has a different fix and a different saving:

  comm_exposed   the exposed transfer: overlap (or fewer bytes) hides it; saving = the exposed
                 transfer, at most.
                 The advice follows the parallelism the trace shows (context.py): DDP buckets
                 only for data parallelism in training, FSDP prefetch only for FSDP, sequence
                 parallelism / async TP for tensor parallelism, two-batch overlap and fewer,
                 larger dispatches for expert all-to-all, pipelined input distribution for
                 sharded embedding tables, more micro-batches for pipeline send/recv; an
                 inference run never gets gradient advice.
  comm_wait      imbalance between ranks (or per-call latency for small collectives): overlap
                 cannot recover it, so a single-rank report claims no saving (0) and points to
                 the cross-rank report (`traceana report DIR/`), which names the slow rank and
                 the phase its extra time is in.
  comm_unsized   the exposed time whose size or link the trace did not record: still a lever (overlap,
                 fewer / larger collectives, a faster link or another sharding), with the collectives by
                 kind from the kernel names; saving = the exposed unsized time, an upper bound (the part
                 that waits for other ranks is not recovered by overlap); says what to record to split it.

Each finding has the shape of every other (kind, title, text, ops, saving_us) plus "fix" (one
imperative sentence) and "group" ("communication": a renderer folds them into one card).
"""

from __future__ import annotations

from traceana import units as u

MIN_SHARE = 0.01  # a part under 1% of the span gets no finding
# A collective call this short is mostly fixed cost (launch, protocol handshakes: NCCL's latency is
# some 5-30 µs per call within a node, more across nodes): its "wait" is then latency as much as
# waiting for peers, and fewer, larger collectives are the fix.
SHORT_CALL_US = 50.0
GROUP = "communication"


def _comm_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("bound") == "communication" and isinstance(r.get("comm"), dict)]


def _parts(ledger: dict) -> tuple[float, float, float, float]:
    c = ledger["communication"]
    exposed, xfer, wait = c["exposed_us"], c["exposed_transfer_us"], c["exposed_wait_us"]
    unsized = c.get("exposed_unsized_us", max(exposed - xfer - wait, 0.0))
    return exposed, xfer, wait, unsized


def _algos(rows: list[dict], key: str) -> list[tuple[str, float]]:
    """Collective algorithms by their total transfer or wait (µs over all calls), largest first."""
    out: dict[str, float] = {}
    for r in rows:
        v = r["comm"].get(key)
        if v is not None:
            a = r["comm"].get("algorithm") or "collective"
            out[a] = out.get(a, 0.0) + v * r["count"]
    return sorted(((a, t) for a, t in out.items() if t > 0), key=lambda kv: -kv[1])


def _ep_kind(context: dict) -> str:
    for e in (context.get("evidence") or {}).get("EP") or []:
        if e.get("kind"):
            return e["kind"]
    return "all-to-all"


def hide_advice(context: dict, algos: set[str]) -> list[str]:
    """How to hide (or shrink) the transfer of these collectives, in the run's own terms."""
    training = context.get("mode") == "training"
    par = set(context.get("parallelism") or ())
    out = []
    if training and "DP" in par and "all_reduce" in algos:
        out.append("DDP: let the gradient buckets all-reduce while the backward pass still runs (no .item() or "
                   "other sync inside backward; bucket_cap_mb for fewer, larger buckets; gradient_as_bucket_view="
                   "True), and halve the bytes with a bf16 compression hook (register_comm_hook(bf16_compress_hook))")
    if training and "FSDP" in par and algos & {"all_gather", "reduce_scatter"}:
        out.append("FSDP: prefetch the next all-gather while this layer computes (FSDP2 set_modules_to_forward_"
                   "prefetch / set_modules_to_backward_prefetch; FSDP1 forward_prefetch=True, backward_prefetch="
                   "BACKWARD_PRE), keep the last layers unsharded after forward (reshard_after_forward=False), "
                   "gather bf16 parameters (MixedPrecisionPolicy(param_dtype=torch.bfloat16))")
    if "TP" in par and algos & {"all_reduce", "all_gather", "reduce_scatter"}:
        if training:
            out.append("tensor parallel: overlap the all-gather / reduce-scatter with the matmul next to it (async "
                       "TP: torch._inductor.config._micro_pipeline_tp = True under torch.compile), and use sequence "
                       "parallelism (a reduce-scatter + all-gather pair instead of each all-reduce, so norms and "
                       "dropout run on 1/n of the tokens)")
        else:
            if "all_reduce" in algos:
                out.append("tensor parallel: overlap each layer's all-reduce with the next GEMM (or fuse it with the "
                           "following RMSNorm: the engines' fused all-reduce + norm), use the engine's custom / "
                           "symmetric-memory all-reduce for small messages, and a smaller TP size if the model fits")
            if algos & {"all_gather", "reduce_scatter"}:
                out.append("tensor parallel with sequence sharding: overlap each all-gather with the column-parallel "
                           "GEMM that consumes it and each reduce-scatter with the row-parallel GEMM that produces "
                           "it (async TP: torch._inductor.config._micro_pipeline_tp = True under torch.compile, or "
                           "torch.distributed's fused all-gather-matmul / matmul-reduce-scatter over symmetric "
                           "memory), and a smaller TP size if the model fits")
    if "EP" in par and "all_to_all" in algos:
        if _ep_kind(context) == "embedding tables":
            out.append("sharded embeddings: pipeline the all-to-all of the next batch's lookups under this batch's "
                       "dense compute (TorchRec TrainPipelineSparseDist), and send bf16/fp16 embeddings "
                       "(quantized comms) to halve the bytes")
        else:
            out.append("expert all-to-all: overlap dispatch / combine with expert compute (two-batch overlap: two "
                       "micro-batches, one communicating while the other computes), send fewer, larger dispatches "
                       "(fp8 activations halve the bytes)" + ("" if training else ", and for decode the "
                                                             "low-latency all-to-all (DeepEP low_latency_dispatch)"))
    if "PP" in par and "send_recv" in algos:
        out.append("pipeline parallel: more micro-batches per step, or an interleaved schedule (virtual stages), so "
                   "each stage's send / recv runs while the next micro-batch computes")
    if not out:
        out.append("issue the collectives asynchronously on their own stream and start each as soon as its input "
                   "is ready, so compute runs under them; or send fewer bytes (bf16 / fp8 payloads)")
    return out


def _transfer_finding(ledger: dict, rows: list[dict], context: dict, xfer: float) -> dict:
    span = ledger["span_us"]
    algos = _algos(rows, "transfer_us")
    hide = hide_advice(context, {a for a, _ in algos} or {"collective"})
    ops = [r["id"] for r in sorted(rows, key=lambda r: -((r["comm"].get("transfer_us") or 0.0) * r["count"]))
           if r["comm"].get("transfer_us")][:10]
    which = ", ".join(f"{a} {u.us(t)}" for a, t in algos[:3])
    return {
        "kind": "comm_exposed",
        "title": f"Collectives move data for {u.us(xfer)} with nothing else on the GPU ({xfer / span * 100:.1f}% of "
                 f"the span)",
        "text": (f"Of the collectives' exposed time, {u.us(xfer)} is transfer: the bytes each rank sends at the link's "
                 f"bandwidth (transfer by collective, all calls: {which or 'none sized'}). That part can run under "
                 f"compute: " + "; ".join(hide) + ". Saving shown: the exposed transfer, an upper bound (a "
                 "collective cannot start before its input is ready)."),
        "fix": "Overlap the collectives' transfer with compute.",
        "group": GROUP, "ops": ops, "saving_us": xfer,
    }


def _wait_finding(ledger: dict, rows: list[dict], context: dict, wait: float) -> dict:
    span = ledger["span_us"]
    waits = sorted((r for r in rows if r["comm"].get("wait_us")), key=lambda r: -r["comm"]["wait_us"] * r["count"])
    short = [r for r in waits if r["mean_time_us"] < SHORT_CALL_US]
    short_us = sum(r["comm"]["wait_us"] * r["count"] for r in short)
    total = sum(r["comm"]["wait_us"] * r["count"] for r in waits)
    par = set(context.get("parallelism") or ())
    causes = ["one rank reaching the collective later than the others: more work on it (data-dependent shapes), a "
              "host-side stall (a sync, data loading), or a slower GPU"]
    if "EP" in par:
        causes.append("uneven all-to-all splits: tokens routed unevenly across experts (balance the router / "
                      "capacity factor)" if _ep_kind(context) != "embedding tables" else
                      "uneven all-to-all splits: embedding lookups spread unevenly over the ranks (rebalance the "
                      "sharding plan)")
    if "PP" in par:
        causes.append("the pipeline bubble: a stage waiting for the previous one")
    biggest = "; ".join(f"{r['id']} {r['comm'].get('algorithm') or r['name']}: {u.us(r['comm']['wait_us'])} of "
                        f"{u.us(r['mean_time_us'])} per call" for r in waits[:3])
    text = (f"Of the collectives' exposed time, {u.us(wait)} is wait: time beyond moving their bytes, spent until "
            f"every rank arrived. Overlap cannot recover it; balancing the ranks can. Likely causes: "
            + "; ".join(causes) + "." + (f" Largest waits: {biggest}." if biggest else ""))
    if total > 0 and short_us > 0.5 * total:
        text += (f" Most of it ({u.us(short_us)}) is in calls under {SHORT_CALL_US:g} µs, where a collective's fixed "
                 "latency dominates: issue fewer, larger collectives (coalesce several into one call).")
    phase = ("the phase (forward, backward, optimizer) where its extra time goes" if context.get("mode") == "training"
             else "where its extra time goes")
    text += (" One rank's trace cannot say which rank is slow: run the cross-rank report on every rank's trace, "
             f"`traceana report DIR/`, which names the slowest rank and {phase}. Saving shown: 0 for this rank alone.")
    return {
        "kind": "comm_wait",
        "title": f"Collectives wait {u.us(wait)} for other ranks with nothing else on the GPU "
                 f"({wait / span * 100:.1f}% "
                 f"of the span)",
        "text": text,
        "fix": "Find the slow rank and phase with traceana report DIR/ and balance its work.",
        "group": GROUP, "ops": [r["id"] for r in waits[:10]], "saving_us": 0.0,
    }


# why a collective has no size, by its row's opaque cause, and what records it
_NO_SIZE = {
    "comm_unsized": "record_param_comms recorded no args (torch before 2.1; newer ones record the message size)",
    "shapes_not_recorded": "their tensor lists were recorded without sizes (torch before 2.x)",
    "no_shapes": "record_shapes was off (torch.profiler.profile(record_shapes=True) records them)",
    "no_launch": "their kernels were launched before the profiled window opened: no op, no size",
    "outside_op": "their kernels were launched outside any profiled op (a library calling the kernels directly)",
    "graph_replay": "they ran inside a CUDA/HIP graph replay with no capture trace to name their ops",
}


def link_sentence(device: dict | None, context: dict) -> str:
    """On a device with no GPU-to-GPU link (no NVLink / Infinity Fabric in the device table), collectives
    between its GPUs cross the host's PCIe: said, with what that means for the run's parallelism."""
    device = device or {}
    if device.get("peer_link") or not device.get("host_link_gbps") or (context.get("world_size") or 2) < 2:
        return ""
    dev = device.get("name") or device.get("key") or "This device"
    tp = "TP" in (context.get("parallelism") or ())
    return (f" {dev} has no GPU-to-GPU link ({device.get('links_source') or 'no NVLink in the device table'}): "
            f"its GPUs exchange over {device.get('host_link') or 'PCIe'}, {device['host_link_gbps']:g} GB/s each way "
            "at most, shared through the host"
            + ("; tensor parallelism pays that for every layer's collectives, so fewer tensor-parallel ranks (none, "
               "if the model fits in one GPU's memory) or data / pipeline parallelism across them moves far fewer "
               "bytes." if tp else "."))


def _unsized_finding(ledger: dict, rows: list[dict], unsized: float, context: dict,
                     kernels: dict | None = None, all_rows: list[dict] | None = None,
                     device: dict | None = None) -> dict:
    """The exposed collective time with no size or link: still a lever (overlap it, or fewer / larger
    collectives), its saving the exposed unsized time itself, an upper bound (the part that waits for
    other ranks is not recovered by overlap)."""
    span = ledger["span_us"]
    c = ledger["communication"]
    no_size = sorted((r for r in rows if not r["comm"].get("sized")), key=lambda r: -r["device_time_us"])
    no_link = [r for r in rows if r["comm"].get("sized") and r["comm"].get("transfer_us") is None]
    why = []
    if no_size:
        by_cause: dict[str, list[dict]] = {}
        for r in no_size:
            by_cause.setdefault(r.get("cause") or "", []).append(r)
        for cause, rs in by_cause.items():
            reason = _NO_SIZE.get(cause, "their message size was not recorded")
            if cause == "no_shapes" and context.get("record_shapes"):
                reason = "the ops around them recorded no shapes"
            named = ", ".join(f"{r['id']} {r['comm'].get('algorithm') or 'collective'}"
                              + (f" (issued by {r['comm']['issued_by']})" if r["comm"].get("issued_by") else "")
                              + f" {u.us(r['device_time_us'])}" for r in rs[:3])
            why.append(f"{named}: {reason}")
    if no_link:
        why.append(f"{u.plural(len(no_link), 'collective signature')} span hosts, and the network's bandwidth is "
                   "not in the device table (give it with --network-gbps)")
    if not why and not context.get("record_shapes"):
        why.append(_NO_SIZE["no_shapes"])
    coll = {k: v for k, v in ((kernels or {}).get("collectives") or {}).items() if v > 0}
    algos = (set(coll) - {"other"} or {r["comm"]["algorithm"] for r in rows if r["comm"].get("algorithm")}
             or {"collective"})
    ctot = sum(coll.values())
    which = ", ".join(f"{k.replace('_', '-') if k != 'other' else 'kind not in the name'} {v / ctot * 100:.0f}%"
                      for k, v in list(coll.items())[:4]) if ctot > 0 else ""
    total_k = (kernels or {}).get("total_us") or 0.0
    share = (f"Collective kernels take {u.us(c['total_us'])}, {c['total_us'] / total_k * 100:.0f}% of kernel time"
             if total_k > 0 else f"Collective kernels take {u.us(c['total_us'])}")
    par = ", ".join(context.get("parallelism") or ()) or "none recognised"
    tries = hide_advice(context, algos) + [
        "issue fewer, larger collectives (coalesce the small ones: a collective has a fixed latency of some 5-30 µs "
        "within a node, more across nodes)",
        "if the transfer itself is slow, a faster link (NVLink / more NICs) or a sharding that keeps the heaviest "
        "collectives inside a node (a smaller tensor-parallel group, hybrid sharding)"]
    shapes = bool(context.get("record_shapes"))  # the trace recorded shapes: never ask for them
    record = ("record what is missing above, and " if shapes else
              "record with torch.profiler.profile(record_shapes=True) (torch >= 2.1's record_param_comms then records "
              "each collective's message size), and ")
    ops = [r["id"] for r in (no_size + no_link)[:10]] or [
        r["id"] for r in (all_rows or []) if r.get("kernel_class") == "communication"][:10]
    return {
        "kind": "comm_unsized",
        "title": f"Collectives run {u.us(unsized)} with nothing else on the GPU ({unsized / span * 100:.1f}% of the "
                 f"span), size unknown: overlap them with compute or issue fewer, larger ones",
        "text": (f"{share}" + (f" (by kernel name: {which})" if which else "") + f"; {u.us(c['exposed_us'])} of it ran "
                 f"with nothing "
                 f"else on the GPU (exposed), {u.us(c['overlapped_us'])} under other kernels. Run: "
                 f"{context.get('mode') or 'unknown'}, parallelism {par}"
                 + (f", {context['world_size']} ranks" if context.get("world_size") else "") + "."
                 + link_sentence(device, context) + " "
                 f"Of the exposed time, {u.us(unsized)} cannot be split into transfer (overlap hides it) and waiting "
                 "for other ranks (only balancing the ranks helps): " + "; ".join(why or ["its size or link was not "
                                                                                        "recorded"])
                 + ". What to try: " + "; ".join(tries) + ". To split transfer from wait, " + record
                 + "run the cross-rank report (`traceana report DIR/`) on every rank's trace: it measures the waiting "
                 f"without sizes. Saving shown: the exposed, unsized collective time, {u.us(unsized)}, an upper bound "
                 "(the waiting part is not recovered by overlap)."),
        "fix": "Overlap the collectives with compute or issue fewer, larger ones" + (
            "; record with record_shapes=True to split transfer from wait." if not shapes else "."),
        "group": GROUP, "ops": ops, "saving_us": unsized, "confidence": "low", "estimated": True,
    }


def comm_findings(ledger: dict | None, rows: list[dict], context: dict | None = None,
                  kernels: dict | None = None, device: dict | None = None) -> list[dict]:
    """The communication findings: exposed transfer, exposed wait, unsplit time (each only when it
    is at least MIN_SHARE of the span); `kernels`: the kernel account (its collectives by kind)."""
    if not ledger or not ledger.get("span_us") or ledger["span_us"] <= 0 or "communication" not in ledger:
        return []
    context = context or {}
    span = ledger["span_us"]
    exposed, xfer, wait, unsized = _parts(ledger)
    if exposed < MIN_SHARE * span:
        return []
    all_rows, rows = rows, _comm_rows(rows)
    out = []
    if xfer >= MIN_SHARE * span:
        out.append(_transfer_finding(ledger, rows, context, xfer))
    if wait >= MIN_SHARE * span:
        out.append(_wait_finding(ledger, rows, context, wait))
    if unsized >= MIN_SHARE * span:
        out.append(_unsized_finding(ledger, rows, unsized, context, kernels, all_rows, device))
    return out
