"""How far the CLI's whole config travels: from `tuner.app.run(cfg)`, every call that passes it on, followed.

`python -m tests.tuner.config_reach [REPO]` prints the walk and its figures (files, stops, returns);
`test_config_reach.py` holds them to issue 31's bound.

The walk is static (`ast`), over the `tuner` package only:
- the config is the `DictConfig` that `run` gets and the `AppConfig` built from it: a name bound to it (a
  parameter that received it, a name assigned from it, from `dataclasses.replace(it, ...)`, from an attribute
  `.app` of anything, or from a call whose return annotation is `AppConfig`/`DictConfig`), or `self.X` where a
  constructor or `__init__` stored it in `X`;
- a stop is a call, in source order, that hands the config (whole: a section such as `app.slo` is not the
  config) to a function, method or class of `tuner`, resolved through imports, `self.` and constructors; the
  walk enters a function once (its first stop) and follows what it passes on;
- a return is a stop in a file the walk had left for another, earlier.

What it cannot see (calls through a variable of unknown type, `getattr`) it leaves out: the figures are a
lower bound, which is why the walk is printed for a reader to check.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
CONFIG_TYPES = {"AppConfig", "DictConfig"}


@dataclass
class Func:
    module: str
    qualname: str  # f, or Class.method
    node: ast.FunctionDef
    params: list[str]  # positional parameters, self/cls left out

    @property
    def file(self) -> str:
        return self.module.replace(".", "/") + ".py"


@dataclass
class Klass:
    module: str
    name: str
    node: ast.ClassDef
    fields: list[str] = field(default_factory=list)  # a dataclass's or NamedTuple's fields, in order
    methods: dict[str, Func] = field(default_factory=dict)


class Module(NamedTuple):
    name: str
    tree: ast.Module
    funcs: dict[str, Func]
    classes: dict[str, Klass]
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, name or None for a module)


class Stop(NamedTuple):
    caller: str  # module:qualname
    callee: str
    file: str  # the callee's
    line: int  # the call's line in the caller's file


def _params(node: ast.FunctionDef, method: bool) -> list[str]:
    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    names += [a.arg for a in node.args.kwonlyargs]
    return names[1:] if method and names and names[0] in ("self", "cls") else names


def _load(name: str, path: Path) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    funcs: dict[str, Func] = {}
    classes: dict[str, Klass] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs[node.name] = Func(name, node.name, node, _params(node, False))
        elif isinstance(node, ast.ClassDef):
            k = Klass(name, node.name, node)
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    k.fields.append(item.target.id)
                elif isinstance(item, ast.FunctionDef):
                    k.methods[item.name] = Func(name, f"{node.name}.{item.name}", item, _params(item, True))
            classes[node.name] = k
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                imports[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                imports[a.asname or a.name] = (a.name, None)
    return Module(name, tree, funcs, classes, imports)


def load_package(root: Path = ROOT, package: str = "tuner") -> dict[str, Module]:
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = _load(name, path)
    return modules


class Walk:
    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        self.stops: list[Stop] = []
        self.entered: set[str] = set()

    def resolve(self, module: str, name: str, depth: int = 0) -> Func | Klass | Module | None:
        """A name in a module: its function or class, or what it imports (through re-exports)."""
        m = self.modules.get(module)
        if m is None or depth > 5:
            return None
        if name in m.funcs:
            return m.funcs[name]
        if name in m.classes:
            return m.classes[name]
        if name in m.imports:
            source, imported = m.imports[name]
            if imported is None:
                return self.modules.get(source)
            if f"{source}.{imported}" in self.modules:
                return self.modules[f"{source}.{imported}"]
            return self.resolve(source, imported, depth + 1)
        return None

    def callee(self, func: Func, call: ast.Call) -> Func | Klass | None:
        f = call.func
        if isinstance(f, ast.Name):
            target = self.resolve(func.module, f.id)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id in ("self", "cls") and "." in func.qualname:
                klass = self.modules[func.module].classes[func.qualname.split(".")[0]]
                target = klass.methods.get(f.attr)
            else:
                owner = self.resolve(func.module, f.value.id)
                if isinstance(owner, Module):
                    target = self.resolve(owner.name, f.attr)
                elif isinstance(owner, Klass):  # Class.classmethod(...)
                    target = owner.methods.get(f.attr)
                else:
                    target = None
        else:
            target = None
        return target if isinstance(target, Func | Klass) else None

    def enter(self, func: Func, tracked: set[str], caller: str | None = None, line: int = 0) -> None:
        key = f"{func.module}:{func.qualname}"
        if caller is not None:
            self.stops.append(Stop(caller, key, func.file, line))
        if key in self.entered:
            return
        self.entered.add(key)
        tracked = set(tracked)
        for node in _in_order(func.node):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                self._bind(func, node, tracked)
            elif isinstance(node, ast.Call):
                self._call(func, node, tracked, key)

    def _bind(self, func: Func, node: ast.Assign | ast.AnnAssign, tracked: set[str]) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not self._is_config(func, node.value, tracked):
            return
        for t in targets:
            if isinstance(t, ast.Name):
                tracked.add(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                tracked.add(f"self.{t.attr}")

    def _is_config(self, func: Func, value: ast.expr, tracked: set[str]) -> bool:
        if _expr_name(value) in tracked:
            return True
        if isinstance(value, ast.Attribute) and value.attr == "app":
            return True
        if isinstance(value, ast.Call):
            name = _expr_name(value.func)
            if name in ("replace", "dataclasses.replace") and value.args and _expr_name(value.args[0]) in tracked:
                return True
            target = self.callee(func, value)
            returns = target.node.returns if isinstance(target, Func) else None
            return returns is not None and ast.unparse(returns) in CONFIG_TYPES
        return False

    def _call(self, func: Func, call: ast.Call, tracked: set[str], key: str) -> None:
        given = [i for i, a in enumerate(call.args) if _expr_name(a) in tracked]
        named = [k.arg for k in call.keywords if k.arg and _expr_name(k.value) in tracked]
        if not given and not named:
            return
        target = self.callee(func, call)
        if isinstance(target, Func):
            params = [target.params[i] for i in given if i < len(target.params)] + named
            self.enter(target, set(params), key, call.lineno)
        elif isinstance(target, Klass):
            self._construct(target, given, named, key, call.lineno)

    def _construct(self, klass: Klass, given: list[int], named: list[str], caller: str, line: int) -> None:
        init = klass.methods.get("__init__")
        if init is not None:
            params = [init.params[i] for i in given if i < len(init.params)] + named
            self.enter(init, set(params), caller, line)
            stored = {f"self.{n}" for n in _stored(init.node, set(params))}
        else:  # a dataclass or NamedTuple: its fields in order
            stored = {f"self.{klass.fields[i]}" for i in given if i < len(klass.fields)} | {f"self.{n}" for n in named}
            self.stops.append(Stop(caller, f"{klass.module}:{klass.name}", klass.module.replace(".", "/") + ".py",
                                   line))
        for method in klass.methods.values():
            if method.qualname.endswith(".__init__"):
                continue
            if any(_expr_name(n) in stored for n in ast.walk(method.node) if isinstance(n, ast.Attribute)):
                self.enter(method, stored)


def _stored(init: ast.FunctionDef, params: set[str]) -> list[str]:
    """The attributes `__init__` stores a tracked parameter in (`self.app = app`)."""
    out = []
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and _expr_name(node.value) in params:
            out += [t.attr for t in node.targets if isinstance(t, ast.Attribute)]
    return out


def _expr_name(e: ast.expr) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
        return f"{e.value.id}.{e.attr}"
    return None


def _in_order(func: ast.FunctionDef) -> Iterator[ast.AST]:
    """Assignments and calls in the function's body (nested functions and lambdas included), in source order;
    a call's arguments before the call, an assignment's value before its target is bound."""
    nodes = [n for stmt in func.body for n in ast.walk(stmt) if isinstance(n, ast.Assign | ast.AnnAssign | ast.Call)]
    return iter(sorted(nodes, key=lambda n: (n.lineno, n.col_offset, isinstance(n, ast.Assign | ast.AnnAssign))))


class Reach(NamedTuple):
    stops: list[Stop]
    files: list[str]  # in the order first reached, the start's first
    returns: list[Stop]  # stops into a file the walk had left


def config_reach(root: Path = ROOT, start: str = "tuner.app", function: str = "run", param: str = "cfg") -> Reach:
    walk = Walk(load_package(root))
    entry = walk.modules[start].funcs[function]
    walk.enter(entry, {param})
    files = [entry.file]
    returns, where = [], entry.file
    for stop in walk.stops:
        if stop.file != where and stop.file in files:
            returns.append(stop)
        if stop.file not in files:
            files.append(stop.file)
        where = stop.file
    return Reach(walk.stops, files, returns)


def main(argv: list[str]) -> int:
    reach = config_reach(Path(argv[0]) if argv else ROOT)
    for s in reach.stops:
        mark = "  <- return" if s in reach.returns else ""
        print(f"{s.caller} (line {s.line}) -> {s.callee}{mark}")
    print(f"\n{len(reach.files)} files, {len(reach.stops)} stops, {len(reach.returns)} returns")
    print("files:", ", ".join(reach.files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
