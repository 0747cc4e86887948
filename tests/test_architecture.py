"""The import graph: packages import only the layers below them, and no module import cycle exists.

Every import counts, function-local ones included (grimp reads every import statement of a module).
The layers are import-linter's contract in pyproject.toml ([tool.importlinter]); the module cycles
are found here, inside packages as well as between them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["studies", "orchestrator", "evaluation", "actors", "layouts", "executors", "engines", "weightsync",
            "contract", "rewards", "curricula", "toyworld", "tinylm", "models", "formats",
            "trainingdata"]


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
    assert module_cycles(*PACKAGES) == []


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
    doc = __import__(package).__doc__
    assert doc and len(doc.strip()) > 40, f"{package}/__init__.py needs a docstring naming what it holds"


@pytest.mark.parametrize("package", ["contract", "engines", "weightsync", "executors", "layouts", "rewards",
                                     "curricula", "formats", "models", "trainingdata"])
def test_pure_packages_import_without_ray_hydra_or_deepspeed(package):
    """The layers below the actors import with torch and transformers alone (the GPU check image has no
    more), so no test of them needs `sys.modules` mocking."""
    import subprocess
    import sys

    code = (f"import sys, {package}, pkgutil, importlib\n"
            f"for m in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
            "    if not m.name.endswith(('__main__', 'cli', 'vllm')): "
            "importlib.import_module(m.name)\n"
            "heavy = sorted({'ray', 'hydra', 'omegaconf', 'deepspeed', 'vllm'} & set(sys.modules))\n"
            "assert not heavy, heavy")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def test_no_installed_distribution_but_parallax_provides_a_top_level_name_of_ours():
    """The packages install as top-level names (`models`, `evaluation`, ...), not under one `parallax`
    package: kept because none collides with anything Parallax installs with (its whole dependency set,
    every extra here: vLLM, verl, DeepSpeed, Ray, transformers, TRL, W&B, ...). A dependency that brings
    one of these names breaks this test before it shadows ours. `hydra_plugins` is Hydra's namespace,
    shared by design."""
    from importlib.metadata import packages_distributions

    providers = packages_distributions()
    assert providers.get("orchestrator") and set(providers["orchestrator"]) == {"parallax"}  # installed, and seen
    clashes = {name: sorted(set(providers[name]) - {"parallax"}) for name in PACKAGES
               if set(providers.get(name, ())) - {"parallax"}}
    assert not clashes, f"other distributions install these top-level names too: {clashes}"
