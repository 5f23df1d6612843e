"""Pictures of a derivation: the kernel plan after each step, drawn with graphviz.

Each panel is the plan after one step: the graph's nodes grouped into their kernels (one
rounded box per kernel, labelled with its grid tiling, streamed axis and online-softmax
state), nodes coloured by where their value lives (global memory, shared memory, registers),
inputs as plain ellipses, arrows for data flow. A legend says so on the picture.

Long derivations stay readable: the completion steps that only tile and stream
(``tile_parallel``, ``stream_reduction``), which change labels but not the shape of the
plan, are drawn as one panel that lists them; and panels wrap, :data:`PANELS_PER_ROW` to a
row, top to bottom (invisible edges stack the panels of one column), so the picture grows
downwards instead of thirteen panels wide.

Rendering needs graphviz's ``dot`` program (a system package, not a pip one); without it
:func:`render` writes the ``.dot`` text and raises :class:`RuntimeError` saying how to
install it.

Owns: the pictures. Imports the plan and the rules (to replay a derivation), and the
atomic file writer.
"""

from __future__ import annotations

from pathlib import Path

from .derive.derivation import Derivation, Step
from .derive.plan import Plan, initial_plan, placement
from .derive.rules import RULES
from .ir.dag import LEAF_OPS
from .storage import atomic_write

#: Fill colour of a node by where its value lives, and what the legend calls it.
COLOURS = {"global": "#f4b183", "shared": "#9dc3e6", "fragment": "#c5e0b4"}
MEANINGS = {"global": "global memory (written out)", "shared": "shared memory (one stream "
            "tile at a time)", "fragment": "registers (accumulators, per-row state)"}
#: Panels side by side before the next row.
PANELS_PER_ROW = 3
#: Steps drawn as one panel when they come in a row (they tile and stream, nothing else).
COMPLETION_RULES = ("tile_parallel", "stream_reduction")
#: How to install graphviz's ``dot`` (the hint when it is missing).
DOT_HINT = ("install graphviz's `dot` program: apt-get install graphviz (Debian, Ubuntu), "
            "dnf install graphviz, brew install graphviz or conda install -c conda-forge "
            "graphviz")


def plan_dot(plan: Plan, prefix: str = "", title: str = "") -> list[str]:
    """DOT lines (a subgraph) for one plan; node names are prefixed to keep steps apart."""
    g = plan.graph
    lines = [f'subgraph "cluster_{prefix}" {{',
             f'label="{_escape(title)}"; fontsize=14; style=dashed;']
    for i, n in enumerate(g.nodes):
        if n.op == "input":
            lines.append(f'"{prefix}{i}" [label="{_escape(n.describe())}", shape=ellipse];')
    for k, kern in enumerate(plan.kernels):
        where = placement(plan, k)
        lab = [f"kernel {k}"]
        if kern.grid:
            lab.append("grid: " + " x ".join(f"{a}/T" for a in kern.grid))
        if kern.stream:
            lab.append(f"stream {kern.stream}" + (" (online softmax)" if kern.online else ""))
        lines.append(f'subgraph "cluster_{prefix}k{k}" {{ label="{chr(10).join(lab)}"; '
                     'style=rounded; color="#404040";')
        for i in kern.nodes:
            n = g.nodes[i]
            lines.append(f'"{prefix}{i}" [label="{i}: {_escape(n.describe())}\\n'
                         f'[{",".join(n.axes)}]", shape=box, style=filled, '
                         f'fillcolor="{COLOURS[where[i]]}"];')
        lines.append("}")
    for i, n in enumerate(g.nodes):
        for a in n.args:
            if g.nodes[a].op in LEAF_OPS and g.nodes[a].op != "input":
                continue
            lines.append(f'"{prefix}{a}" -> "{prefix}{i}";')
    lines.append("}")
    return lines


def _escape(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def legend_html(title: str) -> str:
    """The picture's label: ``title`` over the legend (an HTML-like table of the colours
    and shapes)."""
    rows = [f'<TR><TD BGCOLOR="{COLOURS[k]}" BORDER="1" WIDTH="28"> </TD>'
            f'<TD ALIGN="LEFT">{MEANINGS[k]}</TD></TR>' for k in COLOURS]
    rows += ['<TR><TD BORDER="1" STYLE="ROUNDED">oval</TD><TD ALIGN="LEFT">a graph input</TD>'
             '</TR>',
             '<TR><TD BORDER="1" STYLE="ROUNDED">box</TD><TD ALIGN="LEFT">one kernel: its '
             'grid (axis/T: tiled) and streamed axis</TD></TR>',
             '<TR><TD>→</TD><TD ALIGN="LEFT">data flow</TD></TR>',
             '<TR><TD>- - -</TD><TD ALIGN="LEFT">the plan after a step</TD></TR>']
    return ('<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2"><TR><TD COLSPAN="2">'
            f'<B>{_html(title)}</B></TD></TR>' + "".join(rows) + '</TABLE>>')


def _html(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def panels(graph, derivation: Derivation) -> list[tuple[str, Plan]]:
    """The panels of a derivation: (title, plan after it), the initial plan first, each
    run of completion steps (:data:`COMPLETION_RULES`) one panel."""
    plan = initial_plan(graph)
    out = [(f"{graph.name}: initial plan", plan)]
    run: list[tuple[int, Step]] = []

    def flush() -> None:
        if run:
            first, last = run[0][0], run[-1][0]
            what = ", ".join(f"{s.rule} {list(s.site)}" for _, s in run)
            span = f"step {first}" if first == last else f"steps {first}-{last}"
            out.append((f"{span}: {_wrap(what)}", plan))
            run.clear()

    for i, step in enumerate(derivation.steps, 1):
        plan = RULES[step.rule].apply(plan, tuple(step.site))
        if step.rule in COMPLETION_RULES:
            run.append((i, step))
            continue
        flush()
        out.append((f"step {i}: {step.rule} at {list(step.site)}", plan))
    flush()
    return out


def _wrap(text: str, width: int = 60) -> str:
    """Break a long panel title into lines of about ``width`` characters."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line])


def derivation_dot(graph, derivation: Derivation, *, per_row: int = PANELS_PER_ROW) -> str:
    """A DOT document of the plan after every step of ``derivation`` (see the module
    docstring): a legend, then the panels, ``per_row`` to a row."""
    body: list[str] = []
    anchors = []  # per panel: (a node at its top, a node at its bottom)
    for p, (title, plan) in enumerate(panels(graph, derivation)):
        prefix = f"s{p}_"
        body += plan_dot(plan, prefix, title)
        g = plan.graph
        top = g.input_ids[0] if g.input_ids else 0
        anchors.append((f"{prefix}{top}", f"{prefix}{g.outputs[0]}"))
    for p in range(len(anchors) - per_row):  # stack each column: panel p above p + per_row
        body.append(f'"{anchors[p][1]}" -> "{anchors[p + per_row][0]}" '
                    '[style=invis, weight=10];')
    head = ['digraph derivation {', 'rankdir=TB; compound=true; newrank=true; '
            'node [fontname="Helvetica"];',
            f'label={legend_html(f"{graph.name} {derivation.id}")}; labelloc=t; '
            'labeljust=l;']
    return "\n".join(head + body + ["}"]) + "\n"


def render(dot: str, out: Path) -> Path:
    """Render DOT to ``out`` (format from its suffix: .png, .svg, .pdf; .dot writes the text).

    Raises:
        RuntimeError: the graphviz Python package or graphviz's ``dot`` program is missing
            (the message says which and how to install it; the .dot text is written next
            to ``out``).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".dot":
        atomic_write(out, dot)
        return out
    try:
        import graphviz
    except ImportError:
        atomic_write(out.with_suffix(".dot"), dot)
        raise RuntimeError(f"the graphviz Python package is missing (pip install graphviz); "
                           f"wrote {out.with_suffix('.dot')} instead") from None
    try:
        data = graphviz.Source(dot).pipe(format=out.suffix.lstrip(".") or "png")
    except graphviz.ExecutableNotFound:
        atomic_write(out.with_suffix(".dot"), dot)
        raise RuntimeError(f"graphviz's `dot` program is not on PATH, so no picture: "
                           f"{DOT_HINT}; wrote {out.with_suffix('.dot')} instead") from None
    except Exception as e:  # noqa: BLE001 - dot failed on this document
        atomic_write(out.with_suffix(".dot"), dot)
        raise RuntimeError(f"graphviz's `dot` failed ({type(e).__name__}: "
                           f"{str(e).strip()[:200]}); wrote {out.with_suffix('.dot')} "
                           "instead") from None
    atomic_write(out, data)
    return out
