"""Ground truth for the planted-effect campaign: A and B interleaved in one process, many repetitions.

    python benchmarks/probes/planted_truth.py [--pairs 30] > truth.json

For each core shape of ``campaigns/calibration_planted.py`` builds side A's
and side B's case (B with the planted extra work), then times them in
alternation with the CUDA graph timer, ``--pairs`` times.  The truth is the
mean of the per-pair log ratios with its 95% interval: independent of the
campaign's cells, rounds and processes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.campaign.loader import load_campaign  # noqa: E402
from pytest_abbench.campaign.model import Case  # noqa: E402
from pytest_abbench.child.layout_shift import hold_pads, pad_sizes  # noqa: E402
from pytest_abbench.report.stats import interval, pct  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--rep-ms", type=int, default=50)
    parser.add_argument("--layout-shift", action="store_true",
                        help="fresh buffers behind fresh pads for every pair (the cells' layout shift): the truth "
                             "averaged over layouts instead of the one layout of one set of buffers")
    args = parser.parse_args()
    import torch
    from triton.testing import do_bench_cudagraph

    campaign = load_campaign(REPO / "campaigns" / "calibration_planted.py")
    from _kernels.copy import copy_prefix  # importable once the campaign is loaded

    out = []
    for index, shape in enumerate(campaign.op("planted").shapes_for("core")):
        # One set of buffers for both sides: A and B differ only in the work planted, not in where memory lies.
        total = campaign.module.planted_elements(shape, planted=True)
        work = {"A": campaign.module.planted_elements(shape, planted=False), "B": total}

        def cases_on_fresh_buffers() -> dict:
            src = torch.arange(total, dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)
            return {side: Case(run=lambda n=n: copy_prefix(src, dst, n)) for side, n in work.items()}

        cases = cases_on_fresh_buffers()
        torch.cuda.synchronize()
        log_ratios = []
        a_ms, b_ms = [], []
        for i in range(args.pairs):
            if args.layout_shift:
                cases = {}
                torch.cuda.empty_cache()  # the next pads and buffers come from fresh segments
                pads = hold_pads("cuda", pad_sizes("truth", i, "AB", index))
                cases = cases_on_fresh_buffers()
                del pads
            order = ("A", "B") if i % 2 == 0 else ("B", "A")  # alternate, as the campaign's rounds do
            t = {side: float(do_bench_cudagraph(cases[side].run, rep=args.rep_ms)) for side in order}
            a_ms.append(t["A"])
            b_ms.append(t["B"])
            log_ratios.append(math.log(t["B"] / t["A"]))
        ci = interval(log_ratios)
        assert ci is not None
        record = {"shape": shape.id, "truth_pct": pct(statistics.fmean(log_ratios)),
                  "truth_ci_pct": [pct(ci[0]), pct(ci[1])], "pairs": args.pairs,
                  "a_ms": statistics.median(a_ms), "b_ms": statistics.median(b_ms),
                  "layout_shift": args.layout_shift}
        print(json.dumps(record), file=sys.stderr)
        out.append(record)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
