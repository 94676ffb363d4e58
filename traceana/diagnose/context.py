"""What kind of run the trace is, so the advice fits it: analysis["context"].

    {"mode": "training" | "inference" | "unknown", "graph_replay": bool, "compiled": bool,
     "parallelism": ["DP" | "FSDP" | "TP" | "EP" | "PP", ...], "world_size": int | None,
     "evidence": {"mode": [...], "graph_replay": [...], "compiled": [...], "DP": [...], ...}}

Every decision carries its evidence: a list of {"rule", "what", "count", "examples", "cpu_us",
"gpu_us"} (the ops, annotations or kernels that decided it, and their time). The rules read what
an op or API *means*:

mode
  training   an autograd backward ran (autograd nodes `...Backward`, `autograd::engine::
             evaluate_function: ...`, `aten::*_backward*`, a `## backward ##` range), or an optimizer
             stepped (`Optimizer.step#...`, fused optimizer ops `aten::_fused_adam_` ..., optimizer
             kernels: multi_tensor_apply Adam/SGD functors, FBGEMM's fused embedding backward +
             optimizer); in a trace without CPU ops, backward kernels (cuDNN wgrad / dgrad,
             `*_bwd*`, `*backward*`)
  inference  no backward and no optimizer among the ops that ran; said with what ran instead
             (KV-cache writes and paged attention are inference by construction)
  unknown    neither ops nor kernels tell
graph_replay CUDA / HIP graph launches (cudaGraphLaunch, hipGraphLaunch, cuGraphLaunch) ran kernels
compiled     torch.compile ran: Dynamo / AOTAutograd / Inductor ranges (`Torch-Compiled Region`,
             CompiledFunction[Backward], `## Call CompiledFxGraph`, `TorchDynamo Cache Lookup`) or
             Inductor-generated Triton kernels (triton_poi_ / _red_ / _per_ / _tem_, torch 2.0's
             triton__N); hand-written Triton kernels are not torch.compile
parallelism (only with more than one rank)
  DP    DDP ranges (`DistributedDataParallel.*`, `torch.distributed.ddp.*` reducer ranges), an
        all-reduce issued from an AccumulateGrad node (DDP's gradient hooks), or, in training,
        all-reduces in the backward pass that tensor parallelism does not explain
  FSDP  FSDP ranges (`FSDP::*`, `FullyShardedDataParallel.*`), or, in training, parameters
        gathered in the forward and their gradients reduce-scattered in the backward: an
        all-gather whose gathered size equals a backward reduce-scatter's input
  TP    the serving engines' tensor-parallel collectives (vLLM / SGLang custom all-reduce, their
        all_reduce / all_gather / reduce_scatter ops, torch symmetric memory) in inference; any
        all-reduce / all-gather / reduce-scatter in inference (no gradients exist: they combine
        activations); a forward collective on a matmul's output (all-reduce / reduce-scatter of
        as many elements as the matmul right before it wrote) or feeding one (an all-gather whose
        output has as many elements as the next matmul's input)
  EP    all-to-all: c10d all_to_all ops, NCCL/RCCL AllToAll kernels, DeepEP / pplx-kernels
        dispatch and combine (experts), TorchRec-style all-to-all of embedding lookups (embedding
        tables sharded across ranks: said as such)
  PP    point-to-point send / recv ops (c10d::send, c10d::recv_, record_param_comms send/recv);
        NCCL's SendRecv kernels alone are not PP (NCCL runs all-to-all as grouped send/recv)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from traceana import lazy_re
from traceana.cost.families.comm import CUSTOM_COMM
from traceana.diagnose.collective_calls import Call, collectives, on_a_matmul
from traceana.diagnose.trace_view import TraceView
from traceana.meter import OFF, Meter
from traceana.link.attribute import Links
from traceana.load.model import Trace

_BACKWARD_OP = lazy_re.compile(r"Backward\d*$|^autograd::engine::evaluate_function: |^aten::\w*_backward")
_BACKWARD_MARK = lazy_re.compile(r"^##\s*backward\s*##$", re.I)
_OPTIMIZER = lazy_re.compile(r"^Optimizer\.step#|^aten::_fused_(adam|adamw|sgd|adagrad)_?$|^##\s*optimizer\s*##$", re.I)
# rules read in lowercase names (TraceView's *_where(rx, lower=True)), written in lowercase: the same as a
# case-blind search, ~7x cheaper over long kernel names
_OPTIMIZER_KERNEL = lazy_re.compile(r"adam|adagrad|rmsprop|sgd|lamb(?!da)|split_embedding_backward_codegen")
_BACKWARD_KERNEL = lazy_re.compile(r"backward|_bwd|bwd_|wgrad|dgrad")
_INFERENCE = lazy_re.compile(r"^_c_cache_ops::|reshape_and_cache|^vllm::unified_attention|paged_?attention|"
                             r"^sglang::store_cache|store_kv_cache")
_ENGINE = lazy_re.compile(r"^(vllm|sglang|sgl_kernel|_C|_rocm_C|_moe_C|_C_cache_ops|_C_custom_ar)::")
_GRAPH_LAUNCH = lazy_re.compile(r"GraphLaunch")
_COMPILED_RANGE = lazy_re.compile(r"^Torch-Compiled Region|^CompiledFunction(Backward)?$|^## Call CompiledFxGraph|"
                                  r"^TorchDynamo Cache Lookup|^AOTDispatcher")
_INDUCTOR_KERNEL = lazy_re.compile(r"^triton_(poi|red|per|tem|for|spl)_|^triton__\d")
INDUCTOR_KERNEL = _INDUCTOR_KERNEL  # torch.compile's generated kernels, by name (findings say so in their advice)
_DDP = lazy_re.compile(r"^DistributedDataParallel\.|^torch\.distributed\.ddp\.")
_FSDP = lazy_re.compile(r"^FSDP::|^FullyShardedDataParallel\.")
_MOE = lazy_re.compile(r"moe|expert|deep_?ep|pplx")  # (lowercase names too)
_EMBEDDING = lazy_re.compile(r"embedding|kjtalltoall|all2all_pooled|all2all_seq|sparse_?arch")


def _evidence(rule: str, what: str, names: Sequence[str], cpu_us: float = 0.0, gpu_us: float = 0.0,
              count: int | None = None) -> dict:
    uniq = list(dict.fromkeys(names))
    return {"rule": rule, "what": what, "count": len(names) if count is None else count,
            "examples": [n[:120] for n in uniq[:4]], "cpu_us": cpu_us, "gpu_us": gpu_us}


def _ranges(r: TraceView, rx: re.Pattern, rule: str, what: str) -> dict | None:
    """Evidence from the ops and annotations whose names match: their CPU and GPU time."""
    o, a = r.ops_where(rx), r.anns_where(rx)
    if not len(o) and not len(a):
        return None
    return _evidence(rule, what, r.op_name.of(o) + [r.ann_name[i] for i in a.tolist()],
                     r.cpu_us(o) + r.cpu_us(a, True), r.gpu_under(o) + r.gpu_under(a, True))


# ----------------------------------------------------------------------------- mode


def _mode(r: TraceView) -> tuple[str, list[dict]]:
    ev = [_ranges(r, _BACKWARD_OP, "backward ops", "autograd backward ran (autograd nodes / aten backward ops)")]
    ev.append(_ranges(r, _BACKWARD_MARK, "backward ranges", "## backward ## ranges"))
    ev.append(_ranges(r, _OPTIMIZER, "optimizer", "an optimizer stepped (Optimizer.step# ranges, fused optimizer ops)"))
    ev = [e for e in ev if e]
    ok = r.kernels_where(_OPTIMIZER_KERNEL, lower=True)
    if len(ok):
        ev.append(_evidence("optimizer kernels", "optimizer update kernels (multi_tensor_apply Adam/SGD functors, "
                            "fused embedding backward + optimizer)",
                            [r.names[c] for c in r.trace.gpu.name[ok].tolist()],
                            gpu_us=r.kernel_us(ok)))
    if not len(r.trace.ops):
        bk = r.kernels_where(_BACKWARD_KERNEL, lower=True)
        if len(bk):
            ev.append(_evidence("backward kernels", "backward kernels (wgrad / dgrad / *_bwd*) in a trace without "
                                "CPU ops", [r.names[c] for c in r.trace.gpu.name[bk].tolist()], gpu_us=r.kernel_us(bk)))
    if ev:
        return "training", ev
    inf_o, inf_k = r.ops_where(_INFERENCE, lower=True), r.kernels_where(_INFERENCE, lower=True)
    if len(inf_o) or len(inf_k):
        ev.append(_evidence("KV cache", "KV-cache writes / paged attention: autoregressive inference",
                            r.op_name.of(inf_o) + [r.names[c] for c in r.trace.gpu.name[inf_k]],
                            r.cpu_us(inf_o), r.gpu_under(inf_o) + r.kernel_us(inf_k)))
    eng = r.ops_where(_ENGINE)
    if len(eng):
        ev.append(_evidence("serving engine", "a serving engine's ops (vLLM / SGLang)",
                            r.op_name.of(eng), r.cpu_us(eng), r.gpu_under(eng)))
    n_ops = len(r.trace.ops)
    if n_ops:
        ev.append(_evidence("forward only", f"none of the {n_ops:,} ops is a backward or optimizer op", [],
                            count=n_ops))
        return "inference", ev
    if ev:
        return "inference", ev
    return "unknown", [_evidence("nothing to tell", "no CPU ops, and no backward, optimizer or KV-cache kernels",
                                 [], count=0)]


# ----------------------------------------------------------------------------- graph replay, compile


def _graph_replay(r: TraceView, capture: dict | None) -> list[dict]:
    la = r.trace.launches
    codes = np.array([bool(_GRAPH_LAUNCH.search(n)) for n in r.names], dtype=bool)
    idx = np.flatnonzero(codes[la.name]) if len(la) else np.zeros(0, np.int64)
    if not len(idx):
        return []
    under = (r.gpu_launch >= 0) & codes[la.name[np.maximum(r.gpu_launch, 0)]] if len(r.gpu_launch) else r.gpu_launch
    ev = [_evidence("graph launches", "CUDA / HIP graph launches ran the kernels",
                    [r.names[c] for c in la.name[idx].tolist()], float((la.end[idx] - la.ts[idx]).sum()),
                    float(r.trace.gpu.dur[under].sum()) if len(r.gpu_launch) else 0.0)]
    if capture:
        ev.append(_evidence("capture", "the replays were matched to the graph capture trace (their ops restored)",
                            [str(capture.get("file") or capture.get("files") or "capture")], count=1))
    return ev


def _compiled(r: TraceView) -> list[dict]:
    rng = _ranges(r, _COMPILED_RANGE, "compiled ranges", "torch.compile ranges (Dynamo / AOTAutograd / Inductor)")
    ev = [rng] if rng else []
    k = r.kernels_where(_INDUCTOR_KERNEL)
    if len(k):
        ev.append(_evidence("Inductor kernels", "Triton kernels Inductor generated (named after the ops they fuse)",
                            [r.names[c] for c in r.trace.gpu.name[k].tolist()], gpu_us=r.kernel_us(k)))
    return ev


# ----------------------------------------------------------------------------- collectives


def _calls_evidence(rule: str, what: str, calls: Sequence[Call]) -> dict:
    return _evidence(rule, what, [c.name for c in calls], sum(c.end - c.ts for c in calls if c.op >= 0),
                     sum(c.gpu_us for c in calls), count=len(calls))


def _parallelism(r: TraceView, mode: str) -> tuple[list[str], dict[str, list[dict]]]:
    ev: dict[str, list[dict]] = {k: [] for k in ("DP", "FSDP", "TP", "EP", "PP")}
    world = (r.trace.distributed or {}).get("world_size")
    if isinstance(world, int) and world == 1:
        return [], ev
    calls = collectives(r)
    by = {a: [c for c in calls if c.algo == a] for a in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                          "send_recv")}
    # TP
    engine = [c for c in calls if c.name in CUSTOM_COMM or c.name.startswith(("_C_custom_ar::", "symm_mem::"))
              or c.library in ("custom all-reduce", "symmetric memory")]
    if engine and mode != "training":
        ev["TP"].append(_calls_evidence("serving engine collectives", "the engines' tensor-parallel collectives "
                                        "(custom all-reduce, symmetric memory)", engine))
    if mode == "inference":
        act = by["all_reduce"] + by["all_gather"] + by["reduce_scatter"]
        if act:
            ev["TP"].append(_calls_evidence("collectives in inference", "all-reduce / all-gather / reduce-scatter "
                                            "with no gradients to reduce: they combine activations", act))
    linked = on_a_matmul(r, calls)
    if linked:
        ev["TP"].append(_calls_evidence("on a matmul", "forward collectives on a matmul's output or feeding one "
                                        "(same element count, no other collective between)", linked))
    # DP
    ddp = _ranges(r, _DDP, "DDP ranges", "DistributedDataParallel / its gradient reducer ran")
    ev["DP"] += [ddp] if ddp else []
    hooks = [c for c in by["all_reduce"] if any("AccumulateGrad" in p for p in c.parents)]
    if hooks:
        ev["DP"].append(_calls_evidence("gradient hooks", "all-reduces issued as gradients were accumulated "
                                        "(DDP's bucket hooks on AccumulateGrad)", hooks))
    if mode == "training" and not ev["TP"]:
        grads = [c for c in by["all_reduce"] if c.phase == "backward" and c not in hooks]
        if grads:
            ev["DP"].append(_calls_evidence("backward all-reduces", "all-reduces in the backward pass of a training "
                                            "run with no tensor-parallel collectives: gradient averaging", grads))
    # FSDP
    fsdp = _ranges(r, _FSDP, "FSDP ranges", "fully_shard / FullyShardedDataParallel ran")
    ev["FSDP"] += [fsdp] if fsdp else []
    if mode == "training":
        gathered = {c.n_out for c in by["all_gather"] if c.phase == "forward" and c.n_out}
        pairs = [c for c in by["reduce_scatter"] if c.phase == "backward" and c.n_in in gathered]
        if pairs:
            ag = [c for c in by["all_gather"] if c.phase == "forward" and c.n_out in {p.n_in for p in pairs}]
            ev["FSDP"].append(_calls_evidence("sharded parameters", "all-gathers in the forward whose gathered size "
                                              "a backward reduce-scatter takes back (parameters gathered, their "
                                              "gradients reduce-scattered)", ag + pairs))
    # EP
    a2a = by["all_to_all"]
    if a2a:
        names = " ".join({c.name for c in a2a} | {p for c in a2a for p in c.parents[-3:]}).lower()
        experts = any(c.library in ("DeepEP", "pplx-kernels") for c in a2a) or _MOE.search(names)
        tables = not experts and (_EMBEDDING.search(names) or len(r.ops_where(_EMBEDDING, lower=True)))
        what = ("tokens dispatched to experts on other ranks and combined back" if experts else
                "embedding lookups exchanged between ranks (tables sharded across ranks)" if tables else
                "all-to-all exchanges between ranks")
        ev["EP"].append(_calls_evidence("all-to-all", what, a2a))
        ev["EP"][-1]["kind"] = "experts" if experts else "embedding tables" if tables else "all-to-all"
    # PP
    p2p = [c for c in by["send_recv"] if c.op >= 0]
    if p2p:
        ev["PP"].append(_calls_evidence("send / recv", "point-to-point sends and receives between ranks "
                                        "(pipeline stages)", p2p))
    return [k for k in ("DP", "FSDP", "TP", "EP", "PP") if ev[k]], ev


def run_context(trace: Trace, links: Links, rows: Sequence[dict] | None = None, capture: dict | None = None,
                meter: Meter = OFF) -> dict:
    """analysis["context"]: mode, graph replay, torch.compile and parallelism, each with its
    evidence (see the module doc). `rows` are not needed by the rules (they read the trace);
    `capture` is analysis["trace"]["capture"] when graph replays met their capture."""
    r = TraceView(trace, links, meter)
    mode, mode_ev = _mode(r)
    replay = _graph_replay(r, capture)
    compiled = _compiled(r)
    par, par_ev = _parallelism(r, mode)
    world = (trace.distributed or {}).get("world_size")
    total = float(trace.gpu.dur.sum())
    replayed = replay[0]["gpu_us"] if replay and replay[0].get("gpu_us") is not None else 0.0
    return {"mode": mode, "graph_replay": bool(replay), "compiled": bool(compiled), "parallelism": par,
            # the share of GPU time graph launches ran: advice about launch overhead follows it
            "graph_replay_share": replayed / total if total > 0 else 0.0,
            "world_size": world if type(world) is int else None,
            "evidence": {"mode": mode_ev, "graph_replay": replay, "compiled": compiled,
                         **{k: v for k, v in par_ev.items() if v}}}
