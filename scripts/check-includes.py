#!/usr/bin/env python3
"""Checks which module may include which, from the table in docs/ARCHITECTURE.md.

The table sits between the markers <!-- include-rules:begin --> and <!-- include-rules:end -->:
one row per module, its second column the comma-separated list of what it may include, each a
module ("net") or one header ("backends/model.h"). A module may always include its own files.
Only includes of our own modules count ("absl/...", generated and system headers do not); a
quoted include without a directory is the including file's own directory. Files under
tests/, bench/ and tools/ are not checked (they may include anything).

  scripts/check-includes.py [--root DIR]     exit 0: no violation; 1: each one is printed
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
SOURCES = ('.h', '.hpp', '.cc', '.cpp', '.c')


def read_rules(doc):
    text = open(doc, encoding='utf-8').read()
    m = re.search(r'<!-- include-rules:begin -->(.*?)<!-- include-rules:end -->', text, re.S)
    if not m:
        sys.exit(f'{doc}: no include-rules table (markers include-rules:begin/end)')
    rules = {}
    for line in m.group(1).splitlines():
        cells = [c.strip().strip('`') for c in line.strip().strip('|').split('|')]
        if len(cells) < 2 or not cells[0] or set(cells[0]) <= set('-: '):
            continue
        if cells[0] == 'module':
            continue
        allowed = {a.strip().strip('`') for a in cells[1].split(',') if a.strip() and a.strip() != '-'}
        rules[cells[0].rstrip('/')] = allowed
    if not rules:
        sys.exit(f'{doc}: the include-rules table is empty')
    return rules


def allowed(target, module, allow):
    first = target.split('/', 1)[0]
    if first == module:
        return True
    return first in allow or target in allow


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    rules = read_rules(os.path.join(root, 'docs', 'ARCHITECTURE.md'))
    modules = {k.split('/', 1)[0] for k in rules} | {'tests', 'bench', 'tools'}
    bad = []
    checked = 0
    # A file belongs to the longest module key that prefixes its path (`xdp/testing` before `xdp`).
    keys = sorted(rules, key=len, reverse=True)
    for module in sorted(rules):
        base = os.path.join(root, module)
        if not os.path.isdir(base):
            bad.append(f'{module}/: in the include-rules table but not in the tree')
            continue
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                owner = next(k for k in keys if rel.startswith(k + '/'))
                if owner != module:
                    continue  # a nested module's file, checked under its own key
                allow = rules[module]
                top = module.split('/', 1)[0]
                checked += 1
                text = open(path, encoding='utf-8', errors='replace').read()
                for m in INCLUDE.finditer(text):
                    target = m.group(1)
                    if '/' not in target:
                        continue  # same directory (or a generated/system header)
                    if target.split('/', 1)[0] not in modules:
                        continue  # not one of ours
                    if not allowed(target, top, allow):
                        line = text.count('\n', 0, m.start()) + 1
                        bad.append(f'{rel}:{line}: {module}/ may not include "{target}" '
                                   f'(allowed: {", ".join(sorted(allow)) or "its own files only"})')
    for b in bad:
        print(b)
    print(f'check-includes: {checked} files in {len(rules)} modules, '
          f'{len(bad)} violation(s) of docs/ARCHITECTURE.md "Module dependencies"')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
