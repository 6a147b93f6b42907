#!/usr/bin/env python3
"""Tables the mutating calls of the shared provider scenarios, before against after.

Reads two JSON-lines files written by the scenario table's recorder
(tests/integration/provider_scenarios/record.rs, `KUBE_LB_SCENARIO_CALLS=<path>`), one per
tree, and prints a summary per cloud, a table of scenarios (their steps added up) by cloud,
then one Markdown table per cloud: scenario, step, the provider's mutating calls
before and after, the delta, and the mock journal's count of mutating requests where the mock
keeps one. A step whose calls went up is flagged `MORE` and listed again at the end, with
every scenario whose steps add up to more.

Usage: scripts/scenario-calls-diff.py BEFORE.jsonl AFTER.jsonl [--all] [--ops]
  --all   also print steps that made no mutating call on either side (no-op resyncs, repeated
          deletes); by default they are counted in the summary only
  --ops   add a column with the operations of every step whose operations changed

Exit status: 0 when no step has more calls after, 1 when one has, 2 on bad input.
"""

import json
import sys
from collections import defaultdict


def load(path):
    """{(cloud, scenario, step): record}, the last record kept if a scenario ran twice."""
    rows = {}
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    rows[(r["cloud"], r["scenario"], int(r["step"]))] = r
                except (ValueError, KeyError) as e:
                    sys.exit(f"{path}:{number}: not a scenario record: {e}")
    except OSError as e:
        sys.exit(f"{path}: {e}")
    return rows


def seen(r):
    if r is None or r.get("seen_by_cloud") is None:
        return "–"
    return str(r["seen_by_cloud"])


def ops(r):
    if r is None:
        return "–"
    return ", ".join(f"{op}×{n}" if n > 1 else op for op, n in sorted(r["calls"].items())) or "none"


def main(argv):
    flags = {a for a in argv if a.startswith("--")}
    paths = [a for a in argv if not a.startswith("--")]
    if len(paths) != 2 or flags - {"--all", "--ops"}:
        print(__doc__, file=sys.stderr)
        return 2
    before, after = load(paths[0]), load(paths[1])
    keys = sorted(set(before) | set(after))
    clouds = defaultdict(list)
    for key in keys:
        clouds[key[0]].append(key)

    more, missing = [], []
    print("| cloud | steps | before | after | delta | steps fewer | steps more | not on both sides |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    summary = []
    for cloud, cloud_keys in sorted(clouds.items()):
        b = sum(before[k]["total"] for k in cloud_keys if k in before)
        a = sum(after[k]["total"] for k in cloud_keys if k in after)
        both = [k for k in cloud_keys if k in before and k in after]
        fewer = sum(1 for k in both if after[k]["total"] < before[k]["total"])
        up = sum(1 for k in both if after[k]["total"] > before[k]["total"])
        one_side = len(cloud_keys) - len(both)
        summary.append(f"| {cloud} | {len(cloud_keys)} | {b} | {a} | {a - b:+d} | {fewer} | {up} | {one_side} |")
    print("\n".join(summary))

    # Per scenario, its steps added up: one row a scenario, one column a cloud.
    names = sorted({k[1] for k in keys})
    print("\n| scenario | " + " | ".join(sorted(clouds)) + " |")
    print("|---|" + "---:|" * len(clouds))
    for name in names:
        cells = []
        for cloud in sorted(clouds):
            ks = [k for k in clouds[cloud] if k[1] == name]
            if not ks:
                cells.append("–")
                continue
            b = sum(before[k]["total"] for k in ks if k in before)
            a = sum(after[k]["total"] for k in ks if k in after)
            cells.append(f"{b} → {a}" + (" **MORE**" if a > b else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")

    for cloud, cloud_keys in sorted(clouds.items()):
        print(f"\n### {cloud}\n")
        header = "| scenario | step | before | after | delta | mock saw (before → after) |"
        rule = "|---|---|---:|---:|---:|---|"
        if "--ops" in flags:
            header += " operations (before → after) |"
            rule += "---|"
        print(header)
        print(rule)
        hidden = 0
        for key in cloud_keys:
            b, a = before.get(key), after.get(key)
            label = (a or b)["label"]
            if b is not None and a is not None and b["label"] != a["label"]:
                label = f"{b['label']} / {a['label']}"
            if b is None or a is None:
                missing.append(key)
            bt = "–" if b is None else b["total"]
            at = "–" if a is None else a["total"]
            if b is not None and a is not None:
                delta = a["total"] - b["total"]
                mark = f"{delta:+d}" if delta else "0"
                if delta > 0:
                    mark += " **MORE**"
                    more.append((key, label, b["total"], a["total"]))
            else:
                delta, mark = None, "n/a"
            if "--all" not in flags and bt in (0, "–") and at in (0, "–") and b and a:
                hidden += 1
                continue
            row = f"| {key[1]} | {key[2]} {label} | {bt} | {at} | {mark} | {seen(b)} → {seen(a)} |"
            if "--ops" in flags:
                changed = b is None or a is None or b["calls"] != a["calls"]
                row += f" {ops(b) + ' → ' + ops(a) if changed else ''} |"
            print(row)
        if hidden:
            print(f"\n{hidden} more steps made no mutating call before or after (no-op resyncs, repeated deletes).")

    print()
    if missing:
        print(f"Steps recorded on one side only: {len(missing)}")
        for cloud, scenario, step in missing:
            side = "before" if (cloud, scenario, step) in before else "after"
            print(f"  {cloud} {scenario} step {step}: {side} only")
    totals = defaultdict(lambda: [0, 0])
    for key in keys:
        if key in before and key in after:
            totals[key[:2]][0] += before[key]["total"]
            totals[key[:2]][1] += after[key]["total"]
    scenarios_up = [(k, b, a) for k, (b, a) in sorted(totals.items()) if a > b]
    if scenarios_up:
        print(f"Scenarios with MORE mutating calls after than before, over their steps: {len(scenarios_up)}")
        for (cloud, scenario), b, a in scenarios_up:
            print(f"  {cloud} {scenario}: {b} → {a}")
    if more:
        print(f"Steps with MORE mutating calls after than before: {len(more)}")
        for (cloud, scenario, step), label, b, a in more:
            print(f"  {cloud} {scenario} step {step} ({label}): {b} → {a}")
    reshaped = [k for k in keys if k in before and k in after
                and before[k]["total"] == after[k]["total"] and before[k]["calls"] != after[k]["calls"]]
    print(f"Steps with the same count but other operations: {len(reshaped)}")
    for cloud, scenario, step in reshaped:
        print(f"  {cloud} {scenario} step {step}: {ops(before[(cloud, scenario, step)])} → {ops(after[(cloud, scenario, step)])}")
    if more or scenarios_up:
        return 1
    print("No step has more mutating calls after than before.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
