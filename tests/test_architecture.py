"""The import graph: packages import only the layers below them, and no module import cycle exists.

Every import counts, function-local ones included (grimp reads every import statement of a module).
The layers are import-linter's contract in pyproject.toml ([tool.importlinter]); the module cycles
are found here, inside packages as well as between them.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
# What installs as a top-level name: the library's one root, and the card's four folders beside it.
TOP = ["parallax", "orchestrator", "actors", "rewards", "curricula"]
PACKAGES = ["parallax.studies", "orchestrator", "parallax.evaluation", "actors", "parallax.layouts",
            "parallax.executors", "parallax.engines", "parallax.weightsync", "parallax.contract", "rewards",
            "curricula", "parallax.toyworld", "parallax.tinylm", "parallax.models", "parallax.formats",
            "parallax.trainingdata"]


def module_cycles(*packages: str) -> list[list[str]]:
    """Strongly connected sets of more than one module in the import graph of `packages` (Tarjan)."""
    graph = grimp.build_graph(*packages)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # iterative enough for this graph's depth (< 100 modules per chain)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in edges:
        if m not in index:
            visit(m)
    return found


def test_packages_import_only_the_layers_below_them(monkeypatch, capsys):
    from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename="pyproject.toml", no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == EXIT_STATUS_SUCCESS, out[-4000:]
    assert "1 kept, 0 broken" in out


def test_no_module_import_cycle_anywhere():
    assert module_cycles(*TOP) == []


def test_the_cycle_check_sees_function_local_imports(tmp_path, monkeypatch):
    """The check itself can fail: a cycle closed only by an import inside a function is found."""
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg import b\n")
    (pkg / "b.py").write_text(textwrap.dedent("""
        def late():
            from cyclepkg.a import nothing  # the back edge, function-local
    """))
    (pkg / "c.py").write_text("import cyclepkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_cycles("cyclepkg") == [["cyclepkg.a", "cyclepkg.b"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_opens_by_saying_what_lives_there(package):
    doc = importlib.import_module(package).__doc__
    where = package.replace(".", "/")
    assert doc and len(doc.strip()) > 40, f"{where}/__init__.py needs a docstring naming what it holds"


@pytest.mark.parametrize("package", ["parallax.contract", "parallax.engines", "parallax.weightsync",
                                     "parallax.executors", "parallax.layouts", "rewards", "curricula",
                                     "parallax.formats", "parallax.models", "parallax.trainingdata"])
def test_pure_packages_import_without_ray_hydra_or_deepspeed(package):
    """The layers below the actors import with torch and transformers alone (the GPU check image has no
    more), so no test of them needs `sys.modules` mocking."""
    code = (f"import sys, pkgutil, importlib\n"
            f"pkg = importlib.import_module('{package}')\n"
            f"for m in pkgutil.walk_packages(pkg.__path__, '{package}.'):\n"
            "    if not m.name.endswith(('__main__', 'cli', 'vllm')): "
            "importlib.import_module(m.name)\n"
            "heavy = sorted({'ray', 'hydra', 'omegaconf', 'deepspeed', 'vllm'} & set(sys.modules))\n"
            "assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def test_parallax_installs_one_library_root_beside_the_cards_four_folders():
    """`pip install` puts `parallax` (the library) and the card's `orchestrator`, `actors`, `rewards`,
    `curricula` into site-packages, and nothing else of ours: a user's own `models/` or `evaluation/` shadows
    nothing. No other installed distribution (vLLM, verl, DeepSpeed, Ray, transformers, TRL, W&B, ...)
    provides one of these names. `hydra_plugins` is Hydra's namespace, shared by design."""
    from importlib.metadata import packages_distributions

    providers = packages_distributions()
    ours = sorted(name for name, dists in providers.items() if "parallax" in dists and name != "hydra_plugins")
    assert ours == sorted(TOP), f"the install's top-level names: {ours}"
    clashes = {name: sorted(set(providers[name]) - {"parallax"}) for name in TOP
               if set(providers.get(name, ())) - {"parallax"}}
    assert not clashes, f"other distributions install these top-level names too: {clashes}"


def test_a_users_own_generic_packages_shadow_nothing(tmp_path):
    """Run from a research repo that has its own `models/`, `evaluation/`, `formats/` and `engines/` (each one
    fails on import, as a stranger's would under our names): the entry point still starts."""
    for name in ("models", "evaluation", "formats", "engines", "contract", "layouts"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('a user package named {name}')\n")
    out = subprocess.run([sys.executable, "-m", "orchestrator", "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "experiment" in out.stdout
