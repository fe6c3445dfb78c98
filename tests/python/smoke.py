"""PyTorch smoke test for the guard: import, a CPU matrix product, CUDA availability, and a
CUDA allocation that fails on a machine without a driver. Prints what the program sees, so a
guarded run can be compared with an unguarded one."""
import torch

x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
print("cpu matmul", (x @ x.T).tolist())
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("cuda available", torch.cuda.is_available())
try:
    torch.zeros(1, device="cuda")
    print("zeros on cuda: ok")
except Exception as e:  # RuntimeError without a driver
    print("zeros on cuda failed:", type(e).__name__, str(e).splitlines()[0])
