"""Pictures of a derivation: the kernel plan after each step, drawn with graphviz.

Each step is one cluster row: the graph's nodes grouped into their kernels (one box per
kernel, labelled with its grid tiling, streamed axis and online-softmax state), nodes
coloured by where they live (global / shared / fragment), inputs as plain ellipses.

Owns: the pictures. Imports the plan and the rules (to replay a derivation) only.
"""

from __future__ import annotations

from pathlib import Path

from .derive.derivation import Derivation
from .derive.plan import Plan, initial_plan, placement
from .derive.rules import RULES
from .ir.dag import LEAF_OPS

_COLOURS = {"global": "#f4b183", "shared": "#9dc3e6", "fragment": "#c5e0b4"}


def plan_dot(plan: Plan, prefix: str = "", title: str = "") -> list[str]:
    """DOT lines (a subgraph) for one plan; node names are prefixed to keep steps apart."""
    g = plan.graph
    lines = [f'subgraph "cluster_{prefix}" {{', f'label="{title}"; fontsize=14; style=dashed;']
    for i, n in enumerate(g.nodes):
        if n.op == "input":
            lines.append(f'"{prefix}{i}" [label="{n.describe()}", shape=ellipse];')
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
            lines.append(f'"{prefix}{i}" [label="{i}: {n.describe()}\\n[{",".join(n.axes)}]", '
                         f'shape=box, style=filled, fillcolor="{_COLOURS[where[i]]}"];')
        lines.append("}")
    for i, n in enumerate(g.nodes):
        for a in n.args:
            if g.nodes[a].op in LEAF_OPS and g.nodes[a].op != "input":
                continue
            lines.append(f'"{prefix}{a}" -> "{prefix}{i}";')
    lines.append("}")
    return lines


def derivation_dot(graph, derivation: Derivation) -> str:
    """A DOT document showing the plan after every step of ``derivation``."""
    plan = initial_plan(graph)
    body = plan_dot(plan, "s0_", f"{graph.name}: initial plan")
    for i, step in enumerate(derivation.steps, 1):
        plan = RULES[step.rule].apply(plan, tuple(step.site))
        body += plan_dot(plan, f"s{i}_", f"step {i}: {step.rule} at {list(step.site)}")
    head = ['digraph derivation {', 'rankdir=TB; compound=true; node [fontname="Helvetica"];',
            f'label="{graph.name} {derivation.id}"; labelloc=t;']
    return "\n".join(head + body + ["}"]) + "\n"


def render(dot: str, out: Path) -> Path:
    """Render DOT to ``out`` (format from its suffix: .png, .svg, .pdf; .dot writes the text).

    Raises:
        RuntimeError: the graphviz package or its ``dot`` program is missing (the .dot text
            is still written next to ``out``).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".dot":
        out.write_text(dot)
        return out
    try:
        import graphviz
        data = graphviz.Source(dot).pipe(format=out.suffix.lstrip(".") or "png")
    except Exception as e:  # noqa: BLE001 - no graphviz package, or no `dot` program
        out.with_suffix(".dot").write_text(dot)
        raise RuntimeError(f"could not render with graphviz ({type(e).__name__}); wrote "
                           f"{out.with_suffix('.dot')} instead (pip install graphviz; "
                           "apt-get install graphviz)") from None
    out.write_bytes(data)
    return out
