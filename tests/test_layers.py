"""Inside each module, the sections are layers in fact: a definition uses only names of its own
section or of sections above it. Between modules the build checks the order (tools/build.py
refuses a relative import of a module that is not above it in MODULES); what only a syntax tree
sees is the order of the sections that one module holds. The modules are read as syntax trees,
never imported, so the check also holds for code that no test runs."""

from __future__ import annotations

import ast
import bisect
import re
import unittest
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Sequence, Set, Tuple

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "rl_batch_demo"
MODULES = sorted(path for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
BANNER = re.compile(r"^# (?P<name>\S.*?) #{4,}$")
HEAD = "module head"  # the docstring and the imports, before the first banner

# Sections that may use names of sections below them in their module: none.
MAY_USE_ANYTHING: FrozenSet[str] = frozenset()

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def banners(lines: Sequence[str]) -> List[Tuple[int, str]]:
    """(line number, section name) of every banner, after the module head at line 1."""
    found = [(1, HEAD)]
    found += [(number, match["name"]) for number, line in enumerate(lines, 1) if (match := BANNER.match(line))]
    return found


def _arguments(args: ast.arguments) -> List[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return every + [arg for arg in (args.vararg, args.kwarg) if arg is not None]


def _bound(body: Sequence[ast.AST]) -> Tuple[Set[str], Set[str]]:
    """Names a scope's statements bind (assignments, loops, imports, nested definitions, except
    and with targets), and the names it declares global; nested scopes' own names are theirs."""
    bound: Set[str] = set()
    declared: Set[str] = set()
    pending = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue  # its decorators and defaults bind nothing here
        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global):
            declared.update(node.names)
        pending.extend(ast.iter_child_nodes(node))
    return bound - declared, declared


def global_loads(node: ast.AST, visible: FrozenSet[str], closure: FrozenSet[str]) -> Iterator[ast.Name]:
    """Every name `node` reads that no enclosing scope binds: a module global (or a builtin).
    `visible` is what the current scope sees; `closure` what a function nested here would see
    (a class body's own names are not visible inside its methods). Decorators, annotations and
    default values are read in the enclosing scope, so they count as well."""
    if isinstance(node, ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id not in visible:
            yield node
        return
    if isinstance(node, _FUNCTIONS):
        args = node.args
        outer: List[ast.AST] = [*getattr(node, "decorator_list", []), *args.defaults]
        outer += [default for default in args.kw_defaults if default is not None]
        outer += [arg.annotation for arg in _arguments(args) if arg.annotation is not None]
        returns = getattr(node, "returns", None)
        outer += [returns] if returns is not None else []
        for part in outer:
            yield from global_loads(part, visible, closure)
        body: List[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
        bound, declared = _bound(body)
        inner = (closure | bound | {arg.arg for arg in _arguments(args)}) - declared
        for statement in body:
            yield from global_loads(statement, frozenset(inner), frozenset(inner))
        return
    if isinstance(node, ast.ClassDef):
        for part in [*node.decorator_list, *node.bases, *(keyword.value for keyword in node.keywords)]:
            yield from global_loads(part, visible, closure)
        bound, _ = _bound(node.body)
        for statement in node.body:
            yield from global_loads(statement, visible | bound, closure)
        return
    if isinstance(node, _COMPREHENSIONS):
        targets = {
            name.id
            for generator in node.generators
            for name in ast.walk(generator.target)
            if isinstance(name, ast.Name)
        }
        for child in ast.iter_child_nodes(node):
            yield from global_loads(child, visible | targets, closure | targets)
        return
    for child in ast.iter_child_nodes(node):
        yield from global_loads(child, visible, closure)


def _statement_label(statement: ast.stmt) -> str:
    names = sorted(_bound([statement])[0])
    if names:
        return names[0] if len(names) == 1 else ", ".join(names)
    return f"the statement at line {statement.lineno}"


def layer_violations(source: str) -> List[str]:
    """Each use of a module global defined in a later section than the definition using it."""
    lines = source.splitlines()
    sections = banners(lines)
    starts = [number for number, _ in sections]

    def section_of(line: int) -> str:
        return sections[bisect.bisect_right(starts, line) - 1][1]

    order = {name: index for index, (_, name) in enumerate(sections)}
    tree = ast.parse(source)
    defined: Dict[str, Tuple[str, int]] = {}  # global name -> (section, line), its first definition
    for statement in tree.body:
        for name in _bound([statement])[0]:
            defined.setdefault(name, (section_of(statement.lineno), statement.lineno))
    # A statement can use a later section's name only if the name is in its text: the scopes are
    # worked out (global_loads) only for a statement whose text holds one, rare in a module. The
    # test took 0.95 s walking every scope of every statement, 0.22 s so (most of it parsing).
    later_words: Dict[str, re.Pattern[str]] = {}

    def may_use_a_later_name(statement: ast.stmt, section: str) -> bool:
        if section not in later_words:
            later = sorted(name for name, (home, _) in defined.items() if order[home] > order[section])
            later_words[section] = re.compile(r"\b(?:" + "|".join(map(re.escape, later)) + r")\b" if later else r"(?!)")
        first = min([statement.lineno, *(node.lineno for node in getattr(statement, "decorator_list", []))])
        last = statement.end_lineno or statement.lineno
        return later_words[section].search("\n".join(lines[first - 1 : last])) is not None

    problems = []
    for statement in tree.body:
        section = section_of(statement.lineno)
        if section in MAY_USE_ANYTHING or not may_use_a_later_name(statement, section):
            continue
        reported: Set[str] = set()
        for use in global_loads(statement, frozenset(), frozenset()):
            if use.id not in defined or use.id in reported:
                continue
            home, line = defined[use.id]
            if order[home] > order[section]:
                reported.add(use.id)
                problems.append(
                    f"line {use.lineno}: {_statement_label(statement)} ({section}) uses {use.id}, "
                    f"defined further down in {home!r} (line {line})"
                )
    return problems


class LayerTest(unittest.TestCase):
    def test_no_definition_uses_a_later_section(self) -> None:
        self.assertGreater(len(MODULES), 10)
        for module in MODULES:
            with self.subTest(module=module.name):
                problems = layer_violations(module.read_text(encoding="utf-8"))
                self.assertEqual(problems, [], "move the definition to its layer, or pass the data or callable down")

    def test_every_section_opens_with_what_it_does(self) -> None:
        sections = []
        for module in MODULES:
            lines = module.read_text(encoding="utf-8").splitlines()
            sections += [(module.name, lines, number, name) for number, name in banners(lines)[1:]]
        self.assertGreater(len(sections), 10)
        for module_name, lines, number, name in sections:
            with self.subTest(module=module_name, section=name):
                opening = lines[number : number + 2]  # the two lines right under the banner
                self.assertRegex(opening[0], r"^# \S", f"line {number + 1}: the section's opening comment")
                self.assertRegex(" ".join(opening), r"(?i)\buses?\b", "which sections it may use")

    def test_a_forward_reference_is_reported(self) -> None:
        source = "\n".join(
            [
                "import os",
                "# Low ########",
                "LIMIT: int = 3",
                "def low(value: int = LIMIT) -> bool:",
                "    return helper(value) and os.sep != ''",
                "class Record:",
                "    size: Later = 0",
                "    def method(self, high=None):",
                "        high = 1",
                "        return [high for high in range(high)] + [HIGH]",
                "def shadowed(helper):",
                "    return helper()",
                "# High ########",
                "def helper(value: int) -> bool:",
                "    return low(value)",
                "HIGH = 2",
                "class Later:",
                "    pass",
                "# Command line ########",
                "def main() -> int:",
                "    return helper(1) + HIGH",
            ]
        )
        problems = layer_violations(source)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("line 5: low (Low) uses helper, defined further down in 'High' (line 14)", problems[0])
        self.assertIn("Record (Low) uses Later", problems[1])  # an annotation
        self.assertIn("Record (Low) uses HIGH", problems[2])  # inside a method
        self.assertFalse(any("shadowed" in problem or "main" in problem for problem in problems))

    def test_defaults_and_decorators_count(self) -> None:
        source = "# Low ####\ndef low(x=LATER, *, y=other()):\n    pass\n# High ####\nLATER = 1\ndef other(): pass\n"
        problems = layer_violations(source)
        self.assertEqual([problem.split(" uses ")[1].split(",")[0] for problem in problems], ["LATER", "other"])


if __name__ == "__main__":
    unittest.main()
