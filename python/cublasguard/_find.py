"""Where pip put the `cublasguard` command, in every install layout.

pip installs the command into the scheme's "scripts" directory and the library into its "data"
directory (`<data>/share/cublasguard/lib/libcublasguard.so`), so the library always sits at
`../share/cublasguard/lib` from the command. Where the scripts directory is depends on how the package was installed (as in uv's
`_find_uv.py`): a virtual environment or the system (`sysconfig`), `--user` (the user scheme),
`--prefix` and `--target` (relative to this package). CUBLASGUARD_COMMAND, when set, names the
command instead (a build of the command outside any install, such as target/release/cublasguard).
"""

import os
import sys
import sysconfig

COMMAND = "cublasguard"


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    # The install scheme of this interpreter: a virtual environment or the system.
    yield sysconfig.get_path("scripts")
    # pip install --user
    user = getattr(sysconfig, "get_preferred_scheme", lambda _: "posix_user")("user")
    try:
        yield sysconfig.get_path("scripts", scheme=user)
    except KeyError:
        pass
    # pip install --prefix P: this package is P/lib/pythonX.Y/site-packages/cublasguard.
    yield os.path.join(here, "..", "..", "..", "..", "bin")
    # pip install --target T: this package is T/cublasguard, the command T/bin.
    yield os.path.join(here, "..", "bin")
    # Beside the interpreter (a layout without a scheme, such as some conda builds).
    yield os.path.dirname(sys.executable)


def find_command():
    """The `cublasguard` command this package was installed with.

    Raises FileNotFoundError with every place looked at when there is none.
    """
    named = os.environ.get("CUBLASGUARD_COMMAND")
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return os.path.abspath(named)
        raise FileNotFoundError("CUBLASGUARD_COMMAND=" + named + " is not an executable file")
    seen = []
    for directory in _candidates():
        if not directory:
            continue
        path = os.path.normpath(os.path.join(directory, COMMAND))
        if path in seen:
            continue
        seen.append(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("the cublasguard command was not found; looked at: " + ", ".join(seen))


def find_library():
    """The `libcublasguard.so` installed with the command (`<data>/share/cublasguard/lib`)."""
    command = find_command()
    path = os.path.normpath(os.path.join(os.path.dirname(command), "..", "share", "cublasguard", "lib", "libcublasguard.so"))
    if not os.path.isfile(path):
        raise FileNotFoundError("libcublasguard.so was not found at " + path)
    return path
