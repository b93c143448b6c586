"""Writes a training corpus from text that ships in a Debian package: the
Python standard library's sources (libpython3.11-minimal and -stdlib,
/usr/lib/python3.11), every .py file in sorted order, concatenated.

    python3 examples/gpt/make_corpus.py [--root /usr/lib/python3.11] OUT
"""
import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--root", default="/usr/lib/python3.11")
a = p.parse_args()
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(a.root) for f in fs
               if f.endswith(".py") and "site-packages" not in d and "dist-packages" not in d)
with open(a.out, "wb") as out:
    for path in files:
        with open(path, "rb") as f:
            out.write(f.read())
print(f"{a.out}: {len(files)} files, {os.path.getsize(a.out) / 2**20:.1f} MiB from {a.root}")
