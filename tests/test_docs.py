"""The docs name only what exists: every `python -m` command (its module, and its subcommand where the CLI
has subcommands), every repo path, config choice and module named in README.md and docs/*.md.

Read from the code spans and code blocks (and the targets of relative links), the only places the docs
name things a reader types or opens. Left alone: URLs, absolute paths, what a run writes (`runs/...`),
and placeholders (`<...>`, `{...}`, `*`, `$VAR`, `~`, `...`, a name in capitals such as `NAME`).
Nothing is imported: modules are found with `importlib.util.find_spec` on their top-level name and
then on disk, subcommands and attributes are read from the source.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# What a run, a build or a tool writes into the checkout: never a path the docs promise.
WRITTEN = {"runs", "outputs", "multirun", "wandb", "build", "eval_out"}
TOP = {p.name for p in ROOT.iterdir() if p.name not in WRITTEN and not p.name.endswith(".egg-info")
       and (not p.name.startswith(".") or p.name == ".ci")}
PACKAGES = {name for name in TOP if (ROOT / name / "__init__.py").is_file()}
# `<name>`, `{step}`, `*.yaml`, `$TMPDIR`, `~/.cache`, `...`, and a name in capitals (`NAME.yaml`, `runs/X`)
PLACEHOLDER = re.compile(r"[<>{}*$~]|\.\.\.|(^|/)(?!README|LICENSE|CHANGELOG)[A-Z][A-Z0-9_]*(\.\w+)?(/|$)")


@dataclass(frozen=True)
class Code:
    """A code span (on one line) or a code block's line, and where it is."""

    doc: str
    line: int
    text: str

    def at(self, what: str) -> str:
        return f"{self.doc}:{self.line}: {what}"


def _code(path: Path) -> list[Code]:
    """Each line of a code block, and each code span."""
    doc, text = str(path.relative_to(ROOT)), path.read_text()
    out, prose, in_block = [], [], False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
        elif in_block:
            out.append(Code(doc, i, line))
        prose.append("" if in_block or line.lstrip().startswith("```") else line)
    body = "\n".join(prose)
    for m in re.finditer(r"(`+)(.+?)\1", body, re.DOTALL):  # a span may run over a line break, never a paragraph
        if "\n\n" not in m.group(2):
            out.append(Code(doc, body.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split())))
    return out


def _links(path: Path) -> list[tuple[Code, Path]]:
    """Relative link targets outside code, resolved from the doc's own folder."""
    doc, out = str(path.relative_to(ROOT)), []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            target = m.group(1).split("#")[0]
            if target and ":" not in target:
                out.append((Code(doc, i, line), path.parent / target))
    return out


CODE = [c for p in DOCS for c in _code(p)]


def test_the_docs_are_read():
    """The reader finds what it checks (a doc rewritten as plain prose would pass everything)."""
    assert {p.name for p in DOCS} >= {"README.md", "architecture.md", "operations.md"}
    assert len(CODE) > 500 and any("python -m orchestrator" in c.text for c in CODE)


# ---- python -m ----------------------------------------------------------------------------------------------

@cache
def _module(dotted: str) -> Path | None:
    """The file of `dotted` (a package's `__init__.py`), found without importing anything."""
    head, *rest = dotted.split(".")
    spec = importlib.util.find_spec(head)
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin not in (None, "namespace") else Path(spec.submodule_search_locations[0])
    places = [Path(p) for p in spec.submodule_search_locations or []]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found = [p / part / "__init__.py" for p in places if (p / part / "__init__.py").is_file()]
        if last:
            found += [p / f"{part}.py" for p in places if (p / f"{part}.py").is_file()]
        if not found:
            return None
        places = [found[0].parent]
    return found[0]


@cache
def _subcommands(package: Path) -> frozenset[str]:
    """The subcommand names an argparse CLI in `package` declares (`sub.add_parser("name", ...)`)."""
    names = set()
    for f in package.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return frozenset(names)


COMMAND = re.compile(r"\bpython3? -m ([\w.]+)(?:[ \t]+([^\s|;&#`]+))?")


def test_every_python_dash_m_command_runs_a_module_that_exists():
    wrong, seen = [], set()
    for c in CODE:
        for m in COMMAND.finditer(c.text):
            module, first = m.group(1).rstrip("."), m.group(2)
            seen.add(module)
            path = _module(module)
            if path is None:
                wrong.append(c.at(f"python -m {module}: no such module"))
            elif path.name == "__init__.py" and not (path.parent / "__main__.py").is_file():
                wrong.append(c.at(f"python -m {module}: a package without __main__.py"))
            elif (path.name == "__init__.py" and first and re.fullmatch(r"[a-z][a-z0-9_-]*", first)
                  and _subcommands(path.parent) and first not in _subcommands(path.parent)):
                wrong.append(c.at(f"python -m {module} {first}: {module} has no subcommand {first!r} "
                                  f"(it has {', '.join(sorted(_subcommands(path.parent)))})"))
    assert not wrong, "\n".join(wrong)
    assert {"orchestrator", "parallax.evaluation", "rewards", "parallax.toyworld", "parallax.studies"} <= seen


def test_the_command_check_sees_a_wrong_module_and_a_wrong_subcommand():
    assert _module("orchestrator.stops") == ROOT / "orchestrator" / "stops.py"
    assert _module("orchestrator.nope") is None and _module("no_such_top_level_module") is None
    assert _subcommands(ROOT / "rewards") >= {"list", "goldcheck"}
    assert "score" in _subcommands(ROOT / "parallax" / "evaluation") and "score" not in _subcommands(ROOT / "rewards")


# ---- paths --------------------------------------------------------------------------------------------------

def _paths(text: str) -> list[str]:
    """Repo-relative paths in a code span or block: under a top-level entry of the repo, ending in a file
    name with an extension or in `/` (so metric names such as `parallel/ratio` are not paths)."""
    out = []
    for token in re.split(r"[\s`'\"(),;|\[\]]+", text):
        token = token.split("=", 1)[-1].split("::")[0]  # KEY=PATH, tests/x.py::test_y
        token = re.sub(r":\d+(-\d+)?$", "", token).rstrip(".,:").removeprefix("./")
        if "/" not in token or "://" in token or PLACEHOLDER.search(token) or token.split("/")[0] not in TOP:
            continue
        if token.endswith("/") or "." in token.rsplit("/", 1)[-1]:
            out.append(token)
    return out


def test_every_repo_path_the_docs_name_exists():
    wrong = [c.at(p) for c in CODE for p in _paths(c.text) if not (ROOT / p).exists()]
    wrong += [c.at(f"link to {t.relative_to(ROOT) if t.is_relative_to(ROOT) else t}")
              for p in DOCS for c, t in _links(p) if not t.resolve().exists()]
    assert not wrong, "no such file or folder:\n" + "\n".join(wrong)


def test_the_path_reader_keeps_paths_and_leaves_the_rest():
    assert _paths("see tests/e2e/test_x.py::test_y, docs/gpu.md: and bench/ (bench/soak.py:12)") == [
        "tests/e2e/test_x.py", "docs/gpu.md", "bench/", "bench/soak.py"]
    assert _paths("runs/x/metrics.jsonl parallel/ratio conf/experiment/*.yaml conf/experiment/NAME.yaml "
                  "s3://b/k.pt file:///tmp/x.store $TMPDIR/a.b tests/<name>.py /dev/shm/x.py") == []
    assert _paths("PYTHONPATH=tests/doubles/ hydra.run.dir=runs/a bench/README.md") == ["tests/doubles/",
                                                                                         "bench/README.md"]


# ---- config choices and experiments -------------------------------------------------------------------------

GROUPS = {p.name for p in (ROOT / "conf").iterdir() if p.is_dir()}
CHOICE = re.compile(r"(?<![\w./+-])\+?(\w+)=([\w/.-]+)")


def _choices(text: str) -> list[tuple[str, str]]:
    """(group, option) of each config group choice (`model=qwen3_4b`, `+experiment=paper/x`)."""
    out = []
    for m in CHOICE.finditer(text):
        group, option = m.group(1), m.group(2).rstrip(".,:")
        if group in GROUPS and option != "null" and not PLACEHOLDER.search(option):
            out.append((group, option))
    return out


def test_every_config_choice_and_experiment_the_docs_name_exists():
    wrong, experiments = [], 0
    for c in CODE:
        for group, option in _choices(c.text):
            experiments += group == "experiment"
            if not (ROOT / "conf" / group / f"{option}.yaml").is_file():
                wrong.append(c.at(f"{group}={option}: no conf/{group}/{option}.yaml"))
    assert not wrong, "\n".join(wrong)
    assert experiments > 10


def test_the_choice_reader_takes_groups_only():
    assert _choices("python -m orchestrator +experiment=paper/x model=tiny data.family=all rollout.n=8 "
                    "trainer.seed=1 model.path=/m hydra/launcher=parallax_ray nope=1 experiment=NAME") == [
        ("experiment", "paper/x"), ("model", "tiny")]


# ---- modules named by their dotted path ---------------------------------------------------------------------

@cache
def _names(path: Path) -> frozenset[str] | None:
    """What a module defines or imports at its top level; None where it cannot be told statically."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try)):
            return None  # definitions under a condition
    return None if "__getattr__" in names else frozenset(names)


DOTTED = re.compile(r"(?<![\w./-])([a-z_]\w*(?:\.[A-Za-z_]\w*)+)")


def _dotted_wrong(name: str) -> str | None:
    """Why `name` (`package.module[.attribute...]`) names nothing; None if it does."""
    parts = name.split(".")
    n, path = next(((n, p) for n in range(len(parts), 0, -1) if (p := _module(".".join(parts[:n])))), (0, None))
    if path is None:
        return f"no module {parts[0]!r}"
    if n == len(parts):
        return None
    known = _names(path)
    if known is None or parts[n] in known or (path.name == "__init__.py" and _module(".".join(parts[:n + 1]))):
        return None
    return f"{'.'.join(parts[:n])} has no {parts[n]!r}"


def test_every_module_the_docs_name_by_its_dotted_path_exists():
    wrong = []
    for c in CODE:
        for m in DOTTED.finditer(c.text):
            name = m.group(1)
            if name.split(".")[0] in PACKAGES and not name.endswith((".py", ".md", ".yaml")):
                why = _dotted_wrong(name)
                if why:
                    wrong.append(c.at(f"{name}: {why}"))
    assert not wrong, "\n".join(wrong)


def test_the_dotted_reader_sees_a_missing_module_and_attribute():
    assert _dotted_wrong("actors.faults.STALL_S") is None and _dotted_wrong("orchestrator.stops") is None
    assert _dotted_wrong("actors.faults.NOPE") == "actors.faults has no 'NOPE'"
    assert _dotted_wrong("actors.nope") == "actors has no 'nope'"

