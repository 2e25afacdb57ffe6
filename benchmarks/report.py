"""Turn the workers' results into the printed tables and the markdown summary."""

from __future__ import annotations

from typing import Any

HEADERS = ["bench", "figure", "A", "B", "A/B median (min-max)", "A-B per call", "target", "met"]


def _num(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def _range(s: dict[str, float], digits: int = 1, unit: str = "") -> str:
    return (f"{_num(s['median'], digits)}{unit} "
            f"({_num(s['min'], digits)}–{_num(s['max'], digits)})")


def _ratio(s: dict[str, float]) -> str:
    return f"{s['median']:.3f}× ({s['min']:.3f}–{s['max']:.3f})"


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def _table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines)


def main_rows(results: dict[str, Any]) -> tuple[list[list[str]], list[str]]:
    rows: list[list[str]] = []
    missed: list[str] = []

    def add(bench: str, figure: str, a: str, b: str, ratio: str, added: str, target: str,
            ok: bool | None) -> None:
        rows.append([bench, figure, a, b, ratio, added, target, _met(ok)])
        if ok is False:
            missed.append(f"{bench} {figure}")

    for backend in ("tensorboard", "trackio", "wandb", "mlflow"):
        r = results.get(f"B1-{backend}")
        if not r or "error" in r:
            continue
        limit = r["target"].split("~ratio <= ")[1].rstrip(")")
        flushed = "loop + flush" if backend != "wandb" else "loop (wandb has no flush)"
        add("B1", f"{backend}: Monitor.log vs direct SDK, {flushed}",
            f"{_num(r['a_us']['median'])} µs", f"{_num(r['b_us']['median'])} µs",
            _ratio(r["ratio"]), _range(r["added_us"], 2, " µs"), f"≤{limit}×", r["pass"])
        if backend == "trackio":
            lo = r["loop_only"]
            add("B1", "trackio: loop only (enqueue; flush excluded)",
                f"{_num(lo['a_us']['median'])} µs", f"{_num(lo['b_us']['median'])} µs",
                _ratio(lo["ratio"]), _range(lo["added_us"], 2, " µs"), f"≤{limit}×",
                lo["ratio"]["median"] <= float(limit))
        cs = r.get("caller_side")
        if cs:
            add("B1", f"{backend}: caller thread only, SDK sink a no-op in both arms",
                f"{_num(cs['a_us']['median'], 2)} µs", f"{_num(cs['b_us']['median'], 2)} µs",
                _ratio(cs["ratio"]), _range(cs["added_us"], 2, " µs"), "≤3 µs added",
                r["pass_caller_side"])
    r = results.get("B2")
    if r and "error" not in r:
        add("B2", "tensorboardX add_scalar ÷ Monitor→tensorboard (speed-up)",
            f"{_num(r['tensorboardx_us_per_step']['median'])} µs/step",
            f"{_num(r['monitor_us_per_step']['median'])} µs/step",
            _ratio(r["speedup"]), "", "≥5×", r["pass"])
    r = results.get("B3")
    if r and "error" not in r:
        for batch, b in r["batches"].items():
            rate = b["monitor_scalars_per_s"]["median"]
            add("B3", f"null backend, batch {batch}: Monitor.log vs direct monitor_write "
                f"({rate / 1e6:.2f} M scalars/s)",
                f"{_num(b['monitor_ns_per_scalar']['median'], 0)} ns/scalar",
                f"{_num(b['direct_ns_per_scalar']['median'], 0)} ns/scalar",
                _ratio(b["ratio_monitor_over_direct"]),
                _range(b["added_ns_per_call"], 0, " ns"),
                "≥1 M scalars/s" if batch == "64" else "",
                r["pass"] if batch == "64" else None)
    r = results.get("B4")
    if r and "error" not in r:
        add("B4", "`monitors list` vs `python -c 'import importlib.metadata'`",
            f"{_num(r['list_ms']['median'])} ms", f"{_num(r['python_ms']['median'])} ms",
            _ratio(r["ratio"]), "", "≤1.5×", r["ratio"]["median"] <= 1.5)
        ms = r["ms"]
        add("B4", "diagnostic: entry-point scan alone (`entry_points(group=...)` + metadata) "
            "vs the same python", f"{_num(ms['scan']['median'])} ms",
            f"{_num(ms['python']['median'])} ms", _ratio(r["scan_over_python"]), "", "", None)
        slow = ", ".join(f"{name} {t:.0f}" for name, t in r["slowest_imports_ms"])
        add("B4", f"import time of `monitors list`, cumulative ms: {slow}", "", "", "", "", "",
            None)
        sdk = ", ".join(r["sdk_modules_imported"]) or "none"
        add("B4", f"SDK/plugin modules imported by `monitors list`: {sdk}; listed: "
            f"{', '.join(r['backends_listed'])}", "", "", "", "", "none",
            not r["sdk_modules_imported"] and not r["backends_missing"])
    r = results.get("B5-null")
    if r and "error" not in r:
        add("B5", f"null backend, {r['steps']:,} steps × 10: RSS growth (peak growth)",
            f"+{r['growth_mb']} MB (+{r['peak_growth_mb']} MB)", "", "", "", "≤10 MB", r["pass"])
    for backend in ("tensorboard", "trackio", "wandb"):
        r = results.get(f"B5-{backend}")
        d = results.get(f"B5-{backend}-direct")
        if not r or "error" in r:
            continue
        d = d if d and "error" not in d else None
        children = (f"; child processes' peak {r['children_peak_mb']} MB"
                    + (f" vs {d['children_peak_mb']} MB" if d else "")
                    if r["children_peak_mb"] else "")
        add("B5", f"{backend}, {r['steps']:,} steps × 10: peak RSS (growth after start), "
            f"Monitor vs direct SDK{children}",
            f"{r['peak_mb']} MB (+{r['peak_growth_mb']})",
            f"{d['peak_mb']} MB (+{d['peak_growth_mb']})" if d else "",
            f"{r['peak_mb'] / d['peak_mb']:.3f}×" if d else "", "", "", None)
    r = results.get("B7")
    if r and "error" not in r:
        for dtype, d in r["dtypes"].items():
            add("B7", f"one 64×64×3 {dtype} image per log(): caller thread (null media backend)"
                " vs tensorboard on the caller's thread (encode + write)",
                f"{_num(d['caller_us_per_image']['median'])} µs",
                f"{_num(d['tensorboard_us_per_image']['median'])} µs",
                "", _range(d["encode_and_write_us"], 1, " µs"), "", None)
    dispatch_rows(results, add)
    start_close_rows(results, add)
    outage_rows(results, add)
    return rows, missed


def dispatch_rows(results: dict[str, Any], add: Any) -> None:
    """P3, P7, start-up and the sustained rates (``p_dispatch.py``)."""
    r = results.get("P3")
    if r and "error" not in r:
        add("P3", "caller thread per log() of 10 scalars: trackio+tensorboard+wandb+mlflow, "
            f"process, vs null backend sync (p90 {_num(r['a_p90_us'], 2)} µs, "
            f"p99 {_num(r['a_p99_us'], 2)} µs)",
            f"{_num(r['a_us'], 2)} µs", f"{_num(r['b_us'], 2)} µs", "",
            f"{_num(r['added_us'], 2)} µs", "≤5 µs median", r["pass"])
    r = results.get("P3-journal")
    if r and "error" not in r:
        add("P3-journal", "caller thread per log() of 10 scalars, the four backends, process, "
            f"with the run journal vs journal=False (p99 {_num(r['a_p99_us'], 2)} µs vs "
            f"{_num(r['b_p99_us'], 2)} µs; {_num(r['bytes_per_row'], 0)} journal bytes per "
            "row)", f"{_num(r['a_us'], 2)} µs", f"{_num(r['b_us'], 2)} µs", "",
            f"{_num(r['added_us'], 2)} µs", "≤5 µs median, ≤50 µs p99", r["pass"])
        if r.get("fsync_ms"):
            add("P3-journal", "  the journal's fsync at flush() (what one arm's calls appended "
                f"since the last fsync), local disk; the whole flush() "
                f"{_num(r['flush_ms']['journal']['median'], 1)} ms",
                f"{_num(r['fsync_ms']['median'], 2)} ms", "", "", "", "", None)
        remote = r.get("remote")
        if remote:
            fsync = (f"{_num(remote['fsync_ms']['median'], 2)} ms" if remote["fsync_ms"]
                     else "not timed")
            add("P3-journal", f"  the journal in {remote['journal_dir']} (--journal-dir): "
                f"per log() (p99 {_num(remote['p99_us'], 2)} µs); its fsync at flush() "
                f"{fsync}, the whole flush() "
                f"{_num(r['flush_ms']['remote']['median'], 1)} ms",
                f"{_num(remote['us'], 2)} µs", f"{_num(r['a_us'], 2)} µs", "",
                f"{_num(remote['us'] - r['a_us'], 2)} µs", "", None)
    r = results.get("P7")
    if r and "error" not in r:
        for target, row in r["steps"].items():
            for mode in r["modes"]:
                m = row[mode]
                gate = float(target) >= 3 and mode == "process"
                add("P7", f"MLP ~{target} ms/step (width {row['width']}), 10 scalars/step to "
                    f"the four backends, {mode} vs none, until the last log(); then flush() "
                    f"{_range(m['drain_s'], 2, ' s')}, with it "
                    f"{m['with_drain']['ratio']['median']:.2f}×",
                    f"{_num(m['a_us']['median'] / 1e3, 3)} ms/step",
                    f"{_num(m['b_us']['median'] / 1e3, 3)} ms/step", _ratio(m["ratio"]),
                    _range(m["added_us"], 1, " µs"), "≤1.03×" if gate else "",
                    m["ratio"]["median"] <= 1.03 if gate else None)
        for mode, c in r["close_s"].items():
            add("P7", f"  close() of the {mode} monitor after its last flush()",
                f"{_range(c, 2, ' s')}", "", "", "", "", None)
    r = results.get("P-startup")
    if r and "error" not in r:
        for mode in ("process", "thread"):
            m = r[mode]
            add("P", f"start-up: Monitor() with the four backends, {mode}; training process "
                f"RSS {_num(m['rss_mb']['median'], 0)} MB (peak "
                f"{_num(m['peak_rss_mb']['median'], 0)} MB), descendants' peak "
                f"{_num(m['children_peak_mb']['median'], 0)} MB",
                f"{_num(m['start_s']['median'], 2)} s", "",
                _ratio(r["start_ratio"]) if mode == "process" else "", "", "", None)
    r = results.get("P-sustained")
    if r and "error" not in r:
        for backend, m in [*r["backends"].items(), ("all four", r["four"])]:
            add("P", f"sustained: rows of 10 scalars/s {backend} absorbs, process (log() "
                f"{_num(m['log_us_per_call']['median'], 1)} µs/call meanwhile)",
                f"{_range(m['rows_per_s'], 0)} rows/s", "", "", "", "", None)


def start_close_rows(results: dict[str, Any], add: Any) -> None:
    """P-start, P-close and P7-sustained (``p_start.py``, ``p_close.py``, ``p7_sustained.py``)."""
    r = results.get("P-start")
    if r and "error" not in r:
        if not r["wait_supported"]:
            add("P-start", "Monitor(wait=True): not a keyword of the installed core, left out",
                "", "", "", "", "", None)
        for name, row in r["sets"].items():
            d = row["direct"]
            for arm in r["arms"]:
                if arm == "direct":
                    continue
                m = row[arm]
                label = "Monitor(wait=True)" if arm == "monitor-wait" else "Monitor()"
                gate = arm == "monitor"
                add("P-start", f"{name}: fresh interpreter to the first log() returning, "
                    f"{label} vs the SDK's own start ({label} itself "
                    f"{_num(m['start_s']['median'], 2)} s; imports "
                    f"{_num(m['import_s']['median'], 2)}"
                    f" vs {_num(d['import_s']['median'], 2)} s; first flush() returns at "
                    f"{_num(m['flushed_s']['median'], 2)} vs {_num(d['flushed_s']['median'], 2)}"
                    f" s; close() after it {_num(m['close_s']['median'], 2)} vs "
                    f"{_num(d['close_s']['median'], 2)} s)",
                    _range(m["first_log_s"], 2, " s"), _range(d["first_log_s"], 2, " s"),
                    _ratio(m["ratio"]), "", "Monitor() ≤0.3 s" if gate else "",
                    m["start_s"]["median"] <= 0.3 if gate else None)
    r = results.get("P-close")
    if r and "error" not in r:
        for name, c in r["close_s"].items():
            add("P-close", f"{name}: close() after the last flush(), process mode",
                _range(c, 2, " s"), "", "", "", "", None)
    r = results.get("P-large")
    if r and "error" not in r:
        for size, row in r["sizes"].items():
            for what in ("caller", "drained"):
                c = row[what]
                add("P-large", f"one {size} image call, process mode, 2 writers: {what} "
                    "time, process mode (journal) vs thread mode",
                    f"{_num(c['a_us']['median'], 0)} µs", f"{_num(c['b_us']['median'], 0)} µs",
                    _range(c["ratio"], 2, "×"), "", "", None)
    r = results.get("P-host")
    if r and "error" not in r:
        for name, row in r["backends"].items():
            add("P-host", f"{name}: a writer's imports before its backend starts, fresh "
                "interpreter (now) vs fork of a host that imported them (not built)",
                _range(row["fresh_s"], 3, " s"), _range(row["fork_s"], 3, " s"),
                _ratio(row["ratio"]), "", "", None)
    r = results.get("P-warmup")
    if r and "error" not in r:
        step = r["median_step_ms"]["none"]["median"]
        for key, what in (("first_s", f"its first {r['first']} steps"),
                          ("loop_s", f"all {r['steps']:,} steps")):
            row = r[key]
            add("P-warmup", f"a loop of {step:.1f} ms steps started right after Monitor() "
                f"returns, the four writers still starting (process): {what} vs the loop "
                "unmonitored, fresh interpreters",
                _range(row["monitor"], 2, " s"), _range(row["none"], 2, " s"),
                _ratio(row["ratio"]), "", "", None)
    r = results.get("P7-system")
    if r and "error" not in r:
        cost = r["sampler_cpu_ms_per_sample"]
        for target, row in r["steps"].items():
            on, off = row["on_vs_off"], row["off"]
            add("P7-sys", f"MLP ~{target} ms/step, 10 scalars/step to the four (process), "
                f"system_metrics=1 vs off (off vs none {off['ratio']['median']:.2f}×); the "
                f"sampler process: {_range(cost, 1, ' ms')} CPU per sample",
                f"{_num(on['a_us']['median'] / 1e3, 3)} ms/step",
                f"{_num(on['b_us']['median'] / 1e3, 3)} ms/step", _ratio(on["ratio"]),
                _range(on["added_us"], 1, " µs"), r["target"], bool(r["pass"]))
    r = results.get("P7-sustained")
    if r and "error" not in r:
        for target, row in r["step_ms"].items():
            m, w = row["process"], row["with_drain"]
            cpu = ", ".join(f"{b} {_num(c['median'], 0)}"
                            for b, c in row["writer_cpu_us_per_row"].items())
            bound = (f"; bound by {row['bound_by']} (≤ {_num(row['bound_rows_per_s'], 0)} "
                     "rows/s on a free core)" if "bound_by" in row else "")
            add("P7-sust", f"MLP ~{target} ms/step, {r['steps']:,} steps of 10 scalars to the "
                f"four, process vs none, until the last log(); then flush() "
                f"{_range(row['drain_s'], 2, ' s')}, with it {w['ratio']['median']:.2f}×; "
                f"writer CPU µs/row: {cpu}{bound}",
                f"{_num(m['a_us']['median'] / 1e3, 3)} ms/step",
                f"{_num(m['b_us']['median'] / 1e3, 3)} ms/step", _ratio(m["ratio"]),
                _range(m["added_us"], 1, " µs"), "", None)


def outage_rows(results: dict[str, Any], add: Any) -> None:
    """P-outage (``p_outage.py``): a sweep against an MLflow server that is down a while."""
    r = results.get("P-outage")
    if not r or "error" in r:
        return
    if "skipped" in r:
        add("P-outage", f"skipped: {r['skipped']}", "", "", "", "", "", None)
        return
    lag = r["lag_s"]
    add("P-outage", f"{r['workload']}: rows lost / duplicated of {r['rows_expected']:,}, "
        "read back from the server", f"{r['rows_lost']} / {r['rows_duplicated']}", "", "", "",
        "0 / 0", r["rows_lost"] == 0 and r["rows_duplicated"] == 0)
    add("P-outage", "median step time per trainer: while the server is down or starting vs "
        f"before (after vs before: {_ratio(r['after_over_before'])}; longest log() "
        f"{_num(r['log_max_ms'], 2)} ms)", _range(r["step_ms"]["during"], 2, " ms"),
        _range(r["step_ms"]["before"], 2, " ms"), _ratio(r["during_over_before"]), "",
        "≤1.05× every trainer", r["during_over_before"]["max"] <= 1.05)
    for period in ("before", "during", "catching_up", "caught_up"):
        if period not in r["step_ms"]:
            continue
        step, log, cores = r["step_ms"][period], r["log_median_us"][period], r["cores"][period]
        used = ", ".join(f"{name} {value:.2f}" for name, value in cores.items())
        add("P-outage", f"{period.replace('_', ' ')}: median step time; median log(); cores "
            f"busy: {used}", _range(step, 2, " ms"), _range(log, 0, " µs"), "", "", "", None)
    add("P-outage", "delivery lag: seconds from the server answering again until it holds "
        "every step begun before" + (f" ({r['lag_unknown']} trainer(s) never did)"
                                     if r["lag_unknown"] else ""),
        _range(lag, 1, " s") if lag else "", "", "", "", "", None)


def scale_rows(r: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    sizes = next(iter(r["us_per_call"].values())).keys()
    headers = ["backends", *(f"{n} scalar{'s' if n != '1' else ''}/call (µs)" for n in sizes)]
    rows = []
    for backends, cells in r["us_per_call"].items():
        rows.append([backends.replace("+", " + "),
                     *(_range(cells[n], 1) for n in sizes)])
    return headers, rows


def profile_sections(r: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    out = []
    parts = [[k, _num(v, 0)] for k, v in r["parts_ns"].items()]
    out.append(("Monitor.log, 8 scalars, null backend: where one call's time goes",
                ["part", "ns"], parts))
    for key, title in (("cprofile_null", "cProfile, null backend (top by own time)"),
                       ("cprofile_tensorboard", "cProfile, tensorboard backend")):
        rows = [[p["function"], str(p["calls"]), f"{p['share'] * 100:.0f}%"] for p in r[key]]
        out.append((title, ["function", "calls", "own time"], rows))
    return out


def render(results: dict[str, Any], meta: dict[str, Any]) -> tuple[str, str, list[str]]:
    rows, missed = main_rows(results)
    text: list[str] = []
    md: list[str] = [
        f"## Benchmark results ({meta['mode']}, {meta['date']})", "",
        f"Python {meta['python']}, {meta['cpus']} CPUs, {meta['platform']}; "
        f"run took {meta['total_seconds']} s. A figure is the median of per-repetition ratios, "
        "A and B alternating in one process; (min–max) over repetitions. Rerun: "
        f"`nox -s bench`{' -- --quick' if meta['mode'] == 'quick' else ''}.", "",
    ]
    text.append(_table(HEADERS, rows, markdown=False))
    md.append(_table(HEADERS, rows, markdown=True))
    sections = []
    if "B6" in results and "error" not in results["B6"]:
        headers, scale = scale_rows(results["B6"])
        sections.append(("B6: µs per Monitor.log call (median (min–max)), incl. flush",
                         headers, scale))
    if "profile" in results and "error" not in results["profile"]:
        sections += profile_sections(results["profile"])
    for title, headers, body in sections:
        text += ["", title, _table(headers, body, markdown=False)]
        md += ["", f"**{title}**", "", _table(headers, body, markdown=True)]
    failed = [f"{job}: {r['error']}" for job, r in results.items() if "error" in r]
    if failed:
        text += ["", "FAILED: " + "; ".join(failed)]
        md += ["", "**FAILED:** " + "; ".join(failed)]
    md += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v)]
    return "\n".join(text), "\n".join(md) + "\n", missed
