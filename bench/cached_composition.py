"""Where an A/A canary's per-block cached-ratio change comes from: raw campaigns in, figures out.

A block's cached ratio is cached prompt tokens over prompt tokens, summed over the block's
requests. Between the two sides of an A/A block it can change for two reasons: a request both
sides served got different cached tokens (the server's prefix cache behaved differently), or
the sides served different requests (one side got further into its sessions in the block's
time, so its extra requests are later turns with longer cached prefixes, or first turns with
shorter ones). This splits every block's change into those two parts and says how different
the two sides' request sets were, so the simulator's spread can be compared with a real
server's part by part.

    python bench/cached_composition.py /work/bench-out/real-7 /work/bench-out/real-7b
    python bench/cached_composition.py --label sim /tmp/sim-aa-7c

Reads each trial's `canary/{baseline,candidate}/block-N/requests.jsonl` (raw campaign output
of bench_real_canary.py or bench_sim_canary.py; not committed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from verdict_tables import _raw_trials, _rows  # bench/ is on the path: its own directory

Key = tuple[str, int]


def _requests(block: Path) -> dict[Key, tuple[int, int]]:
    """(session, step) -> (prompt tokens, cached tokens) of the block's answered requests."""
    return {
        k: (int(r["prompt_tokens"]), int(r.get("cached_tokens") or 0))
        for k, r in _rows(block).items()
        if r.get("prompt_tokens")
    }


def _ratio(rows: list[tuple[int, int]]) -> float | None:
    prompt = sum(p for p, _ in rows)
    return sum(c for _, c in rows) / prompt if prompt else None


def block_parts(a: dict[Key, tuple[int, int]], b: dict[Key, tuple[int, int]]) -> dict | None:
    """One block's cached-ratio change (B − A, in ratio points) and its two parts."""
    ra, rb = _ratio(list(a.values())), _ratio(list(b.values()))
    common, one_side = a.keys() & b.keys(), a.keys() ^ b.keys()
    ca = _ratio([a[k] for k in common])
    cb = _ratio([b[k] for k in common])
    if ra is None or rb is None or ca is None or cb is None:
        return None
    only = [a[k] if k in a else b[k] for k in one_side]
    return {
        "change": rb - ra,
        "same_requests": cb - ca,  # the prefix cache's part
        "composition": (rb - ra) - (cb - ca),  # which requests each side served
        "unpaired_share": len(only) / max(1, len(a) + len(b)),
        "count_change": (len(b) - len(a)) / max(1, len(a)),
        "paired_differ": sum(a[k][1] != b[k][1] for k in common),
        "paired": len(common),
        "ratio_common": (ca + cb) / 2,
        "ratio_unpaired": _ratio(only),
        "first_turn_share_unpaired": sum(k[1] <= 1 for k in one_side) / max(1, len(one_side)),
    }


def campaign(dirs: list[Path]) -> list[dict]:
    out = []
    for raw in dirs:
        for tdir, _ in _raw_trials(raw):
            base, cand = tdir / "canary" / "baseline", tdir / "canary" / "candidate"
            for blk in sorted(p.name for p in base.glob("block-*") if p.is_dir()):
                if not (cand / blk).is_dir():
                    continue
                parts = block_parts(_requests(base / blk), _requests(cand / blk))
                if parts is not None:
                    out.append(parts)
    return out


def summary(blocks: list[dict]) -> dict[str, float]:
    def sd(key: str) -> float:
        return statistics.pstdev(b[key] for b in blocks)

    def mean(key: str) -> float:
        vals = [b[key] for b in blocks if b[key] is not None]
        return statistics.fmean(vals) if vals else float("nan")

    return {
        "blocks": len(blocks),
        "sd_change_pp": 100 * sd("change"),
        "sd_same_requests_pp": 100 * sd("same_requests"),
        "sd_composition_pp": 100 * sd("composition"),
        "unpaired_share": mean("unpaired_share"),
        "sd_count_change": sd("count_change"),
        "paired_differ_share": sum(b["paired_differ"] for b in blocks)
        / max(1, sum(b["paired"] for b in blocks)),
        "ratio_common": mean("ratio_common"),
        "ratio_unpaired": mean("ratio_unpaired"),
        "first_turn_share_unpaired": mean("first_turn_share_unpaired"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("raw", nargs="+", type=Path, help="raw campaign directories (trial-*/canary)")
    p.add_argument("--label", default="campaign")
    args = p.parse_args(argv)
    missing = [str(d) for d in args.raw if not d.is_dir()]
    if missing:
        print(f"cached_composition: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    blocks = campaign(args.raw)
    if not blocks:
        print("cached_composition: no trial with blocks on both sides in those directories",
              file=sys.stderr)  # fmt: skip
        return 2
    s = summary(blocks)
    print(f"{args.label}: {s['blocks']} blocks")
    print(f"  cached-ratio change per block, sd: {s['sd_change_pp']:.3f} points")
    print(f"    from the same requests (prefix cache): {s['sd_same_requests_pp']:.3f} points")
    print(f"    from which requests each side served:  {s['sd_composition_pp']:.3f} points")
    print(f"  paired requests with different cached tokens: {100 * s['paired_differ_share']:.2f} %")
    print(f"  requests served by one side only: {100 * s['unpaired_share']:.1f} % "
          f"(request count change per block, sd {100 * s['sd_count_change']:.1f} %)")  # fmt: skip
    print(f"  cached ratio, paired requests {s['ratio_common']:.3f}, one-side requests "
          f"{s['ratio_unpaired']:.3f} (first turns among them {100 * s['first_turn_share_unpaired']:.0f} %)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
