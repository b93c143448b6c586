"""Randomized kiln command lines (issue 23): every run must end with exit
status 0, 1 (a failure, explained) or 2 (a usage error), within a time limit,
never with a signal, an uncaught exception or a message without words.

Usage: python3 cli_fuzz.py --kiln PATH [--seed S] [--runs N] [--timeout T]
Prints each failing command line and exits 1 if there was one.
"""
import argparse, random, subprocess, sys

P = argparse.ArgumentParser()
P.add_argument("--kiln", default="kiln")
P.add_argument("--seed", type=int, default=1)
P.add_argument("--runs", type=int, default=200)
P.add_argument("--timeout", type=float, default=60)
args = P.parse_args()
rng = random.Random(args.seed)

VALUES = ["0", "-1", "1", "2", "3", "16", "17", "64", "128", "256", "1000",
          "4097", "65536", "2147483647", "2147483648", "4294967296",
          "9223372036854775807", "99999999999999999999", "-9223372036854775808",
          "abc", "", "1e3", "0x10", "bf16", "fp16", "fp32", "i32", "bshd",
          "bhsd", "sm_80", "sm_90a", "sm_75", "kiln", "O3", "passes:bogus"]
SMALL = ["1", "2", "3", "16", "17", "64", "100", "128"]
OPTIONS = {
    "attention": ["seq", "seq-k", "head-dim", "batch", "heads", "block-m",
                  "block-n", "block-n-diagonal", "warps", "stages", "wgmma",
                  "tma", "tma-store", "warp-specialize", "pingpong", "overlap",
                  "persistent", "dynamic-tiles", "head-group", "layout",
                  "dtype", "lse-stride", "longest-first-globally"],
    "gemm": ["m", "n", "k", "block-m", "block-n", "block-k", "warps",
             "stages", "wgmma", "tma", "warp-specialize", "persistent",
             "group-m", "dtype"],
    "softmax": ["rows", "cols", "block-rows", "block-cols", "dtype"],
}
TARGET = ["arch", "reload-ids", "llvm-pipeline", "stage"]


def command():
    cmd = rng.choice(["ir", "ir", "ir", "ptx", "report", "run", "bench", "cache"])
    kernel = rng.choice(list(OPTIONS) + ["bogus"])
    argv = [cmd]
    if cmd == "cache":
        return argv + [rng.choice(["ls", "info", "clear", "bogus", ""])]
    if cmd == "bench":
        argv.append(rng.choice(["jit", "bogus"]))
    elif rng.random() < 0.95:
        argv.append(kernel)
    if cmd == "run":
        argv.append("--cpu")
    names = OPTIONS.get(kernel, []) + (TARGET if cmd in ("ir", "ptx") else [])
    for _ in range(rng.randint(0, 5)):
        r = rng.random()
        if r < 0.05:
            argv.append("--" + rng.choice(["bogus", "help", "-", ""]))
        elif r < 0.1 or not names:
            argv.append(rng.choice(["--causal", "--causal=0", "--quick", "--cpu"]))
        else:
            name = rng.choice(names)
            # CPU runs and compiles get small sizes: the fuzzer looks for
            # crashes, not for long runs of legal shapes.
            pool = SMALL if cmd in ("run", "ptx", "report") and rng.random() < 0.8 else VALUES
            argv += ["--" + name] + ([rng.choice(pool)] if rng.random() < 0.97 else [])
    if cmd in ("ptx", "report", "run") and kernel == "attention":
        argv += ["--seq", rng.choice(SMALL)]  # later options win: keep it small
    return argv


failures = 0
for i in range(args.runs):
    argv = command()
    try:
        p = subprocess.run([args.kiln] + argv, capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"HANG ({args.timeout} s): kiln {' '.join(argv)}")
        failures += 1
        continue
    err = p.stderr.strip().splitlines()
    last = err[-1] if err else ""
    bad = None
    if p.returncode not in (0, 1, 2):
        bad = f"exit status {p.returncode}"
    elif p.returncode != 0 and not last.startswith("kiln"):
        bad = "no error message"
    elif any(w in p.stderr for w in ("internal error", "terminate called",
                                     "stoul", "stoll", "std::")):
        bad = "an internal error"
    elif p.returncode != 0 and last.rstrip(": ") in ("kiln: error", "kiln"):
        bad = "an empty error message"
    if bad:
        failures += 1
        print(f"FAIL ({bad}): kiln {' '.join(repr(a) if not a or ' ' in a else a for a in argv)}\n  {last}")
print(f"{args.runs - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
