"""Sphinx extension: a node's parameter table, generated at build time from the specs the node declares
and validates with (robot_dynamics.doc_tables).  In a page (MyST)::

    ```{param-table} controller_node
    ```

One table per section (general, the law groups, safety, ...), each under a rubric.  An unknown node
is an error (the build runs with -W).
"""
import re

from docutils import nodes
from docutils.parsers.rst import Directive

_CODE = re.compile(r"`([^`]+)`")


def _inline(text):
    """Text with `name` spans as literals."""
    para = nodes.paragraph()
    pos = 0
    for m in _CODE.finditer(text):
        if m.start() > pos:
            para += nodes.Text(text[pos:m.start()])
        para += nodes.literal(m.group(1), m.group(1))
        pos = m.end()
    if pos < len(text):
        para += nodes.Text(text[pos:])
    return para


def _table(rows):
    cols = (("parameter", 24), ("type", 7), ("default", 14), ("read", 8), ("description", 47))
    table = nodes.table(classes=["param-table"])
    group = nodes.tgroup(cols=len(cols))
    table += group
    for _, width in cols:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    row = nodes.row()
    for title, _ in cols:
        row += nodes.entry("", nodes.paragraph(text=title))
    head += row
    group += head
    body = nodes.tbody()
    for r in rows:
        row = nodes.row(ids=[nodes.make_id("param-" + r.name)])
        row += nodes.entry("", nodes.paragraph("", "", nodes.literal(r.name, r.name)))
        row += nodes.entry("", nodes.paragraph(text=r.type))
        row += nodes.entry("", nodes.paragraph("", "", nodes.literal(r.default, r.default)))
        row += nodes.entry("", nodes.paragraph(text=r.read))
        row += nodes.entry("", _inline(r.description))
        body += row
    group += body
    return table


class ParamTable(Directive):
    required_arguments = 1
    has_content = False

    def run(self):
        from robot_dynamics import doc_tables
        node = self.arguments[0]
        try:
            rows = doc_tables.rows(node)
        except KeyError as e:
            raise self.error(str(e))
        out, section, chunk = [], None, []
        for r in rows + [None]:
            if r is None or r.section != section:
                if chunk:
                    out.append(nodes.rubric(text=f"{node}: {section}"))
                    out.append(_table(chunk))
                if r is None:
                    break
                section, chunk = r.section, []
            chunk.append(r)
        return out


def setup(app):
    app.add_directive("param-table", ParamTable)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
