#!/usr/bin/env python3
"""Checks that the engine library exports none of the tooling.

The tooling (src/profile, src/bench: explain, the bench report in Markdown, gnuplot, child
processes) is its own library, libfreight_tooling, on top of the engine (docs/internals.md,
"Layout"). A tooling source compiled into the engine again, or an engine file that grows such
code, shows up as a dynamic symbol of libfreight whose demangled name contains one of WORDS.
Prints those symbols and exits 1; exits 0 when there is none.

Usage: check_engine_symbols.py LIBFREIGHT [NM]
"""

import re
import subprocess
import sys

WORDS = re.compile(r"gnuplot|markdown|subprocess|explain", re.IGNORECASE)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    library = sys.argv[1]
    nm = sys.argv[2] if len(sys.argv) > 2 else "nm"
    result = subprocess.run([nm, "-DC", "--defined-only", library], capture_output=True,
                            text=True)
    if result.returncode != 0:
        print(f"{nm} -DC {library} failed: {result.stderr.strip()}")
        return 1
    symbols = result.stdout.splitlines()
    bad = [line for line in symbols if WORDS.search(line)]
    for line in bad:
        print(f"{library}: tooling symbol in the engine: {line.strip()}")
    if bad:
        print(f"{len(bad)} tooling symbol(s) in the engine library; tooling code belongs in "
              "freight_tooling (src/profile, src/bench)")
        return 1
    print(f"{len(symbols)} symbols of {library}, none of the tooling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
