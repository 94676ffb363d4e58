"""Real distributed runs recorded on CPU: every rank's trace, for the cross-rank tests.

`python -m tests.recorded_ranks OUT_DIR` runs WORLD = 4 processes (torch.multiprocessing spawn,
torch.distributed with the gloo backend) and writes OUT_DIR/rank{r}.json, one Kineto trace per rank,
and OUT_DIR/plan.txt (JSON: what was injected, for the tests' arithmetic).

Each rank trains a small mixture-of-experts block for STEPS = 3 profiler steps (torch.profiler's
own ProfilerStep#N, after a warm-up step outside the profile so gloo's connections are made):

  forward    a router picks an expert per token; tokens go to the rank holding their expert by
             all_to_all_single with *uneven* splits (rank r sends SPLIT[j] tokens to rank j: the
             expert on rank 3 gets the most tokens, as an unbalanced MoE router sends them), the
             expert (a Linear) runs, the tokens come back by the reverse all_to_all_single, then an
             all_gather of a per-rank statistic
  backward   loss.backward(); then the gradients are averaged by one all_reduce (a DDP bucket)
  optimizer  SGD step, then rank 0 sends its loss to rank 1 (send / recv: p2p)

Injected, so the tests know who made everyone wait, where and by how much:
  step #1 (the second profiled step): rank LATE_FWD sleeps SLEEP_S in the forward, before the first
          all_to_all; every other rank waits for it there
  step #2: rank LATE_BWD runs extra 256x256 matmuls for EXTRA_S in the backward, before the all_reduce
          (for a time, not a count: the same delay on a fast or a loaded machine)

torch.profiler names the phases itself: the autograd engine's ops (backward), Optimizer.step#SGD.step
(optimizer), the rest of the step is forward. gloo runs each collective on its own worker thread
(`gloo:all_to_all`, ...) after the caller issued it (`c10d::alltoall_base_`, ...).

A subprocess (a test must not import torch: the report path never does).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

WORLD = 4
STEPS = 3
SPLIT = (2, 4, 6, 12)  # tokens each rank sends to rank 0, 1, 2, 3 (24 per rank; rank 3 receives 48 of 96)
HIDDEN = 64
SLEEP_S = 0.2
LATE_FWD = 2  # sleeps in the forward of step #1
LATE_BWD = 1  # extra matmuls in the backward of step #2
EXTRA_S = 0.15


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    router = torch.nn.Linear(HIDDEN, world)
    expert = torch.nn.Linear(HIDDEN, HIDDEN)
    head = torch.nn.Linear(HIDDEN, 1)
    params = [*router.parameters(), *expert.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    tokens = sum(SPLIT)
    extra = torch.randn(256, 256)

    def step(n: int) -> None:
        x = torch.randn(tokens, HIDDEN)
        if n == 1 and rank == LATE_FWD:
            time.sleep(SLEEP_S)  # the late rank: host time with no op
        gate = torch.softmax(router(x), dim=-1)
        sent = x * gate[:, :1]
        got = torch.empty(SPLIT[rank] * world, HIDDEN)
        # differentiable on the caller's side: the tokens leave, experts run where they arrived
        dist.all_to_all_single(got, sent.detach(), output_split_sizes=[SPLIT[rank]] * world,
                               input_split_sizes=list(SPLIT))
        y = expert(got)
        back = torch.empty(tokens, HIDDEN)
        dist.all_to_all_single(back, y.detach(), output_split_sizes=list(SPLIT),
                               input_split_sizes=[SPLIT[rank]] * world)
        stat = torch.tensor([float(back.abs().mean())])
        stats = [torch.empty(1) for _ in range(world)]
        dist.all_gather(stats, stat)
        loss = head(sent + back).pow(2).mean() + expert(got).pow(2).mean()
        loss.backward()
        if n == 2 and rank == LATE_BWD:
            until = time.perf_counter() + EXTRA_S
            while time.perf_counter() < until:
                torch.mm(extra, extra)  # the late rank: more compute in the backward
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= world
        opt.step()
        opt.zero_grad()
        if rank == 0:
            dist.send(loss.detach().reshape(1), 1)
        elif rank == 1:
            dist.recv(torch.empty(1), 0)

    step(-1)  # warm-up: gloo connects on its first collectives
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=0, active=STEPS, repeat=1)) as p:
        for n in range(STEPS):
            step(n)
            p.step()
    p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


def record(out: str) -> None:
    import torch.multiprocessing as mp

    os.makedirs(out, exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(_worker, args=(WORLD, port, out), nprocs=WORLD, join=True)
    plan = {"world": WORLD, "steps": STEPS, "split": list(SPLIT), "hidden": HIDDEN, "sleep_s": SLEEP_S,
            "late_fwd": LATE_FWD, "late_bwd": LATE_BWD, "extra_s": EXTRA_S}
    with open(os.path.join(out, "plan.txt"), "w") as fh:
        json.dump(plan, fh)


if __name__ == "__main__":
    record(sys.argv[1])
