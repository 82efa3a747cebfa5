"""The README and ``docs/`` say only what the repository has: every relative link leads to a file (and its anchor to
a heading), every project path named in backticks exists, every ``make`` target is the Makefile's, every
``cdcflow`` command and option is the CLI's, and the README stays a front door (at most 250 lines)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import typer

from cdc_core.cli.main import build_app

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250

# A backticked token that starts like this names a file or directory of the repository.
PROJECT_PATH = re.compile(r"^(?:cdc_core|spark_jobs|plugins|dags|tests|scripts|docs|deploy)/[\w./-]*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
MAKE = re.compile(r"(?<![\w-])make ([a-z][\w-]*)")
MAKE_TARGET = re.compile(r"^([\w-]+):", re.MULTILINE)
# where a shell line's command ends: what follows is another command or a comment
COMMAND_END = {"|", "||", "&&", ";", "#", ">", "<"}


@dataclass(frozen=True)
class Doc:
    path: Path
    prose: str  # the text outside fenced code blocks
    code_lines: tuple[str, ...]  # the lines inside them

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))

    def inline_code(self) -> list[str]:
        return [" ".join(m.group(2).split()) for m in INLINE_CODE.finditer(self.prose)]

    def code(self) -> list[str]:
        """Every piece of code: the inline spans and the fenced blocks' lines."""
        return self.inline_code() + list(self.code_lines)


def read_doc(path: Path) -> Doc:
    prose, code, fenced = [], [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            prose.append(line)
    return Doc(path, "\n".join(prose), tuple(code))


@cache
def docs() -> tuple[Doc, ...]:
    return tuple(read_doc(p) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, code marks and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Doc) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", doc.prose, re.MULTILINE)}


def test_the_docs_are_there() -> None:
    names = {d.name for d in docs()}
    chapters = ["architecture", "data-quality", "delta-writers", "deployment", "operations", "tidb", "types",
                "benchmarks"]
    assert {"README.md", *(f"docs/{c}.md" for c in chapters)} <= names


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; chapters belong in docs/"


def test_every_relative_link_resolves() -> None:
    by_path = {d.path: d for d in docs()}
    broken = []
    for doc in docs():
        for target in LINK.findall(doc.prose):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.path.parent / file_part).resolve() if file_part else doc.path
            if not dest.is_relative_to(ROOT):
                broken.append(f"{doc.name}: {target} leads out of the repository")
            elif not dest.exists():
                broken.append(f"{doc.name}: {target} does not exist")
            elif anchor:
                linked = by_path.get(dest) or read_doc(dest)
                if anchor not in anchors(linked):
                    broken.append(f"{doc.name}: {target} has no heading #{anchor}")
    assert not broken, "\n".join(broken)


def test_nothing_points_outside_the_repository() -> None:
    outside = [f"{d.name}: ../shared" for d in docs() if "../shared" in d.prose + "\n".join(d.code_lines)]
    assert not outside, "\n".join(outside)


def test_every_project_path_exists() -> None:
    missing = []
    for doc in docs():
        for span in doc.inline_code():
            for token in span.split():
                path = token.split("::")[0].rstrip(",.;:)")
                if PROJECT_PATH.match(path) and not (ROOT / path).exists():
                    missing.append(f"{doc.name}: {path}")
    assert not missing, "paths that do not exist:\n" + "\n".join(sorted(set(missing)))


def test_every_make_target_exists() -> None:
    targets = set(MAKE_TARGET.findall((ROOT / "Makefile").read_text()))
    unknown = [f"{d.name}: make {t}" for d in docs() for code in d.code() for t in MAKE.findall(code)
               if t not in targets]
    assert not unknown, "\n".join(unknown)


@cache
def cli() -> Any:
    """The ``cdcflow`` command as click builds it (typer vendors its own click: a group is told by its
    ``commands``)."""
    command = typer.main.get_command(build_app())
    assert is_group(command)
    return command


def is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def command_errors(line: str) -> list[str]:
    """What is wrong with a ``cdcflow ...`` line: a subcommand the CLI lacks, or an option its command lacks.
    ``(a | b)`` lists subcommands, ``...`` stands for any arguments, ``--name*`` for options starting so."""
    tokens = line.split()[1:]
    command = cli()
    errors: list[str] = []
    i = 0
    while is_group(command) and i < len(tokens) and tokens[i] not in COMMAND_END | {"..."}:
        token = tokens[i]
        if token.startswith("("):  # alternatives: the line names several subcommands of this group
            alternatives = []
            while i < len(tokens):
                alternatives += [t.strip("()") for t in tokens[i].split("|") if t.strip("()")]
                if tokens[i].endswith(")"):
                    break
                i += 1
            group = command.name or "cdcflow"
            errors += [f"no command {a!r} in {group}" for a in alternatives if a not in command.commands]
            return errors
        if token.startswith("-"):
            break
        if token not in command.commands:
            return [f"no command {token!r} in {command.name or 'cdcflow'}"]
        command = command.commands[token]
        i += 1
    options = {opt for param in command.params for opt in getattr(param, "opts", [])} | {"--help"}
    for token in tokens[i:]:
        if token in COMMAND_END:
            break
        for name in re.findall(r"--[\w-]+\*?", token):
            known = any(o.startswith(name[:-1]) for o in options) if name.endswith("*") else name in options
            if not known:
                errors.append(f"{command.name} has no option {name}")
    return errors


def test_every_cdcflow_command_exists() -> None:
    wrong = []
    for doc in docs():
        for code in doc.code():
            line = code.strip().removeprefix("$ ")
            if line.startswith("cdcflow "):
                wrong += [f"{doc.name}: `{line}`: {e}" for e in command_errors(line)]
    assert not wrong, "\n".join(wrong)


def test_the_command_check_catches_what_the_cli_lacks() -> None:
    assert command_errors("cdcflow changefeed run ID --until-ts now --full-check") == []
    assert command_errors("cdcflow upstream fault (split | merge) ...") == []
    assert command_errors("cdcflow upstream start --catalog-* --tls-ca/--tls-key") == []
    assert command_errors("cdcflow tso now | xargs cdcflow tso decode") == []
    assert command_errors("cdcflow replay start ID") == ["no command 'replay' in cdcflow"]
    assert command_errors("cdcflow upstream fault (split | melt)") == ["no command 'melt' in fault"]
    assert command_errors("cdcflow changefeed run ID --until") == ["run has no option --until"]


def test_slugs_are_githubs() -> None:
    assert slug("Airflow's metadata DB") == "airflows-metadata-db"
    assert slug("Filters (seed 003)") == "filters-seed-003"
    assert slug("At scale: `make bench-scale`") == "at-scale-make-bench-scale"
