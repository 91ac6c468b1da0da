#!/usr/bin/env python3
"""Plots of `unbounded memory` and `unbounded step` results (bench/unbounded.cpp).

    python3 bench/unbounded_plot.py --memory memory.json --step step.json [step2.json] --out docs/img \
        [--extra case.json ...]   # lines printed by `unbounded case`: replace formula points

Writes unbounded_memory.png (peak KV by the session's accounting and the process's max RSS
against pages, log x) and unbounded_step.png (reference attention per decode step against pages
of reference, dense R-SWA vs SR-SWA, process CPU time: the stable measure on a shared machine). Points that come from the accounting formula instead of a
run are drawn hollow. Needs matplotlib (pip install matplotlib).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# mode, label, colour, line style (infinite and infinite + SR-SWA coincide: dashes keep both visible)
MODES = [("full", "full attention", "tab:red", "-"), ("oneshot", "one-shot R-SWA", "tab:orange", "-"),
         ("infinite", "infinite (page groups G=4)", "tab:blue", "-"), ("sparse", "infinite + SR-SWA", "tab:green", "--")]


def plot_memory(path, extra, out):
    data = json.load(open(path))
    for line in (l for f in extra for l in open(f) if l.strip()):
        case = json.loads(line)
        data["cases"] = [c for c in data["cases"] if (c["mode"], c["pages"]) != (case["mode"], case["pages"])] + [case]
    fig, (kv, rss) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for mode, label, color, style in MODES:
        cases = sorted((c for c in data["cases"] if c["mode"] == mode), key=lambda c: c["pages"])
        if not cases:
            continue
        xs = [c["pages"] for c in cases]
        kv.plot(xs, [c["kv_peak_bytes"] / 1e6 for c in cases], style, color=color, label=label)
        for c in cases:
            measured = c["source"] == "measured"
            kv.plot(c["pages"], c["kv_peak_bytes"] / 1e6, "o", color=color, markerfacecolor=color if measured else "white")
        run = [c for c in cases if c["source"] == "measured"]
        rss.plot([c["pages"] for c in run], [c["max_rss_kb"] / 1024 for c in run], "o" + style, color=color, label=label)
    kv.set(xscale="log", yscale="log", xlabel="pages", ylabel="peak KV, MB (session accounting)",
           title=f"peak KV, tiny-a, {data['tokens_per_page']} tokens/page\n(hollow: formula, not run)")
    rss.set(xscale="log", xlabel="pages", ylabel="max RSS, MiB (whole process)", ylim=(0, None),
            title="process max RSS (fresh process per point)")
    for ax in (kv, rss):
        ax.grid(True, which="both", alpha=0.3)
    kv.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "unbounded_memory.png"))


def plot_step(paths, out):
    runs = [json.load(open(p)) for p in paths]
    data = runs[0]  # the SR-SWA parameters of the title (the same in every run merged)
    data["cases"] = [c for run in runs for c in run["cases"]]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    for dims, style in (("real", "-"), ("tiny-a", ":")):
        cases = sorted((c for c in data["cases"] if c["dims"] == dims), key=lambda c: c["pages"])
        if not cases:
            continue
        xs = [c["pages"] for c in cases]
        ax.plot(xs, [c["dense_cpu_ms_per_step"] for c in cases], "o" + style, color="tab:orange", label=f"dense R-SWA, {dims} dims")
        ax.plot(xs, [c["sparse_cpu_ms_per_step"] for c in cases], "s" + style, color="tab:green", label=f"SR-SWA, {dims} dims")
    ax.set(xscale="log", yscale="log", xlabel="pages of reference (273 visual tokens each)",
           ylabel="reference attention per decode step, CPU ms",
           title=f"SR-SWA (gate {data['page_budget']} pages, tree fan-out {data.get('gate_fan_out', '-')}; "
                 f"{data['block_budget']} blocks of {data['block_tokens']}) vs dense")
    ax.title.set_fontsize(10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "unbounded_step.png"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memory", help="JSON from `unbounded memory --out`")
    ap.add_argument("--step", nargs="*", default=[], help="JSON files from `unbounded step --out` (cases merged)")
    ap.add_argument("--extra", nargs="*", default=[], help="files of `unbounded case` lines (measured points added)")
    ap.add_argument("--out", default="docs/img", help="folder for the PNG files")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.memory:
        plot_memory(a.memory, a.extra, a.out)
    if a.step:
        plot_step(a.step, a.out)


if __name__ == "__main__":
    main()
