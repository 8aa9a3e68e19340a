"""Charts from the JSON the benchmarks wrote: throughput and client CPU per message, by message size;
peak memory against the settings.

    pip install -e ".[bench]"        # matplotlib
    python benchmarks/write.py --sizes 100 1024 16384 --json benchmarks/results/write.json
    python benchmarks/read.py --sizes 100 1024 16384 --json benchmarks/results/read.json
    python benchmarks/memory.py --rounds 3 --json benchmarks/results/memory.json
    python benchmarks/charts.py benchmarks/results/write.json benchmarks/results/read.json \
        benchmarks/results/memory.json --out docs/img

One SVG per input file and measure (``<benchmark>-rate.svg``, ``<benchmark>-cpu.svg``), with one
line per client and mode: this SDK, the official SDK, the bare ``grpc.aio`` floor. Message sizes
are on a logarithmic axis; each point is a figure the benchmark measured, nothing is
interpolated. The machine and the server's CPU utilisation of each point are in the JSON.

A file of ``memory.py``'s gives ``<file name>-peak.svg``: each client's peak RSS growth per workload (the
median of its rounds, the range as an error bar) beside what the settings promise, the setting
plus what the caller held, and that plus 25 %.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

STYLE = {"ours": ("tab:blue", "o"), "official": ("tab:orange", "s"), "floor": ("tab:gray", "^")}
MEASURES = {
    "rate": ("messages per second", lambda f: f["rate"]),
    "cpu": ("client CPU µs per message", lambda f: f["client_us_per_message"]),
}


def series(figures: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Figures grouped by (client, mode, label), each group sorted by message size."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for figure in figures:
        out[(figure["client"], figure["mode"], figure["label"])].append(figure)
    for group in out.values():
        group.sort(key=lambda f: f["size"])
    return out


def draw(path: Path, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text())
    benchmark = data["benchmark"]
    groups = series(data["figures"])
    machine = data.get("machine", {})
    written = []
    for measure, (ylabel, value) in MEASURES.items():
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for (client, mode, label), figures in sorted(groups.items()):
            color, marker = STYLE.get(client, ("black", "x"))
            dashed = mode == "message"
            ax.plot(
                [f["size"] for f in figures], [value(f) for f in figures], marker=marker, color=color,
                linestyle="--" if dashed else "-", label=f"{label} ({mode})" if mode and mode != benchmark else label,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size, bytes")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{benchmark}: {ylabel}", fontsize=11)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        note = f"{machine.get('cpu', '?')}, {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}"
        fig.text(0.01, 0.01, note, fontsize=7, color="gray")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        target = out_dir / f"{benchmark}-{measure}.svg"
        # A fixed hash salt and no date: the same figures give the same file.
        fig.savefig(target, metadata={"Date": None}, format="svg")
        plt.close(fig)
        written.append(target)
    return written


def draw_memory(data: dict[str, Any], target: Path) -> list[Path]:
    """Peak growth per client and workload, with the bound the settings set, into ``target``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mib = 1024 * 1024
    figures = [f for f in data["figures"] if f["client"] != "server"]
    rows: list[tuple[str, int]] = list(dict.fromkeys((f["mode"], f["extra"]["setting"]) for f in figures))
    clients = [c for c in STYLE if any(f["client"] == c for f in figures)]
    by = {(f["mode"], f["extra"]["setting"], f["client"]): f for f in figures}
    fig, ax = plt.subplots(figsize=(8, 4.6))
    width = 0.8 / max(1, len(clients))
    for position, client in enumerate(clients):
        xs, heights, low, high = [], [], [], []
        label = client
        for index, key in enumerate(rows):
            f = by.get((*key, client))
            if f is None:
                continue
            label = f["label"]
            growth = f["extra"]["peak_growth"] / mib
            least, most = (v / mib for v in f["extra"].get("peak_range", (growth * mib, growth * mib)))
            xs.append(index + (position - (len(clients) - 1) / 2) * width)
            heights.append(growth)
            low.append(growth - least)
            high.append(most - growth)
        color, _ = STYLE[client]
        ax.bar(xs, heights, width, color=color, label=label, yerr=[low, high], capsize=2, ecolor="black")
    for index, (mode, setting) in enumerate(rows):
        ours = by.get((mode, setting, "ours"))
        held = ours["extra"].get("held_peak", 0) if ours else 0
        bound = (setting + held) / mib
        ax.hlines(bound, index - 0.45, index + 0.45, colors="black", linewidth=1.2,
                  label="setting + held by the caller" if index == 0 else None)
        ax.hlines(bound * 1.25, index - 0.45, index + 0.45, colors="black", linestyles="dotted", linewidth=1.2,
                  label="+ 25 %" if index == 0 else None)
    ax.set_xticks(range(len(rows)), [f"{mode}\n{setting // mib} MiB" for mode, setting in rows], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("peak RSS growth, MiB")
    ax.set_title("memory: peak RSS growth against buffer_size_bytes / max_buffer_bytes", fontsize=11)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    machine = data.get("machine", {})
    note = f"{machine.get('cpu', '?')}, {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}"
    fig.text(0.01, 0.01, note, fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(target, metadata={"Date": None}, format="svg")
    plt.close(fig)
    return [target]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", type=Path, help="JSON files of write.py, read.py, memory.py --json")
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="directory for the SVGs (default docs/img)")
    args = parser.parse_args()
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "ydb-topic-async"
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files, searchable
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.inputs:
        data = json.loads(path.read_text())
        if data["benchmark"] == "memory":
            written = draw_memory(data, args.out / f"{path.stem}-peak.svg")
        else:
            written = draw(path, args.out)
        for target in written:
            print(target)


if __name__ == "__main__":
    main()
