"""Modules and source lines (traceana/modules): which module and which line of the user's code issued each
op, the by-module table (forward / backward apart), and each op row's and finding's module.

On a hand-written trace (every number known), on shared traces that carry python_function events (with
nn.Module entries), "Call stack" args or none, and on a training step of a tiny BertForMaskedLM recorded
in the test with with_stack=True and re-shaped as a CUDA run (tests/recorded.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import shared_trace
from traceana.analysis import analyze
from traceana.modules.frames import call_stack_frames, hierarchy_path, is_user_file, module_class, parse_frame
from traceana.render.html import render_html
from traceana.render.markdown import SHORT_CHARS, render_markdown


# ---------------------------------------------------------------- frame names

def test_frames_user_code_or_machinery():
    f = parse_frame("transformers/models/bert/modeling_bert.py(112): eager_attention_forward")
    assert (f.file, f.line, f.function, f.user) == ("transformers/models/bert/modeling_bert.py", 112,
                                                    "eager_attention_forward", True)
    assert f.where() == "transformers/models/bert/modeling_bert.py:112"
    assert parse_frame("torch/nn/modules/linear.py(125): forward").user is False  # torch itself
    assert parse_frame("threading.py(1032): _bootstrap").user is False  # the standard library
    assert parse_frame("multiprocessing/spawn.py(122): spawn_main").user is False
    assert parse_frame("train.py(54): <module>").user is True  # the user's script, relative to sys.path[0]
    assert parse_frame("torchvision/models/resnet.py(266): forward").user is True  # a model library
    assert parse_frame("aiter/tuned_gemm.py(395): torch_gemm").kernel_lib  # a kernel library: not the user's code
    assert parse_frame("aiter/tuned_gemm.py(395): torch_gemm").user is False
    assert parse_frame("<built-in method matmul of type object at 0x7f00>") is None
    assert parse_frame("nn.Module: Linear_0") is None
    # Call stack args: absolute paths; an installed package loses its install folder
    f = parse_frame("/home/u/env/lib/python3.7/site-packages/torch/nn/modules/module.py(727): _call_impl")
    assert (f.file, f.user) == ("torch/nn/modules/module.py", False)
    assert parse_frame("/usr/lib/python3.11/json/decoder.py(337): decode").user is False
    assert parse_frame("/home/u/proj/train.py(54): <module>").user is True
    assert not is_user_file("<frozen os>") and not is_user_file("typing_extensions.py")
    assert module_class("LlamaMLP_3") == "LlamaMLP" and module_class("Linear_12") == "Linear"
    stack = ("/env/site-packages/torch/nn/modules/conv.py(443): forward;/env/site-packages/torchvision/models/"
             "resnet.py(128): forward;train.py(46): <module>;")
    assert [x.where() for x in call_stack_frames(stack)] == [
        "torch/nn/modules/conv.py:443", "torchvision/models/resnet.py:128", "train.py:46"]  # innermost first


def test_module_hierarchy_paths():
    # TorchScript's "Module Hierarchy" (with_modules=True): attribute names with classes, from the top
    text = "TOP(A)::forward.blocks(Sequential)::forward.0(B)::forward.lin(Linear)::forward."
    assert hierarchy_path(text) == ("A", "blocks(Sequential)", "0(B)", "lin(Linear)")
    assert hierarchy_path("TOP()::<forward op>.blocks(Sequential)::forward.") == ("TOP", "blocks(Sequential)")
    assert hierarchy_path("") == ()


# ---------------------------------------------------------------- a hand-written trace

def _x(cat, name, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, "grid": [1, 1, 1], "block": [128, 1, 1]}}


def _launch(tid, ts, corr):
    return _x("cuda_runtime", "cudaLaunchKernel", tid, ts, 1, correlation=corr)


def _hand_trace(path) -> str:
    """Forward on thread 1: train.py(10): step > nn.Module: Net_0 > net.py(5): forward > nn.Module: Linear_0 >
    torch/nn/modules/linear.py(125): forward > aten::mm (seq 7) launching a 10 us kernel, then aten::add
    outside any module (a 1 us kernel). Backward on thread 2 (autograd's, no Python frames): the node
    MmBackward0 (seq 7) runs two aten::mm (4 us + 6 us kernels), AccumulateGrad one aten::add_ (2 us)."""
    mm = {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]}
    ev = [
        _x("python_function", "train.py(10): step", 1, 0, 100, **{"Python id": 1, "Python parent id": None}),
        _x("python_function", "nn.Module: Net_0", 1, 1, 50, **{"Python id": 2, "Python parent id": 1,
                                                                 "Python module id": 0}),
        _x("python_function", "net.py(5): forward", 1, 2, 48, **{"Python id": 3, "Python parent id": 2}),
        _x("python_function", "nn.Module: Linear_0", 1, 3, 40, **{"Python id": 4, "Python parent id": 3,
                                                                    "Python module id": 0}),
        _x("python_function", "torch/nn/modules/linear.py(125): forward", 1, 4, 38,
           **{"Python id": 5, "Python parent id": 4}),
        _x("cpu_op", "aten::mm", 1, 10, 20, **{"Sequence number": 7, "Fwd thread id": 0, "External id": 1}, **mm),
        _launch(1, 15, 1),
        _x("cpu_op", "aten::add", 1, 60, 5, **{"External id": 2, "Input Dims": [[64, 16], [64, 16], []],
                                               "Input type": ["float", "float", "Scalar"]}),
        _launch(1, 61, 2),
        _x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 2, 200, 50,
           **{"Sequence number": 7, "Fwd thread id": 1, "External id": 3}),
        _x("cpu_op", "MmBackward0", 2, 201, 48, **{"Sequence number": 7, "Fwd thread id": 1, "External id": 4}),
        _x("cpu_op", "aten::mm", 2, 205, 10, **{"External id": 5, "Input Dims": [[64, 16], [16, 32]],
                                                "Input type": ["float", "float"]}),
        _launch(2, 206, 3),
        _x("cpu_op", "aten::mm", 2, 220, 10, **{"External id": 6, "Input Dims": [[32, 64], [64, 16]],
                                                "Input type": ["float", "float"]}),
        _launch(2, 221, 4),
        _x("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 2, 260, 20,
           **{"External id": 7}),
        _x("cpu_op", "aten::add_", 2, 262, 10, **{"External id": 8, "Input Dims": [[32, 16], [32, 16], []],
                                                  "Input type": ["float", "float", "Scalar"]}),
        _launch(2, 263, 5),
        _kernel("ampere_sgemm_64x32_nn", 20, 10, 1), _kernel("elementwise_kernel", 70, 1, 2),
        _kernel("ampere_sgemm_64x32_nt", 210, 4, 3), _kernel("ampere_sgemm_64x32_tn", 225, 6, 4),
        _kernel("elementwise_kernel", 270, 2, 5),
    ]
    doc = {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "numSms": 108,
                                                    "computeMajor": 8, "computeMinor": 0}]}
    p = path / "hand.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(doc, f)
    return str(p)


@pytest.fixture(params=["c", "python"])
def loader(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    return request.param


def test_hand_trace_forward_backward_and_accumulation(tmp_path, loader):
    a = analyze(_hand_trace(tmp_path))
    m = a["modules"]
    assert m["source"] == "python_function"
    tree = {n["path"]: n for n in m["tree"]}
    assert list(tree) == ["Net_0", "Net_0/Linear_0"]
    lin = tree["Net_0/Linear_0"]
    # forward: the 10 us kernel of aten::mm [64,32]x[32,16]: 2*64*16*32 = 65536 FLOPs
    assert lin["forward"]["time_us"] == pytest.approx(10.0) and lin["forward"]["flops"] == 65536
    # backward, through MmBackward0's sequence number 7 to the forward mm: 4 + 6 = 10 us;
    # [64,16]x[16,32]: 2*64*32*16 = 65536 and [32,64]x[64,16]: 2*32*16*64 = 65536 -> 131072 FLOPs
    assert lin["backward"]["time_us"] == pytest.approx(10.0) and lin["backward"]["flops"] == 131072
    assert tree["Net_0"]["time_us"] == pytest.approx(20.0) and tree["Net_0"]["self_time_us"] == 0.0
    other = {o["key"]: o["time_us"] for o in m["other"]}
    assert other == pytest.approx({"outside_modules": 1.0, "accumulate_grad": 2.0})
    # 20 us in modules + 1 outside + 2 accumulating = 23 us = every kernel (10 + 1 + 4 + 6 + 2)
    assert m["total"]["time_us"] == pytest.approx(23.0) == sum(r["device_time_us"] for r in a["ops"])
    fwd = next(r for r in a["ops"] if r["name"] == "aten::mm" and r["phase"] == "forward")
    # the innermost frame of the user's code: net.py's forward (linear.py is torch's own)
    assert (fwd["module"], fwd["module_class"], fwd["source"]) == ("Net_0/Linear_0", "Net/Linear", "net.py:5")
    bwd = [r for r in a["ops"] if r["name"] == "aten::mm" and r["phase"] == "backward"]
    assert len(bwd) == 2 and {r["source"] for r in bwd} == {"net.py:5"}
    assert "sequence number" in m["backward"] and "gradient accumulation" in m["backward"]


def test_hand_trace_without_parent_ids(tmp_path):
    """Python calls recorded without "Python parent id": the call tree comes from time nesting."""
    path = _hand_trace(tmp_path)
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e["cat"] == "python_function":
            e["args"] = {}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    a = analyze(path)
    lin = next(n for n in a["modules"]["tree"] if n["path"] == "Net_0/Linear_0")
    assert lin["forward"]["time_us"] == pytest.approx(10.0) and lin["backward"]["time_us"] == pytest.approx(10.0)
    assert next(r for r in a["ops"] if r["name"] == "aten::mm")["source"] == "net.py:5"


# ---------------------------------------------------------------- shared traces

def _sums_equal(a: dict) -> None:
    """The by-module table (top-level modules + the time outside modules) sums to the ops table's totals."""
    m = a["modules"]
    roots = [n for n in m["tree"] if n["depth"] == 0] + m["other"]
    ops = a["ops"]
    t = sum(r["device_time_us"] for r in ops)
    f = sum((r["flops"] or 0.0) * r["count"] for r in ops)
    b = sum((r["bytes"] or 0.0) * r["count"] for r in ops)
    assert sum(n["time_us"] for n in roots) == pytest.approx(t, rel=1e-9)
    assert sum(n["flops"] for n in roots) == pytest.approx(f, rel=1e-9)
    assert sum(n["bytes"] for n in roots) == pytest.approx(b, rel=1e-9)
    assert m["total"]["time_us"] == pytest.approx(t, rel=1e-9)
    for n in m["tree"]:  # a module's time splits into its phases
        parts = n["forward"]["time_us"] + n["backward"]["time_us"] + n.get("optimizer", {}).get("time_us", 0.0)
        assert parts == pytest.approx(n["time_us"], rel=1e-9, abs=1e-9)


@pytest.fixture(scope="module")
def bert_h100():
    return analyze(shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"))


def test_shared_bert_inference_modules(bert_h100):
    a = bert_h100
    _sums_equal(a)
    m = a["modules"]
    assert m["source"] == "python_function" and m["backward"] is None  # inference: no backward
    roots = [n for n in m["tree"] if n["depth"] == 0]
    assert [n["path"] for n in roots] == ["BertLMHeadModel_0"]
    # 4 layers: one BertSdpaSelfAttention each; the flash attention kernels are its own ops
    flash = [r for r in a["ops"] if r["name"] == "aten::_flash_attention_forward"]
    assert flash and all(r["module_class"] == "BertLMHeadModel/BertModel/BertEncoder/BertLayer/BertAttention/"
                         "BertSdpaSelfAttention" and r["module_instances"] == 4 for r in flash)
    # the line the profiler recorded for the model's attention forward (transformers' modeling file)
    assert {r["source"] for r in flash} == {"transformers/models/bert/modeling_bert.py:364"}
    layers = [n for n in m["tree"] if n["class"] == "BertLayer"]
    assert len(layers) == 4 and all(n["forward"]["time_us"] > 0 for n in layers)


def test_shared_training_backward_by_sequence_number():
    a = analyze(shared_trace("tracelens/perf_model/normalization_layer_test.json.gz"))
    _sums_equal(a)
    tree = {n["path"]: n for n in a["modules"]["tree"]}
    # every norm layer's backward kernels come back to it through its forward op's sequence number
    for name in ("BatchNorm2d_0", "LayerNorm_0", "GroupNorm_0", "InstanceNorm2d_0", "RMSNorm_0"):
        n = tree[f"Net_0/{name}"]
        assert n["forward"]["time_us"] > 0 and n["backward"]["time_us"] > 0, name
    ln = [r for r in a["ops"] if r["name"] == "aten::native_layer_norm_backward"]
    assert ln and all(r["phase"] == "backward" and r["module_class"] == "Net/LayerNorm" for r in ln)
    assert {r["source"] for r in ln} == {"test_perf_model.py:35"}  # the test's Net.forward


def test_shared_checkpointed_resnet():
    a = analyze(shared_trace("tracelens/mi300/resnet_act_checkpoint.json.gz"))
    _sums_equal(a)
    m = a["modules"]
    other = {o["key"]: o for o in m["other"]}
    # DDP: the reducer's bucket copies and all-reduce run inside AccumulateGrad: backward work of no module
    assert other["accumulate_grad"]["time_us"] > 0.3 * sum(n["backward"]["time_us"] for n in m["tree"]
                                                            if n["depth"] == 0)
    convs = [n for n in m["tree"] if n["class"] == "Conv2d"]
    assert convs and all(n["backward"]["time_us"] > 0 for n in convs)
    assert any(r.get("source", "") and r["source"].startswith("torchvision/models/resnet.py:") for r in a["ops"])


def test_shared_call_stack_trace():
    """A 2021 trace: ops carry "Call stack" (absolute paths), no python_function events, old-style backward
    nodes ("CudnnConvolutionBackward") with sequence numbers."""
    a = analyze(shared_trace("kineto/worker0.1623143089861.pt.trace.json.gz"))
    _sums_equal(a)
    m = a["modules"]
    assert m["source"] == "call_stack" and "Call stack" in m["note"]
    convs = [r for r in a["ops"] if r["name"].startswith("aten::cudnn_convolution")]
    assert convs and all(r["source"].startswith("torchvision/models/resnet.py:") for r in convs)
    assert {r["phase"] for r in convs} == {"forward", "backward"}
    assert all(n["path"].startswith("resnet50_profiler_api.py:") for n in m["tree"] if n["depth"] == 0)


def test_shared_serving_trace_points_above_the_kernel_library():
    """SGLang on MI300X: a Linear's mm runs through aiter (tuned_gemm.py and the torch_guard.py wrappers it puts
    on sys.path); the line named is SGLang's own layer code that called into aiter."""
    a = analyze(shared_trace("tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz"))
    _sums_equal(a)
    mm = [r for r in a["ops"] if r["name"] == "aten::mm" and r["module_class"] == "Qwen3Model/Qwen3DecoderLayer/"
          "Qwen2MLP/MergedColumnParallelLinear"]
    assert mm and mm[0]["module_instances"] == 36  # Qwen3-8B: 36 decoder layers
    assert mm[0]["source"].endswith("sglang/srt/layers/quantization/unquant.py:136")


def test_shared_graph_replay_placed_at_its_launch():
    """vLLM piecewise CUDA graphs: the replayed kernels take their capturing ops (capture_traces/ beside the
    trace); those synthetic ops are timed on the GPU's clock, so each is placed where its graph was launched:
    inside the compiled piecewise GraphModule, launched from vLLM's cuda_graph.py."""
    a = analyze(shared_trace("tracelens/vllm_piecewise/graph_execution.json.gz"))
    _sums_equal(a)
    moe = next(r for r in a["ops"] if r["name"] == "vllm::moe_forward")
    assert moe["module_class"] == "GptOssForCausalLM/GraphModule"
    assert moe["source"] == "vllm/compilation/cuda_graph.py:208"


def test_shared_trace_without_stacks_says_how_to_record():
    # hta/control: every op's "Call stack" and "Module Hierarchy" recorded empty
    a = analyze(shared_trace("hta/control.json.gz"))
    _sums_equal(a)
    m = a["modules"]
    assert m["source"] is None and m["tree"] == [] and "with_stack=True" in m["note"]
    assert {o["key"] for o in m["other"]} >= {"outside_modules", "backward_unknown"}
    md = render_markdown(a, long=True)
    assert "with\\_stack=True" in md


# ---------------------------------------------------------------- a recorded training step

@pytest.fixture(scope="module")
def bert_train(recorded_trace):
    return analyze(recorded_trace.train_step_gpu())


def test_recorded_train_step_modules(bert_train):
    import transformers.models.bert.modeling_bert as modeling

    a = bert_train
    _sums_equal(a)
    m = a["modules"]
    assert m["source"] == "python_function"
    line = modeling.eager_attention_forward.__code__.co_firstlineno  # the profiler names a call by its def line
    attn = "BertForMaskedLM/BertModel/BertEncoder/BertLayer/BertAttention/BertSelfAttention"
    # Q K^T: [8,32,16] x [8,16,32] (batch 2 x 4 heads, 32 tokens, head size 16): 2*8*32*32*16 = 262144 FLOPs
    qk = [r for r in a["ops"] if r["name"] == "aten::bmm"
          and [list(d) for d in r["input_dims"]] == [[8, 32, 16], [8, 16, 32]]]
    assert len(qk) == 1 and qk[0]["flops"] == 262144
    # 4 calls: per layer (2), Q K^T forward and, in backward, the weights' grad (grad_out [8,32,16] x V^T [8,16,32])
    assert qk[0]["count"] == 4 and qk[0]["module_instances"] == 2
    assert qk[0]["module_class"] == attn and qk[0]["source"] == f"transformers/models/bert/modeling_bert.py:{line}"
    assert qk[0]["source_function"] == "eager_attention_forward"
    # their backward bmm's run on autograd's side and come back to the same module and line
    back = [r for r in a["ops"] if r["name"] == "aten::bmm" and r["phase"] == "backward"]
    assert back and all(r["module_class"] == attn and r["source"] == qk[0]["source"] for r in back)
    tree = {n["path"]: n for n in m["tree"]}
    q = tree["BertForMaskedLM_0/BertModel_0/BertEncoder_0/BertLayer_0/BertAttention_0/BertSelfAttention_0/Linear_0"]
    # the query projection: addmm [64,64] x [64,64] (2*32 tokens, hidden 64): 2*64*64*64 = 524288 FLOPs
    assert q["forward"]["flops"] == 524288
    # backward: grad input and grad weight, two mm of 524288, plus the bias grad's sum (64*64 = 4096) and at
    # most one accumulation of the input's grad (2*32*64 = 4096)
    assert 2 * 524288 + 4096 <= q["backward"]["flops"] <= 2 * 524288 + 4096 + 4096
    other = {o["key"]: o for o in m["other"]}
    assert other["optimizer"]["time_us"] > 0  # AdamW's step: under torch/optim frames, no module


def test_recorded_train_step_renders(bert_train):
    a = bert_train
    html = render_html(a)
    assert '<section id="modules">' in html and "BertSelfAttention_0" in html and "module · code" in html
    md = render_markdown(a)
    assert len(md) <= SHORT_CHARS and "By module" in md
    long = render_markdown(a, long=True)
    assert "modeling\\_bert.py" in long


def test_recorded_train_step_api(recorded_trace):
    import traceana

    a = traceana.analyze(recorded_trace.train_step_gpu())
    mods = a.modules
    top = mods[mods["depth"] == 0]
    assert top["time_us"].sum() == pytest.approx(a.ops["device_time_us"].sum(), rel=1e-9)
    assert set(top["kind"]) == {"module", "other"}
    assert (a.ops["module_class"].dropna().str.startswith("BertForMaskedLM")).all()
    row = mods.loc["BertForMaskedLM_0/BertModel_0"]
    assert row["time_us"] == pytest.approx(row["forward_time_us"] + row["backward_time_us"])


def test_module_names_are_escaped(tmp_path):
    """A module name with markup reaches the page escaped and the markdown inert."""
    path = _hand_trace(tmp_path)
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e["name"] == "nn.Module: Linear_0":
            e["name"] = "nn.Module: <img src=x onerror=alert(1)>_0"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    a = analyze(path)
    assert any("<img" in n["path"] for n in a["modules"]["tree"])
    html = render_html(a)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;_0" in html
    assert "<img" not in render_markdown(a, long=True)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_recorded_torchscript_module_hierarchy(recorded_trace):
    """A TorchScript model recorded with with_modules=True: its ops' "Module Hierarchy" gives the module path
    with attribute names (a scripted model has no nn.Module call entries; with_stack is off here)."""
    import torch

    from tests.recorded import gpu_shaped, write

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 32)

        def forward(self, x):
            return torch.relu(self.lin(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.Sequential(Block(), torch.nn.Linear(32, 32))

        def forward(self, x):
            return self.blocks(x).sum()

    torch.manual_seed(0)
    net = torch.jit.script(Net())
    x = torch.randn(128, 64)
    net(x)
    net(x)  # the profiling executor optimises on the second call
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                with_modules=True) as p:
        net(x)  # ops inlined under "TOP()::<forward op>.blocks(Sequential)::forward.0(Block)::..."
    path = recorded_trace.folder / "scripted.json"
    p.export_chrome_trace(str(path))
    a = analyze(write(gpu_shaped(json.loads(path.read_text())), recorded_trace.folder / "scripted.json.gz"))
    _sums_equal(a)
    m = a["modules"]
    assert m["source"] == "module_hierarchy"
    tree = {n["path"]: n for n in m["tree"]}
    lin = tree["Net/blocks(Sequential)/0(Block)/lin(Linear)"]
    # addmm [128,64] x [64,32]: 2*128*32*64 = 524288 FLOPs
    assert lin["flops"] == 524288 and lin["class"] == "Linear"
    assert tree["Net/blocks(Sequential)/1(Linear)"]["flops"] == 2 * 128 * 32 * 32  # = 262144


def test_by_layer_type_on_qwen():
    """Qwen1.5-0.5B on H100 (with_stack=True): 24 decoder layers, each with 2 RMSNorms (plus the final
    norm: 2 x 24 + 1 = 49 instances), an attention, an MLP and 7 Linears (q, k, v, o, gate, up, down:
    7 x 24 = 168). All instances of a class together show what kind of layer the time goes to: the
    hand-written RMSNorms take about as long as the MLPs."""
    a = analyze(shared_trace("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    by = {r["class"]: r for r in a["modules"]["by_class"]}
    assert by["Qwen2RMSNorm"]["instances"] == 49 and by["Linear"]["instances"] == 168
    assert by["Qwen2DecoderLayer"]["instances"] == 24 and by["Qwen2Model"]["instances"] == 1
    # a class's time is within its container's: a layer holds its attention, MLP and norms
    assert by["Qwen2Attention"]["time_us"] + by["Qwen2MLP"]["time_us"] + by["Qwen2RMSNorm"]["time_us"] \
        <= by["Qwen2Model"]["time_us"] + 1e-6
    assert by["Qwen2RMSNorm"]["bound"] == "memory" and by["Qwen2RMSNorm"]["time_us"] == pytest.approx(7378, abs=1)
    md = render_markdown(a)
    assert "By layer type (all instances together; a layer includes its sublayers): **Qwen2Attention ×24**" in md
    assert "**Qwen2RMSNorm ×49** 7.378 ms (16.2%)" in md and len(md) <= SHORT_CHARS
