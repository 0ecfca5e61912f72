"""The package's layers (README.md, "Layout"): vgpu.cli, vgpu.abi and vgpu.common.values
import the standard library only, so vgpuctl and the OCI hook start without
the daemon's dependencies, and nothing outside vgpu.daemon imports it.  And
every module's imports are at its top, where a reader sees them; the one
module imported by name at run time is through vgpuctl's command table
(LATE_IMPORTERS)."""
import ast
import fnmatch
import json
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import vgpu
from vgpu.cli import ctl, ctlargv

PKG = pathlib.Path(vgpu.__file__).parent

def loaded_after(stmt: str) -> set[str]:
    code = f"import sys, json; {stmt}; print(json.dumps(sorted(sys.modules)))"
    # -E -s, not -I: isolated from the environment, but with the checkout on
    # sys.path ('' first, cwd the repository root), so the package imported is
    # this tree's, not whatever the venv's editable install points at
    r = subprocess.run([sys.executable, "-E", "-s", "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=PKG.parent)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout))


#: what the interpreter itself loads (site, the editable install's finder)
BASELINE = loaded_after("pass")


def modules(sub: str) -> list[str]:
    """vgpu.<sub>'s modules, its subpackages' (vgpu.cli.hook) included; a
    package's __init__ by the package's name, no __main__ (it runs)."""
    names = (".".join(("vgpu", *p.relative_to(PKG).with_suffix("").parts))
             for p in (PKG / sub).rglob("*.py") if p.name != "__main__.py")
    return sorted(n.removesuffix(".__init__") for n in names)


LIGHT = [*modules("cli"), *modules("abi"), "vgpu.common.values", "vgpu.common.forecast"]


def test_every_light_module_is_listed():
    assert "vgpu.cli.ctl" in LIGHT and "vgpu.cli.hook" in LIGHT and "vgpu.abi.uapi" in LIGHT
    assert "vgpu.cli.hook.mounts" in LIGHT


@pytest.mark.parametrize("module", LIGHT)
def test_light_module_loads_only_the_standard_library(module):
    # A fresh, isolated interpreter: what the import itself pulls in, not
    # what pytest has loaded.
    loaded = loaded_after(f"import {module}") - BASELINE
    foreign = sorted(m for m in loaded if m.split(".")[0] not in (*sys.stdlib_module_names, "vgpu"))
    assert not foreign, f"{module} pulls in {foreign}"
    daemon = sorted(m for m in loaded if m.startswith("vgpu.daemon"))
    assert not daemon, f"{module} pulls in the daemon's {daemon}"


#: what a container's start must not import (issue 34, bench/README.md,
#: "container_start.py"): vgpu-runtime's slow path and the OCI hook run on
#: every start of a container with a slice, each a fresh interpreter
START_PATH = ["vgpu.cli.runtime", "vgpu.cli.hook"]
START_PATH_HEAVY = {"json", "re", "enum", "typing", "subprocess", "dataclasses", "inspect",
                    "signal", "selectors", "threading", "platform", "asyncio"}


@pytest.mark.parametrize("module", START_PATH)
def test_the_container_start_path_imports_nothing_heavy(module):
    code = (f"import sys; sys.path.insert(0, {str(PKG.parent)!r}); import {module}; "
            "print(' '.join(sorted(sys.modules)))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    heavy = sorted(START_PATH_HEAVY & set(r.stdout.split()))
    assert not heavy, f"{module} imports {heavy} on every container start"


# ------------------------------------------------------------ vgpu.k8s
#: what of vgpu the Kubernetes side (the device and DRA plugins, their supervisor) may
#: load: vgpud's API client and the value parsers (with what they load),
#: never the daemon
K8S = modules("k8s")
K8S_MAY_USE = {m for m in loaded_after("import vgpu.common.apiclient, vgpu.common.values, "
                                        "vgpu.common.request, vgpu.common.files, "
                                        # the DRA plugin writes a claim's CDI spec
                                        "vgpu.common.cdi, "
                                        # NUMA nodes and PCI roots from sysfs
                                        "vgpu.common.topology")
               if m.split(".")[0] == "vgpu"}


@pytest.mark.parametrize("module", K8S)
def test_k8s_module_loads_no_daemon(module):
    loaded = loaded_after(f"import {module}") - BASELINE
    ours = sorted(m for m in loaded if m.split(".")[0] == "vgpu" and not
                  m.startswith("vgpu.k8s") and m not in K8S_MAY_USE)
    assert not ours, f"{module} pulls in {ours}"


def test_the_device_plugins_device_logic_loads_no_grpc():
    # vgpu.k8s.devices is the plugin's pure part: no gRPC, no trio, no I/O
    loaded = loaded_after("import vgpu.k8s.devices") - BASELINE
    assert not sorted(m for m in loaded if m.split(".")[0] in ("grpc", "grpc_tools", "google",
                                                               "trio", "socket", "threading"))


def test_vgpuds_supervisor_of_the_plugin_loads_no_grpc():
    # vgpud imports vgpu.daemon.plugin_supervisor: its start must not pay for gRPC
    loaded = loaded_after("import vgpu.daemon.plugin_supervisor") - BASELINE
    assert not sorted(m for m in loaded if m.split(".")[0] in ("grpc", "grpc_tools", "google"))
    assert not sorted(m for m in loaded if m.startswith("vgpu.k8s"))


# ------------------------------------------------------------ imports at the top
#: modules allowed imports below module level, each with its reason (none)
LOCAL_IMPORTS_ALLOWED: set[str] = set()


def imports_below_module_level(tree: ast.Module) -> list[ast.stmt]:
    """The import statements of a module that are not at module level:
    in a function, a class, a loop, a with block...  The blocks of a
    module-level ``try`` (an optional dependency) or ``if`` count as module
    level."""
    out: list[ast.stmt] = []

    def top(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(st, ast.If):
                top(st.body)
                top(st.orelse)
            elif isinstance(st, (ast.Try, ast.TryStar)):
                top(st.body)
                for h in st.handlers:
                    top(h.body)
                top(st.orelse)
                top(st.finalbody)
            else:
                out.extend(n for n in ast.walk(st) if isinstance(n, (ast.Import, ast.ImportFrom)))
    top(tree.body)
    return sorted(out, key=lambda n: n.lineno)


def test_imports_below_module_level_are_found():
    tree = ast.parse("""\
import os
try:
    import pyfuse3
except ImportError:
    pyfuse3 = None
if os.name == "posix":
    from os import path
else:
    import ntpath as path
def f():
    import json
class C:
    from os import sep
    def m(self):
        if True:
            from os import sep
for x in ():
    import sys
async def g():
    with open("x"):
        import re
""")
    assert [n.lineno for n in imports_below_module_level(tree)] == [11, 13, 16, 18, 21]


def test_every_import_is_at_module_level():
    """A module's imports are at its top, where a reader sees what
    it depends on (an optional dependency in a module-level try/except
    ImportError); an import cycle is broken by moving the shared thing a
    layer down, not by importing late."""
    for rel in LOCAL_IMPORTS_ALLOWED:
        assert (PKG.parent / rel).is_file(), f"{rel} is listed but gone: drop it from the list"
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        if rel in LOCAL_IMPORTS_ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        bad += [f"{rel}:{n.lineno}: {ast.unparse(n)}" for n in imports_below_module_level(tree)]
    assert not bad, "imports below module level:\n" + "\n".join(bad)


#: the functions allowed to import a module by name at run time
#: (importlib.import_module, __import__), each with its reason
LATE_IMPORTERS = {
    "vgpu/common/fastjson.py:_with_json": "the json package's C scanner raises a parse error "
                                          "as json.decoder.JSONDecodeError, looked up in "
                                          "sys.modules, not imported: on malformed JSON only, "
                                          "json is imported then, so that a container start "
                                          "never pays for it (issue 34, bench/README.md)",
    "vgpu/cli/ctlargv.py:resolve": "vgpuctl's command table names the commands with heavy "
                                   "imports (trace, audit, history, runtime) as 'module:name', "
                                   "imported when that command runs, so that --help and list "
                                   "start fast (issue 34, bench/cli_start.py)",
}


def late_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, enclosing function) of each call that imports a module by name:
    importlib.import_module(...), import_module(...), __import__(...)."""
    out = []

    def walk(node, fn):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call):
                f = child.func
                callee = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if callee in ("import_module", "__import__"):
                    out.append((child.lineno, fn or "<module>"))
            walk(child, name)
    walk(tree, None)
    return out


def test_late_imports_are_found():
    tree = ast.parse("import importlib\nx = __import__('os')\n"
                     "def f(m):\n    return importlib.import_module(m)\n")
    assert late_imports(tree) == [(2, "<module>"), (4, "f")]


def test_modules_are_imported_by_name_only_where_allowed():
    """No module is imported by a name computed at run time, but by the
    documented mechanisms of LATE_IMPORTERS."""
    found = set()
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        for line, fn in late_imports(ast.parse(path.read_text(encoding="utf-8"), rel)):
            if f"{rel}:{fn}" in LATE_IMPORTERS:
                found.add(f"{rel}:{fn}")
            else:
                bad.append(f"{rel}:{line}: in {fn}")
    assert not bad, "modules imported by name at run time:\n" + "\n".join(bad)
    assert found == set(LATE_IMPORTERS), "listed but gone: drop it from LATE_IMPORTERS"


def test_vgpuctls_references_resolve_to_its_own_modules():
    """Every "module:name" of vgpuctl's table names a function of a vgpu.cli
    module, so a typo fails here and not on a node."""
    refs = [c.run for c in ctl.COMMANDS]
    refs += [o.conv for c in ctl.COMMANDS for o in c.opts] + [o.conv for o in ctlargv.GLOBAL_OPTS]
    refs += list(ctlargv.ARG_CONV.values())
    names = [r for r in refs if isinstance(r, str)]
    assert names, "no reference left: drop resolve and LATE_IMPORTERS"
    for r in names:
        assert re.fullmatch(r"vgpu\.cli\.\w+:\w+", r), r
        assert callable(ctlargv.resolve(r)), r


def test_every_data_file_of_the_package_is_installed():
    """A file the package reads at run time that is not Python (the device
    plugin's .proto) reaches an installed node only as package data."""
    root = pathlib.Path(__file__).resolve().parents[2]
    conf = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = conf.get("package-data", {})
    for f in (root / "vgpu").rglob("*"):
        if not f.is_file() or f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
            continue
        pkg = ".".join(f.parent.relative_to(root).parts)
        assert pkg in conf["packages"], f
        assert any(fnmatch.fnmatch(f.name, pat) for pat in data.get(pkg, ())), \
            f"{f.relative_to(root)} is not package data in pyproject.toml"


# ------------------------------------------------------------ who imports whom
ROOT = PKG.parent


def imported_modules(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement of a file, wherever it stands
    (``from a import b`` gives a and a.b; a relative import its dots)."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            mod = "." * n.level + (n.module or "")
            out.append((n.lineno, mod))
            out += [(n.lineno, f"{mod}.{a.name}") for a in n.names]
    return out


def offenders(paths, bad) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in sorted(paths)
            for line, mod in imported_modules(p) if bad(mod)]


def under(mod: str, *pkgs: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in pkgs)


def test_imported_modules_are_found():
    p = ROOT / "tests" / "host" / "test_layers.py"
    mods = {m for _l, m in imported_modules(p)}
    assert {"ast", "vgpu", "pytest"} <= mods


def test_the_daemon_imports_neither_the_cli_nor_the_kubernetes_side():
    """vgpud's rules shared with the CLI live in vgpu.common, its supervisor
    of the device plugin in vgpu.daemon; gRPC and the CLI's code never load
    into the daemon."""
    bad = offenders((PKG / "daemon").glob("*.py"), lambda m: under(m, "vgpu.cli", "vgpu.k8s"))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("sub,forbidden", [
    ("common", ("vgpu.cli", "vgpu.daemon", "vgpu.k8s", "vgpu.vgpuko")),
    ("abi", ("vgpu.cli", "vgpu.daemon", "vgpu.k8s", "vgpu.vgpuko")),
    ("vgpuko", ("vgpu.cli", "vgpu.daemon", "vgpu.k8s")),
    ("k8s", ("vgpu.cli", "vgpu.daemon", "vgpu.vgpuko")),
    ("cli", ("vgpu.daemon", "vgpu.k8s", "vgpu.vgpuko")),
])
def test_a_layer_imports_only_the_layers_below(sub, forbidden):
    bad = offenders((PKG / sub).rglob("*.py"), lambda m: under(m, *forbidden))
    assert not bad, "\n".join(bad)


#: the modules of tests/ (helpers included), by the names they are imported as
TEST_MODULES = {p.stem for p in (ROOT / "tests").rglob("*.py")} - {"__init__"}


def test_tools_and_bench_import_nothing_of_tests():
    """Test support that tools/ or bench/ need lives in tools/testbed/."""
    files = [*(ROOT / "tools").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    bad = offenders(files, lambda m: under(m, "tests") or m.split(".")[0] in TEST_MODULES)
    bad += [f"{p.relative_to(ROOT)}: names tests/ on sys.path" for p in files
            if re.search(r"sys\.path\.(insert|append)\([^)\n]*[\"']tests[\"']",
                         p.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


#: test files that still import another test file, with why (each is a
#: helper module to make; tests/vm is being changed by other work)
TEST_IMPORTS_ALLOWED = {
    "tests/vm/test_cuda_slice.py": "test_cuda's device queries",
    "tests/vm/test_vgpu_nvidia_smi.py": "test_nvidia_smi's holder and release mark",
    "tests/realdrv/test_uvm_through_vgpu.py": "tests/vm/test_vgpu_uvm's tests, run again",
}


def test_no_test_file_imports_another():
    """Shared helpers are helper modules (tests/host/daemon_support.py,
    runc_support.py, vgpufs_support.py; tests/vm/vgpu_fixtures.py...) or
    test support in tools/testbed/, never another test file."""
    for rel in TEST_IMPORTS_ALLOWED:
        assert (ROOT / rel).is_file(), f"{rel} is listed but gone: drop it from the list"
    files = [p for p in (ROOT / "tests").rglob("test_*.py")
             if p.relative_to(ROOT).as_posix() not in TEST_IMPORTS_ALLOWED]
    bad = offenders(files, lambda m: m.split(".")[-1].startswith("test_")
                    or m.split(".")[0].startswith("test_"))
    assert not bad, "\n".join(bad)
    still = [rel for rel in TEST_IMPORTS_ALLOWED
             if not offenders([ROOT / rel], lambda m: m.split(".")[0].startswith("test_"))]
    assert not still, f"{still} no longer import a test file: drop them from the list"


def sys_path_edits(p: pathlib.Path) -> list[str]:
    """The calls in p's code that change sys.path: insert, append, extend,
    remove or an assignment to it (a string of code for a child process is
    not code of p's and may)."""
    bad = []
    for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                n.func.attr in ("insert", "append", "extend", "remove") and \
                ast.unparse(n.func.value) == "sys.path":
            bad.append(f"{n.lineno}: {ast.unparse(n)}")
        elif isinstance(n, (ast.Assign, ast.AugAssign)) and any(
                ast.unparse(t).startswith("sys.path")
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
            bad.append(f"{n.lineno}: {ast.unparse(n)}")
    return bad


def test_sys_path_edits_are_found(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("import sys\nsys.path.insert(0, 'a')\nsys.path += ['b']\n"
                 "CHILD = 'import sys; sys.path.insert(0, ROOT)'\n")
    assert sorted(b.split(":")[0] for b in sys_path_edits(p)) == ["2", "3"]


def test_tests_have_one_import_path():
    """pytest's pythonpath (pyproject.toml) puts the repository root and
    tests/vm on sys.path, pytest's prepend import mode each test file's
    directory: no
    file under tests/ (host, vm, realdrv*) changes sys.path itself."""
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["pythonpath"] == [".", "tests/vm"]
    bad = [f"{p.relative_to(ROOT)}:{b}" for p in sorted((ROOT / "tests").rglob("*.py"))
           for b in sys_path_edits(p)]
    assert not bad, "\n".join(bad)
