"""The report page's style sheet, inlined into every page (the page loads nothing)."""

CSS = """
:root { --ink:#1d2330; --muted:#5b6475; --line:#d9dde5; --bg:#f6f7f9; --card:#fff;
  --clean:#cfead9; --dup:#f8d08a; --missing:#f3a89c; --both:#d8b6e8; --held:#c8d6ea; --fail:#b3001b; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; }
main { max-width:1120px; margin:0 auto; padding:24px 28px 64px; }
header h1 { font-size:24px; margin:0 0 8px; }
nav { display:flex; flex-wrap:wrap; gap:8px; margin-bottom:8px; }
nav a { color:var(--ink); text-decoration:none; background:var(--card); border:1px solid var(--line);
  padding:4px 12px; border-radius:999px; font-size:13px; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:18px 22px;
  margin:20px 0; }
h2 { font-size:19px; margin:0 0 12px; }
h3 { font-size:16px; margin:18px 0 10px; }
h4 { font-size:14px; margin:16px 0 6px; font-family:ui-monospace,Menlo,Consolas,monospace; }
.note { color:var(--muted); margin:6px 0 12px; }
.run-head { display:flex; align-items:flex-start; gap:22px; flex-wrap:wrap; }
.facts { display:grid; grid-template-columns:auto auto auto auto auto auto; gap:2px 14px; margin:0; }
.facts dt { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.facts dd { margin:0 0 6px; font-variant-numeric:tabular-nums; }
.facts { grid-auto-flow:column; grid-template-rows:auto auto; }
.badge { font-weight:700; padding:6px 14px; border-radius:8px; font-size:15px; text-transform:uppercase; }
.badge.verdict-pass { background:var(--clean); color:#0b5131; }
.badge.verdict-fail { background:var(--fail); color:#fff; }
.badge.verdict-incomplete { background:var(--held); color:var(--ink); }
details.per-cell > summary { font-weight:600; color:var(--ink); margin:14px 0 6px; }
details.meta { display:inline-block; vertical-align:top; margin:12px 18px 0 0; }
details > summary { cursor:pointer; color:var(--muted); }
table { border-collapse:collapse; font-variant-numeric:tabular-nums; }
table.kv th, table.kv td, table.stats th, table.stats td, table.compare th, table.compare td,
table.held td, table.held th, table.events td, table.events th {
  border-bottom:1px solid var(--line); padding:3px 10px; text-align:left; font-size:13px; }
table.stats td, table.compare td { text-align:right; }
table.stats td:first-child { text-align:left; }
table.stats th:not(:first-child), table.compare th:not(:first-child) { text-align:right; }
.group { border-top:1px solid var(--line); padding-top:4px; margin-top:10px; }
.group-body { display:flex; gap:28px; align-items:flex-start; flex-wrap:wrap; }
table.heatmap caption { caption-side:bottom; font-size:12px; color:var(--muted); padding-top:4px; }
table.heatmap th { font-size:13px; font-weight:600; padding:4px 8px; text-align:left; color:var(--muted); }
table.heatmap th[scope=col] { text-align:center; }
table.heatmap td.cell { width:118px; height:50px; text-align:center; border:3px solid var(--card);
  border-radius:8px; padding:4px; font-variant-numeric:tabular-nums; }
td.cell a { color:inherit; text-decoration:none; display:block; }
td.cell .nums { display:block; font-weight:600; font-size:15px; }
td.cell .marks, td.cell .differs { display:block; font-size:11px; }
td.cell .differs { color:var(--fail); font-weight:700; text-transform:uppercase; letter-spacing:.05em; }
td.cell .expected { display:block; font-size:11px; color:var(--muted); font-style:italic; }
.outcome-clean { background:var(--clean); } .outcome-duplicates { background:var(--dup); }
.outcome-missing { background:var(--missing); } .outcome-both { background:var(--both); }
.outcome-held { background:var(--held); }
td.cell.verdict-fail { border-color:var(--fail); }
table.heatmap td.absent { color:var(--muted); text-align:center; }
.heat-legend { display:flex; gap:8px; flex-wrap:wrap; margin-bottom:8px; }
.chip { font-size:12px; padding:2px 10px; border-radius:6px; }
.chip.verdict-fail { border:2px solid var(--fail); color:var(--fail); }
pre.text-table { background:var(--bg); border-radius:8px; padding:10px 14px; margin:0; font-size:12.5px;
  line-height:1.45; overflow-x:auto; }
pre.terminal { background:var(--bg); border-radius:8px; padding:10px 14px; margin:0 0 12px; font-size:12.5px;
  line-height:1.45; white-space:pre-wrap; overflow-wrap:anywhere; }
pre.terminal .replay { font-weight:700; }
p.unconfirmed { color:var(--fail); font-weight:700; }
details.phase { border-top:1px solid var(--line); padding:6px 0; }
details.phase > summary { font-weight:600; color:var(--ink); }
table.trials td, table.trials th { border-bottom:1px solid var(--line); padding:3px 10px; text-align:left;
  font-size:13px; }
table.trials tr.verdict-fail td { color:var(--fail); }
table.trials tr.counterexample td { font-weight:700; }
ul.way-there { font-size:13.5px; }
.failure { border-left:4px solid var(--fail); padding:2px 0 8px 16px; margin:12px 0 22px; }
.finding { border-left:4px solid var(--held); padding:2px 0 8px 16px; margin:12px 0 22px; }
p.verdict-words { margin:2px 0 6px; font-weight:600; }
ul.summary li { font-size:15px; margin:4px 0; }
ul.ops { font-family:ui-monospace,Menlo,Consolas,monospace; font-size:12.5px; padding-left:18px; }
ul.ops li.op-duplicated, ul.ops li.op-missing { color:var(--fail); }
ul.differences li { color:var(--fail); font-weight:600; }
table.compare tr.differs td { color:var(--fail); font-weight:700; }
details.cell-timelines { border-top:1px solid var(--line); padding:8px 0; }
details.cell-timelines > summary { font-weight:600; color:var(--ink); font-size:15px; }
summary .count { font-weight:400; color:var(--muted); margin-left:12px; font-size:13px; }
figure { margin:14px 0 18px; }
figcaption { font-size:13px; margin-bottom:4px; }
.plot { overflow-x:auto; }
.plot svg { max-width:100%; height:auto; }
details.events-list summary { font-size:12px; }
table.events td { font-size:12px; padding:1px 8px; }
table.events td:first-child { text-align:right; font-variant-numeric:tabular-nums; }
tr.ev-killed td { color:var(--fail); }
svg text { font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif; }
svg .lane-bg { fill:#f3f5f8; stroke:#fff; stroke-width:2; }
svg .lane-name { font-size:12px; font-weight:600; fill:var(--ink); }
svg .grid { stroke:#e3e6ec; stroke-width:1; }
svg .axis { stroke:#9aa2b1; stroke-width:1; }
svg .tick { font-size:11px; fill:var(--muted); }
svg .caption, svg .legend-text { font-size:11.5px; fill:var(--muted); }
svg .dot { fill:#0072B2; fill-opacity:.6; }
svg .strip.requeue .dot { fill:#CC79A7; }
svg .stat { stroke:var(--ink); stroke-width:1.5; }
svg .stat.p99, svg .stat.max { stroke-dasharray:4 3; }
svg .series-line { fill:none; stroke-width:2; }
svg line[stroke] { stroke-width:3; }
.legend { display:flex; flex-wrap:wrap; gap:6px 18px; margin:4px 0 10px; font-size:12.5px; color:var(--muted); }
.legend-item { display:inline-flex; align-items:center; gap:6px; }
svg .stat-label { font-size:11px; fill:var(--ink); paint-order:stroke; stroke:#fff; stroke-width:3px;
  stroke-linejoin:round; }
details.timeline-group { border-top:1px solid var(--line); padding:6px 0; }
details.timeline-group > summary { font-weight:600; color:var(--ink); }
details.timeline-group > details.cell-timelines { margin-left:16px; }
details.op-events > summary { font-size:13px; }
details.op-events details.events-list { margin-left:16px; }
.legend .chip { color:var(--ink); }
/* a cell's timeline: rows coloured by outcome, three tracks each (cells.py) */
.op-outcome-once, svg .outcome-once .op-chip { background:var(--clean); fill:var(--clean); }
.op-outcome-duplicated, svg .outcome-duplicated .op-chip { background:var(--dup); fill:var(--dup); }
.op-outcome-missing, svg .outcome-missing .op-chip { background:var(--missing); fill:var(--missing); }
.op-outcome-held, svg .outcome-held .op-chip { background:var(--held); fill:var(--held); }
.op-outcome-declined, svg .outcome-declined .op-chip { background:#dcdfe5; fill:#dcdfe5; }
.op-outcome-unknown, svg .outcome-unknown .op-chip, svg .outcome-none .op-chip { background:#eef0f3; fill:#eef0f3; }
svg .row-band { fill:#f6f7f9; }
svg .outcome-once .row-band { fill:#eef8f2; } svg .outcome-duplicated .row-band { fill:#fdf3e1; }
svg .outcome-missing .row-band { fill:#fcebe8; } svg .outcome-held .row-band { fill:#edf2f9; }
svg .op-name { font:11.5px ui-monospace,Menlo,Consolas,monospace; fill:var(--ink); }
svg .op-outcome { font-size:10.5px; font-weight:700; fill:var(--ink); }
svg .attempt rect { fill:#0072B2; }
svg .attempt.replay rect { fill:#009E73; }
svg .attempt.open rect { opacity:.45; }
svg .span.queued line { stroke:#CC79A7; stroke-width:1.6; stroke-dasharray:3 2; }
svg .span.cut rect { fill:#6b7280; opacity:.3; }
svg .span.provider-down rect { fill:#7b2d8e; opacity:.25; }
svg .mark.kill path, svg .mark.kill-worker path { stroke:#D55E00; stroke-width:2.4; }
svg .mark.kill-worker rect { fill:none; stroke:#D55E00; stroke-width:1.2; }
svg .mark.provider-kill path { stroke:#7b2d8e; stroke-width:2.4; }
svg .mark.hit path { fill:#E69F00; stroke:#fff; stroke-width:.8; }
svg .mark.timeout rect { fill:#F0E442; stroke:#8c7a00; }
svg .mark.nemesis rect { fill:var(--ink); }
svg .mark.restart path { fill:#009E73; }
svg .mark.requeue circle { fill:#CC79A7; }
svg .mark.effect circle { fill:var(--ink); stroke:#fff; stroke-width:1; }
svg .mark.withdrawn circle { fill:#fff; stroke:var(--ink); stroke-width:1.4; }
svg .mark.withdrawn path { stroke:var(--ink); stroke-width:1.4; }
"""
