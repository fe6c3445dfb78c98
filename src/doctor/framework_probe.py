"""The doctor's question to the user's Python (src/framework.rs runs it with
`python -c`): imports each framework that is installed and prints one JSON object on its last
line. Every question is guarded, so a partial install still answers."""
import importlib.util, json, os, sys
out = {"python": sys.version.split()[0], "executable": sys.executable}
def nvidia_lib_dirs():
    dirs = []
    for entry in sys.path:
        try:
            base = os.path.join(os.path.abspath(entry or "."), "nvidia")
            for name in sorted(os.listdir(base)):
                lib = os.path.join(base, name, "lib")
                if os.path.isdir(lib) and lib not in dirs:
                    dirs.append(lib)
        except Exception:
            pass
    return dirs
out["nvidia_lib_dirs"] = nvidia_lib_dirs()
def loaded_cuda_libraries():
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/lib" in line and any(n in line for n in ("libcudart.so", "libcublas.so", "libcublasLt.so", "libcudnn.so"))}
        return sorted(paths)
    except Exception:
        return []
def attempt(f):
    try:
        return f()
    except Exception as e:
        return None
if importlib.util.find_spec("torch") is not None:
    t = {}
    try:
        import torch
        t["version"] = getattr(torch, "__version__", None)
        t["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
        arch = attempt(lambda: list(torch.cuda.get_arch_list())) or []
        if not arch:
            flags = attempt(lambda: torch._C._cuda_getArchFlags())
            arch = flags.split() if flags else []
        t["arch_list"] = arch
        t["cudnn"] = attempt(lambda: torch.backends.cudnn.version())
        t["libraries"] = loaded_cuda_libraries()
    except BaseException as e:
        t["error"] = "%s: %s" % (type(e).__name__, e)
    out["torch"] = t
if importlib.util.find_spec("jax") is not None:
    j = {}
    try:
        import importlib.metadata as md
        import jax
        j["version"] = getattr(jax, "__version__", None)
        j["jaxlib"] = attempt(lambda: md.version("jaxlib"))
        plugins = []
        for name in ("jax-cuda13-plugin", "jax-cuda12-plugin", "jax_cuda13_plugin", "jax_cuda12_plugin"):
            v = attempt(lambda: md.version(name))
            if v:
                plugins.append("%s %s" % (name.replace("_", "-"), v))
        j["cuda_plugins"] = sorted(set(plugins))
        gpus = attempt(lambda: jax.devices("gpu"))
        j["gpus"] = len(gpus) if gpus is not None else 0
    except BaseException as e:
        j["error"] = "%s: %s" % (type(e).__name__, e)
    out["jax"] = j
if importlib.util.find_spec("tensorflow") is not None:
    f = {}
    try:
        import tensorflow as tf
        f["version"] = getattr(tf, "__version__", None)
        f["built_with_cuda"] = attempt(lambda: bool(tf.test.is_built_with_cuda()))
        f["cuda"] = attempt(lambda: tf.sysconfig.get_build_info().get("cuda_version"))
        f["gpus"] = attempt(lambda: len(tf.config.list_physical_devices("GPU")))
    except BaseException as e:
        f["error"] = "%s: %s" % (type(e).__name__, e)
    out["tensorflow"] = f
print(json.dumps(out))
