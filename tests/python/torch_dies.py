"""PyTorch without a GPU, in a script that does not catch the failure: it dies of "Found no
NVIDIA driver". The guard's probe note becomes its init_failed fault, with this line."""
import torch


def make_tensor():
    return torch.zeros(1, device="cuda")  # FRAME make_tensor


make_tensor()
