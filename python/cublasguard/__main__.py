"""`python -m cublasguard`: the command, with the same interpreter for scripts.

    python -m cublasguard run -- CMD [ARGS]    the command's own subcommands, unchanged
    python -m cublasguard train.py [ARGS]      runs the script under the guard, like
                                               `python -m cProfile train.py`, with this Python
"""

import os
import sys

from ._find import find_command

SUBCOMMANDS = {"run", "report", "doctor", "timeline", "demo", "help", "-h", "--help", "-V", "--version"}


def main(argv):
    try:
        command = find_command()
    except FileNotFoundError as e:
        print("cublasguard: " + str(e), file=sys.stderr)
        return 127
    if not argv or argv[0] in SUBCOMMANDS:
        args = [command] + argv
    elif argv[0].startswith("-"):
        print("cublasguard: unknown option " + argv[0] + " (python -m cublasguard --help)", file=sys.stderr)
        return 2
    else:
        # A script: run it with this interpreter under the guard.
        args = [command, "run", "--", sys.executable] + argv
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command, args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
