#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The man pages stay in step with the programs (OPS-5, OPS-6, OPS-7, OPS-8, CFG-3,
# AGENT-1). Prints TAP.
#
#  - every page passes `mandoc -T lint -W warning` with no message at all;
#  - every option and command that vgpud, vgpuctl and vgpu-agent print in --help (vgpud's
#    subcommands in their own --help too) is in the program's page, and every option a page
#    names is one its program prints and accepts, so an option removed from a program fails;
#  - vgpud.yaml(5) has an entry for every key of packaging/vgpud.yaml and of the configuration
#    parser, which the test learns from the daemon itself (vgpud --check-config prints every key
#    the parser's table holds, and --set of each of them is accepted while an unknown key is
#    refused), and every key entry it has is a key the parser accepts;
#  - meson install puts the pages under <mandir>/man{1,5,8}/, vgpu-agent's (and the agent) only
#    with -Dagent=true.
#
# Usage: test-man.py SOURCE_ROOT BUILD_ROOT VGPUD VGPUCTL VGPU_AGENT MESON [MANDOC]
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import eq, exit_status, ok, plan, run_group, skip  # noqa: E402

if len(sys.argv) not in (7, 8):
    sys.exit("usage: test-man.py SOURCE_ROOT BUILD_ROOT VGPUD VGPUCTL VGPU_AGENT MESON [MANDOC]")
SOURCE_ROOT, BUILD_ROOT, VGPUD, VGPUCTL, VGPU_AGENT, MESON = sys.argv[1:7]
MANDOC = sys.argv[7] if len(sys.argv) == 8 and sys.argv[7] else None

DOCS = os.path.join(SOURCE_ROOT, "docs")
PAGES = {"vgpuctl.1": VGPUCTL, "vgpud.8": VGPUD, "vgpu-agent.8": VGPU_AGENT, "vgpud.yaml.5": None}
# The type names vgpud.yaml(5) describes in tagged paragraphs of its own, besides the keys.
YAML_TYPE_TAGS = {"integer", "boolean", "duration", "string", "mode", "list"}

OPTION_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


# What the programs read (vgpuctl's defaults, the service manager's sockets) stays out of their
# runs; the rest (PATH, the sanitizers' options) is passed on.
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("VGPUD_", "NOTIFY_", "WATCHDOG_", "JOURNAL_"))}


def run(argv, timeout=60):
    """(exit status, stdout, stderr) of argv."""
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout, env=ENV)
    return p.returncode, p.stdout, p.stderr


# ---- roff source as text -------------------------------------------------------------------

def roff_text(line):
    """A roff line as the words it shows: the macro name and argument quotes dropped, font and
    character escapes resolved (\\fB, \\-, \\(dq, \\e, \\&), so that "\\-\\-check\\-config"
    reads "--check-config"."""
    if line.startswith("."):
        line = re.sub(r"^\.\s*[A-Za-z]+\s?", "", line).replace('"', " ")
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    line = re.sub(r"\\s[+-]?\d", "", line)
    for esc, ch in (("\\-", "-"), ("\\(dq", '"'), ("\\(->", "->"), ("\\(<-", "<-"),
                    ("\\(bu", "*"), ("\\&", ""), ("\\e", "\\"), ("\\ ", " ")):
        line = line.replace(esc, ch)
    return line


def read_page(name):
    """(the page's text as one string with single spaces, its tagged-paragraph tags) from the
    roff source. Comment lines and trailing backslash continuations are handled first."""
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        src = f.read()
    src = re.sub(r"\\\n", " ", src)
    lines = [ln for ln in src.split("\n") if not ln.startswith('.\\"')]
    text = " ".join(roff_text(ln) for ln in lines)
    tags = []
    for i, ln in enumerate(lines[:-1]):
        if re.match(r"^\.(TP|TQ)\b", ln):
            tags.append(" ".join(roff_text(lines[i + 1]).split()))
    return " ".join(text.split()), tags


def has_option(text, opt):
    return re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", text) is not None


def has_words(text, words):
    return re.search(r"(?<![\w-])" + re.escape(words) + r"(?![\w-])", text) is not None


# ---- what --help prints --------------------------------------------------------------------

def help_options(out):
    """{option: sample value or None} for every --option in a --help text. The value is what the
    option is given when the test makes the program parse it: from the metavariable printed after
    it (PATH, D, N, auto|on|off, KEY=VALUE)."""
    opts = {}
    for m in re.finditer(r"(?<![\w-])(--[a-z][a-z0-9-]*)(=| )?([^\s,\]]*)", out):
        opt, sep, meta = m.group(1), m.group(2), m.group(3)
        if opts.get(opt) is not None:
            continue
        opts[opt] = sample_value(meta) if sep and meta and not meta.startswith("-") else None
    return opts


def sample_value(meta):
    if "|" in meta:
        return meta.split("|")[0]
    if meta == "D":
        return "1s"
    if meta == "N":
        return "2"
    if meta == "KEY=VALUE":
        return "log_level=info"
    if re.fullmatch(r"[A-Z][A-Z_]*", meta):
        return "/nonexistent"
    return None


def help_of(argv):
    rc, out, err = run(argv + ["--help"])
    ok(rc == 0 and out.strip() != "", "%s --help prints its usage and exits 0"
       % " ".join([os.path.basename(argv[0])] + argv[1:]), "rc=%d\n%s%s" % (rc, out, err))
    return out


def check_accepted(argv, opt, value, label):
    """OPS-5: the program parses opt (with a value when it takes one): `argv opt [value] --help`
    exits 0, where an unknown option exits 2."""
    args = argv + [opt] + ([value] if value is not None else []) + ["--help"]
    rc, out, err = run(args)
    ok(rc == 0, "%s: %s accepts %s" % (label, os.path.basename(argv[0]) + "".join(
        " " + a for a in argv[1:]), opt), "rc=%d\n%s" % (rc, err))


def check_program(page, argv_base, helps, commands, label):
    """helps: [(argv prefix, --help text)]; commands: the command words --help printed."""
    text, _ = read_page(page)
    printed = {}
    # A subcommand's options are tried on the subcommand, whose own --help comes after the
    # program's in helps.
    for argv, out in reversed(helps):
        for opt, value in help_options(out).items():
            printed.setdefault(opt, (argv, value))
    for opt in sorted(printed):
        ok(has_option(text, opt), "%s: %s of --help is in %s" % (label, opt, page))
    for words in commands:
        ok(has_words(text, words), "%s: command \"%s\" of --help is in %s" % (label, words, page))
    # The reverse: a page may only name options its program has.
    documented = sorted(set(OPTION_RE.findall(text)))
    ok(documented != [], "%s: %s names options" % (label, page))
    for opt in documented:
        ok(opt in printed, "%s: %s in %s is printed by --help" % (label, opt, page),
           "printed: %s" % " ".join(sorted(printed)))
    for opt in documented:
        if opt in printed and opt != "--help":
            argv, value = printed[opt]
            check_accepted(argv, opt, value, label)
    for argv, _ in helps:
        rc, _, _ = run(argv + ["--no-such-option", "--help"])
        eq(rc, 2, "%s: %s refuses an unknown option (exit 2), so the checks above mean something"
           % (label, " ".join([os.path.basename(argv[0])] + argv[1:])))


def test_lint():
    """OPS-5: the pages are lint-clean: no error, warning or style message under -W warning."""
    for page in PAGES:
        path = os.path.join(DOCS, page)
        if not MANDOC:
            skip("OPS-5: mandoc -T lint -W warning %s" % page,
                 "mandoc not installed (scripts/deps.sh installs it)")
            continue
        rc, out, err = run([MANDOC, "-T", "lint", "-W", "warning", path])
        ok(rc == 0 and not out.strip() and not err.strip(),
           "OPS-5: mandoc -T lint -W warning %s reports nothing" % page,
           "rc=%d\n%s%s" % (rc, out, err))


def test_vgpud():
    """OPS-5: vgpud(8) has every option and subcommand of vgpud --help and of each subcommand's
    --help, and no option vgpud does not have."""
    main = help_of([VGPUD])
    commands = sorted(set(re.findall(r"^\s*(?:usage:\s+)?vgpud ([a-z][a-z-]*)", main, re.M)))
    ok(commands != [], "OPS-5: vgpud --help names its subcommands", main)
    helps = [([VGPUD], main)] + [([VGPUD, c], help_of([VGPUD, c])) for c in commands]
    check_program("vgpud.8", [VGPUD], helps, commands, "OPS-5 vgpud")


def test_vgpuctl():
    """OPS-6, OPS-7: vgpuctl(1) has every option and command of vgpuctl --help."""
    out = help_of([VGPUCTL])
    section = out.split("Commands:", 1)[-1].split("Options:", 1)[0]
    commands = re.findall(r"^  ([a-z][a-z-]*(?: [a-z][a-z-]*)*)", section, re.M)
    # OPS-7's list, so that a --help that lost its command section cannot pass by printing none.
    ok(len(commands) >= 17, "OPS-7: vgpuctl --help lists its commands", section)
    check_program("vgpuctl.1", [VGPUCTL], [([VGPUCTL], out)], commands, "OPS-6, OPS-7 vgpuctl")
    text, _ = read_page("vgpuctl.1")
    for var in ("VGPUD_URL", "VGPUD_TOKEN"):
        ok(has_words(text, var), "OPS-6: vgpuctl(1) documents %s" % var)
    for status in ("0", "1", "2", "3"):
        ok(re.search(r"EXIT STATUS.*(?<!\S)%s(?!\S)" % status, text) is not None,
           "OPS-8: vgpuctl(1) documents exit status %s" % status)


def test_agent():
    """AGENT-1: vgpu-agent(8) has every option of vgpu-agent --help."""
    out = help_of([VGPU_AGENT])
    check_program("vgpu-agent.8", [VGPU_AGENT], [([VGPU_AGENT], out)], [], "AGENT-1 vgpu-agent")


# ---- configuration keys ----------------------------------------------------------------------

def yaml_keys(text):
    """{dotted key: [values]} of the leaves of a block-style YAML mapping such as
    packaging/vgpud.yaml and vgpud --check-config's output (nested mappings, scalars, block lists
    of scalars; comments). Not a YAML parser: just enough for those two files, whose form the
    daemon's own loader already holds them to."""
    keys, stack = {}, []  # stack: [(indent, name)] of the open mappings
    last = None
    for raw in text.split("\n"):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        item = re.match(r"^\s*- (.*)$", line)
        if item and last is not None:
            keys[last].append(item.group(1).strip())
            continue
        m = re.match(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*):(?:\s+(.*))?$", line)
        if not m:
            raise ValueError("unexpected line: %r" % raw)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([s[1] for s in stack] + [m.group(2)])
        value = m.group(3)
        if value is None:
            stack.append((indent, m.group(2)))
            keys[path] = []  # a section or a list; a section is removed below
            last = path
        else:
            keys[path] = [value]
            last = None
    sections = {p for p in keys if any(q.startswith(p + ".") for q in keys)}
    return {p: v for p, v in keys.items() if p not in sections}


def check_config_dump(work, extra_sets=()):
    """vgpud --check-config on an empty file with every root in work: (rc, stdout, stderr)."""
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    secret = os.path.join(work, "jwt.secret")
    if not os.path.exists(secret):
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"0123456789abcdef0123456789abcdef-man-test")
        os.close(fd)
    empty = os.path.join(work, "empty.yaml")
    open(empty, "w").close()
    argv = [VGPUD, "--config", empty]
    for k in ("data_dir", "sysfs_root", "dev_root", "proc_root"):
        argv += ["--set", "%s=%s" % (k, data)]
    argv += ["--set", "runtime_dir=" + os.path.join(work, "run"),
             "--set", "jwt_secret_file=" + secret]
    for s in extra_sets:
        argv += ["--set", s]
    return run(argv + ["--check-config"])


def test_config_keys():
    """CFG-3: vgpud.yaml(5) has an entry for every key of the example file and of the parser,
    and every key entry it has is one the parser accepts."""
    with open(os.path.join(SOURCE_ROOT, "packaging", "vgpud.yaml"), encoding="utf-8") as f:
        example = yaml_keys(f.read())
    ok(len(example) >= 30, "CFG-3: packaging/vgpud.yaml has its keys", sorted(example))

    work = tempfile.mkdtemp(prefix="vgpud-man-")
    try:
        rc, out, err = check_config_dump(work)
        ok(rc == 0, "CFG-2: vgpud --check-config prints the configuration", err)
        parser = yaml_keys(out) if rc == 0 else {}
        ok(len(parser) >= 30, "CFG-3: --check-config prints every key", out)

        # The dump is the parser's own table: each key it prints is accepted by --set with the
        # value it printed (a list in flow style), and a key outside it is refused.
        sets = []
        for k, v in sorted(parser.items()):
            if k in ("data_dir", "sysfs_root", "dev_root", "proc_root", "runtime_dir",
                     "jwt_secret_file"):
                continue
            sets.append("%s=%s" % (k, v[0] if len(v) == 1 and k != "image_dirs"
                                   else "[" + ", ".join(v) + "]"))
        rc, _, err = check_config_dump(work, sets)
        ok(rc == 0, "CFG-2: --set accepts each printed key with its printed value", err)
        rc, _, err = check_config_dump(work, ["gpu.no_such_key=1"])
        ok(rc == 1 and 'unknown key "gpu.no_such_key"' in err,
           "CFG-4: --set refuses a key outside the parser's table", "rc=%d\n%s" % (rc, err))

        # OPS-5: the shipped example has every key.
        eq(sorted(set(parser) - set(example)), [],
           "OPS-5: packaging/vgpud.yaml has every key the parser accepts")
        eq(sorted(set(example) - set(parser)), [],
           "CFG-4: packaging/vgpud.yaml has no key the parser refuses")

        _, tags = read_page("vgpud.yaml.5")
        entries = {t for t in tags if re.fullmatch(r"[a-z][a-z_]*(\.[a-z_]+)*", t)}
        for k in sorted(set(example) | set(parser)):
            ok(k in entries, "CFG-3: vgpud.yaml(5) has an entry for %s" % k)
        for t in sorted(entries - YAML_TYPE_TAGS):
            ok(t in parser, "CFG-3: vgpud.yaml(5)'s entry %s is a key vgpud accepts" % t)

        # Its options are vgpud's.
        text, _ = read_page("vgpud.yaml.5")
        printed = help_options(run([VGPUD, "--help"])[1])
        for opt in sorted(set(OPTION_RE.findall(text))):
            ok(opt in printed, "CFG-1, CFG-2: %s in vgpud.yaml(5) is a vgpud option" % opt)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- installation ----------------------------------------------------------------------------

def test_install():
    """OPS-5: meson install puts each page under <mandir>/man<section>/, as it is in docs/."""
    rc, out, err = run([MESON, "introspect", BUILD_ROOT, "--buildoptions"])
    options = {o["name"]: o["value"] for o in json.loads(out)} if rc == 0 else {}
    ok("mandir" in options and "prefix" in options, "OPS-5: the build's mandir", err)
    mandir = os.path.join(options.get("prefix", "/usr/local"), options.get("mandir", "share/man"))

    dest = tempfile.mkdtemp(prefix="vgpud-man-install-")
    try:
        # Only what is tagged "man" (meson tags install_man() so), without a rebuild: quick,
        # and it leaves the build directory as it is.
        rc, out, err = run([MESON, "install", "-C", BUILD_ROOT, "--no-rebuild", "--quiet",
                            "--tags", "man", "--destdir", dest], timeout=120)
        ok(rc == 0, "OPS-5: meson install --destdir --tags man", "rc=%d\n%s%s" % (rc, out, err))
        agent = options.get("agent") is True
        for page in PAGES:
            section = page.rsplit(".", 1)[1]
            path = os.path.join(dest, mandir.lstrip("/"), "man" + section, page)
            with open(os.path.join(DOCS, page), "rb") as f:
                want = f.read()
            got = None
            if os.path.exists(path):
                with open(path, "rb") as f:
                    got = f.read()
            if page == "vgpu-agent.8" and not agent:
                # OPS-5: the guest agent's page goes with the agent, which -Dagent=true installs.
                ok(got is None, "OPS-5: vgpu-agent.8 is not installed without -Dagent=true")
                continue
            ok(got == want, "OPS-5: %s installed as %s" % (page, os.path.relpath(path, dest)),
               "installed: %s" % sorted(os.path.relpath(os.path.join(d, n), dest)
                                        for d, _, ns in os.walk(dest) for n in ns))

        # OPS-5: vgpu-agent is a guest artefact; a host's meson install leaves it out unless
        # -Dagent=true asks for it (guest-image builders).
        rc, out, err = run([MESON, "install", "-C", BUILD_ROOT, "--no-rebuild", "--quiet",
                            "--tags", "runtime", "--destdir", dest], timeout=120)
        installed = [n for _, _, ns in os.walk(dest) for n in ns]
        ok(rc == 0 and ("vgpud" in installed) and (("vgpu-agent" in installed) == agent),
           "OPS-5: meson install puts vgpu-agent in only with -Dagent=true (agent=%s)" % agent,
           "rc=%d %s\n%s" % (rc, sorted(installed), err))
    finally:
        shutil.rmtree(dest, ignore_errors=True)


run_group("lint", test_lint)
run_group("vgpud", test_vgpud)
run_group("vgpuctl", test_vgpuctl)
run_group("vgpu-agent", test_agent)
run_group("config keys", test_config_keys)
run_group("install", test_install)
plan()
sys.exit(exit_status())
