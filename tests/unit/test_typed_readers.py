"""The renderers, compare and the store read the typed result (issue 18): `result.document` and its
dataclasses, attributes a type checker follows, so a renamed field fails where it is read instead of
as a KeyError in one renderer at run time. No module here reads the document's JSON form by string.

render/html.py and render/charts.py are not checked yet: they move onto the typed result with
issue 21's report work (they still read `result.doc`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "nsys_collective"
CHECKED = sorted([*PACKAGE.glob("render/*.py"), PACKAGE / "compare.py", *PACKAGE.glob("store/*.py")])
# Names a document goes by, and the Result properties that hand out parts of its JSON form.
DOCUMENT_NAMES = {"doc", "document"}
JSON_PARTS = {"doc", "summary", "findings"}
# compare.Comparison's own `doc` is the comparison's JSON (`compare --json`), not a result's.
OWN_DOC = {"Comparison"}
FROM_JSON: dict[str, set[str]] = {}


def string_reads(source: str, from_json: set[str] = frozenset()) -> list[str]:
    """Where source reads a result's document as JSON data: `x.doc` (the document as dicts),
    `doc["..."]` / `doc.get("...")` on a document or a part of one, `result.summary["..."]`;
    outside the functions named in `from_json`."""
    found: list[str] = []

    class Reads(ast.NodeVisitor):
        classes: list[str] = []

        def own_doc(self, node: ast.AST) -> bool:
            return (isinstance(node, ast.Attribute) and node.attr == "doc" and isinstance(node.value, ast.Name)
                    and node.value.id == "self" and bool(self.classes) and self.classes[-1] in OWN_DOC)

        def json_like(self, node: ast.AST) -> bool:
            """A document, or a part of one read by string (doc["alignment"]["hosts"])."""
            if self.own_doc(node):
                return False
            if isinstance(node, ast.Name):
                return node.id in DOCUMENT_NAMES
            if isinstance(node, ast.Attribute):
                return node.attr in DOCUMENT_NAMES | JSON_PARTS
            if isinstance(node, ast.Subscript):
                return self.json_like(node.value)
            return False

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            if node.name not in from_json:
                self.generic_visit(node)

        def visit_ClassDef(self, node: ast.ClassDef) -> None:
            self.classes.append(node.name)
            self.generic_visit(node)
            self.classes.pop()

        def visit_Attribute(self, node: ast.Attribute) -> None:
            if node.attr == "doc" and not self.own_doc(node):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
            self.generic_visit(node)

        def visit_Subscript(self, node: ast.Subscript) -> None:
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and self.json_like(node.value):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
            self.generic_visit(node)

        def visit_Call(self, node: ast.Call) -> None:
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and self.json_like(f.value)):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
            self.generic_visit(node)

    Reads().visit(ast.parse(source))
    return found


def test_the_check_finds_string_reads_of_the_document():
    """The check itself: what the renderers read before, it finds; typed reads it lets through."""
    before = '''
def render(result):
    doc = result.doc
    a = doc["alignment"]["hosts"]
    w = doc.get("whatif")
    s = result.summary["wait_ns"]
    t = result.document["schema_version"]
'''
    assert len(string_reads(before)) == 6, string_reads(before)
    after = '''
class Comparison:
    def findings(self):
        return self.doc["findings"]

def render(result, cmp):
    document = result.document
    hosts = document.alignment.hosts
    return cmp["summary"]["wait_ns"], {"a": 1}.get("a"), hosts[0]
'''
    assert string_reads(after) == []


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_reader_subscripts_the_document_by_string(path):
    name = path.relative_to(PACKAGE).as_posix()
    assert CHECKED and string_reads(path.read_text(), FROM_JSON.get(name, set())) == [], (
        f"{path.relative_to(PACKAGE)} reads the document as JSON data; read result.document's attributes")


def test_every_store_column_is_a_field_of_the_records_it_is_filled_from():
    """store/runs.py fills each table's columns from the fields of that name of the document's
    records (None where a record has none): a column no record has would be null in every row, as
    collectives.reference_rank was from schema 2 on, unnoticed."""
    from dataclasses import fields

    from nsys_collective import result as r
    from nsys_collective.store import schema as s

    def names(*classes) -> set[str]:
        return {f.name for c in classes for f in fields(c)}

    filled_from = {
        s.RankTableRow: names(r.RankRow) | {"run_id"},
        s.CollectiveRow: names(r.Collective) | {"run_id", "collective"},
        s.BlameRow: names(*r.BLAME_OF.values()) | {"run_id", "collective", "position"},
        s.BlockingRow: names(r.BlockingKernel, r.BlockingLaunch) | {"run_id", "position"},
        s.ContentionRow: names(r.ContentionEntry) | {"run_id", "position"},
        s.AlignmentHostRow: names(r.HostClock, r.RanksClock) | {"run_id", "position"},
    }
    for table, known in filled_from.items():
        assert {c.key for c in table.__table__.columns} <= known, table.__tablename__
