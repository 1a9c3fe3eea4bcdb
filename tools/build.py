#!/usr/bin/env python3
"""Generate rl_batch_demo.py, the one file users get, from the modules under src/rl_batch_demo/.

Like SQLite's amalgamation (tool/mksqlite3c.tcl), the order of MODULES below is the layer order:
a module may import only from modules listed above it, and the build refuses anything else.
Each module's own header (docstring, `from __future__`, imports) is dropped; the standard-library
imports of all modules are merged into one block at the top of the file; each body is copied
verbatim; the `__main__` footer is written here, so no module has to import the command line.

    python3 tools/build.py            write rl_batch_demo.py
    python3 tools/build.py --check    exit 1, with the diff, if rl_batch_demo.py is stale
    python3 tools/build.py --where N  which module and line the generated file's line N came from

Standard library only; runs on Python 3.9+.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rl_batch_demo"
TARGET = ROOT / "rl_batch_demo.py"

# The layer order, low to high. __init__.py holds only the generated file's docstring.
MODULES = (
    "constants",
    "errors",
    "records",
    "core_basics",
    "core_cluster",
    "core_clocks",
    "core_validation",
    "core_permissions",
    "core_reports",
    "core_guide",
    "status",
    "kubectl",
    "persistence",
    "flow_job",
    "flow_run",
    "commands",
    "cli",
    "api",
    "payloads",
)
# The command line reads the payload text, which sits last so that the pure move stays
# byte-identical with the file it came from; the one exception to the order.
MAY_REACH_DOWN = {("cli", "payloads")}

FOOTER = '\n\nif __name__ == "__main__":\n    raise SystemExit(main())\n'
FIX = "edit src/rl_batch_demo/, then run python3 tools/build.py"


class BuildError(Exception):
    """A source the build cannot turn into the file exactly; one sentence."""


class Module(NamedTuple):
    name: str
    path: Path
    plain_imports: Tuple[str, ...]  # `import x`
    from_imports: Tuple[Tuple[str, str], ...]  # (module, name) of `from module import name`
    body: str  # everything after the header, verbatim
    body_line: int  # the line of the source file where the body starts


def _stdlib(name: str) -> bool:
    known = getattr(sys, "stdlib_module_names", None)
    return known is None or name.split(".", maxsplit=1)[0] in known


def read_module(name: str, position: int) -> Module:
    path = PACKAGE / f"{name}.py"
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    statements = list(tree.body)
    if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements.pop(0)  # the module's docstring
    plain: List[str] = []
    froms: List[Tuple[str, str]] = []
    header_end = 0
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname or not _stdlib(alias.name):
                    raise BuildError(f"{path.name}:{node.lineno}: only plain standard-library imports merge")
                plain.append(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a sibling module: checked against the order, then dropped
                source = node.module or ""
                if source not in MODULES or (
                    MODULES.index(source) >= position and (name, source) not in MAY_REACH_DOWN
                ):
                    raise BuildError(
                        f"{path.name}:{node.lineno}: imports .{source}, which is not above {name} in MODULES"
                    )
            elif node.module == "__future__":
                pass
            elif _stdlib(node.module or "") and all(alias.asname is None for alias in node.names):
                froms.extend((node.module or "", alias.name) for alias in node.names)
            else:
                raise BuildError(f"{path.name}:{node.lineno}: only standard-library imports merge")
        else:
            break
        header_end = node.end_lineno or node.lineno
    lines = text.splitlines(keepends=True)
    start = header_end
    while start < len(lines) and not lines[start].strip():
        start += 1
    return Module(name, path, tuple(plain), tuple(froms), "".join(lines[start:]), start + 1)


def _name_key(name: str) -> Tuple[int, str]:
    """ruff's (isort's) order of imported names: CONSTANTS, then Classes, then the rest."""
    if name.isupper() and len(name) > 1:
        return 0, name
    return (1 if name[:1].isupper() else 2), name


def import_block(modules: Sequence[Module]) -> str:
    plain = sorted({name for module in modules for name in module.plain_imports})
    froms: Dict[str, set] = {}
    for module in modules:
        for source, name in module.from_imports:
            froms.setdefault(source, set()).add(name)
    out = ["from __future__ import annotations\n", "\n"]
    out += [f"import {name}\n" for name in plain]
    for source in sorted(froms):
        names = sorted(froms[source], key=_name_key)
        line = f"from {source} import {', '.join(names)}\n"
        if len(line) > 121:
            line = f"from {source} import (\n" + "".join(f"    {name},\n" for name in names) + ")\n"
        out.append(line)
    return "".join(out)


def generate() -> Tuple[str, List[Tuple[int, Module]]]:
    """The file's text, and (first line, module) of each body in it."""
    docstring = (PACKAGE / "__init__.py").read_text(encoding="utf-8")
    modules = [read_module(name, position) for position, name in enumerate(MODULES)]
    text = docstring + "\n" + import_block(modules) + "\n"
    placed: List[Tuple[int, Module]] = []
    for index, module in enumerate(modules):
        if index:
            text += "\n\n"
        placed.append((text.count("\n") + 1, module))
        text += module.body.rstrip("\n") + "\n"
    return text + FOOTER, placed


def where(line: int) -> str:
    _, placed = generate()
    for first, module in reversed(placed):
        if line >= first:
            offset = line - first
            if offset < module.body.count("\n"):
                return f"src/rl_batch_demo/{module.name}.py:{module.body_line + offset}"
            break
    return f"{TARGET.name}:{line} is written by tools/build.py itself (the header or the footer)"


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail, with the diff, if rl_batch_demo.py is stale")
    parser.add_argument("--where", type=int, metavar="LINE", help="map a line of rl_batch_demo.py to its module")
    args = parser.parse_args(argv)
    try:
        if args.where is not None:
            print(where(args.where))
            return 0
        text, _ = generate()
    except (BuildError, SyntaxError, OSError) as error:
        print(f"tools/build.py: {error}", file=sys.stderr)
        return 2
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current == text:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True), text.splitlines(keepends=True), "rl_batch_demo.py", "generated"
        )
        sys.stdout.writelines(list(diff)[:200])
        print(f"\n{TARGET.name} is not what src/rl_batch_demo/ generates: {FIX}.", file=sys.stderr)
        return 1
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
