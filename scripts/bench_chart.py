#!/usr/bin/env python3
"""Report inputs from the bench results (standard library only).

    python3 scripts/bench_chart.py RESULTS_DIR SVG_OUT TABLE_OUT

Reads RESULTS_DIR/<adapter>.json (the vs_raw schema) and RESULTS_DIR/core.txt (criterion's
text output), writes a throughput-by-concurrency SVG (one panel per adapter, sink vs raw)
and a markdown table of sink/raw ratios with absolute figures.
"""

import json
import math
import re
import sys
from pathlib import Path

ORDER = ["http", "amqp", "kafka", "aws", "sqs", "sns", "sqs-fast", "sns-fast", "pubsub", "nats", "redis"]
MODE_COLOUR = {"sink": "#1f77b4", "raw": "#d62728", "raw_encode": "#ff7f0e"}


def load(results):
    docs = []
    for path in sorted(Path(results).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "runs" in doc and "adapter" in doc:
            docs.append(doc)
    docs.sort(key=lambda d: (ORDER.index(d["adapter"]) if d["adapter"] in ORDER else 99, d["adapter"]))
    return docs


def size_label(n):
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else f"{n} B"


def series(doc):
    """{(mode, variant, body): {concurrency: per_sec}}"""
    out = {}
    for r in doc["runs"]:
        key = (r["mode"], r.get("variant") or "default", r["body_bytes"])
        out.setdefault(key, {})[r["concurrency"]] = r["per_sec"]
    return out


def svg(docs, out):
    cols = 2
    rows = max(1, math.ceil(len(docs) / cols))
    pw, ph = 460, 300
    ml, mr, mt, mb = 70, 170, 40, 45
    width, height = cols * pw, rows * ph + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
        "Deliveries per second by concurrency: sink (blue) vs raw client (red; orange: raw "
        "client encoding Message v1 per delivery, where a bench has it)</text>",
    ]
    for i, doc in enumerate(docs):
        ox, oy = (i % cols) * pw, 30 + (i // cols) * ph
        data = series(doc)
        concs = sorted({c for s in data.values() for c in s})
        if not concs:
            continue
        ymax = max(v for s in data.values() for v in s.values()) or 1.0
        # A "nice" axis top.
        mag = 10 ** math.floor(math.log10(ymax))
        top = math.ceil(ymax / mag) * mag
        x0, x1 = ox + ml, ox + pw - mr
        y0, y1 = oy + ph - mb, oy + mt

        def px(c):
            if len(concs) == 1:
                return (x0 + x1) / 2
            return x0 + (x1 - x0) * concs.index(c) / (len(concs) - 1)

        def py(v):
            return y0 - (y0 - y1) * v / top

        parts.append(f'<text x="{(x0 + x1) / 2}" y="{oy + 25}" text-anchor="middle" '
                     f'font-size="13" font-weight="bold">{doc["adapter"]}</text>')
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>')
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="black"/>')
        for k in range(6):
            v = top * k / 5
            y = py(v)
            parts.append(f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#ddd"/>')
            parts.append(f'<text x="{x0 - 5}" y="{y + 4}" text-anchor="end">{v:,.0f}</text>')
        for c in concs:
            parts.append(f'<text x="{px(c)}" y="{y0 + 15}" text-anchor="middle">{c}</text>')
        parts.append(f'<text x="{(x0 + x1) / 2}" y="{y0 + 32}" text-anchor="middle">concurrency</text>')
        legend_y = y1
        bodies = sorted({k[2] for k in data})
        variants = sorted({k[1] for k in data})
        for key in sorted(data, key=lambda k: (k[1], k[2], k[0] != "sink")):
            mode, variant, body = key
            pts = sorted(data[key].items())
            colour = MODE_COLOUR.get(mode, "#555")
            dash = "" if bodies.index(body) == 0 else ' stroke-dasharray="6,3"'
            width_ = 2 if variants.index(variant) == 0 else 1
            path = " ".join(f"{px(c):.1f},{py(v):.1f}" for c, v in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                         f'stroke-width="{width_}"{dash}/>')
            for c, v in pts:
                shape = "circle" if variants.index(variant) == 0 else "rect"
                if shape == "circle":
                    parts.append(f'<circle cx="{px(c):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>')
                else:
                    parts.append(f'<rect x="{px(c) - 3:.1f}" y="{py(v) - 3:.1f}" width="6" '
                                 f'height="6" fill="{colour}"/>')
            label = f"{mode} {size_label(body)}" + ("" if variant == "default" else f" {variant}")
            parts.append(f'<line x1="{x1 + 10}" y1="{legend_y}" x2="{x1 + 30}" y2="{legend_y}" '
                         f'stroke="{colour}" stroke-width="{width_}"{dash}/>')
            parts.append(f'<text x="{x1 + 34}" y="{legend_y + 4}">{label}</text>')
            legend_y += 15
    parts.append("</svg>")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(parts) + "\n")


def fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def table(docs, results):
    lines = [
        "| adapter | variant | conc | body | sink /s | raw /s | sink/raw | sink p50/p99 µs "
        "| raw p50/p99 µs | p99 sink/raw | req/delivery (sink, raw) | target "
        "| raw_encode /s | sink/raw_encode |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|",
    ]
    rss = []
    for doc in docs:
        runs = {}
        for r in doc["runs"]:
            runs[(r.get("variant") or "default", r["concurrency"], r["body_bytes"], r["mode"])] = r
        keys = sorted({k[:3] for k in runs})
        for variant, conc, body in keys:
            s, w = runs.get((variant, conc, body, "sink")), runs.get((variant, conc, body, "raw"))
            if not s:
                continue
            ratio = s["per_sec"] / w["per_sec"] if w and w["per_sec"] else None
            p99r = (s["p99_us"] / w["p99_us"]) if w and s.get("p99_us") and w.get("p99_us") else None
            ok = (ratio is None or ratio >= 0.95) and (p99r is None or p99r <= 1.10)
            rpd = s.get("requests_per_delivery")
            rpd_raw = w.get("requests_per_delivery") if w else None
            rpd_txt = "–" if rpd is None and rpd_raw is None else f"{fmt(rpd, 3)}, {fmt(rpd_raw, 3)}"
            e = runs.get((variant, conc, body, "raw_encode"))
            enc = (f"{fmt(e['per_sec'])} | {fmt(s['per_sec'] / e['per_sec'], 2)}"
                   if e and e["per_sec"] else "– | –")
            lines.append(
                f"| {doc['adapter']} | {variant} | {conc} | {size_label(body)} | {fmt(s['per_sec'])} "
                f"| {fmt(w['per_sec']) if w else '–'} | {fmt(ratio, 2)} "
                f"| {fmt(s.get('p50_us'))} / {fmt(s.get('p99_us'))} "
                f"| {fmt(w.get('p50_us')) if w else '–'} / {fmt(w.get('p99_us')) if w else '–'} "
                f"| {fmt(p99r, 2)} | {rpd_txt} | {'ok' if ok else 'MISS'} | {enc} |"
            )
        peak = doc.get("peak_rss_kb") or {}
        rss.append(f"| {doc['adapter']} | {fmt(peak.get('sink'))} | {fmt(peak.get('raw'))} "
                   f"| {fmt(peak.get('raw_encode'))} |")
    lines += ["", "Peak RSS (VmHWM, kB) of a process running one mode only (raw_encode: the raw "
              "client encoding each delivery's own Message v1, where the bench has that side):", "",
              "| adapter | sink | raw | raw_encode |", "|---|---:|---:|---:|"] + rss
    core = Path(results) / "core.txt"
    if core.exists():
        lines += ["", "Core (criterion, median time per operation):", "",
                  "| benchmark | median |", "|---|---:|"]
        name = None
        for line in core.read_text(errors="replace").splitlines():
            m = re.match(r"^(\S+)\s+time:\s+\[(\S+ \S+) (\S+ \S+) (\S+ \S+)\]", line)
            if m:
                lines.append(f"| {m.group(1)} | {m.group(3)} |")
                continue
            m = re.match(r"^\s+time:\s+\[(\S+ \S+) (\S+ \S+) (\S+ \S+)\]", line)
            if m and name:
                lines.append(f"| {name} | {m.group(2)} |")
                continue
            stripped = line.strip()
            name = stripped if re.fullmatch(r"[\w/.\-]+", stripped or "-") else None
    allocs = Path(results) / "allocs.txt"
    if allocs.exists():
        text = allocs.read_text(errors="replace")
        text = text[text.find("operation"):] if "operation" in text else text
        lines += ["", "Core allocations (dhat):", "", "```", text.strip(), "```"]
    return "\n".join(lines) + "\n"


def main():
    results, svg_out, table_out = sys.argv[1:4]
    docs = load(results)
    if not docs:
        print(f"no results in {results}", file=sys.stderr)
        return 1
    svg(docs, svg_out)
    text = table(docs, results)
    Path(table_out).write_text(text)
    print(text)
    print(f"wrote {svg_out} and {table_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
