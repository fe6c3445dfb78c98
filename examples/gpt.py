"""A GPT-2-small-shaped training step in plain PyTorch, with the same injected faults as train.py.

The transformer-sized workload (issue 30): where train.py's small MLP is latency-bound, this
step is bound by its GEMMs and by the bytes they read and write, so it shows what the guard's
scan costs on a real model. Under the guard:

    LD_PRELOAD=target/release/libcublasguard.so python examples/gpt.py --inject nan
    target/release/cublasguard run -- python examples/gpt.py --inject overflow

The model (defaults: GPT-2 small): token and position embeddings, --layers pre-LayerNorm blocks
of causal self-attention (torch.nn.functional.scaled_dot_product_attention, --heads heads) and a
GELU MLP of 4 x --d-model, a final LayerNorm and an LM head tied to the token embedding;
cross-entropy on the next token of a fixed random batch (--batch sequences of --seq tokens of a
--vocab vocabulary), AdamW. On CUDA it runs under bf16 autocast by default (the parameters and
AdamW's state stay float32); on the CPU in float32 unless --dtype bf16.
The CPU dry run uses tiny shapes, e.g.
    python examples/gpt.py --device cpu --steps 2 --layers 2 --d-model 64 --heads 4 --seq 32 --batch 2 --vocab 256

  --inject nan       NaN in the embeddings' output: element 5 of position 2 of sequence 3 (each
                     index modulo its size) of the sum of the token and position embeddings, on
                     every forward pass. Block 0's first LayerNorm spreads it over that token's
                     row, which the first nn.Linear of the step consumes: block 0's attention
                     input projection (qkv). That GEMM is the first that sees a non-finite
                     input (in bf16 under autocast).
  --inject overflow  AdamW's learning rate for the nn.Linear weights at 3e37 (its first step
                     divides it by 0.1, bias correction: 3e38 is about the most a float32 step
                     size holds): the first step leaves those weights near +-3e37, still finite
                     in float32 and in bf16 (both top out near 3.4e38), and in the next forward
                     pass block 0's qkv projection, whose operands are all finite, overflows to
                     Inf (in float32 and in bf16 alike). The embeddings and LayerNorms keep the
                     normal rate: that high, they would overflow inside LayerNorm, outside
                     cuBLAS. Needs --steps 2 or more.
  --inject width     the embeddings' output widened by 4 features (zeros): block 0's LayerNorm
                     refuses it before cuBLAS is called (the guard records no cuBLAS fault)
  --inject cpu       the token ids left on the CPU while the model is on the GPU: the embedding
                     refuses them (likewise before cuBLAS; on --device cpu it changes nothing)

Which cuBLAS functions a GPU step reaches (PyTorch's choice, not this script's): the
projections (qkv, attention output, the MLP's two, all nn.Linear with bias) go forward to
cublasLtMatmul with a bias epilogue, or to cublasGemmEx in bf16; their backward and the tied LM
head (no bias) to cublasGemmEx (cublasLtMatmul where PyTorch prefers cublasLt); float32 runs
may reach cublasSgemm_v2 where PyTorch's library imports it. Attention itself is SDPA's fused
kernels (flash or memory-efficient attention), not cuBLAS; LayerNorm, GELU, the embeddings,
cross-entropy and AdamW are PyTorch's own kernels.

Prints "step N loss X" per step (not with --quiet), with --time one line
"time per step X ms (steps 2..N)" (the mean wall time of steps after the first, each ending in
a synchronisation on CUDA), then "done"; exits 0 unless PyTorch raises.
"""
import argparse
import math
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inject", choices=["none", "nan", "overflow", "width", "cpu"], default="none")
    p.add_argument("--dtype", choices=["float32", "bf16"], default=None, help="bf16: autocast (default on cuda); float32: none (default on cpu)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--anomaly", action="store_true", help="torch.autograd.set_detect_anomaly(True), for comparison")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    p.add_argument("--time", action="store_true", help="print the mean time per step after the first")
    args = p.parse_args()
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    if args.dtype is None:
        args.dtype = "bf16" if torch.device(args.device).type == "cuda" else "float32"
    return args


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.inject = args.inject
        self.wte = nn.Embedding(args.vocab, args.d_model)
        self.wpe = nn.Embedding(args.seq, args.d_model)
        self.blocks = nn.ModuleList(Block(args.d_model, args.heads) for _ in range(args.layers))
        self.ln_f = nn.LayerNorm(args.d_model)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
        for block in self.blocks:  # GPT-2's scaling of the residual projections
            for residual in (block.proj, block.fc_proj):
                nn.init.normal_(residual.weight, std=0.02 / math.sqrt(2 * args.layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t, device=self.wpe.weight.device))
        if self.inject == "nan":
            x = x.clone()
            x[3 % b, 2 % t, 5 % x.shape[2]] = float("nan")  # sequence 3, position 2, element 5
        if self.inject == "width":
            x = torch.cat([x, x.new_zeros(b, t, 4)], dim=2)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the LM head, tied to the token embedding


def main() -> int:
    args = parse()
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(args.anomaly)
    device = torch.device(args.device)
    model = GPT(args).to(device)
    # --inject overflow: the nn.Linear weights (the GEMMs' operands) at a rate that leaves them
    # near 3e37; the embeddings and LayerNorms at the normal one.
    linear = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    others = [p for p in model.parameters() if all(p is not w for w in linear)]
    groups = [{"params": linear, "lr": 3e37 if args.inject == "overflow" else 3e-4}, {"params": others}]
    optimizer = torch.optim.AdamW(groups, lr=3e-4, weight_decay=0.1)
    tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), generator=torch.Generator().manual_seed(1))
    inputs, targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    if args.inject == "cpu":
        inputs = inputs.cpu()
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    started = None
    for step in range(1, args.steps + 1):
        if step == 2:
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        value = loss.item()  # synchronises: each step ends on the host
        if not args.quiet:
            print(f"step {step} loss {value:.6f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if args.time and started is not None:
        print(f"time per step {(time.perf_counter() - started) * 1e3 / (args.steps - 1):.3f} ms (steps 2..{args.steps})")
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
