"""Translates Freight's CUDA sources for the CPU emulation (see README.md).

  translate.py kernels IN.cu OUT.cpp
      rewrites every launch  kernel<<<grid, block, shmem, stream>>>(args);
      into    ::emu::launch(::emu::Config(grid, block, shmem, stream), "kernel",
                            [=](auto&&... emu_a) { kernel(emu_a...); }, args);
      The arguments are evaluated at the launch and kept by value, as CUDA does, so a launch
      recorded into a graph (stream capture) can be replayed after the caller's locals are gone.
      And after every declaration  __shared__ T name[N];  it adds
              ::emu::poison_shared(name, sizeof name);
      so that each block finds garbage there, as on a GPU, not what the previous block left
      (emu_core.h).

Outputs are rewritten only when their text changes (no needless rebuilds).
"""
import os
import re
import sys

SHARED = re.compile(r'(__shared__\s+[\w:<>, ]+?\s+(\w+)\s*\[[^\]]*\]\s*;)')


def poison_shared(src):
    return SHARED.sub(lambda m: '%s ::emu::poison_shared(%s, sizeof %s);'
                      % (m.group(1), m.group(2), m.group(2)), src)


def translate_launches(src):
    out, i = [], 0
    while True:
        j = src.find('<<<', i)
        if j < 0:
            out.append(src[i:])
            return ''.join(out)
        # The kernel expression just before <<<: an identifier with optional template arguments.
        k = j
        while src[k - 1] in ' \t\n':
            k -= 1
        if src[k - 1] == '>':
            depth = 0
            while True:
                k -= 1
                if src[k] == '>':
                    depth += 1
                elif src[k] == '<':
                    depth -= 1
                    if depth == 0:
                        break
        while src[k - 1].isalnum() or src[k - 1] in '_:':
            k -= 1
        kernel = src[k:j].strip()
        e = src.find('>>>', j)
        config = src[j + 3:e]
        p = e + 3
        if src[p] != '(':
            sys.exit('translate.py: expected ( after >>> near: ' + src[j:j + 60])
        depth, q = 0, p
        while True:
            if src[q] == '(':
                depth += 1
            elif src[q] == ')':
                depth -= 1
                if depth == 0:
                    break
            q += 1
        if src[q + 1] != ';':
            sys.exit('translate.py: expected ; after a launch near: ' + src[j:j + 60])
        out.append(src[i:k])
        args = src[p + 1:q]
        out.append('::emu::launch(::emu::Config(%s), "%s", [=](auto&&... emu_a) { %s(emu_a...); }%s);'
                   % (config, kernel, kernel, ', ' + args if args.strip() else ''))
        i = q + 2


def main():
    mode, path_in, path_out = sys.argv[1:4]
    if mode != 'kernels':
        sys.exit('translate.py: unknown mode ' + mode)
    src = open(path_in).read()
    text = poison_shared(translate_launches(src))
    if not os.path.exists(path_out) or open(path_out).read() != text:
        os.makedirs(os.path.dirname(path_out), exist_ok=True)
        open(path_out, 'w').write(text)


main()
