"""No import circle among the project's modules, function-level imports included, and no arrow the layout forbids
(ARCHITECTURE.md section 2: the engine imports neither the jobs nor Airflow's side; the jobs import the engine; the
embedded upstream and the puller or the client meet only on the wire; the Spark stages import the stages before
them, and no module imports a job). The graph's own code (``testkit.import_graph``) is tested on small packages
written for the test."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cdc_core.changefeed.spark_engine import JOBS
from testkit import import_graph
from testkit.import_graph import ImportGraph

ROOT = Path(__file__).resolve().parents[1]
# the rooms (the top folder of a module's file) each room must not import
FORBIDDEN = {"cdc_core": {"spark_jobs", "plugins", "dags"}, "spark_jobs": {"plugins", "dags"},
             "plugins": {"spark_jobs"}}  # the plugin schedules; the engine runs the jobs
# packages that meet only on the wire: (importer, imported) pairs that are an error
APART = (("cdc_core.upstream", "cdc_core.client"), ("cdc_core.upstream", "cdc_core.puller"),
         ("cdc_core.puller", "cdc_core.upstream"))
# spark_jobs' stages in the order a window goes through them: each may import those before it
STAGES = ("normalize", "load", "checks")


@pytest.fixture(scope="module")
def project() -> ImportGraph:
    return import_graph.build(ROOT)


def room(graph: ImportGraph, module: str) -> str:
    return graph.modules[module].relative_to(ROOT).parts[0]


def test_the_project_has_no_import_circle(project: ImportGraph) -> None:
    graph = project
    assert len(graph.modules) > 200  # the walk found the tree
    circles = [import_graph.describe(c) for c in graph.circles()]
    assert not circles, "import circles (cut each at one of its arrows):\n" + "\n".join(circles)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_room_imports_one_it_must_not(project: ImportGraph) -> None:
    graph = project
    wrong = [str(a) for a in graph.arrows.values()
             if room(graph, a.target) in FORBIDDEN.get(room(graph, a.source), ())
             or any(within(a.source, s) and within(a.target, t) for s, t in APART)]
    assert not wrong, "imports against the layout:\n" + "\n".join(wrong)


def stage(module: str) -> int | None:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 2 and parts[0] == "spark_jobs" and parts[1] in STAGES else None


def later_stage(source: str, target: str) -> bool:
    s, t = stage(source), stage(target)
    return s is not None and t is not None and t > s


def test_a_spark_stage_imports_no_later_stage_and_no_module_imports_a_job(project: ImportGraph) -> None:
    """The jobs at spark_jobs' top (the engine's entry points outside the stages) are run by name only
    (``spark_engine.JOBS``, ``job_server``): what two of them share lives below them."""
    graph = project
    jobs = {entry.partition(":")[0] for entry in JOBS.values()} - {m for m in graph.modules if stage(m) is not None}
    assert jobs <= set(graph.modules) and "spark_jobs.apply_window" in jobs
    wrong = [str(a) for a in graph.arrows.values() if a.target in jobs or later_stage(a.source, a.target)]
    assert not wrong, "imports against spark_jobs' stages:\n" + "\n".join(wrong)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_circle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import g\n",
        "pkg/b.py": "def g():\n    import pkg.c\n",
        "pkg/c.py": "import os\n\n\nclass C:\n    def m(self):\n        from pkg import a\n",
    })
    graph = import_graph.build(tmp_path, ((".", "pkg"),))
    assert graph.components() == [["pkg.a", "pkg.b", "pkg.c"]]
    (circle,) = graph.circles()
    assert [(a.source, a.target, a.line) for a in circle] == [("pkg.a", "pkg.b", 1), ("pkg.b", "pkg.c", 2),
                                                               ("pkg.c", "pkg.a", 6)]
    assert import_graph.describe(circle).startswith("pkg.a -> pkg.b -> pkg.c -> pkg.a\n")


def test_a_type_checking_import_is_no_arrow_but_its_else_is(tmp_path: Path) -> None:
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg.b\n",
        "pkg/b.py": """\
            import typing
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg.a import A
            if typing.TYPE_CHECKING:
                import pkg.a
            else:
                import pkg.c
            """,
        "pkg/c.py": "",
    })
    graph = import_graph.build(tmp_path, ((".", "pkg"),))
    assert sorted(graph.arrows) == [("pkg.a", "pkg.b"), ("pkg.b", "pkg.c")]
    assert graph.components() == []


def test_relative_imports_resolve_to_modules_and_packages(tmp_path: Path) -> None:
    write(tmp_path, {
        "pkg/__init__.py": "from .sub import leaf\n",
        "pkg/top.py": "from . import sub\nfrom .sub.leaf import f\n",
        "pkg/sub/__init__.py": "from ..top import x\n",
        "pkg/sub/leaf.py": "from . import other\nfrom .. import top\nfrom .other import name\n",
        "pkg/sub/other.py": "import importlib\n\nimportlib.import_module('pkg.top')\n",
    })
    graph = import_graph.build(tmp_path, ((".", "pkg"),))
    assert sorted(graph.arrows) == [
        ("pkg", "pkg.sub.leaf"),  # `from .sub import leaf`: the submodule
        ("pkg.sub", "pkg.top"),  # a name defined in the module
        ("pkg.sub.leaf", "pkg.sub.other"), ("pkg.sub.leaf", "pkg.top"),
        ("pkg.sub.other", "pkg.top"),  # importlib with a literal name
        ("pkg.top", "pkg.sub"), ("pkg.top", "pkg.sub.leaf"),
    ]
    assert graph.components() == [["pkg.sub", "pkg.sub.leaf", "pkg.sub.other", "pkg.top"]]
