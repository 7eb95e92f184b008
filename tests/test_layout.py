"""The package layout holds: imports flow one way (commands -> run/ablation/drawing -> config -> models/data/tasks
-> layers/generation -> attention -> util), `attnzoo.util` imports only the standard library, `attnzoo.attention`
imports no Lightning, no library module imports a command, no two modules import each other (directly or round a
longer cycle), and data/ keeps its modules in role sub-packages.
Test modules share code through `tests.helpers` only, never by importing one another.

Imports are read from the source (every `import` statement, also those inside functions), not from a running process.
"""

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "attnzoo"
COMMANDS = {"fit", "evaluate", "ablate", "viz", "bench", "cli", "translate", "generate", "baseline"}
# a module may import attnzoo modules of its own level or below; the first part of the module name gives its level
LEVELS = {
    "util": -1,  # did-you-mean and the import gate, used by every level
    "attention": 0,
    "layers": 1,
    "generation": 1,
    "models": 2,
    "data": 2,
    "tasks": 2,
    "pretrained": 3,
    "config": 3,
    "run": 4,
    "ablation": 4,
    "drawing": 4,
    "benchmarks": 4,
    **dict.fromkeys(COMMANDS, 5),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _import_nodes(name: str, path: Path):
    """(module, imported names) of every import in `path`, relative imports resolved against `name`; `import a.b`
    gives ("a.b", [])."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            yield module, [alias.name for alias in node.names]


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the modules `path` imports (relative imports resolved against `name`)."""
    found = set()
    for module, names in _import_nodes(name, path):
        found.add(module)
        found |= {f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES}
    return found


MODULES = _modules()


def _level(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else ""
    return LEVELS[part]


def test_every_module_has_a_level():
    missing = sorted({m.split(".")[1] for m in MODULES if m.count(".")} - set(LEVELS))
    assert not missing, f"attnzoo modules/packages with no level in this test: {missing}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("attnzoo.attention")))
def test_the_attention_core_imports_no_lightning_and_nothing_above_it(name):
    imported = _imports(name, MODULES[name])
    assert not {m for m in imported if m.split(".")[0] in ("lightning", "pytorch_lightning", "torchmetrics")}
    above = sorted(
        m for m in imported if m.startswith("attnzoo") and not m.startswith(("attnzoo.attention", "attnzoo.util"))
    )
    assert not above, f"{name} imports {above}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("attnzoo.util")))
def test_util_imports_only_the_standard_library(name):
    imported = {m.split(".")[0] for m in _imports(name, MODULES[name])} - {"__future__"}
    outside = sorted(m for m in imported if m not in sys.stdlib_module_names)
    assert not outside, f"{name} imports {outside}; attnzoo.util sits below every other module, on the standard library"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.count(".")))
def test_imports_flow_one_way(name):
    own = _level(name)
    imported = {m for m in _imports(name, MODULES[name]) if m.startswith("attnzoo.") and m in MODULES}
    upward = sorted(m for m in imported if _level(m) > own)
    assert not upward, f"{name} (level {own}) imports {upward} from above it"
    if own < LEVELS["fit"]:
        commands = sorted(m for m in imported if m.split(".")[1] in COMMANDS)
        assert not commands, f"library module {name} imports the command modules {commands}"


def test_the_top_of_the_package_holds_only_commands_and_config():
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert top <= COMMANDS | {"config"}, f"modules at the top that are not commands: {sorted(top - COMMANDS)}"


def _module_edges(name: str, path: Path) -> set[str]:
    """The attnzoo modules `name` imports; `from package import module` counts as the module alone (it runs the
    package's `__init__` first, as importing any submodule does, which no cycle needs to count)."""
    found = set()
    for module, names in _import_nodes(name, path):
        submodules = {f"{module}.{n}" for n in names} & MODULES.keys()
        found |= submodules if names and len(submodules) == len(names) else {module, *submodules}
    return {m for m in found if m in MODULES and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    graph = {name: _module_edges(name, path) for name, path in MODULES.items()}
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other (also inside functions): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


def test_data_keeps_its_modules_in_role_subpackages():
    data = PACKAGE / "data"
    loose = sorted(p.name for p in data.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at attnzoo/data/ root (move each to modules, formats, embedded or tokenizers): {loose}"


# --------------------------------------------------------------------------------------------- the run's config

# where a run's config values are written: `attnzoo.run.build._set`, called while the config is resolved, once
CONFIG_WRITER = ("attnzoo.run.build", "_set")
CONFIG_NAMES = {"cfg", "config", "tree", "resolved"}  # names a config (or its tree) goes by in the package


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node of `tree` -> the name of the outermost function holding it ("" at module level)."""
    owner: dict[ast.AST, str] = {}
    for top in ast.iter_child_nodes(tree):
        name = top.name if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) else ""
        for node in ast.walk(top):
            owner[node] = name
    return owner


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _names_config(node: ast.AST) -> bool:
    """Whether an expression is a config or reaches into one (`cfg.tree`, `tree["model"]`, `config.x`)."""
    chain = node
    while isinstance(chain, ast.Attribute | ast.Subscript):
        if isinstance(chain, ast.Attribute) and chain.attr == "tree":
            return True
        chain = chain.value
    return isinstance(chain, ast.Name) and chain.id in CONFIG_NAMES


def _config_writes(name: str, source: str) -> list[str]:
    """`line N: what` for each statement of module `name` (its `source`) that writes config values, in order."""
    tree = ast.parse(source)
    owner = _functions(tree)
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("update", "merge_with", "set_readonly", "set_struct") and (
                isinstance(node.func.value, ast.Name) and node.func.value.id == "OmegaConf"
            ):
                what = f"OmegaConf.{node.func.attr}"
            elif node.func.attr == "merge_with":
                what = "merge_with"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and _names_config(node.args[0]):
                what = f"{node.func.id} on a config"
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in targets:
                for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(part, ast.Attribute | ast.Subscript) and _names_config(part):
                        what = f"assignment to {ast.unparse(part)}"
        if what is None:
            continue
        here = (name, owner.get(node, ""))
        allowed = here == CONFIG_WRITER or (here == ("attnzoo.config", "Config") and what != "OmegaConf.update")
        if not allowed:
            found.append((node.lineno, f"line {node.lineno}: {what}"))
    return [text for _, text in sorted(found)]


def test_the_config_is_written_in_one_place():
    """A loaded `Config` is read-only; only `attnzoo.run.build._set` (resolving a run's config, once) writes values."""
    writes = [f"{name} {w}" for name, path in MODULES.items() for w in _config_writes(name, path.read_text())]
    assert not writes, f"config values written outside {'.'.join(CONFIG_WRITER)}: {writes}"
    module = ast.parse(MODULES[CONFIG_WRITER[0]].read_text())
    callers = [n for n in ast.walk(module) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_set"]
    owners = {_functions(module)[n] for n in callers}
    assert owners == {"resolve"}, f"{CONFIG_WRITER[1]} is called from {owners}; only resolve() may write the config"


def test_the_layout_check_finds_config_writes():
    source = (
        "def f(cfg, data):\n    OmegaConf.update(cfg.tree, 'a', 1)\n    cfg.tree.model['x'] = 2\n"
        "    setattr(cfg, 'tree', None)\n    data.x = 3\n"
    )
    assert _config_writes("attnzoo.run.other", source) == [
        "line 2: OmegaConf.update",
        "line 3: assignment to cfg.tree.model['x']",
        "line 4: setattr on a config",
    ]
    assert _config_writes("attnzoo.run.build", source.replace("def f(", "def _set(")) == []  # the one writer


def test_a_loaded_config_is_read_only():
    from omegaconf.errors import ReadonlyConfigError

    from attnzoo.config import load

    cfg = load([PACKAGE.parent / "recipes" / "vit.yaml"])
    with pytest.raises(ReadonlyConfigError):
        cfg.tree.model.depth = 1


DATAMODULE_NAMES = {"data", "dm", "datamodule"}  # names a DataModule goes by in attnzoo/run


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("attnzoo.run")))
def test_run_calls_the_datamodule_contract_without_probing_it(name):
    """run/ calls what `attnzoo.data.modules.base.DataModule` declares; it never asks a DataModule what it has."""
    probes = []
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("hasattr", "getattr") and node.args:
            first = node.args[0]
            named = first.id if isinstance(first, ast.Name) else getattr(first, "attr", None)
            if named in DATAMODULE_NAMES and (node.func.id == "hasattr" or len(node.args) == 3):
                probes.append(f"line {node.lineno}: {ast.unparse(node)}")
    assert not probes, f"{name} probes a DataModule: {probes}"


# --------------------------------------------------------------------------------------------- the tests themselves

TESTS = Path(__file__).resolve().parent


def _test_tree_imports(name: str, source: str, is_package: bool = False) -> list[str]:
    """`line N: module` for each test-tree module (`tests.*`) that module `name` imports, except tests.helpers."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            is_dir = (TESTS.parent / module.replace(".", "/")).is_dir()  # `from tests.run import test_x`: a module
            modules = [f"{module}.{alias.name}" for alias in node.names] if is_dir else [module]
        else:
            continue
        for module in modules:
            shared = module == "tests.helpers" or module.startswith("tests.helpers.")
            if (module == "tests" or module.startswith("tests.")) and not shared:
                found.append((node.lineno, f"line {node.lineno}: {module}"))
    return [text for _, text in sorted(found)]


def test_the_layout_check_finds_test_modules_importing_test_modules():
    source = (
        "from tests.attention.test_patterns import EXAMPLES\nimport tests.data.test_audio\n"
        "from tests.helpers import VIT\nfrom tests.helpers.audio import small\nfrom .test_kinds import build\n"
        "def f():\n    from tests.run import test_slurm\n    from tests import helpers\n"
    )
    assert _test_tree_imports("tests.attention.variants.test_formulas", source) == [
        "line 1: tests.attention.test_patterns",
        "line 2: tests.data.test_audio",
        "line 5: tests.attention.variants.test_kinds",
        "line 7: tests.run.test_slurm",
    ]


def test_test_modules_share_code_through_tests_helpers_only():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        parts = path.relative_to(TESTS.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found += [f"{name} {w}" for w in _test_tree_imports(name, path.read_text(), is_package)]
    assert not found, f"test modules importing other test modules (move what they share to tests/helpers): {found}"
