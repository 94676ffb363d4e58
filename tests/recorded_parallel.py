"""Real model code recorded on CPU under torch.profiler, for the run-context rules' tests.

`python -m tests.recorded_parallel OUT_DIR` writes, each a Kineto trace of rank 0:

  bert_train.json     a tiny Hugging Face BERT (built from a config, no weights): forward, backward,
                      AdamW step (skipped when transformers is not installed)
  bert_infer.json     the same model, forward only under torch.inference_mode
  bert_compiled.json  the same forward through torch.compile (aot_eager: no C++ compiler needed)
  ddp.json            2 ranks (gloo): DistributedDataParallel over nn.TransformerEncoder, SGD step
  tp.json             2 ranks: each TransformerEncoderLayer's feed-forward split column / row-wise
                      (torch.distributed.tensor.parallel), forward under no_grad
  fsdp.json           2 ranks: fully_shard (FSDP2) over two encoder layers, Adam step
  pp.json             2 ranks: torch.distributed.pipelining, a GPipe schedule over 4 linear layers
  a2a.json            2 ranks: all_to_all_single of a batch of tokens, experts, and back

A subprocess, so the test process never imports torch (the report path must not).
"""

from __future__ import annotations

import os
import socket
import sys


def record_single(out: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        from transformers import BertConfig, BertForSequenceClassification
    except ImportError:
        return
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=2)
    torch.manual_seed(0)
    m = BertForSequenceClassification(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = torch.randint(0, 128, (2, 16)), torch.tensor([0, 1])
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        m(input_ids=x, labels=y).loss.backward()
        opt.step()
        opt.zero_grad()
    p.export_chrome_trace(os.path.join(out, "bert_train.json"))
    m.eval()
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        m(input_ids=x)
    p.export_chrome_trace(os.path.join(out, "bert_infer.json"))
    c = torch.compile(m, backend="aot_eager")
    with torch.inference_mode():
        c(input_ids=x)  # compile outside the profiled window
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
            c(input_ids=x)
    p.export_chrome_trace(os.path.join(out, "bert_compiled.json"))


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)

    def save(p, name: str) -> None:
        if rank == 0:
            p.export_chrome_trace(os.path.join(out, name))

    def encoder(layers: int) -> torch.nn.Module:
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
        return torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)

    x = torch.randn(4, 8, 32)
    # data parallel
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(encoder(2))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        ddp(x).sum().backward()
        opt.step()
        opt.zero_grad()
    save(p, "ddp.json")
    # tensor parallel: the feed-forward's first linear split by columns, the second by rows
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    tp = encoder(2)
    for layer in tp.layers:
        parallelize_module(layer, mesh, {"linear1": ColwiseParallel(), "linear2": RowwiseParallel()})
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        tp(x)
    save(p, "tp.json")
    # fully sharded data parallel (FSDP2)
    from torch.distributed.fsdp import fully_shard

    fs = encoder(2)
    for layer in fs.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(fs, mesh=mesh)
    opt = torch.optim.Adam(fs.parameters())
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        fs(x).sum().backward()
        opt.step()
    save(p, "fsdp.json")
    # pipeline parallel: two stages of two linear layers, two micro-batches
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    lin = [torch.nn.Linear(16, 16) for _ in range(4)]
    stage = PipelineStage(torch.nn.Sequential(*lin[rank * 2:rank * 2 + 2]), rank, world, torch.device("cpu"))
    sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda o, t: o.sum())
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        if rank == 0:
            sched.step(torch.randn(4, 16))
        else:
            sched.step(target=torch.zeros(4, 16), losses=[])
    save(p, "pp.json")
    # expert parallel: each rank sends half its tokens to the other rank's expert and gets them back
    expert = torch.nn.Linear(16, 16)
    tokens = torch.randn(8, 16)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        got = torch.empty_like(tokens)
        dist.all_to_all_single(got, tokens)
        done = expert(got)
        back = torch.empty_like(done)
        dist.all_to_all_single(back, done)
    save(p, "a2a.json")
    dist.destroy_process_group()


def record_all(out: str) -> None:
    import torch.multiprocessing as mp

    os.makedirs(out, exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ranks = mp.spawn(_worker, args=(2, port, out), nprocs=2, join=False)  # the ranks run while BERT records
    record_single(out)
    while not ranks.join():
        pass


if __name__ == "__main__":
    record_all(sys.argv[1])
