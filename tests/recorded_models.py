"""The models tests/recorded.py records: tiny Hugging Face transformers configs, no weights.

Each builder takes the attention implementation ("eager" or "sdpa") and returns (model, forward):
the forward is the zero-argument call recorded (inputs made here, seeded).
"""

from __future__ import annotations

import pytest

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}


def _text_inputs(torch, batch: int = 2, seq: int = 32, vocab: int = 1000, pad_last: int = 4):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    if pad_last:
        mask[-1, seq - pad_last:] = 0  # one padded sequence: the attention mask is a real mask
    return ids, mask


def _bert(attn: str):
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.BertConfig(vocab_size=1000, max_position_embeddings=256, attn_implementation=attn, **SMALL)
    model = transformers.BertModel(cfg)
    ids, mask = _text_inputs(torch, seq=256, pad_last=16)  # long enough for the fused kernel's FLOPs to show
    return model, lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state


def _gpt2(attn: str):
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                  attn_implementation=attn)
    model = transformers.GPT2Model(cfg)
    ids, mask = _text_inputs(torch)
    return model, lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state


def _llama(attn: str):
    """Llama as Hugging Face writes it: LlamaRMSNorm (to fp32, pow, mean, rsqrt, mul), rotate_half RoPE
    (slice, neg, cat, mul, add) and a SwiGLU MLP (silu(gate) * up)."""
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                   attn_implementation=attn)
    model = transformers.LlamaModel(cfg)
    ids, mask = _text_inputs(torch)
    return model, lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state


def _t5(attn: str):
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                                num_heads=4, attn_implementation=attn)
    model = transformers.T5Model(cfg)
    ids, mask = _text_inputs(torch)
    dec, _ = _text_inputs(torch, seq=16, pad_last=0)  # 16 decoder tokens attend to 32 encoder tokens
    return model, lambda: model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).last_hidden_state


def _bloom(attn: str):
    """bf16 BLOOM: ALiBi bias through baddbmm, masked_fill, softmax in fp32 cast back to bf16."""
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4, attn_implementation=attn)
    model = transformers.BloomModel(cfg).to(torch.bfloat16)
    ids, mask = _text_inputs(torch)
    return model, lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state


def _deberta(attn: str):
    """DeBERTa-v2: disentangled relative-position scores added, the padding mask applied by masked_fill."""
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.DebertaV2Config(vocab_size=1000, max_position_embeddings=64, relative_attention=True,
                                       position_buckets=16, pos_att_type=["p2c", "c2p"], **SMALL)
    model = transformers.DebertaV2Model(cfg)
    ids, mask = _text_inputs(torch)
    return model, lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state


def _vit(attn: str):
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, attn_implementation=attn, **SMALL)
    model = transformers.ViTModel(cfg, add_pooling_layer=False)
    pix = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))  # 16 patches + [CLS]
    return model, lambda: model(pixel_values=pix).last_hidden_state


def _videomae(attn: str):
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.VideoMAEConfig(image_size=32, patch_size=8, num_channels=3, num_frames=4, tubelet_size=2,
                                      attn_implementation=attn, **SMALL)
    model = transformers.VideoMAEModel(cfg)
    video = torch.randn(1, 4, 3, 32, 32, generator=torch.Generator().manual_seed(0))  # 2 x 16 = 32 tubelets
    return model, lambda: model(pixel_values=video).last_hidden_state


def _resnet(attn: str):
    transformers = pytest.importorskip("transformers")
    import torch
    cfg = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    model = transformers.ResNetModel(cfg)
    pix = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, lambda: model(pixel_values=pix).last_hidden_state


MODELS = {"bert": _bert, "bloom": _bloom, "deberta": _deberta, "gpt2": _gpt2, "llama": _llama, "t5": _t5, "vit": _vit,
          "videomae": _videomae, "resnet": _resnet}


