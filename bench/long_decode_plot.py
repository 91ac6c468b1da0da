#!/usr/bin/env python3
"""Plots bench/long_decode's JSON: KV memory and decode step time against generated tokens,
R-SWA and full attention side by side, into a small PNG (matplotlib, Agg backend).

    python3 bench/long_decode_plot.py long_decode.json docs/img/long_decode.png
"""
import argparse
import json

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

MODES = [("rswa", "R-SWA (n = {window})", "tab:blue"), ("full", "full attention", "tab:red")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("png")
    args = ap.parse_args()
    with open(args.json) as f:
        run = json.load(f)
    points = run["points"]
    tokens = [p["generated"] for p in points]
    m = run["model"]

    fig, (mem, step) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    for key, label, color in MODES:
        label = label.format(window=run["window"])
        mem.plot(tokens, [p[key]["kv_bytes"] / 2**20 for p in points], "o-", color=color, label=label)
        step.plot(tokens, [p[key]["wall_ms"] for p in points], "o-", color=color, label=label + ", wall")
        step.plot(tokens, [p[key]["cpu_ms"] for p in points], "s--", color=color, alpha=0.6, label=label + ", cpu")
    # The R-SWA twin held at the first point, timed in the same seconds: the load's share of the wobble.
    step.plot(tokens, [p["rswa_twin"]["wall_ms"] for p in points], ":", color="tab:blue", alpha=0.7,
              label=f"R-SWA at {tokens[0]}, same seconds, wall")
    for ax in (mem, step):
        ax.set_xscale("log", base=2)
        ax.set_xticks(tokens)
        ax.set_xticklabels([f"{t // 1024}k" if t >= 1024 else str(t) for t in tokens])
        ax.set_xlabel("generated tokens")
        ax.grid(True, alpha=0.3)
    mem.set_yscale("log")
    mem.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    mem.set_ylabel("KV cache (MiB, log)")
    mem.set_title("KV memory held")
    mem.legend(fontsize=8)
    step.set_ylabel("ms per decode step (median)")
    step.set_title(f"decode step time (median of {run['steps']})")
    step.set_ylim(bottom=0)
    step.legend(fontsize=7)
    fig.suptitle(f"{m['layers']} layers x {m['heads']} heads x {m['head_dim']}, vocab {m['vocab']}, "
                 f"prompt {run['prompt_tokens']} tokens; "
                 f"load {run['load_average_start'][0]:.1f} -> {run['load_average_end'][0]:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.png)


if __name__ == "__main__":
    main()
