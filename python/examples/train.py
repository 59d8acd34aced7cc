"""A small language model trained with FSDP2 on CPU, checkpointed with ckptdb.

    torchrun --nproc-per-node 2 python/examples/train.py --store /tmp/ckpt --steps 30

Every rank builds the same model from --seed, shards it with FSDP2
(``fully_shard``: parameters and AdamW state are DTensors sharded on dim 0
over a 1-d mesh) and trains it on synthetic token sequences. Every
--ckpt-every steps the model, the optimizer, the step number, the RNG states
and the data position are saved with ``ckptdb.async_save`` (training goes on
while the save commits). On start the run resumes from the latest step of
--store, whatever the world size that saved it.

Deterministic across world sizes: the global batch (--batch sequences) is
the same at every world size and split evenly across the ranks; each rank
averages the loss over its slice and FSDP averages the gradients, so the
update is that of the global mean loss. Only the order of floating-point
sums changes with the world size.

--kill-at STEP: rank 1 exits with os._exit(1) right after that step (a
crash), so that torchrun (run it with --max-restarts 0) fails the job.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import ckptdb


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True, help="ckptdb store directory (resumed from when it has steps)")
    p.add_argument("--steps", type=int, default=30,
                   help="train up to this step (the total, counting resumed steps; also the length of "
                   "the lr schedule: resume with the same value to continue the same curve)")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint every N steps (and at the last)")
    p.add_argument("--kill-at", type=int, default=None,
                   help="rank 1 exits (os._exit(1)) right after this step")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-file", default=None,
                   help="rank 0 appends its output lines to this file (not --log: torchrun's own "
                   "parser takes --log for an ambiguous abbreviation of its --log-dir and others)")
    p.add_argument("--batch", type=int, default=12,
                   help="global batch in sequences (split evenly across the ranks)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=5)
    return p.parse_args(argv)


# --- model ---------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


# --- data ----------------------------------------------------------------------

STRIDES = torch.tensor([1, 2, 3, 5, 7, 11, 13, 17])


def global_batch(gen: torch.Generator, batch: int, seq_len: int, vocab: int) -> torch.Tensor:
    """`batch` sequences of seq_len + 1 tokens: arithmetic progressions mod
    vocab with a random start and a random stride from STRIDES (learnable:
    the stride shows after two tokens). Drawn from `gen` only, the same on
    every rank."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stride = STRIDES[torch.randint(0, len(STRIDES), (batch, 1), generator=gen)]
    return (start + stride * torch.arange(seq_len + 1)) % vocab


def lr_at(step: int, args) -> float:
    """Linear warmup, then cosine decay to a tenth over --steps."""
    if step <= args.warmup:
        return args.lr * step / args.warmup
    frac = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


# --- main ----------------------------------------------------------------------

def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not divisible by the world size {world}")

    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    log_file = open(args.log_file, "a") if (rank == 0 and args.log_file) else None

    def say(line: str) -> None:
        if rank == 0:
            print(line, flush=True)
            if log_file:
                log_file.write(line + "\n")
                log_file.flush()

    # The same full model on every rank (same seed), then sharded.
    torch.manual_seed(args.seed)
    model = TinyLM(args.vocab, args.seq_len, args.d_model, args.layers, args.heads)
    n_params = sum(p.numel() for p in model.parameters())
    mesh = init_device_mesh("cpu", (world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    data_gen = torch.Generator().manual_seed(args.seed + 1)

    def state() -> dict:
        # get_state_dict initializes the optimizer's state when it has none,
        # so a fresh optimizer gives the full structure to load into.
        msd, osd = get_state_dict(model, opt)
        return {
            "model": msd,
            "optim": osd,
            "step": step,
            "rng": {"torch": torch.get_rng_state(), "data": data_gen.get_state()},
            "data": {"position": position},  # sequences consumed so far
        }

    store = ckptdb.Store(args.store)
    step, position = 0, 0
    # Rank 0 names the step to resume from, so that every rank loads the same.
    latest = [store.latest() if rank == 0 else None]
    dist.broadcast_object_list(latest, src=0)
    if latest[0] is not None:
        t0 = time.perf_counter()
        sd = state()
        loaded = ckptdb.load(sd, store, step=latest[0])
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        step, position = sd["step"], sd["data"]["position"]
        torch.set_rng_state(sd["rng"]["torch"])
        data_gen.set_state(sd["rng"]["data"])
        assert step == loaded and position == step * args.batch, (step, loaded, position)
        say(f"resumed from step {step} of {args.store} on {world} ranks "
            f"({time.perf_counter() - t0:.2f} s)")
    else:
        say(f"starting: {n_params} parameters on {world} ranks, global batch {args.batch}x{args.seq_len}")

    per_rank = args.batch // world
    pending = None
    while step < args.steps:
        step += 1
        tokens = global_batch(data_gen, args.batch, args.seq_len, args.vocab)
        position += args.batch
        mine = tokens[rank * per_rank:(rank + 1) * per_rank]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        logits = model(mine[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), mine[:, 1:].reshape(-1))
        loss.backward()  # FSDP averages the gradients over the ranks
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        # The global batch's mean loss (every rank's slice has as many tokens).
        total = loss.detach().clone()
        dist.all_reduce(total)
        say(f"step {step} loss {total.item() / world:.6f}")

        if step % args.ckpt_every == 0 or step == args.steps:
            if pending is not None:
                pending.result()  # raises the previous save's error, if any
            pending = ckptdb.async_save(state(), store, step)
            say(f"checkpoint step {step}: async_save blocked {pending.blocked_seconds:.3f} s")
        if args.kill_at is not None and step == args.kill_at and rank == 1:
            os._exit(1)  # a crash: no cleanup, saves in flight are lost

    if pending is not None:
        pending.result()
    store.close()
    if rank == 0:
        say(f"done at step {step}; the store's latest step is {store.latest()}")
    if log_file:
        log_file.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
