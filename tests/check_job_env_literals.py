#!/usr/bin/env python3
"""No copy of a launcher<->worker variable name outside hvd/common/job_env.h.

    check_job_env_literals.py SOURCE_DIR   scan lib/, apps/ and python/
    check_job_env_literals.py --self-test  plant copies in a temporary tree
                                            and check that each is reported

Reads the names from lib/common/include/hvd/common/job_env.h (its
`inline constexpr const char* kName = "NAME";` declarations) and reports
every string literal in C/C++ and Python sources whose text is one of them,
optionally followed by "=" or "={}" (an environment entry being built or
matched: "HVDRUN_SECRET="). Comments are not code; a literal that
merely mentions a name inside a longer message ("HOROVOD_SIZE={} but
HOROVOD_GLOO_RENDEZVOUS_ADDR is not set") is prose and allowed. tests/ is
not scanned: tests check the contract from the outside and may spell names.

Exit status: 0 clean, 1 copies found (one line each), 2 the header could
not be read or parsed.
"""
import io
import os
import re
import sys
import tempfile
import tokenize

HEADER = os.path.join("lib", "common", "include", "hvd", "common", "job_env.h")
SCANNED = ("lib", "apps", "python")
# Folders not scanned, each with why (none: every folder uses job_env.h).
SKIPPED = {}
CPP_EXT = (".h", ".hpp", ".hh", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh")
PY_EXT = (".py",)
FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", -1)
DECL = re.compile(r'inline constexpr const char\* k([A-Za-z0-9]+) = "([^"]*)";')
RAW_OPEN = re.compile(r'"([^()\\ \s]{0,16})\(')


def upper_snake(camel):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", camel).upper()


def read_names(root):
    """{"HOROVOD_RANK": "kRank", ...} from the header."""
    path = os.path.join(root, HEADER)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"check_job_env_literals: cannot read {path}: {e.strerror}")
    names = {name: "k" + ident for ident, name in DECL.findall(text)}
    if not names:
        print(f"check_job_env_literals: {path} declares no names in the form "
              f"'inline constexpr const char* kName = \"NAME\";'", file=sys.stderr)
        sys.exit(2)
    return names


def cpp_literals(text):
    """(line, contents) of every string literal in C/C++ source, comments skipped."""
    out = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            m = RAW_OPEN.match(text, j) if word in ("R", "u8R", "uR", "UR", "LR") else None
            if m:
                end = text.find(")" + m.group(1) + '"', m.end())
                end = n if end < 0 else end
                out.append((line, text[m.end():end]))
                line += text.count("\n", j, end)
                i = min(n, end + len(m.group(1)) + 2)
            else:
                i = j  # an identifier; an encoding prefix (u8, L, ...) leaves its literal next
        elif c.isdigit():
            # A pp-number, so the ' of a digit separator (1'000) does not
            # start a character literal.
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_.'"):
                j += 1
            i = j
        elif c == '"' or c == "'":
            j, buf = i + 1, []
            while j < n and text[j] != c and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j:j + 2])
                    j += 2
                else:
                    buf.append(text[j])
                    j += 1
            if c == '"':
                out.append((line, "".join(buf)))
            i = j + 1
        else:
            i += 1
    return out


def py_literals(text, path):
    """(line, contents) of every string in Python source (comments are tokens of their own)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == FSTRING_MIDDLE:  # Python >= 3.12: an f-string's text
                out.append((tok.start[0], tok.string))
            elif tok.type == tokenize.STRING:
                body = re.sub(r"^[A-Za-z]*", "", tok.string)
                q = body[:3] if body[:3] in ('"""', "'''") else body[:1]
                out.append((tok.start[0], body[len(q):len(body) - len(q)]))
    except (tokenize.TokenError, SyntaxError) as e:
        print(f"{path}: cannot tokenize: {e}", file=sys.stderr)
        out.append((0, "\0unparsable"))
    return out


def named(contents, names):
    for suffix in ("={}", "="):
        if contents.endswith(suffix) and contents[:-len(suffix)] in names:
            return contents[:-len(suffix)]
    return contents if contents in names else None


def scan(root, names, report):
    """Reports each copy through report(line); returns how many."""
    found = 0
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames
                                 if os.path.join(rel_dir, d) not in SKIPPED and d != "__pycache__")
            for fn in sorted(filenames):
                rel = os.path.join(rel_dir, fn)
                if rel == HEADER or not fn.endswith(CPP_EXT + PY_EXT):
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                literals = py_literals(text, rel) if fn.endswith(PY_EXT) else cpp_literals(text)
                for line, contents in literals:
                    if contents == "\0unparsable":
                        found += 1
                        report(f"{rel}: could not be read as Python; fix it so it can be checked")
                        continue
                    name = named(contents, names)
                    if name is None:
                        continue
                    found += 1
                    ident = names[name]
                    use = (f"hvdcomm._core.job_env.{upper_snake(ident[1:])}" if fn.endswith(PY_EXT)
                           else f"hvd::job_env::{ident}")
                    report(f'{rel}:{line}: "{contents}" copies a name of hvd/common/job_env.h; use {use}')
    return found


def main(root):
    names = read_names(root)
    found = scan(root, names, print)
    for folder, why in SKIPPED.items():
        print(f"check_job_env_literals: not scanned yet: {folder}/ ({why})")
    if found:
        print(f"check_job_env_literals: {found} copied name(s); name them through hvd/common/job_env.h",
              file=sys.stderr)
        return 1
    print(f"check_job_env_literals: {len(names)} names, no copies in {', '.join(d + '/' for d in SCANNED)}")
    return 0


def self_test():
    """Plants copies (and allowed look-alikes) in a temporary tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, os.pardir, HEADER), encoding="utf-8") as f:
        header = f.read()
    planted = {
        os.path.join("lib", "x", "a.cpp"): (
            '// "HOROVOD_RANK" in a comment is fine\n'
            '/* and "HOROVOD_SIZE" here too */\n'
            'auto r = env::get("HOROVOD_RANK");\n'                       # line 3: copy
            'auto m = fmt::format("HOROVOD_SIZE={} but x", 1);\n'       # prose: allowed
            'if (strncmp(e, "HVDRUN_SECRET=", 14) == 0) {}\n'           # line 5: copy
            'auto s = fmt::format("HVDRUN_SECRET={}", 3);\n'            # line 6: copy
            "char q = '\"'; int n = 1'000;\n"
            'auto t = std::string(R"x(HOROVOD_ELASTIC)x");\n'           # line 8: copy
            'auto u = "HOROVOD_RANKS";\n'                               # another name: allowed
            'auto v = u8"HOROVOD_SIZE";\n'),                           # line 10: copy
        os.path.join("python", "m.py"): (
            '"""Docstring naming HOROVOD_ELASTIC=1 in prose."""\n'
            'import os\n'
            '# os.environ["HOROVOD_RANK"] in a comment\n'
            'r = os.environ["HOROVOD_RANK"]\n'                          # line 4: copy
            "e = os.environ.get('HOROVOD_ELASTIC')\n"),                 # line 5: copy
        os.path.join("lib", "launcher", "src", "job", "skipped.cpp"): 'auto r = env::get("HOROVOD_RANK");\n',
        os.path.join("tests", "t.cpp"): 'auto r = env::get("HOROVOD_RANK");\n',
    }
    expected = {
        ("lib/x/a.cpp", 3), ("lib/x/a.cpp", 5), ("lib/x/a.cpp", 6), ("lib/x/a.cpp", 8), ("lib/x/a.cpp", 10),
        ("python/m.py", 4), ("python/m.py", 5), ("lib/launcher/src/job/skipped.cpp", 1),
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in list(planted.items()) + [(HEADER, header)]:
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        lines = []
        found = scan(root, read_names(root), lines.append)
        got = set()
        for entry in lines:
            m = re.match(r"([^:]+):(\d+): ", entry)
            if m:
                got.add((m.group(1).replace(os.sep, "/"), int(m.group(2))))
        ok = got == expected and found == len(expected)
        if not ok:
            print("self-test FAILED", file=sys.stderr)
            print(f"  missed:   {sorted(expected - got)}", file=sys.stderr)
            print(f"  spurious: {sorted(got - expected)}", file=sys.stderr)
            for entry in lines:
                print(f"  reported: {entry}", file=sys.stderr)
            return 1
        if not any("hvd::job_env::kRank" in e for e in lines) or \
                not any("hvdcomm._core.job_env.ELASTIC" in e for e in lines):
            print("self-test FAILED: reports do not name the constant to use", file=sys.stderr)
            return 1
    print(f"check_job_env_literals self-test: all {len(expected)} planted copies reported, nothing else")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
