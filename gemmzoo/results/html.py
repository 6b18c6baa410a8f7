"""``gemmzoo report`` and ``bench --html``: one self-contained HTML file of one or more runs.

Everything is inline (hand-written SVG, a few lines of CSS and of script for the hover tips), so
the file opens offline and can be mailed or attached to an issue. For each run: per-backend
geomean and fast_p against its baseline (:func:`gemmzoo.results.report.summaries`), a speed-up heatmap
per dtype (problems by size × backends, caller time over the baseline's), the winner of each
problem (:func:`gemmzoo.results.report.winner`, ``best_backend``'s tie rule), a roofline scatter
(achieved TFLOPS against arithmetic intensity, with the device's roof where its peak and
bandwidth are known), the statuses and conformance verdicts per backend and dtype, and the
machines that measured (the run's environment and each worker's device fingerprint). With two
runs or more, each later run beside the first, row by row, with :mod:`gemmzoo.results.compare`'s verdicts.

Every text that comes from a result file (names, commands, details, fingerprints) is escaped;
the runs were checked whole before they got here (:func:`gemmzoo.results.runs.load_run`). Hovering a
cell shows its times, noise and the command that measures it again.
"""

from __future__ import annotations

import html
import math
import shlex
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.runs import Run
from gemmzoo.scale.bench import OK, UNSUPPORTED, BenchResult

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c")
VERDICT_COLOURS = {"same": "#d9ead3", "faster": "#93c47d", "slower": "#e06666", "ambiguous": "#ffe599",
                   "broken": "#cc0000", "fixed": "#6aa84f", "missing": "#cccccc"}
CELL_W, CELL_H, LABEL_W = 86, 18, 190
_FRAMES = {"best": ' stroke="#000" stroke-width="1.5"',
           "tie": ' stroke="#000" stroke-width="1" stroke-dasharray="3 2"'}

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:32px}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:13px}code{background:#f4f4f4;padding:1px 4px}
svg{display:block;margin:8px 0}svg text{font:11px system-ui,sans-serif}
#tip{position:fixed;display:none;background:#222;color:#fff;padding:6px 8px;border-radius:4px;
font:12px/1.35 ui-monospace,monospace;white-space:pre;pointer-events:none;z-index:9;max-width:70ch}
.legend span{display:inline-block;margin-right:12px}.legend i{display:inline-block;width:12px;height:12px;
margin-right:4px;vertical-align:middle}
"""

# The only script: hover tips from data-tip (as text, never as markup), and a mark that the page
# ran to its end (the browser test reads it).
_SCRIPT = """
(function(){
var tip=document.getElementById('tip');
document.addEventListener('mouseover',function(e){var t=e.target.closest('[data-tip]');
if(!t){tip.style.display='none';return;}tip.textContent=t.getAttribute('data-tip');tip.style.display='block';});
document.addEventListener('mousemove',function(e){tip.style.left=(e.clientX+14)+'px';tip.style.top=(e.clientY+14)+'px';});
document.body.setAttribute('data-figures',String(document.querySelectorAll('svg.figure').length));
window.addEventListener('load',function(){document.body.setAttribute('data-loaded-ms',String(Math.round(performance.now())));});
})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _us(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    micro = seconds * 1e6
    return f"{micro:.3g} us" if micro < 1000 else f"{micro / 1000:.3g} ms"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _point_key(point: GridPoint) -> tuple[Any, ...]:
    return (point.flops, point.m, point.n, point.k, point.layout)


def _colours(names: Sequence[str]) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _speed_colour(ratio: float) -> str:
    """White at 1, green above (faster than the baseline), red below; saturated at 4× either way."""
    x = max(-1.0, min(1.0, math.log2(ratio) / 2)) if ratio > 0 else -1.0
    if x >= 0:
        return f"rgb({int(255 - 155 * x)},{int(255 - 55 * x)},{int(255 - 155 * x)})"
    return f"rgb({int(255 + 25 * x)},{int(255 + 155 * x)},{int(255 + 155 * x)})"


def reproduce(result: BenchResult) -> str:
    """The command that measures this one result again."""
    p = result.point
    return shlex.join(["gemmzoo", "bench", "--backend", result.backend,
                       "--shape", f"{p.m}x{p.n}x{p.k}-{p.dtype}-{p.layout}"])


def _tip(result: BenchResult, base: BenchResult | None = None) -> str:
    from gemmzoo.results.compare import noise

    p = result.point
    lines = [f"{result.backend}  {p.m}x{p.n}x{p.k} {p.dtype} {p.layout}", f"status: {result.status}"]
    if result.measurement is not None and result.status == OK:
        timing = result.measurement.timing
        lines += [f"median (device): {_us(timing.median_s)}  q1-q3: {_us(timing.q1_s)} - {_us(timing.q3_s)}",
                  f"caller: {_us(result.caller_s)}  noise (IQR/median): {_pct(noise(result))}",
                  f"samples: {timing.samples}  TFLOPS: {result.tflops:.3g}"]
        if base is not None and base.caller_s and result.caller_s:
            lines.append(f"speed-up over {base.backend}: x{base.caller_s / result.caller_s:.3g}")
    elif result.detail:
        lines.append(result.detail[:300])
    lines.append(f"reproduce: {reproduce(result)}")
    return "\n".join(lines)


def _by_dtype(results: Sequence[BenchResult]) -> dict[str, dict[GridPoint, dict[str, BenchResult]]]:
    grouped: dict[str, dict[GridPoint, dict[str, BenchResult]]] = {}
    for result in results:
        grouped.setdefault(result.point.dtype, {}).setdefault(result.point, {})[result.backend] = result
    return grouped


def _heatmap(rows: dict[GridPoint, dict[str, BenchResult]], backends: list[str], baseline: str | None) -> str:
    from gemmzoo.results.report import verdicts

    points = sorted(rows, key=_point_key)
    width, height = LABEL_W + CELL_W * len(backends) + 10, 24 + CELL_H * len(points) + 4
    out = [f'<svg class="figure heatmap" width="{width}" height="{height}" role="img">']
    for column, name in enumerate(backends):
        out.append(f'<text x="{LABEL_W + column * CELL_W + CELL_W / 2}" y="16" text-anchor="middle">'
                   f'{_e(name[:14])}</text>')
    for row, point in enumerate(points):
        y = 24 + row * CELL_H
        out.append(f'<text x="{LABEL_W - 6}" y="{y + 13}" text-anchor="end">'
                   f'{_e(f"{point.m}x{point.n}x{point.k} {point.layout}")}</text>')
        cells = rows[point]
        base = cells.get(baseline or "")
        marks = verdicts(cells)
        for column, name in enumerate(backends):
            result = cells.get(name)
            x = LABEL_W + column * CELL_W
            if result is None or result.status == UNSUPPORTED:
                out.append(f'<rect x="{x}" y="{y}" width="{CELL_W - 2}" height="{CELL_H - 2}" '
                           'fill="#f7f7f7"/>')
                continue
            if result.status != OK or not result.caller_s:
                fill, label = "#999", result.status.upper()
            elif base is not None and base.caller_s:
                ratio = base.caller_s / result.caller_s
                fill, label = _speed_colour(ratio), f"x{ratio:.2f}"
            else:
                fill, label = "#eee", _us(result.caller_s)
            stroke = _FRAMES.get(marks.get(name, ""), "")
            out.append(f'<g data-tip="{_e(_tip(result, base))}"><rect x="{x}" y="{y}" width="{CELL_W - 2}" '
                       f'height="{CELL_H - 2}" fill="{fill}"{stroke}/><text x="{x + CELL_W / 2 - 1}" '
                       f'y="{y + 13}" text-anchor="middle">{_e(label)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _winners(rows: dict[GridPoint, dict[str, BenchResult]], colours: dict[str, str]) -> str:
    from gemmzoo.results.report import winner

    points = sorted(rows, key=_point_key)
    per_line, size = 25, 26
    lines = max(1, math.ceil(len(points) / per_line))
    out = [f'<svg class="figure winners" width="{per_line * size + 4}" height="{lines * size + 4}" '
           'role="img">']
    for number, point in enumerate(points):
        best = winner(rows[point])
        x, y = 2 + (number % per_line) * size, 2 + (number // per_line) * size
        fill = colours.get(best.backend, "#999") if best is not None else "#fff"
        text = (f"{point.m}x{point.n}x{point.k} {point.dtype} {point.layout}\nwinner: "
                f"{best.backend if best else 'none conformed'}")
        if best is not None:
            text += f" ({_us(best.caller_s)} per call)\nreproduce: {reproduce(best)}"
        out.append(f'<rect data-tip="{_e(text)}" x="{x}" y="{y}" width="{size - 3}" height="{size - 3}" '
                   f'fill="{fill}" stroke="#666" stroke-width="0.5"/>')
    out.append("</svg>")
    return "".join(out)


def _legend(colours: dict[str, str]) -> str:
    return '<p class="legend">' + "".join(f'<span><i style="background:{c}"></i>{_e(n)}</span>'
                                          for n, c in colours.items()) + "</p>"


def _bandwidth(result: BenchResult, extra: dict[str, Any]) -> float | None:
    """The device's measured copy bandwidth (GB/s) the result was set against, if any."""
    if result.roof is not None and result.roof.bandwidth_gbps:
        return result.roof.bandwidth_gbps
    value = extra.get("bandwidth_gbps")  # as a result file keeps it
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _roofline(run: Run, colours: dict[str, str]) -> str:
    from gemmzoo.measure.roofline import bytes_moved

    extras = run.extras if len(run.extras) == len(run.results) else [{}] * len(run.results)
    pairs = [(r, e) for r, e in zip(run.results, extras, strict=True) if r.status == OK and r.tflops]
    timed = [r for r, _e in pairs]
    if not timed:
        return '<p class="note">No timed result: nothing to place on a roofline.</p>'
    w, h, left, bottom = 720, 380, 60, 40
    xs = [r.point.flops / bytes_moved(r.point) for r in timed]
    ys = [float(r.tflops or 0) for r in timed]
    roofs = {(r.point.dtype, r.peak_tflops, _bandwidth(r, e)) for r, e in pairs}
    roofs = {roof for roof in roofs if roof[1] and roof[2]}
    ys_all = ys + [peak for _d, peak, _b in roofs]  # type: ignore[misc]
    x0, x1 = math.log10(min(xs)) - 0.2, math.log10(max(xs)) + 0.2
    y0, y1 = math.log10(min(ys)) - 0.3, math.log10(max(ys_all)) + 0.2

    def px(v: float) -> float:
        return left + (math.log10(v) - x0) / (x1 - x0) * (w - left - 10)

    def py(v: float) -> float:
        return h - bottom - (math.log10(v) - y0) / (y1 - y0) * (h - bottom - 10)

    out = [f'<svg class="figure roofline" width="{w}" height="{h}" role="img">',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="#444"/>',
           f'<line x1="{left}" y1="10" x2="{left}" y2="{h - bottom}" stroke="#444"/>']
    for decade in range(math.ceil(x0), math.floor(x1) + 1):
        out.append(f'<text x="{px(10 ** decade)}" y="{h - bottom + 14}" text-anchor="middle">'
                   f'1e{decade}</text>')
    for decade in range(math.ceil(y0), math.floor(y1) + 1):
        out.append(f'<text x="{left - 4}" y="{py(10 ** decade) + 4}" text-anchor="end">1e{decade}</text>')
    out.append(f'<text x="{(w + left) / 2}" y="{h - 6}" text-anchor="middle">arithmetic intensity '
               "(FLOP per byte of A, B and C)</text>")
    out.append(f'<text x="14" y="{(h - bottom) / 2}" transform="rotate(-90 14 {(h - bottom) / 2})" '
               'text-anchor="middle">TFLOPS</text>')
    for dtype, peak, bandwidth in sorted(roofs, key=str):  # type: ignore[misc]
        knee = peak * 1e3 / bandwidth
        start = 10 ** x0
        pts = [(start, bandwidth * start / 1e3), (knee, peak), (10 ** x1, peak)]
        path = " ".join(f"{px(a):.1f},{py(max(b, 10 ** y0)):.1f}" for a, b in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="#888" stroke-dasharray="4 3" '
                   f'data-tip="{_e(f"roof {dtype}: peak {peak:g} TFLOPS, {bandwidth:g} GB/s")}"/>')
    for result, x, y in zip(timed, xs, ys, strict=True):
        fill = colours.get(result.backend, "#999")
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{fill}" fill-opacity="0.8" '
                   f'data-tip="{_e(_tip(result))}"/>')
    out.append("</svg>")
    if not roofs:
        out.append('<p class="note">No roof drawn: gemmzoo knows no datasheet peak or measured bandwidth for '
                   "this device (CPU runs have none).</p>")
    return "".join(out)


def _summary_table(results: Sequence[BenchResult]) -> str:
    from gemmzoo.results.report import summaries

    found = summaries(results)
    if not found:
        return ""
    rows = "".join(
        f"<tr><td>{_e(s.backend)}</td><td class=n>"
        f"{'-' if s.geomean_speedup is None else f'x{s.geomean_speedup:.3g}'}</td>"
        f"<td class=n>{_pct(s.fast_p)}</td><td class=n>{s.points}</td></tr>" for s in found)
    return (f"<table><tr><th>backend</th><th>geomean speed-up over {_e(found[0].baseline)}</th>"
            f"<th>fast_1</th><th>points</th></tr>{rows}</table>"
            '<p class="note">Caller time (what a loop of calls gets). fast_1: the share of the baseline\'s '
            "timed points where the backend is correct and at least as fast.</p>")


def _verdict_table(run: Run) -> str:
    counts: dict[tuple[str, str], dict[str, int]] = {}
    suites: dict[tuple[str, str], set[str]] = {}
    extras = run.extras if len(run.extras) == len(run.results) else [{}] * len(run.results)
    for result, extra in zip(run.results, extras, strict=True):
        key = (result.backend, result.point.dtype)
        counts.setdefault(key, {}).setdefault(result.status, 0)
        counts[key][result.status] += 1
        if isinstance(extra.get("conformance"), str):
            suites.setdefault(key, set()).add(extra["conformance"])
    statuses = ("ok", "wrong", "error", "timeout", "unsupported")
    head = "".join(f"<th>{s}</th>" for s in statuses)
    body = []
    for (backend, dtype), found in sorted(counts.items()):
        suite = ", ".join(sorted(suites.get((backend, dtype), ()))) or "-"
        bad = any(found.get(s) for s in ("wrong", "error", "timeout")) or "failed" in suite
        style = ' style="background:#f4cccc"' if bad else ""
        cells = "".join(f"<td class=n>{found.get(s, 0)}</td>" for s in statuses)
        body.append(f"<tr{style}><td>{_e(backend)}</td><td>{_e(dtype)}</td>{cells}<td>{_e(suite)}</td></tr>")
    return (f"<table><tr><th>backend</th><th>dtype</th>{head}<th>conformance suite on the worker</th></tr>"
            f"{''.join(body)}</table><p class=note>Every timed result was first checked against the float64 "
            "reference; wrong results are never shown as speeds.</p>")


def _flat(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [pair for key, inner in value.items() for pair in _flat(inner, f"{prefix}{key}.")]
    return [(prefix.rstrip("."), "" if value is None else str(value))]


def _machines(run: Run) -> str:
    rows = [(f"environment: {device}", key, text) for device, info in run.environment.items()
            for key, text in _flat(info)]
    extras = run.extras if len(run.extras) == len(run.results) else []
    seen: set[str] = set()
    for extra in extras:
        for field in ("worker_device", "gpu"):
            value = extra.get(field)
            if isinstance(value, dict):
                text = repr(sorted(_flat(value)))
                if text not in seen and len(seen) < 32:
                    seen.add(text)
                    rows += [(f"{field} {len(seen)}", key, inner) for key, inner in _flat(value)]
    body = "".join(f"<tr><td>{_e(a)}</td><td>{_e(b)}</td><td>{_e(c[:300])}</td></tr>" for a, b, c in rows)
    workers = run.meta.get("devices")
    text = ""
    if isinstance(workers, list) and workers:
        keys = sorted({k for w in workers if isinstance(w, dict) for k in w})
        text = ("<h3>Workers</h3><table><tr>" + "".join(f"<th>{_e(k)}</th>" for k in keys) + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{_e(w.get(k, ''))}</td>" for k in keys) + "</tr>"
                          for w in workers[:200] if isinstance(w, dict)) + "</table>")
    return f"<table><tr><th>where</th><th>field</th><th>value</th></tr>{body}</table>{text}"


def _run_section(number: int, label: str, run: Run) -> str:
    from gemmzoo.results.report import summaries

    backends = list(dict.fromkeys(r.backend for r in run.results))
    colours = _colours(backends)
    found = summaries(run.results)
    baseline = found[0].baseline if found else None
    parts = [f"<h2>Run {number + 1}: {_e(label)}</h2>",
             f"<p class=note>file {_e(run.path)}; created {_e(run.created or '-')}; "
             f"{len(run.results)} results</p>"]
    if run.command:
        parts.append(f"<p>command: <code>{_e(run.command)}</code></p>")
    parts += ["<h3>Per backend</h3>", _summary_table(run.results)]
    for dtype, rows in _by_dtype(run.results).items():
        parts += [f"<h3>Speed-up over {_e(baseline or '-')}, {_e(dtype)}</h3>",
                  "<p class=note>Rows: problems by size; cells: the baseline's caller time over the "
                  "backend's (green faster, red slower; a black frame marks the winner, dashed frames "
                  "backends tied within noise). Hover a cell for its times, noise and the command that "
                  "measures it again.</p>",
                  _heatmap(rows, backends, baseline),
                  f"<h3>Which backend wins where, {_e(dtype)}</h3>",
                  "<p class=note>One square per problem, smallest first, coloured by the winner (caller "
                  "time, ties to the backend best_backend would pick).</p>",
                  _legend(colours), _winners(rows, colours)]
    parts += ["<h3>Roofline</h3>", _legend(colours), _roofline(run, colours),
              "<h3>Conformance verdicts</h3>", _verdict_table(run),
              "<h3>Machine fingerprints</h3>", _machines(run)]
    return "\n".join(parts)


def _compare_section(runs: Sequence[Run], run_labels: Sequence[str], threshold: float) -> str:
    from gemmzoo.results.compare import compare_runs, summary

    rows = compare_runs(runs, threshold)
    counts = summary(rows)
    head = "".join(f"<th>{_e(label)}</th><th>verdict</th>" for label in run_labels[1:])
    body = []
    for row in rows:
        base = row.cells[0]
        cells = []
        for cell in row.cells[1:]:
            verdict = cell.verdict or ""
            tip = (f"{row.backend} {row.point.id}\nbaseline: {_us(_median(base.result))} "
                   f"noise {_pct(base.noise)}\nthis run: {_us(_median(cell.result))} noise {_pct(cell.noise)}"
                   + (f"\nchange: {100 * cell.diff:+.1f}%" if cell.diff is not None else "")
                   + (f"\nmachine: calibration x{cell.machine:.3g}" if cell.machine is not None else "")
                   + (f"\nchange relative to the machine: {100 * cell.relative_diff:+.1f}%"
                      if cell.relative_diff is not None else "")
                   + (f"\nflags: {', '.join(cell.flags)}" if cell.flags else ""))
            colour = VERDICT_COLOURS.get(verdict, "#fff")
            cells.append(f'<td class=n data-tip="{_e(tip)}">{_us(_median(cell.result))}</td>'
                         f'<td style="background:{colour}">{_e(verdict.upper())}</td>')
        p = row.point
        body.append(f"<tr><td>{_e(f'{p.m}x{p.n}x{p.k}')}</td><td>{_e(p.dtype)}</td><td>{_e(row.backend)}</td>"
                    f"<td class=n>{_us(_median(base.result))}</td>{''.join(cells)}</tr>")
    tally = ", ".join(f"{n} {v.upper()}" for v, n in sorted(counts.items())) or "nothing to compare"
    return (f"<h2>Runs side by side</h2><p>Against run 1 ({_e(run_labels[0])}), threshold "
            f"{100 * threshold:g}%: <b>{_e(tally)}</b>. The verdicts are gemmzoo compare's (device-time "
            "medians judged from both runs' noise; CPU rows that carry the machine's calibration relative "
            "to it).</p>"
            f"<table><tr><th>MxNxK</th><th>dtype</th><th>backend</th><th>{_e(run_labels[0])}</th>{head}</tr>"
            f"{''.join(body)}</table>")


def _median(result: BenchResult | None) -> float | None:
    if result is None or result.status != OK or result.measurement is None:
        return None
    return result.measurement.timing.median_s


def render(runs: Sequence[Run], title: str = "gemmzoo report", threshold: float | None = None) -> str:
    """The whole HTML page for ``runs`` (already checked: :func:`gemmzoo.results.runs.load_run`)."""
    from gemmzoo.results.compare import DEFAULT_THRESHOLD, labels

    run_labels = labels(runs)
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sections = [_run_section(i, label, run)
                for i, (label, run) in enumerate(zip(run_labels, runs, strict=True))]
    if len(runs) > 1:
        forgiven = DEFAULT_THRESHOLD if threshold is None else threshold
        sections.append(_compare_section(runs, run_labels, forgiven))
    listing = "".join(f"<li>{_e(label)} <span class=note>({_e(run.path)})</span></li>"
                      for label, run in zip(run_labels, runs, strict=True))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<style>{_STYLE}</style></head>"
            f"<body><h1>{_e(title)}</h1><p class=note>made {made} by gemmzoo report</p><ol>{listing}</ol>"
            + "\n".join(sections) + f'<div id="tip"></div><script>{_SCRIPT}</script></body></html>\n')


def write_report(runs: Sequence[Run], path: str | Path, title: str = "gemmzoo report",
                 threshold: float | None = None) -> None:
    """Write :func:`render`'s page to ``path``."""
    Path(path).write_text(render(runs, title, threshold), encoding="utf-8")
