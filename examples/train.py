"""A small PyTorch training run with switches that inject the classic faults.

What a GPU user runs first, under the guard:

    LD_PRELOAD=target/release/libcublasguard.so python examples/train.py --inject nan
    target/release/cublasguard run -- python examples/train.py --dtype bf16 --inject overflow

  --inject nan       NaN in the features fed to the first nn.Linear
  --inject overflow  a learning rate so high that the weights overflow to Inf
  --inject width     an input with the wrong feature width (PyTorch itself refuses it before
                     cuBLAS is called: the guard records no cuBLAS fault for it)
  --inject cpu       a CPU tensor fed to a GPU layer (likewise refused by PyTorch)

The model is an MLP of nn.Linear layers with bias: on a GPU its float32 forward passes go to
cublasLtMatmul with a bias epilogue, the rest to cublasGemmEx (PyTorch 2.15's CUDA library does
not import cublasSgemm_v2 at all), bf16 to cublasGemmEx or cublasLt.
Prints one line per step and "done", and exits 0 unless PyTorch raises.
"""
import argparse
import sys

import torch
from torch import nn


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inject", choices=["none", "nan", "overflow", "width", "cpu"], default="none")
    p.add_argument("--dtype", choices=["float32", "bf16"], default="float32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--anomaly", action="store_true", help="torch.autograd.set_detect_anomaly(True), for comparison")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    return p.parse_args()


def main() -> int:
    args = parse()
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(args.anomaly)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    device = torch.device(args.device)
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 1),
    ).to(device=device, dtype=dtype)
    lr = 1e30 if args.inject == "overflow" else 1e-2
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.randn(args.batch, args.features, device=device, dtype=dtype)
    y = x.sum(dim=1, keepdim=True) * 0.5
    if args.inject == "nan":
        x[3, 2] = float("nan")  # sample 3, feature 2
    if args.inject == "width":
        x = torch.randn(args.batch, args.features + 4, device=device, dtype=dtype)
    if args.inject == "cpu":
        x = x.cpu()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        value = loss.item()
        if not args.quiet:
            print(f"step {step} loss {value:.6f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
