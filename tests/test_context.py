"""The run's context (diagnose/context.py): one test per rule, on shared GPU traces and on real model
code recorded on CPU under torch.profiler (tests/recorded_parallel.py: on CPU there are no kernels,
so the op-side rules are what these exercise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import synth as s
from tests.conftest import REPO, shared_trace
from traceana.diagnose.context import run_context
from traceana.link.attribute import link
from traceana.load import load_trace
from traceana.link.replay.attach import attach


def context_of(path: str) -> dict:
    t = load_trace(path)
    links = link(t)
    t, links, capture = attach(t, links, None, True)
    return run_context(t, links, None, capture)


def ev(ctx: dict, key: str, rule: str) -> dict:
    return next(e for e in ctx["evidence"][key] if e["rule"] == rule)


# ----------------------------------------------------------------------------- shared GPU traces


def test_rank0_ddp_training_with_embedding_all_to_all():
    c = context_of(shared_trace("hta/rank0.json.gz"))
    assert c["mode"] == "training" and c["world_size"] == 16
    assert ev(c, "mode", "backward ops")["count"] == 1545  # autograd nodes + aten backward ops
    # the 5 `## backward ##` ranges are on the main thread, the autograd engine launches on its own:
    # a range counts the GPU time launched in it on any thread, 268.853 ms (the backward ops' 268.808 ms
    # and 45 µs launched from the main thread)
    assert ev(c, "mode", "backward ranges")["gpu_us"] == pytest.approx(268853.0)
    assert "Optimizer.step#FusedAdam.step" in ev(c, "mode", "optimizer")["examples"]
    # DP: DistributedDataParallel.forward ranges, and 10 all-reduces issued under AccumulateGrad (DDP's
    # hooks) whose kernels ran 126.555 ms
    assert c["parallelism"] == ["DP", "EP"]
    hooks = ev(c, "DP", "gradient hooks")
    assert hooks["count"] == 10 and hooks["gpu_us"] == pytest.approx(126555.0)
    assert ev(c, "DP", "DDP ranges")["examples"] == ["DistributedDataParallel.forward"]
    # EP: 55 c10d all-to-alls of embedding lookups (TorchRec's All2All_Pooled / KJT all-to-all)
    a2a = ev(c, "EP", "all-to-all")
    assert a2a["count"] == 55 and a2a["kind"] == "embedding tables"
    # torch.compile'd dense part (CompiledFunction ranges, torch 2.0's triton__ kernels) replayed as CUDA graphs
    assert c["compiled"] and ev(c, "compiled", "Inductor kernels")["count"] == 81
    assert c["graph_replay"] and ev(c, "graph_replay", "graph launches")["count"] == 70


def test_vllm_decode_full_is_inference_from_a_graph_replay():
    c = context_of(shared_trace("tracelens/vllm_decode_full/graph_execution.json.gz"))
    assert (c["mode"], c["graph_replay"], c["compiled"]) == ("inference", True, True)
    # world size 1: its tensor_model_parallel_all_gather is a no-op, no parallelism
    assert c["parallelism"] == [] and c["world_size"] == 1
    kv = ev(c, "mode", "KV cache")  # the replay's ops restored from the capture: KV-cache writes, paged attention
    assert "_C_cache_ops::reshape_and_cache_flash" in kv["examples"]
    assert ev(c, "graph_replay", "graph launches")["examples"] == ["hipGraphLaunch"]
    assert ev(c, "graph_replay", "capture")["count"] == 1
    assert ev(c, "compiled", "Inductor kernels")["examples"][0].startswith("triton_poi_fused")


@pytest.mark.parametrize("rel,ops", [("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", 479),
                                     ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 4186)])
def test_hugging_face_inference_is_forward_only(rel, ops):
    c = context_of(shared_trace(rel))
    assert (c["mode"], c["graph_replay"], c["compiled"], c["parallelism"]) == ("inference", False, False, [])
    assert ev(c, "mode", "forward only")["count"] == ops


def test_kineto_resnet_is_training():
    c = context_of(shared_trace("kineto/worker0.1623143089861.pt.trace.json.gz"))
    assert c["mode"] == "training" and c["parallelism"] == []
    assert ev(c, "mode", "backward ops")["count"] == 2646  # 2021 names: CudnnConvolutionBackward, aten::*_backward
    assert ev(c, "mode", "optimizer")["examples"] == ["Optimizer.step#SGD.step"]


def test_ddp_from_its_reducer_ranges():
    c = context_of(shared_trace("tracelens/mi300/resnet_act_checkpoint.json.gz"))
    assert c["mode"] == "training" and c["parallelism"] == ["DP"]
    assert "torch.distributed.ddp.reducer::copy_bucket_to_grad" in ev(c, "DP", "DDP ranges")["examples"]


def test_backward_all_reduces_without_tensor_parallelism_are_dp():
    # compiled DDP: 2020 all-reduces issued inside CompiledFunctionBackward, no DDP range, no hooks
    c = context_of(shared_trace("hta/df_index_resolver.json.gz"))
    assert c["parallelism"] == ["DP"] and c["compiled"]
    assert ev(c, "DP", "backward all-reduces")["count"] == 2020
    assert "gradient hooks" not in {e["rule"] for e in c["evidence"]["DP"]}


def test_gpu_only_trace_from_backward_kernels():
    c = context_of(shared_trace("tracelens/mi210/gpu_only_trace.json.gz"))
    assert c["mode"] == "training"
    assert ev(c, "mode", "backward kernels")["count"] == 41  # batch_norm_backward, mse_backward ...


def test_no_ops_no_telling(tmp_path):
    t = s.trace([s.kernel("some_kernel", 100, 5, corr=1)])
    c = context_of(s.write(tmp_path, t))
    assert c["mode"] == "unknown" and c["parallelism"] == [] and not c["graph_replay"]


def test_deepep_kernels_in_a_serving_trace_are_expert_parallel(tmp_path):
    ev_ = [s.op("vllm::unified_attention_with_output", 5, 3, 1), s.launch(10, corr=1),
           s.kernel("void deep_ep::internode_ll::dispatch<false, 7168>(void*)", 100, 40, corr=1),
           s.launch(20, corr=2),
           s.kernel("void deep_ep::internode_ll::combine<false, 7168, 9>(void*)", 150, 30, corr=2)]
    c = context_of(s.write(tmp_path, s.trace(ev_, distributedInfo={"rank": 0, "world_size": 16})))
    assert c["mode"] == "inference" and c["parallelism"] == ["EP"]
    a2a = ev(c, "EP", "all-to-all")
    assert a2a["kind"] == "experts" and a2a["count"] == 2 and a2a["gpu_us"] == 70.0  # 40 + 30


# ----------------------------------------------------------------------------- recorded on CPU


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Path:
    """The traces tests/recorded_parallel.py records (one subprocess for the session)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("recorded_parallel")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "tests.recorded_parallel", str(out)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"recording failed: {r.stderr[-400:]}")
    return out


def _recorded(folder: Path, name: str) -> str:
    p = folder / name
    if not p.exists():
        pytest.skip(f"{name} not recorded (transformers not installed?)")
    return str(p)


def test_recorded_bert_training_step(recorded):
    c = context_of(_recorded(recorded, "bert_train.json"))
    assert c["mode"] == "training" and not c["compiled"] and c["parallelism"] == []
    assert ev(c, "mode", "optimizer")["examples"] == ["Optimizer.step#AdamW.step"]
    assert "autograd::engine::evaluate_function: NllLossBackward0" in ev(c, "mode", "backward ops")["examples"]


def test_recorded_bert_inference_mode(recorded):
    c = context_of(_recorded(recorded, "bert_infer.json"))
    assert c["mode"] == "inference" and c["evidence"]["compiled"] == c["evidence"]["graph_replay"] == []
    assert [e["rule"] for e in c["evidence"]["mode"]] == ["forward only"]


def test_recorded_torch_compile(recorded):
    c = context_of(_recorded(recorded, "bert_compiled.json"))
    assert c["compiled"] and c["mode"] == "inference"
    assert "Torch-Compiled Region: 0/0" in ev(c, "compiled", "compiled ranges")["examples"]


def test_recorded_ddp(recorded):
    c = context_of(_recorded(recorded, "ddp.json"))
    assert c["mode"] == "training" and c["parallelism"] == ["DP"] and c["world_size"] == 2
    assert ev(c, "DP", "gradient hooks")["examples"] == ["c10d::allreduce_"]
    assert "DistributedDataParallel.forward" in ev(c, "DP", "DDP ranges")["examples"]


def test_recorded_tensor_parallel(recorded):
    c = context_of(_recorded(recorded, "tp.json"))
    assert c["mode"] == "inference" and c["parallelism"] == ["TP"]
    # each layer's row-wise linear2 ends in an all-reduce of its [4*8, 32] output: 1024 elements, the
    # element count the addmm right before it wrote ([32, 32] x [32, 32] local shard: 32*32 = 1024)
    on = ev(c, "TP", "on a matmul")
    assert on["count"] == 2 and on["examples"] == ["_c10d_functional::all_reduce"]
    assert ev(c, "TP", "collectives in inference")["count"] == 2


def test_recorded_fsdp(recorded):
    c = context_of(_recorded(recorded, "fsdp.json"))
    assert c["mode"] == "training" and c["parallelism"] == ["FSDP"]
    assert "FSDP::root_pre_forward" in ev(c, "FSDP", "FSDP ranges")["examples"]
    # two layers: each one's flat parameters all-gathered in forward and its gradients reduce-scattered in
    # backward with the same size: 2 all-gathers + 2 reduce-scatters
    sharded = ev(c, "FSDP", "sharded parameters")
    assert sharded["count"] == 4
    assert set(sharded["examples"]) == {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_"}


def test_fsdp_from_sizes_alone(recorded, tmp_path):
    """The size rule on its own: the same recording with FSDP's ranges removed."""
    doc = json.loads(Path(_recorded(recorded, "fsdp.json")).read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("FSDP::")]
    c = context_of(s.write(tmp_path, doc))
    assert c["parallelism"] == ["FSDP"] and [e["rule"] for e in c["evidence"]["FSDP"]] == ["sharded parameters"]


def test_recorded_pipeline(recorded):
    c = context_of(_recorded(recorded, "pp.json"))
    assert c["parallelism"] == ["PP"]
    pp = ev(c, "PP", "send / recv")  # GPipe, 2 micro-batches: activations forward, gradients back
    assert set(pp["examples"]) == {"c10d::send", "c10d::recv_"} and pp["count"] >= 4


def test_recorded_all_to_all(recorded):
    c = context_of(_recorded(recorded, "a2a.json"))
    assert c["parallelism"] == ["EP"] and c["mode"] == "inference"
    a2a = ev(c, "EP", "all-to-all")
    assert a2a["count"] == 2 and a2a["examples"] == ["c10d::alltoall_base_"]  # dispatch and combine


def test_analysis_carries_the_context():
    from tests.analyses import analysis

    a = analysis("hta/rank0.json.gz")
    assert a["context"]["mode"] == "training" and a["context"]["parallelism"] == ["DP", "EP"]
    assert a["context"]["record_shapes"] is True



def test_lowercase_rules_read_as_case_blind_searches():
    """context's kernel rules are written in lowercase and read lowercased names (TraceView *_where(lower=True)):
    each finds what a case-blind search of the name finds."""
    import re

    from traceana.diagnose import context as c

    names = ["void at::native::FusedAdamKernel<float>", "ADAGRAD_update", "Lambda_kernel", "lambFused", "WGRAD_sm80",
             "fmha_bwd_kernel", "convBackwardData", "_C_cache_ops::reshape_and_cache_flash", "_c_cache_ops::x",
             "vllm::unified_attention_with_output", "PagedAttention_v2", "sglang::store_cache", "MoE_align",
             "DeepEP::dispatch", "KJTAllToAll_forward", "all2all_Pooled", "Sparse_Arch", "gemm_kernel", ""]
    for rx in (c._OPTIMIZER_KERNEL, c._BACKWARD_KERNEL, c._INFERENCE, c._MOE, c._EMBEDDING):
        blind = re.compile(rx.pattern, re.IGNORECASE)
        assert rx.pattern == rx.pattern.lower()
        for name in names:
            assert bool(rx.search(name.lower())) == bool(blind.search(name)), (rx.pattern, name)
