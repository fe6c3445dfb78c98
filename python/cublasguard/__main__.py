"""`python -m cublasguard`: the command, with the same interpreter for scripts and modules.

    python -m cublasguard SCRIPT [ARGS]        runs the script under the guard, like
                                               `python -m cProfile train.py`, with this Python
    python -m cublasguard -m MODULE [ARGS]     runs `python -m MODULE` under the guard, with this Python
    python -m cublasguard SUBCOMMAND [ARGS]    the command's own subcommands, unchanged

The subcommands are the command's own: it lists them (`cublasguard subcommands`, hidden from its
help), so that this launcher never falls behind the command it was installed with.
"""

import os
import subprocess
import sys

from ._find import find_command

USAGE = """\
usage: python -m cublasguard SCRIPT [ARGS...]       run a Python script under the guard, with this
                                                  Python (like python -m cProfile SCRIPT)
       python -m cublasguard -m MODULE [ARGS...]    run `python -m MODULE` under the guard, with this
                                                  Python (like python -m cProfile -m MODULE)
       python -m cublasguard SUBCOMMAND [ARGS...]   a subcommand of the cublasguard command:
                                                  {subcommands}

The options of `cublasguard run` go through the subcommand:
       python -m cublasguard run --checks args,bounds python train.py

The cublasguard command ({command}):
"""


def _fail(message, code=2):
    print("cublasguard: " + message, file=sys.stderr)
    return code


def subcommands(command):
    """The names the command's subcommands answer to, as the command itself lists them."""
    try:
        listed = subprocess.run([command, "subcommands"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError("cannot run %s: %s" % (command, e))
    if listed.returncode != 0:
        why = (listed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError("%s did not list its subcommands (exit %d: %s); is it older than this package?" % (command, listed.returncode, why))
    return [name for name in listed.stdout.split() if name]


def _help(command, names, out):
    out.write(USAGE.format(subcommands=", ".join(names), command=command))
    out.flush()
    helped = subprocess.run([command, "--help"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    out.write(helped.stdout)
    out.flush()
    return helped.returncode


def _exec(command, args):
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command, [command] + args)


def main(argv):
    try:
        command = find_command()
    except FileNotFoundError as e:
        return _fail(str(e), 127)
    first = argv[0] if argv else None
    if first in ("-V", "--version"):
        _exec(command, argv)
    try:
        names = subcommands(command)
    except RuntimeError as e:
        return _fail(str(e))
    if first in ("-h", "--help"):
        return _help(command, names, sys.stdout)
    if first is None:
        _help(command, names, sys.stderr)
        return 2
    if first in names:
        _exec(command, argv)
    if first == "-m" or (first.startswith("-m") and not first.startswith("--")):
        # A module: `python -m MODULE ARGS` under the guard, with this interpreter.
        module = first[2:] or (argv[1] if len(argv) > 1 else "")
        rest = argv[1:] if first[2:] else argv[2:]
        if not module:
            return _fail("-m needs a module name: python -m cublasguard -m MODULE [ARGS...]")
        _exec(command, ["run", "--", sys.executable, "-m", module] + rest)
    if first.startswith("-"):
        return _fail("unknown option " + first + " (python -m cublasguard --help)")
    if not os.path.exists(first):
        return _fail("'%s' is neither a subcommand (%s) nor a script (python -m cublasguard --help)" % (first, ", ".join(names)))
    # A script: run it with this interpreter under the guard.
    _exec(command, ["run", "--", sys.executable] + argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
