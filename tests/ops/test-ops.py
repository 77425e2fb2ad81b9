#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-ops.py VGPUD OPENAPI_YAML FAKE_NVML PACKAGING_DIR RUNBOOK_MD
#
# The operator files of packaging/ against vgpud itself: the Prometheus alert rules and their
# promtool unit tests (a firing and a quiet case for every alert), the Grafana dashboard's
# PromQL, and the runbook sections the alerts link to (SPEC MET-2, MET-3, OPS-9). Every metric
# name an alert or a panel uses must be one that vgpud exports: the list is read from the
# /metrics of a real vgpud started here against the simulator, never kept by hand, so a renamed
# family breaks this test rather than a dashboard in production.
#
# Run by tests/sim/run-sim-test.sh (a private PID namespace with vgpu-sim mounted, SIM-21).
# The promtool checks are skipped when promtool is absent (as MET-5's are); PyYAML missing is a
# failure, since scripts/deps.sh installs it for the python3 the suite runs under.
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, finish, ok, parse_metrics, skip, start, stop, write_config, write_secret)

try:
    import yaml
except ImportError:  # python3-yaml
    yaml = None

PACKAGING, RUNBOOK = sys.argv[4], sys.argv[5]
ALERTS = os.path.join(PACKAGING, "prometheus", "vgpud-alerts.yaml")
ALERT_TESTS = os.path.join(PACKAGING, "prometheus", "vgpud-alerts.test.yaml")
DASHBOARD = os.path.join(PACKAGING, "grafana", "vgpud.json")
PROMTOOL = shutil.which("promtool")

# The one base of every alert's runbook_url: the runbook as installed with vgpud
# (docs/RUNBOOK.md, "Alerting", tells sites how to point it elsewhere).
RUNBOOK_BASE = "file:///usr/share/doc/vgpud/RUNBOOK.md#"
SEVERITIES = ("critical", "warning", "info")
ANNOTATIONS = {"summary", "description", "runbook_url"}
# Series that Prometheus writes itself for every target, and the labels its scrape adds.
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"job", "instance"}
# What Grafana puts in place of its variables, for promtool's sake.
GRAFANA_VARS = {"instance": ".*", "__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

# ---- PromQL: the metric names and label matchers of an expression ----------------------------
#
# Not a parser: promtool checks the syntax. This finds the selectors in an expression promtool
# accepts, which is all the name checks need, and it checks itself on known expressions below.

TOKEN = re.compile(r'''\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<num>[0-9][0-9a-zA-Z_.]*|\.[0-9][0-9a-zA-Z_.]*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^=<>@{}()\[\],])
)''', re.X)
# Words that are not metric names where they stand: binary operators, modifiers and literals.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Aggregations may be followed by their grouping instead of "(": `sum by (kind) (...)`.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}


def lex(expr):
    tokens, pos = [], 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise ValueError("cannot read PromQL at %r" % expr[pos:pos + 20])
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def unquote(s):
    if s[0] == "`":
        return s[1:-1]
    if s[0] == "'":
        s = '"%s"' % s[1:-1].replace("\\'", "'").replace('"', '\\"')
    return json.loads(s)


def selectors(expr):
    """([(metric name, [(label, op, value)])], {grouping labels}) of a PromQL expression."""
    toks = lex(expr)
    found, grouping = [], set()
    i = 0

    def matchers(j):
        # toks[j] is "{": returns ([(label, op, value)], index after "}").
        out = []
        j += 1
        while toks[j] != ("op", "}"):
            if toks[j] == ("op", ","):
                j += 1
                continue
            label, op, value = toks[j][1], toks[j + 1][1], unquote(toks[j + 2][1])
            out.append((label, op, value))
            j += 3
        return out, j + 1

    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "op" and text == "[":
            while toks[i] != ("op", "]"):
                i += 1
            i += 1
        elif kind == "op" and text == "{":
            m, i = matchers(i)
            names = [v for l, o, v in m if l == "__name__" and o == "="]
            found.append((names[0] if names else None, [x for x in m if x[0] != "__name__"]))
        elif kind == "ident" and text in GROUPING:
            i += 1
            if nxt == ("op", "("):
                i += 1
                while toks[i] != ("op", ")"):
                    if toks[i][0] == "ident":
                        grouping.add(toks[i][1])
                    i += 1
                i += 1
        elif kind == "ident" and (text in KEYWORDS or text in AGGREGATIONS or
                                  nxt == ("op", "(")):
            i += 1  # a function, an aggregation or an operator
        elif kind == "ident":
            if nxt == ("op", "{"):
                m, i = matchers(i + 1)
            else:
                m, i = [], i + 1
            found.append((text, m))
        else:
            i += 1
    return found, grouping


def check_extractor():
    # The name checks below are only as good as this; it must see through grouping, functions,
    # ranges, strings and operators.
    got = selectors('sum without (result) (rate(a_total{result="x", job=~"v.*"}[15m])) '
                    '/ on(instance) group_left(kind) b offset 5m > 0.1 and '
                    'max by (le) ({__name__="c", x!="y"}) or absent(up{job="sum"})')
    eq(got, ([("a_total", [("result", "=", "x"), ("job", "=~", "v.*")]), ("b", []),
              ("c", [("x", "!=", "y")]), ("up", [("job", "=", "sum")])],
             {"result", "instance", "kind", "le"}),
       "the PromQL selector finder reads names, matchers and grouping labels")


# ---- the families vgpud exports (MET-2, MET-3) -----------------------------------------------


def exported_families(work):
    """{family: {label: {values}}} from the /metrics of a real vgpud against the simulator,
    or None when it could not be read."""
    secret = write_secret(work)
    config = os.path.join(work, "vgpud.yaml")
    # A Placement URL nobody answers on: the vgpud_placement_* families exist only with one
    # set (FLEET-5), and the dashboard and rules name them too. The outage changes nothing else.
    write_config(config, work, extra_top='placement:\n  url: "http://127.0.0.1:9/"\n')
    sock = os.path.join(work, "api.sock")
    d, c = start(work, "main", config, secret, sock)
    try:
        if not c:
            return None
        c.get("/resources")
        r = c.get("/metrics")
        if not eq(r.status, 200, "MET-1: vgpud serves /metrics"):
            return None
        fams = parse_metrics(r.body.decode())
    finally:
        if c:
            stop(d)
        else:
            d.stop()
    out = {}
    for name, f in fams.items():
        labels = out.setdefault(name, {})
        for _, l, _ in f["samples"]:
            for k, v in l.items():
                labels.setdefault(k, set()).add(v)
    # parse_metrics files each sample under its own name: a sample named unlike its HELP and
    # TYPE lines would show here as a family without a type.
    eq(sorted(n for n, f in fams.items() if "type" not in f), [],
       "MET-1: every sample belongs to a family with HELP and TYPE")
    ok(len(out) >= 18, "MET-2: vgpud exports its families (%d read)" % len(out), sorted(out))
    return out


def check_names(what, expr, families, fixed_labels=True):
    """Every selector of expr names an exported family (or `up`), with labels it has and, for
    = and != matchers on vgpud's own labels, values it exports (MET-3: every fixed value exists
    from start-up, so a value missing here is a typo)."""
    sels, grouping = selectors(expr)
    problems = []
    names = set()
    for name, matchers in sels:
        if name is None:
            problems.append("a selector without a metric name")
            continue
        names.add(name)
        if name in PROMETHEUS_SERIES:
            continue
        if name not in families:
            problems.append("%s is not a family vgpud exports" % name)
            continue
        for label, op, value in matchers:
            if label in TARGET_LABELS:
                continue
            if label not in families[name]:
                problems.append("%s has no label %s" % (name, label))
            elif fixed_labels and op in ("=", "!=") and value not in families[name][label]:
                problems.append("%s{%s} has no value %r (exported: %s)"
                                % (name, label, value, sorted(families[name][label])))
    known = set(TARGET_LABELS)
    for name in names:
        known |= set(families.get(name, {}))
    problems += ["grouping by %s, which no selected family has" % l
                 for l in sorted(grouping - known)]
    ok(names and not problems, "MET-2: %s uses only what vgpud exports" % what,
       "\n".join(problems) or "no metric name found in %r" % expr)
    return names


# ---- the alert rules (OPS-9) ---------------------------------------------------------------


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def alert_rules():
    return [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"] if "alert" in r]


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def check_promtool_rules():
    name = "OPS-9: promtool check rules accepts vgpud-alerts.yaml"
    if not PROMTOOL:
        skip(name, "promtool absent")
        return
    p = promtool("check", "rules", ALERTS)
    ok(p.returncode == 0, name, p.stdout + p.stderr)
    # promtool resolves rule_files from the test file's directory.
    name = "OPS-9: promtool test rules passes vgpud-alerts.test.yaml"
    p = promtool("test", "rules", os.path.basename(ALERT_TESTS), cwd=os.path.dirname(ALERT_TESTS))
    ok(p.returncode == 0 and "SUCCESS" in p.stdout, name, p.stdout + p.stderr)


def check_rule_shape(rules):
    names = [r["alert"] for r in rules]
    eq(sorted(set(names)), sorted(names), "OPS-9: alert names are unique")
    for r in rules:
        labels, ann = r.get("labels") or {}, r.get("annotations") or {}
        ok(labels.get("severity") in SEVERITIES,
           "OPS-9: %s has a severity (%s)" % (r["alert"], "/".join(SEVERITIES)), labels)
        eq(set(ann), ANNOTATIONS, "OPS-9: %s has a summary, a description and a runbook_url"
           % r["alert"])


def check_test_coverage(rules):
    """Every alert has a firing case with its labels and annotations and a quiet case; every
    case names an alert that exists (promtool passes a quiet case for a misspelt name)."""
    tests = load_yaml(ALERT_TESTS)
    eq(tests.get("rule_files"), [os.path.basename(ALERTS)],
       "OPS-9: the unit tests load vgpud-alerts.yaml")
    by_name = {r["alert"]: r for r in rules}
    fires, quiet, unknown = {}, set(), []
    for group in tests.get("tests") or []:
        for case in group.get("alert_rule_test") or []:
            name = case.get("alertname")
            if name not in by_name:
                unknown.append(name)
            elif case.get("exp_alerts"):
                fires.setdefault(name, []).extend(case["exp_alerts"])
            else:
                quiet.add(name)
    eq(unknown, [], "OPS-9: every alert test case names an alert of vgpud-alerts.yaml")
    for name, rule in by_name.items():
        cases = fires.get(name, [])
        ok(cases, "OPS-9: %s has a unit test where it fires" % name)
        ok(name in quiet, "OPS-9: %s has a unit test where it stays quiet" % name)
        for exp in cases:
            got_labels = exp.get("exp_labels") or {}
            ok(all(got_labels.get(k) == v for k, v in (rule.get("labels") or {}).items()),
               "OPS-9: %s's firing case expects its labels" % name, got_labels)
            eq(set(exp.get("exp_annotations") or {}), set(rule.get("annotations") or {}),
               "OPS-9: %s's firing case expects its annotations" % name)


def github_anchors(path):
    """The anchors GitHub gives the headings of a Markdown file: lower case; characters other
    than letters, digits, spaces, hyphens and underscores dropped; spaces to hyphens; a repeated
    anchor gets -1, -2, ... Code blocks hold no headings."""
    anchors, seen, fence = set(), {}, False
    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if fence or not m:
                continue
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
    return anchors


def check_runbook_links(rules):
    anchors = github_anchors(RUNBOOK)
    for r in rules:
        url = (r.get("annotations") or {}).get("runbook_url", "")
        want = RUNBOOK_BASE + "alert-" + r["alert"].lower()
        eq(url, want, "OPS-9: %s's runbook_url is the runbook's section for it" % r["alert"])
        anchor = url.partition("#")[2]
        ok(anchor in anchors, "OPS-9: RUNBOOK.md has the heading of #%s" % anchor,
           sorted(a for a in anchors if a.startswith("alert")))


def check_alert_names(rules, families):
    for r in rules:
        check_names("alert %s" % r["alert"], r["expr"], families)


# ---- the dashboard (MET-2) -------------------------------------------------------------------


def dashboard_panels(dash):
    """Every panel, those inside collapsed rows included."""
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def substitute(expr, **keep):
    """The expression as Grafana sends it: $name and ${name} replaced (by keep[name] where
    given). An unknown variable raises, so a panel cannot use one the dashboard lacks."""
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_VARS:
            raise KeyError("unknown dashboard variable $%s" % name)
        return keep.get(name, GRAFANA_VARS[name])
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def check_dashboard_shape(dash):
    ok(dash.get("schemaVersion", 0) >= 36 and dash.get("uid") and dash.get("title"),
       "dashboard: a Grafana dashboard with a uid, a title and a current schemaVersion",
       {k: dash.get(k) for k in ("schemaVersion", "uid", "title")})
    tvars = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = tvars.get("datasource", {})
    ok(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
       "dashboard: a datasource variable of type prometheus", ds)
    inst = tvars.get("instance", {})
    q = inst.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    eq((inst.get("type"), q, inst.get("definition")),
       ("query", "label_values(vgpud_build_info, instance)",
        "label_values(vgpud_build_info, instance)"),
       "dashboard: the instance variable lists vgpud_build_info's instances")
    panels = [p for p in dashboard_panels(dash)]
    ids = [p.get("id") for p in panels]
    ok(all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids),
       "dashboard: every panel has its own id", ids)
    ref = {"type": "prometheus", "uid": "${datasource}"}
    wrong = [p.get("title") for p in panels if p.get("type") != "row" and
             (p.get("datasource") != ref or
              any(t.get("datasource") != ref for t in p.get("targets", [])))]
    eq(wrong, [], "dashboard: every panel and query uses the datasource variable")
    boxes = [(p.get("title"), p["gridPos"]) for p in panels]
    overlaps = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                if a[1]["x"] < b[1]["x"] + b[1]["w"] and b[1]["x"] < a[1]["x"] + a[1]["w"]
                and a[1]["y"] < b[1]["y"] + b[1]["h"] and b[1]["y"] < a[1]["y"] + a[1]["h"]]
    eq(overlaps, [], "dashboard: no two panels overlap")
    ok(all(0 <= b["x"] and b["x"] + b["w"] <= 24 for _, b in boxes),
       "dashboard: every panel fits the 24-column grid")


def dashboard_exprs(dash):
    """[(panel title, refId, expression as written)]"""
    return [(p.get("title"), t.get("refId"), t["expr"]) for p in dashboard_panels(dash)
            for t in p.get("targets", []) if "expr" in t]


def check_dashboard_promql(exprs):
    # promtool has no PromQL linter of its own in this version; each query becomes a recording
    # rule, whose expression promtool check rules parses.
    name = "MET-2: promtool parses every dashboard query (variables substituted)"
    try:
        rules = [{"record": "dashboard:query_%d" % i, "expr": substitute(e)}
                 for i, (_, _, e) in enumerate(exprs)]
    except KeyError as e:
        ok(False, name, str(e))
        return
    if not PROMTOOL:
        skip(name, "promtool absent")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="vgpud-dashboard.") as f:
        # JSON is YAML: no quoting rules of our own to get wrong.
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        f.flush()
        p = promtool("check", "rules", f.name)
    ok(p.returncode == 0 and "%d rules found" % len(rules) in p.stdout, name,
       p.stdout + p.stderr + "\n" + "\n".join("query_%d: %s / %s" % (i, t, r)
                                              for i, (t, r, _) in enumerate(exprs)))


def check_dashboard_names(dash, exprs, families):
    used = set()
    unfiltered = []
    for title, ref, e in exprs:
        try:
            used |= check_names("panel \"%s\" query %s" % (title, ref), substitute(e), families)
        except (KeyError, ValueError) as err:
            ok(False, "MET-2: panel \"%s\" query %s reads" % (title, ref), str(err))
            continue
        # The host picker applies to every query: each selector carries the instance matcher.
        marked = substitute(e, instance="$instance")
        unfiltered += ["%s/%s %s" % (title, ref, n) for n, m in selectors(marked)[0]
                       if ("instance", "=~", "$instance") not in m]
    eq(unfiltered, [], "dashboard: every selector is filtered by instance=~\"$instance\"")
    q = [v for v in dash["templating"]["list"] if v["name"] == "instance"][0]["definition"]
    m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", q)
    ok(m and m.group(1) in families, "MET-2: the instance variable's query reads an exported "
       "family", q)
    missing = sorted(set(families) - used)
    eq(missing, [], "MET-2: every family vgpud exports appears in a dashboard panel")


# ---- main ------------------------------------------------------------------------------------


def main():
    work = tempfile.mkdtemp(prefix="vgpud-ops.", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        check_extractor()
        check_promtool_rules()
        with open(DASHBOARD) as f:
            dash = json.load(f)
        check_dashboard_shape(dash)
        exprs = dashboard_exprs(dash)
        check_dashboard_promql(exprs)
        rules = None
        if yaml:
            rules = alert_rules()
            check_rule_shape(rules)
            check_test_coverage(rules)
            check_runbook_links(rules)
        else:
            ok(False, "OPS-9: PyYAML can be imported to read the alert rules and their unit tests "
               "(scripts/deps.sh installs python3-yaml)")

        families = exported_families(work)
        if families is None:
            ok(False, "MET-2: the exported families could be read from vgpud")
            return
        check_dashboard_names(dash, exprs, families)
        if rules is not None:
            check_alert_names(rules, families)
    finally:
        finish([], work)


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
