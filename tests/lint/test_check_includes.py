#!/usr/bin/env python3
"""scripts/check-includes.py finds what the table forbids and nothing else (on a tree it makes)."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, '..', '..', 'scripts', 'check-includes.py')

TABLE = """# arch
<!-- include-rules:begin -->
| module | may include | its job |
|---|---|---|
| `common` | - | base |
| `net` | common | seams |
| `frontend` | net, common, `backends/model.h` | codecs |
| `backends` | net, common | models |
| `backends/testing` | backends, common, tests | test support |
<!-- include-rules:end -->
"""


def tree(files):
    root = tempfile.mkdtemp(prefix='ig-incl-')
    os.makedirs(os.path.join(root, 'docs'))
    open(os.path.join(root, 'docs', 'ARCHITECTURE.md'), 'w').write(TABLE)
    for path, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        open(os.path.join(root, path), 'w').write(text)
    for m in ('common', 'net', 'frontend', 'backends', 'backends/testing'):
        os.makedirs(os.path.join(root, m), exist_ok=True)
    return root


def run(root):
    p = subprocess.run([sys.executable, CHECKER, '--root', root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    ok = tree({
        'frontend/a.cc': '#include "frontend/a.h"\n#include "net/session.h"\n#include "backends/model.h"\n'
                         '#include "absl/status/status.h"\n#include "a.pb.h"\n#include <vector>\n',
        'backends/model.h': '#include "common/clock.h"\n',
        'net/session.h': '#include "common/cidr.h"\n',
        'tests/x_test.cc': '#include "backends/batcher.h"\n',  # tests may include anything
        'backends/testing/f.cc': '#include "tests/mocks/m.h"\n#include "backends/model.h"\n',
    })
    rc, out = run(ok)
    assert rc == 0, out
    assert '0 violation' in out, out

    bad = tree({
        'frontend/b.cc': '#include "net/session.h"\n\n#include "backends/batcher.h"\n',
        'net/session.h': '#include "frontend/http.h"\n',
        'common/x.h': '  #  include "net/session.h"\n',
        'backends/y.cc': '#include "tests/mocks/m.h"\n',  # only backends/testing may
    })
    rc, out = run(bad)
    assert rc == 1, out
    assert 'frontend/b.cc:3: frontend/ may not include "backends/batcher.h"' in out, out
    assert 'net/session.h:1: net/ may not include "frontend/http.h"' in out, out
    assert 'common/x.h:1: common/ may not include "net/session.h"' in out, out
    assert 'backends/y.cc:1: backends/ may not include "tests/mocks/m.h"' in out, out
    assert '4 violation' in out, out

    # A table that lost its markers is an error, not a pass.
    os.remove(os.path.join(bad, 'docs', 'ARCHITECTURE.md'))
    open(os.path.join(bad, 'docs', 'ARCHITECTURE.md'), 'w').write('# no table\n')
    rc, out = run(bad)
    assert rc != 0 and 'no include-rules table' in out, out
    print('test_check_includes: ok')


if __name__ == '__main__':
    main()
