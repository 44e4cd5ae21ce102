#!/usr/bin/env python3
"""tests/integration/pypi-sdist.py NAME VERSION OUT: download the source distribution of exactly
NAME==VERSION from the Python package index's simple index (what pip reads; no build, no install)
into OUT, checked against the sha256 the index gives for it. The upstream-suite tests
(pylibmc-suite.sh, pymemcache-suite.sh) run the suites these archives carry; they are never
committed. Exits 1 with the reason on stderr's last line when the archive cannot be had."""
import hashlib
import re
import sys
import urllib.request


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: pypi-sdist.py NAME VERSION OUT")
    name, ver, out = sys.argv[1:]
    index = urllib.request.urlopen("https://pypi.org/simple/%s/" % name, timeout=60).read().decode()
    archive = re.escape("%s-%s.tar.gz" % (name, ver))
    links = re.findall(r'href="([^"#]+/' + archive + r')#sha256=([0-9a-f]{64})"', index)
    if not links:
        sys.exit("no source distribution of %s %s on PyPI" % (name, ver))
    url, digest = links[0]
    data = urllib.request.urlopen(url, timeout=120).read()
    if hashlib.sha256(data).hexdigest() != digest:
        sys.exit("%s: sha256 mismatch" % url)
    with open(out, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
