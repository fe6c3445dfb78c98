"""PyTorch without a GPU: the first CUDA tensor fails to start CUDA. The guard's init_failed
fault must name the line below in its Python frames."""
import torch


def make_tensor():
    return torch.zeros(1, device="cuda")  # FRAME make_tensor


try:
    make_tensor()
except RuntimeError as e:
    print("failed:", type(e).__name__)
