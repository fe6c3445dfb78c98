"""The wheel's build backend: maturin, with the data folder made first.

pyproject.toml ships the preload library and the demo's stand-in stack as wheel data, from
target/wheel-data, which build.rs fills during the cargo build. maturin refuses a data folder
that does not exist yet, and pip asks it for the wheel's metadata before anything is built:
in a fresh clone the folder is not there. Every hook here makes the (empty) folder, then hands
over to maturin unchanged.
"""

import os

import maturin

_DATA = os.path.join("target", "wheel-data", "data")


def _make_data_folder():
    os.makedirs(_DATA, exist_ok=True)


def _delegate(name):
    real = getattr(maturin, name)

    def hook(*args, **kwargs):
        _make_data_folder()
        return real(*args, **kwargs)

    hook.__name__ = name
    hook.__doc__ = real.__doc__
    return hook


for _name in (
    "build_wheel",
    "build_sdist",
    "build_editable",
    "get_requires_for_build_wheel",
    "get_requires_for_build_sdist",
    "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "prepare_metadata_for_build_editable",
):
    if hasattr(maturin, _name):
        globals()[_name] = _delegate(_name)
