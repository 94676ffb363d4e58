#!/usr/bin/env python3
"""The long fuzz run: tests/test_fuzz.py's mutation fuzzer for many cases (default 10,000).

    nice -n 10 python scripts/fuzz_long.py                 # 10,000 cases in 10 rounds
    python scripts/fuzz_long.py --examples 50000 --rounds 25 --seed 1

Each round is one pytest process with TRACEANA_FUZZ_EXAMPLES = examples / rounds and its own
hypothesis seed, so a crash found in one round (hypothesis stops a round at its first bug,
after shrinking it) does not end the run. Failing inputs are saved as files under
--failures (replay one with `TRACEANA_DEBUG=1 traceana report FILE -o /tmp/x.html`).
Exit code 0 when every round passed, 1 otherwise. A summary line per round goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=10_000, help="total cases (default 10,000)")
    ap.add_argument("--rounds", type=int, default=10, help="pytest processes to split them over")
    ap.add_argument("--seed", type=int, default=int(time.time()), help="first hypothesis seed")
    ap.add_argument("--failures", default="/tmp/traceana-fuzz-failures", help="where failing inputs go")
    args = ap.parse_args()

    per_round = max(1, args.examples // max(1, args.rounds))
    # hypothesis' own files (example patches, caches) go next to the failures, not into the repo
    env = dict(os.environ, TRACEANA_FUZZ_EXAMPLES=str(per_round), TRACEANA_FUZZ_FAILURES=args.failures,
               PYTHONPATH=str(REPO), HYPOTHESIS_STORAGE_DIRECTORY=str(Path(args.failures) / ".hypothesis"))
    total = passed = 0
    failed_rounds = []
    start = time.time()
    for r in range(args.rounds):
        seed = args.seed + r
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz.py",
               "-k", "never_crashes", f"--hypothesis-seed={seed}", "--hypothesis-show-statistics"]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        m = re.search(r"(\d+) passing examples, (\d+) failing examples", proc.stdout)
        n_pass = int(m.group(1)) if m else 0
        n_fail = int(m.group(2)) if m else 0
        total += n_pass + n_fail
        ok = proc.returncode == 0
        passed += ok
        print(f"round {r + 1}/{args.rounds} seed={seed}: {'ok' if ok else 'FAILED'} "
              f"({n_pass} passing, {n_fail} failing examples, {time.time() - start:.0f}s so far)", flush=True)
        if not ok:
            failed_rounds.append(seed)
            tail = proc.stdout[-6000:]
            print(tail, flush=True)
    print(f"fuzz_long: {total:,} cases in {args.rounds} rounds, {passed} rounds passed, "
          f"failing seeds {failed_rounds or 'none'}; {time.time() - start:.0f}s", flush=True)
    return 0 if not failed_rounds else 1


if __name__ == "__main__":
    sys.exit(main())
