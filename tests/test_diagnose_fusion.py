"""Fusion chains: only real producer -> consumer paths (schema outputs, same stream, no library op,
no sibling or parallel branch), bytes saved, and the launch pitch for tiny tensors."""

from __future__ import annotations

import pytest

from tests import synth
from tests.conftest import SAMPLES, shared_trace
from traceana.analysis import analyze
from traceana.diagnose import fusion
from traceana.diagnose.dataflow import breaks, feeds, output, reads
from traceana.diagnose.fusion import fix_for, pattern

X = [1024, 1024]  # fp32: 4,194,304 B
BF = "c10::BFloat16"


def _row(name, dims, types=None, concrete=None, family="pointwise", kernels=()):
    return {"name": name, "input_dims": [tuple(d) if isinstance(d, list) else d for d in dims],
            "input_types": types or ["float"] * len(dims), "concrete_inputs": concrete or [], "family": family,
            "kernels": [{"name": k} for k in kernels]}


def test_outputs_follow_the_op_schema():
    assert output(_row("aten::mul", [[8, 1, 64], [1, 32, 64]])) == ((8, 32, 64), "fp32")  # broadcast
    assert output(_row("aten::mul", [[8, 64], [8, 64]], [BF, "float"])) == ((8, 64), "fp32")  # promotion
    assert output(_row("aten::eq", [[8, 64], []], ["long int", "Scalar"])) == ((8, 64), "bool")  # comparison
    assert output(_row("aten::mul_", [[8, 32], []], ["float", "Scalar"])) == ((8, 32), "fp32")  # in place: self
    # copy_ writes its self (the destination's dtype), not its source
    assert output(_row("aten::copy_", [[4, 8], [4, 8], []], ["float", BF, "Scalar"], family="memory")) == \
        ((4, 8), "fp32")
    # clamp_min.out (self, min, out): the out= tensor fixes the result
    assert output(_row("aten::clamp_min", [[4, 8], [], [4, 8]], ["float", "Int", "float"])) == ((4, 8), "fp32")
    # mean(x, [-1], keepdim=True): [16, 559, 1024] -> [16, 559, 1]
    assert output(_row("aten::mean", [[16, 559, 1024], [], [], []], ["float", "ScalarList", "Scalar", ""],
                       ["", "[-1]", "True", ""], family="reduction")) == ((16, 559, 1), "fp32")
    # sum(x) over every dim (no dim argument); the dims of sum.dim_IntList without concrete inputs are unknown
    assert output(_row("aten::sum", [[8192, 8192], []], ["float", ""], family="reduction")) == ((), "fp32")
    assert output(_row("aten::sum", [[8, 16], [], [], []], ["float", "ScalarList", "Scalar", ""],
                       family="reduction")) is None
    assert output(_row("aten::cat", [[[2, 3, 8], [2, 3, 8]], []], ["TensorList", "Scalar"], ["", "-1"],
                       family="memory")) == ((2, 3, 16), None)  # TensorList: no dtype recorded
    assert output(_row("aten::native_layer_norm", [[8, 64], [], [64], [64], []],
                       [BF, "ScalarList", "float", "float", "Double"], family="norm")) == ((8, 64), "bf16")


def test_what_an_op_reads():
    x = ((4, 8), "fp32")
    # copy_ reads its source only; fill_ and normal_ overwrite their self without reading it
    assert [i for i, _, _ in reads(_row("aten::copy_", [[4, 8], [4, 8], []], ["float", "float", "Scalar"]), x)] == [1]
    assert reads(_row("aten::fill_", [[4, 8], []], ["float", "Scalar"]), x) == []
    # a norm reads its input, not a weight of the same shape; mse_loss_backward's out= is written, not read
    ln = _row("aten::native_layer_norm", [[2, 8], [], [8], [8], []], ["float", "ScalarList", "float", "float", "Double"],
              family="norm")
    assert reads(ln, ((8,), "fp32")) == []
    mse_bwd = _row("aten::mse_loss_backward", [[], [4, 8], [4, 1], [], [4, 8]],
                   ["float", "float", "float", "Scalar", "float"])
    assert [i for i, _, _ in reads(mse_bwd, x)] == [1]  # self [4, 8]; the out= [4, 8] at 4 is not read
    # a view that only adds or drops size-1 dims is the same tensor: [16, 559, 1] read as [16, 559]
    assert reads(_row("aten::rsqrt", [[16, 559]]), ((16, 559, 1), "fp32"))


def test_data_flow_between_ops():
    pow_ = _row("aten::pow", [[16, 559, 1024], []], ["float", "Scalar"], ["", "2"])
    mean = _row("aten::mean", [[16, 559, 1024], [], [], []], ["float", "ScalarList", "Scalar", ""],
                ["", "[-1]", "True", ""], family="reduction")
    add = _row("aten::add", [[16, 559, 1], [], []], ["float", "double", "Scalar"])
    assert feeds(pow_, mean) == ((16, 559, 1024), 4)
    assert feeds(mean, add) == ((16, 559, 1), 4)  # the reduced (keepdim) output feeds the add
    assert feeds(add, pow_) is None  # [16, 559, 1] is not a [16, 559, 1024] input
    # dtype decides too: clamp_ works in place on a double [1, 4096]; the next neg reads a float one
    clamp = _row("aten::clamp_", [[1, 4096], [], []], ["double", "Scalar", "Scalar"])
    assert feeds(clamp, _row("aten::neg", [[1, 4096]], ["float"])) is None


def test_library_gemm_and_copy_engine_ops_break_chains():
    assert "gemm" in breaks(_row("aten::mm", [X, X], family="gemm"))
    assert "library" in breaks(_row("fbgemm::permute_pooled_embs_auto_grad", [X], family="memory"))
    assert "library kernel" in breaks(_row("aten::cudnn_batch_norm", [X], family="norm",
                                           kernels=["void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>"]))
    assert "memcpy" in breaks(_row("aten::copy_", [X, X, []], family="memory", kernels=["Memcpy DtoD (Device -> Device)"]))
    assert breaks(_row("aten::add", [X, X, []], kernels=["void at::native::vectorized_elementwise_kernel<4>"])) is None


def test_fix_names_the_fused_kernel():
    assert "rms_norm" in fix_for(["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"])
    # LayerNorm by hand (mean, x - mean, var, rsqrt): the eager fused op is the fix
    assert pattern(["aten::mean", "aten::sub", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"])[0] \
        == "LayerNorm written out as separate ops"
    # softmax by hand (exp, sum, div) and GPT-2's tanh GELU (0.5 x (1 + tanh(c (x + 0.044715 x^3))))
    assert "torch.softmax" in pattern(["aten::exp", "aten::sum", "aten::div"])[1]
    assert 'approximate="tanh"' in pattern(["aten::pow", "aten::mul", "aten::add", "aten::mul", "aten::tanh",
                                             "aten::add", "aten::mul"])[1]
    assert pattern(["aten::mul", "aten::add"])[0] is None  # nothing named: the generic torch.compile advice
    # a norm after a residual add, and a norm after an activation (ViT's MLP output read by the next
    # block's norm): only the first is "Residual add + LayerNorm"
    assert pattern(["aten::add", "aten::native_layer_norm"])[0] == "Residual add + LayerNorm"
    assert pattern(["aten::gelu", "aten::native_layer_norm"])[0] == "gelu + LayerNorm"
    assert pattern(["aten::native_layer_norm", "aten::mul", "aten::add"])[0] == "LayerNorm + mul + add"
    # unfused attention (GEMMs around a softmax) is attention.py's, with its own fix: tests/test_attention.py
    assert "fused=True" in fix_for(["aten::mul_", "aten::addcdiv_"])
    assert "fused=True" in fix_for(["aten::mul_", "aten::add_", "aten::add_"])  # SGD momentum per parameter
    assert "torch.compile" in fix_for(["aten::mul", "aten::add"])
    fbgemm = fix_for(["fbgemm::permute_pooled_embs_auto_grad", "fbgemm::recat_embedding_grad_output_mixed_D_batch"])
    assert "does not fuse" in fbgemm and "fbgemm::permute_pooled_embs_auto_grad" in fbgemm


class _Ops:
    """Ops launched one after another on one thread, each with one kernel on stream 7."""

    def __init__(self):
        self.ev, self.t, self.corr = [], 0, 0

    def call(self, name, dims, types, concrete=None, kdur=40, stream=7):
        self.corr += 1
        self.ev.append(synth.op(name, self.t, 10, self.corr, dims=dims, types=types,
                                concrete=concrete or [""] * len(dims)))
        self.ev.append(synth.launch(self.t + 2, self.corr))
        self.ev.append(synth.kernel(f"k_{name.split('::')[-1]}", 100_000 + self.t, kdur, self.corr, stream=stream))
        self.t += kdur + 20


def _fusion(tmp_path, ops):
    a = analyze(synth.write(tmp_path, synth.trace(ops.ev)))
    return [f for f in a["findings"] if f["kind"] == "fusion"]


def test_chain_found_grouped_and_costed(tmp_path):
    o = _Ops()
    for _ in range(2):
        o.call("aten::pow", [X, []], ["float", "Scalar"], ["", "2"], 40)  # 8,388,608 B: 26.2 µs at 320 GB/s
        o.call("aten::mul", [X, X], ["float", "float"], kdur=50)  # 12,582,912 B: 39.3 µs
        o.call("aten::add", [X, X, []], ["float", "float", "Scalar"], ["", "", "1"], 50)  # 12,582,912 B
        o.call("aten::mm", [X, X], ["float", "float"], kdur=400)  # a GEMM: ends the chain
    (f,) = _fusion(tmp_path, o)
    assert f["title"].startswith("Fuse pow → mul → add")
    assert "2 time(s)" in f["text"]
    # per repetition two intermediates of 4,194,304 B, each written and read back: 4 x 4,194,304
    # = 16,777,216 B; two repetitions = 33,554,432 B
    assert "16,777,216 B" in f["text"] and "33,554,432 B" in f["text"]
    # the chain moves 8,388,608 + 2 x 12,582,912 = 33,554,432 B in 140 µs per repetition;
    # at that bandwidth the saved half takes 70 µs, x 2 repetitions = 140 µs
    assert f["saving_us"] == pytest.approx(140.0)
    assert "mm is a gemm op" in f["text"]  # the chain stops at the GEMM that reads its output


def test_chains_cut_at_gemm_sibling_and_unrelated_copy(tmp_path):
    o = _Ops()
    ff, f3 = ["float", "float"], ["float", "float", "Scalar"]
    mm = ("aten::mm", [X, X], ff, None, 400)
    # 1. a GEMM in the middle: add -> relu | mm | mul -> exp (mm reads relu's output, mul reads mm's)
    o.call("aten::add", [X, X, []], f3, ["", "", "1"], 50)
    o.call("aten::relu", [X], ["float"], kdur=40)
    o.call(*mm)
    o.call("aten::mul", [X, X], ff, kdur=50)
    o.call("aten::exp", [X], ["float"], kdur=40)
    o.call(*mm)
    # 2. a sibling branch: add writes fp32; copy_ casts it to bf16; sub reads the fp32 tensor again,
    # so copy_ and sub both consume add (siblings): add -> copy_ is a link, copy_ -> sub is not
    o.call("aten::add", [X, X, []], f3, ["", "", "1"], 50)
    o.call("aten::copy_", [X, X, []], [BF, "float", "Scalar"], ["", "", "False"], 30)
    o.call("aten::sub", [X, X, []], f3, ["", "", "1"], 50)
    o.call(*mm)
    # 3. two identical negs after exp: both may read exp's output; which one does is unknown
    o.call("aten::exp", [X], ["float"], kdur=40)
    o.call("aten::neg", [X], ["float"], kdur=40)
    o.call("aten::neg", [X], ["float"], kdur=40)
    o.call(*mm)
    # 4. an unrelated copy_: its source is a bf16 tensor, not sigmoid's fp32 output
    o.call("aten::sigmoid", [X], ["float"], kdur=40)
    o.call("aten::copy_", [X, X, []], [BF, BF, "Scalar"], ["", "", "False"], 20)
    titles = sorted(f["title"].split(":")[0] for f in _fusion(tmp_path, o))
    assert titles == ["Fuse add → copy_", "Fuse add → relu", "Fuse mul → exp"]


def test_tiny_chain_is_pitched_as_fewer_kernels(tmp_path):
    o = _Ops()
    one = [[1, 4096]]  # fp32: 16 KiB, 0.05 µs of DRAM traffic at 320 GB/s: launch cost dominates
    for _ in range(2):
        o.call("aten::neg", one, ["float"], kdur=3)
        o.call("aten::exp", one, ["float"], kdur=4)
        o.call("aten::mul", one * 2, ["float", "float"], kdur=5)
        o.call("aten::mm", [X, X], ["float", "float"], kdur=400)
    (f,) = _fusion(tmp_path, o)
    assert f["title"] == "Fuse neg → exp → mul: 3 kernels -> 1 (tiny tensors: launch-bound)"
    # fused, the chain costs about its longest kernel (5 µs): (3 + 4 + 5 - 5) x 2 repetitions = 14 µs
    assert f["saving_us"] == pytest.approx(14.0)
    # each kernel starts 20 µs after the one before ended: 2 gaps x 20 µs x 2 repetitions = 80 µs idle
    assert "idle 80.0 µs" in f["text"]


def test_t4_mul_then_sum_is_a_fusion_chain():
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"))
    (f,) = [f for f in a["findings"] if f["kind"] == "fusion"]
    assert f["title"].startswith("Fuse mul_ → sum")
    # mul_ works in place: its result lives on, so fusing saves only sum's re-read of it,
    # 8192 x 8192 x 4 = 268,435,456 B. The chain moves 536,870,9xx + 268,435,460 B in
    # 2,184 + 991.583 µs (254 GB/s): 3,175.583 µs x 268,435,456 / 805,306,3xx = 1,058.5 µs
    assert "268,435,456 B" in f["text"]
    assert f["saving_us"] == pytest.approx(1058.53, abs=0.02)


def _fusions(rel):
    return [f for f in analyze(shared_trace(rel))["findings"] if f["kind"] == "fusion"]


def test_rank0_chain_is_cut_by_dtype_and_pitched_as_launches():
    fs = _fusions("hta/rank0.json.gz")
    # the old 13-op chain copy_ -> clamp_ -> neg -> ... read double and float [1, 4096] tensors as one:
    # clamp_ works in place on a double tensor, the next neg reads a float one
    assert not any("clamp_ → neg" in f["title"] or "copy_ → clamp_ → neg" in f["title"] for f in fs)
    (f,) = [f for f in fs if f["title"].startswith("Fuse log2 → mul → sub → sum")]
    assert f["title"].endswith("4 kernels -> 1 (tiny tensors: launch-bound)")
    # 3 intermediates of [1, 4096] fp64 = 32,768 B, written and read back: 196,608 B per repetition
    assert "196,608 B" in f["text"] and "40 time(s)" in f["text"]
    # 40 repetitions; each saves the measured time of its 3 shorter kernels (log2 ~4.2, mul ~5.7,
    # sub ~3.8, sum ~6.0 µs): 523 µs in all, 13.1 µs per repetition
    assert f["saving_us"] == pytest.approx(523.0)
    assert all("less DRAM traffic" not in f["title"] for f in fs if "[1, 4096]" in f["text"])


def test_qwen_add_rmsnorm_chain():
    fs = _fusions("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    # the final norm (RMSNorm without the residual add, 114 µs) is a member of the same fusion lever too
    (f,) = [f for f in fs if "rsqrt" in f["title"] and f["title"].startswith("Residual add")]
    # named for what it computes (rsqrt of a mean of squares, no mean subtracted: RMSNorm; an add first)
    assert f["title"].startswith("Residual add + RMSNorm written out as separate ops: 9 kernels per call; fused, ")
    assert f["title"].endswith("(add → copy_ → pow → mean → add → rsqrt → mul → copy_ → mul)")
    assert f["pattern"] == "Residual add + RMSNorm written out as separate ops" and "F.rms_norm" in f["fix"]
    assert "48 time(s)" in f["text"]  # 24 layers x 2 norms after a residual add
    # h = 16 x 559 x 1024 = 9,158,656 elements. Per repetition, written and read back:
    #   add -> copy_ (bf16 h)          2 x 18,317,312 = 36,634,624
    #   copy_ -> pow (fp32 h, .to())   2 x 36,634,624 = 73,269,248  (copy_ under aten::to fills a new tensor)
    #   pow -> mean (fp32 h)           73,269,248
    #   mean -> add -> rsqrt -> mul    3 x 2 x 16 x 559 x 4 = 3 x 71,552 = 214,656
    #   mul -> copy_ (fp32 h)          73,269,248
    #   copy_ -> mul (bf16 h, .to())   36,634,624
    # sum 293,291,648 B; x 48 = 14,077,999,104 B
    assert "293,291,648 B" in f["text"] and "14,077,999,104 B" in f["text"]
    # the chain moves 18,474,252,288 B in 8,086 µs: the saved bytes take 8,086 x 14,078 / 18,474 = 6,161.7 µs
    assert f["saving_us"] == pytest.approx(6161.7, abs=0.1)
    assert "rms_norm" in f["text"]
    # RoPE of q and of k run the same code one after the other: the chain never runs from q's add
    # into k's first mul, nor from k's add into the q/k/v copies
    (rope,) = [f for f in fs if "cat" in f["title"]]
    assert rope["title"].startswith("Rotary embedding written out (rotate_half): 4 kernels per call")
    assert rope["title"].endswith("(neg → cat → mul → add)")


def test_kineto_resnet_chain_stops_at_cudnn(monkeypatch):
    fs = _fusions("kineto/worker0.1623143089861.pt.trace.json.gz")
    # before: "threshold_backward -> cudnn_batch_norm_backward" (a cuDNN kernel) was a chain
    assert not any("cudnn" in f["title"] for f in fs)
    groups = _chain_groups("kineto/worker0.1623143089861.pt.trace.json.gz", monkeypatch)
    top = groups[0]
    # the residual add_ -> relu (clamp_min.out) of each bottleneck block is a real chain; relu's
    # output goes into the next cuDNN convolution, where it stops
    assert [n.split("::")[-1] for n in top["names"]] == ["add_", "clamp_min"]
    assert top["after"] == "cudnn_convolution is a conv op"
    assert top["links"] == [((32, 256, 56, 56), 4)]  # add_ in place: its result is read back, 12,845,056 B
    assert not any("cudnn" in n for g in groups for n in g["names"])


def _chain_groups(rel, monkeypatch):
    """The chain groups fusion.chains found (all of them, not only the findings)."""
    seen: list = []
    orig = fusion.fusion_findings
    monkeypatch.setattr(fusion, "fusion_findings",
                        lambda groups, total_us, limit=8: seen.extend(groups) or orig(groups, total_us, limit))
    analyze(shared_trace(rel))
    return seen


def test_chains_follow_real_dataflow_on_every_shared_trace():
    """On every shared trace: never through a GEMM (but bmm -> softmax -> bmm, the unfused attention
    SDPA replaces), a library or custom op; never copy -> copy (independent copies)."""
    from tests.analyses import analysis
    from tests.conftest import all_shared_traces

    for rel in all_shared_traces():
        a = analysis(rel)
        by_id = {r["id"]: r for r in a["ops"]}
        for f in a["findings"]:
            if f["kind"] != "fusion" or "Fuse " not in f["title"]:
                continue
            chain = f["title"].split("Fuse ", 1)[1].split(":", 1)[0].split(" → ")
            for x, y in zip(chain, chain[1:]):
                assert not (x in ("copy_", "clone", "_to_copy") and y in ("copy_", "clone", "_to_copy")), (rel, chain)
                for g, other in ((x, y), (y, x)):
                    assert g not in ("mm", "addmm", "linear", "_flash_attention_forward", "convolution"), (rel, chain)
                    if g in ("bmm", "baddbmm", "matmul"):
                        assert other in ("_softmax", "softmax", "_safe_softmax"), (rel, chain)
            assert all(by_id[i]["name"].startswith("aten::") for i in f["ops"] if i in by_id), (rel, chain)


def test_layers_written_out_in_real_model_code_are_named(recorded_trace):
    """Hugging Face's Llama and GPT-2, recorded on CPU (tests/recorded.py): each layer that the model
    writes as separate element-wise ops is named for what it is, with the fused op that replaces it."""
    titles = [f["title"] for f in analyze(recorded_trace("llama"))["findings"] if f["kind"] == "fusion"]
    # LlamaRMSNorm after the residual add: add, pow, mean, add(eps), rsqrt, mul, mul(weight) = 7 kernels
    # (fp32 model: the .to(float32) returns its input and launches nothing)
    assert any(t.startswith("Residual add + RMSNorm written out as separate ops: 7 kernels per call") for t in titles)
    # the first layer's input norm has no residual add before it: 6 kernels
    assert any(t.startswith("RMSNorm written out as separate ops: 6 kernels per call") for t in titles)
    # rotate_half: -x2, cat(-x2, x1), then q*cos + rotate_half(q)*sin
    assert any(t.startswith("Rotary embedding written out (rotate_half): 4 kernels per call") for t in titles)
    gpt2 = [f for f in analyze(recorded_trace("gpt2"))["findings"] if f["kind"] == "fusion"]
    # NewGELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): its tail mul -> tanh -> add -> mul
    (gelu,) = [f for f in gpt2 if f.get("pattern", "") and f["pattern"].startswith("GELU")]
    assert gelu["title"].endswith("launch-bound; mul → tanh → add → mul)") and 'approximate="tanh"' in gelu["fix"]


def test_quick_gelu_is_not_a_gated_activation():
    # CLIP / OWLv2's QuickGELU: x * sigmoid(1.702 x) = mul -> sigmoid -> mul; one input, no gate
    label, _, fix = pattern(["aten::mul", "aten::sigmoid", "aten::mul"])
    assert label.startswith("QuickGELU") and "torch.compile" in fix
    # Llama's MLP: silu(gate_proj(x)) * up_proj(x): a gate
    assert pattern(["aten::silu", "aten::mul"])[0] == "Gated activation (SwiGLU / GeGLU)"
