#!/usr/bin/env python3
"""Reference benchmark ONLY (never used by the engine): the same GPT-2 style train step in PyTorch, to put
beside `bench model` (CPU) and, on a GPU, `bench model --device cuda`.

    python3 tools/bench_pytorch.py --threads 2                       # CPU, the README's configuration
    python3 tools/bench_pytorch.py --device cuda --layers 12 --width 768 --heads 12 --seq 1024 --tf32

Same model as src/models/gpt.cpp: pre-LN blocks, GELU (tanh), tied LM head, learned positions; one step =
forward + cross-entropy + backward + AdamW + global-norm clipping. Prints the median step time over --reps.
On Debian: apt-get install python3-torch (1.13 CPU).
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("error: PyTorch is not installed (Debian: apt-get install python3-torch)")


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = PyTorch default)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on the GPU")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = GPT(a.layers, a.width, a.heads, a.vocab, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step()
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__} {a.device} threads={torch.get_num_threads()}: GPT L={a.layers} C={a.width} "
          f"NH={a.heads} V={a.vocab} B={a.batch} T={a.seq}, {n} parameters")
    print(f"  step: median {t * 1e3:.1f} ms (best {min(times) * 1e3:.1f} ms) over {a.reps} steps; "
          f"{a.batch * a.seq / t:.0f} tokens/s")


if __name__ == "__main__":
    main()
