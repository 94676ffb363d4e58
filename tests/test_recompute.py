"""Activation checkpointing's recompute (diagnose/recompute.py), on real model code recorded on CPU
(transformers BERT with gradient checkpointing, both torch.utils.checkpoint variants) and on a shared
MI300X trace of a checkpointed ResNet."""

from __future__ import annotations

import pytest

from tests import recorded
from tests.conftest import shared_trace
from traceana.analysis import analyze


def _bert_checkpointed(tmp_path, reentrant: bool, with_stack: bool) -> str:
    transformers = pytest.importorskip("transformers")
    import torch

    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=128)
    model = transformers.BertModel(cfg)
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    ids = torch.randint(0, 1000, (2, 64), generator=torch.Generator().manual_seed(0))

    def run():
        model(input_ids=ids).last_hidden_state.pow(2).mean().backward()

    run()  # warm-up, unrecorded
    doc = recorded.gpu_shaped(recorded.record(run, with_stack=with_stack))
    return recorded.write(doc, tmp_path / f"ckpt_{reentrant}.pt.trace.json.gz")


def test_recompute_is_the_checkpointed_blocks_forward(tmp_path):
    # non-reentrant (the unpack hook's Python frames, with_stack=True): the recomputed ops' kernels take
    # exactly the forward time of the two checkpointed BertLayers (the by-class module table's figure)
    a = analyze(_bert_checkpointed(tmp_path, reentrant=False, with_stack=True))
    (f,) = [f for f in a["findings"] if f["kind"] == "recompute"]
    layer = next(r for r in a["modules"]["by_class"] if r["class"] == "BertLayer")
    assert f["how"] == "non-reentrant"
    assert f["saving_us"] == pytest.approx(layer["forward"]["time_us"], rel=1e-6)
    assert "profile_memory=True" in f["text"] and "if memory allows" in f["fix"]
    # reentrant, and no stacks: seen from the CheckpointFunctionBackward node alone, the nodes nested in
    # it (the recomputed blocks' own backward) left out: the same recompute time
    b = analyze(_bert_checkpointed(tmp_path, reentrant=True, with_stack=False))
    (g,) = [f for f in b["findings"] if f["kind"] == "recompute"]
    assert g["how"] == "reentrant" and g["saving_us"] == pytest.approx(f["saving_us"], rel=0.02)


def test_resnet_act_checkpoint_recompute():
    """TraceLens's checkpointed ResNet on MI300X (3 steps, with_stack=True): 504 unpack_hook frames hold
    1,908 ops whose kernels take 4,209.958 µs of the 100,230 µs device time: 4.2%, 1.403 ms per step."""
    a = analyze(shared_trace("tracelens/mi300/resnet_act_checkpoint.json.gz"))
    (f,) = [f for f in a["findings"] if f["kind"] == "recompute"]
    assert f["saving_us"] == pytest.approx(4209.958, abs=1e-3)
    assert "1,908 ops recomputed" in f["text"] and "1.403 ms per step" in f["title"]


def test_no_checkpointing_no_finding():
    a = analyze(shared_trace("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    assert not any(f["kind"] == "recompute" for f in a["findings"])
