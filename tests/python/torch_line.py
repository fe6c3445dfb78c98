"""PyTorch without a GPU: the first CUDA tensor fails to start CUDA, and the script carries on.
The guard's probe note (not a fault: the script handles it) must name the line below."""
import torch


def make_tensor():
    return torch.zeros(1, device="cuda")  # FRAME make_tensor


try:
    make_tensor()
except RuntimeError as e:
    print("failed:", type(e).__name__)
